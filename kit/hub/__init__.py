"""Hugging Face Hub: publish datasets, checkpoints, evaluation results and tool-cache snapshots
(:mod:`kit.hub.publish`), download them by repository id and revision (:mod:`kit.hub.download`),
their cards (:mod:`kit.hub.cards`), and an in-process Hub for offline checks (:mod:`kit.hub.localhub`)."""

from kit._lazy import lazy_exports
from kit.extras import require

require("hub", "huggingface_hub", feature="kit.hub (publish, download)")

# public names, imported on first use (``import kit.hub`` stays cheap)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "publish": "kit.hub.publish",
    "plan_run": "kit.hub.publish",
    "download": "kit.hub.download",
    "resolve_ref": "kit.hub.download",
    "LocalHub": "kit.hub.localhub",
    "dataset_card": "kit.hub.cards",
    "evaluation_card": "kit.hub.cards",
    "checkpoint_card": "kit.hub.cards",
})
