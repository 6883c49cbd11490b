"""Read-ahead of the pages a search has just listed (issue 32).

An agent usually fetches one of the pages a search returned, a model turn later. On an archive larger
than the page cache those pages are cold: on a 10 GB archive a 47 KB page took ~5 ms to read from
disk out of an ~8 ms fetch, and the rest (parse, clean, markdown) ~3 ms. After each search a
background thread asks the kernel to bring the hits' bytes into the page cache
(``posix_fadvise(WILLNEED)``: asynchronous, no CPU, nothing held while the disk works), so the fetch
that follows reads memory.

The byte range of an entry is read from the ZIM file itself (python-libzim does not expose it; ZIM
format: header, path pointer list, dirent, cluster pointer list, cluster info byte and blob offsets):
the blob of an uncompressed cluster, the whole cluster of a compressed one (libzim decompresses the
cluster to read any blob in it). Only libzim's path look-up runs under the archive's lock, and only
when the lock is free: read-ahead never makes a search or a fetch wait.
"""

from __future__ import annotations

import logging
import os
import queue
import struct
import threading
from collections.abc import Sequence

from kit.web.zim.locations import HEADER as _HEADER  # the ZIM file header, 80 bytes
from kit.web.zim.locations import ZIM_MAGIC as _MAGIC

log = logging.getLogger(__name__)

#: searches whose hits wait for read-ahead at most (more are dropped: it is a hint, not a duty)
QUEUE_MAX = 32


def entry_span(fd: int, index: int) -> tuple[int, int] | None:
    """``(offset, length)`` in bytes, in the ZIM file open as ``fd``, of what reading entry ``index``
    touches: its blob in an uncompressed cluster, its whole cluster in a compressed one. None for a
    redirect, an index out of range, a file that is not single-part ZIM, or tables that do not add up
    (read-ahead is a hint: it never raises on the archive's bytes). Raises OSError on a read error."""
    head = os.pread(fd, _HEADER.size, 0)
    if len(head) < _HEADER.size:
        return None
    magic, _, _, _, count, clusters, path_ptr, _, cluster_ptr, _, _, _, checksum = _HEADER.unpack(head)
    if magic != _MAGIC or not 0 <= index < count:
        return None
    try:
        (dirent,) = struct.unpack("<Q", os.pread(fd, 8, path_ptr + 8 * index))
        mime, _, _, _, cluster, blob = struct.unpack("<HBcIII", os.pread(fd, 16, dirent))
        if mime >= 0xFFFD or cluster >= clusters:  # a redirect, link target or deleted entry
            return None
        if cluster + 1 < clusters:
            start, end = struct.unpack("<QQ", os.pread(fd, 16, cluster_ptr + 8 * cluster))
        else:  # the last cluster ends where the checksum starts
            (start,), end = struct.unpack("<Q", os.pread(fd, 8, cluster_ptr + 8 * cluster)), checksum
        info = os.pread(fd, 1, start)[0]
        if info & 0x0F > 1:  # compressed: libzim reads and decompresses the whole cluster
            return (start, end - start) if end > start else None
        width = 8 if info & 0x10 else 4  # extended clusters have 64-bit blob offsets
        lo, hi = struct.unpack("<QQ" if width == 8 else "<II", os.pread(fd, 2 * width, start + 1 + width * blob))
    except (struct.error, IndexError):  # a short read: tables past the end of the file
        return None
    return (start + 1 + lo, hi - lo) if 0 <= lo <= hi and start + 1 + hi <= end else None


def advise(path: os.PathLike | str, indexes: Sequence[int]) -> int:
    """Ask the kernel to read entries ``indexes`` of the ZIM file ``path`` into the page cache;
    returns how many ranges were advised. Errors are logged at debug level and end the call."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        log.debug("read-ahead: cannot open %s: %s", path, exc)
        return 0
    n = 0
    try:
        for i in indexes:
            span = entry_span(fd, i)
            if span is not None:
                os.posix_fadvise(fd, span[0], span[1], os.POSIX_FADV_WILLNEED)
                n += 1
    except OSError as exc:
        log.debug("read-ahead in %s stopped: %s", path, exc)
    finally:
        os.close(fd)
    return n


def advise_now(arch, paths: Sequence[str]) -> int:
    """Advise the bytes of ``paths`` of ``arch`` (a :class:`~kit.web.zim.archive._ZimArchive`) now,
    in the caller's thread: the images an image or reverse search is about to read (issue 32), so
    the disk reads them together while the search reads its records, not one after another (cold
    image reads on a 10 GB archive: ~6 ms each). 0 when the archive is busy (a hint never waits)."""
    if not hasattr(os, "posix_fadvise") or not paths:
        return 0
    indexes = arch.entry_indexes(paths)
    return advise(arch.file, indexes) if indexes else 0


class ReadAhead:
    """One daemon thread for the process, fed ``(archive, paths)`` by :meth:`pages`: each path is
    looked up with libzim (redirects followed) when the archive's lock is free, then its bytes are
    advised (:func:`advise`). ``stats``: searches queued, dropped (queue full or lock busy) and ranges
    advised, for tests and benchmarks."""

    def __init__(self) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_MAX)
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self.stats = {"queued": 0, "dropped": 0, "advised": 0}

    def pages(self, arch, paths: Sequence[str]) -> None:
        """Queue ``paths`` of ``arch`` (a :class:`~kit.web.zim.archive._ZimArchive`) for read-ahead;
        returns at once. Dropped when :data:`QUEUE_MAX` searches are already waiting."""
        if not hasattr(os, "posix_fadvise") or not paths:
            return
        with self._start:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="zim-read-ahead", daemon=True)
                self._thread.start()
        try:
            self._queue.put_nowait((arch, list(paths)))
            self.stats["queued"] += 1
        except queue.Full:
            self.stats["dropped"] += 1

    def join(self) -> None:
        """Wait until every queued search has been read ahead (tests, benchmarks)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            arch, paths = self._queue.get()
            try:
                indexes = arch.entry_indexes(paths)
                if indexes is None:  # the archive is busy: a hint is never worth a wait
                    self.stats["dropped"] += 1
                else:
                    self.stats["advised"] += advise(arch.file, indexes)
            except Exception:  # noqa: BLE001 - a hint must never kill the thread
                log.debug("read-ahead failed", exc_info=True)
            finally:
                self._queue.task_done()


#: the process's read-ahead thread (LocalZimWeb.search_sync feeds it)
READ_AHEAD = ReadAhead()
