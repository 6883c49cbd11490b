"""Harness-native data pipeline (WeAgent §4–5, POINTS-Seeker §3.2.2).

Stage 1 :mod:`kit.data.seeds` (visually grounded seeds), stage 2 :mod:`kit.data.expand` (backward
multi-hop expansion), stage 3 :mod:`kit.data.validate` (filters and query synthesis), stage 4
:mod:`kit.data.sample` (trajectories through the harness -> SFT / RL splits), the experts
(:mod:`kit.data.expert`), :mod:`kit.data.pipeline` (all stages, counts), open-source normalization
(:mod:`kit.data.normalize`), QA->VQA conversion (:mod:`kit.data.vqa_convert`), RL query filtering
(:mod:`kit.data.rl_filter`), VisTarget-style benchmark building (:mod:`kit.data.vistarget_build`),
mixtures as Hugging Face datasets (:mod:`kit.data.mixtures`) and dataset cards (:mod:`kit.data.cards`).

Every stage writes one jsonl per outcome (accepted / rejected / failed) and skips the items already
present when rerun. Offline outputs carry the label ``synthetic-offline`` and are never model results.
"""

OFFLINE_LABEL = "synthetic-offline"

from kit._lazy import lazy_exports  # noqa: E402  (after the constant other modules import from here)

# public names, imported on first use (``import kit.data`` stays cheap)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "run_offline": "kit.data.pipeline", "load_tasks": "kit.data.pipeline", "build_sft_mixture": "kit.data.mixtures",
    "build_rl_mixture": "kit.data.mixtures", "filter_rl_queries": "kit.data.rl_filter", "build_vistarget": "kit.data.vistarget_build",
    "sample_trajectories": "kit.data.sample", "same_picture": "kit.data.sample", "convert_qa": "kit.data.vqa_convert",
    "SynthTask": "kit.data.records", "load_demo_tasks": "kit.data.demo_tasks",
})
__all__ = [*__all__, "OFFLINE_LABEL"]
