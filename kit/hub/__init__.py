"""Hugging Face Hub: publish datasets, checkpoints, evaluation results and tool-cache snapshots
(:mod:`kit.hub.publish`), download them by repository id and revision (:mod:`kit.hub.download`),
their cards (:mod:`kit.hub.cards`), and an in-process Hub for offline checks (:mod:`kit.hub.localhub`)."""
