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
    return _memoised(path, memo_dir)[0]


def _memoised(path: Path, memo_dir: Path) -> tuple[str | None, os.stat_result]:
    """(:func:`memoised_sha256`, the stat of ``path`` it was checked against)."""
    memo, st = _memo(path, memo_dir)
    try:
        d = json.loads(memo.read_text(encoding="utf-8"))
        if d["size"] == st.st_size and d["mtime_ns"] == st.st_mtime_ns:
            return str(d["sha256"]), st
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None, st


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


#: The child's program: hashlib alone (no kit import: it starts in ~20 ms), at idle CPU priority:
#: Linux ``SCHED_IDLE`` (it runs only on a core nothing else wants), else nice 19. It reads the file
#: the parent opened (``argv[1]``: its descriptor) and stops when the parent is gone (``argv[2]``:
#: its pid), so a killed build leaves no orphan reading the archive.
_CHILD = """
import hashlib, os, sys
try:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
except (AttributeError, OSError):
    try:
        os.nice(19)
    except OSError:
        pass
h, buf, parent = hashlib.sha256(), bytearray(8 << 20), int(sys.argv[2])
with os.fdopen(int(sys.argv[1]), "rb", buffering=0) as f:
    view = memoryview(buf)
    while n := f.readinto(buf):
        h.update(view[:n])
        if os.getppid() != parent:
            sys.exit(3)
print(h.hexdigest())
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
    high enough ``RLIMIT_NICE``; Linux refuses it to an ordinary user by default) and waits; where
    that is refused, or the child failed, it stops the child and hashes the file itself: never
    longer than hashing it before the build did. A memoised digest (:func:`memoised_sha256`) is
    returned without reading the file.

    ``background=False``: nothing is started; :meth:`result` hashes the whole file.

    Raises:
        OSError: the file cannot be opened (here) or read (by :meth:`result`, in this process).
    """

    def __init__(self, path: Path, memo_dir: Path, *, background: bool = True):
        self.path, self.memo_dir = Path(path), Path(memo_dir)
        self._digest, memo_stat = _memoised(self.path, self.memo_dir)
        self.after = "memoised" if self._digest is not None else "hashed here"  #: how :meth:`result` got it
        self._child: subprocess.Popen | None = None
        self._fh = None
        if self._digest is not None:
            #: the file's stat when hashing began (the build records its size and mtime: a file
            #: that changes meanwhile, such as a download still running, then differs from them);
            #: for a memoised digest, the stat the memo was checked against
            self.stat = memo_stat
            return
        # Opened here and handed to the child: the bytes hashed are the file's this process opened,
        # whatever later happens to the path (memoised only while the path still names that file).
        self._fh = open(self.path, "rb")  # noqa: SIM115 - closed by result() or cancel()
        self.stat = os.fstat(self._fh.fileno())
        if background:
            try:
                self._child = subprocess.Popen(
                    [sys.executable, "-I", "-c", _CHILD, str(self._fh.fileno()), str(os.getpid())],
                    pass_fds=(self._fh.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
            except (OSError, TypeError, ValueError) as exc:  # no process (or interpreter): result() hashes here
                log.warning("cannot start the sha256 of %s in the background: %s", self.path, exc)

    def result(self) -> str:
        """The file's sha256 (64 hex), memoised; blocks while the child or this process hashes."""
        if self._digest is not None:
            return self._digest
        child, self._child = self._child, None
        digest = None
        try:
            if child is not None:
                digest = self._wait(child)
            if digest is None:  # no child, or it failed: hashed here (a file that cannot be read raises)
                assert self._fh is not None
                if self._fh.seekable():
                    self._fh.seek(0)  # the child shared this descriptor's offset
                digest = hashlib.file_digest(self._fh, "sha256").hexdigest()
        except BaseException:
            if child is not None and child.poll() is None:  # interrupted while waiting: no orphan
                child.kill()
                child.wait()
            raise
        finally:
            self._close()
        self._digest = digest
        try:
            st = self.path.stat()
            same = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == (
                self.stat.st_dev, self.stat.st_ino, self.stat.st_size, self.stat.st_mtime_ns)
        except OSError:
            same = False
        if same:
            _remember(self.path, self.memo_dir, self.stat, digest)
        else:
            log.warning("%s changed while it was hashed: its sha256 is not memoised", self.path)
        return digest

    def _wait(self, child: subprocess.Popen) -> str | None:
        """The child's digest, or None where this process must hash (the child refused a raise, or failed)."""
        self.after = "finished in the background"
        if child.poll() is None:
            try:  # the build is over: the rest at normal priority
                os.sched_setscheduler(child.pid, os.SCHED_OTHER, os.sched_param(0))
                self.after = "raised to normal priority"
            except (AttributeError, OSError):  # not allowed (unprivileged, or not Linux): hash here
                child.kill()
                self.after = "hashed here (the child's priority could not be raised)"
        out, err = child.communicate()
        if child.returncode == 0 and re.fullmatch(r"[0-9a-f]{64}", out.strip()):
            return out.strip()
        if child.returncode > 0:
            last = (err.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
            log.warning("the background sha256 of %s failed (%s): hashed here", self.path, last)
            self.after = "hashed here (the child failed)"
        return None

    def _close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def cancel(self) -> None:
        """Stop the child (a failed build); nothing is memoised."""
        child, self._child = self._child, None
        if child is not None:
            child.kill()
            child.communicate()
        self._close()
