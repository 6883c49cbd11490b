"""Token counting the way Qwen-VL models count (context budgets, WeAgent Table 5; V-Fold's τ).

:class:`QwenTokenCounter` implements :class:`kit.types.TokenCounter`:

* text: the model's own tokenizer (default: the offline real Qwen tokenizer of
  :mod:`kit.models.qwen_tokenizer`); special-token strings in the text count as the special token,
  as in the chat template path of transformers and vLLM;
* images: Qwen's smart resize (both sides rounded to multiples of ``factor = patch_size *
  merge_size``, 28 px for Qwen2/2.5-VL and 32 px for Qwen3-VL, area clamped to
  ``[min_pixels, max_pixels]``), then one vision token per ``factor x factor`` block:
  ``(h' / factor) * (w' / factor)``. The resize is transformers' own function, so the count equals
  the number of ``<|image_pad|>`` tokens the processor inserts.

Chat-template framing (``<|im_start|>role\\n`` … ``<|im_end|>\\n``, the tool block, the
``<|vision_start|>``/``<|vision_end|>`` pair around each image) is measured once per counter by
rendering probes through the tokenizer's chat template, so it follows the template actually used.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.types import Message

# Real checkpoints' processor limits (pixels): Qwen2-VL / Qwen2.5-VL and Qwen3-VL preprocessor
# configs on the Hub. Serving stacks may override them (e.g. vLLM ``mm_processor_kwargs``).
QWEN2_VL_IMAGE_DEFAULTS = {"patch_size": 14, "merge_size": 2, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 16384}
QWEN3_VL_IMAGE_DEFAULTS = {"patch_size": 16, "merge_size": 2, "min_pixels": 65_536, "max_pixels": 16_777_216}

_PROBE_SYSTEM = "S"
_PROBE_TEXT = "X"


class QwenTokenCounter:
    """Counts Qwen-VL prompt tokens: text with the tokenizer, images with smart resize.

    Args:
        tokenizer: a transformers fast tokenizer (``PreTrainedTokenizerFast``) with a chat
            template; ``None`` uses the offline real Qwen tokenizer, shared between counters of the
            process.
        flavor: with ``tokenizer=None``, ``"qwen2_5"`` (Qwen2/2.5-VL added tokens) or ``"qwen3"``.
        patch_size, merge_size: vision patch size (14 Qwen2/2.5-VL, 16 Qwen3-VL) and spatial merge
            (2): ``factor = patch_size * merge_size`` pixels per vision token side.
        min_pixels, max_pixels: smart-resize area limits in pixels.
        name: label for logs and run manifests.

    Raises:
        ValueError: a tokenizer without a Rust backend, or non-positive/inverted limits.
    """

    def __init__(
        self,
        tokenizer=None,
        *,
        patch_size: int = QWEN2_VL_IMAGE_DEFAULTS["patch_size"],
        merge_size: int = QWEN2_VL_IMAGE_DEFAULTS["merge_size"],
        min_pixels: int = QWEN2_VL_IMAGE_DEFAULTS["min_pixels"],
        max_pixels: int = QWEN2_VL_IMAGE_DEFAULTS["max_pixels"],
        flavor: str = "qwen2_5",
        name: str | None = None,
    ):
        if patch_size <= 0 or merge_size <= 0:
            raise ValueError(f"patch_size and merge_size must be positive, got {patch_size}, {merge_size}")
        if not (0 < min_pixels <= max_pixels):
            raise ValueError(f"need 0 < min_pixels <= max_pixels, got {min_pixels}, {max_pixels}")
        if tokenizer is None:
            from kit.extras import require

            require("models", "transformers", "tokenizers", feature="the Qwen token counter (the API policy's default; "
                    "pass token_counter= to count otherwise)")
            from kit.models.qwen_tokenizer import shared_qwen_tokenizer

            tokenizer = shared_qwen_tokenizer(flavor)
        self.tokenizer = tokenizer
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError(f"{type(self.tokenizer).__name__} has no fast (Rust) backend; pass a fast tokenizer")
        self._backend = backend
        self.patch_size, self.merge_size = int(patch_size), int(merge_size)
        self.factor = self.patch_size * self.merge_size
        self.min_pixels, self.max_pixels = int(min_pixels), int(max_pixels)
        self.name = name or getattr(self.tokenizer, "name_or_path", "") or "qwen"
        self._framing: dict[str, int] | None = None
        self._framing_lock = threading.Lock()
        # Per-instance caches: the harness re-counts unchanged messages every turn. count_text keys
        # are the caller's strings themselves (no copies); message keys are JSON copies, so fewer.
        self._count_cached = functools.lru_cache(maxsize=8192)(self._count_uncached)
        self._tools_cached = functools.lru_cache(maxsize=64)(self._count_tools_uncached)
        self._message_cached = functools.lru_cache(maxsize=1024)(self._count_message_uncached)

    # ------------------------------------------------------------------ TokenCounter protocol
    def count_text(self, text: str) -> int:
        """Number of tokens of ``text`` (no special tokens added around it).

        Raises:
            TypeError: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise TypeError(f"count_text expects str, got {type(text).__name__}")
        if not text:
            return 0
        return self._count_cached(text)

    def count_image(self, width: int, height: int) -> int:
        """Vision tokens (``<|image_pad|>`` count) of a ``width`` x ``height`` pixel image.

        Excludes the two framing tokens ``<|vision_start|>``/``<|vision_end|>`` (see
        :attr:`image_overhead`).

        Raises:
            ValueError: non-positive size, or aspect ratio above 200 (Qwen's processor refuses it).
        """
        h, w = self.resized_size(width, height)
        return (h // self.factor) * (w // self.factor)

    # ------------------------------------------------------------------ extras
    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """``(height', width')`` in pixels after Qwen's smart resize (multiples of :attr:`factor`)."""
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        if int(width) <= 0 or int(height) <= 0:
            raise ValueError(f"image size must be positive, got {width}x{height}")
        return smart_resize(
            int(height), int(width), factor=self.factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Token counts of many strings in one batched tokenizer call (parallel in the Rust backend)."""
        if any(not isinstance(t, str) for t in texts):
            raise TypeError("count_texts expects a sequence of str")
        encs = self._backend.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encs]

    @property
    def image_overhead(self) -> int:
        """Framing tokens around each image (``<|vision_start|>``, ``<|vision_end|>``): 2."""
        return self._measure()["image"]

    @property
    def generation_prompt_tokens(self) -> int:
        """Tokens of the generation prompt ``<|im_start|>assistant\\n`` (3 with the Qwen vocabulary)."""
        return self._measure()["generation"]

    def count_message_overhead(self, role: str, previous_role: str | None = None) -> int:
        """Framing tokens the chat template adds around one message of ``role``.

        ``system``/``user``/``assistant``: ``<|im_start|>role\\n`` + ``<|im_end|>\\n`` (5 tokens
        with the Qwen vocabulary). ``tool``: results of consecutive tool messages share one user
        turn, so the first one (``previous_role != "tool"``) pays ``<|im_start|>user`` +
        ``<|im_end|>\\n`` besides its ``\\n<tool_response>\\n`` … ``\\n</tool_response>`` block, and a
        following one (``previous_role == "tool"``) only the block.

        A message then costs about ``overhead + count_text(text) + Σ (count_image(w, h) +
        image_overhead)`` and a prompt about ``count_tools(tools) + Σ messages +
        generation_prompt_tokens``: cheap, and within one token per tool result (text ending in
        punctuation merges with the following ``\\n``) plus one at the system/tool-block boundary
        when texts do not start with whitespace. :meth:`count_message` and :meth:`count_prompt`
        are exact.

        Raises:
            ValueError: unknown role.
        """
        framing = self._measure()
        if role not in ("system", "user", "assistant", "tool"):
            raise ValueError(f"unknown role {role!r}")
        if role == "tool" and previous_role == "tool":
            return framing["tool_continued"]
        return framing[role]

    def count_message(
        self,
        message: Message | dict[str, Any],
        image_sizes: Sequence[tuple[int, int]] = (),
        previous_role: str | None = None,
        *,
        first: bool = False,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        """Exact tokens one message adds to a prompt, rendered through the chat template.

        Args:
            message: a :class:`kit.types.Message` or a chat-template dict (``role``, ``content``
                as a string or a list of ``{"type": "text"|"image"}`` parts, optional ``tool_calls``).
            image_sizes: ``(width, height)`` in pixels of the message's images, in order.
            previous_role: role of the message before it (consecutive ``tool`` messages share one
                user turn).
            first: the message opens the conversation. Its count then includes the system block:
                its own text when it is the system message, else the template's default system
                prompt, plus the tool block for ``tools``.
            tools: tool schemas rendered in the system block (only with ``first=True``).

        ``count_message(m0, first=True, tools=...) + Σ count_message(m_i, previous_role=role_{i-1})
        + generation_prompt_tokens`` equals the processor's ``input_ids`` length. Costs one
        template render per distinct message (cached).

        Raises:
            ValueError: ``image_sizes`` does not match the message's image parts, bad sizes, or
                ``tools`` without ``first``.
        """
        entry = chat_entry(message) if isinstance(message, Message) else message
        content = entry.get("content")
        n_images = 0
        if isinstance(content, list):
            n_images = sum(1 for p in content if isinstance(p, dict) and p.get("type") in ("image", "image_url"))
        if n_images != len(image_sizes):
            raise ValueError(f"message has {n_images} image parts but {len(image_sizes)} image sizes were given")
        if tools and not first:
            raise ValueError("tools are rendered in the first (system) message: pass first=True")
        key = json.dumps([entry, previous_role == "tool", first, list(tools or [])], ensure_ascii=False)
        n = self._message_cached(key)
        return n + sum(self.count_image(w, h) - 1 for w, h in image_sizes)  # template renders one pad per image

    def _count_message_uncached(self, key: str) -> int:
        entry, after_tool, first, tools = json.loads(key)
        if first:
            return self._render_count([entry], tools=tools or None)
        sys_msg = {"role": "system", "content": _PROBE_SYSTEM}
        prefix = [sys_msg]
        if after_tool and entry["role"] == "tool":
            prefix.append({"role": "tool", "content": _PROBE_TEXT})
        return self._render_count(prefix + [entry]) - self._render_count(prefix)

    def count_prompt(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] = (),
        image_size: Any = None,
        add_generation_prompt: bool = True,
    ) -> int:
        """Exact prompt length in tokens of a whole conversation (one render, one tokenization).

        Args:
            messages: kit messages, in order.
            tools: tool schemas rendered into the system block.
            image_size: ``callable(ref) -> (width, height)`` or a mapping ref -> (width, height)
                for the images the messages reference (e.g. the evidence registry's sizes).
            add_generation_prompt: count the trailing ``<|im_start|>assistant\\n``.

        Raises:
            ValueError: an image reference without a size.
        """
        lookup = image_size.__getitem__ if hasattr(image_size, "__getitem__") else image_size
        n_extra = 0
        for m in messages:
            for ref in m.image_refs():
                if lookup is None:
                    raise ValueError(f"image {ref!r} needs a size: pass image_size")
                try:
                    w, h = lookup(ref)
                except KeyError:
                    raise ValueError(f"no size for image {ref!r}") from None
                n_extra += self.count_image(w, h) - 1
        chat = [chat_entry(m) for m in messages]
        n = self._render_count(chat, tools=list(tools) or None, add_generation_prompt=add_generation_prompt)
        return n + n_extra

    def count_tools(self, tools: Sequence[dict[str, Any]]) -> int:
        """Tokens the tool block adds to the system prompt for these OpenAI-style schemas (0 if none).

        Measured after a system text ending in a letter; when the real system text ends in
        punctuation its last character can merge with the block's leading newlines (one token less).
        Use ``count_message(system, first=True, tools=tools)`` for the exact joint count.
        """
        if not tools:
            return 0
        # Key order is kept (no sort_keys): the template dumps schemas verbatim, so order changes tokens.
        key = json.dumps(list(tools), ensure_ascii=False)
        return self._tools_cached(key)

    def _count_tools_uncached(self, key: str) -> int:
        sys_msg = [{"role": "system", "content": _PROBE_SYSTEM}]
        return self._render_count(sys_msg, tools=json.loads(key)) - self._render_count(sys_msg)

    # ------------------------------------------------------------------ internals
    def _count_uncached(self, text: str) -> int:
        return len(self._backend.encode(text, add_special_tokens=False).ids)

    def _render_count(self, messages, tools=None, add_generation_prompt=False) -> int:
        text = self.tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return self._count_uncached(text)

    def _measure(self) -> dict[str, int]:
        if self._framing is not None:
            return self._framing
        with self._framing_lock:
            if self._framing is not None:
                return self._framing
            if not getattr(self.tokenizer, "chat_template", None):
                raise ValueError(f"tokenizer {self.name} has no chat template; framing cannot be measured")
            sys_msg = {"role": "system", "content": _PROBE_SYSTEM}
            base = self._render_count([sys_msg])
            x = self._count_uncached(_PROBE_TEXT)
            framing = {}
            for role in ("system", "user", "assistant", "tool"):
                framing[role] = self._render_count([sys_msg, {"role": role, "content": _PROBE_TEXT}]) - base - x
            one_tool = self._render_count([sys_msg, {"role": "tool", "content": _PROBE_TEXT}])
            two_tools = self._render_count(
                [sys_msg, {"role": "tool", "content": _PROBE_TEXT}, {"role": "tool", "content": _PROBE_TEXT}]
            )
            framing["tool_continued"] = two_tools - one_tool - x
            with_img = self._render_count(
                [sys_msg, {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": _PROBE_TEXT}]}]
            )
            framing["image"] = with_img - base - x - framing["user"] - 1  # minus the single <|image_pad|>
            framing["generation"] = self._render_count([sys_msg], add_generation_prompt=True) - base
            self._framing = framing
            return framing

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_processor(cls, processor, name: str | None = None) -> QwenTokenCounter:
        """Counter matching a loaded Qwen-VL processor (its tokenizer and image-processor limits)."""
        ip = processor.image_processor
        size = dict(ip.size) if getattr(ip, "size", None) else {}
        return cls(
            processor.tokenizer,
            patch_size=int(ip.patch_size),
            merge_size=int(ip.merge_size),
            min_pixels=int(size.get("shortest_edge") or getattr(ip, "min_pixels", None) or 56 * 56),
            max_pixels=int(size.get("longest_edge") or getattr(ip, "max_pixels", None) or 28 * 28 * 1280),
            name=name,
        )


def chat_entry(message: Message) -> dict[str, Any]:
    """A kit :class:`Message` as a chat-template dict (image parts become ``{"type": "image"}``).

    Assistant ``tool_calls`` are attached only when the text does not already hold ``<tool_call>``
    blocks: text from in-process policies keeps the model's own blocks, while function-calling
    servers return structured calls with none in the text.
    """
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if part.type == "text":
            parts.append({"type": "text", "text": part.text or ""})
        else:
            parts.append({"type": "image"})
    entry: dict[str, Any] = {"role": message.role, "content": parts}
    if message.role == "assistant" and message.tool_calls and "<tool_call>" not in message.text():
        entry["tool_calls"] = [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in message.tool_calls
        ]
    return entry


def _image_settings_from_dir(path: Path) -> dict[str, int]:
    """Read patch/merge size and pixel limits from a checkpoint's processor config JSON."""
    cfg: dict[str, Any] | None = None
    pc = path / "processor_config.json"
    if pc.is_file():
        cfg = json.loads(pc.read_text()).get("image_processor")
    if cfg is None and (path / "preprocessor_config.json").is_file():
        cfg = json.loads((path / "preprocessor_config.json").read_text())
    if cfg is None:
        raise FileNotFoundError(f"{path} has no processor_config.json or preprocessor_config.json")
    size = cfg.get("size") or {}
    defaults = QWEN3_VL_IMAGE_DEFAULTS if int(cfg.get("patch_size", 14)) == 16 else QWEN2_VL_IMAGE_DEFAULTS
    return {
        "patch_size": int(cfg.get("patch_size", defaults["patch_size"])),
        "merge_size": int(cfg.get("merge_size", defaults["merge_size"])),
        "min_pixels": int(size.get("shortest_edge") or cfg.get("min_pixels") or defaults["min_pixels"]),
        "max_pixels": int(size.get("longest_edge") or cfg.get("max_pixels") or defaults["max_pixels"]),
    }


def counter_for(model_or_path: str | os.PathLike, **overrides: int) -> QwenTokenCounter:
    """Build the token counter for a checkpoint folder or a served model name.

    * A local folder: its own tokenizer (``AutoTokenizer``) and the image settings of its
      ``processor_config.json`` / ``preprocessor_config.json``.
    * Any other string (e.g. ``"Qwen/Qwen2.5-VL-7B-Instruct"`` served by vLLM): the offline real Qwen
      tokenizer with the real checkpoints' image settings — Qwen3-VL (16-px patches, Qwen3 added
      tokens) when the name contains ``qwen3``, else Qwen2/2.5-VL. For non-Qwen models this is an
      approximation.

    ``overrides`` (``patch_size``, ``merge_size``, ``min_pixels``, ``max_pixels``) replace the
    image settings, e.g. to mirror a server's ``mm_processor_kwargs``.

    Raises:
        FileNotFoundError: a folder without processor config; OSError from tokenizer loading.
        TypeError: an unknown override key.
    """
    bad = set(overrides) - {"patch_size", "merge_size", "min_pixels", "max_pixels"}
    if bad:
        raise TypeError(f"unknown override(s) {sorted(bad)}")
    p = Path(model_or_path).expanduser()
    if p.is_dir():
        from transformers import AutoTokenizer

        settings = {**_image_settings_from_dir(p), **overrides}
        return QwenTokenCounter(AutoTokenizer.from_pretrained(str(p)), name=str(p), **settings)
    name = str(model_or_path)
    qwen3 = "qwen3" in name.lower()
    settings = {**(QWEN3_VL_IMAGE_DEFAULTS if qwen3 else QWEN2_VL_IMAGE_DEFAULTS), **overrides}
    return QwenTokenCounter(None, flavor="qwen3" if qwen3 else "qwen2_5", name=name, **settings)
