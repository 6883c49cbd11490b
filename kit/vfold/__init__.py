"""V-Fold (POINTS-Seeker §3.3): fold stale observations of an agent's history into page images.

* :mod:`kit.vfold.render` — text → page images with Table 8's parameters (``Renderer``);
  its parameters, layout model and result are in :mod:`kit.vfold.render_config`, :mod:`kit.vfold.layout`
  and :mod:`kit.vfold.pages` (re-exported by :mod:`kit.vfold.render`);
* :mod:`kit.vfold.fonts` — the free Verdana substitute (DejaVu Sans) and fallback fonts;
* :mod:`kit.vfold.fold` — context strategies for the harness (no compression, discard history, LLM
  summary, render everything, V-Fold) and :func:`~kit.vfold.fold.make_context_builder`; their base
  (history meter, per-episode state) is :mod:`kit.vfold.base`;
* :mod:`kit.vfold.modes` — V-Fold's named modes: ``"paper"`` (Table 8 layout, fold every stale
  observation) and ``"kit"`` (flowed layout, fold only if smaller and lossless);
* :mod:`kit.vfold.accounting` — text vs vision tokens per folded observation and per trajectory;
* :mod:`kit.vfold.training` — the fully rendered trajectory variant of SFT records;
* :mod:`kit.vfold.episodes` — a scripted long-horizon reader (not a model) for real long histories.
"""

from kit._lazy import lazy_exports
from kit.extras import require

require("vfold", "PIL", "fontTools", feature="kit.vfold (page rendering)")  # fonts: matplotlib's DejaVu or $MMSEARCH_KIT_FONT

# public names, imported on first use (``import kit.vfold`` stays cheap)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "Renderer": "kit.vfold.render",
    "RenderConfig": "kit.vfold.render_config",
    "default_renderer": "kit.vfold.render",
    "VFoldContext": "kit.vfold.fold",
    "DiscardContext": "kit.vfold.fold",
    "SummaryContext": "kit.vfold.fold",
    "RenderAllContext": "kit.vfold.fold",
    "points_seeker_config": "kit.vfold.fold",
    "VFOLD_MODES": "kit.vfold.modes",
    "VFoldOptions": "kit.vfold.modes",
    "vfold_options": "kit.vfold.modes",
    "trajectory_accounting": "kit.vfold.accounting",
    "render_trajectory": "kit.vfold.training",
    "render_dataset": "kit.vfold.training",
    "ReaderPolicy": "kit.vfold.episodes",
})
