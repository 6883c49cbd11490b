"""Chunked jobs of the index build (issue 17, part 2): a process pool that yields results in
submission order with bounded memory, and the build's record of finished chunks and skips
(``b.chunks``, ``b.skipped`` in ``build.sqlite``, :mod:`kit.web.zim.build`)."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import sqlite3
from collections.abc import Callable, Iterator

#: Chunks a pool worker runs before it is replaced by a fresh one (kit: measured at 60k articles,
#: the image phase's pool grew from 362 MB at 20k to 403 MB; a fresh worker starts in ~0.2 s).
WORKER_TASKS = 64


class _Runner:
    """Runs chunk jobs inline or in a process pool, yielding results in submission order with at
    most ``2 * workers`` chunks in flight (bounded memory)."""

    def __init__(self, workers: int):
        # a daemonic process (a multiprocessing pool's worker) may not start children: inline
        self.workers = workers if not multiprocessing.current_process().daemon else 1
        self.pool: cf.ProcessPoolExecutor | None = None
        if self.workers > 1:
            # forkserver: workers fork from one clean server process (no fork of this possibly
            # threaded one), started once per process, with this module preloaded and without
            # re-running the caller's main script.
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["kit.web.zim.build"])
            # Workers are replaced every WORKER_TASKS chunks: their heaps (lxml trees, decoded
            # images) fragment and grow with the chunks done, so a long build's memory would too.
            self.pool = cf.ProcessPoolExecutor(workers, mp_context=ctx,
                                               max_tasks_per_child=WORKER_TASKS)

    def map(self, fn: Callable, jobs: Iterator[tuple]) -> Iterator:
        if self.pool is None:
            for args in jobs:
                yield fn(*args)
            return
        window: list[cf.Future] = []
        for args in jobs:
            window.append(self.pool.submit(fn, *args))
            if len(window) >= 2 * self.workers:
                yield window.pop(0).result()
        for fut in window:
            yield fut.result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


def _add_skipped(db: sqlite3.Connection, phase: str, counts: dict[str, int]) -> None:
    for reason, n in counts.items():
        db.execute("INSERT INTO b.skipped VALUES (?, ?, ?) ON CONFLICT(phase, reason) "
                   "DO UPDATE SET n = n + excluded.n", (phase, reason, n))


def _done(db: sqlite3.Connection, phase: str) -> set[int]:
    return {i for (i,) in db.execute("SELECT id FROM b.chunks WHERE phase = ?", (phase,))}
