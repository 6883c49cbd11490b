"""Concurrent, resumable batch runs of the harness (docs/contracts.md "Run"; issue: episodes and runs).

:func:`run_batch` runs many tasks with asyncio under a concurrency limit and appends each finished
episode as one JSON line to ``<out>/episodes.jsonl`` (flushed and fsynced one line at a time). A run
that was killed continues where it stopped: finished episode ids are read back and skipped, a torn
last line is cut off (its episode is rerun), and unfinished workspaces are recreated, so nothing is
redone or duplicated.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from kit.harness.episode import EpisodeRecord, Task, json_safe
from kit.harness.loop import Harness
from kit.harness.parsing import scrub
from kit.harness.portable import WorkspacePathError, record_line, resolved_record
from kit.progress import progress as progress_bar

EPISODES = "episodes.jsonl"


def workspace_name(eid: str) -> str:
    """A safe, unique folder name for an episode id: unsafe characters replaced, plus a short hash,
    so ids like ``..``, ``a/b`` or ``x#1`` can never leave the run folder or collide."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", eid).strip("._")[:80] or "episode"
    return f"{stem}-{hashlib.sha1(eid.encode('utf-8', 'replace')).hexdigest()[:8]}"


def episode_id(task: Task, sample: int = 0) -> str:
    """Stable episode id: the task id, plus ``#<sample>`` for repeated samples of one task."""
    return task.id if sample == 0 else f"{task.id}#{sample}"


class TornLineWarning(UserWarning):
    """:func:`read_episodes` ignored (or, with ``repair``, cut off) a torn last line of an episodes file."""


def read_episodes(path: str | Path, *, repair: bool = False) -> list[EpisodeRecord]:
    """Read an episodes file. A torn last line (bytes after the final newline: a killed writer, which
    writes each record and its newline at once) is ignored with a :class:`TornLineWarning` naming its
    line number, and cut off when ``repair`` is True; every newline-terminated line is complete, so one
    that is not a valid record is an error, the last one too. A relative ``workspace`` (how :class:`EpisodeWriter` writes one inside the
    file's folder) is resolved against the file's folder, so a moved run folder still finds its images.

    An absolute workspace that no longer exists falls back to ``workspaces/<name>`` beside the file
    (an old run copied elsewhere, :func:`kit.harness.portable.resolve_workspace`).

    Raises:
        ValueError: a complete (newline-terminated) line is not a valid episode record (names file and line).
        kit.harness.portable.WorkspacePathError: (a ValueError) a record's relative workspace climbs out
            of the run (``../../x``), on any line.
    """
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    segments = data.split(b"\n")
    tail = segments.pop()  # bytes after the last newline: empty unless the last write was torn
    out: list[EpisodeRecord] = []
    pos = good_end = 0
    for i, seg in enumerate(segments):
        pos += len(seg) + 1
        if seg.strip():
            try:
                rec = EpisodeRecord.model_validate_json(seg)
            except ValueError as e:  # a complete line: never mistaken for a torn one
                raise ValueError(f"{path}: line {i + 1} is not a valid episode record: {e}") from e
            try:  # a complete record whose workspace leaves the run: refused even on the last line
                out.append(resolved_record(rec, path.parent))
            except WorkspacePathError as e:
                raise WorkspacePathError(f"{path}: line {i + 1}: {e}") from e
        good_end = pos
    if tail.strip():
        warnings.warn(f"{path}: line {len(segments) + 1} is torn (no newline after its {len(tail)} bytes: "
                      f"a killed writer); {'cut off' if repair else 'ignored'}", TornLineWarning, stacklevel=2)
    if repair and good_end < len(data):
        with open(path, "r+b") as f:
            f.truncate(good_end)
    return out


class EpisodeWriter:
    """Appends records as JSON lines, one fsync per record, from many concurrent episodes. A workspace
    inside the file's folder is written relative to it (:func:`kit.harness.portable.record_line`)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = asyncio.Lock()

    async def write(self, rec: EpisodeRecord) -> None:
        # the workspace is written relative to this file's folder, so the run folder can move (kit.harness.portable)
        try:
            line = record_line(rec, self.path) + "\n"
        except ValueError:  # unserializable text or values slipped through: convert rather than lose the episode
            # (PydanticSerializationError is a ValueError; json_safe turns numpy/objects into numbers/str)
            line = record_line(EpisodeRecord.model_validate(scrub(json_safe(rec.model_dump()))), self.path) + "\n"
        async with self._lock:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())


def _drop_records(path: Path, ids: set[str]) -> None:
    """Rewrite the episodes file ``path`` without the records whose id is in ``ids`` (atomically: a temporary file
    replaces it; the other lines are kept byte for byte)."""
    keep = []
    for line in path.read_bytes().split(b"\n"):
        if not line.strip():
            continue
        try:
            rid = json.loads(line).get("id")
        except ValueError:  # read_episodes(repair=True) has already cut a torn last line
            rid = None
        if rid not in ids:
            keep.append(line + b"\n")
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_bytes(b"".join(keep))
    tmp.replace(path)


async def run_batch(harness: Harness | Callable[[Task, int], Harness], tasks: Iterable[Task], out_dir: str | Path, *,
                    samples: int = 1, concurrency: int = 8, progress: bool = True,
                    on_episode: Callable[[EpisodeRecord], None] | None = None) -> list[EpisodeRecord]:
    """Run ``samples`` episodes per task, ``concurrency`` at a time; resume a previous run in ``out_dir``: a
    finished episode is never redone, one that ended in status ``error`` (its policy, endpoint or harness
    failed) is run again, its old record dropped from the file.

    Args:
        harness: one :class:`Harness` shared by all episodes, or a factory ``(task, sample) -> Harness``
            (e.g. a different seed per sample).
        out_dir: run folder: ``episodes.jsonl`` and ``workspaces/<episode id>/``.
        on_episode: called with each newly finished record (e.g. to write its transcript).

    Returns:
        All records of the run, previously finished ones included, in task/sample order.

    Raises:
        ValueError: two tasks share an id (their episodes would collide).
    """
    out = Path(out_dir)
    tasks = list(tasks)
    ids = [t.id for t in tasks]
    empty = [i for i, t in enumerate(tasks) if not t.id.strip()]
    if empty:
        raise ValueError(f"tasks at positions {empty[:5]} have an empty id")
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"duplicate task ids: {dup[:5]}")
    prior = read_episodes(out / EPISODES, repair=True)
    failed = {r.id for r in prior if r.status == "error"}
    if failed:  # the policy or harness failed (an HTTP 500, a crash): retried on resume, not kept as finished
        _drop_records(out / EPISODES, failed)
    done = {r.id: r for r in prior if r.id not in failed}
    writer = EpisodeWriter(out / EPISODES)
    todo = [(t, s) for t in tasks for s in range(samples) if episode_id(t, s) not in done]
    sem = asyncio.Semaphore(max(1, concurrency))
    bar = progress_bar(total=len(todo), desc="episodes", unit="episode", disable=not progress)  # tqdm.auto, kit.progress

    async def one(task: Task, sample: int) -> EpisodeRecord:
        async with sem:
            eid = episode_id(task, sample)
            ws = out / "workspaces" / workspace_name(eid)
            if ws.is_symlink() or ws.is_file():
                ws.unlink()
            elif ws.exists():  # an unfinished episode from a killed run: start it clean
                shutil.rmtree(ws)
            h = harness(task, sample) if callable(harness) and not isinstance(harness, Harness) else harness
            rec = await h.run(task, ws, episode_id=eid)
            await writer.write(rec)
            if on_episode is not None:
                on_episode(rec)
            bar.update(1)
            return rec

    new = await asyncio.gather(*(one(t, s) for t, s in todo))
    bar.close()
    done.update({r.id: r for r in new})
    return [done[episode_id(t, s)] for t in tasks for s in range(samples) if episode_id(t, s) in done]


def summarize_records(records: list[EpisodeRecord]) -> dict:
    """Status counts, tool-use counts, mean turns and intervention counts of a set of episodes."""
    from collections import Counter

    status: Counter[str] = Counter()
    tools: Counter[str] = Counter()
    events: Counter[str] = Counter()
    for r in records:
        status[r.status] += 1
        events.update(r.event_counts())
        for m in r.messages:
            if m.role == "tool" and m.name:
                tools[m.name] += 1
    n = len(records) or 1
    return {"episodes": len(records), "status": dict(status), "tool_observations": dict(tools),
            "mean_turns": sum(r.turns for r in records) / n, "mean_tool_calls": sum(r.tool_calls for r in records) / n,
            "events": dict(events), "trainable": sum(r.trainable for r in records)}


def dump_json(obj, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=str), encoding="utf-8")
    return path
