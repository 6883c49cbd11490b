"""Image-only Qwen-VL processor that works on CPU without torchvision.

The stock ``Qwen2VLProcessor`` / ``Qwen2_5_VLProcessor`` / ``Qwen3VLProcessor`` of transformers 5
require a video processor, and the Qwen video processors import torchvision, which does not load
beside the CPU torch wheel used here. :class:`QwenVLImageOnlyProcessor` keeps the exact image path of
the stock processors (same placeholder expansion: one ``<|image_pad|>`` per merged patch, i.e.
``prod(image_grid_thw) / merge_size**2``; same ``mm_token_type_ids``) with the PIL image processor
and no video processor.

Importing this module (``import kit.models`` does it) registers the class with ``AutoProcessor``
for the three Qwen-VL configs, so ``AutoProcessor.from_pretrained(tiny_checkpoint)`` returns it. A
checkpoint written by :mod:`kit.models.tiny` names it in ``processor_config.json``; without the
import, ``AutoProcessor`` cannot resolve that name and silently returns only the tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from transformers import AutoProcessor, Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
from transformers.processing_utils import ProcessorMixin

PROCESSOR_CLASS_NAME = "QwenVLImageOnlyProcessor"


class QwenVLImageOnlyProcessor(Qwen2VLProcessor):
    """Qwen2-VL / Qwen2.5-VL / Qwen3-VL processor for text and images only (no video).

    Args:
        image_processor: a Qwen2-VL image processor (``Qwen2VLImageProcessorPil`` on CPU); its
            ``patch_size * merge_size`` is the smart-resize factor (28 for Qwen2/2.5-VL, 32 for
            Qwen3-VL) and ``size={"shortest_edge": min_pixels, "longest_edge": max_pixels}``.
        tokenizer: the model's tokenizer (must know ``<|image_pad|>``).
        chat_template: Jinja chat template (usually the tokenizer's).

    Calling it with ``videos=`` raises ``ValueError``.
    """

    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        # A checkpoint may carry a video_processor section for servers that use the stock class
        # (vLLM); this class ignores it on purpose.
        kwargs.pop("video_processor", None)
        if tokenizer is None:
            raise ValueError(f"{type(self).__name__} needs a tokenizer")
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = getattr(tokenizer, "image_token_id", None) or tokenizer.convert_tokens_to_ids(
            self.image_token
        )
        self.video_token_id = getattr(tokenizer, "video_token_id", None) or tokenizer.convert_tokens_to_ids(
            self.video_token
        )
        unk = getattr(tokenizer, "unk_token_id", None)
        if self.image_token_id is None or (unk is not None and self.image_token_id == unk):
            raise ValueError(f"tokenizer has no {self.image_token} token")
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template, **kwargs)

    def __call__(self, images=None, text=None, videos=None, audio=None, **kwargs):
        if videos is not None:
            raise ValueError(f"{type(self).__name__} is image-only; videos are not supported")
        if audio is not None:
            raise ValueError(f"{type(self).__name__} does not take audio")
        return super().__call__(images=images, text=text, **kwargs)

    @property
    def merge_size(self) -> int:
        """Spatial merge size (2 for all Qwen-VL models: 2x2 patches per vision token)."""
        return int(self.image_processor.merge_size)

    @property
    def factor(self) -> int:
        """Smart-resize factor in pixels: ``patch_size * merge_size`` (28 or 32)."""
        return int(self.image_processor.patch_size) * self.merge_size


def register() -> None:
    """Register :class:`QwenVLImageOnlyProcessor` with ``AutoProcessor`` (idempotent).

    ``exist_ok=True`` is needed: without it transformers skips registrations that use its own config
    classes. It only changes the fallback used for checkpoints that name no processor class; the
    name lookup for ``processor_class: QwenVLImageOnlyProcessor`` goes through this registration.
    """
    for config_cls in (Qwen2VLConfig, Qwen2_5_VLConfig, Qwen3VLConfig):
        AutoProcessor.register(config_cls, QwenVLImageOnlyProcessor, exist_ok=True)


def load_image_only_processor(path: str | Path, **kwargs) -> QwenVLImageOnlyProcessor:
    """Load the image-only processor from any local Qwen-VL checkpoint folder.

    Works for the kit's tiny checkpoints and for real Qwen2-VL / Qwen2.5-VL / Qwen3-VL folders whose
    ``processor_class`` names the stock processor (which would need torchvision on CPU).

    Raises:
        FileNotFoundError: ``path`` is not a folder.
        OSError / ValueError: the folder has no tokenizer or image processor config.
    """
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"checkpoint folder {p} does not exist")
    return QwenVLImageOnlyProcessor.from_pretrained(str(p), **kwargs)


register()
