"""Portable episode files: the ``workspace`` of an episode record is written relative to the folder of
the file that holds it (docs/contracts.md "Run", issue 18).

A run folder (``episodes.jsonl`` plus ``workspaces/<episode>/``) can then be moved, copied to another
machine or committed, and every reader still finds the images: a relative ``workspace`` is resolved
against the folder of the file it was read from. A workspace outside that folder is written as an
absolute path (nothing relative would survive a move anyway). Files written before this change carry
absolute paths and read as before (the viewer also falls back to ``workspaces/<name>`` beside the file).

In memory a record always holds a usable path (absolute, or relative to the process's working
directory as the caller gave it); only the serialized line is relative.
"""

from __future__ import annotations

import os
from pathlib import Path

from kit.harness.episode import EpisodeRecord


def _relative_inside(path: str, folder: str, up: int) -> str | None:
    """``path`` relative to ``folder`` (POSIX) when it lies inside ``folder`` or the folder ``up`` levels
    above it, else None (both absolute)."""
    base = Path(folder)
    for _ in range(up):
        base = base.parent
    b = str(base)
    if path == b or path.startswith(b.rstrip(os.sep) + os.sep):
        return Path(os.path.relpath(path, folder)).as_posix()
    return None


def portable_workspace(workspace: str | os.PathLike | None, folder: str | os.PathLike, *, up: int = 0) -> str | None:
    """The ``workspace`` to write into a file in ``folder``: relative (POSIX, e.g. ``workspaces/t-1a2b``)
    when it lies inside ``folder``, else absolute. ``up`` > 0 also makes one relative inside the folder
    that many levels above (``../trajectories/workspaces/t-1a2b`` for a split written beside the run it
    draws from; it then moves with that parent folder). A relative ``workspace`` is taken relative to the
    current working directory (how the harness got it); ``None`` / ``""`` pass through.

    Inside is decided lexically first, then with symlinks resolved (``/tmp`` vs ``/private/tmp``)."""
    if not workspace:
        return None if workspace is None else ""
    ws, fd = os.path.abspath(workspace), os.path.abspath(folder)
    rel = _relative_inside(ws, fd, up)
    if rel is None:
        try:
            rel = _relative_inside(str(Path(ws).resolve()), str(Path(fd).resolve()), up)
        except (OSError, RuntimeError):  # a symlink loop: keep the absolute path
            rel = None
    return rel if rel is not None else ws


def resolve_workspace(workspace: str | None, folder: str | os.PathLike) -> str | None:
    """A ``workspace`` read from a file in ``folder``: a relative one joined to ``folder`` (made absolute),
    an absolute one (older files, workspaces elsewhere) unchanged; ``None`` / ``""`` pass through."""
    if not workspace or os.path.isabs(workspace):
        return workspace
    return os.path.normpath(os.path.join(os.path.abspath(folder), workspace))


def portable_record(rec: EpisodeRecord, folder: str | os.PathLike, *, up: int = 0) -> EpisodeRecord:
    """A copy of ``rec`` whose ``workspace`` is :func:`portable_workspace` for ``folder`` (``rec`` is unchanged)."""
    ws = portable_workspace(rec.workspace, folder, up=up)
    return rec if ws == rec.workspace else rec.model_copy(update={"workspace": ws})


def resolved_record(rec: EpisodeRecord, folder: str | os.PathLike) -> EpisodeRecord:
    """``rec`` read from a file in ``folder`` with its ``workspace`` resolved (:func:`resolve_workspace`), in place."""
    ws = resolve_workspace(rec.workspace, folder)
    if ws != rec.workspace:
        rec.workspace = ws
    return rec


def record_line(rec: EpisodeRecord, path: str | os.PathLike, *, up: int = 0) -> str:
    """The JSON line (no newline) of ``rec`` for the file ``path``, workspace relative to its folder
    (:func:`portable_workspace`, ``up`` as there)."""
    return portable_record(rec, Path(path).parent, up=up).model_dump_json()


__all__ = ["portable_record", "portable_workspace", "record_line", "resolve_workspace", "resolved_record"]
