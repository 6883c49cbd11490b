"""The image phase of the index build (issue 17 part 2, issue 32): referenced images resolved,
read once each in the archive's cluster order, hashed in the pool and numbered in first-reference
order (:mod:`kit.web.zim.build`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kit.progress import progress
from kit.types import BackendError
from kit.web.zim.decorative import is_decorative
from kit.web.zim.images import RASTER_MIMES, crop_hashes, decode_grey
from kit.web.zim.locations import reading_order
from kit.web.zim.runner import _add_skipped, _done, _Runner

#: Referenced image paths per hashing batch.
IMAGE_CHUNK = 256
#: Referenced image paths resolved per transaction.
RESOLVE_BATCH = 4096


def hash_image(path: str, mime: str, data: bytes, role: bool = False):
    """(skip reason or "", (mime, width, height), hashes bytes) of one referenced image;
    ``role``: every page shows it as interface (:func:`kit.web.zim.decorative.decorative_role`)."""
    if mime == "image/svg+xml":
        return "svg", None, None
    if mime not in RASTER_MIMES:
        return "not_raster", None, None
    if role:
        return "decorative", None, None
    try:
        img = decode_grey(data)
    except BackendError:
        return "undecodable", None, None
    if is_decorative(path, *img.size):
        return "decorative", None, None
    hs = np.array(crop_hashes(img), dtype=np.uint64)
    return "", (mime, img.size[0], img.size[1]), hs.tobytes()


def _hash_batch(items: list[tuple[str, str, bytes]]):
    return [hash_image(*it) for it in items]


def _resolve(arch, db) -> None:
    """Each referenced path's final entry (redirects followed) into ``b.srcs`` (``final``, ``eid``;
    NULL when it has none), a transaction per batch of :data:`RESOLVE_BATCH` (one libzim path
    look-up each; a killed build redoes only the batch it was in)."""
    if _done(db, "resolve"):
        return
    (n,) = db.execute("SELECT coalesce(max(ord), 0) FROM b.srcs").fetchone()
    done = _done(db, "resolve_batch")
    for c in range(-(-n // RESOLVE_BATCH)):
        if c in done:
            continue
        rows = db.execute("SELECT ord, src FROM b.srcs WHERE ord > ? AND ord <= ? ORDER BY ord",
                          (c * RESOLVE_BATCH, (c + 1) * RESOLVE_BATCH)).fetchall()
        found = [(ord_, arch.entry(src)) for ord_, src in rows]
        with db:
            db.executemany("UPDATE b.srcs SET final = ?, eid = ? WHERE ord = ?",
                           [(e.path, int(e._index), ord_) for ord_, e in found if e is not None])
            db.execute("INSERT INTO b.chunks VALUES ('resolve_batch', ?)", (c,))
    with db:
        db.execute("CREATE INDEX IF NOT EXISTS b.srcs_eid ON srcs(eid)")
        db.execute("INSERT INTO b.chunks VALUES ('resolve', 0)")


def _images(arch, db, runner: _Runner) -> None:
    """Phase 2: the distinct referenced image paths (``b.srcs``, in first-reference order) are
    resolved to their final entries (redirects followed); each final image is read once, in the
    archive's cluster order (stored once in ``b.image_order``), and hashed by the pool
    (``b.finals``); the kept ones are then numbered in first-reference order (the order the
    in-memory build used). Every step resumes after a kill."""
    if not _done(db, "srcs"):
        with db:  # distinct referenced paths in first-reference order
            # deco: every reference shows it as interface (then it is not indexed)
            db.execute("INSERT INTO b.srcs(src, deco) SELECT src, min(deco) FROM b.refs "
                       "GROUP BY src ORDER BY min(id)")
            db.execute("INSERT INTO b.chunks VALUES ('srcs', 0)")
    _resolve(arch, db)
    if not _done(db, "image_order"):
        eids = np.array([e for (e,) in db.execute(
            "SELECT DISTINCT eid FROM b.srcs WHERE eid IS NOT NULL ORDER BY eid")], dtype=np.int64)
        ordered = reading_order(arch.file, arch.entry_count, eids, "images")
        with db:
            db.executemany("INSERT INTO b.image_order VALUES (?, ?)", enumerate(ordered.tolist()))
            db.execute("INSERT INTO b.chunks VALUES ('image_order', 0)")
    (n_finals,) = db.execute("SELECT count(*) FROM b.image_order").fetchone()
    done = _done(db, "images")
    todo = [c for c in range(-(-n_finals // IMAGE_CHUNK)) if c not in done]
    plans: list[tuple[int, list]] = []  # in flight, in submission order

    def jobs() -> Iterator[tuple]:
        for c in todo:
            batch = [e for (e,) in db.execute("SELECT eid FROM b.image_order WHERE pos >= ? AND pos < ? "
                                              "ORDER BY pos", (c * IMAGE_CHUNK, (c + 1) * IMAGE_CHUNK))]
            rows = dict((e, (p, d)) for e, p, d in db.execute(
                f"SELECT eid, min(final), min(deco) FROM b.srcs WHERE eid IN ({','.join('?' * len(batch))}) "
                "GROUP BY eid", batch))
            plan, items = [], []
            for eid in batch:
                path, deco = rows[eid]
                try:  # by its id (the final entry, resolved before): no path look-up again
                    with arch.lock:
                        entry = arch.archive._get_entry_by_id(eid)
                    mime, data = arch.read(entry)
                except (RuntimeError, BackendError):
                    plan.append((eid, path, -1))
                    continue
                plan.append((eid, path, len(items)))
                items.append((path, mime, data, bool(deco)))  # deco: no reference shows it as content
            plans.append((c, plan))
            yield (items,)

    bar = progress(total=len(todo), desc=f"index {arch.file.name}: images", unit="chunk")
    for hashed in runner.map(_hash_batch, jobs()):
        c, plan = plans.pop(0)
        with db:
            db.executemany("INSERT INTO b.finals VALUES (?, ?, ?, ?, ?, ?, ?)", [
                (eid, path, "unreadable", None, None, None, None) if i < 0 else
                (eid, path, hashed[i][0], *(hashed[i][1] or (None, None, None)), hashed[i][2])
                for eid, path, i in plan])
            db.execute("INSERT INTO b.chunks VALUES ('images', ?)", (c,))
        bar.update(1)
    bar.close()
    if _done(db, "number"):
        return
    with db:  # kept images numbered in first-reference order; skips counted per referenced path
        skipped: dict[str, int] = {}
        kept: dict[int, int] = {}  # entry id -> image number (~100 B a kept image)
        numbered: list[tuple[int, int]] = []
        cur = db.execute("SELECT s.ord, s.eid, f.path, f.reason, f.mime, f.width, f.height, f.h "
                         "FROM b.srcs s LEFT JOIN b.finals f ON f.eid = s.eid ORDER BY s.ord")
        while rows := cur.fetchmany(4096):
            for ord_, eid, path, reason, mime, width, height, hs in rows:
                if eid is None or reason:
                    reason = reason or "missing"
                    skipped[reason] = skipped.get(reason, 0) + 1
                    continue
                img = kept.get(eid)
                if img is None:
                    img = kept[eid] = len(kept)
                    db.execute("INSERT INTO images VALUES (?, ?, ?, ?, ?)", (img, path, mime, width, height))
                    db.execute("INSERT INTO b.hashes VALUES (?, ?)", (img, hs))
                numbered.append((img, ord_))
        # after the scan: b.srcs is not written while a statement still reads it
        db.executemany("UPDATE b.srcs SET image = ? WHERE ord = ?", numbered)
        _add_skipped(db, "images", skipped)
        db.execute("INSERT INTO b.chunks VALUES ('number', 0)")
