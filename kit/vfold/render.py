"""Text → page images for V-Fold (POINTS-Seeker §3.3 ``F_render``; Appendix B.2, Table 8).

:class:`Renderer` lays text out on pages with Table 8's geometry — 595×842 page at 72 dpi, margins
10, 9 pt font, line height 10, black on white, left aligned, no indents/borders, auto-cropped width
and last page — and rasterizes them to grayscale PNG. The font is DejaVu Sans (the free substitute
for Verdana; see :mod:`kit.vfold.fonts`). Parameters and the default line-break layout:
:mod:`kit.vfold.render_config`; the layout model and the display of control characters:
:mod:`kit.vfold.layout`; the result and PNG encoding: :mod:`kit.vfold.pages` (all re-exported here); the
steps of greedy line filling: :mod:`kit.vfold.linefill`.

Words longer than a line (URLs, CJK runs) are split across lines, preferably after
``/ - ? & = _ . , ;``. Right-to-left and complex-shaping lines (Arabic, Hebrew, Indic, combining
marks) are drawn with Pillow's raqm layout (bidi + shaping); everything else goes through a glyph
atlas. Characters no font covers are drawn as the missing-glyph box and counted in
:attr:`RenderResult.missing_glyphs`. Output is deterministic: the same text and config give the same
pixels and the same PNG bytes (for a given font file and Pillow/FreeType build;
``RenderResult.fonts_used`` names the faces used).

**Speed.** Pillow's ``ImageDraw.text`` rasterizes every glyph on every call (~35 ms per dense page
here). The renderer instead rasterizes each (font, character) once into an atlas with Pillow itself
and composes pages with one vectorized ``numpy.maximum.at`` scatter — the same max-composition
FreeType output gets inside Pillow, at integer pen positions (Pillow's basic layout uses hinted,
integer advances at this size).
"""

from __future__ import annotations

import math
import threading
import unicodedata

import numpy as np
from PIL import Image, ImageColor, ImageDraw, features

from kit.vfold.fonts import FontChain, default_chain
from kit.vfold.layout import _BREAK_TABLE, _MARK_TABLE, Layout, Line, PageLayout, _is_complex
from kit.vfold.linefill import _BREAK_AFTER, _TOKEN, LineFiller, paginate  # noqa: F401  (old private names kept here)
from kit.vfold.pages import RenderResult, encode_png
from kit.vfold.render_config import NEWLINE_MARK, TABLE8_CONFIG, RenderConfig, RenderError

__all__ = ["NEWLINE_MARK", "TABLE8_CONFIG", "Layout", "Line", "PageLayout", "RenderConfig", "RenderError",
           "RenderResult", "Renderer", "default_renderer", "encode_png"]

_HAS_RAQM = features.check("raqm")


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
        mark = cfg.newline_mark
        mark_w = self._measure(mark)[0]  # measured in either mode: it puts the mark in the atlas first
        filler = LineFiller(px["content_width"], px["lines_per_page"] * cfg.max_pages, self._measure, self._table)
        end = filler.fill(text, self._token, cfg.newline == "mark", mark, mark_w, cfg.paragraph_break)
        return Layout(text, paginate(filler.lines, cfg, px), end, cfg.newline, mark)

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
