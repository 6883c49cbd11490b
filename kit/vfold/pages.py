"""What one rendering returns (:class:`RenderResult`: page images, layout, lost/escaped characters)
and the fast PNG encoder of its pages (:func:`encode_png`).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from kit.vfold.layout import Layout
from kit.vfold.render_config import RenderError

__all__ = ["RenderResult", "encode_png"]


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
