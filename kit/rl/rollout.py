"""Groups of rollouts through the kit's harness, scored and filtered (WeAgent-MMSearch §6.2, Figure 7).

:func:`rollout_groups` samples ``G`` trajectories per prompt with :func:`kit.harness.runner.run_batch`
(concurrent asyncio episodes, one JSON line each, resumable), with the same tools, recovery rules and
budgets as evaluation. Each trajectory is then scored (:mod:`kit.rl.rewards`) and checked
(:mod:`kit.rl.eligibility`). :func:`recovery_stats` gives the Figure 7 table: per mechanism the trigger
rate (share of all trajectories) and the retention rate (share of triggered trajectories that remain
eligible); context-limit and wall-clock trajectories are excluded by definition (retention N/A).
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.events import EventType
from kit.harness.loop import Harness
from kit.harness.runner import episode_id, run_batch
from kit.rl.eligibility import Eligibility, check, exclusion_counts
from kit.rl.objective import AlgorithmSpec
from kit.rl.rewards import Judge, RewardBreakdown, score_records
from kit.types import Policy, SamplingParams, SearchBackend

#: Figure 7 mechanisms: name -> predicate on a record.
MECHANISMS: dict[str, Callable[[EpisodeRecord], bool]] = {
    "overlong_retry": lambda r: r.event_counts().get(EventType.OVERLONG_REGENERATED, 0) > 0,
    "forced_final_answer": lambda r: r.event_counts().get(EventType.SYNTHESIS_REQUESTED, 0) > 0,
    "invalid_tool_call": lambda r: r.event_counts().get(EventType.INVALID_CALL, 0) > 0,
    "context_limit": lambda r: r.status == "context_limit",
    "wall_clock": lambda r: r.status == "wall_clock",
}
EXCLUDED_MECHANISMS = ("context_limit", "wall_clock")


@dataclass
class Trajectory:
    """One scored rollout: its record, group index, reward terms and eligibility."""

    record: EpisodeRecord
    group: int
    reward: RewardBreakdown
    eligibility: Eligibility

    @property
    def eligible(self) -> bool:
        return self.eligibility.eligible


@dataclass
class RolloutBatch:
    """``groups[g]`` holds the ``G`` trajectories of ``tasks[g]``; ``wall_s`` is the rollout time."""

    tasks: list[Task]
    groups: list[list[Trajectory]]
    wall_s: float
    judge_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def trajectories(self) -> list[Trajectory]:
        return [t for g in self.groups for t in g]

    def rewards(self) -> list[list[float]]:
        return [[t.reward.reward for t in g] for g in self.groups]

    def eligible(self) -> list[list[bool]]:
        return [[t.eligible for t in g] for g in self.groups]

    def exclusions(self) -> dict[str, int]:
        return exclusion_counts([t.eligibility for t in self.trajectories()])

    def summary(self) -> dict[str, Any]:
        import math

        trajs = self.trajectories()
        finite = [t.reward.reward for t in trajs if math.isfinite(t.reward.reward)]
        n = len(trajs)
        return {"trajectories": n, "eligible": sum(t.eligible for t in trajs),
                "reward_mean": sum(finite) / len(finite) if finite else math.nan,
                "correct_rate": sum((t.reward.correct or 0.0) for t in trajs) / max(n, 1),
                "format_rate": sum(t.reward.format for t in trajs) / max(n, 1),
                "judge_errors": sum(t.reward.judge_error is not None for t in trajs),
                "exclusions": self.exclusions(), "rollout_s": round(self.wall_s, 3),
                "episodes_per_min": 60.0 * n / self.wall_s if self.wall_s > 0 else math.nan}


def seeded_factory(policy: Policy, backend: SearchBackend, config: HarnessConfig, sampling: SamplingParams, *,
                   base_seed: int = 0, labels: list[str] | tuple[str, ...] = (),
                   summarizer=None) -> Callable[[Task, int], Harness]:
    """A ``(task, sample) -> Harness`` factory giving each sample of a group its own sampling seed
    (``base_seed + 100_003·sample``; the harness varies it further per turn and attempt).
    ``summarizer``: web_extract's (:func:`kit.harness.summarize.make_summarizer`; None: extractive)."""

    def make(task: Task, sample: int) -> Harness:
        seed = int(base_seed) + 100_003 * sample
        return Harness(policy, backend, config, sampling=sampling.model_copy(update={"seed": seed}), labels=labels,
                       summarizer=summarizer)

    return make


async def rollout_groups(harness: Harness | Callable[[Task, int], Harness], tasks: list[Task], group_size: int,
                         out_dir: str | Path, *, judge: Judge, spec: AlgorithmSpec, concurrency: int | None = None,
                         judge_timeout_s: float | None = 60.0, protocol: str | None = None,
                         progress: bool = True) -> RolloutBatch:
    """Sample ``group_size`` trajectories per task concurrently, score and check them.

    Args:
        harness: a :class:`Harness` or a factory ``(task, sample) -> Harness`` (:func:`seeded_factory`).
        out_dir: run folder for ``episodes.jsonl`` and workspaces (a rerun resumes it).
        judge: correctness judge (``RuleJudge`` by default in the trainer; ``LLMJudge`` optional).
        spec: the algorithm (decides runtime filtering and the reward kind).
        concurrency: concurrent episodes (default: all of them: ``len(tasks)·group_size``).
        protocol: the episodes' turn protocol for the format reward (None: the harness's config's, or
            WeAgent's for a factory).
        progress: a progress bar over the episodes (:mod:`kit.progress`).
    Raises:
        ValueError: ``group_size < 1`` or duplicate task ids.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    t0 = time.perf_counter()
    records = await run_batch(harness, tasks, out_dir, samples=group_size,
                              concurrency=concurrency or max(1, len(tasks) * group_size), progress=progress)
    wall = time.perf_counter() - t0
    by_id = {r.id: r for r in records}
    if protocol is None:
        protocol = harness.config.protocol if isinstance(harness, Harness) else "weagent_mmsearch"
    return await score_groups([[by_id[episode_id(t, s)] for s in range(group_size)] for t in tasks], tasks,
                              judge=judge, spec=spec, judge_timeout_s=judge_timeout_s, protocol=protocol, wall_s=wall)


async def score_groups(records: list[list[EpisodeRecord]], tasks: list[Task], *, judge: Judge, spec: AlgorithmSpec,
                       judge_timeout_s: float | None = 60.0, protocol: str = "weagent_mmsearch",
                       wall_s: float = 0.0) -> RolloutBatch:
    """Score and check ``records[g][s]`` (the group of ``tasks[g]``) for ``spec``: its reward kind and its
    runtime filter. :func:`rollout_groups` calls it on fresh rollouts; scoring the same records for another
    algorithm gives what that algorithm would have measured on them (e.g. one set of frozen-policy rollouts
    as the learning-rate-0 control of several algorithms, ``benchmarks/bench_learning.py``)."""
    t1 = time.perf_counter()
    flat = [r for g in records for r in g]
    scores = await score_records(flat, judge, kind=spec.reward, timeout_s=judge_timeout_s, protocol=protocol)
    judge_s = time.perf_counter() - t1
    groups: list[list[Trajectory]] = []
    k = 0
    for g, recs in enumerate(records):
        row = []
        for rec in recs:
            rb = scores[k]
            el = check(rec, rb.reward, judge_error=rb.judge_error, check_runtime=spec.check_runtime)
            row.append(Trajectory(rec, g, rb, el))
            k += 1
        groups.append(row)
    return RolloutBatch(tasks=list(tasks), groups=groups, wall_s=wall_s, judge_s=judge_s)


def recovery_stats(trajectories: list[Trajectory]) -> list[dict[str, Any]]:
    """Figure 7 rows: ``mechanism``, ``triggered``, ``trigger_rate`` (of all trajectories),
    ``retained`` and ``retention_rate`` (eligible among triggered; None for the excluded mechanisms).
    A trajectory may trigger several mechanisms, so trigger rates do not add up."""
    n = len(trajectories)
    rows = []
    for name, pred in MECHANISMS.items():
        hit = [t for t in trajectories if pred(t.record)]
        kept = sum(t.eligible for t in hit)
        excluded = name in EXCLUDED_MECHANISMS
        rows.append({"mechanism": name, "triggered": len(hit), "trigger_rate": len(hit) / n if n else 0.0,
                     "retained": None if excluded else kept,
                     "retention_rate": None if excluded or not hit else kept / len(hit)})
    return rows


def _count(v: Any, what: str) -> int:
    """``v`` as a non-negative integer count; ``ValueError`` naming ``what`` otherwise (bools, floats and
    strings read from a CSV are refused rather than summed)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
        raise ValueError(f"{what} must be a non-negative integer count, got {v!r}")
    return int(v)


def recovery_table(steps: list[dict[str, Any]], *, excluded: Any = "N/A (excluded)") -> list[dict[str, Any]]:
    """Figure 7 over a whole run: the per-step :func:`recovery_stats` rows summed (notebook 05's
    ``recovery.csv``).

    Args:
        steps: trainer step metrics (``RLTrainer.history`` or ``metrics.jsonl`` rows), each with
            ``rollout_trajectories`` (int) and ``recovery`` (that step's :func:`recovery_stats` rows).
        excluded: the ``retention_rate`` shown for the mechanisms excluded by definition
            (:data:`EXCLUDED_MECHANISMS`), whose retention is not a rate.

    Returns:
        One row per mechanism of :data:`MECHANISMS`, in its order: ``mechanism``, ``triggered`` (count),
        ``trigger_rate`` (triggered / all trajectories of the run; None without trajectories: 0/0 is
        not a rate) and ``retention_rate`` (retained / triggered; None when it never fired; ``excluded``
        as above).

    Raises:
        ValueError: a step without ``recovery`` (a list of rows) or ``rollout_trajectories``, an unknown
            mechanism, a count that is not a non-negative integer, ``triggered`` above the step's
            trajectories or ``retained`` above ``triggered``.
    """
    agg = {k: {"triggered": 0, "retained": 0} for k in MECHANISMS}
    n_traj = 0
    for i, m in enumerate(steps):
        if not isinstance(m, dict) or "recovery" not in m or "rollout_trajectories" not in m:
            where = m.get("step", i) if isinstance(m, dict) else i
            raise ValueError(f"step {where}: no 'recovery' / 'rollout_trajectories' metrics (not a trainer step row)")
        at = f"step {m.get('step', i)}"
        n = _count(m["rollout_trajectories"], f"{at}: rollout_trajectories")
        n_traj += n
        if not isinstance(m["recovery"], list):
            raise ValueError(f"{at}: 'recovery' must be a list of recovery_stats rows, got {type(m['recovery']).__name__}")
        for r in m["recovery"]:
            if not isinstance(r, dict) or r.get("mechanism") not in agg:
                name = r.get("mechanism") if isinstance(r, dict) else r
                raise ValueError(f"{at}: unknown mechanism {name!r}; known: {list(MECHANISMS)}")
            k = r["mechanism"]
            trig = _count(r.get("triggered"), f"{at}, {k}: triggered")
            if trig > n:
                raise ValueError(f"{at}, {k}: triggered ({trig}) exceeds the step's trajectories ({n})")
            ret = r.get("retained")
            if ret is None and k in EXCLUDED_MECHANISMS:  # None by definition for the excluded mechanisms
                ret = 0
            ret = _count(ret, f"{at}, {k}: retained")
            if ret > trig:
                raise ValueError(f"{at}, {k}: retained ({ret}) exceeds triggered ({trig})")
            agg[k]["triggered"] += trig
            agg[k]["retained"] += ret
    return [{"mechanism": k, "triggered": v["triggered"], "trigger_rate": v["triggered"] / n_traj if n_traj else None,
             "retention_rate": (excluded if k in EXCLUDED_MECHANISMS else
                                v["retained"] / v["triggered"] if v["triggered"] else None)}
            for k, v in agg.items()]
