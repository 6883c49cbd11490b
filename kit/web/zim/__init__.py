"""Local offline web over Kiwix ZIM archives: the embedded default search backend.

:class:`LocalZimWeb` implements the four search-backend operations of docs/contracts.md "Search
backend" (weagent_mmsearch §3, Table 4) over ZIM archives read with ``libzim``: BM25 web search
(tantivy), text-to-image search over captions and alt text, reverse image search by perceptual
hashes, and fetch as Markdown with the page's images. URLs are ``zim://<archive stem>/<entry path>``.
Extracts and indexes are cached and rebuilt when stale. docs/local_web.md explains what is indexed,
the caching, and what is deliberately left out and why.

Modules, one concern each: :mod:`~kit.web.zim.text` (analyzer, plain-text helpers),
:mod:`~kit.web.zim.html` (article cleaning and extraction), :mod:`~kit.web.zim.snippets`,
:mod:`~kit.web.zim.images` (decode, hashes), :mod:`~kit.web.zim.cache` (format, load-or-build),
:mod:`~kit.web.zim.archive` (one archive and its extract), :mod:`~kit.web.zim.store`,
:mod:`~kit.web.zim.tails` and :mod:`~kit.web.zim.fulltext` (stored text prefixes, full texts),
:mod:`~kit.web.zim.index` (BM25 indexes),
:mod:`~kit.web.zim.hash_index` (the exact, sublinear reverse image index),
:mod:`~kit.web.zim.markdown` (fetched pages), :mod:`~kit.web.zim.resolve` (URLs -> entries),
:mod:`~kit.web.zim.backend` (:class:`LocalZimWeb`).
"""

from __future__ import annotations

from kit.web.text_clean import MIN_IMAGE_LONG_SIDE, MIN_IMAGE_SIDE
from kit.web.zim.archive import ZimError
from kit.web.zim.archive import _ZimArchive as _ZimArchive  # tests patch its build()
from kit.web.zim.backend import LocalZimWeb
from kit.web.zim.cache import INDEX_FORMAT
from kit.web.zim.html import page_title, resolve_href
from kit.web.zim.identity import archive_key, archive_sha256
from kit.web.zim.images import (
    HASH_CROPS,
    MATCH_DISTANCE,
    RASTER_MIMES,
    STRONG_DISTANCE,
    decode_image,
    image_hashes,
)
from kit.web.zim.images import _is_decorative as _is_decorative  # used by tests
from kit.web.zim.index import BM25_B, BM25_K1, TITLE_BOOST, bm25_bound
from kit.web.zim.index import _Collection as _Collection  # tests patch its build()
from kit.web.zim.snippets import SNIPPET_CHARS, make_snippet, snippet_keys
from kit.web.zim.text import analyzer_language, filename_words, first_sentence, text_analyzer

__all__ = [
    "BM25_B",
    "BM25_K1",
    "HASH_CROPS",
    "INDEX_FORMAT",
    "MATCH_DISTANCE",
    "MIN_IMAGE_LONG_SIDE",
    "MIN_IMAGE_SIDE",
    "RASTER_MIMES",
    "SNIPPET_CHARS",
    "STRONG_DISTANCE",
    "TITLE_BOOST",
    "LocalZimWeb",
    "ZimError",
    "analyzer_language",
    "archive_key",
    "archive_sha256",
    "bm25_bound",
    "decode_image",
    "filename_words",
    "first_sentence",
    "image_hashes",
    "make_snippet",
    "page_title",
    "resolve_href",
    "snippet_keys",
    "text_analyzer",
]
