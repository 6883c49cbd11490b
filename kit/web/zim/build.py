"""Streaming, parallel, resumable extraction of one archive into its store (issue 17, part 2).

Phases, each recorded per finished chunk in ``build.sqlite`` beside the store in the build folder
(so a killed build resumes where it stopped; :func:`kit.web.zim.cache._load_or_build` keeps that
folder and renames it to the final one only once :func:`build_archive` returned):

1. **extract**: the entries that lie in a cluster, in the archive's cluster order
   (:class:`~kit.web.zim.locations.Locations`: read front to back, each cluster once; entry-id
   order when the file's tables cannot be read), in chunks of :data:`ARTICLE_CHUNK`, extracted
   in a process pool of ``workers`` processes into the scratch table ``x.extracted`` of
   ``extract.sqlite`` (packed records by entry id, :func:`extract_packed`), one transaction per
   chunk.
1b. **articles** (:mod:`kit.web.zim.build_articles`): the extracted records in entry-id order,
   in ranges of :data:`ARTICLE_CHUNK` ids (document ids follow that order, as if the archive had
   been read in it), written with their image references (and the titles of the pages that have
   any, for ``page_titles``) in one transaction per range; records in zstd-compressed blocks of
   :data:`~kit.web.zim.store.BLOCK` (compressed on threads while the next range is read), their
   bodies' tails in ``tails.sqlite``; no block before the dictionary is trained.
2. **images** (:mod:`kit.web.zim.build_images`): the distinct referenced paths in
   first-reference order, resolved (redirects followed); each final image read once in cluster
   order and hashed in the pool; kept images numbered in first-reference order (the order the
   in-memory build used).
3. **finish**: each kept reference becomes an occurrence with its position among the page's kept
   images (a window function), ``page_titles`` keeps the titles of the pages left with an
   occurrence, the title table is filled in key order and indexes are created, ``hashes.npy``
   is written in batches.

Memory stays bounded by a chunk's worth of articles or images, whatever the archive size, but for
two passes over the whole archive's entries and images: the reading orders (8 bytes an entry,
computed once, then read from the build files) and the kept images' numbers (~100 B an image).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import closing
from pathlib import Path
from urllib.parse import quote

import numpy as np

from kit.progress import progress
from kit.web.zim.build_articles import _articles
from kit.web.zim.build_images import IMAGE_CHUNK, _images, hash_image  # noqa: F401 (re-exported)
from kit.web.zim.cache import INDEX_FORMAT, sync_files
from kit.web.zim.images import HASH_CROPS
from kit.web.zim.locations import HEADER as _ZIM_HEADER
from kit.web.zim.locations import reading_order
from kit.web.zim.runner import WORKER_TASKS, _add_skipped, _done, _Runner  # noqa: F401 (re-exported)
from kit.web.zim.store import (
    INDEXES,
    PAGE_SIZE,
    SCHEMA,
    STORE_FILE,
    pack_text,
    read_codec,
    title_hash,
)
from kit.web.zim.tails import TAILS_FILE, TAILS_SCHEMA

log = logging.getLogger(__name__)

#: Archive entries per extraction chunk (one transaction, one unit of resumed work).
ARTICLE_CHUNK = 256
#: Below this many entries the build runs in this process (a pool's start-up costs more).
PARALLEL_MIN_ENTRIES = 4 * ARTICLE_CHUNK
BUILD_FILE = "build.sqlite"  # build progress and scratch tables, removed once complete
FORMAT_FILE = "build.format"  # BUILD_LAYOUT the build folder was started with
#: The store's INDEX_FORMAT and the layout of the build's scratch tables (".2": extraction in
#: cluster order; ".3": no pending-records table, documents' entry ids in ``b.titles``; ".4":
#: ``x.extracted`` appended in reading order, ``build_articles.EXTRACTED_INDEX``; issue 32):
#: a killed build of another layout is started again, not resumed.
BUILD_LAYOUT = f"{INDEX_FORMAT}.4"
#: Linux's id of the running boot: the build commits without fsync where it can tell a restart
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str | None:
    """The running boot's id (Linux), or None where there is none to read.

    Why the build asks: it commits with ``PRAGMA synchronous=OFF`` (an fsync of each attached file
    at each chunk's commit cost ~10 ms, ~12 % of a 20k-article build's wall time here). A killed
    build process loses nothing committed, the OS still holds it; an OS crash or power loss can
    lose some written pages, so a build folder stamped in another boot is started again, not
    resumed (:func:`build_archive`). Where the boot cannot be told, the build commits with fsync as
    SQLite does by default."""
    try:
        return _BOOT_ID.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _write_stamp(stamp: Path, text: str) -> None:
    """The build folder's stamp, written to a temporary file, fsynced and renamed into place, and
    the folder fsynced: a stamp on disk always names the boot the folder's pages were written in."""
    tmp = stamp.with_name(stamp.name + ".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, stamp)
    try:
        fd = os.open(stamp.parent, os.O_RDONLY)
    except OSError:  # no folder descriptors here (not POSIX): the rename is what it is
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_BUILD_SCHEMA = """
CREATE TABLE IF NOT EXISTS b.chunks(phase TEXT NOT NULL, id INTEGER NOT NULL,
    PRIMARY KEY(phase, id));
CREATE TABLE IF NOT EXISTS b.skipped(phase TEXT NOT NULL, reason TEXT NOT NULL,
    n INTEGER NOT NULL, PRIMARY KEY(phase, reason));
CREATE TABLE IF NOT EXISTS b.refs(id INTEGER PRIMARY KEY, doc INTEGER NOT NULL,
    src TEXT NOT NULL, alt TEXT NOT NULL, caption TEXT NOT NULL, context TEXT NOT NULL,
    deco INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS b.srcs(ord INTEGER PRIMARY KEY, src TEXT NOT NULL UNIQUE,
    image INTEGER, deco INTEGER NOT NULL, final TEXT, eid INTEGER);
CREATE TABLE IF NOT EXISTS b.image_order(pos INTEGER PRIMARY KEY, eid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS b.finals(eid INTEGER PRIMARY KEY, path TEXT NOT NULL, reason TEXT NOT NULL,
    mime TEXT, width INTEGER, height INTEGER, h BLOB);
CREATE TABLE IF NOT EXISTS b.hashes(image INTEGER PRIMARY KEY, h BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS b.titles(id INTEGER PRIMARY KEY, key INTEGER NOT NULL,
    eid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS b.page_titles(doc INTEGER PRIMARY KEY, title TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS b.bodies(doc INTEGER PRIMARY KEY, h INTEGER NOT NULL);
"""
#: Scratch of the extraction phase, its own file (deleted once the articles are written: no
#: DELETE walks it): the reading order, the chunks of it extracted, and their packed records. If
#: the file is lost, its chunk records go with it and extraction starts over, consistently.
EXTRACT_FILE = "extract.sqlite"
_EXTRACT_SCHEMA = """
CREATE TABLE IF NOT EXISTS x.read_order(pos INTEGER PRIMARY KEY, eid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS x.chunks(id INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS x.extracted(eid INTEGER NOT NULL, data BLOB NOT NULL);
"""

#: Body texts at least this long that are identical make their articles duplicates (aliases of
#: the first): shorter bodies (empty tag pages, one-line stubs) can be alike by chance.
DUPLICATE_MIN_CHARS = 200


def body_hash(text: str) -> int:
    """64-bit hash (signed, for SQLite) of an article's body text: equal bodies, equal hashes
    (two different bodies collide with probability ~n^2 / 2^65: 1e-6 at 7M articles)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big",
                          signed=True)


def _base_mime(mimetype: str) -> str:
    return mimetype.split(";", 1)[0].strip().lower()


def is_article_path(path: str, new_scheme: bool) -> bool:
    if new_scheme:
        return not path.startswith(("-/", "_", "M/", "X/"))
    return path.startswith("A/")


# ---- work done in the pool's processes (each opens the archive once) ---------------------------
#: What a build worker keeps open: per thread, so that inline builds in threads of one process
#: (a server indexing two archives) do not close or replace each other's files.
_W = threading.local()
#: libzim's cluster cache (decompressed clusters, per process) of a build worker: the archive's
#: size times :data:`CLUSTER_CACHE_RATIO` (text clusters decompress to ~3-4x), at most
#: :data:`CLUSTER_CACHE_BUDGET` over all workers, at least libzim's default 16 MiB. Entries read
#: in entry-id (path) order hop between clusters (archives are written in another order): with
#: the default cache nearly every article decompresses its whole cluster again (kit: 54 s
#: against 2.9 s of CPU for 30k articles with a cache that holds the archive).
CLUSTER_CACHE_RATIO = 4
CLUSTER_CACHE_BUDGET = 2 << 30
#: The cluster cache is process-wide: builds running inline in threads raise it under this lock,
#: and the last one to finish restores the size from before the first (``_CACHE[0]``: builds
#: running, ``_CACHE[1]``: that size).
_CACHE_LOCK = threading.Lock()
_CACHE = [0, 0]


def cluster_cache_bytes(archive_bytes: int, workers: int) -> int:
    """Cluster cache size (bytes) for one of ``workers`` build processes of an archive of
    ``archive_bytes`` (see :data:`CLUSTER_CACHE_BUDGET`)."""
    return max(16 << 20, min(CLUSTER_CACHE_RATIO * archive_bytes,
                             CLUSTER_CACHE_BUDGET // max(1, workers)))


def _worker_state() -> dict:
    state = getattr(_W, "state", None)
    if state is None:
        state = _W.state = {}
    return state


def _worker_archive(path: str, cache_bytes: int = 0):
    import libzim
    import libzim.reader

    if cache_bytes:
        with _CACHE_LOCK:
            if libzim.get_cluster_cache_max_size() < cache_bytes:
                libzim.set_cluster_cache_max_size(cache_bytes)
    state = _worker_state()
    if state.get("path") != path:
        _release_worker_state()  # another archive's file: closed, not leaked
        state["archive"] = libzim.reader.Archive(path)
        state["dirents"] = _dirent_reader(path)
        state["path"] = path
    return state["archive"]


def _release_worker_state() -> None:
    """Close what :func:`_worker_archive` keeps open in this thread (after an inline build)."""
    state = _worker_state()
    reader = state.pop("dirents", None)
    if reader is not None:
        reader[0].close()
    state.clear()


def _dirent_reader(path: str):
    """(file, url pointer list offset, entry count) to read entries' cluster numbers from the
    ZIM file itself (python-libzim does not expose them), or ``None`` when the file is not a
    single-part ZIM file whose header reads (the file is then closed)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - kept open by the worker for its archive
    except OSError:
        return None
    try:
        head = f.read(_ZIM_HEADER.size)
        if len(head) == _ZIM_HEADER.size:
            magic, _major, _minor, _uuid, count, _clusters, url_ptr = _ZIM_HEADER.unpack(head)[:7]
            if magic == 0x044D495A:
                return f, url_ptr, count
    except OSError:
        pass
    f.close()
    return None


def cluster_order(path: str, lo: int, hi: int) -> list[int]:
    """Entry ids ``lo..hi-1`` sorted by (cluster, id): the order that reads each cluster once
    per chunk. Redirects and anything unreadable come first (no cluster); ids in plain order
    when the file cannot be read directly. Reading order only: results keep entry-id order."""
    _worker_archive(path)
    reader = _worker_state().get("dirents")
    if reader is None or hi > reader[2]:
        return list(range(lo, hi))
    f, url_ptr, _count = reader
    try:
        f.seek(url_ptr + 8 * lo)
        ptrs = struct.unpack(f"<{hi - lo}Q", f.read(8 * (hi - lo)))
        keys = []
        for eid, ptr in zip(range(lo, hi), ptrs, strict=True):
            f.seek(ptr)
            mime, _plen, _ns, _rev, cluster = struct.unpack("<HBcII", f.read(12))
            keys.append((cluster if mime < 0xFFFD else -1, eid))
    except (OSError, ValueError, struct.error):  # ValueError: a closed or damaged file
        return list(range(lo, hi))
    return [eid for _, eid in sorted(keys)]


def extract_chunk(path: str, lo: int, hi: int, main_path: str | None, new_scheme: bool,
                  cache_bytes: int = 0):
    """Articles of entries ``lo..hi-1``: ([(path, title, first, text, [(src, alt, caption,
    context, decorative)])], {skip reason: count}, [warning]), in entry-id order. Entries are read
    in cluster order (:func:`cluster_order`); ``cache_bytes``: libzim's cluster cache for this
    process (:func:`cluster_cache_bytes`; 0 leaves it)."""
    arch = _worker_archive(path, cache_bytes)
    done, skipped, warnings = _extract_entries(arch, cluster_order(path, lo, hi), main_path, new_scheme)
    return ([done[eid] for eid in sorted(done)], skipped,
            [w for _, w in sorted(warnings, key=lambda w: w[0])])


def extract_packed(path: str, eids: list[int], main_path: str | None, new_scheme: bool,
                   cache_bytes: int = 0):
    """Build job of the extraction phase: the articles of entries ``eids``, read in that order
    (the archive's cluster order, :class:`~kit.web.zim.locations.Locations`), as ([(entry id,
    packed record)], {skip reason: count}, [warning]). A packed record is zstd-compressed pickle
    of (path, title, first, text, refs, title key, body hash or None) (:func:`~kit.web.zim.build_articles.unpack_extracted`):
    compressed here, in the pool, so the build process only stores it."""
    import pickle

    import zstandard

    arch = _worker_archive(path, cache_bytes)
    done, skipped, warnings = _extract_entries(arch, eids, main_path, new_scheme)
    state = _worker_state()
    z = state.get("zc") or state.setdefault("zc", zstandard.ZstdCompressor(level=1))
    rows = [(eid, z.compress(pickle.dumps(
        (*rec, title_hash(rec[1].casefold()),
         body_hash(rec[3]) if len(rec[3]) >= DUPLICATE_MIN_CHARS else None), protocol=5)))
        for eid, rec in done.items()]
    return rows, skipped, [w for _, w in sorted(warnings, key=lambda w: w[0])]


def _extract_entries(arch, eids, main_path: str | None, new_scheme: bool):
    """({entry id: (path, title, first, text, refs)}, {skip reason: count}, [(entry id,
    warning)]) of the article entries among ``eids``, read in the given order."""
    from kit.web.zim.html import _extract_article

    done: dict[int, tuple] = {}
    skipped: dict[str, int] = {}
    warnings: list[tuple[int, str]] = []
    for eid in eids:
        try:
            entry = arch._get_entry_by_id(eid)
            if entry.is_redirect or not is_article_path(entry.path, new_scheme):
                continue
            if entry.path == main_path:
                continue
            item = entry.get_item()
            if _base_mime(item.mimetype) != "text/html":
                continue
            epath, title, html = entry.path, entry.title, bytes(item.content)
        except RuntimeError as exc:
            warnings.append((eid, f"skipping unreadable entry #{eid}: {exc}"))
            skipped["unreadable"] = skipped.get("unreadable", 0) + 1
            continue
        try:
            art = _extract_article(epath, title, html)
        except ValueError as exc:
            warnings.append((eid, f"skipping article {epath}: {exc}"))
            skipped["unparsable"] = skipped.get("unparsable", 0) + 1
            continue
        done[eid] = (art.path, art.title, art.first_sentence, art.text,
                     [(r.src_path, r.alt, r.caption, r.context, int(r.decorative))
                      for r in art.images])
    return done, skipped, warnings


# ---- the build ---------------------------------------------------------------------------------
def _read_order(arch, db) -> int:
    """Entries to extract, in reading order, stored once in ``x.read_order`` (so a resumed build
    reads the same chunks even if the file's tables no longer read): the archive's cluster order
    (:class:`~kit.web.zim.locations.Locations`), or entry-id order with a warning. Returns their count."""
    (n,) = db.execute("SELECT count(*) FROM x.read_order").fetchone()
    if n:
        return int(n)
    order = reading_order(arch.file, arch.entry_count)
    with db:  # one transaction: the order is complete or absent
        db.executemany("INSERT INTO x.read_order VALUES (?, ?)", enumerate(order.tolist()))
    return len(order)


def _extract(arch, db, runner: _Runner, stats: dict) -> None:
    """Phase 1a: the entries of ``x.read_order``, in chunks of :data:`ARTICLE_CHUNK`, extracted by
    the pool into ``x.extracted`` (packed records with their entry ids, appended in reading
    order: :data:`~kit.web.zim.build_articles.EXTRACTED_INDEX`)."""
    n = _read_order(arch, db)
    done = {c for (c,) in db.execute("SELECT id FROM x.chunks")}
    todo = [c for c in range(-(-n // ARTICLE_CHUNK)) if c not in done]
    stats["chunks_resumed"] = len(done)
    cache = cluster_cache_bytes(arch.file.stat().st_size, runner.workers)

    def jobs() -> Iterator[tuple]:
        for c in todo:
            eids = [e for (e,) in db.execute("SELECT eid FROM x.read_order WHERE pos >= ? AND pos < ? "
                                             "ORDER BY pos", (c * ARTICLE_CHUNK, (c + 1) * ARTICLE_CHUNK))]
            yield str(arch.file), eids, arch.main_path, arch.new_scheme, cache

    bar = progress(total=len(todo), desc=f"index {arch.file.name}: articles", unit="chunk")
    for c, (rows, skipped, warnings) in zip(todo, runner.map(extract_packed, jobs()), strict=True):
        for w in warnings:
            log.warning("%s: %s", arch.file.name, w)
        with db:  # the chunk and its record of being done: one transaction
            db.executemany("INSERT INTO x.extracted VALUES (?, ?)", rows)
            _add_skipped(db, "articles", skipped)
            db.execute("INSERT INTO x.chunks VALUES (?)", (c,))
        stats["chunks_built"] = stats.get("chunks_built", 0) + 1
        bar.update(1)
    bar.close()


def save_hashes(db: sqlite3.Connection, out: Path, n_images: int) -> None:
    """``hashes.npy``, uint64 ``(n_images, len(HASH_CROPS), 2)``, written in batches."""
    shape = (n_images, len(HASH_CROPS), 2)
    if n_images == 0:
        np.save(out, np.zeros(shape, dtype=np.uint64), allow_pickle=False)
        return
    arr = np.lib.format.open_memmap(out, mode="w+", dtype=np.uint64, shape=shape)
    cur = db.execute("SELECT image, h FROM b.hashes ORDER BY image")
    while rows := cur.fetchmany(4096):
        for i, h in rows:
            arr[i] = np.frombuffer(h, dtype=np.uint64).reshape(shape[1:])
    arr.flush()
    del arr


def _finish(db: sqlite3.Connection, out: Path) -> int:
    if not _done(db, "occurrences"):
        codec = read_codec(db)
        db.create_function("kit_pack_text", 1, lambda t: pack_text(codec, t), deterministic=True)
        with db:
            db.execute("DELETE FROM occurrences")
            db.execute(
                "INSERT INTO occurrences(image, doc, position, alt, caption, context) "
                "SELECT s.image, r.doc, row_number() OVER (PARTITION BY r.doc ORDER BY r.id) - 1,"
                " r.alt, r.caption, kit_pack_text(r.context) FROM b.refs r JOIN b.srcs s ON s.src = r.src "
                "WHERE s.image IS NOT NULL AND r.deco = 0")
            db.execute("DELETE FROM page_titles")  # of the pages that kept an image
            db.execute("INSERT INTO page_titles SELECT doc, title FROM b.page_titles "
                       "WHERE doc IN (SELECT doc FROM occurrences) ORDER BY doc")
            # full duplicate copies of an earlier article's body: aliases of its first copy
            db.execute("DELETE FROM aliases")
            db.execute("INSERT INTO aliases SELECT doc, canon FROM (SELECT doc, min(doc) OVER "
                       "(PARTITION BY h) AS canon FROM b.bodies) WHERE doc != canon ORDER BY doc")
            db.execute("DELETE FROM titles")
            # sorted: the WITHOUT ROWID table fills page after page, not at random hashes
            db.execute("INSERT INTO titles SELECT key, id FROM b.titles ORDER BY key, id")
            db.executescript(INDEXES)
            db.execute("INSERT INTO b.chunks VALUES ('occurrences', 0)")
    (n_images,) = db.execute("SELECT coalesce(max(id) + 1, 0) FROM images").fetchone()
    save_hashes(db, out / "hashes.npy", n_images)
    return int(n_images)


def _drop_extract(db: sqlite3.Connection, out: Path) -> None:
    """The extraction scratch, no longer needed once the articles are written: detached, deleted
    (its chunk count kept in ``b.chunks`` as ``('extracted', count)`` for a resumed build's manifest)."""
    with db:
        db.execute("INSERT OR REPLACE INTO b.chunks SELECT 'extracted', count(*) FROM x.chunks")
    db.execute("DETACH DATABASE x")
    (out / EXTRACT_FILE).unlink(missing_ok=True)


def _articles_lost_their_records(out: Path) -> bool:
    """Whether a killed build in ``out`` had begun its articles phase (documents in ``b.titles``)
    but lost ``extract.sqlite`` before finishing it: the records of the documents not yet in a
    block are gone, and extracting again may not give the same ones (an entry that failed may now
    read), so the build starts again. False when anything does not read (the build then runs as
    it would)."""
    if (out / EXTRACT_FILE).exists() or not (out / BUILD_FILE).exists() or not (out / STORE_FILE).exists():
        return False
    try:
        with closing(sqlite3.connect(f"file:{quote(str(out / STORE_FILE))}?mode=ro", uri=True)) as s:
            done = s.execute("SELECT 1 FROM meta WHERE key = 'articles'").fetchone()
        with closing(sqlite3.connect(f"file:{quote(str(out / BUILD_FILE))}?mode=ro", uri=True)) as b:
            begun = b.execute("SELECT 1 FROM titles LIMIT 1").fetchone()
    except sqlite3.Error:
        return False
    return begun is not None and done is None


def build_archive(arch, out: Path, workers: int | None = None) -> dict:
    """Extract ``arch`` (a :class:`~kit.web.zim.archive._ZimArchive`) into ``out`` (empty, or a
    killed build's folder to resume); returns the counts for the manifest: ``articles``,
    ``images``, ``skipped_articles``, ``skipped_images``, ``chunks_built``, ``chunks_resumed``.

    ``workers`` defaults to the CPU count for archives of :data:`PARALLEL_MIN_ENTRIES` entries
    or more, else 1 (inline). Raises ``sqlite3.Error``/``OSError`` on a write failure (the
    caller turns it into a clear :class:`~kit.web.zim.archive.ZimError`).
    """
    if workers is None:
        workers = (os.cpu_count() or 1) if arch.entry_count >= PARALLEL_MIN_ENTRIES else 1
    t0 = time.perf_counter()
    stamp = out / FORMAT_FILE
    # A killed build missing its tails or progress file: the blocks written so far would have no
    # tails, or be written again after themselves (ATTACH makes a new, empty file).
    lost = [n for n in (TAILS_FILE, BUILD_FILE) if (out / STORE_FILE).exists() and not (out / n).exists()]
    if not lost and _articles_lost_their_records(out):  # documents numbered from records now gone
        lost.append(EXTRACT_FILE)
    if lost:
        log.warning("%s: the killed build in %s lost its %s; starting it again", arch.file.name,
                    out, " and ".join(lost))
    boot = boot_id()
    expected = BUILD_LAYOUT if boot is None else f"{BUILD_LAYOUT} boot {boot}"
    try:
        found: str | None = stamp.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        found = None
    except (OSError, UnicodeDecodeError):
        found = ""
    started = any((out / n).exists() for n in (STORE_FILE, BUILD_FILE, EXTRACT_FILE))
    # resumable: this layout written in this boot, or written with fsync (a stamp without a boot)
    if found in (expected, BUILD_LAYOUT):
        why = None
    elif found is None:
        why = "has no build.format stamp" if started else None
    elif found.startswith(f"{BUILD_LAYOUT} boot "):
        why = "was written before the machine restarted (without fsync, so it may have lost pages)"
    else:
        why = f"is of another layout ({found[:40]!r}, this kit writes {BUILD_LAYOUT!r})"
    if why is not None and started:
        log.warning("%s: the killed build in %s %s; starting it again", arch.file.name, out, why)
    if lost or why is not None:
        for name in (STORE_FILE, BUILD_FILE, TAILS_FILE, EXTRACT_FILE, "hashes.npy", "manifest.json"):
            (out / name).unlink(missing_ok=True)
    _write_stamp(stamp, expected)
    db = sqlite3.connect(out / STORE_FILE, isolation_level=None)
    stats: dict = {}
    phases: dict[str, float] = {}
    import libzim

    with _CACHE_LOCK:  # an inline build raises this process's cluster cache (see _CACHE)
        if not _CACHE[0]:
            _CACHE[1] = libzim.get_cluster_cache_max_size()
        _CACHE[0] += 1
    runner: _Runner | None = None
    try:  # the runner is made inside: if it fails, the cache count and the store are still released
        runner = _Runner(max(1, workers))
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before the first table: no effect later
        db.execute("PRAGMA journal_mode=DELETE")  # WAL off: the store is read as one file
        db.execute("ATTACH DATABASE ? AS b", (str(out / BUILD_FILE),))
        db.execute("ATTACH DATABASE ? AS t", (str(out / TAILS_FILE),))
        db.execute(f"PRAGMA t.page_size={PAGE_SIZE}")
        sync = "FULL" if boot is None else "OFF"  # see boot_id(); the files are synced at the end
        for schema in ("main", "b", "t"):
            db.execute(f"PRAGMA {schema}.synchronous={sync}")
        db.executescript(SCHEMA + _BUILD_SCHEMA + TAILS_SCHEMA)
        db.isolation_level = ""  # `with db:` transactions from here on
        articles_done = db.execute("SELECT 1 FROM meta WHERE key = 'articles'").fetchone() is not None
        if articles_done:  # every extraction chunk was done before
            stats["chunks_resumed"] = max(_done(db, "extracted") or {0})
            (out / EXTRACT_FILE).unlink(missing_ok=True)  # killed before _drop_extract deleted it
        else:
            db.execute("ATTACH DATABASE ? AS x", (str(out / EXTRACT_FILE),))
            db.execute(f"PRAGMA x.synchronous={sync}")
            db.executescript(_EXTRACT_SCHEMA)
        clock = [time.perf_counter()]
        started: dict[str, float] = {}  # Unix time each phase ended (the next one starts there)
        started["begin"] = round(time.time(), 3)

        def lap(name: str) -> None:  # wall seconds per phase, for the manifest
            now = time.perf_counter()
            phases[name] = round(phases.get(name, 0.0) + now - clock[0], 3)
            started[name] = round(time.time(), 3)
            clock[0] = now

        try:
            if not articles_done:
                _extract(arch, db, runner, stats)
                lap("extract")
                _articles(arch, db, ARTICLE_CHUNK, runner.workers)
                lap("articles")
                _drop_extract(db, out)
            _images(arch, db, runner)
            lap("images")
        except BrokenProcessPool as exc:  # e.g. a worker could not start
            log.warning("%s: the extraction pool failed (%s); continuing in this process",
                        arch.file.name, exc)
            runner.close()
            runner = _Runner(1)
            resumed = stats.get("chunks_resumed", 0)
            if db.execute("SELECT 1 FROM meta WHERE key = 'articles'").fetchone() is None:
                _extract(arch, db, runner, stats)  # resumes after the chunks already written
                stats["chunks_resumed"] = resumed
                _articles(arch, db, ARTICLE_CHUNK)
                _drop_extract(db, out)
            _images(arch, db, runner)
            lap("inline_after_pool_failed")
        n_images = _finish(db, out)
        if sync == "OFF":
            try:
                sync_files(out / STORE_FILE, out / TAILS_FILE, out / "hashes.npy")
            except OSError:  # a write the OS could not complete: the committed pages are not known
                stamp.unlink(missing_ok=True)  # so the next try starts again (no stamp, files: see above)
                raise
        lap("finish")
        (n_articles,) = db.execute("SELECT value FROM meta WHERE key = 'articles'").fetchone()
        skipped = {p: dict(db.execute("SELECT reason, n FROM b.skipped WHERE phase = ? "
                                      "ORDER BY reason", (p,)).fetchall())
                   for p in ("articles", "images")}
    finally:
        if runner is not None:
            runner.close()
        db.close()
        with _CACHE_LOCK:
            _CACHE[0] -= 1
            if not _CACHE[0]:
                libzim.set_cluster_cache_max_size(_CACHE[1])
        _release_worker_state()
    return {"articles": int(n_articles), "images": n_images,
            "skipped_articles": skipped["articles"], "skipped_images": skipped["images"],
            "chunks_built": stats.get("chunks_built", 0),
            "chunks_resumed": stats.get("chunks_resumed", 0),
            "build_seconds": round(time.perf_counter() - t0, 3), "phase_seconds": phases,
            "phase_ended_unix": started}
