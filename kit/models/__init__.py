"""Offline models: the real Qwen tokenizer, an image-only Qwen-VL processor, tiny Qwen-VL checkpoints.

Importing this package registers :class:`~kit.models.processor.QwenVLImageOnlyProcessor` with
``transformers.AutoProcessor`` (needed before ``AutoProcessor.from_pretrained`` on a tiny checkpoint;
otherwise transformers silently returns only the tokenizer).
"""

from kit.extras import require

require("models", "transformers", "tokenizers", feature="kit.models")

from kit.models.processor import QwenVLImageOnlyProcessor, load_image_only_processor  # noqa: E402
from kit.models.qwen_tokenizer import QWEN_VL_CHAT_TEMPLATE, load_qwen_tokenizer, shared_qwen_tokenizer  # noqa: E402
from kit.models.tiny import ARCHS, build_tiny_checkpoint, tiny_metadata  # noqa: E402

__all__ = [
    "ARCHS",
    "QWEN_VL_CHAT_TEMPLATE",
    "QwenVLImageOnlyProcessor",
    "build_tiny_checkpoint",
    "load_image_only_processor",
    "load_qwen_tokenizer",
    "shared_qwen_tokenizer",
    "tiny_metadata",
]
