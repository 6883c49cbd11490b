"""Exact-match tool-response cache over normalized requests (WeAgent §3.2 "Cache-backed search").

:class:`ToolCache` is a SQLite table ``key -> response JSON`` with provenance (backend, operation,
normalized request, time). Modes:

* ``readwrite`` — write-back: successful responses are stored (WAL journal, safe for several writer
  processes);
* ``readonly`` — a stable snapshot shared by many workers: hits are served, misses go to the live
  backend and are not written;
* ``off`` — no caching.

Periodic refresh (§3.2: "Periodic refreshes prevent the pool from becoming a fixed offline corpus";
the paper gives no interval): with ``refresh_after_s`` set, a ``readwrite`` cache treats an entry
older than that as a miss, so the live backend is called again and its response replaces the entry
(a failed refetch is not cached and leaves the old entry in place). ``None`` (the default) never
refreshes. A ``readonly`` snapshot never refreshes, whatever ``refresh_after_s`` says: replay and RL
workers must see the same stable snapshot (§3.2), so stale entries are served as they are.

:class:`CachedBackend` wraps any :class:`~kit.types.SearchBackend`; a hit returns through the same
types as a live call. Keys include the backend name, the operation, the normalized arguments and,
for reverse image search, the sha256 of the image content. Failures are never cached.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import TypeAdapter

from kit.types import ImageHit, Page, RequestRejected, ReverseImageResult, SearchBackend, SearchHit

CacheMode = Literal["readwrite", "readonly", "off"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
  key TEXT PRIMARY KEY,
  backend TEXT NOT NULL,
  op TEXT NOT NULL,
  request TEXT NOT NULL,
  response TEXT NOT NULL,
  created REAL NOT NULL
);
"""


def normalize_query(q: str) -> str:
    """Cache normalization of a search query: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", q).casefold().split())


def cache_key(backend: str, op: str, request: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of (backend, op, normalized request)."""
    blob = json.dumps([backend, op, request], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class ToolCache:
    """Persistent exact-match cache.

    Args:
        path: SQLite file (created in ``readwrite`` mode). ``None`` with mode ``off``.
        mode: ``readwrite`` | ``readonly`` | ``off``.
        refresh_after_s: age in seconds after which a ``readwrite`` entry is refetched and replaced
            (module docstring); ``None``: never. Ignored in ``readonly`` mode (a snapshot is stable).
        clock: ``() -> seconds since the epoch`` stamping and ageing entries (default ``time.time``;
            tests pass a fake clock).

    ``stats``: ``hits``, ``misses`` (stale entries included), ``writes`` and, when
    ``refresh_after_s`` is set, ``refreshed`` (stale entries treated as misses).

    Raises:
        FileNotFoundError: ``readonly`` on a missing file.
        ValueError: unknown mode, no path for a caching mode, or ``refresh_after_s`` not a positive
            finite number.
    """

    def __init__(self, path: str | Path | None, mode: CacheMode = "readwrite", *,
                 refresh_after_s: float | None = None, clock: Callable[[], float] = time.time):
        if mode not in ("readwrite", "readonly", "off"):
            raise ValueError(f"unknown cache mode {mode!r}")
        if refresh_after_s is not None and (isinstance(refresh_after_s, bool) or not isinstance(refresh_after_s, (int, float))
                                            or not math.isfinite(refresh_after_s) or refresh_after_s <= 0):
            raise ValueError(f"refresh_after_s must be a positive number of seconds or None, got {refresh_after_s!r}")
        self.mode = mode
        self.path = Path(path) if path is not None else None
        self.refresh_after_s = None if refresh_after_s is None else float(refresh_after_s)
        self.clock = clock
        self.stats = {"hits": 0, "misses": 0, "writes": 0}
        if self.refresh_after_s is not None:  # only then: manifests of runs without refresh keep their shape
            self.stats["refreshed"] = 0
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if mode == "off":
            return
        if self.path is None:
            raise ValueError(f"cache mode {mode!r} needs a path")
        if mode == "readonly":
            if not self.path.exists():
                raise FileNotFoundError(f"cache snapshot {self.path} does not exist")
            # immutable: a snapshot never changes, so SQLite may skip locking entirely
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute(_SCHEMA)

    def get(self, key: str) -> str | None:
        """The cached response JSON for ``key``, or ``None`` (counted as hit / miss). In ``readwrite``
        mode with ``refresh_after_s``, an entry older than that is ``None`` too (``refreshed``), so
        the caller fetches it live and :meth:`put` replaces it."""
        if self._db is None:
            return None
        with self._lock:
            row = self._db.execute("SELECT response, created FROM entries WHERE key=?", (key,)).fetchone()
        if row and self.mode == "readwrite" and self.refresh_after_s is not None \
                and self.clock() - row[1] > self.refresh_after_s:
            self.stats["refreshed"] += 1
            row = None
        self.stats["hits" if row else "misses"] += 1
        return row[0] if row else None

    def put(self, key: str, backend: str, op: str, request: dict[str, Any], response_json: str) -> None:
        """Store a response (a result, or a deterministic refusal; no-op unless ``readwrite``); a newer one replaces an older one."""
        if self._db is None or self.mode != "readwrite":
            return
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO entries VALUES (?,?,?,?,?,?)",
                             (key, backend, op, json.dumps(request, ensure_ascii=False), response_json, self.clock()))
        self.stats["writes"] += 1

    def __len__(self) -> int:
        if self._db is None:
            return 0
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0]

    def hit_rate(self) -> float:
        n = self.stats["hits"] + self.stats["misses"]
        return self.stats["hits"] / n if n else 0.0

    def snapshot(self, dest: str | Path) -> Path:
        """Write a consistent copy of the cache (SQLite backup API) for read-only sharing or publishing.

        Raises:
            ValueError: the cache is off.
        """
        if self._db is None:
            raise ValueError("cache is off: nothing to snapshot")
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        out = sqlite3.connect(tmp)
        with self._lock:
            self._db.backup(out)
        out.close()
        shutil.move(tmp, dest)
        return dest

    def close(self) -> None:
        if self._db is not None:
            with self._lock:
                self._db.close()
            self._db = None


def snapshot_counts(path: str | Path) -> list[tuple[str, str, int]]:
    """``(backend, operation, entries)`` rows of a cache file or snapshot, sorted; opened read-only.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a tool cache (not SQLite, or no ``entries`` table).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"cache snapshot {p} does not exist")
    try:
        db = sqlite3.connect(f"file:{p}?mode=ro&immutable=1", uri=True)
        try:
            return db.execute("SELECT backend, op, COUNT(*) FROM entries GROUP BY backend, op "
                              "ORDER BY backend, op").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{p} is not a tool-cache snapshot: {e}") from e


_HITS = TypeAdapter(list[SearchHit])
_IMAGES = TypeAdapter(list[ImageHit])
_REVERSE = TypeAdapter(ReverseImageResult)
_PAGE = TypeAdapter(Page)
_REJECTED_PREFIX = '{"rejected":'  # no result type serializes to an object with this first key


class CachedBackend:
    """A :class:`SearchBackend` served through a :class:`ToolCache` (same types on hit and miss)."""

    def __init__(self, backend: SearchBackend, cache: ToolCache):
        self.backend = backend
        self.cache = cache
        self.name = backend.name

    async def _cached(self, op: str, request: dict[str, Any], call, adapter):
        """Serve ``request`` from the cache or through ``call``. A :class:`RequestRejected` refusal is
        deterministic, so it is cached too (as ``{"rejected": message}``) and raised again on a hit;
        every other :class:`BackendError` propagates uncached (a retry or a later call may succeed)."""
        key = cache_key(self.name, op, request)
        hit = self.cache.get(key)
        if hit is not None:
            if hit.startswith(_REJECTED_PREFIX):
                raise RequestRejected(json.loads(hit)["rejected"])
            return adapter.validate_json(hit)
        try:
            result = await call()
        except RequestRejected as e:
            self.cache.put(key, self.name, op, request, json.dumps({"rejected": str(e)}, ensure_ascii=False))
            raise
        self.cache.put(key, self.name, op, request, adapter.dump_json(result).decode())
        return result

    async def search(self, query: str, num: int) -> list[SearchHit]:
        return await self._cached("search", {"query": normalize_query(query), "num": num},
                                  lambda: self.backend.search(query, num), _HITS)

    async def image_search(self, query: str, num: int) -> list[ImageHit]:
        return await self._cached("image_search", {"query": normalize_query(query), "num": num},
                                  lambda: self.backend.image_search(query, num), _IMAGES)

    async def reverse_image_search(self, image: bytes, num: int) -> ReverseImageResult:
        return await self._cached("reverse_image_search", {"image_sha256": hashlib.sha256(image).hexdigest(), "num": num},
                                  lambda: self.backend.reverse_image_search(image, num), _REVERSE)

    async def fetch(self, url: str) -> Page:
        return await self._cached("fetch", {"url": url.strip()}, lambda: self.backend.fetch(url), _PAGE)
