"""Model-facing context: what the policy sees each turn, and how many tokens it costs.

The episode record keeps every message; :class:`ContextBuilder` derives the model-facing list from it
(the full-harness default re-feeds every registered image in every later turn, WeAgent §3.1; the
"no image re-feed" ablation of Table 2 drops tool-returned images from later turns). Context
strategies such as V-Fold plug in here by overriding :meth:`ContextBuilder.build` and registering a
name (:func:`register_context_strategy`; ``HarnessConfig.context_strategy`` selects it).

:class:`TokenLedger` counts prompt tokens with the policy's own tokenizer and image processor,
incrementally: each message is counted once, so a turn costs only its new messages.
"""

from __future__ import annotations

import json
from typing import Any

from kit.harness.registry import EvidenceRegistry
from kit.types import ContentPart, Message, TokenCounter

# Qwen chat framing: "<|im_start|>{role}\n" ... "<|im_end|>\n" (3 + role + 2 tokens, rounded up)
MESSAGE_OVERHEAD_TOKENS = 6
IMAGE_FRAME_TOKENS = 2  # <|vision_start|> ... <|vision_end|>


class ContextBuilder:
    """Full harness context: every message, with its images, in every later turn.

    ``refeed_images=False`` implements the re-feed ablation: images returned by tools stay registered
    (tools can still use them by name) but are replaced by a text note in the model-facing context.
    """

    def __init__(self, refeed_images: bool = True):
        self.refeed_images = refeed_images

    def build(self, messages: list[Message], registry: EvidenceRegistry) -> list[Message]:
        """Return the model-facing messages (the input list is not modified)."""
        if self.refeed_images:
            return list(messages)
        out = []
        for m in messages:
            if m.role == "tool" and m.image_refs():
                parts = [p for p in m.content if p.type == "text"]
                parts.append(ContentPart(type="text", text="[images saved but not shown: " + ", ".join(m.image_refs()) + "]"))
                m = m.model_copy(update={"content": parts})
            out.append(m)
        return out


class TokenLedger:
    """Incremental prompt-token count of a message list (units: tokens of the policy's tokenizer).

    Message counts are cached by identity and by content, so appending a message costs one tokenizer
    call and re-counting an unchanged prefix is a dictionary lookup per message. Image tokens come from
    the registry's stored width/height through ``counter.count_image``.
    """

    def __init__(self, counter: TokenCounter, registry: EvidenceRegistry):
        self.counter = counter
        self.registry = registry
        self._cache: dict[tuple, int] = {}
        self._by_id: dict[int, tuple[Message, int]] = {}
        self._tools_key: tuple | None = None
        self.exact = hasattr(counter, "count_message") and hasattr(counter, "generation_prompt_tokens")
        self._exact: dict[tuple, tuple[Message, int]] = {}
        self._tools_tokens = 0

    def message_tokens(self, m: Message) -> int:
        hit = self._by_id.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        text = m.text()
        key = (m.role, text, tuple(m.image_refs()), tuple((c.name, c.arguments) for c in m.tool_calls))
        cached = self._cache.get(key)
        if cached is not None:
            self._by_id[id(m)] = (m, cached)
            return cached
        n = MESSAGE_OVERHEAD_TOKENS
        for c in m.tool_calls:
            text += f'<tool_call>\n{{"name": "{c.name}", "arguments": {c.arguments}}}\n</tool_call>'
        if m.role == "tool":
            text = "<tool_response>\n" + text + "\n</tool_response>"
        n += self.counter.count_text(text) if text else 0
        for ref in m.image_refs():
            try:
                e = self.registry.resolve(ref)
                n += self.counter.count_image(e.width, e.height) + IMAGE_FRAME_TOKENS
            except Exception:
                n += IMAGE_FRAME_TOKENS  # unresolvable refs are caught elsewhere; never crash counting
        self._cache[key] = n
        self._by_id[id(m)] = (m, n)  # holding m keeps its id from being reused
        return n

    def tools_tokens(self, tool_schemas: list[dict]) -> int:
        """Tokens of the tool block a chat template renders for function calling (counted once)."""
        key = tuple(id(s) for s in tool_schemas)  # the harness passes the same schema objects every turn
        if key != self._tools_key:
            self._tools_key = key
            self._tools_tokens = self.counter.count_text(
                "\n".join(json.dumps(s, ensure_ascii=False) for s in tool_schemas)) + 60 if tool_schemas else 0
        return self._tools_tokens

    def _image_size(self, ref: str) -> tuple[int, int]:
        e = self.registry.resolve(ref)
        return e.width, e.height

    def _exact_tokens(self, m: Message, previous_role: str | None, first: bool, tool_schemas: list[dict]) -> int:
        key = (id(m), previous_role, first, tuple(id(s) for s in tool_schemas) if first else ())
        hit = self._exact.get(key)
        if hit is not None and hit[0] is m:
            return hit[1]
        sizes = [self._image_size(r) for r in m.image_refs()]
        n = self.counter.count_message(m, sizes, previous_role, first=first,  # type: ignore[attr-defined]  # exact
                                       tools=tool_schemas if first else None)
        self._exact[key] = (m, n)
        return n

    def prompt_tokens(self, messages: list[Message], tool_schemas: list[dict]) -> int:
        """Total prompt tokens of ``messages`` plus the tool block and the generation prefix.

        With a counter that renders messages through the policy's chat template
        (:class:`kit.policy.tokens.QwenTokenCounter`) the count is exact; otherwise it is the sum of
        text and image tokens plus fixed framing estimates.
        """
        if self.exact and messages:
            total, prev = 0, None
            for i, m in enumerate(messages):
                total += self._exact_tokens(m, prev, i == 0, tool_schemas)
                prev = m.role
            return total + self.counter.generation_prompt_tokens  # type: ignore[attr-defined]  # exact: checked in __init__
        return sum(self.message_tokens(m) for m in messages) + self.tools_tokens(tool_schemas) + 3


# ------------------------------------------------------------------------------------ strategy registry
#: name -> factory ``(config, counter, **options) -> ContextBuilder``; ``counter`` is None for "full".
_STRATEGIES: dict[str, Any] = {}
#: built-in strategies whose module registers them on import (kept out of this module's imports so the
#: harness does not import V-Fold's renderer stack, and the two packages do not import each other)
_BUILTIN_MODULES = {"discard": "kit.vfold.fold", "summary": "kit.vfold.fold", "render_all": "kit.vfold.fold",
                    "vfold": "kit.vfold.fold"}
_NEEDS_COUNTER: set[str] = set()


def register_context_strategy(name: str, factory, *, needs_counter: bool = True, replace: bool = False) -> None:
    """Make ``HarnessConfig(context_strategy=name)`` build ``factory(config, counter, **options)``
    (``options``: ``summarizer``, ``renderer`` as given to :func:`make_context_builder`).

    Raises:
        ValueError: ``name`` is not a non-empty string, is registered (or built in) already and ``replace``
            is False, or ``factory`` is not callable.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a context strategy name is a non-empty string, got {name!r}")
    if not callable(factory):
        raise ValueError(f"context strategy {name!r}: the factory must be callable, got {type(factory).__name__}")
    if (name in _STRATEGIES or (name in _BUILTIN_MODULES and not _builtin_loading(name))) and not replace:
        raise ValueError(f"context strategy {name!r} is registered or built in already (pass replace=True)")
    _STRATEGIES[name] = factory
    (_NEEDS_COUNTER.add if needs_counter else _NEEDS_COUNTER.discard)(name)


def _builtin_loading(name: str) -> bool:
    # the module that provides a built-in strategy registers it while it is being imported
    import sys

    mod = sys.modules.get(_BUILTIN_MODULES[name])
    return mod is not None and getattr(getattr(mod, "__spec__", None), "_initializing", False)


def context_strategy_registry() -> dict[str, Any]:
    """The registered strategies (name → factory), built-ins not yet loaded excluded; a copy."""
    return dict(_STRATEGIES)


def context_strategies() -> list[str]:
    """Every selectable strategy name (registered or built in)."""
    return sorted(set(_STRATEGIES) | set(_BUILTIN_MODULES))


def make_context_builder(config, token_counter: TokenCounter | None = None, *, policy=None, summarizer=None,
                         renderer=None) -> ContextBuilder:
    """Builder for ``config.context_strategy`` with ``config.context_tau`` / ``context_keep``.

    ``"full"`` is the plain :class:`ContextBuilder`; the others (POINTS-Seeker Table 4: discard, summary,
    render_all, vfold — :mod:`kit.vfold.fold`) need a token counter (``token_counter`` or
    ``policy.token_counter``); ``"summary"`` needs ``summarizer``.

    Raises:
        ValueError: unknown strategy, no counter, or a strategy's own missing option.
    """
    import importlib

    name = config.context_strategy
    if name not in _STRATEGIES and name in _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES[name])
    if name not in _STRATEGIES:
        raise ValueError(f"unknown context strategy {name!r}; expected one of {context_strategies()}")
    counter = token_counter if token_counter is not None else getattr(policy, "token_counter", None)
    if name in _NEEDS_COUNTER and counter is None:
        raise ValueError(f"context strategy {name!r} needs the policy's token counter")
    builder = _STRATEGIES[name](config, counter, summarizer=summarizer, renderer=renderer)
    if not isinstance(builder, ContextBuilder):
        raise ValueError(f"context strategy {name!r}: its factory returned {type(builder).__name__}, not a "
                         "ContextBuilder")
    return builder


register_context_strategy("full", lambda config, counter, **_: ContextBuilder(refeed_images=config.refeed_images),
                          needs_counter=False)
