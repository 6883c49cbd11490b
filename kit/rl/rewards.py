"""Trajectory rewards (WeAgent-MMSearch Eq. 5; POINTS-Seeker §3.2.4 GRPO reward).

* FA-GSPO / GSPO: ``R = 0.9·C + 0.1·F`` with ``C`` the binary correctness of the terminal answer from an
  external judge and ``F`` whether the final assistant turn obeys the response format.
* GRPO baseline: ``R = 0.7·S_acc + 0.2·S_format + 0.1·S_tool`` (POINTS-Seeker's λ values).

Format, as the kit reads it (docs/contracts.md "Turn grammar"): a turn obeys the format when it follows
the Table 6 grammar without any departure (:data:`kit.harness.parsing.DEPARTURES`: a reasoning block —
explicit, or opened by the chat template —, exactly one action, one ``<response>``, no text outside the
blocks, no tool call after ``<response>``). Eq. 5's ``F`` reads only the final assistant turn, which must
also hold a complete, non-empty ``<response>`` and no tool call (text or structured). POINTS-Seeker's
``S_format`` ("reasoning and final answers correctly enclosed") reads every assistant turn: each obeys the
grammar with an action, and the last one is a terminal turn as for ``F``. Its tool term is 1 when the
episode executed at least one tool call and no call failed to parse or validate (``invalid_call``
events, including ``truncated`` calls).

A judge that fails or times out gives ``correct=None``: the reward is then NaN and the trajectory is
excluded from the update with reason ``judge_error`` (never scored as a silent 0).
"""

from __future__ import annotations

import asyncio
import inspect
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from kit.harness.episode import EpisodeRecord
from kit.harness.events import EventType
from kit.harness.parsing import ParsedTurn, parse_turn
from kit.recipes import paper_default as _P  # weights: kit/recipes/*.yaml, section reward
from kit.rl.registry import register_reward, reward_spec

WEAGENT_WEIGHTS = {k: _P(f"reward.{k}") for k in ("correct", "format")}  # Eq. 5
POINTS_SEEKER_WEIGHTS = {k: _P(f"reward.{k}", "points_seeker") for k in ("correct", "format", "tool")}  # POINTS-Seeker §4.1


class Judge(Protocol):
    """Anything with ``judge_task(task, prediction)`` returning a verdict (sync or async), e.g.
    :class:`kit.eval.judges.RuleJudge` or :class:`kit.eval.judges.LLMJudge`."""

    def judge_task(self, task, prediction: str | None): ...


@dataclass
class RewardBreakdown:
    """One trajectory's reward and its terms (each term 0/1, ``correct`` None when the judge failed).

    ``reward`` is NaN when it cannot be computed; ``judge_error`` says why.
    """

    reward: float
    correct: float | None
    format: float
    tool: float
    judge: str = ""
    judge_error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def last_assistant_text(record: EpisodeRecord) -> str | None:
    """Text of the record's last assistant message (None without one)."""
    for m in reversed(record.messages):
        if m.role == "assistant":
            return m.text()
    return None


def turn_format_ok(parsed: ParsedTurn, *, terminal: bool) -> bool:
    """One parsed turn obeys the Table 6 grammar: no departure and an action; ``terminal``: that action is
    a complete, non-empty ``<response>`` with no tool call before or after it."""
    if parsed.departures or not parsed.has_action:
        return False
    if not terminal:
        return True
    return (parsed.response is not None and parsed.response_complete and bool(parsed.response.strip())
            and not parsed.calls and not parsed.calls_after_response)


def format_ok(record: EpisodeRecord, *, all_turns: bool = False, protocol: str = "weagent_mmsearch") -> bool:
    """``F`` of Eq. 5 (the final assistant turn is a terminal turn of the grammar, see
    :func:`turn_format_ok`); ``all_turns``: POINTS-Seeker's ``S_format``, every earlier assistant turn
    obeys the grammar too. ``protocol``: the episode's ``HarnessConfig.protocol`` (its answer tag:
    ``<response>``, or POINTS-Seeker's ``<answer>``). A record without an assistant message scores False.

    Raises:
        ValueError: an unknown ``protocol``."""
    from kit.harness.prompts import turn_protocol

    tag = turn_protocol(protocol).answer_tag
    turns = [m for m in record.messages if m.role == "assistant"]
    if not turns:
        return False
    if not turn_format_ok(parse_turn(turns[-1].text(), turns[-1].tool_calls, answer_tag=tag), terminal=True):
        return False
    return not all_turns or all(turn_format_ok(parse_turn(m.text(), m.tool_calls, answer_tag=tag), terminal=False)
                                for m in turns[:-1])


def tool_ok(record: EpisodeRecord) -> bool:
    """POINTS-Seeker's ``S_tool``: at least one executed call and no call rejected by the schemas."""
    return record.tool_calls > 0 and record.event_counts().get(EventType.INVALID_CALL, 0) == 0


async def judge_correct(judge: Judge, record: EpisodeRecord, timeout_s: float | None = 60.0) -> tuple[float | None, str, str | None]:
    """``C`` for one record: ``(1.0 | 0.0 | None, judge name, error)``. No final response scores 0 without
    calling the judge; a judge exception or timeout gives ``None`` with the error."""
    name = str(getattr(judge, "name", type(judge).__name__))
    if not record.final_response:
        return 0.0, name, None
    try:
        v = judge.judge_task(record.task, record.final_response)
        if inspect.isawaitable(v):
            v = await asyncio.wait_for(v, timeout=timeout_s)
    except TimeoutError:
        return None, name, f"judge timed out after {timeout_s} s"
    except Exception as e:  # noqa: BLE001  (any judge failure is counted as judge_error, never raised)
        return None, name, f"judge failed: {type(e).__name__}: {e}"
    correct = getattr(v, "correct", None)
    if correct is None:
        return None, getattr(v, "judge", name), getattr(v, "error", None) or "judge gave no decision"
    return float(bool(correct)), getattr(v, "judge", name), None


@register_reward("weagent", equation="WeAgent Eq. 5")
def weagent_reward(record: EpisodeRecord, correct: float, *, protocol: str = "weagent_mmsearch") -> RewardBreakdown:
    """``R = w_c·C + w_f·F`` (Eq. 5; weights from the recipe's ``reward`` section); ``F``: :func:`format_ok` of the
    final turn. In [0, 1] with the paper's weights."""
    f, t = float(format_ok(record, protocol=protocol)), float(tool_ok(record))
    return RewardBreakdown(WEAGENT_WEIGHTS["correct"] * correct + WEAGENT_WEIGHTS["format"] * f, correct, f, t)


@register_reward("points_seeker", equation="POINTS-Seeker §4.1 (GRPO reward)")
def points_seeker_reward(record: EpisodeRecord, correct: float, *, protocol: str = "weagent_mmsearch") -> RewardBreakdown:
    """``R = w_c·C + w_f·S_format + w_t·S_tool`` (POINTS-Seeker §4.1): ``S_format`` checks every turn's grammar,
    ``S_tool`` (:func:`tool_ok`) at least one executed call and none rejected. In [0, 1]."""
    f, t = float(format_ok(record, all_turns=True, protocol=protocol)), float(tool_ok(record))
    w = POINTS_SEEKER_WEIGHTS
    return RewardBreakdown(w["correct"] * correct + w["format"] * f + w["tool"] * t, correct, f, t)


#: the kit's own rewards: pure functions of the record, so their terms can be read even without a judge's C
_PURE_REWARDS = (weagent_reward, points_seeker_reward)


def _breakdown(kind: str, out: Any, record: EpisodeRecord, correct: float, protocol: str) -> RewardBreakdown:
    """A registered reward's result as a :class:`RewardBreakdown` (a float gets the kit's format and tool terms)."""
    if isinstance(out, RewardBreakdown):
        return out
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        return RewardBreakdown(float(out), correct, float(format_ok(record, protocol=protocol)), float(tool_ok(record)))
    raise TypeError(f"reward {kind!r} returned {type(out).__name__}, not a float or RewardBreakdown (kit.rl.registry)")


async def score_record(record: EpisodeRecord, judge: Judge, *, kind: str = "weagent",
                       timeout_s: float | None = 60.0, protocol: str = "weagent_mmsearch") -> RewardBreakdown:
    """Reward of one trajectory: the judge's ``C``, then the registered reward ``kind``.

    Args:
        kind: a registered reward (:mod:`kit.rl.registry`): ``"weagent"`` (Eq. 5, FA-GSPO and GSPO),
            ``"points_seeker"`` (GRPO baseline) or yours.
        protocol: the episode's turn protocol, for the format term (:func:`format_ok`).
    Returns:
        The breakdown; ``reward`` NaN with ``judge_error`` when the judge failed. Then ``kind`` is not called: the
        format and tool terms are the kit's own reward's (pure) for ``weagent`` / ``points_seeker``, else the
        final-turn :func:`format_ok` and :func:`tool_ok`.
    Raises:
        ValueError: an unknown ``kind`` (naming the registered ones). TypeError: the reward broke its contract.
    """
    fn = reward_spec(kind).fn
    c, name, err = await judge_correct(judge, record, timeout_s)
    if c is None:  # the reward is never called with a made-up C; the terms are still reported
        terms = fn(record, 0.0, protocol=protocol) if fn in _PURE_REWARDS else None
        f = terms.format if terms is not None else float(format_ok(record, protocol=protocol))
        t = terms.tool if terms is not None else float(tool_ok(record))
        return RewardBreakdown(math.nan, None, f, t, name, err)
    rb = _breakdown(kind, fn(record, c, protocol=protocol), record, c, protocol)
    rb.judge = rb.judge or name
    return rb


async def score_records(records: list[EpisodeRecord], judge: Judge, *, kind: str = "weagent",
                        timeout_s: float | None = 60.0, protocol: str = "weagent_mmsearch") -> list[RewardBreakdown]:
    """:func:`score_record` for many records, concurrently, in order."""
    return list(await asyncio.gather(*(score_record(r, judge, kind=kind, timeout_s=timeout_s, protocol=protocol)
                                       for r in records)))
