"""The local web's search backend, :class:`LocalZimWeb`: the four operations of docs/contracts.md
"Search backend" (weagent_mmsearch §3, Table 4) over one or more ZIM archives, with URL resolution
(``zim://`` URLs, bare entry paths, Wikipedia article URLs). Indexes come from
:mod:`kit.web.zim.archive` and :mod:`kit.web.zim.index`; see docs/local_web.md."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from kit.paths import cache_dir
from kit.types import BackendError, ImageHit, KnowledgeGraph, Page, ReverseImageResult, SearchHit
from kit.web.text_clean import normalize_text
from kit.web.zim.archive import ZimError, _ZimArchive
from kit.web.zim.fulltext import hit_snippet
from kit.web.zim.hash_index import archive_hash_index, merge_matches
from kit.web.zim.html import _parse_html, page_title
from kit.web.zim.images import MATCH_DISTANCE, RASTER_MIMES, STRONG_DISTANCE, query_hashes, query_image
from kit.web.zim.index import (
    _IMAGE_FIELDS,
    _ITEM_MASK,
    EXACT_BOOST,
    _Collection,
    _LanguageIndex,
    bm25_bound,
)
from kit.web.zim.markdown import _md_url, render_article
from kit.web.zim.readahead import READ_AHEAD, advise_now
from kit.web.zim.resolve import check_unicode, resolve_entry
from kit.web.zim.snippets import SNIPPET_CHARS, snippet_keys
from kit.web.zim.store import _ImageRecord
from kit.web.zim.text import Analyzer, _clip, filename_words

#: Pages read an image hit (its first by (position, doc): the pages it leads first; see
#: :meth:`~kit.web.zim.store.ArchiveStore.images_with_pages`): image search picks the hit's page
#: among these (a capped sample: on an image shown on more pages, the page that best explains the
#: query may be one not read) and reverse search lists pages among these, exactly (issue 32: an icon or flag is on 10^4-10^5
#: Wikipedia pages; reading and analyzing all of them made a search's cost grow with them). On
#: the shared archives an image is on at most 3 pages, on generated ones ~1 to ~83.
OCC_SAMPLE = 64


def _top_past_ties(searcher, query, num: int, n_docs: int) -> list:
    """tantivy's top ``num`` hits [(score, DocAddress)], extended past every hit tied with the
    ``num``-th score: which of several tied documents tantivy keeps at the cut follows its segment
    layout (a multi-threaded or resumed build differs), so the caller sorts ties by key and cuts.
    The first search asks for ``num + 1`` hits: one search a query unless the ``num``-th ties with
    the next (asking for ``num`` always needed a second one to see past the cut)."""
    limit = min(num + 1, n_docs)
    while True:
        hits = searcher.search(query, limit=limit, count=False).hits
        if len(hits) < limit or limit >= n_docs or hits[-1][0] != hits[num - 1][0]:
            return hits
        limit = min(2 * limit, n_docs)

class LocalZimWeb:
    """Search backend over local Kiwix ZIM archives (implements :class:`kit.types.SearchBackend`).

    Args:
        paths: one ZIM path or a sequence of them. Archive file stems must be distinct (they name
            the archive in ``zim://<stem>/<path>`` URLs).
        index_dir: root folder of the index caches (default ``kit.paths.cache_dir()/zim_index``);
            each archive's extract lives in ``<root>/<key[:16]>-v<INDEX_FORMAT>/`` (the archive's
            key: :func:`~kit.web.zim.identity.archive_key`), the BM25 indexes of this set of archives in ``<root>/collections/<key>/``.
        keep_links: keep hyperlinks in fetched Markdown (internal links become ``zim://`` URLs).
            Off by default: pages are read by a model under a 5,000-character budget per page
            (weagent_mmsearch Table 5) and every article is reachable through search.
        read_ahead: after each search, read the hits' pages into the page cache in the background;
            image and reverse search ask for their images' bytes together.
        keep_text: keep each archive's ``tails.sqlite`` (long texts beyond the stored lead,
            :mod:`kit.web.zim.tails`) once the BM25 indexes are built; off (~1.3 KB an article of
            Wikipedia-weight pages), a new collection, :meth:`corpus` and the snippets of hits
            whose query terms are not in a long body's lead extract those pages again.

    Raises:
        ZimError: no paths, a missing/unreadable/non-ZIM file, or two archives with the same stem.

    Indexes load (or build, seconds on the shared archives) on first use or on
    :meth:`ensure_ready`. All methods are safe to call from concurrent episodes (asyncio tasks or
    threads): the indexes are immutable once loaded and archive reads are serialised per archive.
    """

    name = "zim"

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike],
                 index_dir: str | os.PathLike | None = None, *, keep_links: bool = False,
                 read_ahead: bool = True, keep_text: bool = False):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        paths = [Path(p).expanduser() for p in paths]
        if not paths:
            raise ZimError("no ZIM archives given")
        root = Path(index_dir).expanduser() if index_dir is not None else cache_dir() / "zim_index"
        self.index_root = root
        self.keep_links = keep_links
        self.keep_text = keep_text
        #: after each search, the hits' pages are read into the page cache in the background
        #: (:mod:`kit.web.zim.readahead`: the fetch that usually follows reads memory, not disk)
        self.read_ahead = read_ahead
        self.archives: list[_ZimArchive] = []
        seen: dict[str, Path] = {}
        for p in paths:
            if p.stem in seen:
                raise ZimError(f"two archives share the stem {p.stem!r}: {seen[p.stem]} and {p}")
            seen[p.stem] = p
            self.archives.append(_ZimArchive(p, root))
        self._by_stem = {a.stem: a for a in self.archives}
        self.collection = _Collection(self.archives, root)
        self._ready = False
        self._ready_lock = threading.Lock()

    # ---- readiness -------------------------------------------------------------------------------
    def ensure_ready(self) -> list[str]:
        """Load every archive's cached data and the BM25 indexes, building what is missing.

        Returns the stems of the archives that were extracted now (empty when all came from the
        cache), plus ``"<collection>"`` when the BM25 indexes were (re)built.
        """
        if self._ready:
            return []
        with self._ready_lock:
            if self._ready:
                return []
            built = [a.stem for a in self.archives if a.ensure_ready()]
            if self.collection.ensure_ready():
                built.append("<collection>")
            if not self.keep_text:  # the BM25 indexes hold what the full texts were kept for
                for a in self.archives:
                    a.drop_tails()
            self._ready = True
            return built

    async def _aready(self) -> None:
        if not self._ready:
            await asyncio.to_thread(self.ensure_ready)

    def analyzer_for(self, stem: str) -> Analyzer:
        """The text analyzer used for archive ``stem`` (for baselines that must tokenize alike:
        ``.analyze(text)``, folding included)."""
        return self._archive(stem).analyzer

    def corpus(self, text: bool = True) -> Iterator[tuple[str, str | None, str, str, str]]:
        """(archive stem, language, entry path, title, indexed text) of every indexed article (index
        built if needed); long texts from the tails file or, once dropped (``keep_text=False``), the
        archive re-extracted. ``text=False``: the title line alone, from the store only."""
        self.ensure_ready()
        for arch in self.archives:
            for _, path, title, body in arch.iter_corpus(text):
                yield arch.stem, arch.language, path, title, f"{title}\n{body}"

    def _archive(self, stem: str) -> _ZimArchive:
        try:
            return self._by_stem[stem]
        except KeyError:
            raise BackendError(
                f"not found: no archive named {stem!r} (have {sorted(self._by_stem)})",
                retryable=False) from None

    @staticmethod
    def _check_num(num: int) -> int:
        if isinstance(num, bool) or not isinstance(num, int):
            raise BackendError(f"num must be an integer, got {num!r}")
        if num < 1:
            raise BackendError(f"num must be at least 1, got {num}")
        return num

    @staticmethod
    def _check_query(query: str) -> str:
        """``query`` normalized like indexed text (NFC, no invisible characters); raises
        BackendError for a non-string or empty query."""
        if not isinstance(query, str):
            raise BackendError(f"query must be a string, got {type(query).__name__}")
        check_unicode(query, "query")
        query = normalize_text(query)
        if not query.strip():
            raise BackendError("empty query")
        return query

    # ---- web search ------------------------------------------------------------------------------
    def _rank(self, query: str, num: int) -> list[tuple[float, int, _LanguageIndex, object]]:
        """Merged top ``num`` over the language indexes: (-score, key, language index, address),
        sorted by score, then key (= archive member, then document: a deterministic tie-break).

        Scores are each index's BM25 divided by :func:`bm25_bound` of the query in that index (see
        there): comparable across languages, same order within one. Exact-form clauses
        (:meth:`_LanguageIndex.text_query`) rank exact forms first. A duplicate article (an
        alias: its body indexed once, under its first copy) shares its first copy's key, and
        each key is returned once, at its best score."""
        merged: list = []
        for li in self.collection.searchable:
            tokens = li.analyzer.analyze(query)
            if not tokens:
                continue
            searcher = li.text_searcher
            dfs = [searcher.doc_freq("content", t) for t in tokens]
            # Secondary languages: skip an index that has none of the terms (a dictionary look-up
            # per term costs far less than a search).
            if li.check_terms and not any(dfs):
                continue
            # Aliases match by title only: at most that title's count of extra hits is a repeat.
            extra = searcher.doc_freq("title_key", " ".join(tokens))
            exact = li.analyzer.exact_terms(query)
            hits = _top_past_ties(searcher, li.text_query(tokens, exact), num + extra, li.n_docs)
            if not hits:
                continue
            bound = bm25_bound(dfs, li.n_docs)
            if exact:  # the exact-form clauses' share, so a content score stays within 0..1
                bound += EXACT_BOOST * bm25_bound(
                    [searcher.doc_freq("exact", t) for t in dict.fromkeys(exact)], li.n_docs)
            scale = 1.0 / bound
            hits = [(score * scale, a) for score, a in hits]
            keymap = li.keymap
            if keymap is not None:
                merged.extend((-score, keymap[a.segment_ord][a.doc], li, a) for score, a in hits)
            else:
                keys = searcher.fast_field_values("key", [a for _, a in hits])
                merged.extend((-score, key, li, a)
                              for (score, a), key in zip(hits, keys, strict=True))
        merged.sort(key=lambda t: (t[0], t[1]))  # merge languages; ties by key, not by segment layout
        seen: set[int] = set()
        unique = []
        for hit in merged:
            if hit[1] not in seen:
                seen.add(hit[1])
                unique.append(hit)
        return unique[:num]

    def rank_sync(self, query: str, num: int) -> list[tuple[str, str, float]]:
        """Ranking only: top ``num`` (archive stem, entry path, score) over all archives.

        The score is the document's BM25 in its language index divided by :func:`bm25_bound` of
        the query there (comparable across languages; the BM25 order within a language). Archives
        of the same language share collection statistics; ties break by archive (newest edition first, then by file name),
        then document order. Paths come from the collection's heads table
        (:class:`~kit.web.zim.index.Heads`): no record block is read. Raises like
        :meth:`search_sync` (a damaged heads table: BackendError naming the folder to delete).
        """
        query = self._check_query(query)
        self._check_num(num)
        self.ensure_ready()
        ranked = self._rank(query, num)
        self._check_members({key >> 40 for _, key, _, _ in ranked})
        members, heads = self.collection.members, self.collection.heads
        try:  # the collection's heads table: no record block is decompressed
            return [(members[key >> 40].stem, heads[key >> 40].get(key & _ITEM_MASK)[0], -s)
                    for s, key, _, _ in ranked]
        except ValueError as exc:
            raise BackendError(f"{exc}: the BM25 index is damaged; delete "
                               f"{self.collection.dir} to rebuild it") from exc

    def _hit_records(self, ranked: list) -> dict[int, dict]:
        """{member: {article: record}} of ``_rank``'s hits, each member's read in one store
        statement; raises BackendError when a store lacks them or is damaged."""
        docs: dict[int, list[int]] = {}
        for _, key, _, _ in ranked:
            docs.setdefault(key >> 40, []).append(key & _ITEM_MASK)
        members = self.collection.members
        self._check_members(docs)
        out = {}
        for m, ds in docs.items():
            with members[m].store_reads() as store:
                out[m] = store.records(ds)
        return out

    def search_sync(self, query: str, num: int) -> list[SearchHit]:
        """Web search (Table 4 ``web_search``): top ``num`` articles by BM25 over title + text.

        BM25 (tantivy: k1 = 1.2, b = 0.75) with the query (NFC-normalized) as an OR of its
        analyzed terms, so any text is a valid query; several language indexes merge on
        :func:`bm25_bound`-normalized scores. URLs are percent-encoded (:mod:`kit.web.urls`).
        Returns hits with title, ``zim://`` URL, a query-relevant snippet
        (at most 250 characters around the earliest densest cluster of query words, bounded work
        per hit: :func:`~kit.web.zim.snippets.make_snippet`) and no ``date`` (the archive's
        snapshot date is not when a page was published). A query with no indexable word (only
        punctuation or stop words) returns ``[]``.

        Raises:
            BackendError: empty/whitespace query, non-string query, ``num`` < 1; a store that
                disagrees with the index or is damaged (:meth:`_ZimArchive.store_reads`: names
                the folder to delete).
        """
        query = self._check_query(query)
        self._check_num(num)
        self.ensure_ready()
        ranked = self._rank(query, num)
        members = self.collection.members
        records = self._hit_records(ranked)
        out = []
        keys_by_lang: dict[int, list[tuple[str, str]]] = {}
        ahead: dict[str, tuple[_ZimArchive, list[str]]] = {}  # the hits' pages, read ahead for a fetch
        for _, key, li, _addr in ranked:
            arch = members[key >> 40]
            keys = keys_by_lang.get(id(li))
            if keys is None:
                keys = keys_by_lang[id(li)] = snippet_keys(query, li.analyzer)
            # the store's copy of the text's lead (the index does not store it); the full text
            # only when no query term is in the lead of a long body
            doc = key & _ITEM_MASK
            path, title, _, prefix = records[key >> 40][doc]
            snippet = hit_snippet(arch, doc, prefix, keys, li.analyzer)
            out.append(SearchHit(title=title, url=arch.url(path), snippet=snippet))
            ahead.setdefault(arch.stem, (arch, []))[1].append(path)
        for arch, paths in ahead.values() if self.read_ahead else ():
            READ_AHEAD.pages(arch, paths)
        return out

    async def search(self, query: str, num: int) -> list[SearchHit]:
        """Async :meth:`search_sync`, run in a worker thread so a slow query never blocks other episodes
        or the harness timeouts."""
        await self._aready()
        return await asyncio.to_thread(self.search_sync, query, num)

    # ---- text-to-image search --------------------------------------------------------------------
    def _image_hit(self, arch: _ZimArchive, rec: _ImageRecord, occ: dict) -> ImageHit:
        """``rec`` with its bytes, shown on the page of occurrence ``occ`` (an occurrence of
        :meth:`~kit.web.zim.store.ArchiveStore.images_with_pages` with its page's path, set by
        :meth:`_add_pages`)."""
        entry = arch.entry(rec.path)
        if entry is None:
            raise BackendError(f"image {rec.path} vanished from {arch.file.name}")
        mime, data = arch.read(entry)
        return ImageHit(title=occ["page_title"], image_url=arch.url(rec.path),
                        page_url=arch.url(occ["page_path"]), domain=arch.stem,
                        caption=occ["caption"] or occ["alt"] or filename_words(rec.path),
                        content=data, mime=mime)

    def _check_members(self, members) -> None:
        """Raise BackendError when the collection index names an archive it does not hold (its
        keys are damaged): the folder to delete is the collection's, not an archive's."""
        bad = [m for m in members if not 0 <= m < len(self.collection.members)]
        if bad:
            raise BackendError(f"the BM25 index names archive member {bad[0]} of "
                               f"{len(self.collection.members)}: it is damaged; delete "
                               f"{self.collection.dir} to rebuild it")

    @staticmethod
    def _records(arch: _ZimArchive, ids, sample: int | None = None) -> dict[int, _ImageRecord]:
        """Image records of ``ids`` with their first ``sample`` (default :data:`OCC_SAMPLE`)
        occurrences (page order) and those pages' titles (no page's block read): one store
        statement per 500 ids, whatever the pages an image is on. Raises BackendError when the
        store disagrees or is damaged."""
        if not ids:
            return {}
        with arch.store_reads() as store:
            return store.images_with_pages(ids, sample=OCC_SAMPLE if sample is None else sample)

    def _add_pages(self, arch: _ZimArchive, occurrences: list[dict], first: Sequence[dict] = ()) -> None:
        """``page_path`` of each of ``occurrences`` (their ``page_title`` is already there) from the
        collection's heads table, no record block read (issue 32: an image on a page costs no
        decompression); ``page_first`` of each of ``first`` too, their blocks read in one statement
        (:meth:`ArchiveStore.add_pages`). Raises BackendError naming the folder to delete when the
        heads table is damaged, or like :meth:`_records`."""
        heads = self.collection.heads[self.collection.members.index(arch)]
        try:
            for o in occurrences:
                o["page_path"] = heads.get(o["doc"])[0]
        except ValueError as exc:
            raise BackendError(f"{exc}: the BM25 index is damaged; delete "
                               f"{self.collection.dir} to rebuild it") from exc
        if first:
            with arch.store_reads() as store:
                store.add_pages(list(first))

    def image_search_sync(self, query: str, num: int) -> list[ImageHit]:
        """Text-to-image search (Table 4 ``web_search_for_image``).

        BM25 over each image's caption and alt text (boost 2), file-name words (1.5), page titles
        (1) and surrounding context (section heading + next paragraph, 0.5). Each image appears
        once (deduplicated by entry path); its page is the one whose caption, alt text and title
        share most words with the query, among the image's first :data:`OCC_SAMPLE` pages by
        (position, doc) (so the cost does not grow with the pages that show it). Several language indexes merge on scores divided by the
        query's :func:`bm25_bound` summed over the weighted fields. Hits carry the image bytes
        (read ahead together: :func:`~kit.web.zim.readahead.advise_now`). Raises like :meth:`search_sync`.
        """
        query = self._check_query(query)
        self._check_num(num)
        self.ensure_ready()
        merged = []
        for li in self.collection.indexes.values():
            q = li.image_query(query)
            if q is None or li.image_searcher.num_docs == 0:
                continue
            isr = li.image_searcher
            res = isr.search(q, limit=min(num, isr.num_docs), count=False)
            # Comparable across language indexes, as in _rank: share of the query's bound.
            tokens = li.analyzer.analyze(query)
            scale = 1.0 / sum(boost * bm25_bound([isr.doc_freq(name, t) for t in tokens],
                                                 isr.num_docs)
                              for name, boost in _IMAGE_FIELDS.items())
            keys = isr.fast_field_values("key", [addr for _, addr in res.hits])
            for (score, _), key in zip(res.hits, keys, strict=True):
                merged.append((-float(score) * scale, key >> 40, key & _ITEM_MASK))
        merged.sort()
        top = merged[:num]
        self._check_members({m for _, m, _ in top})
        recs = {mi: self._records(self.collection.members[mi], [i for _, m, i in top if m == mi])
                for mi in {m for _, m, _ in top}}
        for mi, rs in recs.items() if self.read_ahead else ():  # the images' bytes, read together
            advise_now(self.collection.members[mi], [r.path for r in rs.values()])
        shown = []
        for _, mi, idx in top:
            arch, rec = self.collection.members[mi], recs[mi][idx]
            shown.append((mi, rec, _best_occurrence(arch.analyzer, query, rec.occurrences)))
        for mi in recs:  # only the pages shown are read (their blocks), one statement an archive
            self._add_pages(self.collection.members[mi], [o for m, _, o in shown if m == mi])
        return [self._image_hit(self.collection.members[mi], rec, occ) for mi, rec, occ in shown]

    async def image_search(self, query: str, num: int) -> list[ImageHit]:
        """Async :meth:`image_search_sync`."""
        await self._aready()
        return await asyncio.to_thread(self.image_search_sync, query, num)

    # ---- reverse image search --------------------------------------------------------------------
    def reverse_image_search_sync(self, image: bytes, num: int) -> ReverseImageResult:
        """Reverse image search (Table 4 ``web_search_based_on_image``) by perceptual hashing.

        The query's pHash and dHash (:func:`~kit.web.zim.images.query_hashes`, the indexed images'
        resampling) are compared with those of every indexed image (and of its
        5% and 10% center crops); distance = summed Hamming distance (0..128) of the closest
        variant. Images within :data:`MATCH_DISTANCE` are matches, found through each archive's
        multi-index hash (:mod:`kit.web.zim.hash_index`: exact, sublinear; built on the first
        reverse search and stored beside the archive's extract). ``pages``: the pages showing a
        match, closest first (ties: lead image first, then document order), at most ``num``, an
        image's pages taken among its first ``max(num, OCC_SAMPLE)`` by (position, doc), which
        holds its first ``num`` exactly (the cost does not grow with the pages that show a picture);
        faiss runs single-threaded for the query (:func:`~kit.web.zim.hash_index.faiss_threads`);
        ``thumbnails``: the matched images with bytes (read ahead together), at most ``num``;
        ``knowledge_graph``: the best page's title and first sentence when the best distance is
        within :data:`STRONG_DISTANCE`. No match gives an empty result.

        Raises:
            RequestRejected: bytes that are empty, not an image, corrupt, truncated, over
                ``PIL.Image.MAX_IMAGE_PIXELS``, an image too small to search by, or one without spatial
                structure (:func:`kit.images.has_structure`: a flat colour matches every flat image).
            BackendError: ``num`` < 1.
        """
        self._check_num(num)
        img = query_image(image)
        self.ensure_ready()
        matches = self._hash_matches(*query_hashes(img))
        recs: dict[int, dict[int, _ImageRecord]] = {}  # archive -> image -> record, as the steps read them
        shown = self._ranked_pages(matches, num, recs)
        thumb_occs = []
        for _dist, ai, idx in matches[:num]:
            rec = recs[ai][idx]
            thumb_occs.append((ai, rec, min(rec.occurrences,
                                            key=lambda o: (o.get("position", 0), o["doc"]))))
        for ai in {a for a, _, _ in thumb_occs} if self.read_ahead else ():  # bytes read together
            advise_now(self.archives[ai], [rec.path for a, rec, _ in thumb_occs if a == ai])
        strong = bool(shown) and shown[0][0][0] <= STRONG_DISTANCE  # a knowledge graph from the best page
        for ai in {k[2] for k, _ in shown} | {ai for ai, _, _ in thumb_occs}:
            # a page's first sentence is read (its block) only where it is shown: no caption, or the graph
            self._add_pages(self.archives[ai], [o for k, o in shown if k[2] == ai]
                            + [o for a, _, o in thumb_occs if a == ai],
                            first=[o for j, (k, o) in enumerate(shown)
                                   if k[2] == ai and (not o["caption"] or (j == 0 and strong))])
        pages = []
        for (_, _, ai, _), occ in shown:
            arch = self.archives[ai]
            snippet = occ["caption"] or occ["page_first"]
            pages.append(SearchHit(title=occ["page_title"], url=arch.url(occ["page_path"]),
                                   snippet=_clip(snippet, SNIPPET_CHARS)))
        kg = None
        if strong:
            (_, _, ai, _), occ = shown[0]
            kg = KnowledgeGraph(title=occ["page_title"], description=occ["page_first"],
                                url=self.archives[ai].url(occ["page_path"]))
        thumbs = [self._image_hit(self.archives[ai], rec, occ) for ai, rec, occ in thumb_occs]
        return ReverseImageResult(pages=pages, knowledge_graph=kg, thumbnails=thumbs)

    def _hash_matches(self, ph, dh) -> list[tuple[int, int, int]]:
        """Step of :meth:`reverse_image_search_sync`: every indexed image within :data:`MATCH_DISTANCE` of the
        query's hashes, as ``(distance, archive index, image index)``, closest first."""
        # Multi-index hash (kit.web.zim.hash_index): exactly the linear scan's matches.
        return merge_matches([(ai, *archive_hash_index(arch, MATCH_DISTANCE).search(ph, dh, MATCH_DISTANCE))
                              for ai, arch in enumerate(self.archives) if len(arch.hashes)])

    def _ranked_pages(self, matches: list[tuple[int, int, int]], num: int,
                      recs: dict[int, dict[int, _ImageRecord]]) -> list[tuple[tuple, dict]]:
        """Step of :meth:`reverse_image_search_sync`: the first ``num`` pages showing a match, as
        ``((distance, position, archive, document), occurrence)``; the records read go into ``recs``.

        Pages are ordered by (distance, position, archive, document): once a distance's matches are in and
        ``num`` pages and matches are held, no later (farther) match can place a page among the first ``num``,
        so their records are not read (a common picture has near-duplicates by the thousand). Only the pages
        shown are read (their blocks)."""
        ranked: list[tuple[tuple, dict]] = []
        seen_pages: set[tuple[int, int]] = set()
        done = 0
        while done < len(matches) and (len(ranked) < num or done < num):
            d0 = matches[done][0]
            end = done
            while end < len(matches) and matches[end][0] == d0:
                end += 1
            group = matches[done:end]
            for ai in {a for _, a, _ in group}:
                recs.setdefault(ai, {}).update(self._records(
                    self.archives[ai], [i for _, a, i in group if a == ai],
                    max(num, OCC_SAMPLE)))
            for dist, ai, idx in group:
                for occ in sorted(recs[ai][idx].occurrences,
                                  key=lambda o: (o.get("position", 0), o["doc"])):
                    key = (ai, occ["doc"])
                    if key in seen_pages:
                        continue
                    seen_pages.add(key)
                    ranked.append(((dist, occ.get("position", 0), ai, occ["doc"]), occ))
            done = end
        ranked.sort(key=lambda t: t[0])
        return ranked[:num]

    async def reverse_image_search(self, image: bytes, num: int) -> ReverseImageResult:
        """Async :meth:`reverse_image_search_sync`."""
        await self._aready()
        return await asyncio.to_thread(self.reverse_image_search_sync, image, num)

    # ---- fetch -----------------------------------------------------------------------------------
    def resolve_url(self, url: str):
        """(archive, final entry) for a ``zim://`` URL, a bare entry path or a Wikipedia URL.

        Raises:
            BackendError: unknown archive or entry ("not found", not retryable); a web URL that
                is not a Wikipedia article present in the archives; an archive-internal entry
                (metadata ``M/Counter``, layout ``-/favicon``, search index: "not a page or
                image", see :meth:`_ZimArchive.non_page_kind`).
        """
        arch, entry = resolve_entry(self, url)
        kind = arch.non_page_kind(entry.path)
        if kind is not None:
            raise BackendError(f"cannot fetch {url.strip()}: {entry.path} is archive {kind} of "
                               f"{arch.file.name}, not a page or image")
        return arch, entry

    def fetch_sync(self, url: str) -> Page:
        """Fetch a page (Table 4 ``web_extract``) as Markdown with its raster images.

        Accepts ``zim://<stem>/<path>``, a bare entry path, or ``https://<lang>.wikipedia.org/wiki/
        <Title>`` (mapped to an archive article by title). Redirects are followed; ``Page.url`` is
        the final ``zim://`` URL. HTML articles become Markdown (ATX headings, lists, tables,
        ``![alt](zim://...)`` image placements; navigation and citation apparatus removed) and
        ``Page.images`` lists the page's non-decorative raster images with bytes, in page order,
        each once. An image URL returns a one-image page; other text returns its text.

        Raises:
            BackendError: unknown or non-zim URL (see :meth:`resolve_url`); unsupported content
                type.
        """
        arch, entry = self.resolve_url(url)
        mime, data = arch.read(entry)
        page_url = arch.url(entry.path)
        title = page_title(entry.title, None, entry.path)
        if mime in RASTER_MIMES:
            hit = ImageHit(title=title, image_url=page_url, page_url=page_url, domain=arch.stem,
                           caption=filename_words(entry.path), content=data, mime=mime)
            return Page(url=page_url, title=title, markdown=f"![{title}]({_md_url(page_url)})",
                        images=[hit], content_type=mime)
        if mime != "text/html":
            if mime.startswith("text/"):
                return Page(url=page_url, title=title,
                            markdown=data.decode("utf-8", "replace"), content_type=mime)
            raise BackendError(f"cannot render {url}: content type {mime} is not a page or image")
        try:
            root = _parse_html(data)
        except ValueError as exc:
            raise BackendError(f"cannot render {url}: {exc}") from exc
        title = page_title(entry.title, root, entry.path)
        return render_article(arch, entry, root, title, page_url, self.keep_links)

    async def fetch(self, url: str) -> Page:
        """Async :meth:`fetch_sync` (Wikipedia URLs may need the title table: loaded off-loop)."""
        await self._aready()
        return await asyncio.to_thread(self.fetch_sync, url)


def _best_occurrence(analyzer: Analyzer, query: str, occurrences: list[dict]) -> dict:
    """Step of :meth:`LocalZimWeb.image_search_sync`: the occurrence whose caption, alt text and
    page title share most analyzed words with ``query``, then the lowest (position, doc): the
    page where the image is the lead one. Each distinct text is analyzed once (an icon's alt
    text repeats on its pages). ``occurrences``: non-empty, as ``images_with_pages`` gives them."""
    qtok = set(analyzer.analyze(query))
    shared: dict[str, int] = {}

    def key(o: dict) -> tuple[int, int, int]:
        text = f"{o['caption']} {o['alt']} {o['page_title']}"
        n = shared.get(text)
        if n is None:
            n = shared[text] = len(qtok.intersection(analyzer.analyze(text)))
        return -n, o.get("position", 0), o["doc"]

    return min(occurrences, key=key)

