"""The one summary line and exit status every benchmark under ``benchmarks/`` ends with.

A script records each targeted figure with :meth:`Summary.target` (or :meth:`Summary.check` for a
target that is not one comparison) and untargeted figures with :meth:`Summary.figure`, then ends
with ``return summary.finish()``, which prints one line

    BENCH {"name": "bench_search", "targets": {"rank_cpu_ratio": {"value": 12.6, "target": ">= 10",
           "met": true}, ...}, "figures": {...}, "met": true}

(JSON after ``BENCH ``, on one line) and returns the exit status: 0 when every target is met, 1 when
one is missed, 2 when the benchmark could not measure at all (:meth:`Summary.skip`, e.g. no shared
data). Values are plain JSON numbers; a non-finite value is written as ``null`` and misses its target.
"""

from __future__ import annotations

import json
import math
import operator
from typing import Any

PREFIX = "BENCH "
EXIT_MET, EXIT_MISSED, EXIT_NOT_MEASURED = 0, 1, 2
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq}


def _plain(value: Any) -> Any:
    """A JSON-safe copy: numpy scalars to Python numbers, NaN/inf to None, containers recursively."""
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"benchmark value of type {type(value).__name__} is not a JSON figure: {value!r}")


class Summary:
    """Targets and figures of one benchmark run; ``name`` is the script's name (``bench_search``)."""

    def __init__(self, name: str):
        self.name = name
        self.targets: dict[str, dict[str, Any]] = {}
        self.figures: dict[str, Any] = {}
        self.skipped: str | None = None

    def _new_key(self, key: str) -> None:
        if key in self.targets or key in self.figures:
            raise ValueError(f"{self.name}: figure {key!r} recorded twice")

    def target(self, key: str, value: Any, op: str, bound: float) -> bool:
        """Record ``value op bound`` (``op`` one of ``<= < >= > ==``); returns whether it is met."""
        if op not in _OPS:
            raise ValueError(f"unknown comparison {op!r} (expected one of {sorted(_OPS)})")
        v = _plain(value)
        met = isinstance(v, (int, float)) and not isinstance(v, bool) and bool(_OPS[op](v, bound))
        return self.check(key, v, met, f"{op} {bound:g}")

    def check(self, key: str, value: Any, met: bool, target: str) -> bool:
        """Record a target that is not a single comparison (``target`` describes it); returns ``met``."""
        self._new_key(key)
        self.targets[key] = {"value": _plain(value), "target": target, "met": bool(met)}
        return bool(met)

    def figure(self, key: str, value: Any) -> None:
        """Record a figure that has no target."""
        self._new_key(key)
        self.figures[key] = _plain(value)

    @property
    def met(self) -> bool | None:
        """True when every target is met (vacuously for a figures-only benchmark); None when skipped."""
        return None if self.skipped is not None else all(t["met"] for t in self.targets.values())

    def line(self) -> str:
        body: dict[str, Any] = {"name": self.name, "targets": self.targets, "figures": self.figures, "met": self.met}
        if self.skipped is not None:
            body["skipped"] = self.skipped
        return PREFIX + json.dumps(body, allow_nan=False, ensure_ascii=False)

    def finish(self) -> int:
        """Print the summary line (last line of the run); returns the exit status."""
        print(self.line(), flush=True)
        if self.skipped is not None:
            return EXIT_NOT_MEASURED
        return EXIT_MET if self.met else EXIT_MISSED

    def skip(self, reason: str) -> int:
        """End a run that could not measure (missing data, ...): prints the line, returns 2."""
        self.skipped = reason
        return self.finish()


def parse_line(text: str) -> dict[str, Any]:
    """The summary of a benchmark's output: the JSON of its last ``BENCH `` line.

    Raises:
        ValueError: no summary line in ``text``.
    """
    for ln in reversed(text.splitlines()):
        if ln.startswith(PREFIX):
            return json.loads(ln[len(PREFIX):])
    raise ValueError("no BENCH summary line in the output")
