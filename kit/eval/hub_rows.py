"""Turning the rows of a benchmark release into tasks (the row loop of
:func:`kit.eval.hub_loaders.load_hub_benchmark`; split out of that module to keep it small)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kit.eval.crypto import DecryptionError
from kit.eval.loaders import BenchmarkError, LoadResult
from kit.harness.episode import Task


class BadRow:
    """A place in a data file that is not a row (a line that is not JSON, not UTF-8, too deeply
    nested): reported as that row's problem by :func:`~kit.eval.hub_loaders.load_hub_benchmark`."""

    def __init__(self, reason: str):
        self.reason = reason


def convert_rows(res: LoadResult, rows: Iterable[tuple[str, str, int, Any]],
                 convert: Callable[[dict[str, Any], int, Any], Iterable[Task]], exclude: Callable[[str, Task], str | None],
                 context: Callable[[str], Any], *, strict: bool, limit: int | None) -> None:
    """Add the tasks of ``rows`` (``(file, where, index, row)``) to ``res``: a bad row is its problem (or raises
    when ``strict``), a task ``exclude`` names a reason for is skipped; stops at ``limit`` tasks."""
    name = res.benchmark
    for fname, where, i, row in rows:
        ctx = context(fname)
        try:
            if isinstance(row, BadRow):
                raise BenchmarkError(row.reason)
            if not isinstance(row, dict):
                raise BenchmarkError(f"row is a JSON {type(row).__name__}, not an object")
            for t in convert(dict(row), i, ctx):
                why = exclude(name, t)
                if why is None:
                    res.add([t], where)
                else:
                    res.skip(why)
        except (BenchmarkError, DecryptionError, KeyError, TypeError, ValueError, AttributeError) as e:
            if strict:
                raise BenchmarkError(f"{name} {where}: {type(e).__name__}: {e}") from e
            res.problem(where, f"{type(e).__name__}: {e}")
        if limit is not None and len(res.tasks) >= limit:
            res.tasks = res.tasks[:limit]
            break
