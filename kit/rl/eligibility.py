"""Optimization eligibility after runtime recovery (WeAgent-MMSearch §6.2, Eq. 3, Table 5, Figure 7).

FA-GSPO recovers first (the harness regenerates an overlong turn once, returns malformed calls as
structured observations, forces one tool-free answer when the budget runs out) and then filters. A
trajectory is *eligible* (``i ∈ E_g``) unless one of these holds, checked in this order:

==========================  ===================================================================
reason                      condition
==========================  ===================================================================
``context_limit``           the episode hit the context budget (status ``context_limit``)
``wall_clock``              the episode hit the wall-clock budget (status ``wall_clock``)
``error``                   the episode aborted (policy server died, bad input image, ...)
``synthesis_incomplete``    max-turn synthesis without a complete terminal ``<response>``
``overlong``                a turn stayed overlong after its regeneration (``overlong_kept``)
``judge_error``             the reward could not be computed (judge failed or timed out)
``reward_nan``              the reward is not finite
==========================  ===================================================================

Later stages add ``encode:<reason>`` (the record cannot be tokenized for training) and ``logprob_nan``
(non-finite log-probabilities), see :mod:`kit.rl.trainer`. An answered episode whose response is
unclosed stays eligible with ``F = 0``: it is a model-side format error, exactly the signal the format
term teaches, not a runtime failure.

Vanilla GSPO (the Table 3 baseline) skips the runtime checks: every trajectory with a computable reward
counts (``check_runtime=False``).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from kit.harness.episode import EpisodeRecord
from kit.harness.events import EventType

EXCLUSION_REASONS = ("context_limit", "wall_clock", "error", "synthesis_incomplete", "overlong", "judge_error",
                     "reward_nan")


@dataclass(frozen=True)
class Eligibility:
    """Whether one trajectory enters the update; ``reason`` is None when eligible."""

    eligible: bool
    reason: str | None = None


def runtime_exclusion(record: EpisodeRecord) -> str | None:
    """The runtime reason (first four/five rows of the module table) that excludes ``record``, or None."""
    if record.status in ("context_limit", "wall_clock", "error"):
        return record.status
    if record.status == "max_turns_synthesis" and not record.trainable:
        return "synthesis_incomplete"
    if record.event_counts().get(EventType.OVERLONG_KEPT, 0):
        return "overlong"
    return None


def check(record: EpisodeRecord, reward: float, *, judge_error: str | None = None,
          check_runtime: bool = True) -> Eligibility:
    """Eligibility of one scored trajectory (Eq. 3).

    Args:
        reward: its reward (NaN when it could not be computed).
        judge_error: set when the judge failed; the trajectory is then excluded as ``judge_error``.
        check_runtime: False for vanilla GSPO / GRPO (no runtime filtering; only undefined rewards out).
    """
    if check_runtime:
        reason = runtime_exclusion(record)
        if reason is not None:
            return Eligibility(False, reason)
    if judge_error is not None:
        return Eligibility(False, "judge_error")
    if reward is None or not math.isfinite(reward):
        return Eligibility(False, "reward_nan")
    return Eligibility(True)


def exclusion_counts(items: list[Eligibility]) -> dict[str, int]:
    """Excluded trajectories per reason."""
    return dict(Counter(str(e.reason) for e in items if not e.eligible))
