"""Did a run's model roles work? (issue 26, part 8: exit codes and summaries tell the truth.)

After a notebook ends, :func:`role_health` reads every episode it wrote (``**/episodes.jsonl`` under its results
folder) and counts, per role (the episode's ``policy``: the served model, the in-process checkpoint, a scripted
demonstrator), the episodes whose status is ``error``: the policy or its endpoint failed (an HTTP 500, a refused
connection, a crash), not the task (a wrong answer or an exhausted budget is a result, not an error). As
inspect_ai's ``fail_on_error``, a run fails when a role's share of error episodes is above a tolerance (default
0: any); ``python -m kit.cli notebook`` prints one line per role and exits 1. The notebook itself finished and
its outputs stay, so the cause can be read.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RoleHealth", "failed_roles", "health_lines", "role_health"]

EPISODE_FILE = "episodes.jsonl"


@dataclass
class RoleHealth:
    """One role's episodes: ``episodes`` in all, ``errors`` of them with status ``error``, ``causes`` the error
    texts (first line, at most 160 characters) with their counts."""

    role: str
    episodes: int = 0
    errors: int = 0
    causes: Counter = field(default_factory=Counter)

    @property
    def error_rate(self) -> float:
        return self.errors / self.episodes if self.episodes else 0.0

    def line(self) -> str:
        """``model: 3/3 episodes error — HTTP 500 from <endpoint>`` (the most frequent cause)."""
        if not self.errors:
            return f"{self.role}: {self.episodes}/{self.episodes} episodes ran (no error)"
        cause, n = self.causes.most_common(1)[0]
        more = f" (+{len(self.causes) - 1} other cause(s))" if len(self.causes) > 1 else ""
        return f"{self.role}: {self.errors}/{self.episodes} episodes error — {cause}{more if n < self.errors else ''}"


def _cause(text: str | None) -> str:
    first = (text or "no reason recorded").strip().splitlines()
    return (first[0] if first else "no reason recorded")[:160]


def role_health(*folders: str | Path) -> list[RoleHealth]:
    """Per-role error counts of every episode under ``folders`` (sorted by role; an encrypted benchmark's
    episodes live in a private folder beside the results: pass both). A record counts once, its last line
    (a resumed run retries an error episode and rewrites it). Lines that are not JSON objects (a line cut by a
    crash) are skipped: the episode files' own reader repairs them."""
    latest: dict[tuple[str, str], dict] = {}
    for folder in folders:
        if not Path(folder).is_dir():
            continue
        for path in sorted(Path(folder).rglob(EPISODE_FILE)):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:  # streamed: RL runs write GBs
                    for n, line in enumerate(f):
                        try:
                            rec = json.loads(line)
                        except ValueError:
                            continue
                        if isinstance(rec, dict) and "status" in rec:
                            latest[(str(path), str(rec.get("id", n)))] = {
                                "policy": rec.get("policy"), "status": rec["status"], "error": rec.get("error")}
            except OSError:
                continue
    roles: dict[str, RoleHealth] = {}
    for rec in latest.values():
        role = str(rec["policy"] or "unnamed policy")
        h = roles.setdefault(role, RoleHealth(role))
        h.episodes += 1
        if rec["status"] == "error":
            h.errors += 1
            h.causes[_cause(rec["error"])] += 1
    return [roles[k] for k in sorted(roles)]


def failed_roles(health: list[RoleHealth], tolerance: float = 0.0) -> list[RoleHealth]:
    """The roles whose share of error episodes is above ``tolerance`` (a fraction in [0, 1]).

    Raises:
        ValueError: ``tolerance`` outside [0, 1] (NaN included).
    """
    if not (0.0 <= tolerance <= 1.0):
        raise ValueError(f"the tolerated share of error episodes is a fraction in [0, 1], got {tolerance!r}")
    return [h for h in health if h.errors and h.error_rate > tolerance]


def health_lines(health: list[RoleHealth]) -> list[str]:
    """One line a role (:meth:`RoleHealth.line`)."""
    return [h.line() for h in health]
