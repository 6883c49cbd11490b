"""Which archive an index belongs to: the archive's key, read from its ZIM header in microseconds,
and the sha256 of its bytes, computed by a child process at idle CPU priority while its index is
built (docs/local_web.md, "Caching").

The key names the index folder (``<root>/<key[:16]>-v<INDEX_FORMAT>/``) and the collections; the
sha256 is recorded in the index's manifest (provenance) and memoised by (path, size, mtime), so
an archive is hashed once on a machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

from kit.web.zim.cache import _write_json_atomic

log = logging.getLogger(__name__)

def archive_key(uuid: str, checksum: str | None, size: int, path: Path, memo_dir: Path) -> str:
    """The archive's identity, 64 hex.

    ``sha256("zim\\nuuid=<uuid>\\nmd5=<checksum>\\nbytes=<size>")``: the UUID the archive's creator
    drew and the MD5 it stored over all the archive's other bytes (ZIM format, header fields
    ``uuid`` and ``checksumPos``), so a copy or a renamed file has the same key and a rewritten
    archive another, without reading the file. An archive without a stored checksum (the format
    allows it) is keyed by the sha256 of its bytes instead (:func:`archive_sha256`: its first
    opening reads the whole file).

    Raises:
        OSError: an archive without a checksum cannot be read.
    """
    if not checksum:
        return archive_sha256(path, memo_dir)
    return hashlib.sha256(f"zim\nuuid={uuid}\nmd5={checksum}\nbytes={size}".encode()).hexdigest()


def _memo(path: Path, memo_dir: Path) -> tuple[Path, os.stat_result]:
    st = path.stat()
    return memo_dir / f"{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]}.json", st


def memoised_sha256(path: Path, memo_dir: Path) -> str | None:
    """The sha256 memoised for ``path`` in ``memo_dir`` when its size and mtime still match, else None.

    Raises:
        OSError: ``path`` cannot be stat'ed.
    """
    memo, st = _memo(path, memo_dir)
    try:
        d = json.loads(memo.read_text(encoding="utf-8"))
        if d["size"] == st.st_size and d["mtime_ns"] == st.st_mtime_ns:
            return str(d["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _remember(path: Path, memo_dir: Path, st: os.stat_result, digest: str) -> None:
    memo, _ = _memo(path, memo_dir)
    try:
        _write_json_atomic(memo, {"path": str(path.resolve()), "size": st.st_size,
                                  "mtime_ns": st.st_mtime_ns, "sha256": digest})
    except OSError as exc:  # a read-only cache only costs re-hashing next time
        log.warning("cannot memoise sha256 of %s: %s", path, exc)


def archive_sha256(path: Path, memo_dir: Path) -> str:
    """sha256 of an archive file (64 hex), memoised in ``memo_dir`` by (resolved path, size, mtime_ns).

    Raises:
        OSError: the file cannot be read.
    """
    return IdleSha256(path, memo_dir, background=False).result()


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


#: The child's program: hashlib alone (no kit import: it starts in ~20 ms), at idle CPU priority:
#: Linux ``SCHED_IDLE`` (it runs only on a core nothing else wants), else nice 19.
_CHILD = """
import hashlib, os, sys
try:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
except (AttributeError, OSError):
    try:
        os.nice(19)
    except OSError:
        pass
with open(sys.argv[1], "rb") as f:
    print(hashlib.file_digest(f, "sha256").hexdigest())
"""


class IdleSha256:
    """The sha256 of a file, hashed by a child process at idle CPU priority until :meth:`result`
    is called.

    Why: on 2 cores the index build leaves a core idle for part of its phases (~40 % of one core
    while the articles are written), and hashing a 50 GB archive took ~43 s of one core before the
    build. A process, not a thread: a thread at idle priority waiting for the GIL makes a busy main
    thread hand it over and wait for a thread the scheduler does not run (measured: the main
    thread 3-4 % slower while both cores are busy). When :meth:`result` finds the child still
    hashing, it raises the child to normal priority (allowed to root, or with ``CAP_SYS_NICE`` or a
    high enough ``RLIMIT_NICE``) and waits; where that is refused it stops the child and hashes the
    file itself: never longer than hashing it before the build did. A memoised digest
    (:func:`memoised_sha256`) is returned without reading the file.

    ``background=False``: nothing is started; :meth:`result` hashes the whole file.

    Raises (from :meth:`result`):
        OSError: the file cannot be read (by the child or this process).
    """

    def __init__(self, path: Path, memo_dir: Path, *, background: bool = True):
        self.path, self.memo_dir = Path(path), Path(memo_dir)
        self._digest = memoised_sha256(self.path, self.memo_dir)
        self._stat = self.path.stat()
        self.after = "memoised" if self._digest is not None else "hashed here"  #: how :meth:`result` got it
        self._child: subprocess.Popen | None = None
        if self._digest is None and background:
            try:
                self._child = subprocess.Popen([sys.executable, "-I", "-c", _CHILD, str(self.path)],
                                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE, text=True)
            except OSError as exc:  # no process to spare: result() hashes here
                log.warning("cannot start the sha256 of %s in the background: %s", self.path, exc)

    def result(self) -> str:
        """The file's sha256 (64 hex), memoised; blocks while the child or this process hashes."""
        if self._digest is not None:
            return self._digest
        child, self._child = self._child, None
        digest = None
        if child is not None:
            self.after = "finished in the background"
            if child.poll() is None:
                try:  # the build is over: the rest at normal priority
                    os.sched_setscheduler(child.pid, os.SCHED_OTHER, os.sched_param(0))
                    self.after = "raised to normal priority"
                except (AttributeError, OSError):  # not allowed here: stop it, hash here
                    child.kill()
                    self.after = "hashed here (the child's priority could not be raised)"
            out, err = child.communicate()
            if child.returncode == 0 and re.fullmatch(r"[0-9a-f]{64}", out.strip()):
                digest = out.strip()
            elif child.returncode > 0:  # it could not read the file (killed: hashed here)
                last = (err.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
                raise OSError(f"cannot hash {self.path}: {last}")
        if digest is None:
            digest = _file_sha256(self.path)
        self._digest = digest
        _remember(self.path, self.memo_dir, self._stat, digest)
        return digest

    def cancel(self) -> None:
        """Stop the child (a failed build); nothing is memoised."""
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.communicate()

