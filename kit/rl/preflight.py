"""What a preflight of notebook 05 must prove: at least one real RL update under the recipe's objective.

A preflight (``--profile paper --preflight``, :mod:`kit.profiles`) runs the recipe's algorithm, clip range and
eligibility filter at tiny sizes. A step counts as a **real RL update** (:func:`is_rl_update`) when it is an
``rl`` stage step that was not skipped, ran the optimizer (a finite ``loss`` and ``grad_norm``), trained at
least one trajectory and had a non-zero mean absolute advantage (Eq. 6: an all-equal group has none). OPD steps
do not count: they distil the teacher, they do not exercise FA-GSPO / GSPO / GRPO.

A tiny stand-in only gets mixed rewards once it is warm-started (:mod:`kit.rl.warmstart`) and even then a
group of 2 can tie; :func:`train_until_rl_update` therefore runs further real steps of the schedule (each one
logged like any other) until one updates, at most ``max_extra_steps``, and :func:`require_rl_update` makes the
preflight fail loudly when none did. Rewards and eligibility are never touched.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["PreflightError", "is_rl_update", "require_rl_update", "rl_updates", "train_until_rl_update"]


class PreflightError(RuntimeError):
    """A preflight ran to the end without proving what it exists to prove (e.g. no real RL update)."""


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def is_rl_update(m: dict[str, Any]) -> bool:
    """True when the step metrics ``m`` (one ``metrics.jsonl`` row of :class:`kit.rl.trainer.RLTrainer`) are a
    real policy-gradient update: kind ``rl``, not skipped, finite ``loss`` and ``grad_norm``, at least one
    ``trained_trajectories`` and a non-zero ``advantage_abs_mean``."""
    return (m.get("kind") == "rl" and not m.get("skipped") and _finite(m.get("loss")) and _finite(m.get("grad_norm"))
            and int(m.get("trained_trajectories") or 0) > 0 and _finite(m.get("advantage_abs_mean"))
            and m["advantage_abs_mean"] > 0)


def rl_updates(history: list[dict[str, Any]]) -> int:
    """The number of real RL updates (:func:`is_rl_update`) among the step metrics ``history``."""
    return sum(is_rl_update(m) for m in history)


async def train_until_rl_update(trainer, max_extra_steps: int) -> int:
    """Run further steps of ``trainer`` (its schedule continues: the next stages, same objective and filter)
    until its history holds a real RL update, at most ``max_extra_steps``. Returns the steps run (0 when an
    update is already there).

    Raises:
        ValueError: ``max_extra_steps < 0``.
    """
    if max_extra_steps < 0:
        raise ValueError(f"max_extra_steps must be >= 0, got {max_extra_steps}")
    n = 0
    while n < max_extra_steps and not rl_updates(trainer.history):
        await trainer.train_step()
        n += 1
    return n


def require_rl_update(history: list[dict[str, Any]], what: str) -> int:
    """The number of real RL updates in ``history``; raises when there is none.

    Raises:
        PreflightError: no step of ``history`` is a real RL update (the message lists each RL step's skip
            reason and exclusions, ``what`` names the run).
    """
    n = rl_updates(history)
    if n:
        return n
    why = [f"step {m.get('step')} ({m.get('stage')}): {m.get('skipped') or 'no trained trajectory'}"
           f" exclusions={m.get('exclusions') or {}}" for m in history if m.get("kind") == "rl"]
    raise PreflightError(f"preflight of {what}: no RL step performed a real policy update (non-zero advantage, "
                         f"optimizer step); RL steps: {'; '.join(why) or 'none ran'}")
