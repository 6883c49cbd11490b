"""Which archive an index belongs to: the archive's key, read from its ZIM header in microseconds,
and the sha256 of its bytes, computed on a thread at idle CPU priority while its index is built
(docs/local_web.md, "Caching").

The key names the index folder (``<root>/<key[:16]>-v<INDEX_FORMAT>/``) and the collections; the
sha256 is recorded in the index's manifest (provenance) and memoised by (path, size, mtime), so
an archive is hashed once on a machine.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
from pathlib import Path

from kit.web.zim.cache import _write_json_atomic

log = logging.getLogger(__name__)

#: Bytes hashed between two checks for a hand-over (8 MiB: ~7 ms of sha256 with SHA-NI).
CHUNK = 8 << 20


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


def _idle_priority() -> None:
    """Put the calling thread at idle CPU priority: Linux ``SCHED_IDLE`` (it runs only on a core
    nothing else wants), else nice 19; elsewhere it is left alone (``setpriority`` there would
    lower the whole process)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: the calling thread on Linux
    except (AttributeError, OSError):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass


class IdleSha256:
    """The sha256 of a file, hashed by a thread at idle priority (:func:`_idle_priority`) until
    :meth:`result` is called, which takes over the rest at the caller's priority.

    Why: on 2 cores the index build keeps a core idle for part of its phases (~40 % of one core
    while the articles are written), and hashing a 50 GB archive takes ~43 s of a core before the
    build when done first. The hand-over bounds the wait where the machine is never idle: the
    caller hashes what the thread has not (``CHUNK`` bytes at a time, the same hash object).
    A memoised digest (:func:`memoised_sha256`) is returned without reading the file.

    ``background=False``: nothing is started; :meth:`result` hashes the whole file.

    Raises (from :meth:`result`):
        OSError: the file cannot be read (by the thread or the caller).
    """

    def __init__(self, path: Path, memo_dir: Path, *, background: bool = True):
        self.path, self.memo_dir = Path(path), Path(memo_dir)
        self._digest = memoised_sha256(self.path, self.memo_dir)
        self._stat = self.path.stat()
        self._hash = hashlib.sha256()
        self._offset = 0  # bytes hashed so far (under _lock)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: OSError | None = None
        self._thread: threading.Thread | None = None
        self.caller_bytes = 0  #: bytes :meth:`result` hashed itself (the thread had not reached them)
        if self._digest is None and background:
            self._thread = threading.Thread(target=self._background, name="archive-sha256", daemon=True)
            self._thread.start()

    def _step(self, f) -> bool:
        """Hash the next chunk of ``f``; False at the end of the file."""
        with self._lock:
            f.seek(self._offset)
            block = f.read(CHUNK)
            if not block:
                return False
            self._hash.update(block)  # releases the GIL: the build's threads go on meanwhile
            self._offset += len(block)
            return True

    def _background(self) -> None:
        _idle_priority()
        try:
            with open(self.path, "rb") as f:
                while not self._stop.is_set() and self._step(f):
                    pass
        except OSError as exc:
            self._error = exc

    def result(self) -> str:
        """The file's sha256 (64 hex), memoised; blocks while the caller hashes what is left."""
        if self._digest is not None:
            return self._digest
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        before = self._offset
        with open(self.path, "rb") as f:
            while self._step(f):
                pass
        self.caller_bytes = self._offset - before
        self._digest = self._hash.hexdigest()
        _remember(self.path, self.memo_dir, self._stat, self._digest)
        return self._digest

    def cancel(self) -> None:
        """Stop the thread (a failed build); nothing is memoised."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
