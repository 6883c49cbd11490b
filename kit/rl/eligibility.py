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
``budget_exhausted``        the budget ended the episode without a synthesis turn (only without self-recovery)
``invalid_action``          an invalid call / a turn without an action ended it (only without self-recovery)
``overlong``                a turn stayed overlong after its regeneration (``overlong_kept``)
``judge_error``             the reward could not be computed (judge failed or timed out)
``reward_nan``              the reward is not finite
==========================  ===================================================================

Later stages add ``encode:<reason>`` (the record cannot be tokenized for training) and ``logprob_nan``
(non-finite log-probabilities), see :mod:`kit.rl.trainer`. An answered episode whose response is
unclosed stays eligible with ``F = 0``: it is a model-side format error, exactly the signal the format
term teaches, not a runtime failure.

Vanilla GSPO (the Table 3 baseline: "omits trajectory self-recovery and invalid-trajectory filtering")
skips the runtime checks: every trajectory with a computable reward counts (``check_runtime=False``), and
its rollouts run without self-recovery (:func:`harness_config_for`). Which algorithm recovers:

=============  ==================  ======================================================================
algorithm      self_recovery       why
=============  ==================  ======================================================================
``fa_gspo``    True (required)     §6.2: "recovers first and then filters"; False is refused (filtering
                                   without recovery is no paper configuration)
``gspo``       False (forced)      Table 3 caption; an explicit ``self_recovery=True`` is refused
``grpo``       as configured       POINTS-Seeker §3.2.4 states no recovery rule: the harness config decides
=============  ==================  ======================================================================
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord
from kit.harness.events import EventType

EXCLUSION_REASONS = ("context_limit", "wall_clock", "error", "synthesis_incomplete", "budget_exhausted",
                     "invalid_action", "overlong", "judge_error", "reward_nan")


@dataclass(frozen=True)
class Eligibility:
    """Whether one trajectory enters the update; ``reason`` is None when eligible."""

    eligible: bool
    reason: str | None = None


def runtime_exclusion(record: EpisodeRecord) -> str | None:
    """The runtime reason (first four/five rows of the module table) that excludes ``record``, or None."""
    if record.status in ("context_limit", "wall_clock", "error", "budget_exhausted", "invalid_action"):
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


def explicit_self_recovery(config: HarnessConfig) -> bool:
    """Whether ``config.self_recovery`` is the caller's choice rather than the recipe's value.

    It is when pydantic records it as set (``model_fields_set``: a recipe-built config from
    :meth:`kit.profiles.Profile.harness` records only the caller's overrides), except for a config rebuilt
    from ``model_dump()`` (every field set) whose value equals the recipe's ``harness.self_recovery``: a copy
    of the recipe, not a choice.
    """
    fields = config.model_fields_set
    if "self_recovery" not in fields:
        return False
    rebuilt = fields >= set(type(config).model_fields)
    return not (rebuilt and config.self_recovery == type(config).model_fields["self_recovery"].default)


def harness_config_for(algorithm: str, config: HarnessConfig | None, *, explicit: bool | None = None) -> HarnessConfig:
    """The harness config ``algorithm``'s rollouts run with (module docstring table).

    Args:
        algorithm: a registered algorithm (``fa_gspo`` | ``gspo`` | ``grpo`` | yours): its
            :attr:`~kit.rl.registry.AlgorithmSpec.self_recovery` decides.
        config: the base config (None: :class:`HarnessConfig` paper defaults).
        explicit: whether ``config.self_recovery`` was set on purpose (None: :func:`explicit_self_recovery`;
            the recipe's own value, from a profile or a ``model_dump()`` copy, is not).
    Returns:
        ``config`` itself, or a copy with ``self_recovery=False`` for ``gspo``.
    Raises:
        ValueError: an unknown algorithm; ``fa_gspo`` with ``self_recovery=False``; ``gspo`` with an
            explicit ``self_recovery=True``.
    """
    from kit.rl.registry import algorithm as spec_of

    want = spec_of(algorithm).self_recovery  # ValueError naming the registered algorithms
    cfg = config if config is not None else HarnessConfig()
    if want is None or cfg.self_recovery == want:
        return cfg
    if want:
        raise ValueError("FA-GSPO recovers first and then filters (WeAgent §6.2): it needs self_recovery=True; "
                         "for the Table 3 baseline without recovery use algorithm='gspo'")
    if explicit if explicit is not None else explicit_self_recovery(cfg):
        raise ValueError("vanilla GSPO (WeAgent Table 3) runs without self-recovery, but the harness config sets "
                         "self_recovery=True; leave it unset or False, or use algorithm='fa_gspo'")
    return cfg.model_copy(update={"self_recovery": False})


def exclusion_counts(items: list[Eligibility]) -> dict[str, int]:
    """Excluded trajectories per reason."""
    return dict(Counter(str(e.reason) for e in items if not e.eligible))
