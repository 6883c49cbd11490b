"""Token accounting of context strategies: text vs vision tokens (POINTS-Seeker §3.3, Tables 3 and 6).

For a processor (Qwen2-VL, Qwen2.5-VL or Qwen3-VL patching, :data:`PROCESSORS`) and a context
strategy, :func:`observation_tokens` gives the text tokens of one observation against the vision
tokens of its rendered pages, and :func:`trajectory_accounting` replays a recorded episode turn by
turn: the prompt the policy would see at every turn under the full context and under the strategy,
and, per folded observation, its exact message-level tokens before and after folding. The paper
reports about 50 % fewer tokens per stale observation and 22–25 % shorter responses (Table 3); the
response-length effect needs a trained model and is not measured here.

Counting uses :class:`kit.policy.tokens.QwenTokenCounter` (the real Qwen tokenizer, chat template
framing, and smart resize: Qwen2/2.5-VL one token per 28×28 pixels, Qwen3-VL per 32×32).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kit.harness.context import TokenLedger
from kit.harness.episode import EpisodeRecord
from kit.harness.registry import EvidenceRegistry
from kit.types import TokenCounter

PROCESSORS = {
    "qwen2_vl": "Qwen/Qwen2-VL-7B-Instruct",
    "qwen2_5_vl": "Qwen/Qwen2.5-VL-7B-Instruct",
    "qwen3_vl": "Qwen/Qwen3-VL-8B-Instruct",
}
"""Processor families and the served model names whose counters :func:`processor_counter` builds."""


@functools.lru_cache(maxsize=8)
def processor_counter(name: str):
    """Token counter with the tokenizer and image patching of processor family ``name``.

    Raises:
        ValueError: unknown name (expected a key of :data:`PROCESSORS`).
    """
    if name not in PROCESSORS:
        raise ValueError(f"unknown processor {name!r}; expected one of {sorted(PROCESSORS)}")
    from kit.policy.tokens import counter_for

    return counter_for(PROCESSORS[name])


@dataclass
class ObservationTokens:
    """One observation: ``text_tokens`` (tokenizer) vs ``vision_tokens`` (its pages, including the 2
    framing tokens per image) and the pages' pixel sizes."""

    chars: int
    text_tokens: int
    vision_tokens: int
    pages: int
    page_sizes: list[tuple[int, int]]
    truncated: bool
    missing_glyphs: int

    @property
    def ratio(self) -> float:
        """Text tokens per vision token (> 1: rendering is cheaper)."""
        return self.text_tokens / self.vision_tokens if self.vision_tokens else float("inf")

    @property
    def saving(self) -> float:
        """Fraction of the text tokens saved by rendering (negative when rendering costs more)."""
        return 1 - self.vision_tokens / self.text_tokens if self.text_tokens else 0.0


def observation_tokens(text: str, counter: TokenCounter, renderer=None) -> ObservationTokens:
    """Text vs vision tokens of ``text`` rendered by ``renderer`` (default: the shared Table 8 renderer).

    Raises:
        kit.vfold.render.RenderError: ``text`` is not a ``str``.
    """
    if renderer is None:
        from kit.vfold.render import default_renderer

        renderer = default_renderer()
    res = renderer.render(text)
    sizes = res.page_sizes()
    overhead = getattr(counter, "image_overhead", 2)
    return ObservationTokens(len(text), counter.count_text(text) if text else 0,
                             sum(counter.count_image(w, h) + overhead for w, h in sizes), len(sizes), sizes,
                             res.truncated, res.missing_glyphs)


@dataclass
class FoldedTokens:
    """A tool message folded in the last turn of a replay: exact prompt tokens of the original
    message and of its folded form (page images, note, kept evidence images)."""

    turn: int
    tool: str | None
    chars: int
    text_tokens: int
    folded_tokens: int
    pages: int

    @property
    def saving(self) -> float:
        return 1 - self.folded_tokens / self.text_tokens if self.text_tokens else 0.0


@dataclass
class TrajectoryAccount:
    """Replay of one episode under one strategy.

    ``turns``: one row per policy call — ``history_tokens`` (``Len(H_t)``), ``full_tokens`` (prompt
    without compression), ``strategy_tokens`` (prompt under the strategy) and ``triggered``.
    ``folded``: per folded observation at the last turn. Totals sum prompt tokens over all turns
    (the prefill work of the episode).
    """

    episode: str
    strategy: str
    turns: list[dict] = field(default_factory=list)
    folded: list[FoldedTokens] = field(default_factory=list)

    @property
    def total_full(self) -> int:
        return sum(t["full_tokens"] for t in self.turns)

    @property
    def total_strategy(self) -> int:
        return sum(t["strategy_tokens"] for t in self.turns)

    @property
    def final_full(self) -> int:
        return self.turns[-1]["full_tokens"] if self.turns else 0

    @property
    def final_strategy(self) -> int:
        return self.turns[-1]["strategy_tokens"] if self.turns else 0

    def summary(self) -> dict:
        """Flat figures: totals, final-turn context, savings, mean saving per folded observation."""
        fo = self.folded
        return {
            "episode": self.episode, "strategy": self.strategy, "turns": len(self.turns),
            "triggered_turns": sum(t["triggered"] for t in self.turns),
            "total_prompt_full": self.total_full, "total_prompt_strategy": self.total_strategy,
            "total_saving": 1 - self.total_strategy / self.total_full if self.total_full else 0.0,
            "final_context_full": self.final_full, "final_context_strategy": self.final_strategy,
            "final_saving": 1 - self.final_strategy / self.final_full if self.final_full else 0.0,
            "folded_observations": len(fo),
            "folded_text_tokens": sum(f.text_tokens for f in fo),
            "folded_tokens": sum(f.folded_tokens for f in fo),
            "mean_saving_per_folded_observation": (sum(f.saving for f in fo) / len(fo)) if fo else 0.0,
        }

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "turns": self.turns, "folded": [asdict(f) for f in self.folded]}


def trajectory_accounting(record: EpisodeRecord, make_builder: Callable[[TokenCounter], object], counter: TokenCounter,
                          workspace: str | Path | None = None, tool_schemas: list[dict] | None = None) -> TrajectoryAccount:
    """Replay ``record`` under the strategy ``make_builder(counter)`` (e.g.
    ``lambda c: VFoldContext(c, tau=8192, keep=2)``) and count every turn's prompt with ``counter``.

    The record's messages are the raw history (the harness never stores folded context), so any
    record can be replayed under any strategy. Pages rendered during the replay are registered in
    a scratch registry under ``workspace`` (default: a temporary folder, removed afterwards); the
    record itself is not modified.

    Raises:
        ValueError: a record without messages.
    """
    if not record.messages:
        raise ValueError(f"episode {record.id} has no messages to replay")
    if workspace is None:
        with tempfile.TemporaryDirectory(prefix="vfold-acct-") as d:
            return trajectory_accounting(record, make_builder, counter, d, tool_schemas)
    registry = EvidenceRegistry.from_images(Path(workspace), record.images)
    builder = make_builder(counter)
    ledger = TokenLedger(counter, registry)
    schemas = tool_schemas or []
    msgs = record.messages
    calls = [i for i, m in enumerate(msgs) if m.role == "assistant"]
    acct = TrajectoryAccount(record.id, getattr(builder, "name", type(builder).__name__))
    built = list(msgs)
    for i in calls:
        prefix = msgs[:i]
        built = builder.build(prefix, registry)
        log = builder.log(registry)[-1] if hasattr(builder, "log") else {}
        acct.turns.append({"turn": msgs[i].turn, "messages": len(prefix),
                           "history_tokens": log.get("history_tokens"), "triggered": bool(log.get("triggered")),
                           "full_tokens": ledger.prompt_tokens(prefix, schemas),
                           "strategy_tokens": ledger.prompt_tokens(built, schemas)})
    # per folded observation, at the last replayed turn (same positions: V-Fold substitutes in place)
    if calls and len(built) == calls[-1]:
        exact = hasattr(counter, "count_message")
        for j, (orig, new) in enumerate(zip(msgs[:calls[-1]], built)):
            if orig.role != "tool" or new is orig:
                continue
            prev = msgs[j - 1].role if j else None

            def tokens(m):
                sizes = [(registry.resolve(r).width, registry.resolve(r).height) for r in m.image_refs()]
                if exact:
                    return counter.count_message(m, sizes, prev)  # noqa: B023 (tokens() is called within this iteration)
                return ledger.message_tokens(m)

            acct.folded.append(FoldedTokens(orig.turn, orig.name, len(orig.text()), tokens(orig), tokens(new),
                                            sum(1 for r in new.image_refs() if registry.resolve(r).kind == "rendered_obs")))
    return acct
