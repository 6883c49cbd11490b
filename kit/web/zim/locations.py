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

import struct
from pathlib import Path

import numpy as np

#: ZIM header (80 bytes): magic, major, minor, uuid, entry count, cluster count, path pointer list,
#: title pointer list, cluster pointer list, mime list, main page, layout page, checksum position.
HEADER = struct.Struct("<IHH16sIIQQQQIIQ")
ZIM_MAGIC = 0x044D495A
#: Mime-type numbers from this one up are redirects, link targets and deleted entries (no cluster).
NO_CLUSTER_MIME = 0xFFFD
#: Directory entries located per numpy pass (bounds the temporary arrays: ~16 bytes an entry).
_SLICE = 1 << 20


class Locations:
    """Cluster and blob number of every entry of one archive, by entry id.

    ``cluster``: int64 array of ``entry_count`` (-1 for redirects, link targets, deleted entries
    and unreadable directory entries); ``blob``: int64, the blob within the cluster.
    """

    def __init__(self, cluster: np.ndarray, blob: np.ndarray):
        self.cluster = cluster
        self.blob = blob

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
            cluster = np.full(count, -1, dtype=np.int64)
            blob = np.zeros(count, dtype=np.int64)
            if not count:
                return cls(cluster, blob)
            ptrs = np.fromfile(path, dtype="<u8", count=count, offset=url_ptr)
            mm = np.memmap(path, dtype=np.uint8, mode="r")
            cols = np.arange(16, dtype=np.int64)
            for lo in range(0, count, _SLICE):
                p = ptrs[lo:lo + _SLICE].astype(np.int64)
                ok = (p >= HEADER.size) & (p + 16 <= size)
                raw = mm[np.where(ok, p, 0)[:, None] + cols]  # (n, 16) bytes of each dirent
                mime = raw[:, 0].astype(np.int64) | (raw[:, 1].astype(np.int64) << 8)
                content = ok & (mime < NO_CLUSTER_MIME)
                c = np.ascontiguousarray(raw[:, 8:12]).view("<u4")[:, 0].astype(np.int64)
                b = np.ascontiguousarray(raw[:, 12:16]).view("<u4")[:, 0].astype(np.int64)
                cluster[lo:lo + len(p)] = np.where(content, c, -1)
                blob[lo:lo + len(p)] = np.where(content, b, 0)
            del mm
        except (OSError, ValueError):
            return None
        return cls(cluster, blob)

    def order(self, eids: np.ndarray | None = None) -> np.ndarray:
        """Entry ids (``eids``, default all) that have a cluster, sorted by (cluster, blob, id): the
        order that reads each cluster once, front to back. int64 array."""
        eids = np.arange(len(self.cluster), dtype=np.int64) if eids is None else np.asarray(eids, np.int64)
        eids = eids[self.cluster[eids] >= 0]
        return eids[np.lexsort((eids, self.blob[eids], self.cluster[eids]))]
