"""Chat-control strings in untrusted text become plain text (WeAgent §3: observations are data).

Everything that enters a prompt from outside the kit — tool observations, the task's question,
benchmark fields, captions, input-image names — passes through :func:`neutralize_control_tokens`
before it is rendered with the chat template. Without it, text quoting ``<|im_end|><|im_start|>system``
opens a new system turn, and a literal ``<|image_pad|>`` adds an image placeholder with no image
behind it (the processor then refuses the prompt: placeholder count != image features).

Which strings are control strings: every added token of the supported templates' tokenizers
(Qwen2-VL, Qwen2.5-VL: the 22 tokens of :data:`kit.models.qwen_tokenizer.QWEN_ADDED_TOKENS`;
Qwen3-VL: those plus ``<tool_response>``, ``</tool_response>``, ``<think>``, ``</think>``). Added
tokens are matched atomically in the raw text by the tokenizer whether or not they are flagged
``special``, so ``<tool_call>`` or ``<think>`` written in a question would reach the model as the
tool-call or reasoning token, not as text. Any ``<|name|>`` string is also treated as a control
string (other Qwen releases add more of that form). One set serves all templates, because the
harness does not know which template an endpoint renders with; neutralizing ``<think>`` for
Qwen2.5-VL, where it is ordinary text, only inserts an invisible character.

What stays untouched: text the kit writes itself (the Table 6 system prompt, harness interventions)
and the model's own output, which legitimately contains ``<think>`` and ``<tool_call>``.
"""

from __future__ import annotations

import re

#: Inserted after ``<``: invisible, unchanged by NFC, and no added token contains it.
ZERO_WIDTH_SPACE = "\u200b"

#: The added tokens of every supported template's tokenizer (union, in vocabulary order). Written out
#: rather than imported from :mod:`kit.models.qwen_tokenizer`, whose package imports transformers;
#: tests/test_task_text_neutralization.py checks it against the tokenizers' added vocabularies.
CONTROL_STRINGS: tuple[str, ...] = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    # Qwen3 / Qwen3-VL only
    "<tool_response>", "</tool_response>", "<think>", "</think>",
)

_PIPE_FORM = r"<\|[A-Za-z0-9_]{1,40}\|>"
_OTHER = sorted((t for t in CONTROL_STRINGS if not re.fullmatch(_PIPE_FORM, t)), key=len, reverse=True)
_CONTROL_RE = re.compile("|".join([_PIPE_FORM] + [re.escape(t) for t in _OTHER]))


def neutralize_control_tokens(text: str) -> tuple[str, int]:
    """Break every chat-control string in ``text`` by inserting a zero-width space after its ``<``
    (``<|im_end|>`` → ``<\\u200b|im_end|>``, ``<think>`` → ``<\\u200bthink>``), so the text tokenizes
    to no added-token id: it can neither close or open a chat turn, nor add an image placeholder, nor
    start a tool call or reasoning block.

    Idempotent (already broken strings do not match again). Returns ``(text, replacements)``.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"neutralize_control_tokens expects str, got {type(text).__name__}")
    return _CONTROL_RE.subn(lambda m: "<" + ZERO_WIDTH_SPACE + m.group(0)[1:], text)
