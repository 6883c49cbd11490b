"""Agentic SFT (WeAgent-MMSearch §6.1, Appendix A; POINTS-Seeker §3.2.1 Agentic Seeding, §3.2.3 SFT).

* :mod:`kit.train.sft_data` — episode records → model inputs with the assistant-only loss mask,
  length filters (4,096 tokens per response, 48K per trajectory), the padding collator.
* :mod:`kit.train.sft` — trainers: TRL ``SFTTrainer`` (CPU, multi-GPU through accelerate) and Unsloth
  ``FastVisionModel`` (one GPU, imported lazily), parameter groups, metrics.
* :mod:`kit.train.curriculum` — short-to-long context curriculum: compacted transcripts, then full ones.
* :mod:`kit.train.mixtures` — Agentic Seeding / SFT mixtures of hub sources with weights
  (POINTS-Seeker A.2-A.3 specs); :mod:`kit.train.seeding` its Toucan and VQA (teacher-distilled) formats;
  :mod:`kit.train.local_copies` tiny format-true local copies in hub layout.
* :mod:`kit.train.packing` — packing to 32k tokens with sample boundaries kept (POINTS-Seeker §4.1).
* :mod:`kit.train.sft_eval` — before/after evaluation: tool-call validity, format compliance, loss.

Nothing here imports ``trl``, ``peft`` or ``unsloth`` at module import time (``trl`` costs ~10 s).
"""

from kit._lazy import lazy_exports
from kit.extras import require

require("train", "torch", "transformers", "datasets", feature="kit.train")   # one line naming the extra, not a deep traceback

# public names, imported on first use (``import kit.train`` stays cheap)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "SFTEncoder": "kit.train.sft_data",
    "SFTCollator": "kit.train.sft_data",
    "SFTDataError": "kit.train.sft_data",
    "train_sft": "kit.train.sft",
    "SFTTrainConfig": "kit.train.sft",
    "TrainResult": "kit.train.sft",
    "train_sft_curriculum": "kit.train.curriculum",
    "compact_record": "kit.train.curriculum",
    "Mixture": "kit.train.mixtures",
    "Source": "kit.train.mixtures",
    "sample_mixture": "kit.train.mixtures",
    "load_mixture": "kit.train.mixtures",
    "points_seeker_sft_config": "kit.train.sft",
    "PackedSFTCollator": "kit.train.packing",
    "write_local_copy": "kit.train.local_copies",
    "evaluate_sft": "kit.train.sft_eval",
    "compare": "kit.train.sft_eval",
})
