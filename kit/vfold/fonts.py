"""Fonts for V-Fold page rendering (POINTS-Seeker Appendix B.2, Table 8: ``font-path Verdana.ttf``).

**The Verdana substitution.** Table 8 (taken from Glyph) renders with Verdana, a proprietary Microsoft
font that may not be redistributed, so the kit renders with **DejaVu Sans** (free: Bitstream Vera
licence + public-domain additions). DejaVu Sans is derived from Bitstream Vera Sans; Vera and Verdana
are both wide, large-x-height sans-serif designs made for legibility on screens at small pixel sizes,
so glyph shapes and the number of characters per 9-px line are of the same order. It is **not
metric-compatible**: advance widths differ glyph by glyph (no free metric clone of Verdana exists;
the Liberation/Croscore fonts clone Arial, Times and Courier, not Verdana), so the same text breaks
into lines at other places and a page holds a somewhat different number of characters than a Glyph
page set in Verdana. Token figures measured with this kit are therefore figures *for DejaVu Sans at
Table 8's geometry*, not a replication of Glyph's Verdana pages.

Where the font comes from, in order:

1. ``MMSEARCH_KIT_FONT`` (a TrueType/OpenType file) or an explicit ``font_path``;
2. the DejaVu Sans that **matplotlib** ships inside its wheel (``mpl-data/fonts/ttf``; located without
   importing matplotlib) — the PyPI dependency that makes a fresh machine work;
3. the operating system's DejaVu Sans (Debian/Ubuntu ``fonts-dejavu-core``, Fedora, macOS Homebrew).

Nothing found raises :class:`FontNotFoundError` naming these options; there is no silent fallback
to a different design.

**Fallback fonts** draw characters DejaVu Sans lacks (CJK above all): ``MMSEARCH_KIT_FALLBACK_FONTS``
(paths separated by ``os.pathsep``), then system fonts found by name (Noto Sans CJK, Source Han Sans,
WenQuanYi, Droid Sans Fallback, Noto Sans for other scripts, GNU Unifont), then matplotlib's STIX
(symbols). Coverage is read from each font's cmap with fontTools, lazily. A character no font covers
is drawn as the primary font's missing-glyph box and *reported* (``missing_glyphs``), never dropped
silently. Install e.g. ``fonts-noto-cjk`` (Debian) or set the variable to render CJK.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from PIL import ImageFont

FONT_ENV = "MMSEARCH_KIT_FONT"
FALLBACK_ENV = "MMSEARCH_KIT_FALLBACK_FONTS"

_SYSTEM_DEJAVU = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/local/share/fonts/DejaVuSans.ttf",
    "/opt/homebrew/share/fonts/DejaVuSans.ttf",
    "/Library/Fonts/DejaVuSans.ttf",
)
_FONT_DIRS = ("/usr/share/fonts", "/usr/local/share/fonts", "~/.local/share/fonts", "~/.fonts", "/Library/Fonts",
              "/System/Library/Fonts")
# Regular faces of free fonts that cover scripts DejaVu Sans lacks, best first (file-name prefixes).
_FALLBACK_NAMES = (
    "NotoSansCJK-Regular", "NotoSansCJKsc-Regular", "NotoSansCJKjp-Regular", "NotoSansSC-Regular",
    "NotoSansJP-Regular", "NotoSansKR-Regular", "NotoSansTC-Regular", "SourceHanSans-Regular",
    "SourceHanSansSC-Regular", "wqy-microhei", "wqy-zenhei", "DroidSansFallbackFull", "DroidSansFallback",
    "NotoSansArabic-Regular", "NotoSansHebrew-Regular", "NotoSansDevanagari-Regular", "NotoSansBengali-Regular",
    "NotoSansTamil-Regular", "NotoSansThai-Regular", "NotoSansKhmer-Regular", "NotoSansEthiopic-Regular",
    "NotoSansArmenian-Regular", "NotoSansGeorgian-Regular", "NotoSans-Regular", "unifont",
)
_FONT_SUFFIXES = (".ttf", ".otf", ".ttc", ".otc")


class FontNotFoundError(FileNotFoundError):
    """No usable primary font (DejaVu Sans or ``MMSEARCH_KIT_FONT``) was found."""


@dataclass(frozen=True)
class FontFace:
    """One font file (``index`` selects a face inside a .ttc/.otc collection)."""

    path: str
    index: int = 0

    @property
    def name(self) -> str:
        return Path(self.path).stem + (f"#{self.index}" if self.index else "")


def _matplotlib_ttf_dir() -> Path | None:
    spec = importlib.util.find_spec("matplotlib")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "mpl-data" / "fonts" / "ttf"
    return d if d.is_dir() else None


def primary_font_path(explicit: str | os.PathLike | None = None) -> Path:
    """Path of the primary (Verdana-substitute) font: explicit > ``$MMSEARCH_KIT_FONT`` > matplotlib's
    DejaVu Sans > system DejaVu Sans.

    Raises:
        FontNotFoundError: an explicit/env path that does not exist, or no DejaVu Sans anywhere.
    """
    for label, value in (("font_path", explicit), (FONT_ENV, os.environ.get(FONT_ENV))):
        if value:
            p = Path(value).expanduser()
            if not p.is_file():
                raise FontNotFoundError(f"{label} {str(p)!r} is not a font file")
            return p
    mpl = _matplotlib_ttf_dir()
    if mpl is not None and (mpl / "DejaVuSans.ttf").is_file():
        return mpl / "DejaVuSans.ttf"
    for c in _SYSTEM_DEJAVU:
        if Path(c).is_file():
            return Path(c)
    raise FontNotFoundError(
        "DejaVu Sans (the kit's free substitute for Table 8's Verdana) was not found: `pip install matplotlib` "
        f"(it ships DejaVu Sans), install the OS package fonts-dejavu-core, or set {FONT_ENV} to a .ttf file")


@functools.lru_cache(maxsize=1)
def _system_fallbacks() -> tuple[FontFace, ...]:
    found: dict[str, Path] = {}
    for d in _FONT_DIRS:
        root = Path(d).expanduser()
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*")):
            if p.suffix.lower() not in _FONT_SUFFIXES:
                continue
            for name in _FALLBACK_NAMES:
                if p.name.lower().startswith(name.lower()) and name not in found:
                    found[name] = p
    return tuple(FontFace(str(found[n])) for n in _FALLBACK_NAMES if n in found)


def fallback_faces(explicit: tuple[str, ...] | list[str] | None = None) -> tuple[FontFace, ...]:
    """Fallback fonts in priority order: explicit paths (or ``$MMSEARCH_KIT_FALLBACK_FONTS``), system
    fonts covering CJK and other scripts, then matplotlib's STIX (symbols).

    Raises:
        FontNotFoundError: an explicit/env path that does not exist.
    """
    faces: list[FontFace] = []
    given = list(explicit) if explicit is not None else [p for p in os.environ.get(FALLBACK_ENV, "").split(os.pathsep) if p]
    for g in given:
        p = Path(g).expanduser()
        if not p.is_file():
            raise FontNotFoundError(f"fallback font {str(p)!r} is not a font file")
        faces.append(FontFace(str(p)))
    if explicit is None:
        faces.extend(_system_fallbacks())
        mpl = _matplotlib_ttf_dir()
        if mpl is not None and (mpl / "STIXGeneral.ttf").is_file():
            faces.append(FontFace(str(mpl / "STIXGeneral.ttf")))
    seen, out = set(), []
    for f in faces:
        if f not in seen:
            seen.add(f)
            out.append(f)
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _cmap(face: FontFace) -> frozenset[int]:
    from fontTools.ttLib import TTFont  # lazy: only needed when coverage is asked

    font = TTFont(face.path, fontNumber=face.index, lazy=True)
    try:
        return frozenset(font.getBestCmap() or {})
    finally:
        font.close()


class FontChain:
    """A primary face plus fallbacks; picks, per character, the first face whose cmap covers it.

    Args:
        faces: primary first.
        size_px: font size in pixels (Table 8: 9 pt at 72 dpi = 9 px).

    ``face_for(ch)`` returns the face index, or ``-1`` when no face covers the character (the caller
    draws it with the primary face's missing-glyph box and reports it). Fallback cmaps are read only
    when a character is missing from the primary face.
    """

    def __init__(self, faces: list[FontFace] | tuple[FontFace, ...], size_px: float):
        if not faces:
            raise ValueError("FontChain needs at least one face")
        self.faces = tuple(faces)
        self.size_px = size_px
        self._primary = _cmap(self.faces[0])
        self._fonts: dict[tuple[int, str], ImageFont.FreeTypeFont] = {}
        self._lock = threading.Lock()
        self._memo: dict[int, int] = {}

    def face_for(self, cp: int) -> int:
        """Index of the first face covering code point ``cp``, or -1."""
        hit = self._memo.get(cp)
        if hit is not None:
            return hit
        idx = -1
        if cp in self._primary:
            idx = 0
        else:
            for i, f in enumerate(self.faces[1:], 1):
                try:
                    if cp in _cmap(f):
                        idx = i
                        break
                except Exception:  # an unreadable fallback file must not stop rendering
                    continue
        self._memo[cp] = idx
        return idx

    def font(self, i: int, engine: str = "basic") -> ImageFont.FreeTypeFont:
        """Pillow font of face ``i`` (``engine``: ``"basic"`` glyph-by-glyph, ``"raqm"`` bidi/shaping)."""
        key = (i, engine)
        f = self._fonts.get(key)
        if f is None:
            with self._lock:
                f = self._fonts.get(key)
                if f is None:
                    layout = ImageFont.Layout.RAQM if engine == "raqm" else ImageFont.Layout.BASIC
                    face = self.faces[i]
                    f = ImageFont.truetype(face.path, self.size_px, index=face.index, layout_engine=layout)
                    self._fonts[key] = f
        return f


def default_chain(size_px: float, font_path: str | None = None, fallbacks: tuple[str, ...] | None = None) -> FontChain:
    """The primary font (:func:`primary_font_path`) followed by :func:`fallback_faces`."""
    return FontChain([FontFace(str(primary_font_path(font_path))), *fallback_faces(fallbacks)], size_px)
