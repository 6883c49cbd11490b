"""Did a run's model roles and judges work? (issue 26, part 8: exit codes and summaries tell the truth.)

After a notebook ends, :func:`role_health` reads every episode it wrote (``**/episodes.jsonl`` under its results
folder) and counts, per role (the episode's ``policy``: the served model, the in-process checkpoint, a scripted
demonstrator), the episodes whose status is ``error``: the policy or its endpoint failed (an HTTP 500, a refused
connection, a crash), not the task (a wrong answer or an exhausted budget is a result, not an error).

The judges are roles too: every evaluation item (``**/predictions/*.jsonl``, one
:class:`kit.eval.metrics.ItemResult` a line) names its answer judge (``judge``) and, when a target image was
judged, its image judge (``image_judge``). An answer verdict is an error when the judge gave no decision
(``correct`` None with a ``judge_error``: a dead LLM-judge endpoint, an unparseable reply; the item is scored 0,
which must not pass for a wrong answer); an image verdict when it carries an ``image_judge_error`` (``match``
None). A verdict a configured fallback gave (judge ``rule:... (fallback from llm:...)``) is a decision, not an
error, as in :func:`kit.eval.metrics.run_scores`. A :class:`kit.eval.judges.RuleJudge` never errors.

As inspect_ai's ``fail_on_error``, a run fails when a role's share of errors is above a tolerance (default
0: any); ``python -m kit.cli notebook`` prints one line per role and exits 1. The notebook itself finished and
its outputs stay, so the cause can be read.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RoleHealth", "failed_roles", "health_lines", "role_health"]

EPISODE_FILE = "episodes.jsonl"
PREDICTION_FILES = "predictions/*.jsonl"  # kit.eval.runner: predictions/<benchmark>__<config>__r<k>.jsonl
RL_METRICS_FILE = "metrics.jsonl"  # kit.rl.trainer: one row per step, rollout_trajectories / rollout_judge_errors
RL_JUDGE_ROLE = "reward judge (RL rollouts)"
_DONE = {"episodes": "ran", "verdicts": "given"}


@dataclass
class RoleHealth:
    """One role's records: ``episodes`` in all (episodes of a model role; verdicts of a judge role, ``unit``
    ``"verdicts"``), ``errors`` of them failed, ``causes`` the error texts (first line, at most 160 characters)
    with their counts."""

    role: str
    episodes: int = 0
    errors: int = 0
    causes: Counter = field(default_factory=Counter)
    unit: str = "episodes"

    @property
    def error_rate(self) -> float:
        return self.errors / self.episodes if self.episodes else 0.0

    def line(self) -> str:
        """``model: 3/3 episodes error — HTTP 500 from <endpoint>`` (the most frequent cause), or
        ``judge llm:m@v: 3/3 verdicts error — judge endpoint failed: ...``."""
        if not self.errors:
            return f"{self.role}: {self.episodes}/{self.episodes} {self.unit} {_DONE.get(self.unit, 'ran')} (no error)"
        cause, n = self.causes.most_common(1)[0]
        more = f" (+{len(self.causes) - 1} other cause(s))" if len(self.causes) > 1 else ""
        return f"{self.role}: {self.errors}/{self.episodes} {self.unit} error — {cause}{more if n < self.errors else ''}"

    def count(self, error: str | None, failed: bool) -> None:
        """One more record; ``failed``: an error, with its text ``error``."""
        self.episodes += 1
        if failed:
            self.errors += 1
            self.causes[_cause(error)] += 1


def _cause(text: str | None) -> str:
    first = (text or "no reason recorded").strip().splitlines()
    return (first[0] if first else "no reason recorded")[:160]


def _last_records(folders: tuple[str | Path, ...], pattern: str, id_key: str, needed: str) -> Iterator[dict[str, Any]]:
    """The last record per (file, ``rec[id_key]``) of every file matching ``pattern`` under ``folders`` (a resumed
    run rewrites a record), among the lines that are JSON objects holding ``needed``; other lines (a line cut by
    a crash) are skipped, and so are unreadable files and missing folders."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for folder in folders:
        if not Path(folder).is_dir():
            continue
        for path in sorted(Path(folder).rglob(pattern)):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:  # streamed: RL runs write GBs
                    for n, line in enumerate(f):
                        try:
                            rec = json.loads(line)
                        except ValueError:
                            continue
                        if isinstance(rec, dict) and needed in rec:
                            latest[(str(path), str(rec.get(id_key, f"line {n}")))] = rec
            except OSError:
                continue
    return iter(latest.values())


def role_health(*folders: str | Path) -> list[RoleHealth]:
    """Per-role error counts of every episode and every judged item under ``folders`` (an encrypted benchmark's
    episodes live in a private folder beside the results: pass both).

    Returns the model roles (episodes, sorted by role), then the judge roles (verdicts, sorted: ``judge <name>``
    for the answer judge, ``image judge <name>`` for the Target Match judge; an item without a judged target
    image counts for no image judge; ``reward judge (RL rollouts)`` for the RL trainer's reward judge, from the
    ``rollout_trajectories`` / ``rollout_judge_errors`` of each step in ``metrics.jsonl``). A record counts
    once, the last line per (file, episode id or step); lines that are not JSON objects are skipped (the files'
    own readers repair them). Raises nothing: missing folders and unreadable files count nothing.
    """
    roles: dict[str, RoleHealth] = {}
    for rec in _last_records(folders, EPISODE_FILE, "id", "status"):
        role = str(rec.get("policy") or "unnamed policy")
        roles.setdefault(role, RoleHealth(role)).count(rec.get("error"), rec["status"] == "error")
    judges: dict[str, RoleHealth] = {}
    for it in _last_records(folders, PREDICTION_FILES, "episode_id", "judge"):  # kit.eval.metrics.ItemResult
        role = f"judge {it.get('judge') or 'unnamed'}"
        failed = bool(it.get("judge_error")) and it.get("correct") is None  # as metrics.run_scores' judge_errors
        judges.setdefault(role, RoleHealth(role, unit="verdicts")).count(it.get("judge_error"), failed)
        if it.get("image_judge"):
            role = f"image judge {it['image_judge']}"
            judges.setdefault(role, RoleHealth(role, unit="verdicts")).count(
                it.get("image_judge_error"), bool(it.get("image_judge_error")))
    for row in _last_records(folders, RL_METRICS_FILE, "step", "rollout_trajectories"):  # kit.rl.trainer's steps
        n, bad = row.get("rollout_trajectories"), row.get("rollout_judge_errors") or 0
        if isinstance(n, int) and isinstance(bad, int) and n > 0:
            h = judges.setdefault(RL_JUDGE_ROLE, RoleHealth(RL_JUDGE_ROLE, unit="verdicts"))
            h.episodes += n
            if bad:  # excluded from the update as judge_error (kit.rl.eligibility): a dead judge trains nothing
                h.errors += min(bad, n)
                h.causes[f"reward not computed: the judge failed (step {row.get('step')}; run_log.jsonl)"[:160]] += 1
    return [roles[k] for k in sorted(roles)] + [judges[k] for k in sorted(judges)]


def failed_roles(health: list[RoleHealth], tolerance: float = 0.0) -> list[RoleHealth]:
    """The roles (model roles and judges) whose share of errors is above ``tolerance`` (a fraction in [0, 1]).

    Raises:
        ValueError: ``tolerance`` outside [0, 1] (NaN included).
    """
    if not (0.0 <= tolerance <= 1.0):
        raise ValueError(f"the tolerated share of error episodes is a fraction in [0, 1], got {tolerance!r}")
    return [h for h in health if h.errors and h.error_rate > tolerance]


def health_lines(health: list[RoleHealth]) -> list[str]:
    """One line a role (:meth:`RoleHealth.line`)."""
    return [h.line() for h in health]
