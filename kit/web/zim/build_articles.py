"""The articles phase of the index build (issue 17 part 2, issue 32): the records the extraction
phase left in ``x.extracted`` written to the store in entry-id order (document ids follow it), with
their image references, in ranges of :data:`~kit.web.zim.build.ARTICLE_CHUNK` entry ids, one
transaction a range (:mod:`kit.web.zim.build`).

Article records (their bodies' first :data:`~kit.web.zim.tails.TEXT_PREFIX` characters; the rest
goes to ``tails.sqlite``, :mod:`kit.web.zim.tails`) are stored in zstd-compressed blocks of
:data:`~kit.web.zim.store.BLOCK`. No block is written before the dictionary is trained on the
first ``ZDICT_SAMPLES`` bytes of text. Full blocks are compressed on threads (zstd releases the
GIL) while this process reads and writes the next range: a range's transaction writes the blocks
submitted during the one before. Records not yet in a written block are not kept in any table:
a resumed build reads them again from ``x.extracted`` (``b.titles`` gives each document's entry
id), so every text is written once.
"""

from __future__ import annotations

import pickle
import sqlite3
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import zstandard

from kit.web.zim import store as store_mod
from kit.web.zim.runner import _done
from kit.web.zim.store import BLOCK, TextCodec, pack_records, read_codec
from kit.web.zim.tails import split_body, tails_frame, write_tails

#: ``x.extracted`` is appended to in reading order (its rowids) and indexed by entry id once the
#: extraction is complete: inserted by entry id, rows read in cluster order landed at random
#: places of the B-tree (measured at 400k rows of 2-7 KB: 48 us a row written, mostly kernel time
#: journaling the pages it split, against 10 appended; reading them back by entry id 3 -> 6 us)
EXTRACTED_INDEX = "CREATE UNIQUE INDEX IF NOT EXISTS x.extracted_eid ON extracted(eid)"  # an entry extracted twice: refused

#: One pending article record: (path, title, first sentence, full body text).
_Rec = tuple[str, str, str, str]


def unpack_extracted(data: bytes, dctx: zstandard.ZstdDecompressor | None = None) -> tuple:
    """The record :func:`~kit.web.zim.build.extract_packed` packed (data written by this build
    only): (path, title, first, text, refs, title key, body hash or None). ``dctx``: a
    decompressor to reuse (one per thread)."""
    return pickle.loads((dctx or zstandard.ZstdDecompressor()).decompress(data))  # noqa: S301 - our own scratch


def pack_block(codec: TextCodec, recs: list[_Rec]) -> tuple[bytes, bytes | None]:
    """(block frame, tails frame or None) of one block's records (full texts): bodies cut to
    their stored prefix in the block, the rest in the tails frame (:func:`tails_frame`)."""
    raw = pack_records([(path, title, first, split_body(text)[0]) for path, title, first, text in recs])
    return codec.pack(raw), tails_frame(codec, [r[3] for r in recs])


class _BlockPacker:
    """:func:`pack_block` on ``threads`` threads, each with its own codec (zstd compressors are not
    thread-safe); results in submission order through the returned futures."""

    def __init__(self, codec: TextCodec, threads: int):
        self.zdict = codec.zdict
        self.local = threading.local()
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="kit-block")

    def _pack(self, recs: list[_Rec]) -> tuple[bytes, bytes | None]:
        codec = getattr(self.local, "codec", None)
        if codec is None:
            codec = self.local.codec = TextCodec(self.zdict)
        return pack_block(codec, recs)

    def submit(self, recs: list[_Rec]) -> Future:
        return self.pool.submit(self._pack, recs)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _unwritten(db: sqlite3.Connection, first_doc: int, next_doc: int) -> list[_Rec]:
    """Documents ``first_doc .. next_doc - 1`` (written to ``b.titles`` but not yet in a block)
    read again from ``x.extracted`` by the entry ids ``b.titles`` keeps. Raises
    ``sqlite3.DatabaseError`` when any is missing there."""
    if first_doc >= next_doc:
        return []
    dctx = zstandard.ZstdDecompressor()
    recs = [unpack_extracted(data, dctx)[:4] for (data,) in db.execute(
        "SELECT x.data FROM b.titles t JOIN x.extracted x ON x.eid = t.eid WHERE t.id >= ? ORDER BY t.id",
        (first_doc,))]
    if len(recs) != next_doc - first_doc:  # the build start checks for a lost extract.sqlite
        raise sqlite3.DatabaseError(f"documents {first_doc}..{next_doc - 1} have {len(recs)} extracted "
                                    "records: the build's scratch is inconsistent")
    return recs


def _articles(arch, db: sqlite3.Connection, chunk: int, threads: int = 1) -> None:
    """Phase 1b: the extracted articles in entry-id order, in ranges of ``chunk`` entry ids
    (:data:`kit.web.zim.build.ARTICLE_CHUNK`), written to the store with their image references;
    full blocks compressed on ``threads`` threads (see the module's docstring)."""
    with db:  # the records by entry id (appended in reading order; a resumed build has it already)
        db.execute(EXTRACTED_INDEX)
    done = _done(db, "articles")
    todo = [c for c in range(-(-arch.entry_count // chunk)) if c not in done]
    # meta.zdict (empty if zstd could not learn one) marks that training ran
    trained = db.execute("SELECT 1 FROM meta WHERE key = 'zdict'").fetchone() is not None
    codec = read_codec(db)
    (next_block,) = db.execute("SELECT coalesce(max(id) + 1, 0) FROM blocks").fetchone()
    (next_doc,) = db.execute("SELECT coalesce(max(id) + 1, 0) FROM b.titles").fetchone()
    pending = _unwritten(db, next_block * BLOCK, next_doc)  # records from block next_block on
    packer = _BlockPacker(codec, threads) if trained else None
    inflight: deque[Future] = deque()  # blocks next_block, next_block + 1, ... being compressed
    dctx = zstandard.ZstdDecompressor()

    def write_done() -> None:  # the blocks in flight, in order; caller holds a transaction
        nonlocal next_block, pending
        while inflight:
            block, tails = inflight.popleft().result()
            db.execute("INSERT INTO blocks VALUES (?, ?)", (next_block, block))
            write_tails(db, next_block, tails)
            next_block += 1
            pending = pending[BLOCK:]

    try:
        for c in todo:
            arts = [(eid, unpack_extracted(data, dctx)) for eid, data in db.execute(
                "SELECT eid, data FROM x.extracted WHERE eid >= ? AND eid < ? ORDER BY eid",
                (c * chunk, (c + 1) * chunk))]
            with db:  # the range and its record of being done: one transaction
                for eid, (path, title, first, text, refs, key, body) in arts:
                    pending.append((path, title, first, text))
                    db.execute("INSERT INTO b.titles VALUES (?, ?, ?)", (next_doc, key, eid))
                    db.executemany("INSERT INTO b.refs(doc, src, alt, caption, context, deco) "
                                   "VALUES (?, ?, ?, ?, ?, ?)", [(next_doc, *r) for r in refs])
                    if any(not r[4] for r in refs):
                        db.execute("INSERT INTO b.page_titles VALUES (?, ?)", (next_doc, title))
                    if body is not None:
                        db.execute("INSERT INTO b.bodies VALUES (?, ?)", (next_doc, body))
                    next_doc += 1
                if not trained and sum(len(r[3]) for r in pending) >= store_mod.ZDICT_SAMPLES:
                    codec, trained = TextCodec.train([r[3] for r in pending]), True
                    db.execute("INSERT INTO meta VALUES ('zdict', ?)", (codec.zdict,))
                    packer = _BlockPacker(codec, threads)
                write_done()  # the blocks submitted during the range before, compressed meanwhile
                if packer is not None:
                    for i in range(len(pending) // BLOCK):
                        inflight.append(packer.submit(pending[i * BLOCK:(i + 1) * BLOCK]))
                db.execute("INSERT INTO b.chunks VALUES ('articles', ?)", (c,))
        with db:  # the last, partial block (the whole archive without a dictionary: too little text)
            write_done()
            while pending:
                block, tails = pack_block(codec, pending[:BLOCK])
                db.execute("INSERT INTO blocks VALUES (?, ?)", (next_block, block))
                write_tails(db, next_block, tails)
                next_block, pending = next_block + 1, pending[BLOCK:]
            db.execute("INSERT OR REPLACE INTO meta VALUES ('articles', ?)", (next_doc,))
    finally:
        if packer is not None:
            packer.close()
