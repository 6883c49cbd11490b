"""Scripted policy for tests and oracle demonstrations (docs/contracts.md "Policy").

A :class:`ScriptedPolicy` replays a list of assistant outputs (strings or :class:`AssistantTurn`), or
asks a callable for the next output given the model-facing messages. It records every context it
was given (``calls``), which lets tests check exactly what a model would have seen (for example that
an image found by search is re-fed in the next turn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from kit.types import AssistantTurn, Message, PolicyError, SamplingParams, ToolCall, Usage


class CharTokenCounter:
    """Deterministic stand-in counter for tests without a tokenizer: one token per 4 characters and
    one vision token per 28x28 pixels (Qwen2-VL patching), so budgets behave like real ones."""

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4

    def count_image(self, width: int, height: int) -> int:
        return max(1, round(width / 28)) * max(1, round(height / 28))


class ScriptedPolicy:
    """Replays scripted assistant outputs.

    Args:
        script: outputs in order (``str`` = raw text; :class:`AssistantTurn` = full turn), or a callable
            ``(messages, tools) -> str | AssistantTurn``.
        token_counter: counter for the context budget (default :class:`CharTokenCounter`).
        latency_s: simulated generation latency (``asyncio.sleep``), for concurrency benchmarks.
        completion_tokens: reported completion tokens per turn (``None``: counted from the text).

    Raises:
        PolicyError: the script is exhausted.
    """

    def __init__(self, script: Sequence[str | AssistantTurn] | Callable[[list[Message], list[dict]], Any], *,
                 token_counter=None, latency_s: float = 0.0, completion_tokens: int | None = None,
                 name: str = "scripted", max_context_tokens: int | None = None):
        self.script = script
        self.token_counter = token_counter or CharTokenCounter()
        self.latency_s = latency_s
        self.completion_tokens = completion_tokens
        self.name = name
        self.max_context_tokens = max_context_tokens
        self.calls: list[dict[str, Any]] = []
        self._i = 0

    async def generate(self, messages: list[Message], tools: list[dict[str, Any]], sampling: SamplingParams,
                       workspace: str | None = None) -> AssistantTurn:
        self.calls.append({"messages": list(messages), "tools": tools, "sampling": sampling})
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if callable(self.script):
            out = self.script(messages, tools)
        else:
            if self._i >= len(self.script):
                raise PolicyError(f"scripted policy exhausted after {self._i} turns")
            out = self.script[self._i]
        self._i += 1
        if isinstance(out, AssistantTurn):
            return out
        n = self.completion_tokens if self.completion_tokens is not None else self.token_counter.count_text(out)
        finish = "length" if n > sampling.max_tokens else "stop"
        return AssistantTurn(text=out, finish_reason=finish, usage=Usage(completion_tokens=n))


def tool_call_text(name: str, arguments: dict[str, Any], think: str = "") -> str:
    """A Qwen-style text tool call, as an in-process model writes it."""
    import json

    return (f"<think>{think}</think>\n" if think else "") + "<tool_call>\n" + json.dumps(
        {"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def structured_call(name: str, arguments: dict[str, Any] | str, call_id: str = "call_0", text: str = "") -> AssistantTurn:
    """A function-calling turn, as an OpenAI-compatible server returns it."""
    import json

    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return AssistantTurn(text=text, tool_calls=[ToolCall(id=call_id, name=name, arguments=args)],
                         finish_reason="tool_calls")
