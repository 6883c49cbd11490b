"""Where each entry of a ZIM archive lies: its cluster and blob numbers, read straight from the
file's tables (ZIM format: header, path pointer list, directory entries). python-libzim does not
expose them; the build uses them to read pages and images in the order they lie in the file
(issue 32): read in path order, a page hops to a random cluster, and on an archive larger than
memory every read is a disk read of a whole cluster (kit, 1M generated pages, 49 GB: ~1 GB/s
read from disk for ~23 MB/s of pages, half the build's time waiting on it).

Read with numpy over a memory map of the pointer list and directory: ~1.3 s for 1.7M entries.
Write our own because libzim's ``iterByClusterOrder`` is not in its Python binding.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

#: ZIM header (80 bytes): magic, major, minor, uuid, entry count, cluster count, path pointer list,
#: title pointer list, cluster pointer list, mime list, main page, layout page, checksum position.
HEADER = struct.Struct("<IHH16sIIQQQQIIQ")
ZIM_MAGIC = 0x044D495A
#: Mime-type numbers from this one up are redirects, link targets and deleted entries (no cluster).
NO_CLUSTER_MIME = 0xFFFD
#: Directory entries located per numpy pass (bounds the temporary arrays: ~16 bytes an entry).
_SLICE = 1 << 20


#: :attr:`Locations.key` of an entry that lies in no cluster (sorts after every real one).
NO_CLUSTER = np.uint64(2**64 - 1)


class Locations:
    """Where every entry of one archive lies, by entry id: ``key``, a uint64 array of
    ``entry_count``, ``cluster << 32 | blob`` (ZIM cluster and blob numbers are 32-bit), or
    :data:`NO_CLUSTER` for redirects, link targets, deleted entries and directory entries that
    do not read (8 bytes an entry: 160 MB for 20M entries).
    """

    def __init__(self, key: np.ndarray):
        self.key = key

    @classmethod
    def read(cls, path: str | Path) -> Locations | None:
        """The archive's locations, or ``None`` when its tables cannot be read directly (not a
        single-part ZIM file, a truncated one, an I/O error): callers then read in entry-id order."""
        try:
            with open(path, "rb") as f:
                head = f.read(HEADER.size)
                size = f.seek(0, 2)
            if len(head) < HEADER.size:
                return None
            magic, _major, _minor, _uuid, count, _clusters, url_ptr = HEADER.unpack(head)[:7]
            if magic != ZIM_MAGIC or url_ptr + 8 * count > size:
                return None
            key = np.full(count, NO_CLUSTER, dtype=np.uint64)
            if not count:
                return cls(key)
            ptrs = np.fromfile(path, dtype="<u8", count=count, offset=url_ptr)
            mm = np.memmap(path, dtype=np.uint8, mode="r")
            cols = np.arange(16, dtype=np.int64)
            for lo in range(0, count, _SLICE):
                p = ptrs[lo:lo + _SLICE]
                ok = (p >= HEADER.size) & (p <= size - 16)  # unsigned: no wrap-around
                raw = mm[np.where(ok, p, 0).astype(np.int64)[:, None] + cols]  # (n, 16) dirent bytes
                mime = raw[:, 0].astype(np.uint32) | (raw[:, 1].astype(np.uint32) << 8)
                loc = np.ascontiguousarray(raw[:, 8:16]).view("<u4").astype(np.uint64)  # cluster, blob
                key[lo:lo + len(p)] = np.where(ok & (mime < NO_CLUSTER_MIME),
                                               (loc[:, 0] << np.uint64(32)) | loc[:, 1], NO_CLUSTER)
            del mm
        except (OSError, ValueError, IndexError):
            return None
        return cls(key)

    def order(self, eids: np.ndarray | None = None) -> np.ndarray:
        """Entry ids (``eids``, default all), those in no cluster first (in id order: reading them
        reads no cluster), then by (cluster, blob, id): the order that reads each cluster once,
        front to back. int64 array."""
        eids = np.arange(len(self.key), dtype=np.int64) if eids is None else np.asarray(eids, np.int64)
        eids = np.sort(eids)
        keys = self.key[eids]
        none = keys == NO_CLUSTER
        rest = eids[~none]
        return np.concatenate([eids[none], rest[np.argsort(keys[~none], kind="stable")]])


def reading_order(path: Path, entry_count: int, eids: np.ndarray | None = None,
                  what: str = "pages") -> np.ndarray:
    """Entry ids ``eids`` (default all ``entry_count``) in the order the build reads them:
    :meth:`Locations.order`, or entry-id order with a warning (naming ``what`` is read) when the
    file's tables do not read or do not hold ``entry_count`` entries. int64 array."""
    locs = Locations.read(path)
    if locs is None or len(locs.key) != entry_count:
        log.warning("%s: its tables do not read directly: %s are read in entry-id order "
                    "(slower on an archive larger than memory)", Path(path).name, what)
        return (np.arange(entry_count, dtype=np.int64) if eids is None
                else np.sort(np.asarray(eids, dtype=np.int64)))
    return locs.order(eids)
