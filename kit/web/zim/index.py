"""BM25 indexes (tantivy) over a set of archives: one text and one image index per language, cached
under ``<index root>/collections/<key>/``, and the score normalisation (:func:`bm25_bound`) that
merges several languages into one ranking."""

from __future__ import annotations

import array
import hashlib
import json
import logging
import math
import mmap
import os
import shutil
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import tantivy

from kit.web.zim.cache import COLLECTION_FORMAT, INDEX_FORMAT, _load_or_build, _write_json_atomic, sync_files
from kit.web.zim.text import Analyzer, filename_words, text_analyzer

if TYPE_CHECKING:
    from kit.web.zim.archive import _ZimArchive

log = logging.getLogger(__name__)

#: Boost of the exact-title clause: its BM25 score (about ln N on a one-token field) times this
#: exceeds any content score, so exact title matches rank first, among themselves by content.
TITLE_BOOST = 100.0
#: Boost of a query word's exact-form clause (the ``exact`` field: the word case-folded, accents
#: kept, for words with a non-ASCII letter): a document holding the query's exact form scores
#: up to this share of a term more than one holding an accent-folded form only, so among
#: documents that match a word alike, exact forms rank first (``λόγος`` before ``λογος`` for
#: ``λόγος``, the other way round for ``λογος``), while matching stays accent-insensitive: a
#: tie-breaker, not a filter (an accented and a plain query rank the shared archives alike).
EXACT_BOOST = 0.05

#: Fields of the image index and their BM25 boosts (caption and alt text weigh most).
_IMAGE_FIELDS = {"caption": 2.0, "alt": 2.0, "fname": 1.5, "title": 1.0, "context": 0.5}


@dataclass
class _LanguageIndex:
    """The tantivy indexes of one language of a collection (BM25 statistics are per language)."""

    language: str | None
    analyzer: Analyzer
    text_searcher: tantivy.Searcher
    text_schema: tantivy.Schema
    image_searcher: tantivy.Searcher
    image_schema: tantivy.Schema
    n_docs: int = 0  # articles in the text index
    check_terms: bool = False  # probe term presence before searching (secondary languages)
    keymap: list | None = None  # [segment][doc] -> key (see _address_keys), small indexes only

    def text_query(self, tokens: list[str], exact_terms: Sequence[str] = ()) -> tantivy.Query:
        """OR of the analyzed query terms over the content (built directly from tokens, so no
        query syntax can fail), plus an exact-title clause that puts the article whose whole
        analyzed title equals the analyzed query first (Wikipedia's "go to title" behaviour:
        BM25 alone ranks the long "Ray Charles" article below short pages that repeat his name).
        ``exact_terms``: the query's exact-form terms (:meth:`Analyzer.exact_terms`), each a clause on
        the ``exact`` field boosted by :data:`EXACT_BOOST`."""
        schema = self.text_schema
        clauses = [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "content", t))
                   for t in tokens]
        for t in dict.fromkeys(exact_terms):
            if self.text_searcher.doc_freq("exact", t):
                clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(
                    tantivy.Query.term_query(schema, "exact", t), EXACT_BOOST)))
        title_key = " ".join(tokens)
        # Only when some title matches: a plain OR of term queries keeps tantivy's fast
        # block-max WAND top-k path, which the boosted clause would disable.
        if self.text_searcher.doc_freq("title_key", title_key):
            exact = tantivy.Query.term_query(schema, "title_key", title_key)
            clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(exact, TITLE_BOOST)))
        return tantivy.Query.boolean_query(clauses)

    def image_query(self, query: str) -> tantivy.Query | None:
        tokens = self.analyzer.analyze(query)
        if not tokens:
            return None
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.boost_query(
                tantivy.Query.term_query(self.image_schema, name, t), boost))
             for name, boost in _IMAGE_FIELDS.items() for t in tokens])


_ITEM_MASK = (1 << 40) - 1

#: tantivy's BM25 parameters (``tantivy::query::bm25``): k1 and b.
BM25_K1, BM25_B = 1.2, 0.75


def bm25_bound(doc_freqs: Sequence[int], n_docs: int) -> float:
    """Largest content BM25 score any document of an index can get for a query: the sum over the
    query's analyzed terms of ``idf * (k1 + 1)`` (term frequency saturates at ``k1 + 1``), with
    tantivy's ``idf = ln(1 + (N - n + 0.5) / (n + 0.5))`` for a term in ``n`` of ``N`` documents
    (``n = 0`` for a term the index lacks, the largest idf).

    Merging several language indexes divides each index's scores by this bound, so a merged
    score is the share of the query's possible evidence a document holds in its own index
    (0..1; an exact-title match adds :data:`TITLE_BOOST` times its clause on top, so it stays
    first). Raw BM25 magnitudes grow with ln N: without this, a large English index's hits on one
    common word of a French query outscore the French article holding every word (measured on the
    shared archives: "percussionniste suédois de free jazz", "satellite orbite soleil").
    Reciprocal-rank fusion was not chosen: it interleaves the indexes' first hits regardless of
    how well each matches, ranking English junk beside the French answer.
    """
    bound = 0.0
    for n in doc_freqs:
        bound += math.log(1.0 + (n_docs - n + 0.5) / (n + 0.5))
    return max(bound * (BM25_K1 + 1.0), 1e-9)


#: Documents between two commits of a collection index being built: the unit of resumed work
#: (a killed build redoes at most this many) and of a segment's flush (kit: ~1-2 min of indexing
#: here; fewer commits would lose more on a kill, more would merge more).
COMMIT_DOCS = 100_000
#: tantivy writer heaps (bytes) of the text and the image index, one writer at a time: the
#: build's fixed memory cap (kit: tantivy flushes a segment when its heap fills).
TEXT_HEAP, IMAGE_HEAP = 96_000_000, 48_000_000
#: Indexing threads of a writer for indexes of :data:`PARALLEL_MIN_DOCS` documents or more
#: (kit: measured at 20k articles, 2 threads 9.6 s wall against 16.4 s for 1, same CPU; tantivy
#: needs >= 15 MB of heap a thread). Smaller indexes use one thread: one segment, so the order
#: tantivy returns equal-score documents in is the same on every build (the regression fixture
#: on the shared archives relies on it); large ones have several segments anyway.
WRITER_THREADS = 2
PARALLEL_MIN_DOCS = 50_000

#: Up to this many documents, a language index keeps its (segment, doc) -> key table in memory
#: (8 bytes a document): a list look-up per hit instead of a fast-field read per query.
_KEYMAP_MAX_DOCS = 1_000_000


#: Articles read from a store per query while indexing (bounds the rows held at once).
_READ_BATCH = 256
#: Documents a keymap read fetches per fast-field call (bounds the build's Python objects).
_KEYMAP_BATCH = 65_536


def _segment_sizes(index_dir: Path) -> list[int]:
    """``max_doc`` of each segment in ``meta.json`` order (the order of a searcher's
    ``segment_ord``: tantivy's reader opens ``meta.json``'s segments in turn)."""
    meta = json.loads((index_dir / "meta.json").read_text(encoding="utf-8"))
    return [int(s["max_doc"]) for s in meta["segments"]]


def _address_keys(searcher: tantivy.Searcher, sizes: Sequence[int]) -> list[array.array]:
    """Table ``[segment_ord][doc] -> key`` of every document of an (immutable, delete-free) index
    whose segments hold ``sizes`` documents, read in batches of :data:`_KEYMAP_BATCH` addresses:
    memory is the table (8 bytes a document) plus one batch, whatever the index size.

    Raises:
        ValueError: ``sizes`` do not match the searcher (segment count or document total).
    """
    if len(sizes) != searcher.num_segments or sum(sizes) != searcher.num_docs:
        raise ValueError(f"segment sizes {sizes} do not match the index")
    table = []
    for seg, n in enumerate(sizes):
        t = array.array("Q")
        for lo in range(0, n, _KEYMAP_BATCH):
            addrs = [tantivy.DocAddress(seg, d) for d in range(lo, min(n, lo + _KEYMAP_BATCH))]
            t.extend(searcher.fast_field_values("key", addrs))
        table.append(t)
    return table


def _save_keymap(table: list[array.array], path: Path) -> None:
    """``table`` (see :func:`_address_keys`) as ``<segments:u64><size:u64 each><keys:u64...>``."""
    with open(path, "wb") as f:
        f.write(array.array("Q", [len(table), *(len(t) for t in table)]).tobytes())
        for t in table:
            f.write(t.tobytes())


def _load_keymap(path: Path, searcher: tantivy.Searcher) -> list[array.array]:
    """The table :func:`_save_keymap` wrote (8 bytes a document, no per-document objects).

    Raises:
        ValueError: it does not fit the opened index (segment count or document total).
    """
    data = path.read_bytes()
    head = array.array("Q", data[:8])
    n_seg = head[0] if head else 0
    sizes = array.array("Q", data[8: 8 + 8 * n_seg])
    if n_seg != searcher.num_segments or sum(sizes) != searcher.num_docs \
            or len(data) != 8 * (1 + n_seg + sum(sizes)):
        raise ValueError(f"{path.name} does not match its index")
    table, pos = [], 8 * (1 + n_seg)
    for n in sizes:
        table.append(array.array("Q", data[pos: pos + 8 * n]))
        pos += 8 * n
    return table


#: First bytes of a heads file (:class:`Heads`).
_HEADS_MAGIC = b"KITHEAD1"


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_heads(rows: Iterator[tuple[str, str]], n: int, path: Path) -> None:
    """Write the heads table of ``n`` articles (``rows``: (path, title) in article order) to
    ``path`` atomically: ``KITHEAD1``, the count and the entries' byte length (u64 each), the
    entries, then ``n + 1`` entry offsets (u64, from the entries' start). An entry is a uvarint
    byte length of the path, the path's UTF-8 (empty when it is the title with ``_`` for spaces,
    as in the store), the title's UTF-8: ~8 + 30 B an article. Streamed (the offsets through a
    side file in batches of :data:`_KEYMAP_BATCH`): memory does not grow with ``n``.

    Raises:
        ValueError: ``rows`` does not hold ``n`` articles.
        OSError: the folder cannot be written.
    """
    tmp, side = path.with_name(f".{path.name}.tmp"), path.with_name(f".{path.name}.offsets")
    try:
        with open(tmp, "wb") as f, open(side, "w+b") as fo:
            f.write(_HEADS_MAGIC + struct.pack("<QQ", n, 0))
            pos, count, offs = 0, 0, array.array("Q", [0])
            for art_path, title in rows:
                p = b"" if art_path == title.replace(" ", "_") else art_path.encode("utf-8")
                entry = _uvarint(len(p)) + p + title.encode("utf-8")
                f.write(entry)
                pos += len(entry)
                count += 1
                offs.append(pos)
                if len(offs) >= _KEYMAP_BATCH:
                    fo.write(offs.tobytes())
                    del offs[:]
            if count != n:
                raise ValueError(f"{path.name}: {count} articles read, {n} expected")
            fo.write(offs.tobytes())
            fo.seek(0)
            shutil.copyfileobj(fo, f, 1 << 20)
            f.seek(16)
            f.write(struct.pack("<Q", pos))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        side.unlink(missing_ok=True)


class Heads:
    """An archive member's article (path, title) by article id, from a memory-mapped heads file
    (:func:`write_heads`): ranking names its hits without decompressing record blocks (a block
    of 32 records is ~0.15-0.5 ms; an entry here is a slice, ~5 us). Opening reads the header
    only (nothing per article).

    Raises:
        ValueError: (open) the file is short, not a heads file, or not of ``n`` articles;
            (``get``) an id outside ``0..n-1`` or an entry that does not decode (damaged).
    """

    def __init__(self, path: Path, n: int):
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24 + 8 * (n + 1):
                raise ValueError(f"{path.name} is short")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(self._mm)
        got, blob = struct.unpack_from("<QQ", view, 8)
        if bytes(view[:8]) != _HEADS_MAGIC or got != n or 24 + blob + 8 * (n + 1) != size:
            raise ValueError(f"{path.name} is not a heads table of {n} articles")
        self._offs = view[24 + blob:].cast("Q")
        if self._offs[0] != 0 or self._offs[n] != blob:
            raise ValueError(f"{path.name}: its offsets do not span its entries")
        self.n = n
        self.path = path
        self._blob = blob

    def get(self, i: int) -> tuple[str, str]:
        """(entry path, title) of article ``i``."""
        if not 0 <= i < self.n:
            raise ValueError(f"{self.path.name}: no article {i}")
        lo, hi = self._offs[i], self._offs[i + 1]
        if not lo <= hi <= self._blob:  # a slice past the entries would read the offsets
            raise ValueError(f"{self.path.name}: entry {i} is damaged")
        raw = self._mm[24 + lo:24 + hi]
        plen = shift = at = 0
        while True:
            if at >= len(raw) or shift > 63:  # an empty entry or a length that never ends
                raise ValueError(f"{self.path.name}: entry {i} is damaged")
            b = raw[at]
            at += 1
            plen |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if at + plen > len(raw):
            raise ValueError(f"{self.path.name}: entry {i} is damaged")
        try:
            title = raw[at + plen:].decode("utf-8")
            art_path = raw[at:at + plen].decode("utf-8") or title.replace(" ", "_")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.path.name}: entry {i} is damaged: {exc}") from exc
        return art_path, title


def _key(member: int, item: int) -> int:
    """Fast-field value naming (archive member, article or image) in a collection index."""
    return (member << 40) | item


def _register(index: tantivy.Index, tok: str, analyzer: Analyzer) -> None:
    """Register ``analyzer``'s tantivy analyzers on ``index``: ``tok`` (folded, stemmed) and
    ``tok_exact`` (the ``exact`` field's)."""
    index.register_tokenizer(tok, analyzer.tantivy)
    index.register_tokenizer(f"{tok}_exact", analyzer.exact)


def _lang_key(language: str | None) -> str:
    return language or "none"


class _Collection:
    """BM25 indexes over a set of archives, one text and one image index per language.

    One index per language (rather than per archive) gives every archive of a language the same
    collection statistics, so scores from different archives merge into one ranking. Cached under
    ``<root>/collections/<key>/``, key = sha256 of the members' keys (:func:`~kit.web.zim.identity.archive_key`)
    in member order: newest edition first (ZIM ``Date``), then by file name (the order that breaks
    score ties between archives), so the same set always builds the same index.
    """

    def __init__(self, archives: Sequence[_ZimArchive], root: Path):
        # Member order breaks score ties between archives: the newest edition first (ZIM ``Date``
        # metadata; undated last), then by name (stems are unique: LocalZimWeb).
        self.members = sorted(sorted(archives, key=lambda a: a.stem), key=lambda a: a.date or "", reverse=True)
        key = hashlib.sha256(
            ("\n".join(a.key for a in self.members) + f"\nformat={INDEX_FORMAT}"
             + f"\ncollection={COLLECTION_FORMAT}").encode()
        ).hexdigest()
        self.dir = root / "collections" / key[:16]
        self.languages = sorted({a.language for a in self.members}, key=_lang_key)
        self.indexes: dict[str | None, _LanguageIndex] = {}
        self.searchable: list[_LanguageIndex] = []
        self.heads: list[Heads] = []  # per member: article (path, title), see Heads
        self.ready = False

    @staticmethod
    def _text_schema(tokenizer: str) -> tantivy.Schema:
        sb = tantivy.SchemaBuilder()
        sb.add_unsigned_field("key", stored=False, indexed=False, fast=True)
        # Not stored: the text's one copy is the archive store's (snippets read it there).
        sb.add_text_field("content", stored=False, tokenizer_name=tokenizer, index_option="freq")
        # Exact forms of the non-ASCII words (accents kept): ranks exact-form matches first.
        sb.add_text_field("exact", stored=False, tokenizer_name=f"{tokenizer}_exact",
                          index_option="basic")
        sb.add_text_field("title_key", stored=False, tokenizer_name="raw", index_option="basic")
        return sb.build()

    @staticmethod
    def _image_schema(tokenizer: str) -> tantivy.Schema:
        sb = tantivy.SchemaBuilder()
        sb.add_unsigned_field("key", stored=False, indexed=False, fast=True)
        for name in _IMAGE_FIELDS:
            sb.add_text_field(name, stored=False, tokenizer_name=tokenizer, index_option="freq")
        return sb.build()

    def _counts(self, language: str | None) -> tuple[int, int]:
        members = [a for a in self.members if a.language == language]
        return sum(len(a.articles) for a in members), sum(len(a.images) for a in members)

    def _text_docs(self, language: str | None, analyzer: Analyzer,
                   start: int) -> Iterator[tantivy.Document]:
        """Text documents of ``language``'s members in (member, article) order from the
        ``start``-th on (a resumed build skips what its last commit holds).

        Text is fed folded (:meth:`Analyzer.fold`), with its exact forms in ``exact``. An article
        whose body duplicates an earlier one's (the store's ``aliases``) is an empty document
        that only carries its title key, under its first copy's key: the body is indexed once,
        and a search for the duplicate's title finds the first copy (never both)."""
        for mi, arch in enumerate(self.members):
            if arch.language != language:
                continue
            n = len(arch.articles)
            if start >= n:
                start -= n
                continue
            with arch.store_reads() as store:  # a damaged store: BackendError naming it
                aliases = store.aliases()
            for doc, _path, title, body in arch.iter_full_texts(start):
                title_key = " ".join(analyzer.analyze(title))
                canonical = aliases.get(doc)
                if canonical is not None:
                    tdoc = tantivy.Document(title_key=title_key)
                    tdoc.add_unsigned("key", _key(mi, canonical))
                    yield tdoc
                    continue
                text = f"{title}\n{body}"
                content, exact = analyzer.fold_document(text)
                tdoc = tantivy.Document(content=content, title_key=title_key)
                if exact:
                    tdoc.add_text("exact", exact)
                tdoc.add_unsigned("key", _key(mi, doc))  # kwargs would make it i64
                yield tdoc
            start = 0

    def _image_docs(self, language: str | None, start: int) -> Iterator[tantivy.Document]:
        """Image documents of ``language``'s members in (member, image) order from ``start``;
        their text fields folded like the text index's (:meth:`Analyzer.fold`)."""
        analyzer = text_analyzer(language)
        for mi, arch in enumerate(self.members):
            if arch.language != language:
                continue
            n = len(arch.images)
            if start >= n:
                start -= n
                continue
            for i in range(start, n):
                with arch.store_reads() as store:
                    rec = store.image(i)
                occs = rec.occurrences

                def joined(field: str, occs=occs) -> str:
                    return analyzer.fold("\n".join(dict.fromkeys(o[field] for o in occs
                                                                  if o[field])))

                idoc = tantivy.Document(
                    caption=joined("caption"), alt=joined("alt"), context=joined("context"),
                    fname=analyzer.fold(filename_words(rec.path)),
                    title=joined("page_title"),
                )
                idoc.add_unsigned("key", _key(mi, i))
                yield idoc
            start = 0

    @staticmethod
    def _fill(path: Path, schema: tantivy.Schema, tok: str, analyzer: Analyzer, heap: int,
              docs, total: int, stats: dict) -> None:
        """Index ``docs(start)`` into the tantivy index at ``path`` (created, or a killed build's
        to resume: its last commit's ``num_docs`` documents are the first ones, in the same
        deterministic order), committing every :data:`COMMIT_DOCS` documents."""
        def opened() -> tantivy.Index:
            path.mkdir(exist_ok=True)
            index = tantivy.Index(schema, path=str(path), reuse=(path / "meta.json").exists())
            _register(index, tok, analyzer)
            index.reload()
            return index

        index = opened()
        done = index.searcher().num_docs
        if done > total:
            # Not this collection's work (e.g. left by a kit that built differently): start over.
            log.warning("%s: %d committed documents but the archives have %d; rebuilding it",
                        path, done, total)
            del index
            shutil.rmtree(path)
            index, done = opened(), 0
        stats["resumed_docs"] = stats.get("resumed_docs", 0) + done
        if done == total:
            return
        threads = WRITER_THREADS if (total >= PARALLEL_MIN_DOCS and (os.cpu_count() or 1) > 1
                                     and heap // WRITER_THREADS >= 15_000_000) else 1
        writer = index.writer(heap_size=heap, num_threads=threads)
        writer.garbage_collect_files()  # segments of a killed build's uncommitted work
        pending = 0
        for tdoc in docs(done):
            writer.add_document(tdoc)
            pending += 1
            if pending >= COMMIT_DOCS:
                writer.commit()
                stats["commits"] = stats.get("commits", 0) + 1
                pending = 0
        writer.commit()
        writer.wait_merging_threads()

    def build(self, out: Path) -> dict:
        """Index the members' stores into ``out`` (empty, or a killed build's folder to resume);
        returns the manifest.

        Per language, the text index is filled first, then the image index (one writer at a time:
        peak memory is one writer's fixed heap, :data:`TEXT_HEAP` or :data:`IMAGE_HEAP`, whatever
        the collection size), each committed every :data:`COMMIT_DOCS` documents, so a killed
        build resumes from its last commit and ends equal to an uninterrupted one (same
        documents and keys; results tie-break by key, not by segment layout).
        """
        t0, started = time.perf_counter(), round(time.time(), 3)
        stats: dict = {}
        for language in self.languages:
            lk = _lang_key(language)
            tok = f"kit_{lk}"
            analyzer = text_analyzer(language)
            n_text, n_images = self._counts(language)
            self._fill(out / f"text_{lk}", self._text_schema(tok), tok, analyzer, TEXT_HEAP,
                       lambda start, lang=language, an=analyzer: self._text_docs(lang, an, start),
                       n_text, stats)
            self._fill(out / f"images_{lk}", self._image_schema(tok), tok, analyzer, IMAGE_HEAP,
                       lambda start, lang=language: self._image_docs(lang, start),
                       n_images, stats)
            if n_text <= _KEYMAP_MAX_DOCS:  # stored: loading it reads no document
                text = tantivy.Index.open(str(out / f"text_{lk}"))
                _register(text, tok, analyzer)
                ts = text.searcher()
                _save_keymap(_address_keys(ts, _segment_sizes(out / f"text_{lk}")),
                             out / f"keymap_{lk}.bin")
        for mi, arch in enumerate(self.members):
            self._write_heads(mi, arch, out)
        manifest = {
            "format": INDEX_FORMAT, "collection_format": COLLECTION_FORMAT, "members": [a.key for a in self.members],
            "archives": [a.file.name for a in self.members],
            "languages": [_lang_key(x) for x in self.languages],
            "build_seconds": round(time.perf_counter() - t0, 3), "started_unix": started,
            "resumed_docs": stats.get("resumed_docs", 0), "commits": stats.get("commits", 0),
        }
        sync_files(out)  # the data on disk before the manifest vouches for it
        _write_json_atomic(out / "manifest.json", manifest)
        return manifest

    @staticmethod
    def _write_heads(mi: int, arch: _ZimArchive, out: Path) -> None:
        """``heads_<mi>.bin`` of member ``mi`` (:func:`write_heads`), unless a killed build
        already wrote it (written atomically: a file that opens is complete)."""
        path = out / f"heads_{mi}.bin"
        n = len(arch.articles)
        try:
            Heads(path, n)
            return
        except (OSError, ValueError):
            pass
        with arch.store_reads() as store:
            write_heads(((p, t) for _, p, t, _ in store.iter_articles(_READ_BATCH)), n, path)

    def load(self) -> None:
        """Open the cached indexes; raises on anything missing, stale or corrupt."""
        manifest = json.loads((self.dir / "manifest.json").read_text(encoding="utf-8"))
        if (manifest.get("format") != INDEX_FORMAT
                or manifest.get("collection_format") != COLLECTION_FORMAT
                or manifest.get("members") != [a.key for a in self.members]):
            raise ValueError("collection format or members differ")
        heads = [Heads(self.dir / f"heads_{mi}.bin", len(a.articles))
                 for mi, a in enumerate(self.members)]
        indexes = {}
        for language in self.languages:
            lk = _lang_key(language)
            analyzer = text_analyzer(language)
            text = tantivy.Index.open(str(self.dir / f"text_{lk}"))
            _register(text, f"kit_{lk}", analyzer)
            images = tantivy.Index.open(str(self.dir / f"images_{lk}"))
            _register(images, f"kit_{lk}", analyzer)
            ts, isr = text.searcher(), images.searcher()
            if (ts.num_docs, isr.num_docs) != self._counts(language):
                raise ValueError(f"{lk} index document counts differ from the archives' records")
            indexes[language] = _LanguageIndex(language, analyzer, ts, text.schema, isr,
                                               images.schema)
        for li in indexes.values():
            li.n_docs = li.text_searcher.num_docs
            if li.n_docs <= _KEYMAP_MAX_DOCS:
                li.keymap = _load_keymap(self.dir / f"keymap_{_lang_key(li.language)}.bin",
                                         li.text_searcher)
        # Largest language first; the others are probed for the query terms before a search.
        self.searchable = sorted((li for li in indexes.values() if li.n_docs),
                                 key=lambda li: -li.n_docs)
        for i, li in enumerate(self.searchable):
            li.check_terms = i > 0
        self.indexes = indexes
        self.heads = heads
        self.ready = True

    def ensure_ready(self, build_fn=None) -> bool:
        """Load the cached indexes, building them when missing or corrupt; True if built."""
        if self.ready:
            return False
        return _load_or_build(self.dir, self.load, build_fn or self.build,
                              ", ".join(a.file.name for a in self.members),
                              resumable=build_fn is None)
