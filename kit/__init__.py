"""mmsearch-kit: a research kit for multimodal search agents.

Subpackages: ``kit.harness`` (WeAgent-Harness: tools, evidence registry, recovery, budgets, loop),
``kit.web`` (search backends and the exact-match cache), ``kit.policy`` (policies),
``kit.models`` (tiny offline Qwen-VL checkpoints and the offline Qwen tokenizer).
"""

__version__ = "0.1.0"

# first, before any library's progress bar: in a headless notebook kernel every tqdm.auto bar (the kit's,
# transformers', huggingface_hub's, datasets') is saved as its final text line, not a frozen widget
from kit import progress as _progress  # noqa: E402,F401  (os and sys only: cheap)
