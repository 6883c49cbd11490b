"""Text → page images for V-Fold (POINTS-Seeker §3.3 ``F_render``; Appendix B.2, Table 8).

:class:`Renderer` lays text out on pages with Table 8's geometry — 595×842 page at 72 dpi, margins
10, 9 pt font, line height 10, black on white, left aligned, no indents/borders, auto-cropped width
and last page — and rasterizes them to grayscale PNG. The font is DejaVu Sans (the free substitute
for Verdana; see :mod:`kit.vfold.fonts`).

**Layout of line breaks.** Table 8's Glyph layout (``newline="break"``, preset :data:`TABLE8_CONFIG`)
starts a new line at every newline. Web observations are full of short lines (list items, table and
infobox rows), which leave most of each line white: on the Wikipedia articles of the shared data that
layout gives only about 1.9× fewer Qwen2-VL vision tokens than Qwen text tokens. The default
``newline="mark"`` flows short lines together and draws each newline as a visible mark (``↵``), so
pages are dense: about 3.3× fewer vision than text tokens on the same articles (4.1× with
``paragraph_break=False``; measured by ``benchmarks/bench_vfold.py``); a blank line (paragraph
break) still starts a new line. Every
character is kept: the layout model (:class:`Layout`) records, for every line, the source span and
the exact glyph string drawn for it, and :meth:`Layout.reconstruct` recovers the input from the drawn
glyphs.

**Display of characters.** Printable characters are drawn as themselves. Tabs advance by
``tab_size`` spaces. Control characters are drawn in caret notation (``^@``, ``^A``, … ``^?``), C1
controls, unpaired surrogates and non-characters as ``\\xHH`` / ``\\uHHHH`` escapes: binary junk is
visible, never silently dropped and never sent to the rasterizer raw. Words longer than a line (URLs,
CJK runs) are split across lines, preferably after ``/ - ? & = _ . , ;``. Right-to-left and
complex-shaping lines (Arabic, Hebrew, Indic, combining marks) are drawn with Pillow's raqm layout
(bidi + shaping); everything else goes through a glyph atlas. Characters no font covers are drawn as
the missing-glyph box and counted in :attr:`RenderResult.missing_glyphs`. Output is deterministic:
the same text and config give the same pixels and the same PNG bytes (for a given font file and
Pillow/FreeType build; ``RenderResult.fonts_used`` names the faces used).

**Speed.** Pillow's ``ImageDraw.text`` rasterizes every glyph on every call (~35 ms per dense page
here). The renderer instead rasterizes each (font, character) once into an atlas with Pillow itself
and composes pages with one vectorized ``numpy.maximum.at`` scatter — the same max-composition
FreeType output gets inside Pillow, at integer pen positions (Pillow's basic layout uses hinted,
integer advances at this size).
"""

from __future__ import annotations

import math
import re
import struct
import threading
import unicodedata
import zlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from PIL import Image, ImageColor, ImageDraw, features
from pydantic import BaseModel, ConfigDict, Field, field_validator

from kit.vfold.fonts import FontChain, default_chain

NEWLINE_MARK = "\u21b5"  # ↵
_BREAK_AFTER = set("/-?&=_.,;:|)]}")
_TOKEN = re.compile(r"\n|[^ \t\n]+[ \t]*|[ \t]+")
_HAS_RAQM = features.check("raqm")


class RenderError(ValueError):
    """Bad render input or configuration (e.g. text that is not a ``str``)."""


class RenderConfig(BaseModel):
    """Rendering parameters. Defaults are Table 8's (POINTS-Seeker Appendix B.2, from Glyph) except
    ``newline`` (see the module docstring); :data:`TABLE8_CONFIG` is the exact Glyph layout.

    Units: points for page size, margins, font size and line height (1 pt = ``dpi / 72`` pixels;
    72 dpi gives pixels = points). ``max_pages`` caps one rendering (longer text is truncated and
    reported). ``png_compress_level``: zlib level of the PNG output (0–9; pixels are identical at
    every level).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    page_width: int = 595
    page_height: int = 842
    dpi: int = 72
    margin_x: int = 10
    margin_y: int = 10
    font_size: float = 9
    line_height: float = 10
    font_color: str = "#000000"
    page_bg_color: str = "#FFFFFF"
    alignment: Literal["left"] = "left"
    horizontal_scale: float = 1.0
    first_line_indent: int = 0
    left_indent: int = 0
    right_indent: int = 0
    space_before: int = 0
    space_after: int = 0
    border_width: int = 0
    border_padding: int = 0
    auto_crop_width: bool = True
    auto_crop_last_page: bool = True
    # kit extensions
    newline: Literal["mark", "break"] = "mark"
    newline_mark: str = NEWLINE_MARK
    paragraph_break: bool = True
    tab_size: int = Field(default=4, ge=1)
    max_pages: int = Field(default=16, ge=1)
    font_path: str | None = None
    fallback_fonts: tuple[str, ...] | None = None
    png_compress_level: int = Field(default=1, ge=0, le=9)

    @field_validator("horizontal_scale")
    @classmethod
    def _scale(cls, v: float) -> float:
        if v != 1.0:
            raise ValueError("only horizontal_scale=1.0 (Table 8) is supported")
        return v

    @field_validator("first_line_indent", "left_indent", "right_indent", "space_before", "space_after",
                     "border_width", "border_padding")
    @classmethod
    def _zero(cls, v: int) -> int:
        if v != 0:
            raise ValueError("indents, paragraph spacing and borders are 0 in Table 8; other values are not supported")
        return v

    @field_validator("newline_mark")
    @classmethod
    def _mark(cls, v: str) -> str:
        if len(v) != 1 or v.isspace() or unicodedata.category(v)[0] == "C":
            raise ValueError("newline_mark must be one visible character")
        return v

    def pixels(self) -> dict[str, int]:
        """Geometry in pixels: page width/height, margins, font size, line height, content width and
        lines per page."""
        s = self.dpi / 72.0
        w, h = round(self.page_width * s), round(self.page_height * s)
        mx, my = round(self.margin_x * s), round(self.margin_y * s)
        lh = max(1, round(self.line_height * s))
        cw, ch = w - 2 * mx, h - 2 * my
        if cw <= 0 or ch < lh:
            raise ValueError(f"margins leave no room on a {w}x{h} page")
        return {"width": w, "height": h, "margin_x": mx, "margin_y": my, "font_px": self.font_size * s,
                "line_height": lh, "content_width": cw, "lines_per_page": ch // lh}


TABLE8_CONFIG = RenderConfig(newline="break", paragraph_break=False)
"""Table 8 exactly as Glyph lays it out: every newline starts a new line."""


def _display_tables() -> tuple[dict[int, str], dict[int, str]]:
    base: dict[int, str] = {}
    for c in range(0x20):
        if c not in (0x09, 0x0A):
            base[c] = "^" + chr(c + 0x40)
    base[0x7F] = "^?"
    for c in range(0x80, 0xA0):
        base[c] = f"\\x{c:02x}"
    for c in range(0xD800, 0xE000):
        base[c] = f"\\u{c:04x}"
    for c in list(range(0xFDD0, 0xFDF0)) + [p * 0x10000 + 0xFFFE for p in range(17)] + [p * 0x10000 + 0xFFFF for p in range(17)]:
        # fixed-width escapes (\uHHHH in the BMP, \UHHHHHHHH beyond) so a following hex letter never
        # reads as part of the escape
        base[c] = f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"
    mark = dict(base)
    brk = dict(base)
    brk[0x0A] = ""
    return mark, brk


_MARK_TABLE, _BREAK_TABLE = _display_tables()


def _is_complex(ch: str) -> bool:
    """True for characters that need bidi reordering or shaping (drawn with raqm)."""
    if unicodedata.bidirectional(ch) in ("R", "AL", "AN"):
        return True
    if unicodedata.category(ch) in ("Mn", "Mc", "Me"):
        return True
    cp = ord(ch)
    # Indic, Thai/Lao, Tibetan, Myanmar, Khmer, Mongolian: scripts whose glyphs are reordered/shaped
    return 0x0900 <= cp <= 0x0DFF or 0x0E00 <= cp <= 0x0EFF or 0x0F00 <= cp <= 0x109F or 0x1780 <= cp <= 0x18AF


@dataclass
class Line:
    """One laid-out line: source span ``[start, end)``, the glyph string drawn for it (the display
    form of ``text[start:end]``), its width in pixels (trailing spaces that hang in the margin
    excluded), and whether it is drawn with the raqm (bidi/shaping) path."""

    start: int
    end: int
    drawn: str
    width: int
    complex: bool = False


@dataclass
class PageLayout:
    lines: list[Line]
    width: int
    height: int


@dataclass
class Layout:
    """Pages of lines covering ``text[0:end]``; ``end < len(text)`` means truncated at ``max_pages``."""

    text: str
    pages: list[PageLayout]
    end: int
    newline: str
    mark: str

    @property
    def truncated(self) -> bool:
        return self.end < len(self.text)

    def lines(self) -> list[Line]:
        return [ln for p in self.pages for ln in p.lines]

    def glyphs(self) -> str:
        """All drawn glyph strings, lines joined by ``\\n`` (what the pages show, in reading order)."""
        return "\n".join(ln.drawn for ln in self.lines())

    def reconstruct(self) -> str:
        """Rebuild the laid-out text from the drawn glyph strings alone (the inverse of the display
        mapping): ``↵`` → newline, caret and ``\\x``/``\\u`` escapes → the character, and a line
        break that is not a soft wrap → newline.

        Exact when the input does not itself contain the mark character, ``^`` followed by an
        escape letter, or a backslash escape (those are ambiguous on the page by nature); the source
        spans in :attr:`pages` are exact in all cases.
        """
        out: list[str] = []
        for ln in self.lines():
            out.append(_undisplay(ln.drawn, self.mark if self.newline == "mark" else None))
            if self.newline == "break" and self.text[ln.end - 1:ln.end] == "\n" and ln.end > ln.start:
                out.append("\n")
        return "".join(out)


_ESCAPE = re.compile(r"\^([@A-Z\[\\\]\^_?])|\\x([0-9a-f]{2})|\\u([0-9a-f]{4})|\\U([0-9a-f]{8})")


def _undisplay(s: str, mark: str | None) -> str:
    def sub(m: re.Match) -> str:
        if m.group(1):
            return "\x7f" if m.group(1) == "?" else chr(ord(m.group(1)) - 0x40)
        return chr(int(m.group(2) or m.group(3) or m.group(4), 16))

    s = _ESCAPE.sub(sub, s)
    return s.replace(mark, "\n") if mark else s


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode_png(im: Image.Image, level: int = 1) -> bytes:
    """PNG bytes of an 8-bit ``L`` or ``RGB`` image, with a 72-dpi pHYs chunk.

    Written here with ``zlib`` because Pillow's PNG encoder spends most of its time choosing row
    filters (about 13 ms per 595x842 page against 3.6 ms here at zlib level 1 with filter 0, and
    within 3% of Pillow's size for text pages): PNG encoding was the largest cost of rendering.
    Pixels round-trip exactly (tests decode the bytes with Pillow).

    Raises:
        RenderError: another image mode or a level outside 0-9.
    """
    if im.mode not in ("L", "RGB"):
        raise RenderError(f"encode_png supports L and RGB images, got {im.mode}")
    if not 0 <= level <= 9:
        raise RenderError(f"zlib level must be 0-9, got {level}")
    a = np.asarray(im)
    h, w = a.shape[:2]
    rows = a.reshape(h, -1)
    raw = np.empty((h, rows.shape[1] + 1), np.uint8)
    raw[:, 0] = 0  # filter type 0 (none) on every row
    raw[:, 1:] = rows
    color = 0 if im.mode == "L" else 2
    ppm = round(72 / 0.0254)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + _chunk(b"pHYs", struct.pack(">IIB", ppm, ppm, 1)) + _chunk(b"IDAT", zlib.compress(raw.tobytes(), level))
            + _chunk(b"IEND", b""))


@dataclass
class RenderResult:
    """Pages of one rendering plus what happened to the text.

    ``pages``: PIL images (mode ``L`` for black on white, else ``RGB``); ``layout``: the layout model;
    ``chars``: input length; ``rendered_chars``: characters laid out (< ``chars`` when truncated at
    ``max_pages``); ``missing_glyphs``: characters no font covers (drawn as boxes), with a sample;
    ``escaped``: control/invalid characters drawn as escapes; ``complex_lines``: lines drawn with raqm.
    """

    pages: list[Image.Image]
    layout: Layout
    chars: int
    rendered_chars: int
    missing_glyphs: int = 0
    missing_sample: str = ""
    escaped: int = 0
    complex_lines: int = 0
    fonts_used: list[str] = field(default_factory=list)
    _png: list[bytes] | None = None
    _compress: int = 1

    @property
    def truncated(self) -> bool:
        return self.rendered_chars < self.chars

    @property
    def lossless(self) -> bool:
        """Every character is on the pages with a real glyph (not truncated, nothing missing)."""
        return not self.truncated and self.missing_glyphs == 0

    def page_sizes(self) -> list[tuple[int, int]]:
        """``(width, height)`` in pixels of every page."""
        return [p.size for p in self.pages]

    def png(self) -> list[bytes]:
        """PNG bytes of every page (deterministic; computed once; see :func:`encode_png`)."""
        if self._png is None:
            self._png = [encode_png(p, self._compress) for p in self.pages]
        return self._png

    def vision_tokens(self, counter) -> int:
        """Vision tokens of all pages under ``counter.count_image`` (Qwen smart resize), without the
        two framing tokens per image."""
        return sum(counter.count_image(w, h) for w, h in self.page_sizes())

    def report(self) -> dict:
        """JSON-able summary (for events, tables and manifests)."""
        return {"chars": self.chars, "rendered_chars": self.rendered_chars, "truncated": self.truncated,
                "pages": len(self.pages), "page_sizes": self.page_sizes(), "missing_glyphs": self.missing_glyphs,
                "missing_sample": self.missing_sample, "escaped": self.escaped, "complex_lines": self.complex_lines,
                "fonts_used": self.fonts_used}


class Renderer:
    """Renders text into page images (see the module docstring).

    Args:
        config: :class:`RenderConfig` (default: Table 8 geometry with flowed short lines).
        chain: font chain (default: DejaVu Sans + discovered fallbacks, :func:`kit.vfold.fonts.default_chain`).

    Raises:
        kit.vfold.fonts.FontNotFoundError: no primary font.

    One renderer may be shared by many episodes; it is thread-safe (the glyph atlas grows under a
    lock). ``render`` costs ~5–10 ms per dense page on one core.
    """

    def __init__(self, config: RenderConfig | None = None, chain: FontChain | None = None):
        self.config = config or RenderConfig()
        self.px = self.config.pixels()
        self.chain = chain or default_chain(self.px["font_px"], self.config.font_path, self.config.fallback_fonts)
        self._table = _MARK_TABLE if self.config.newline == "mark" else _BREAK_TABLE
        self._fg = ImageColor.getrgb(self.config.font_color)
        self._bg = ImageColor.getrgb(self.config.page_bg_color)
        basic = self.chain.font(0)
        self.ascent = basic.getmetrics()[0]
        self._pad = int(math.ceil(self.px["font_px"] * 2)) + 4
        self._stride = self.px["width"] + 2 * self._pad
        self._lock = threading.Lock()
        # glyph atlas: gid -> advance, ink offsets (flat, relative to pen/baseline) and values
        self._gid: dict[str, int] = {}
        self._gid_face: list[int] = []
        self._adv: list[int] = []
        self._offs: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._atlas_dirty = True
        self._lut = np.full(0x110000, -1, np.int32)
        self._cls: dict[str, tuple[int, bool]] = {}  # char -> (advance, complex)
        self._word_w: dict[str, tuple[int, bool]] = {}
        self._tok: dict[str, tuple[str, int, int, bool]] = {}
        space = self._char_info(" ")[0]
        self._tab_adv = space * self.config.tab_size

    # ------------------------------------------------------------------ glyph atlas
    def _glyph(self, ch: str) -> int:
        gid = self._gid.get(ch)
        if gid is not None:
            return gid
        with self._lock:
            gid = self._gid.get(ch)
            if gid is not None:
                return gid
            if ch == "\t":
                face, adv, offs, vals = 0, self._tab_adv, np.zeros(0, np.int64), np.zeros(0, np.uint8)
            elif ch == "\n":
                face, adv, offs, vals = 0, 0, np.zeros(0, np.int64), np.zeros(0, np.uint8)
            else:
                face = max(0, self.chain.face_for(ord(ch)))
                font = self.chain.font(face)
                adv = int(round(font.getlength(ch)))
                p = self._pad
                canvas = Image.new("L", (adv + 2 * p, 3 * p), 0)
                ImageDraw.Draw(canvas).text((p, 2 * p), ch, font=font, fill=255, anchor="ls")
                a = np.asarray(canvas)
                ys, xs = np.nonzero(a)
                offs = (ys.astype(np.int64) - 2 * p) * self._stride + (xs.astype(np.int64) - p)
                vals = a[ys, xs].astype(np.uint8)
            gid = len(self._adv)
            self._adv.append(adv)
            self._gid_face.append(face)
            self._offs.append(offs)
            self._vals.append(vals)
            self._gid[ch] = gid
            self._atlas_dirty = True
            if len(ch) == 1:  # published last: readers that see the gid also see the dirty flag
                self._lut[ord(ch)] = gid
            return gid

    def _atlas_adv(self) -> np.ndarray:
        if self._atlas_dirty:
            with self._lock:
                self._a_adv = np.array(self._adv, np.int64)
                self._atlas_dirty = False
        return self._a_adv

    def _char_info(self, ch: str) -> tuple[int, bool]:
        info = self._cls.get(ch)
        if info is None:
            cx = _is_complex(ch)
            info = (self._adv[self._glyph(ch)], cx)
            self._cls[ch] = info
        return info

    def _measure(self, drawn: str) -> tuple[int, bool]:
        """Width in pixels of a drawn glyph string and whether it needs the raqm path."""
        hit = self._word_w.get(drawn)
        if hit is not None:
            return hit
        w, cx = 0, False
        for ch in drawn:
            a, c = self._char_info(ch)
            w += a
            cx |= c
        if cx and _HAS_RAQM:
            w = max(w, self._raqm_width(drawn))
        if len(self._word_w) < 200_000:
            self._word_w[drawn] = (w, cx)
        return w, cx

    def _runs(self, s: str) -> list[tuple[int, str]]:
        runs: list[tuple[int, str]] = []
        for ch in s:
            f = max(0, self.chain.face_for(ord(ch))) if ch not in "\t\n" else 0
            if runs and runs[-1][0] == f:
                runs[-1] = (f, runs[-1][1] + ch)
            else:
                runs.append((f, ch))
        return runs

    def _raqm_width(self, s: str) -> int:
        return int(math.ceil(sum(self.chain.font(f, "raqm").getlength(r.replace("\t", " " * self.config.tab_size))
                                 for f, r in self._runs(s))))

    # ------------------------------------------------------------------ layout
    def _token(self, tok: str) -> tuple[str, int, int, bool]:
        """(drawn glyphs, width without trailing spaces, full width, needs raqm) of a token."""
        hit = self._tok.get(tok)
        if hit is not None:
            return hit
        drawn = tok.translate(self._table)
        body = drawn.rstrip(" \t")
        wv, cx = self._measure(body) if body else (0, False)
        wf = wv + (self._measure(drawn[len(body):])[0] if len(body) < len(drawn) else 0)
        hit = (drawn, wv, wf, cx)
        if len(self._tok) < 200_000:
            self._tok[tok] = hit
        return hit

    def layout(self, text: str) -> Layout:
        """Lay ``text`` out on pages (no rasterization): greedy line filling at Table 8's geometry.

        Raises:
            RenderError: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise RenderError(f"render expects str, got {type(text).__name__}; decode bytes first "
                              "(e.g. data.decode('utf-8', 'replace'))")
        cfg, px = self.config, self.px
        cw, lpp = px["content_width"], px["lines_per_page"]
        limit = lpp * cfg.max_pages
        mark_mode = cfg.newline == "mark"
        para = cfg.paragraph_break
        mark = cfg.newline_mark
        mark_w = self._measure(mark)[0]
        table = self._table
        token = self._token
        n = len(text)
        lines: list[Line] = []
        start, x, ink, cx, parts = 0, 0, 0, False, []

        def flush(end: int) -> bool:
            nonlocal start, x, ink, cx, parts
            lines.append(Line(start, end, "".join(parts), ink, cx))
            start, x, ink, cx, parts = end, 0, 0, False, []
            return len(lines) >= limit

        full = False
        for m in _TOKEN.finditer(text):
            tok = m.group()
            pos = m.start()
            if tok == "\n":
                if not mark_mode:
                    full = flush(pos + 1)
                else:
                    if x + mark_w > cw and x > 0:
                        full = flush(pos)
                        if full:
                            break
                    parts.append(mark)
                    x += mark_w
                    ink = x
                    if para and pos > 0 and text[pos - 1] == "\n" and (pos + 1 >= n or text[pos + 1] != "\n"):
                        full = flush(pos + 1)
                if full:
                    break
                continue
            drawn, wv, wf, tcx = token(tok)
            if x + wv <= cw:  # fits (trailing spaces may hang in the margin)
                parts.append(drawn)
                if wv:
                    ink = x + wv
                x += wf
                cx |= tcx
                if x > cw:
                    full = flush(m.end())
                    if full:
                        break
                continue
            if wv <= cw:  # next line
                if x > 0:
                    full = flush(pos)
                    if full:
                        break
                parts.append(drawn)
                ink = wv
                x = wf
                cx = tcx
                if x > cw:
                    full = flush(m.end())
                    if full:
                        break
                continue
            # a word wider than a line (URL, CJK run): split it across lines
            word = tok.rstrip(" \t")
            i = 0
            while i < len(word):
                if x > 0 and cw - x < cw // 4:
                    full = flush(pos + i)
                    if full:
                        break
                j, xx = i, x
                while j < len(word):
                    a = self._measure(word[j].translate(table))[0]
                    if xx + a > cw and (j > i or x > 0):
                        break
                    xx += a
                    j += 1
                if j == i:
                    full = flush(pos + i)
                    if full:
                        break
                    continue
                if j < len(word):  # prefer breaking after punctuation near the end of the line
                    for b in range(j, max(i + 1, j - 24), -1):
                        if word[b - 1] in _BREAK_AFTER:
                            j = b
                            break
                piece = word[i:j].translate(table)
                pw, pcx = self._measure(piece)
                parts.append(piece)
                ink = x + pw
                x += pw
                cx |= pcx
                i = j
                if i < len(word):
                    full = flush(pos + i)
                    if full:
                        break
            if full:
                break
            if len(word) < len(tok):  # trailing spaces of the split word
                sp = tok[len(word):].translate(table)
                parts.append(sp)
                x += self._measure(sp)[0]
                if x > cw:
                    full = flush(m.end())
                    if full:
                        break
        if full:
            end = lines[-1].end
        else:
            end = n
            if parts:
                lines.append(Line(start, n, "".join(parts), ink, cx))
        pages: list[PageLayout] = []
        for p0 in range(0, len(lines), lpp):
            chunk = lines[p0:p0 + lpp]
            width = px["width"]
            if cfg.auto_crop_width:
                width = max(2 * px["margin_x"] + 1, min(px["width"], 2 * px["margin_x"] + max(ln.width for ln in chunk)))
            height = px["height"]
            if p0 + lpp >= len(lines) and cfg.auto_crop_last_page:
                height = min(px["height"], 2 * px["margin_y"] + len(chunk) * px["line_height"])
            pages.append(PageLayout(chunk, width, height))
        return Layout(text, pages, end, cfg.newline, mark)

    # ------------------------------------------------------------------ rasterization
    def render(self, text: str) -> RenderResult:
        """Lay out and rasterize ``text``; empty text gives no pages.

        Raises:
            RenderError: ``text`` is not a ``str``.
        """
        lay = self.layout(text)
        pages = [self._raster(p) for p in lay.pages]
        missing, sample, escaped, faces = 0, [], 0, set()
        body = text[:lay.end]
        if body and not body.isascii():
            for ch in set(body):
                if ch in "\n\t":
                    continue
                if ord(ch) in self._table:
                    continue
                f = self.chain.face_for(ord(ch))
                if f < 0 and unicodedata.category(ch) not in ("Cf", "Zs", "Zl", "Zp"):
                    c = body.count(ch)
                    missing += c
                    sample.append(ch)
                else:
                    faces.add(max(f, 0))
        if body:
            faces.add(0)
            escaped = sum(1 for ch in body if ord(ch) in self._table and ch != "\n") if not body.isprintable() else 0
        return RenderResult(pages=pages, layout=lay, chars=len(text), rendered_chars=lay.end, missing_glyphs=missing,
                            missing_sample="".join(sorted(sample)[:16]), escaped=escaped,
                            complex_lines=sum(ln.complex for ln in lay.lines()),
                            fonts_used=[self.chain.faces[i].name for i in sorted(faces)], _compress=self.config.png_compress_level)

    def render_png(self, text: str) -> list[bytes]:
        """PNG bytes of the pages of ``text`` (see :meth:`render`)."""
        return self.render(text).png()

    def _raster(self, page: PageLayout) -> Image.Image:
        px, pad, stride = self.px, self._pad, self._stride
        top = 2 * pad  # glyph ink reaches at most 2*pad above its baseline (atlas canvas)
        rows = px["height"] + 3 * pad
        ink = np.zeros(rows * stride, np.uint8)
        simple = [(i, ln) for i, ln in enumerate(page.lines) if not ln.complex and ln.drawn]
        if simple:
            s = "".join(ln.drawn for _, ln in simple)
            cps = np.frombuffer(s.encode("utf-32-le"), np.uint32)
            gids = self._lut[cps]
            if (gids < 0).any():
                for cp in np.unique(cps[gids < 0]):
                    self._glyph(chr(int(cp)))
                gids = self._lut[cps]
            adv = self._atlas_adv()
            lens = np.array([len(ln.drawn) for _, ln in simple], np.int64)
            a = adv[gids]
            cs = np.cumsum(a) - a
            first = np.concatenate([[0], np.cumsum(lens)[:-1]])
            x = px["margin_x"] + cs - np.repeat(cs[first], lens)
            base = np.array([px["margin_y"] + i * px["line_height"] + self.ascent for i, _ in simple], np.int64)
            pos = (np.repeat(base, lens) + top) * stride + (x + pad)
            # one scatter per distinct glyph: targets = positions x ink offsets (broadcast)
            order = np.argsort(gids, kind="stable")
            sg = gids[order]
            cuts = np.flatnonzero(np.diff(sg)) + 1
            for lo, hi in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(sg)]])):
                g = int(sg[lo])
                offs = self._offs[g]
                if not len(offs):
                    continue
                tgt = pos[order[lo:hi]][:, None] + offs[None, :]
                np.maximum.at(ink, tgt.ravel(), np.broadcast_to(self._vals[g], tgt.shape).ravel())
        ink2 = ink.reshape(rows, stride)[top:top + page.height, pad:pad + page.width]
        im = Image.fromarray(255 - ink2, "L")
        cx_lines = [(i, ln) for i, ln in enumerate(page.lines) if ln.complex and ln.drawn]
        if cx_lines:
            draw = ImageDraw.Draw(im)
            for i, ln in cx_lines:
                x = px["margin_x"]
                y = px["margin_y"] + i * px["line_height"]
                for f, run in self._runs(ln.drawn.replace("\t", " " * self.config.tab_size)):
                    font = self.chain.font(f, "raqm" if _HAS_RAQM else "basic")
                    draw.text((x, y), run, font=font, fill=0)
                    x += int(round(font.getlength(run)))
        if self._fg == (0, 0, 0) and self._bg == (255, 255, 255):
            return im
        # other colours: blend background → font colour by ink coverage
        cov = (255 - np.asarray(im, np.float32)) / 255.0
        fg, bg = np.array(self._fg, np.float32), np.array(self._bg, np.float32)
        rgb = bg + (fg - bg) * cov[..., None]
        return Image.fromarray(np.clip(np.rint(rgb), 0, 255).astype(np.uint8), "RGB")


_DEFAULT: dict[str, Renderer] = {}
_DEFAULT_LOCK = threading.Lock()


def default_renderer(config: RenderConfig | None = None) -> Renderer:
    """A process-wide shared :class:`Renderer` per config (the glyph atlas is built once)."""
    cfg = config or RenderConfig()
    key = cfg.model_dump_json()
    with _DEFAULT_LOCK:
        r = _DEFAULT.get(key)
        if r is None:
            r = _DEFAULT[key] = Renderer(cfg)
        return r
