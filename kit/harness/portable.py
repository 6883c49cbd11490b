"""Portable episode files: the ``workspace`` of an episode record is written relative to the folder of
the file that holds it (docs/contracts.md "Run", issue 18).

A run folder (``episodes.jsonl`` plus ``workspaces/<episode>/``) can then be moved, copied to another
machine or committed, and every reader still finds the images: a relative ``workspace`` is resolved
against the folder of the file it was read from. A workspace outside that folder is written as an
absolute path (nothing relative would survive a move anyway). Files written before this change carry
absolute paths and read as before; when such a path no longer exists (the run folder was copied
elsewhere) every reader falls back to ``workspaces/<name>`` beside the file (:func:`resolve_workspace`).

A relative ``workspace`` may climb at most :data:`MAX_UP` level above its file's folder (the split writer
uses ``up=1``); ``../../../x`` is refused with :class:`WorkspacePathError` (a ``ValueError``), so a
hostile episodes.jsonl cannot point a reader at an arbitrary folder.

In memory a record always holds a usable path (absolute, or relative to the process's working
directory as the caller gave it); only the serialized line is relative.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from kit.harness.episode import EpisodeRecord

MAX_UP = 1  # kit: the most ``..`` levels a relative workspace may climb (split files beside a run: up=1)


class WorkspacePathError(ValueError):
    """A ``workspace`` read from a file that no reader may use (climbs out of the run, NUL byte)."""


def short_path(path: str, limit: int = 120) -> str:
    """``path`` for an error message: its start and end around ``…`` when over ``limit`` characters."""
    return path if len(path) <= limit else f"{path[:limit // 2]}…{path[-(limit // 2):]} ({len(path)} chars)"


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
        except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte: keep the absolute path
            rel = None
    return rel if rel is not None else ws


def resolve_workspace(workspace: str | None, folder: str | os.PathLike) -> str | None:
    """A ``workspace`` read from a file in ``folder``, as every reader uses it (read_episodes, the SFT
    loaders, the viewer): a relative one joined to ``folder`` (made absolute), an absolute one (older
    files, workspaces elsewhere) unchanged; ``None`` / ``""`` pass through. ``folder/workspaces/<name>``
    instead when that folder exists and the result is an absolute path outside ``folder`` (an old run
    copied elsewhere: the copy's images, as the viewer shows them) or no folder at all.

    Raises:
        WorkspacePathError: a NUL byte, or a relative workspace whose normalised path climbs more than
            :data:`MAX_UP` level above ``folder`` (message with the path shortened, :func:`short_path`).
    """
    if not workspace:
        return workspace
    if "\0" in workspace:
        raise WorkspacePathError(f"workspace {short_path(repr(workspace))} holds a NUL byte")
    if os.path.isabs(workspace):
        out = workspace
    else:
        norm = posixpath.normpath(workspace.replace(os.sep, "/"))
        parts = norm.split("/")
        climbs = next((i for i, p in enumerate(parts) if p != ".."), len(parts))
        if climbs > MAX_UP:
            raise WorkspacePathError(f"relative workspace {short_path(workspace)!r} climbs {climbs} levels above "
                                     f"its file's folder (at most {MAX_UP}): refused, it leaves the run")
        out = os.path.normpath(os.path.join(os.path.abspath(folder), workspace))
    name = os.path.basename(out.rstrip(os.sep))
    local = os.path.join(os.path.abspath(folder), "workspaces", name)
    try:
        # an old file's absolute path outside its folder (written before relative workspaces, the run
        # since copied or moved) or a missing folder: the copy's own workspaces/<name> when it has one
        stale = os.path.isabs(workspace) and _relative_inside(out, os.path.abspath(folder), 0) is None
        if name and (stale or not os.path.isdir(out)) and local != out and os.path.isdir(local):
            return local
    except (OSError, ValueError):  # a name too long for the system: kept, a reader reports it missing
        pass
    return out


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


__all__ = ["MAX_UP", "WorkspacePathError", "portable_record",
           "portable_workspace", "record_line", "resolve_workspace", "resolved_record", "short_path"]
