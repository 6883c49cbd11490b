"""In-process transformers policy for Qwen2-VL / Qwen2.5-VL / Qwen3-VL (docs/contracts.md "Policy").

:class:`TransformersPolicy` renders the kit's messages with the checkpoint's chat template (tool
schemas in the system prompt, images as ``<|vision_start|><|image_pad|><|vision_end|>``, tool results
as ``<tool_response>`` blocks), runs the image-only Qwen-VL processor and ``model.generate`` in a
worker thread, and returns the raw decoded text. Tool calls stay as ``<tool_call>`` JSON in the text
(the harness parses them, WeAgent §3.1), so ``AssistantTurn.tool_calls`` is empty.

Every prompt is checked before the forward pass: the number of ``<|image_pad|>`` tokens in
``input_ids`` must equal the number of vision features the model will produce for the images
(``Σ prod(image_grid_thw) / spatial_merge_size²``); a mismatch raises :class:`PolicyError` naming
both counts instead of failing deep inside the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any

from kit.policy.tokens import chat_entry
from kit.types import AssistantTurn, Message, PolicyError, SamplingParams, Usage

IMAGE_PAD = "<|image_pad|>"


def _resolve_dtype(dtype, device: str):
    import torch

    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32
    resolved = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"unknown torch dtype {dtype!r}")
    return resolved


class TransformersPolicy:
    """A Qwen-VL checkpoint run in-process with transformers (CPU or one GPU).

    Args:
        model_path: local checkpoint folder (a tiny checkpoint of :mod:`kit.models.tiny` or a real
            Qwen2-VL / Qwen2.5-VL / Qwen3-VL folder).
        device: torch device string (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        dtype: torch dtype or its name; ``None``/``"auto"``: float32 on CPU, bfloat16 on GPU.
        max_new_tokens: upper bound on generated tokens per turn; the effective limit is
            ``min(sampling.max_tokens, max_new_tokens)`` (``None``: only ``sampling.max_tokens``).
        name: policy name for records (default ``transformers:<folder name>``).
        chat_template: Jinja template to render prompts with; ``None`` uses the checkpoint's own,
            unless it ignores ``tools`` (the stock Qwen2-VL template silently drops them), in which
            case the kit's Qwen2.5-style :data:`kit.models.qwen_tokenizer.QWEN_VL_CHAT_TEMPLATE`
            is used.

    Attributes:
        token_counter: :class:`kit.policy.tokens.QwenTokenCounter` built from the checkpoint's own
            tokenizer and image-processor limits.
        vision_token_pixels: pixels per vision-token side of the checkpoint's processor
            (``patch_size * merge_size``: 28 for Qwen2/2.5-VL, 32 for Qwen3-VL).

    Raises:
        FileNotFoundError: ``model_path`` is not a folder.
        ValueError: bad ``dtype`` or ``max_new_tokens``.
        PolicyError: the checkpoint cannot be loaded or has no chat template.
    """

    def __init__(
        self,
        model_path: str | Path,
        device: str = "cpu",
        dtype: Any = None,
        max_new_tokens: int | None = None,
        name: str | None = None,
        chat_template: str | None = None,
    ):
        import torch
        from transformers import AutoModelForImageTextToText

        from kit.models.processor import load_image_only_processor
        from kit.models.qwen_tokenizer import QWEN_VL_CHAT_TEMPLATE
        from kit.models.tiny import quiet_hf_progress
        from kit.policy.tokens import QwenTokenCounter

        self.model_path = Path(model_path)
        if not self.model_path.is_dir():
            raise FileNotFoundError(f"checkpoint folder {self.model_path} does not exist")
        if max_new_tokens is not None and max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
        self.device = device
        self.dtype = _resolve_dtype(dtype, device)
        self.max_new_tokens = max_new_tokens
        self.name = name or f"transformers:{self.model_path.name}"
        try:
            self.processor = load_image_only_processor(self.model_path)
            with quiet_hf_progress():
                self.model = AutoModelForImageTextToText.from_pretrained(str(self.model_path), dtype=self.dtype)
        except (OSError, ValueError, KeyError) as e:
            raise PolicyError(f"cannot load checkpoint {self.model_path}: {e}") from e
        self.model.to(device).eval()
        self.tokenizer = self.processor.tokenizer
        template = chat_template or getattr(self.tokenizer, "chat_template", None)
        if not template:
            raise PolicyError(f"checkpoint {self.model_path} has no chat template")
        if chat_template is None and "tools" not in template:
            template = QWEN_VL_CHAT_TEMPLATE
        # Processor and tokenizer render with the same template (the counter measures through it).
        self.tokenizer.chat_template = self.processor.chat_template = template
        self.image_token_id = int(self.processor.image_token_id)
        vcfg = getattr(self.model.config, "vision_config", None)
        self.spatial_merge_size = int(getattr(vcfg, "spatial_merge_size", self.processor.merge_size))
        gen_cfg = self.model.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_token_ids: list[int] = [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
        self.pad_token_id = int(
            gen_cfg.pad_token_id if gen_cfg.pad_token_id is not None else self.tokenizer.pad_token_id
        )
        text_cfg = self.model.config.get_text_config()
        self.max_context_tokens = int(getattr(text_cfg, "max_position_embeddings", 0) or 0) or None
        self.token_counter = QwenTokenCounter.from_processor(self.processor, name=self.name)
        # Pixels per vision-token side (patch_size * merge_size: 28 Qwen2/2.5-VL, 32 Qwen3-VL); the
        # harness sizes its vision-token caps (Table 4 thumbnails) with it.
        self.vision_token_pixels = int(self.processor.factor)
        self._lock = threading.Lock()  # one generate at a time; loop-agnostic, unlike asyncio.Lock
        self._torch = torch

    # ------------------------------------------------------------------ message conversion
    def to_chat(
        self, messages: list[Message], workspace: str | Path | None
    ) -> tuple[list[dict[str, Any]], list[Path]]:
        """Convert kit messages to chat-template dicts and the ordered image paths.

        Image parts become ``{"type": "image"}`` and their files (relative to ``workspace``) are
        returned in rendering order. Assistant ``tool_calls`` are rendered as ``<tool_call>`` blocks
        only when the text does not already contain them (text from this policy keeps the model's
        own blocks; structured calls from function-calling servers have none in the text).

        Raises:
            PolicyError: empty message list, an image part without a filename, images without a
                ``workspace``, an absolute or escaping path, or a missing file.
        """
        if not messages:
            raise PolicyError("no messages to generate from")
        root = Path(workspace).resolve() if workspace is not None else None
        chat: list[dict[str, Any]] = []
        images: list[Path] = []
        for i, m in enumerate(messages):
            for part in m.content:
                if part.type != "image":
                    continue
                if not part.image:
                    raise PolicyError(f"message {i} ({m.role}) has an image part without a filename")
                if root is None:
                    raise PolicyError(f"message {i} ({m.role}) has image {part.image!r} but no workspace was given")
                rel = Path(part.image)
                path = (root / rel).resolve()
                if rel.is_absolute() or not path.is_relative_to(root):
                    raise PolicyError(f"image {part.image!r} in message {i} is not a path inside the workspace")
                if not path.is_file():
                    raise PolicyError(f"image {part.image!r} in message {i} does not exist in workspace {root}")
                images.append(path)
            chat.append(chat_entry(m))
        return chat, images

    def render(self, messages: list[Message], tools: list[dict[str, Any]], workspace: str | Path | None = None) -> str:
        """The prompt text (before image-placeholder expansion) ending with the generation prompt."""
        chat, _ = self.to_chat(messages, workspace)
        return self._render_chat(chat, tools)

    def _render_chat(self, chat: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                chat, tools=list(tools) or None, tokenize=False, add_generation_prompt=True
            )
        except Exception as e:  # jinja errors: unknown role or part type
            raise PolicyError(f"chat template failed: {e}") from e

    def prepare_inputs(
        self, messages: list[Message], tools: list[dict[str, Any]], workspace: str | Path | None = None
    ):
        """Model inputs (``input_ids``, ``attention_mask``, ``mm_token_type_ids``, ``pixel_values``,
        ``image_grid_thw``; batch of 1, on the CPU) for these messages, after the placeholder check.

        Raises:
            PolicyError: conversion errors (see :meth:`to_chat`), unreadable images, or a mismatch
                between ``<|image_pad|>`` placeholders and image features.
        """
        from kit.images import ImageError, load_image_file

        chat, paths = self.to_chat(messages, workspace)
        prompt = self._render_chat(chat, tools)
        n_placeholders = prompt.count(IMAGE_PAD)
        if n_placeholders != len(paths):
            raise PolicyError(
                f"image placeholder mismatch: the prompt has {n_placeholders} {IMAGE_PAD} placeholders but "
                f"{len(paths)} images were given (a message text contains a literal {IMAGE_PAD}?)"
            )
        images = []
        for p in paths:
            try:
                images.append(load_image_file(p).convert("RGB"))  # the kit's one decoder: upright as displayed (EXIF)
            except (OSError, ImageError) as e:
                raise PolicyError(f"cannot read image {p.name}: {e}") from e
        try:
            inputs = self.processor(text=[prompt], images=images or None, return_tensors="pt")
        except ValueError as e:
            raise PolicyError(f"processor rejected the prompt: {e}") from e
        self.check_image_tokens(inputs)
        return inputs

    def check_image_tokens(self, inputs) -> None:
        """Raise :class:`PolicyError` unless ``<|image_pad|>`` tokens equal the image features.

        Features per image are ``prod(image_grid_thw) / spatial_merge_size²`` with the *model's*
        merge size, so a processor configured differently from the model is caught too.
        """
        n_pad = int((inputs["input_ids"] == self.image_token_id).sum())
        grid = inputs.get("image_grid_thw")
        n_feat = 0 if grid is None else int(grid.prod(dim=-1).sum()) // (self.spatial_merge_size**2)
        if n_pad != n_feat:
            n_img = 0 if grid is None else int(grid.shape[0])
            raise PolicyError(
                f"image token mismatch: input_ids has {n_pad} {IMAGE_PAD} tokens but the {n_img} image(s) "
                f"give {n_feat} vision features (image_grid_thw / merge {self.spatial_merge_size}²)"
            )

    def prompt_token_count(
        self, messages: list[Message], tools: list[dict[str, Any]], workspace: str | Path | None = None
    ) -> int:
        """Exact prompt length in tokens (text + expanded image placeholders + generation prompt)."""
        return int(self.prepare_inputs(messages, tools, workspace)["input_ids"].shape[-1])

    # ------------------------------------------------------------------ generation
    async def generate(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]],
        sampling: SamplingParams,
        workspace: str | None = None,
    ) -> AssistantTurn:
        """Generate one assistant turn (the :class:`kit.types.Policy` protocol).

        Runs in a worker thread; concurrent calls are serialized. ``sampling.temperature <= 0``
        decodes greedily; otherwise samples with ``temperature`` and ``top_p`` (no top-k).
        ``sampling.seed`` makes sampling reproducible without touching the global RNG state.

        Returns:
            ``AssistantTurn`` with the decoded text (special tokens removed, ``<tool_call>`` blocks
            kept), ``finish_reason`` ``"stop"`` (EOS) or ``"length"`` (token limit hit), and usage.

        Raises:
            PolicyError: bad messages or images, placeholder mismatch, prompt longer than the model's
                context, or a failure inside the model.
        """
        return await asyncio.to_thread(self._generate_blocking, messages, list(tools), sampling, workspace)

    def _generate_blocking(self, messages, tools, sampling: SamplingParams, workspace) -> AssistantTurn:
        torch = self._torch
        limit = sampling.max_tokens if self.max_new_tokens is None else min(sampling.max_tokens, self.max_new_tokens)
        if limit <= 0:
            raise PolicyError(f"max_tokens must be positive, got {sampling.max_tokens}")
        with self._lock:
            t0 = time.perf_counter()
            inputs = self.prepare_inputs(messages, tools, workspace)
            n_prompt = int(inputs["input_ids"].shape[-1])
            if self.max_context_tokens and n_prompt + 1 > self.max_context_tokens:
                raise PolicyError(
                    f"prompt has {n_prompt} tokens; the model's context is {self.max_context_tokens} tokens"
                )
            if self.max_context_tokens:
                limit = min(limit, self.max_context_tokens - n_prompt)
            inputs = inputs.to(self.device)
            if "pixel_values" in inputs:
                inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
            gen_kwargs: dict[str, Any] = dict(
                max_new_tokens=limit,
                eos_token_id=self.eos_token_ids,
                pad_token_id=self.pad_token_id,
                use_cache=True,
            )
            if sampling.temperature > 0:
                gen_kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
            else:
                gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
            t1 = time.perf_counter()
            try:
                with self._seeded(sampling.seed), torch.inference_mode():
                    out = self.model.generate(**inputs, **gen_kwargs)
            except PolicyError:
                raise
            except Exception as e:  # a failure inside the model must not crash the harness loop
                raise PolicyError(f"generation failed: {type(e).__name__}: {e}") from e
            t2 = time.perf_counter()
        new = out[0, n_prompt:].tolist()
        stopped = bool(new) and new[-1] in self.eos_token_ids
        body = new[:-1] if stopped else new
        text = self.tokenizer.decode(body, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        finish = "stop" if stopped else ("length" if len(new) >= limit else "stop")
        n_images = 0 if inputs.get("image_grid_thw") is None else int(inputs["image_grid_thw"].shape[0])
        return AssistantTurn(
            text=text,
            tool_calls=[],
            finish_reason=finish,
            usage=Usage(prompt_tokens=n_prompt, completion_tokens=len(new)),
            raw={
                "model": self.name,
                "images": n_images,
                "image_tokens": int((inputs["input_ids"] == self.image_token_id).sum()),
                "completion_ids": new,
                "prepare_s": round(t1 - t0, 4),
                "generate_s": round(t2 - t1, 4),
            },
        )

    @contextlib.contextmanager
    def _seeded(self, seed: int | None):
        """Seed torch's RNG for one generate call and restore the previous state afterwards."""
        if seed is None:
            yield
            return
        torch = self._torch
        devices = []
        if self.device.startswith("cuda"):
            idx = torch.device(self.device).index
            devices = [idx if idx is not None else torch.cuda.current_device()]
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(seed))
            yield
