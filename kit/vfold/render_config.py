"""Rendering parameters for V-Fold (POINTS-Seeker Appendix B.2, Table 8) and their validation.

**Layout of line breaks.** Table 8's Glyph layout (``newline="break"``, preset :data:`TABLE8_CONFIG`)
starts a new line at every newline. Web observations are full of short lines (list items, table and
infobox rows), which leave most of each line white: on the Wikipedia articles of the shared data that
layout gives only about 1.9× fewer Qwen2-VL vision tokens than Qwen text tokens. The default
``newline="mark"`` flows short lines together and draws each newline as a visible mark (``↵``), so
pages are dense: about 3.3× fewer vision than text tokens on the same articles (4.1× with
``paragraph_break=False``; measured by ``benchmarks/bench_vfold.py``); a blank line (paragraph
break) still starts a new line.
"""

from __future__ import annotations

import unicodedata
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kit.recipes import paper_default

__all__ = ["NEWLINE_MARK", "TABLE8_CONFIG", "RenderConfig", "RenderError"]

NEWLINE_MARK = "\u21b5"  # ↵ (kit)


def _table8(key: str):
    """Table 8's value of ``key`` as kit/recipes/points_seeker.yaml records it (``vfold.<key>``, cited there)."""
    return paper_default(f"vfold.{key}", "points_seeker")


class RenderError(ValueError):
    """Bad render input or configuration (e.g. text that is not a ``str``)."""


class RenderConfig(BaseModel):
    """Rendering parameters. Defaults are Table 8's (POINTS-Seeker Appendix B.2, from Glyph), read from the
    recipe (``vfold.*`` of kit/recipes/points_seeker.yaml, each with its citation), except ``newline`` (see the
    module docstring); :data:`TABLE8_CONFIG` is the exact Glyph layout. The font (Table 8: Verdana.ttf) is the
    recipe's ``vfold.font`` substitute, DejaVu Sans (:mod:`kit.vfold.fonts`; ``font_path`` overrides it).
    The fields after ``auto_crop_last_page`` are the kit's extensions, with the kit's defaults.

    Units: points for page size, margins, font size and line height (1 pt = ``dpi / 72`` pixels;
    72 dpi gives pixels = points). ``max_pages`` caps one rendering (longer text is truncated and
    reported). ``png_compress_level``: zlib level of the PNG output (0–9; pixels are identical at
    every level).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)  # a recipe value is checked too

    # Table 8 (App. B.2): every value is read from the recipe (kit/recipes/points_seeker.yaml, vfold.*)
    page_width: int = _table8("page_width")
    page_height: int = _table8("page_height")
    dpi: int = _table8("dpi")
    margin_x: int = _table8("margin_x")
    margin_y: int = _table8("margin_y")
    font_size: float = _table8("font_size")
    line_height: float = _table8("line_height")
    font_color: str = _table8("font_color")
    page_bg_color: str = _table8("page_bg_color")  # para-bg-color (the same): no paragraph background is painted
    alignment: Literal["left"] = _table8("alignment")
    horizontal_scale: float = _table8("horizontal_scale")
    first_line_indent: int = _table8("first_line_indent")
    left_indent: int = _table8("left_indent")
    right_indent: int = _table8("right_indent")
    space_before: int = _table8("space_before")
    space_after: int = _table8("space_after")
    border_width: int = _table8("border_width")
    border_padding: int = _table8("border_padding")
    auto_crop_width: bool = _table8("auto_crop_width")
    auto_crop_last_page: bool = _table8("auto_crop_last_page")
    # kit extensions (the kit's values, not Table 8's)
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
