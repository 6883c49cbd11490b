"""Named V-Fold modes: how pages are laid out and when an observation is folded.

POINTS-Seeker §3.3 renders *each* stale observation ``o_i`` into images (Eq. ``õ_i = φ(E_v(F_render(o_i)))``)
with Glyph's parameters (Appendix B.2, Table 8); it states no condition under which an observation stays
text. Two modes, each a preset of three options that can also be set one by one:

=========  ===========  ===================  ====================  ============================================
mode       ``layout``   ``only_if_smaller``  ``require_lossless``  source
=========  ===========  ===================  ====================  ============================================
``paper``  ``table8``   False                False                 POINTS-Seeker §3.3, Appendix B.2 Table 8
``kit``    ``flowed``   True                 True                  kit choice (see below)
=========  ===========  ===================  ====================  ============================================

* ``layout``: ``"table8"`` is :data:`~kit.vfold.render_config.TABLE8_CONFIG` (a new line at every
  newline, as Glyph lays text out); ``"flowed"`` is :class:`~kit.vfold.render_config.RenderConfig`'s
  default (short lines flowed together with a visible ``↵``: ~1.7× denser pages on web text).
* ``only_if_smaller``: keep an observation as text when its pages cost at least as many tokens as its text.
* ``require_lossless``: keep an observation as text when rendering loses characters (the page cap
  ``RenderConfig.max_pages`` truncated it, or no font has some glyphs).

Paper mode folds everything; a fold that lost characters is still folded but never silently: the
observation's :class:`~kit.vfold.fold.FoldedObservation` lists its ``losses``, the fold log counts them
and an event ``folded_lossy`` (on training records :attr:`EventType.VFOLD_FOLDED_LOSSY
<kit.harness.events.EventType>`) gives the characters lost. The paper names no page cap; the kit keeps
``max_pages = 16`` in both modes (kit choice: bounds one observation's vision tokens). At Table 8's layout
16 pages hold 1,312 lines, ~110k characters of prose, so a 16,384-character observation (WeAgent's
persistence threshold) is truncated only when its lines average under 12.5 characters.

Every fold log entry carries :meth:`VFoldOptions.record` (mode, the three options, which were overridden),
so a result says which mode produced it.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from kit.vfold.render_config import TABLE8_CONFIG, RenderConfig

__all__ = ["LAYOUTS", "VFOLD_MODES", "VFoldMode", "VFoldOptions", "layout_config", "layout_of", "vfold_options"]

VFoldMode = Literal["paper", "kit"]
Layout = Literal["table8", "flowed"]

# ---- mode presets (the values a recipe file cites) ---------------------------------------------------
VFOLD_MODES: dict[str, dict[str, Any]] = {
    # POINTS-Seeker §3.3 ("render each o_i individually"), Appendix B.2 Table 8 (Glyph's layout)
    "paper": {"layout": "table8", "only_if_smaller": False, "require_lossless": False},
    # kit choice: denser pages on line-heavy web text; never a fold that costs tokens or loses characters
    "kit": {"layout": "flowed", "only_if_smaller": True, "require_lossless": True},
}

#: layout name -> render configuration
LAYOUTS: dict[str, RenderConfig] = {"table8": TABLE8_CONFIG, "flowed": RenderConfig()}
# fields that do not change where glyphs land (page cap, fonts, PNG encoding)
_NON_LAYOUT = {"max_pages", "font_path", "fallback_fonts", "png_compress_level"}


class VFoldOptions(BaseModel):
    """Resolved V-Fold options (see the module docstring). ``layout`` is ``"custom"`` only when an
    explicit renderer has a configuration matching neither named layout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: VFoldMode
    layout: Literal["table8", "flowed", "custom"]
    only_if_smaller: bool
    require_lossless: bool

    def overridden(self) -> list[str]:
        """Options that differ from the mode's preset, in a fixed order."""
        preset = VFOLD_MODES[self.mode]
        return [k for k in ("layout", "only_if_smaller", "require_lossless") if getattr(self, k) != preset[k]]

    def record(self) -> dict[str, Any]:
        """JSON-able record for fold logs, events and manifests: mode, options, ``overridden`` names."""
        return {**self.model_dump(), "overridden": self.overridden()}


def _check_mode(mode: object) -> str:
    if mode not in VFOLD_MODES:
        raise ValueError(f"unknown V-Fold mode {mode!r}; expected one of {sorted(VFOLD_MODES)}")
    return str(mode)


def layout_config(layout: str) -> RenderConfig:
    """The :class:`RenderConfig` of a named layout.

    Raises:
        ValueError: ``layout`` is not ``"table8"`` or ``"flowed"``.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown V-Fold layout {layout!r}; expected one of {sorted(LAYOUTS)}")
    return LAYOUTS[layout]


def layout_of(config: RenderConfig) -> str:
    """``"table8"``, ``"flowed"`` or ``"custom"``: the named layout ``config`` lays text out as
    (the page cap, fonts and PNG level are ignored)."""
    got = config.model_dump(exclude=_NON_LAYOUT)
    return next((n for n, c in LAYOUTS.items() if c.model_dump(exclude=_NON_LAYOUT) == got), "custom")


def vfold_options(mode: str = "kit", *, layout: str | None = None, only_if_smaller: bool | None = None,
                  require_lossless: bool | None = None, renderer_config: RenderConfig | None = None) -> VFoldOptions:
    """Resolve a mode and per-option overrides (``None`` = the mode's value).

    ``renderer_config``: the configuration of an explicitly given renderer; it decides the layout
    (a conflicting ``layout`` is an error).

    Raises:
        ValueError: unknown mode or layout, a non-bool option, or ``layout`` contradicting ``renderer_config``.
    """
    preset = VFOLD_MODES[_check_mode(mode)]
    for name, v in (("only_if_smaller", only_if_smaller), ("require_lossless", require_lossless)):
        if v is not None and not isinstance(v, bool):
            raise ValueError(f"V-Fold option {name} must be a bool or None, got {v!r}")
    if layout is not None:
        layout_config(layout)
    if renderer_config is not None:
        actual = layout_of(renderer_config)
        if layout is not None and layout != actual:
            raise ValueError(f"V-Fold layout {layout!r} contradicts the given renderer, whose layout is {actual!r}")
        layout = actual
    return VFoldOptions(mode=mode,  # type: ignore[arg-type]  # checked by _check_mode
                        layout=layout if layout is not None else preset["layout"],  # type: ignore[arg-type]
                        only_if_smaller=preset["only_if_smaller"] if only_if_smaller is None else only_if_smaller,
                        require_lossless=preset["require_lossless"] if require_lossless is None else require_lossless)


def options_from_config(config: Any) -> VFoldOptions:
    """:class:`VFoldOptions` from a :class:`~kit.harness.config.HarnessConfig`'s ``vfold_*`` fields."""
    return vfold_options(getattr(config, "vfold_mode", "kit"), layout=getattr(config, "vfold_layout", None),
                         only_if_smaller=getattr(config, "vfold_only_if_smaller", None),
                         require_lossless=getattr(config, "vfold_require_lossless", None))


assert set(get_args(VFoldMode)) == set(VFOLD_MODES) and set(get_args(Layout)) == set(LAYOUTS)
