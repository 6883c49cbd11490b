"""BM25 indexes (tantivy) over a set of archives: one text and one image index per language, cached
under ``<index root>/collections/<key>/``, and the score normalisation (:func:`bm25_bound`) that
merges several languages into one ranking."""

from __future__ import annotations

import array
import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import tantivy

from kit.web.zim.cache import INDEX_FORMAT, _load_or_build, _write_json_atomic
from kit.web.zim.text import filename_words, text_analyzer

if TYPE_CHECKING:
    from kit.web.zim.archive import _ZimArchive

#: Boost of the exact-title clause: its BM25 score (about ln N on a one-token field) times this
#: exceeds any content score, so exact title matches rank first, among themselves by content.
TITLE_BOOST = 100.0

#: Fields of the image index and their BM25 boosts (caption and alt text weigh most).
_IMAGE_FIELDS = {"caption": 2.0, "alt": 2.0, "fname": 1.5, "title": 1.0, "context": 0.5}


@dataclass
class _LanguageIndex:
    """The tantivy indexes of one language of a collection (BM25 statistics are per language)."""

    language: str | None
    analyzer: tantivy.TextAnalyzer
    text_searcher: tantivy.Searcher
    text_schema: tantivy.Schema
    image_searcher: tantivy.Searcher
    image_schema: tantivy.Schema
    n_docs: int = 0  # articles in the text index
    check_terms: bool = False  # probe term presence before searching (secondary languages)
    keymap: list | None = None  # [segment][doc] -> key (see _address_keys), small indexes only

    def text_query(self, tokens: list[str]) -> tantivy.Query:
        """OR of the analyzed query terms over the content (built directly from tokens, so no
        query syntax can fail), plus an exact-title clause that puts the article whose whole
        analyzed title equals the analyzed query first (Wikipedia's "go to title" behaviour:
        BM25 alone ranks the long "Ray Charles" article below short pages that repeat his name)."""
        schema = self.text_schema
        clauses = [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "content", t))
                   for t in tokens]
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


#: Up to this many documents, a language index keeps its (segment, doc) -> key table in memory
#: (8 bytes a document): a list look-up per hit instead of a fast-field read per query.
_KEYMAP_MAX_DOCS = 1_000_000


def _address_keys(searcher: tantivy.Searcher, n_docs: int) -> list[array.array]:
    """Table ``[segment_ord][doc] -> key`` of every document of an (immutable) index."""
    hits = searcher.search(tantivy.Query.all_query(), limit=max(1, n_docs), count=False).hits
    addrs = [a for _, a in hits]
    keys = searcher.fast_field_values("key", addrs)
    sizes = [0] * searcher.num_segments
    for a in addrs:
        sizes[a.segment_ord] = max(sizes[a.segment_ord], a.doc + 1)
    table = [array.array("Q", bytes(8 * n)) for n in sizes]
    for a, key in zip(addrs, keys, strict=True):
        table[a.segment_ord][a.doc] = key
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


def _key(member: int, item: int) -> int:
    """Fast-field value naming (archive member, article or image) in a collection index."""
    return (member << 40) | item


def _lang_key(language: str | None) -> str:
    return language or "none"


class _Collection:
    """BM25 indexes over a set of archives, one text and one image index per language.

    One index per language (rather than per archive) gives every archive of a language the same
    collection statistics, so scores from different archives merge into one ranking. Cached under
    ``<root>/collections/<key>/``, key = sha256 of the members' sha256s; members are ordered by
    sha256 so the same set always builds the same index.
    """

    def __init__(self, archives: Sequence[_ZimArchive], root: Path):
        self.members = sorted(archives, key=lambda a: a.sha256)
        key = hashlib.sha256(
            ("\n".join(a.sha256 for a in self.members) + f"\nformat={INDEX_FORMAT}").encode()
        ).hexdigest()
        self.dir = root / "collections" / key[:16]
        self.languages = sorted({a.language for a in self.members}, key=_lang_key)
        self.indexes: dict[str | None, _LanguageIndex] = {}
        self.searchable: list[_LanguageIndex] = []
        self.ready = False

    @staticmethod
    def _text_schema(tokenizer: str) -> tantivy.Schema:
        sb = tantivy.SchemaBuilder()
        sb.add_unsigned_field("key", stored=False, indexed=False, fast=True)
        # Not stored: the text's one copy is the archive store's (snippets read it there).
        sb.add_text_field("content", stored=False, tokenizer_name=tokenizer, index_option="freq")
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

    def build(self, out: Path) -> dict:
        """Index the members' cached corpora and image records into ``out``; returns the
        manifest."""
        t0 = time.perf_counter()
        for language in self.languages:
            lk = _lang_key(language)
            tok = f"kit_{lk}"
            analyzer = text_analyzer(language)
            (out / f"text_{lk}").mkdir()
            (out / f"images_{lk}").mkdir()
            text = tantivy.Index(self._text_schema(tok), path=str(out / f"text_{lk}"), reuse=False)
            text.register_tokenizer(tok, analyzer)
            images = tantivy.Index(self._image_schema(tok), path=str(out / f"images_{lk}"),
                                   reuse=False)
            images.register_tokenizer(tok, analyzer)
            tw = text.writer(heap_size=128_000_000, num_threads=1)
            iw = images.writer(heap_size=64_000_000, num_threads=1)
            for mi, arch in enumerate(self.members):
                if arch.language != language:
                    continue
                for doc, _path, title, body in arch.store.iter_articles():
                    tdoc = tantivy.Document(content=f"{title}\n{body}",
                                            title_key=" ".join(analyzer.analyze(title)))
                    tdoc.add_unsigned("key", _key(mi, doc))  # kwargs would make it i64
                    tw.add_document(tdoc)
                for i, rec in enumerate(arch.images):
                    occs = rec.occurrences

                    def joined(field: str, occs=occs) -> str:
                        return "\n".join(dict.fromkeys(o[field] for o in occs if o[field]))

                    idoc = tantivy.Document(
                        caption=joined("caption"), alt=joined("alt"), context=joined("context"),
                        fname=filename_words(rec.path),
                        title="\n".join(dict.fromkeys(arch.articles[o["doc"]]["title"]
                                                      for o in occs)),
                    )
                    idoc.add_unsigned("key", _key(mi, i))
                    iw.add_document(idoc)
            for w in (tw, iw):
                w.commit()
                w.wait_merging_threads()
            text.reload()
            ts = text.searcher()
            if ts.num_docs <= _KEYMAP_MAX_DOCS:  # stored: loading it reads no document
                _save_keymap(_address_keys(ts, ts.num_docs), out / f"keymap_{lk}.bin")
        manifest = {
            "format": INDEX_FORMAT, "members": [a.sha256 for a in self.members],
            "archives": [a.file.name for a in self.members],
            "languages": [_lang_key(x) for x in self.languages],
            "build_seconds": round(time.perf_counter() - t0, 3),
        }
        _write_json_atomic(out / "manifest.json", manifest)
        return manifest

    def load(self) -> None:
        """Open the cached indexes; raises on anything missing, stale or corrupt."""
        manifest = json.loads((self.dir / "manifest.json").read_text(encoding="utf-8"))
        if (manifest.get("format") != INDEX_FORMAT
                or manifest.get("members") != [a.sha256 for a in self.members]):
            raise ValueError("collection format or members differ")
        indexes = {}
        for language in self.languages:
            lk = _lang_key(language)
            analyzer = text_analyzer(language)
            text = tantivy.Index.open(str(self.dir / f"text_{lk}"))
            text.register_tokenizer(f"kit_{lk}", analyzer)
            images = tantivy.Index.open(str(self.dir / f"images_{lk}"))
            images.register_tokenizer(f"kit_{lk}", analyzer)
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
        self.ready = True

    def ensure_ready(self, build_fn=None) -> bool:
        """Load the cached indexes, building them when missing or corrupt; True if built."""
        if self.ready:
            return False
        return _load_or_build(self.dir, self.load, build_fn or self.build,
                              ", ".join(a.file.name for a in self.members))
