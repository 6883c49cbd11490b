"""Greedy line filling for :meth:`kit.vfold.render.Renderer.layout` at Table 8's geometry, in named steps:
place a token on this line or the next, draw a newline (mark mode), split a word wider than a line
(preferably after ``/ - ? & = _ . , ;``), then cut the lines into pages. Widths come from the renderer's
``measure`` / ``token`` (its glyph atlas); nothing here rasterizes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kit.vfold.layout import Line, PageLayout
from kit.vfold.render_config import RenderConfig

_BREAK_AFTER = set("/-?&=_.,;:|)]}")
_TOKEN = re.compile(r"\n|[^ \t\n]+[ \t]*|[ \t]+")


class LineFiller:
    """One layout's lines so far and the line being filled (pen ``x``, ``ink`` width, drawn ``parts``).

    Args:
        cw: content width in pixels.
        limit: the most lines (lines per page x ``max_pages``); filling stops there.
        measure: drawn glyph string -> (width, needs raqm).
        table: the display mapping of characters (``str.translate`` table).
    """

    __slots__ = ("cw", "limit", "measure", "table", "lines", "start", "x", "ink", "cx", "parts")

    def __init__(self, cw: int, limit: int, measure: Callable[[str], tuple[int, bool]], table: dict[int, str]):
        self.cw, self.limit, self.measure, self.table = cw, limit, measure, table
        self.lines: list[Line] = []
        self.start, self.x, self.ink, self.cx = 0, 0, 0, False
        self.parts: list[str] = []

    def flush(self, end: int) -> bool:
        """End the current line at source offset ``end``; ``True`` when the line limit is reached."""
        self.lines.append(Line(self.start, end, "".join(self.parts), self.ink, self.cx))
        self.start, self.x, self.ink, self.cx, self.parts = end, 0, 0, False, []
        return len(self.lines) >= self.limit

    def fill(self, text: str, token: Callable[[str], tuple[str, int, int, bool]], mark_mode: bool, mark: str,
             mark_w: int, para: bool) -> int:
        """Fill lines with the tokens of ``text``; returns the end of the laid-out text (``len(text)`` unless full)."""
        cw, place, split_word = self.cw, self.place, self.split_word  # locals: this loop runs once per token
        for m in _TOKEN.finditer(text):
            tok = m.group()
            pos = m.start()
            if tok == "\n":
                full = self.newline_mark(text, pos, mark, mark_w, para) if mark_mode else self.flush(pos + 1)
            else:
                drawn, wv, wf, tcx = token(tok)
                x = self.x
                if x + wf <= cw:  # place()'s common case inlined (hot loop): fits with its trailing spaces
                    self.parts.append(drawn)
                    if wv:
                        self.ink = x + wv
                    self.x = x + wf
                    self.cx |= tcx
                    continue
                full = place(drawn, wv, wf, tcx, pos, m.end()) if wv <= cw else split_word(tok, pos, m.end())
            if full:
                return self.lines[-1].end
        if self.parts:
            self.lines.append(Line(self.start, len(text), "".join(self.parts), self.ink, self.cx))
        return len(text)

    def newline_mark(self, text: str, pos: int, mark: str, mark_w: int, para: bool) -> bool:
        """A newline drawn as ``mark`` (on the next line if it does not fit); a paragraph break also ends the line."""
        if self.x + mark_w > self.cw and self.x > 0 and self.flush(pos):
            return True
        self.parts.append(mark)
        self.x += mark_w
        self.ink = self.x
        if para and pos > 0 and text[pos - 1] == "\n" and (pos + 1 >= len(text) or text[pos + 1] != "\n"):
            return self.flush(pos + 1)
        return False

    def place(self, drawn: str, wv: int, wf: int, tcx: bool, pos: int, end: int) -> bool:
        """A token no wider than a line: on this line if it fits, else on the next; ``True`` when full."""
        if self.x + wv <= self.cw:  # fits (trailing spaces may hang in the margin)
            self.parts.append(drawn)
            if wv:
                self.ink = self.x + wv
            self.x += wf
            self.cx |= tcx
        else:
            if self.x > 0 and self.flush(pos):
                return True
            self.parts.append(drawn)
            self.ink = wv
            self.x = wf
            self.cx = tcx
        return self.x > self.cw and self.flush(end)

    def split_word(self, tok: str, pos: int, end: int) -> bool:
        """A word wider than a line (URL, CJK run) split across lines, then its trailing spaces; ``True`` when full."""
        word = tok.rstrip(" \t")
        if self._split(word, pos):
            return True
        if len(word) < len(tok):  # trailing spaces of the split word
            sp = tok[len(word):].translate(self.table)
            self.parts.append(sp)
            self.x += self.measure(sp)[0]
            return self.x > self.cw and self.flush(end)
        return False

    def _split(self, word: str, pos: int) -> bool:
        """The pieces of ``word`` (starting at source offset ``pos``), one per line; ``True`` when full."""
        i = 0
        while i < len(word):
            # a line less than a quarter empty starts the word on the next one
            if self.x > 0 and self.cw - self.x < self.cw // 4 and self.flush(pos + i):
                return True
            j = self._piece_end(word, i)
            if j == i:  # not even one character fits after what the line holds
                if self.flush(pos + i):
                    return True
                continue
            piece = word[i:j].translate(self.table)
            pw, pcx = self.measure(piece)
            self.parts.append(piece)
            self.ink = self.x + pw
            self.x += pw
            self.cx |= pcx
            i = j
            if i < len(word) and self.flush(pos + i):
                return True
        return False

    def _piece_end(self, word: str, i: int) -> int:
        """End of the piece of ``word`` from ``i`` that fits this line, moved back after punctuation near its end."""
        j, xx = i, self.x
        while j < len(word):
            a = self.measure(word[j].translate(self.table))[0]
            if xx + a > self.cw and (j > i or self.x > 0):
                break
            xx += a
            j += 1
        if i < j < len(word):  # prefer breaking after punctuation near the end of the line
            for b in range(j, max(i + 1, j - 24), -1):
                if word[b - 1] in _BREAK_AFTER:
                    return b
        return j


def paginate(lines: list[Line], cfg: RenderConfig, px: dict[str, int]) -> list[PageLayout]:
    """Cut ``lines`` into pages of ``px["lines_per_page"]``, cropping width and the last page's height as ``cfg`` says."""
    lpp = px["lines_per_page"]
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
    return pages
