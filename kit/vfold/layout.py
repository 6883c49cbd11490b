"""The layout model of a rendering: lines with their source spans and drawn glyphs, pages, and the
display form of characters.

**Display of characters.** Printable characters are drawn as themselves. Tabs advance by
``tab_size`` spaces. Control characters are drawn in caret notation (``^@``, ``^A``, … ``^?``), C1
controls, unpaired surrogates and non-characters as ``\\xHH`` / ``\\uHHHH`` escapes: binary junk is
visible, never silently dropped and never sent to the rasterizer raw. Every character is kept: for
every line :class:`Line` records the source span and the exact glyph string drawn for it, and
:meth:`Layout.reconstruct` recovers the input from the drawn glyphs.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["Layout", "Line", "PageLayout"]


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
