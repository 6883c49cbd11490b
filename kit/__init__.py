"""mmsearch-kit: a research kit for multimodal search agents.

Subpackages: ``kit.harness`` (WeAgent-Harness: tools, evidence registry, recovery, budgets, loop),
``kit.web`` (search backends and the exact-match cache), ``kit.policy`` (policies),
``kit.models`` (tiny offline Qwen-VL checkpoints and the offline Qwen tokenizer).
"""

__version__ = "0.1.0"
