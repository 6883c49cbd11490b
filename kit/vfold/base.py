"""Base of V-Fold's context strategies (POINTS-Seeker §3.3): the history meter ``Len(H_t)``, the
per-episode state, the threshold-triggered :class:`FoldingContext` and :class:`FullContext`.

Split out of :mod:`kit.vfold.fold` (which re-exports every name here) to keep modules small.
"""

from __future__ import annotations

import hashlib
import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from kit.harness.context import MESSAGE_OVERHEAD_TOKENS, ContextBuilder
from kit.harness.registry import EvidenceRegistry
from kit.types import ContentPart, Message, TokenCounter

RENDERED_KIND = "rendered_obs"
STRATEGIES = ("full", "discard", "summary", "render_all", "vfold")
DEFAULT_TAU = 8192
DEFAULT_KEEP = 2
_IMAGE_FRAME = 2  # <|vision_start|> … <|vision_end|>


# ------------------------------------------------------------------------------------------ counting
class HistoryMeter:
    """``Len(H_t)`` in tokens of the policy's counter: all messages after the system prompt.

    With an exact counter (``count_message``) each message is rendered through the chat template
    (cached per message object); otherwise text tokens + image tokens + a fixed framing estimate.
    Image sizes come from the evidence registry.
    """

    def __init__(self, counter: TokenCounter):
        self.counter = counter
        self.exact = hasattr(counter, "count_message")
        self._memo: dict[tuple[int, str | None], tuple[Message, int]] = {}

    def message_tokens(self, m: Message, registry: EvidenceRegistry, previous_role: str | None = None) -> int:
        """Tokens ``m`` adds to a prompt (see class docstring)."""
        key = (id(m), previous_role)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is m:
            return hit[1]
        sizes = []
        for ref in m.image_refs():
            try:
                e = registry.resolve(ref)
                sizes.append((e.width, e.height))
            except Exception:  # unknown refs are the harness's concern; count a minimal image
                sizes.append((28, 28))
        if self.exact:
            n = self.counter.count_message(m, sizes, previous_role)
        else:
            n = MESSAGE_OVERHEAD_TOKENS + (self.counter.count_text(m.text()) if m.text() else 0)
            n += sum(self.counter.count_image(w, h) + _IMAGE_FRAME for w, h in sizes)
        if len(self._memo) > 50_000:
            self._memo.clear()
        self._memo[key] = (m, n)
        return n

    def history_tokens(self, messages: list[Message], registry: EvidenceRegistry) -> int:
        """Sum of :meth:`message_tokens` over the messages after the system prompt."""
        total, prev = 0, None
        for m in messages:
            if m.role != "system":
                total += self.message_tokens(m, registry, prev)
            prev = m.role
        return total


# ------------------------------------------------------------------------------------------ state
@dataclass
class FoldedObservation:
    """How one observation text was (or was not) folded; shared by all turns of an episode."""

    key: str
    chars: int
    text_tokens: int
    folded: bool
    reason: str  # "folded", "empty", "not_smaller", "missing_glyphs", "truncated", "no_pages"
    refs: list[str] = field(default_factory=list)  # registered page filenames
    page_sizes: list[tuple[int, int]] = field(default_factory=list)
    vision_tokens: int = 0
    report: dict = field(default_factory=dict)
    # characters lost by a fold made anyway (require_lossless off): "truncated", "missing_glyphs"
    losses: list[str] = field(default_factory=list)
    larger: bool = False  # folded although its pages cost at least its text tokens (only_if_smaller off)


@dataclass
class _EpisodeState:
    renders: dict[str, FoldedObservation] = field(default_factory=dict)
    messages: dict[tuple, Message] = field(default_factory=dict)
    log: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    summary: str | None = None
    summarized: int = 0  # number of interactions covered by ``summary``
    renders_done: int = 0


def _obs_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# ------------------------------------------------------------------------------------------ base
class FoldingContext(ContextBuilder):
    """Base of the threshold-triggered strategies (see module docstring).

    Args:
        counter: the policy's token counter (``policy.token_counter``).
        tau: trigger threshold τ in tokens (``Len(H_t) > τ``); 0 = always.
        keep: ``k``, most recent observations/interactions kept as text.
        refeed_images: False applies WeAgent's no-re-feed ablation to evidence images (rendered
            pages are always shown: they *are* the observation).

    Raises:
        ValueError: negative ``tau`` or ``keep``.
    """

    name = "base"

    def __init__(self, counter: TokenCounter, *, tau: int = DEFAULT_TAU, keep: int = DEFAULT_KEEP,
                 refeed_images: bool = True):
        super().__init__(refeed_images=refeed_images)
        if tau < 0 or keep < 0:
            raise ValueError(f"tau and keep must be >= 0, got tau={tau}, keep={keep}")
        self.counter = counter
        self.tau = tau
        self.keep = keep
        self.meter = HistoryMeter(counter)
        self._states: weakref.WeakKeyDictionary[EvidenceRegistry, _EpisodeState] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def state(self, registry: EvidenceRegistry) -> _EpisodeState:
        with self._lock:
            st = self._states.get(registry)
            if st is None:
                st = self._states[registry] = _EpisodeState()
            return st

    def log(self, registry: EvidenceRegistry) -> list[dict]:
        """Per-build decisions of the episode: history tokens, triggered, folded/dropped counts."""
        return list(self.state(registry).log)

    def events(self, registry: EvidenceRegistry) -> list[dict]:
        """Notable per-episode events (summary fallbacks, observations kept as text and why)."""
        return list(self.state(registry).events)

    def build(self, messages: list[Message], registry: EvidenceRegistry) -> list[Message]:
        """Model-facing messages for this turn (the input list is not modified)."""
        st = self.state(registry)
        n = self.meter.history_tokens(messages, registry)
        triggered = n > self.tau
        entry: dict[str, Any] = {"messages": len(messages), "history_tokens": n, "triggered": triggered}
        out = self._apply(list(messages), registry, st, entry) if triggered else list(messages)
        st.log.append(entry)
        return self._refeed(out, registry)

    def _apply(self, messages: list[Message], registry: EvidenceRegistry, st: _EpisodeState, entry: dict) -> list[Message]:
        raise NotImplementedError

    def _refeed(self, out: list[Message], registry: EvidenceRegistry) -> list[Message]:
        if self.refeed_images:
            return out
        res = []
        for m in out:
            if m.role == "tool" and m.image_refs():
                keep_parts, hidden = [], []
                for p in m.content:
                    if p.type == "image" and p.image and not _is_rendered(p.image, registry):
                        hidden.append(p.image)
                    else:
                        keep_parts.append(p)
                if hidden:
                    keep_parts.append(ContentPart(type="text", text="[images saved but not shown: " + ", ".join(hidden) + "]"))
                    m = m.model_copy(update={"content": keep_parts})
            res.append(m)
        return res


def _is_rendered(ref: str, registry: EvidenceRegistry) -> bool:
    try:
        return registry.resolve(ref).kind == RENDERED_KIND
    except Exception:
        return False


class FullContext(FoldingContext):
    """No compression (Table 4): the full history every turn; logs ``Len(H_t)`` like the others."""

    name = "full"

    def __init__(self, counter: TokenCounter, *, refeed_images: bool = True, **_: Any):
        super().__init__(counter, tau=0, keep=0, refeed_images=refeed_images)
        self.tau = math.inf

    def _apply(self, messages, registry, st, entry):
        return messages
