"""Long-horizon episodes on the local web for V-Fold studies (POINTS-Seeker §4.3 "long-horizon settings").

V-Fold only acts once a history passes τ = 8k tokens, i.e. after many tool calls. Tiny random
models stop early and real models need a GPU, so :class:`ReaderPolicy` — a scripted reader, **not a
model** — produces real long histories through the real harness and tools: for each query it runs
``web_search``, then ``web_extract`` on the best result it has not read yet, and finally answers with
what it read. Every observation is genuine tool output (local ZIM pages summarized by the harness),
which is what rendering, folding and token accounting need.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kit.types import AssistantTurn, Message, SamplingParams, Usage

_URL = re.compile(r"URL: (\S+)")


class ReaderPolicy:
    """Deterministic scripted reader (implements :class:`kit.types.Policy`).

    Args:
        queries: search queries, one per reading step (cycled when ``n_reads`` is larger).
        n_reads: pages to read (each costs a search and an extract turn).
        token_counter: the counter the harness budgets with (e.g. ``processor_counter("qwen2_vl")``).
        goal: the ``goal`` argument of every ``web_extract`` call (default: the task question).

    Raises:
        ValueError: no queries or ``n_reads < 1``.
    """

    name = "scripted-reader"

    def __init__(self, queries: list[str], n_reads: int, token_counter, goal: str | None = None,
                 max_context_tokens: int | None = None):
        if not queries or n_reads < 1:
            raise ValueError("ReaderPolicy needs at least one query and n_reads >= 1")
        self.queries = list(queries)
        self.n_reads = n_reads
        self.token_counter = token_counter
        self.goal = goal
        self.max_context_tokens = max_context_tokens
        self.contexts: list[list[Message]] = []  # what the policy was shown each turn

    async def generate(self, messages: list[Message], tools: list[dict[str, Any]], sampling: SamplingParams,
                       workspace: str | None = None) -> AssistantTurn:
        self.contexts.append(list(messages))
        text = self.next_text(messages, tools)
        return AssistantTurn(text=text, usage=Usage(completion_tokens=self.token_counter.count_text(text)))

    def next_text(self, messages: list[Message], tools: list[dict[str, Any]]) -> str:
        """The next assistant output for the model-facing ``messages``."""
        steps = sum(1 for m in messages if m.role == "assistant")
        question = next((m.text() for m in messages if m.role == "user"), "").split("\n\nRegistered image paths:")[0]
        read = set(_extracted_urls(messages))
        if tools and steps < 2 * self.n_reads:
            i = steps // 2
            if steps % 2 == 0:
                return _call("web_search", {"query": self.queries[i % len(self.queries)], "num": 5},
                             f"Search step {i + 1}.")
            last = next((m.text() for m in reversed(messages) if m.role == "tool"), "")
            urls = [u for u in _URL.findall(last) if u not in read]
            if urls:
                return _call("web_extract", {"urls": [urls[0]], "goal": self.goal or question}, f"Read result {i + 1}.")
        titles = re.findall(r"^## (.+)\nURL: ", "\n".join(m.text() for m in messages if m.role == "tool" and m.name == "web_extract"), re.M)
        return ("<think>I have read enough.</think><response>Pages read: " + "; ".join(titles[:20]) + "</response>")


def _extracted_urls(messages: list[Message]) -> list[str]:
    from kit.harness.parsing import parse_turn

    out: list[str] = []
    for m in messages:
        if m.role != "assistant":
            continue
        if m.tool_calls:
            calls = [(c.name, _loads(c.arguments)) for c in m.tool_calls]
        else:
            calls = [(c.name, c.arguments) for c in parse_turn(m.text(), []).calls]
        for name, args in calls:
            if name == "web_extract" and isinstance(args, dict):
                out += [u for u in args.get("urls") or [] if isinstance(u, str)]
    return out


def _call(name: str, args: dict[str, Any], think: str) -> str:
    return f"<think>{think}</think>\n<tool_call>\n" + json.dumps({"name": name, "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def _loads(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return None
