"""Full body texts of an archive's articles (issue 32): the store keeps a prefix of each body
(:mod:`kit.web.zim.tails`); the full text is that prefix and its tail while ``tails.sqlite``
exists (after a build, until the collection indexes are built), else the page extracted again from
the archive, exactly as the build extracted it (same entry, same :func:`_extract_article`).

Readers: the collection build (BM25 indexes the full text), ``LocalZimWeb.corpus()``, and search
snippets whose query terms are not in a long body's stored lead.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

from kit.types import BackendError
from kit.web.zim.build import (
    ARTICLE_CHUNK,
    PARALLEL_MIN_ENTRIES,
    _release_worker_state,
    _Runner,
    cluster_cache_bytes,
    extract_chunk,
)
from kit.web.zim.html import _extract_article
from kit.web.zim.snippets import lead_snippet, make_snippet
from kit.web.zim.store import BLOCK, ArchiveStore
from kit.web.zim.tails import TAILS_FILE, Tails, is_whole

if TYPE_CHECKING:
    from kit.web.zim.archive import _ZimArchive

log = logging.getLogger(__name__)
#: Articles read from the store at a time by :func:`iter_full_texts`.
_READ_BATCH = 1024


def hit_snippet(arch: _ZimArchive, doc: int, prefix: str, keys, analyzer) -> str:
    """The snippet of search hit ``doc`` whose stored body is ``prefix`` (``keys``: the query's
    :func:`~kit.web.zim.snippets.snippet_keys`): from the lead when a query term is in it, else
    from the full text (:func:`full_texts`); when that can no longer be read (the archive changed
    or is damaged), from the stored lead with a warning, so one unreadable page does not fail the
    whole search."""
    snippet = lead_snippet(prefix, keys, analyzer)
    if snippet is not None:
        return snippet
    try:
        text = arch.full_texts([doc])[doc]
    except BackendError as exc:
        log.warning("%s: snippet of article %d from its stored lead: %s", arch.file.name, doc, exc)
        text = prefix
    return make_snippet(text, keys, analyzer)


def _open_tails(arch: _ZimArchive, store: ArchiveStore) -> Tails | None:
    """The tails file, or None when there is none (or it was deleted as it was being opened: another
    process's :meth:`LocalZimWeb.ensure_ready` drops it; once open, it stays readable)."""
    try:
        return Tails(arch.index_dir / TAILS_FILE, store.codec)
    except (FileNotFoundError, sqlite3.OperationalError):
        return None


def _disagree(arch: _ZimArchive, what: str) -> BackendError:
    return BackendError(f"{arch.file.name}: the archive and its index disagree ({what}); delete "
                        f"{arch.index_dir} to rebuild it")


def full_texts(arch: _ZimArchive, store: ArchiveStore, docs: Sequence[int]) -> dict[int, str]:
    """{doc: full body text} of articles ``docs`` (a few: search hits), from the tails file when
    it exists, else each long body's page extracted again (~2-10 ms a Wikipedia-weight page).

    Raises:
        IndexError, ValueError: as :meth:`ArchiveStore.records` (callers hold
            :meth:`_ZimArchive.store_reads`).
        BackendError: a page that is gone from the archive or extracts to another text.
    """
    records = store.records(docs)
    out = {d: rec[3] for d, rec in records.items() if is_whole(rec[3])}
    long = [d for d in records if d not in out]
    if not long:
        return out
    with store.lock:
        tails = _open_tails(arch, store)
        if tails is not None:
            try:
                for d in long:
                    b = d // BLOCK
                    out[d] = records[d][3] + tails.block(b, store.block_len(b))[d % BLOCK]
                return out
            finally:
                tails.close()
    for d in long:
        path, title, _, prefix = records[d]
        entry = arch.entry(path)
        if entry is None:
            raise _disagree(arch, f"article {path} is missing")
        _mime, html = arch.read(entry)
        try:
            text = _extract_article(entry.path, entry.title, html).text
        except ValueError as exc:
            raise _disagree(arch, f"article {path} no longer parses: {exc}") from exc
        if not text.startswith(prefix):
            raise _disagree(arch, f"article {path} extracts to another text")
        out[d] = text
    return out


def iter_full_texts(arch: _ZimArchive, store: ArchiveStore, start: int = 0,
                    workers: int | None = None) -> Iterator[tuple[int, str, str, str]]:
    """(doc, path, title, full body text) of every article from doc ``start`` on, in doc order:
    prefixes and tails while the tails file exists, else every page extracted again (the build's
    chunked, parallel extraction: ``workers`` as in :func:`~kit.web.zim.build.build_archive`), each
    checked against the store (path and prefix).

    Raises:
        ValueError: a damaged store or tails block.
        BackendError: the archive extracts to other articles than the store holds.
    """
    tails = _open_tails(arch, store)
    if tails is not None:
        try:
            block, got = -1, [""]
            for doc, (path, title, _, prefix) in store.iter_records(_READ_BATCH, start):
                if is_whole(prefix):
                    yield doc, path, title, prefix
                    continue
                if doc // BLOCK != block:
                    block = doc // BLOCK
                    with store.lock:
                        got = tails.block(block, store.block_len(block))
                yield doc, path, title, prefix + got[doc % BLOCK]
        finally:
            tails.close()
        return
    yield from _reextracted(arch, store, start, workers)


def _reextracted(arch: _ZimArchive, store: ArchiveStore, start: int,
                 workers: int | None) -> Iterator[tuple[int, str, str, str]]:
    """:func:`iter_full_texts` without a tails file: the archive extracted again."""
    stored = store.iter_records(_READ_BATCH)
    doc = 0
    for arts, _skipped, _warnings in _extracted_chunks(arch, workers):
        for path, title, _first, text, _refs in arts:
            got = next(stored, None)
            if got is None or got[1][0] != path or not text.startswith(got[1][3]):
                raise _disagree(arch, f"article {doc} extracts as {path}")
            if doc >= start:
                yield doc, path, title, text
            doc += 1
    if doc != store.n_articles:
        raise _disagree(arch, f"{doc} articles extracted, {store.n_articles} stored")


def _extracted_chunks(arch: _ZimArchive, workers: int | None) -> Iterator[tuple]:
    """:func:`~kit.web.zim.build.extract_chunk` of every chunk of entry ids, in order, in a
    process pool (``workers`` as in :func:`~kit.web.zim.build.build_archive`); when the pool
    breaks (a worker killed), the rest inline in this process."""
    if workers is None:
        workers = (os.cpu_count() or 1) if arch.entry_count >= PARALLEL_MIN_ENTRIES else 1
    n_chunks = -(-arch.entry_count // ARTICLE_CHUNK)
    runner, c = _Runner(max(1, workers)), 0
    try:
        while c < n_chunks:
            cache = cluster_cache_bytes(arch.file.stat().st_size, runner.workers) if runner.pool else 0
            jobs = ((str(arch.file), k * ARTICLE_CHUNK, min(arch.entry_count, (k + 1) * ARTICLE_CHUNK),
                     arch.main_path, arch.new_scheme, cache) for k in range(c, n_chunks))
            try:
                for res in runner.map(extract_chunk, jobs):
                    yield res
                    c += 1
            except BrokenProcessPool as exc:
                if runner.pool is None:
                    raise
                log.warning("%s: the extraction pool failed (%s); continuing in this process",
                            arch.file.name, exc)
                runner.close()
                runner = _Runner(1)
    finally:
        runner.close()
        if runner.pool is None:
            _release_worker_state()
