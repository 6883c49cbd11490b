"""The episode workspace as the sandbox sees it: scratch folders, environment, produced files.

The workspace is the interpreter's cwd and ``HOME``; ``.kit/sandbox`` inside it holds ``TMPDIR`` and
caches and is removed on close. The harness writes into the workspace too, so nothing the code could
plant there is ever followed: folders are recreated without following links, and files are handed to
the sandbox user through ``O_NOFOLLOW`` descriptors. Which regular files a call created or modified
(``CodeResult.new_files``) comes from a snapshot before and after it; registering the images among
them is the tool executor's job (``kit.harness.tools.execute_code``).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

KIT_DIR = ".kit"  # internal folder inside the workspace, never reported in new_files
_SCRATCH = ("sandbox",)  # .kit/sandbox: TMPDIR and caches of the child, removed on close
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

Snapshot = dict[str, tuple[int, int, int]]


def scratch_dir(workspace: Path) -> Path:
    return workspace.joinpath(KIT_DIR, *_SCRATCH)


def snapshot(root: Path, limit: int) -> Snapshot:
    """Regular files under ``root`` (symlinks not followed, ``.kit/`` skipped) mapped to
    (inode, mtime_ns, size); stops after ``limit`` files."""
    out: Snapshot = {}
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            it = os.scandir(root / rel_dir if rel_dir else root)
        except OSError:
            continue
        with it:
            for entry in it:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if rel != KIT_DIR:
                            stack.append(rel)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue  # symlinks could point outside the workspace: never report them
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                out[rel] = (st.st_ino, st.st_mtime_ns, st.st_size)
                if len(out) >= limit:
                    log.warning("workspace %s has over %d files; new_files scan truncated", root, limit)
                    return out
    return out


def new_files(before: Snapshot, after: Snapshot) -> list[str]:
    """Workspace-relative paths created or modified between two snapshots, sorted."""
    return sorted(p for p, sig in after.items() if before.get(p) != sig)


def give_tree(root: Path, owner: tuple[int, int], skip: frozenset[str], limit: int) -> None:
    """Give ``owner`` (uid, gid) every directory and regular file under ``root`` it does not own
    yet (files the harness wrote since the last call: registered images, for instance), except the
    top-level names in ``skip``. Symlinks are never followed or changed, and the walk goes through
    directory descriptors opened with ``O_NOFOLLOW``, so a process of the sandbox that swaps a
    directory for a symlink meanwhile cannot redirect a chown outside the workspace."""
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return
    stack, seen = [(top, True)], 0
    while stack:
        dfd, is_top = stack.pop()
        try:
            st = os.fstat(dfd)
            if (st.st_uid, st.st_gid) != owner:
                os.fchown(dfd, *owner)
            with os.scandir(dfd) as it:
                entries = list(it)
            for entry in entries:
                if (is_top and entry.name in skip) or seen >= limit:
                    continue
                seen += 1
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((os.open(entry.name, _DIR_FLAGS, dir_fd=dfd), False))
                    elif entry.is_file(follow_symlinks=False):
                        est = os.stat(entry.name, dir_fd=dfd, follow_symlinks=False)
                        if (est.st_uid, est.st_gid) != owner:
                            os.chown(entry.name, *owner, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
        except OSError:
            pass
        finally:
            os.close(dfd)


def _real_dir(path: Path) -> None:
    """Make ``path`` a real directory: a symlink or file planted there is removed first (never
    followed). Called only while no process of the sandbox runs."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.mkdir()
        return
    if not stat.S_ISDIR(st.st_mode):
        path.unlink()
        path.mkdir()


def prepare_workspace(workspace: Path, mount_dirs: tuple[str, ...], owner: tuple[int, int] | None) -> None:
    """Create the scratch folder (and ``mount_dirs``, the read-only harness folders under
    bubblewrap) without following anything the code may have planted; under a sandbox user
    ``owner``, hand the workspace and scratch to it. Runs only while no process of the sandbox is alive."""
    scratch = scratch_dir(workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    dirs = [workspace / KIT_DIR, scratch, scratch / "tmp"]
    dirs += [workspace / d for d in mount_dirs]
    for d in dirs:
        _real_dir(d)
    if owner is None:
        return
    for d in (workspace, workspace / KIT_DIR, scratch, scratch / "tmp"):
        os.chown(d, *owner, follow_symlinks=False)


def remove_scratch(workspace: Path) -> None:
    """Remove ``.kit/sandbox`` (on close); a ``.kit`` symlink planted by the code is unlinked, never
    followed."""
    kit_dir = workspace / KIT_DIR
    if kit_dir.is_symlink():  # planted by the code: remove the link, never what it points to
        kit_dir.unlink()
    else:  # rmtree itself refuses a symlinked top and never follows links inside
        shutil.rmtree(kit_dir.joinpath(*_SCRATCH), ignore_errors=True)


def child_env(workspace: Path, python: str, token: str, extra: Mapping[str, str]) -> dict[str, str]:
    """A fresh environment: nothing is inherited from the parent (no proxies, keys, tokens).
    ``token`` marks the child's processes (``KIT_SANDBOX_ID``); ``extra`` is merged over the defaults."""
    scratch = scratch_dir(workspace)
    path = [os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"]
    env = {
        "PATH": os.pathsep.join(dict.fromkeys(path)),
        "HOME": str(workspace),
        "TMPDIR": str(scratch / "tmp"),
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "XDG_CONFIG_HOME": str(scratch / "config"),
        "MPLCONFIGDIR": str(scratch / "matplotlib"),
        "MPLBACKEND": "Agg",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",  # for Python subprocesses; the driver runs with -I
        "PYTHONDONTWRITEBYTECODE": "1",
        # One BLAS/OpenMP thread: many episodes share few cores, and per-thread arenas eat
        # into the address-space limit.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "KIT_SANDBOX_ID": token,
    }
    env.update(extra)
    return env
