"""Local offline web over Kiwix ZIM archives: the embedded default search backend.

Implements the four search-backend operations of docs/contracts.md "Search backend" (weagent_mmsearch §3,
Table 4: ``web_search``, ``web_search_for_image``, ``web_search_based_on_image``, ``web_extract``)
over one or more ZIM archives read with ``libzim``:

* web search: BM25 (tantivy) over article title + plain text, one merged ranking over all archives;
* text-to-image search: BM25 (tantivy) over each image's alt text, caption, file-name words,
  surrounding context and page titles;
* reverse image search: perceptual hashes (``imagehash`` pHash + dHash) of every raster content
  image, compared by Hamming distance;
* fetch: article HTML -> Markdown (``markdownify``) with the page's raster images and their bytes.

URLs have the form ``zim://<archive file stem>/<entry path>``, percent-encoded (kit/web/urls.py),
e.g. ``zim://wikipedia_en_ray_charles_maxi_2023-09/A/Ray_Charles``,
``zim://wikipedia_fr_test_2017-07/A/Orbite_h%C3%A9liosynchrone.html``.

Text is cleaned alike for indexing and fetch (kit/web/text_clean.py): plain-text titles and
headings, NFC text and queries, licence footers and skin navigation removed, decorative images
skipped. Several language indexes merge on normalized scores (:func:`bm25_bound`).

Caching (all deterministic: entries in id order, one tantivy writer thread):

* per archive, ``<index root>/<first 16 hex of the archive's sha256>/``: the extracted article
  text, image records and perceptual hashes (the costly part: HTML parsing, image decoding), built
  once per archive;
* per set of archives, ``<index root>/collections/<key>/``: the tantivy BM25 indexes, one per
  language, built from the per-archive extracts in under a second. One index per language (not
  per archive) gives all archives of a language the same collection statistics, so their scores
  merge into one ranking.

The index root is ``kit.paths.cache_dir()/zim_index`` unless ``index_dir`` is given. A missing,
incomplete or corrupt cache is rebuilt. The archive's sha256 is memoised by (path, size, mtime) so
large archives are not re-hashed on every start.

What is deliberately left out (and why):

* libzim's own Xapian full-text search is not used for ranking: it matches only documents that
  contain every query word and returned nothing for 25-47% of short queries on the shared archives
  (docs/contracts.md, "Environment notes").
* The archive's main page (a list of article links) is not a search result: it is navigation.
* SVG images are not indexed nor returned as page images: they are not raster, Pillow cannot decode
  them, and no rasteriser is a dependency of the kit. Their alt text stays in the Markdown.
* Decorative images (:func:`kit.web.text_clean.is_decorative_image`: under 50 px on the long side
  or 16 px on the short one, banner-shaped, or an icon by file name) are skipped everywhere: they
  carry no evidence and their perceptual hashes collide.
* Navigation (navboxes, sidebars, portal bars, authority control), licence footers, citation
  markers, reference lists, scripts and styles are stripped from indexed text and from fetched
  Markdown.
"""

from __future__ import annotations

import array
import asyncio
import gzip
import hashlib
import io
import json
import logging
import math
import os
import posixpath
import re
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import imagehash
import libzim.reader
import lxml.etree
import lxml.html
import numpy as np
import tantivy
from markdownify import MarkdownConverter
from PIL import Image, UnidentifiedImageError

from kit.paths import cache_dir, file_sha256
from kit.types import BackendError, ImageHit, KnowledgeGraph, Page, RequestRejected, ReverseImageResult, SearchHit
from kit.web.text_clean import (
    MIN_IMAGE_LONG_SIDE,
    MIN_IMAGE_SIDE,
    drop_boilerplate,
    flatten_headings,
    fold_accents,
    is_decorative_image,
    normalize_text,
    normalize_tree,
    plain_text,
)
from kit.web.urls import split_zim_url, zim_path_candidates, zim_url

log = logging.getLogger(__name__)

#: Bump when the on-disk index layout or the text/image extraction changes: old caches are rebuilt.
#: 2: plain NFC titles/text, licence footers and decorative images dropped, accent folding before
#: stemming. 3: titles parsed once (only known inline tags are markup), headings not decoded twice.
INDEX_FORMAT = 3

#: Old-scheme ZIM namespaces that hold archive internals, never pages (ZIM spec "Namespaces").
_INTERNAL_NAMESPACES = {"M": "metadata", "-": "layout", "X": "search index", "Z": "search index",
                        "W": "well-known entry"}
RASTER_MIMES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp", "image/bmp"})
SNIPPET_CHARS = 250
#: Boost of the exact-title clause: its BM25 score (about ln N on a one-token field) times this
#: exceeds any content score, so exact title matches rank first, among themselves by content.
TITLE_BOOST = 100.0
#: Center-crop fractions hashed per indexed image: a query that is a slightly cropped copy of an
#: archive image still lands near one of them (pHash/dHash alone lose ~3 bits per 1% of crop).
HASH_CROPS = (0.0, 0.05, 0.10)
#: Summed pHash + dHash Hamming distance (0..128) up to which two images count as the same picture.
#: Measured on the 239 indexed images of the shared archives: copies resized to 30-60% and
#: JPEG-recompressed (quality 50-70) are at most 9 away, 5%-per-side crops at most 6, 8% crops at
#: most 25 (95% within 17); 99.5% of pairs of archive images are 41 or more apart, and most pairs
#: under 26 are the same picture in two archives.
MATCH_DISTANCE = 26
#: Distance up to which the best match is confident enough to name its page as knowledge graph.
STRONG_DISTANCE = 14

# ISO 639 codes (ZIM "Language" metadata is ISO 639-3) -> tantivy stemmer / stop-word language.
_LANGUAGES = {
    "eng": "english", "en": "english", "fra": "french", "fre": "french", "fr": "french",
    "deu": "german", "ger": "german", "de": "german", "spa": "spanish", "es": "spanish",
    "ita": "italian", "it": "italian", "por": "portuguese", "pt": "portuguese",
    "nld": "dutch", "dut": "dutch", "nl": "dutch", "swe": "swedish", "sv": "swedish",
    "dan": "danish", "da": "danish", "fin": "finnish", "fi": "finnish",
    "hun": "hungarian", "hu": "hungarian", "nor": "norwegian", "nob": "norwegian",
    "nno": "norwegian", "no": "norwegian", "nb": "norwegian", "rus": "russian", "ru": "russian",
    "ara": "arabic", "ar": "arabic", "ell": "greek", "gre": "greek", "el": "greek",
    "ron": "romanian", "rum": "romanian", "ro": "romanian", "tam": "tamil", "ta": "tamil",
    "tur": "turkish", "tr": "turkish",
}

# Elements that are never page content.
_NOISE_TAGS = (
    "script", "style", "noscript", "template", "link", "meta", "head", "video", "audio", "source",
    "track", "object", "embed", "iframe", "annotation", "button", "input", "select", "textarea",
)
# MediaWiki / mwoffliner classes of navigation, maintenance boxes and citation apparatus.
_NOISE_CLASSES = (
    "navbox", "navbox-styles", "vertical-navbox", "navbox-container", "sidebar",
    "authority-control", "bandeau-portail", "mw-editsection", "catlinks", "noprint", "metadata",
    "ambox", "mbox-small", "sistersitebox", "navigation-only", "mw-empty-elt",
    "reference", "mw-ref", "mw-references-wrap", "references", "reflist", "refbegin",
)
_BLOCK_TAGS = frozenset(
    "address article aside blockquote br caption dd details div dl dt figcaption figure footer "
    "h1 h2 h3 h4 h5 h6 header hr li main nav ol p pre section summary table tbody td tfoot th "
    "thead tr ul".split()
)
_HEADINGS = frozenset({"h2", "h3", "h4", "h5", "h6"})


def _class_xpath(classes: Sequence[str]) -> lxml.etree.XPath:
    cond = " or ".join(f"contains(concat(' ', normalize-space(@class), ' '), ' {c} ')"
                       for c in classes)
    return lxml.etree.XPath(f".//*[{cond}]")


_NOISE_SET = frozenset(_NOISE_CLASSES)
_HAS_CLASS = lxml.etree.XPath(".//*[@class]")
_CITE_XPATH = lxml.etree.XPath(".//sup[starts-with(@id, 'cite_ref')]")

_CAPTION_XPATH = {
    name: _class_xpath([name]) for name in ("thumbcaption", "gallerytext", "infobox-caption")
}
_URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:")
_WS = re.compile(r"[ \t\r\f\v\u00a0\u200b]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'“‘«]?[A-Z0-9À-ÖØ-Þ])")
_FILE_WORDS = re.compile(r"[^\w]+|_+")


class ZimError(ValueError):
    """A ZIM archive cannot be used: missing, unreadable, not a ZIM file, duplicate, or corrupt."""


# --------------------------------------------------------------------------------------------------
# Text analysis
# --------------------------------------------------------------------------------------------------
def analyzer_language(zim_language: str | None) -> str | None:
    """Map a ZIM ``Language`` metadata value (ISO 639-3, maybe comma-separated) to a tantivy
    stemmer language (``"english"``, ``"french"``, ...), or ``None`` when unsupported."""
    if not zim_language:
        return None
    first = zim_language.split(",")[0].strip().lower()
    return _LANGUAGES.get(first)


def text_analyzer(language: str | None) -> tantivy.TextAnalyzer:
    """The tokenization used for both indexing and querying one archive.

    Simple word tokenizer -> drop tokens over 40 bytes -> lowercase -> stop words (when tantivy
    has a list for ``language``; its lists are accented, so they run before folding) -> ASCII
    folding -> Snowball stemmer. Folding before stemming makes matching accent-insensitive: the
    stemmer sees ``beyonce`` for both ``Beyoncé`` and ``Beyonce`` (stemming first gave ``beyonce``
    vs ``beyonc``). Callers pass NFC text (:func:`kit.web.text_clean.normalize_text`): the tokenizer
    splits a decomposed ``e`` + U+0301 into two words. ``language`` is a tantivy language name or
    ``None`` (no stop words, no stemming). Benchmarks call ``.analyze(text) -> list[str]`` on it to
    tokenize baselines alike.
    """
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    builder = builder.filter(tantivy.Filter.remove_long(40)).filter(tantivy.Filter.lowercase())
    if language is not None:
        try:
            # Probe: tantivy raises at build time for languages without a stop-word list.
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(
                tantivy.Filter.stopword(language)
            ).build()
            builder = builder.filter(tantivy.Filter.stopword(language))
        except ValueError:
            pass
        return builder.filter(tantivy.Filter.ascii_fold()).filter(
            tantivy.Filter.stemmer(language)).build()
    return builder.filter(tantivy.Filter.ascii_fold()).build()


def _norm_ws(text: str) -> str:
    """Collapse runs of spaces per line and drop empty lines (keeps line structure)."""
    lines = (_WS.sub(" ", ln).strip() for ln in text.split("\n"))
    return "\n".join(ln for ln in lines if ln)


def _one_line(text: str) -> str:
    return _WS.sub(" ", text.replace("\n", " ")).strip()


def _clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters at a word boundary, with an ellipsis if cut."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def first_sentence(paragraph: str, limit: int = 300) -> str:
    """The first sentence of ``paragraph`` (at most ``limit`` characters)."""
    paragraph = _one_line(paragraph)
    m = _SENTENCE_END.search(paragraph, 40)
    return _clip(paragraph[: m.start()] if m else paragraph, limit)


def filename_words(path: str) -> str:
    """Readable words of an image entry path (``I/m/Ray_Charles_(cropped).jpg`` -> ``Ray Charles
    cropped``).

    Drops the namespace folders, thumbnail prefixes (``lossy-page1-250px-``, ``220px-``) and every
    file extension (``.svg.png.webp``).
    """
    name = unquote(posixpath.basename(path))
    name = re.sub(r"^(lossy-)?(page\d+-)?\d+px-", "", name)
    while True:
        stem, ext = posixpath.splitext(name)
        if not ext or len(ext) > 5 or not stem:
            break
        name = stem
    return " ".join(w for w in _FILE_WORDS.split(name) if w)


# --------------------------------------------------------------------------------------------------
# HTML handling (shared by indexing and fetch so both see the same content)
# --------------------------------------------------------------------------------------------------
def _parse_html(html: bytes) -> lxml.html.HtmlElement:
    """Parse article HTML; raises ValueError on an empty or unparsable document."""
    if not html.strip():
        raise ValueError("empty HTML")
    try:
        return lxml.html.document_fromstring(html)
    except (lxml.etree.ParserError, ValueError) as exc:
        raise ValueError(f"unparsable HTML: {exc}") from exc


def _clean_tree(root: lxml.html.HtmlElement) -> None:
    """Remove non-content elements in place (scripts, styles, navigation, citation apparatus)."""
    for el in list(root.iter(*_NOISE_TAGS)):
        el.drop_tree()
    # One pass with a set test: an XPath of 20+ class tests per element is ~10x slower.
    noisy = [el for el in _HAS_CLASS(root) if not _NOISE_SET.isdisjoint(el.get("class").split())]
    for el in noisy:
        el.drop_tree()
    for el in _CITE_XPATH(root):  # legacy citation markers: <sup id="cite_ref-3">[3]</sup>
        el.drop_tree()
    for el in list(root.iter(lxml.etree.Comment)):
        el.drop_tree()


def _drop_noindex_regions(root: lxml.html.HtmlElement) -> None:
    """Drop what mwoffliner fences with ``<!--htdig_noindex-->`` (the licence footer): mwoffliner
    marks it as not for indexing."""
    for comment in list(root.iter(lxml.etree.Comment)):
        if (comment.text or "").strip() != "htdig_noindex":
            continue
        sib = comment.getnext()
        while sib is not None:
            nxt = sib.getnext()
            if (isinstance(sib, lxml.etree._Comment)
                    and (sib.text or "").strip() == "/htdig_noindex"):
                break
            sib.drop_tree()
            sib = nxt


def _content_root(root: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    found = root.xpath("//*[@id='mw-content-text']")
    if found:
        return found[0]
    body = root.find("body")
    return body if body is not None else root


def _element_text(el: lxml.html.HtmlElement) -> str:
    """Plain text of ``el`` with line breaks between block elements (lxml's ``text_content`` glues
    ``<td>a</td><td>b</td>`` into ``ab``). Modifies tails of ``el``'s descendants."""
    for sub in el.iter():
        if isinstance(sub.tag, str) and sub.tag in _BLOCK_TAGS and sub is not el:
            sub.tail = "\n" + (sub.tail or "")
            if sub.tag in ("td", "th"):
                sub.text = " " + (sub.text or "")
    return _norm_ws(el.text_content())


def resolve_href(page_path: str, href: str) -> str | None:
    """Entry path that a relative link or image ``src`` on ``page_path`` points to, or ``None`` for
    external (``http:``, ``//host``), ``data:`` and fragment-only references.

    The reference is URL-decoded once, as a browser would (``%252C`` in HTML -> ``%2C`` in the
    entry path).
    """
    href = href.strip()
    if not href or href.startswith("#") or href.startswith("//") or _URL_SCHEME.match(href):
        return None
    href = href.split("#", 1)[0].split("?", 1)[0]
    if not href:
        return None
    target = unquote(href)
    if target.startswith("/"):
        joined = posixpath.normpath(target.lstrip("/"))
    else:
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(page_path), target))
    while joined.startswith("../"):
        joined = joined[3:]
    return None if joined in ("", ".", "..") else joined


def _image_caption(img: lxml.html.HtmlElement) -> str:
    """Caption of an image: figcaption, thumbcaption, gallery text, infobox caption, or the text of
    the table cell holding it (legacy infoboxes put the caption beside the image in one cell)."""
    node = img.getparent()
    for _ in range(8):
        if node is None:
            return ""
        tag = node.tag if isinstance(node.tag, str) else ""
        classes = set((node.get("class") or "").split())
        if tag == "figure":
            cap = node.find(".//figcaption")
            if cap is not None:
                return _clip(_one_line(cap.text_content()), 300)
        for cls, name in (("thumbinner", "thumbcaption"), ("thumb", "thumbcaption"),
                          ("gallerybox", "gallerytext")):
            if cls in classes:
                caps = _CAPTION_XPATH[name](node)
                if caps:
                    return _clip(_one_line(caps[0].text_content()), 300)
        if tag in ("td", "th"):
            caps = _CAPTION_XPATH["infobox-caption"](node)
            text = _one_line(caps[0].text_content() if caps else node.text_content())
            if not text:  # uncaptioned infobox image: the infobox's title names it
                title = node.xpath("ancestor::table[contains(@class, 'infobox')][1]/caption")
                if not title:
                    title = node.xpath("ancestor::table[contains(@class, 'infobox')][1]"
                                       "//th[1]")
                text = _one_line(title[0].text_content()) if title else ""
            return _clip(text, 300)
        node = node.getparent()
    return ""


@dataclass
class _ImgRef:
    """One ``<img>`` on a page (before resolution against the archive)."""

    src_path: str
    alt: str
    caption: str
    heading: str = ""
    paragraph: str = ""
    element: lxml.html.HtmlElement | None = field(default=None, repr=False)

    @property
    def context(self) -> str:
        return _clip(" ".join(p for p in (self.heading, self.paragraph) if p), 400)


def _page_images(content: lxml.html.HtmlElement, page_path: str) -> list[_ImgRef]:
    """All ``<img>`` of a cleaned content tree in document order, with caption and context (the
    current section heading and the next paragraph), in one pass over the tree."""
    refs: list[_ImgRef] = []
    pending: list[_ImgRef] = []
    heading = ""
    for el in content.iter():
        tag = el.tag if isinstance(el.tag, str) else ""
        if tag in _HEADINGS:
            heading = _one_line(el.text_content())
        elif tag == "p" and pending:
            text = _one_line(el.text_content())
            if text:
                for ref in pending:
                    ref.paragraph = _clip(text, 300)
                pending = []
        elif tag == "img":
            target = resolve_href(page_path, el.get("src") or "")
            if target is None:
                continue
            ref = _ImgRef(target, _one_line(el.get("alt") or ""), _image_caption(el), heading,
                          element=el)
            refs.append(ref)
            pending.append(ref)
    return refs


@dataclass
class _Article:
    path: str
    title: str
    text: str  # plain text of the body (title heading removed)
    first_sentence: str
    images: list[_ImgRef]

    @property
    def indexed_text(self) -> str:
        """The document BM25 sees: title line + body text."""
        return f"{self.title}\n{self.text}"


def _prepare_tree(root: lxml.html.HtmlElement) -> None:
    """What indexing and fetch both do to a parsed page before reading it: NFC text, noindex
    regions, licence footers and skin navigation, noise elements, plain-text headings."""
    normalize_tree(root)
    _drop_noindex_regions(root)
    drop_boilerplate(root)
    _clean_tree(root)
    flatten_headings(root)


def page_title(entry_title: str, root: lxml.html.HtmlElement | None, path: str) -> str:
    """Plain-text title of a page: the ZIM entry title, else the HTML ``<title>``, else the path
    (legacy archives may put ``<i>`` or entities in either: see :func:`plain_text`)."""
    title = plain_text(entry_title or "")
    if not title and root is not None:
        t = root.find(".//title")
        # <title> is raw text to lxml: entities already decoded, tags left as written.
        title = plain_text(t.text_content(), entities=False) if t is not None else ""
    return title or path


def _extract_article(path: str, title: str, html: bytes) -> _Article:
    """Plain text, first sentence and images of one article. Raises ValueError on bad HTML."""
    root = _parse_html(html)
    title = page_title(title, root, path)
    _prepare_tree(root)
    content = _content_root(root)
    for h1 in list(content.iter("h1")):
        h1.drop_tree()
    images = _page_images(content, path)
    lead = ""
    for p in content.iter("p"):
        text = _one_line(p.text_content())
        if len(text) >= 30 and " " in text:
            lead = text
            break
    text = _element_text(content)
    if not lead:
        lead = text.split("\n", 1)[0] if text else title
    return _Article(path, title, text, first_sentence(lead), images)


# Snippets. tantivy's SnippetGenerator re-tokenizes (and stems) the whole stored document for each
# hit: ~0.4 ms per hit on these articles, 40x the cost of ranking. Finding the query words' surface
# forms with str.find and picking the densest window costs ~10 us per hit.
_SURFACE = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(
    tantivy.Filter.lowercase()).build()


def snippet_keys(query: str, analyzer: tantivy.TextAnalyzer) -> list[tuple[str, str]]:
    """(surface key, stem) for each indexed word of ``query``: the key is the common prefix of the
    lowercase word and its stem (``countries``/``countri`` -> ``countri``; the word itself when
    that prefix is under 3 characters), used to find candidate words quickly. Keys are
    accent-folded (:func:`fold_accents`), like the text :func:`make_snippet` scans."""
    keys: list[tuple[str, str]] = []
    for word in map(fold_accents, _SURFACE.analyze(query)):
        stems = analyzer.analyze(word)
        if not stems:
            continue  # stop word: not indexed, not highlighted
        stem = stems[0]
        n = 0
        while n < min(len(word), len(stem)) and word[n] == stem[n]:
            n += 1
        key = (word[:n] if n >= 3 else word, stem)
        if key not in keys:
            keys.append(key)
    return keys


_WORD = re.compile(r"\w+")
_SNIPPET_LEAD = 3_000  # characters scanned first for snippet words
_SNIPPET_SCAN = 200_000  # characters scanned at most


def make_snippet(text: str, keys: Sequence[tuple[str, str]], analyzer: tantivy.TextAnalyzer,
                 limit: int = SNIPPET_CHARS) -> str:
    """A one-line passage of ``text`` (at most ``limit`` characters) around the earliest cluster
    with the most distinct query terms; the text's start when no term occurs.

    A candidate is a word starting with a key (see :func:`snippet_keys`) whose analyzed form is
    the key's stem, so ``village`` does not count for ``ville``. The scan runs over the
    accent-folded text (same length), so ``heliosynchrone`` finds ``héliosynchrone``.
    """
    stem_of: dict[str, str] = {}

    def find(low: str, cap: int) -> list[tuple[int, int]]:
        """Up to ``cap`` verified occurrences of each key in ``low``."""
        hits: list[tuple[int, int]] = []  # (position, key index)
        for ki, (key, stem) in enumerate(keys):
            pos = low.find(key)
            found = 0
            while pos != -1 and found < cap:
                if pos == 0 or not low[pos - 1].isalnum():
                    word = _WORD.match(low, pos).group()
                    got = stem_of.get(word)
                    if got is None:
                        toks = analyzer.analyze(word)
                        got = stem_of[word] = toks[0] if toks else ""
                    if got == stem:
                        hits.append((pos, ki))
                        found += 1
                pos = low.find(key, pos + len(key))
        return hits

    # The lead section first (where the best snippets usually are, and cheap to scan); the whole
    # text only when the lead has none of the terms.
    hits = find(fold_accents(text[:_SNIPPET_LEAD].lower()), 12)
    if not hits and len(text) > _SNIPPET_LEAD:
        hits = find(fold_accents(text[:_SNIPPET_SCAN].lower()), 12)
    if not hits:
        return _clip(_one_line(text[: limit + 40]), limit)
    hits.sort()
    # Earliest window with the most distinct keys (two pointers over the sorted hits: linear).
    lead = limit // 6  # context kept before the first matched word
    span = limit - lead - 20
    counts: dict[int, int] = {}
    best, best_distinct, j = 0, 0, 0
    for i, (pos, _) in enumerate(hits):
        while j < len(hits) and hits[j][0] < pos + span:
            counts[hits[j][1]] = counts.get(hits[j][1], 0) + 1
            j += 1
        if len(counts) > best_distinct:
            best, best_distinct = max(0, pos - lead), len(counts)
            if best_distinct == len(keys):
                break
        k = hits[i][1]
        counts[k] -= 1
        if not counts[k]:
            del counts[k]
    start = best
    if start > 0:
        space = text.rfind(" ", 0, start)
        nl = text.rfind("\n", 0, start)
        start = max(space, nl) + 1 if max(space, nl) >= start - 30 else start
    window = _one_line(text[start: start + limit + 40])
    snippet = _clip(window, limit - (1 if start > 0 else 0))
    return ("…" + snippet) if start > 0 else snippet


# --------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------
def _base_mime(mimetype: str) -> str:
    return mimetype.split(";", 1)[0].strip().lower()


def _flatten(img: Image.Image) -> Image.Image:
    """RGB image, transparent areas composited on white (so a PNG and its JPEG copy hash alike)."""
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        bg.alpha_composite(rgba)
        return bg.convert("RGB")
    return img.convert("RGB")


def decode_image(data: bytes) -> Image.Image:
    """Decode untrusted image bytes into a loaded RGB image.

    Raises:
        BackendError: empty, not an image, truncated or corrupt data, or more pixels than
            ``PIL.Image.MAX_IMAGE_PIXELS`` (decompression-bomb guard).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BackendError(f"image must be bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise BackendError("image bytes are empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(bytes(data)))
            limit = Image.MAX_IMAGE_PIXELS
            w, h = img.size
            if limit is not None and w * h > limit:
                raise BackendError(
                    f"image of {w}x{h} pixels exceeds the decompression-bomb limit of "
                    f"{limit} pixels"
                )
            img.load()
            return _flatten(img)
    except BackendError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise BackendError(f"image rejected as a possible decompression bomb: {exc}") from exc
    except UnidentifiedImageError as exc:
        raise BackendError("bytes are not a recognised image format") from exc
    except (OSError, SyntaxError, ValueError, EOFError, TypeError) as exc:
        raise BackendError(f"corrupt or truncated image: {exc}") from exc


def _hash_int(h: imagehash.ImageHash) -> int:
    return int(np.packbits(h.hash.flatten()).view(">u8")[0])


def image_hashes(img: Image.Image) -> tuple[int, int]:
    """(pHash, dHash) of an RGB image as two 64-bit integers."""
    return _hash_int(imagehash.phash(img)), _hash_int(imagehash.dhash(img))


def _center_crop(img: Image.Image, frac: float) -> Image.Image:
    if frac <= 0:
        return img
    w, h = img.size
    dx, dy = int(w * frac), int(h * frac)
    return img.crop((dx, dy, w - dx, h - dy)) if w - 2 * dx >= 8 and h - 2 * dy >= 8 else img


def _is_decorative(width: int, height: int) -> bool:
    return max(width, height) < MIN_IMAGE_LONG_SIDE or min(width, height) < MIN_IMAGE_SIDE


# --------------------------------------------------------------------------------------------------
# One archive: fingerprint, index build / load, queries
# --------------------------------------------------------------------------------------------------


def _write_json_atomic(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def archive_sha256(path: Path, memo_dir: Path) -> str:
    """sha256 of an archive file, memoised in ``memo_dir`` by (resolved path, size, mtime_ns)."""
    st = path.stat()
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:32]
    memo = memo_dir / f"{key}.json"
    try:
        d = json.loads(memo.read_text(encoding="utf-8"))
        if d["size"] == st.st_size and d["mtime_ns"] == st.st_mtime_ns:
            return str(d["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest = file_sha256(path)
    try:
        _write_json_atomic(memo, {"path": str(path.resolve()), "size": st.st_size,
                                  "mtime_ns": st.st_mtime_ns, "sha256": digest})
    except OSError as exc:  # a read-only cache only costs re-hashing next time
        log.warning("cannot memoise sha256 of %s: %s", path, exc)
    return digest


@dataclass
class _ImageRecord:
    path: str
    mime: str
    width: int
    height: int
    occurrences: list[dict]  # {"doc", "alt", "caption", "context", "position"}, page order


class _ZimArchive:
    """One opened archive with its (lazily loaded) indexes. Internal to :class:`LocalZimWeb`."""

    def __init__(self, path: Path, index_root: Path):
        self.file = path
        self.stem = path.stem
        if not path.exists():
            raise ZimError(f"ZIM archive {path} does not exist")
        if not path.is_file():
            raise ZimError(f"ZIM archive {path} is not a regular file")
        try:
            self.archive = libzim.reader.Archive(str(path))
            self.entry_count = self.archive.all_entry_count
        except (RuntimeError, OSError, ValueError) as exc:
            raise ZimError(f"cannot open ZIM archive {path}: {exc}") from exc
        self.lock = threading.RLock()  # libzim reads from several episodes' threads
        self.language = analyzer_language(self._meta("Language"))
        self.date = self._meta("Date") or None
        self.new_scheme = bool(self.archive.has_new_namespace_scheme)
        self.main_path = self._main_path()
        try:
            self.sha256 = archive_sha256(path, index_root / "_fingerprints")
        except OSError as exc:
            raise ZimError(f"cannot read ZIM archive {path}: {exc}") from exc
        self.index_dir = index_root / self.sha256[:16]
        self.analyzer = text_analyzer(self.language)
        self.ready = False
        self.manifest: dict = {}
        self.articles: list[dict] = []
        self.images: list[_ImageRecord] = []
        self.hashes = np.zeros((0, len(HASH_CROPS), 2), dtype=np.uint64)
        self.title_map: dict[str, int] = {}

    # ---- archive access ------------------------------------------------------------------------
    def _meta(self, key: str) -> str:
        try:
            if key in self.archive.metadata_keys:
                return bytes(self.archive.get_metadata(key)).decode("utf-8", "replace").strip()
        except (RuntimeError, KeyError):
            pass
        return ""

    def _main_path(self) -> str | None:
        try:
            if not self.archive.has_main_entry:
                return None
            entry = self._follow(self.archive.main_entry)
            return entry.path if entry is not None else None
        except RuntimeError:
            return None

    @staticmethod
    def _follow(entry, hops: int = 16):
        """Final entry after redirects, or ``None`` for a redirect loop/dangling redirect."""
        for _ in range(hops):
            if not entry.is_redirect:
                return entry
            try:
                entry = entry.get_redirect_entry()
            except (RuntimeError, KeyError):
                return None
        return None

    def entry(self, path: str):
        """Final (redirects followed) entry at ``path``, or ``None``."""
        with self.lock:
            try:
                if not self.archive.has_entry_by_path(path):
                    return None
                return self._follow(self.archive.get_entry_by_path(path))
            except (RuntimeError, KeyError):
                return None

    def read(self, entry) -> tuple[str, bytes]:
        """(mimetype without parameters, content bytes) of an entry.

        Raises:
            BackendError: libzim cannot read the entry (corrupt cluster), not retryable.
        """
        with self.lock:
            try:
                item = entry.get_item()
                return _base_mime(item.mimetype), bytes(item.content)
            except RuntimeError as exc:
                raise BackendError(
                    f"cannot read {entry.path} from {self.file.name}: {exc}") from exc

    def non_page_kind(self, path: str) -> str | None:
        """What a final entry at ``path`` is when it is neither an article nor a file (image) but
        archive-internal: ``"metadata"`` (``M/Counter``, ``M/Title``), ``"layout"`` (``-/favicon``,
        styles, scripts), ``"search index"`` (``X/``, ``Z/``), ``"well-known entry"`` (``W/``);
        ``None`` for content. Old-scheme archives only: the new scheme keeps those entries out of
        the content namespace that paths resolve in."""
        if self.new_scheme or len(path) < 2 or path[1] != "/":
            return None
        return _INTERNAL_NAMESPACES.get(path[0])

    def is_article_path(self, path: str) -> bool:
        if self.new_scheme:
            return not path.startswith(("-/", "_", "M/", "X/"))
        return path.startswith("A/")

    def iter_articles(self, skipped: dict[str, int] | None = None) -> Iterator[_Article]:
        """Every article (non-redirect ``text/html`` entry of the article namespace, except the main
        page) in entry-id order, extracted. Unreadable or unparsable pages are logged, counted in
        ``skipped`` (reason -> count) and left out."""
        skipped = {} if skipped is None else skipped
        for eid in range(self.entry_count):
            with self.lock:
                try:
                    entry = self.archive._get_entry_by_id(eid)
                    if entry.is_redirect or not self.is_article_path(entry.path):
                        continue
                    if entry.path == self.main_path:
                        continue
                    item = entry.get_item()
                    if _base_mime(item.mimetype) != "text/html":
                        continue
                    path, title, html = entry.path, entry.title, bytes(item.content)
                except RuntimeError as exc:
                    log.warning("%s: skipping unreadable entry #%d: %s", self.file.name, eid, exc)
                    skipped["unreadable"] = skipped.get("unreadable", 0) + 1
                    continue
            try:
                yield _extract_article(path, title, html)
            except ValueError as exc:
                log.warning("%s: skipping article %s: %s", self.file.name, path, exc)
                skipped["unparsable"] = skipped.get("unparsable", 0) + 1

    def url(self, path: str) -> str:
        """Percent-encoded ``zim://<stem>/<path>`` (see :mod:`kit.web.urls`)."""
        return zim_url(self.stem, path)

    # ---- per-archive data: extracted text, image records, perceptual hashes ----------------------
    def build(self, out: Path) -> dict:
        """Extract this archive into the empty folder ``out``; returns the manifest.

        Writes ``articles.json`` (path, title, first sentence per article), ``corpus.jsonl.gz`` (the
        text BM25 indexes, one JSON string per article, same order), ``images.json`` (indexed
        images with their occurrences on pages), ``hashes.npy`` (uint64, shape
        ``(images, len(HASH_CROPS), 2)``: pHash, dHash per crop variant) and ``manifest.json``.
        """
        t0 = time.perf_counter()
        articles: list[dict] = []
        occurrences: dict[str, list[dict]] = {}  # image src path -> its occurrences, page order
        page_occs: list[list[dict]] = []  # per article: its image occurrences in document order
        skipped_articles: dict[str, int] = {}
        with open(out / "corpus.jsonl.gz", "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            for art in self.iter_articles(skipped_articles):
                doc = len(articles)
                gz.write(json.dumps(art.indexed_text, ensure_ascii=False).encode() + b"\n")
                articles.append({"path": art.path, "title": art.title, "first": art.first_sentence})
                page: list[dict] = []
                for ref in art.images:
                    occ = {"doc": doc, "alt": ref.alt, "caption": ref.caption,
                           "context": ref.context}
                    occurrences.setdefault(ref.src_path, []).append(occ)
                    page.append(occ)
                page_occs.append(page)

        skipped: dict[str, int] = {}
        images: list[_ImageRecord] = []
        hashes: list[list[tuple[int, int]]] = []
        resolved: dict[str, int] = {}  # final path -> image index (refs may go through redirects)
        for src, occs in occurrences.items():
            entry = self.entry(src)
            if entry is None:
                skipped["missing"] = skipped.get("missing", 0) + 1
                continue
            if entry.path in resolved:
                images[resolved[entry.path]].occurrences.extend(occs)
                continue
            try:
                mime, data = self.read(entry)
            except BackendError:
                skipped["unreadable"] = skipped.get("unreadable", 0) + 1
                continue
            reason, rec, hs = self._hash_image(entry.path, mime, data, occs)
            if reason:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            resolved[entry.path] = len(images)
            images.append(rec)
            hashes.append(hs)
        # Position of each kept image among the kept images of its page (0 = lead image).
        kept = {id(o) for rec in images for o in rec.occurrences}
        for occs in page_occs:
            n = 0
            for occ in occs:
                if id(occ) in kept:
                    occ["position"] = n
                    n += 1
        for rec in images:
            rec.occurrences.sort(key=lambda o: (o["doc"], o["position"]))

        arr = np.array(hashes, dtype=np.uint64).reshape(len(images), len(HASH_CROPS), 2)
        np.save(out / "hashes.npy", arr, allow_pickle=False)
        _write_json_atomic(out / "articles.json", articles)
        _write_json_atomic(out / "images.json", [rec.__dict__ for rec in images])
        manifest = {
            "format": INDEX_FORMAT, "archive": self.file.name, "sha256": self.sha256,
            "size": self.file.stat().st_size, "language": self.language,
            "articles": len(articles), "skipped_articles": skipped_articles,
            "images": len(images), "skipped_images": skipped,
            "hash_crops": list(HASH_CROPS), "build_seconds": round(time.perf_counter() - t0, 3),
        }
        _write_json_atomic(out / "manifest.json", manifest)  # written last: marks a complete build
        return manifest

    def _hash_image(self, path: str, mime: str, data: bytes, occs: list[dict]):
        """(skip reason or "", record, hashes of the crop variants) for one referenced image."""
        if mime == "image/svg+xml":
            return "svg", None, None
        if mime not in RASTER_MIMES:
            return "not_raster", None, None
        try:
            img = decode_image(data)
        except BackendError:
            return "undecodable", None, None
        if is_decorative_image(path, *img.size):
            return "decorative", None, None
        rec = _ImageRecord(path, mime, img.size[0], img.size[1], list(occs))
        return "", rec, [image_hashes(_center_crop(img, c)) for c in HASH_CROPS]

    def load(self) -> None:
        """Load the extracted data from ``self.index_dir``; raises on anything missing/corrupt."""
        d = self.index_dir
        manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("format") != INDEX_FORMAT or manifest.get("sha256") != self.sha256:
            raise ValueError("index format or archive checksum differs")
        if manifest.get("hash_crops") != list(HASH_CROPS):
            raise ValueError("hash variants differ")
        articles = json.loads((d / "articles.json").read_text(encoding="utf-8"))
        images = [_ImageRecord(**r) for r in json.loads((d / "images.json").read_text("utf-8"))]
        hashes = np.load(d / "hashes.npy", allow_pickle=False)
        if hashes.shape != (len(images), len(HASH_CROPS), 2) or hashes.dtype != np.uint64:
            raise ValueError(f"hash array has shape {hashes.shape}, expected {len(images)} images")
        if len(articles) != manifest.get("articles") or len(images) != manifest.get("images"):
            raise ValueError("record counts differ from the manifest")
        if not (d / "corpus.jsonl.gz").is_file():
            raise ValueError("corpus.jsonl.gz is missing")
        self.manifest = manifest
        self.articles, self.images, self.hashes = articles, images, hashes
        self.title_map = {}
        for i, a in enumerate(articles):
            self.title_map.setdefault(a["title"].casefold(), i)
        self.ready = True

    def corpus_texts(self) -> Iterator[str]:
        """The indexed text of every article, in article order (from the cache)."""
        with gzip.open(self.index_dir / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)

    def ensure_ready(self, build_fn=None) -> bool:
        """Load the cached data, extracting it first when missing or corrupt; True if built.

        ``build_fn`` (default :meth:`build`) is a seam for tests that check the cache is reused.
        """
        if self.ready:
            return False
        return _load_or_build(self.index_dir, self.load, build_fn or self.build, self.file.name)


def _load_or_build(final: Path, load, build, what: str) -> bool:
    """Run ``load()``; if it fails, ``build(tmp)`` into a fresh folder, move it to ``final`` and
    ``load()`` again. Returns True when it built. Safe against concurrent builders: the build is
    deterministic, so whichever finishes first wins and the other's copy is discarded."""
    try:
        load()
        return False
    except Exception as exc:  # noqa: BLE001 - any unreadable cache is rebuilt
        if final.exists():
            log.warning("rebuilding index %s for %s: %s", final, what, exc)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{final.name}.build-"))
    try:
        manifest = build(tmp)
        log.info("built ZIM index %s for %s: %s", final, what, manifest)
        if final.exists():  # stale or corrupt: move it aside, then replace
            stale = Path(tempfile.mkdtemp(dir=root, prefix=f".{final.name}.stale-"))
            try:
                os.replace(final, stale / "old")
            except OSError:
                pass
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    load()
    return True


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
        sb.add_text_field("content", stored=True, tokenizer_name=tokenizer, index_option="freq")
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
                for doc, content in enumerate(arch.corpus_texts()):
                    title = arch.articles[doc]["title"]
                    tdoc = tantivy.Document(content=content,
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
                li.keymap = _address_keys(li.text_searcher, li.n_docs)
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


# --------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------
def _md_url(url: str) -> str:
    """Link destination usable in Markdown (angle brackets around spaces or odd parentheses)."""
    odd = url.count("(") != url.count(")") or "<" in url or ">" in url
    if odd or any(c.isspace() for c in url):
        return "<" + url.replace("<", "%3C").replace(">", "%3E") + ">"
    return url


class _ZimMarkdown(MarkdownConverter):
    """markdownify with images kept everywhere (infobox images live in table cells, where
    markdownify would otherwise reduce them to their alt text)."""

    def convert_img(self, el, text, parent_tags):  # noqa: D102 - markdownify hook
        src = el.attrs.get("src") or ""
        alt = (el.attrs.get("alt") or "").replace("[", "(").replace("]", ")")
        return f"![{alt}]({_md_url(src)})" if src else alt


# --------------------------------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------------------------------
class LocalZimWeb:
    """Search backend over local Kiwix ZIM archives (implements :class:`kit.types.SearchBackend`).

    Args:
        paths: one ZIM path or a sequence of them. Archive file stems must be distinct (they name
            the archive in ``zim://<stem>/<path>`` URLs).
        index_dir: root folder of the index caches (default ``kit.paths.cache_dir()/zim_index``);
            each archive's extract lives in ``<root>/<sha256[:16]>/``, the BM25 indexes of this
            set of archives in ``<root>/collections/<key>/``.
        keep_links: keep hyperlinks in fetched Markdown (internal links become ``zim://`` URLs).
            Off by default: pages are read by a model under a 5,000-character budget per page
            (weagent_mmsearch Table 5) and every article is reachable through search.

    Raises:
        ZimError: no paths, a missing/unreadable/non-ZIM file, or two archives with the same stem.

    Indexes load (or build, seconds on the shared archives) on first use or on
    :meth:`ensure_ready`. All methods are safe to call from concurrent episodes (asyncio tasks or
    threads): the indexes are immutable once loaded and archive reads are serialised per archive.
    """

    name = "zim"

    def __init__(self, paths: str | os.PathLike | Sequence[str | os.PathLike],
                 index_dir: str | os.PathLike | None = None, *, keep_links: bool = False):
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        paths = [Path(p).expanduser() for p in paths]
        if not paths:
            raise ZimError("no ZIM archives given")
        root = Path(index_dir).expanduser() if index_dir is not None else cache_dir() / "zim_index"
        self.index_root = root
        self.keep_links = keep_links
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
            self._ready = True
            return built

    async def _aready(self) -> None:
        if not self._ready:
            await asyncio.to_thread(self.ensure_ready)

    def analyzer_for(self, stem: str) -> tantivy.TextAnalyzer:
        """The text analyzer used for archive ``stem`` (for baselines that must tokenize alike)."""
        return self._archive(stem).analyzer

    def corpus(self) -> Iterator[tuple[str, str | None, str, str, str]]:
        """(archive stem, language, entry path, title, indexed text) of every indexed article.

        Read from the cache (builds it if needed); meant for benchmarks and audits.
        """
        self.ensure_ready()
        for arch in self.archives:
            for art, text in zip(arch.articles, arch.corpus_texts(), strict=True):
                yield arch.stem, arch.language, art["path"], art["title"], text

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
        query = normalize_text(query)
        if not query.strip():
            raise BackendError("empty query")
        return query

    # ---- web search ------------------------------------------------------------------------------
    def _rank(self, query: str, num: int) -> list[tuple[float, int, _LanguageIndex, object]]:
        """Merged top ``num`` over the language indexes: (-score, key, language index, address),
        sorted by score, then key (= archive member, then document: a deterministic tie-break).

        Scores are each index's BM25 divided by :func:`bm25_bound` of the query in that index (see
        there): comparable across languages, same order within one."""
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
            hits = searcher.search(li.text_query(tokens), limit=min(num, li.n_docs),
                                   count=False).hits
            if not hits:
                continue
            scale = 1.0 / bm25_bound(dfs, li.n_docs)
            hits = [(score * scale, a) for score, a in hits]
            keymap = li.keymap
            if keymap is not None:
                merged.extend((-score, keymap[a.segment_ord][a.doc], li, a) for score, a in hits)
            else:
                keys = searcher.fast_field_values("key", [a for _, a in hits])
                merged.extend((-score, key, li, a)
                              for (score, a), key in zip(hits, keys, strict=True))
        if len(merged) > num or (merged and merged[0][2] is not merged[-1][2]):
            merged.sort(key=lambda t: (t[0], t[1]))  # hits of several languages: merge
        return merged[:num]

    def rank_sync(self, query: str, num: int) -> list[tuple[str, str, float]]:
        """Ranking only: top ``num`` (archive stem, entry path, score) over all archives.

        The score is the document's BM25 in its language index divided by :func:`bm25_bound` of
        the query there (comparable across languages; the BM25 order within a language). Archives
        of the same language share collection statistics; ties break by archive sha256 order,
        then document order. Raises like :meth:`search_sync`.
        """
        query = self._check_query(query)
        self._check_num(num)
        self.ensure_ready()
        members = self.collection.members
        out = []
        for s, key, _, _ in self._rank(query, num):
            arch = members[key >> 40]
            out.append((arch.stem, arch.articles[key & _ITEM_MASK]["path"], -s))
        return out

    def search_sync(self, query: str, num: int) -> list[SearchHit]:
        """Web search (Table 4 ``web_search``): top ``num`` articles by BM25 over title + text.

        BM25 (tantivy: k1 = 1.2, b = 0.75) with the query (NFC-normalized) as an OR of its
        analyzed terms, so any text is a valid query; several language indexes merge on
        :func:`bm25_bound`-normalized scores. URLs are percent-encoded (:mod:`kit.web.urls`).
        Returns hits with title, ``zim://`` URL, a query-relevant snippet
        (at most ~250 characters, from tantivy's snippet generator) and the archive's snapshot
        date (ZIM ``Date`` metadata). A query with no indexable word (only punctuation or stop
        words) returns ``[]``.

        Raises:
            BackendError: empty/whitespace query, non-string query, ``num`` < 1.
        """
        query = self._check_query(query)
        self._check_num(num)
        self.ensure_ready()
        out = []
        keys_by_lang: dict[int, list[tuple[str, str]]] = {}
        for _, key, li, addr in self._rank(query, num):
            arch, d = self.collection.members[key >> 40], key & _ITEM_MASK
            keys = keys_by_lang.get(id(li))
            if keys is None:
                keys = keys_by_lang[id(li)] = snippet_keys(query, li.analyzer)
            art = arch.articles[d]
            body = li.text_searcher.doc(addr)["content"][0].split("\n", 1)[-1]
            out.append(SearchHit(title=art["title"], url=arch.url(art["path"]),
                                 snippet=make_snippet(body, keys, li.analyzer), date=arch.date))
        return out

    async def search(self, query: str, num: int) -> list[SearchHit]:
        """Async :meth:`search_sync`, run in a worker thread so a slow query never blocks other episodes
        or the harness timeouts."""
        await self._aready()
        return await asyncio.to_thread(self.search_sync, query, num)

    # ---- text-to-image search --------------------------------------------------------------------
    def _image_hit(self, arch: _ZimArchive, idx: int, occ: dict | None = None) -> ImageHit:
        rec = arch.images[idx]
        occ = occ or rec.occurrences[0]
        art = arch.articles[occ["doc"]]
        entry = arch.entry(rec.path)
        if entry is None:
            raise BackendError(f"image {rec.path} vanished from {arch.file.name}")
        mime, data = arch.read(entry)
        return ImageHit(title=art["title"], image_url=arch.url(rec.path),
                        page_url=arch.url(art["path"]), domain=arch.stem,
                        caption=occ["caption"] or occ["alt"] or filename_words(rec.path),
                        content=data, mime=mime)

    def image_search_sync(self, query: str, num: int) -> list[ImageHit]:
        """Text-to-image search (Table 4 ``web_search_for_image``).

        BM25 over each image's caption and alt text (boost 2), file-name words (1.5), page titles
        (1) and surrounding context (section heading + next paragraph, 0.5). Each image appears
        once (deduplicated by entry path); its page is the one whose caption, alt text and title
        share most words with the query. Several language indexes merge on scores divided by the
        query's :func:`bm25_bound` summed over the weighted fields. Hits carry the image bytes.
        Raises like
        :meth:`search_sync`.
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
        out = []
        for _, mi, idx in merged[:num]:
            arch = self.collection.members[mi]
            qtok = set(arch.analyzer.analyze(query))
            # Most query words in caption/alt/title; then the page where it is the lead image.
            best = min(
                arch.images[idx].occurrences,
                key=lambda o: (-len(qtok & set(arch.analyzer.analyze(
                    f"{o['caption']} {o['alt']} {arch.articles[o['doc']]['title']}"))),
                    o.get("position", 0), o["doc"]),
            )
            out.append(self._image_hit(arch, idx, best))
        return out

    async def image_search(self, query: str, num: int) -> list[ImageHit]:
        """Async :meth:`image_search_sync`."""
        await self._aready()
        return await asyncio.to_thread(self.image_search_sync, query, num)

    # ---- reverse image search --------------------------------------------------------------------
    def reverse_image_search_sync(self, image: bytes, num: int) -> ReverseImageResult:
        """Reverse image search (Table 4 ``web_search_based_on_image``) by perceptual hashing.

        The query's pHash and dHash are compared with those of every indexed image (and of its
        5% and 10% center crops); distance = summed Hamming distance (0..128) of the closest
        variant. Images within :data:`MATCH_DISTANCE` are matches. ``pages``: the pages showing a
        match, closest first (ties: lead image first, then document order), at most ``num``;
        ``thumbnails``: the matched images with bytes, at most ``num``; ``knowledge_graph``: the
        best page's title and first sentence when the best distance is within
        :data:`STRONG_DISTANCE`. No match gives an empty result.

        Raises:
            RequestRejected: bytes that are empty, not an image, corrupt, truncated, over
                ``PIL.Image.MAX_IMAGE_PIXELS``, or an image too small to search by.
            BackendError: ``num`` < 1.
        """
        self._check_num(num)
        try:
            img = decode_image(image)
        except BackendError as e:  # the query image itself: the same bytes are always refused
            raise RequestRejected(str(e)) from e
        if _is_decorative(*img.size):
            raise RequestRejected(
                f"image of {img.size[0]}x{img.size[1]} pixels is too small to search by "
                f"(needs at least {MIN_IMAGE_LONG_SIDE} px on its long side and "
                f"{MIN_IMAGE_SIDE} px on its short side)"
            )
        self.ensure_ready()
        ph, dh = image_hashes(img)
        matches = []  # (distance, archive index, image index)
        for ai, arch in enumerate(self.archives):
            if not len(arch.hashes):
                continue
            dist = (np.bitwise_count(arch.hashes[..., 0] ^ np.uint64(ph)).astype(np.int32)
                    + np.bitwise_count(arch.hashes[..., 1] ^ np.uint64(dh)).astype(np.int32))
            best = dist.min(axis=1)
            for idx in np.nonzero(best <= MATCH_DISTANCE)[0]:
                matches.append((int(best[idx]), ai, int(idx)))
        matches.sort()
        pages: list[tuple[tuple, SearchHit]] = []
        seen_pages: set[tuple[int, int]] = set()
        for dist, ai, idx in matches:
            arch = self.archives[ai]
            for occ in sorted(arch.images[idx].occurrences,
                              key=lambda o: (o.get("position", 0), o["doc"])):
                key = (ai, occ["doc"])
                if key in seen_pages:
                    continue
                seen_pages.add(key)
                art = arch.articles[occ["doc"]]
                snippet = occ["caption"] or art["first"]
                pages.append(((dist, occ.get("position", 0), ai, occ["doc"]),
                              SearchHit(title=art["title"], url=arch.url(art["path"]),
                                        snippet=_clip(snippet, SNIPPET_CHARS), date=arch.date)))
        pages.sort(key=lambda t: t[0])
        kg = None
        if pages and pages[0][0][0] <= STRONG_DISTANCE:
            _, ai, d = pages[0][0][1:]
            arch = self.archives[ai]
            art = arch.articles[d]
            kg = KnowledgeGraph(title=art["title"], description=art["first"],
                                url=arch.url(art["path"]))
        thumbs = []
        for dist, ai, idx in matches[:num]:
            arch = self.archives[ai]
            occ = min(arch.images[idx].occurrences, key=lambda o: (o.get("position", 0), o["doc"]))
            thumbs.append(self._image_hit(arch, idx, occ))
        return ReverseImageResult(pages=[h for _, h in pages[:num]], knowledge_graph=kg,
                                  thumbnails=thumbs)

    async def reverse_image_search(self, image: bytes, num: int) -> ReverseImageResult:
        """Async :meth:`reverse_image_search_sync`."""
        await self._aready()
        return await asyncio.to_thread(self.reverse_image_search_sync, image, num)

    # ---- fetch -----------------------------------------------------------------------------------
    def _lookup_in(self, arch: _ZimArchive, path: str):
        """Entry a URL path names: decoded first (result URLs are percent-encoded), then as given
        (URLs written before encoding), then NFC/NFD variants; ``None`` if absent."""
        for cand in zim_path_candidates(path):
            entry = arch.entry(cand)
            if entry is not None:
                return entry
        return None

    def _lookup_title(self, arch: _ZimArchive, title: str):
        title = normalize_text(title)
        slug = title.replace(" ", "_")
        for cand in (f"A/{slug}", f"A/{slug}.html", f"A/{slug}.htm", slug):
            entry = arch.entry(cand)
            if entry is not None:
                return entry
        self.ensure_ready()
        idx = arch.title_map.get(title.replace("_", " ").casefold())
        return arch.entry(arch.articles[idx]["path"]) if idx is not None else None

    def resolve_url(self, url: str):
        """(archive, final entry) for a ``zim://`` URL, a bare entry path or a Wikipedia URL.

        Raises:
            BackendError: unknown archive or entry ("not found", not retryable); a web URL that
                is not a Wikipedia article present in the archives; an archive-internal entry
                (metadata ``M/Counter``, layout ``-/favicon``, search index: "not a page or
                image", see :meth:`_ZimArchive.non_page_kind`).
        """
        arch, entry = self._resolve_entry(url)
        kind = arch.non_page_kind(entry.path)
        if kind is not None:
            raise BackendError(f"cannot fetch {url.strip()}: {entry.path} is archive {kind} of "
                               f"{arch.file.name}, not a page or image")
        return arch, entry

    def _resolve_entry(self, url: str):
        """:meth:`resolve_url` without the archive-internal check."""
        if not isinstance(url, str) or not url.strip():
            raise BackendError("empty URL")
        url = url.strip()
        if url.startswith("zim://"):
            stem, path = split_zim_url(url)
            arch = self._archive(stem)
            entry = self._lookup_in(arch, path) if path else None
            if entry is None:
                raise BackendError(f"not found: {url} is not an entry of {arch.file.name}")
            return arch, entry
        parts = urlsplit(url)
        if parts.scheme in ("http", "https"):
            host = (parts.hostname or "").lower()
            if (host == "wikipedia.org" or host.endswith(".wikipedia.org")) and parts.path.startswith("/wiki/"):
                title = unquote(parts.path[len("/wiki/"):])
                lang = host.split(".")[0]
                # Archives of the URL's language first, newest snapshot first.
                order = sorted(self.archives, key=lambda a: a.date or "", reverse=True)
                order.sort(key=lambda a: a.language != analyzer_language(lang))
                for arch in order:
                    entry = self._lookup_title(arch, title)
                    if entry is not None:
                        return arch, entry
                raise BackendError(f"not found: {url} is not in the local archives")
            raise BackendError(
                f"the local web serves only zim:// URLs (and Wikipedia article URLs present in its "
                f"archives); cannot fetch {url}")
        if parts.scheme and parts.scheme != "zim" and "/" not in parts.scheme:
            raise BackendError(f"unsupported URL scheme {parts.scheme!r} in {url}; "
                               "the local web serves only zim:// URLs")
        for arch in self.archives:
            entry = self._lookup_in(arch, url)
            if entry is not None:
                return arch, entry
        raise BackendError(f"not found: no archive has an entry {url!r}")

    def _raster(self, arch: _ZimArchive, path: str) -> tuple[str, bytes] | None:
        """(mime, bytes) of a non-decorative raster image entry, else ``None``."""
        entry = arch.entry(path)
        if entry is None:
            return None
        mime, data = arch.read(entry)
        if mime not in RASTER_MIMES:
            return None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                size = Image.open(io.BytesIO(data)).size  # header only
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
            return None
        return None if is_decorative_image(path, *size) else (mime, data)

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
        _prepare_tree(root)
        content = _content_root(root)
        for h1 in list(content.iter("h1")):
            h1.drop_tree()
        images: list[ImageHit] = []
        seen: set[str] = set()
        for ref in _page_images(content, entry.path):
            el = ref.element
            raster = self._raster(arch, ref.src_path)
            if raster is None:  # svg, icon, missing: keep only its alt text
                el.tail = (el.get("alt") or "") + (el.tail or "")
                el.drop_tree()
                continue
            final = arch.entry(ref.src_path)
            img_url = arch.url(final.path if final is not None else ref.src_path)
            el.attrib.clear()
            el.set("src", img_url)
            el.set("alt", ref.alt or ref.caption or filename_words(ref.src_path))
            if img_url in seen:
                continue
            seen.add(img_url)
            images.append(ImageHit(title=title, image_url=img_url, page_url=page_url,
                                   domain=arch.stem,
                                   caption=ref.caption or ref.alt or filename_words(ref.src_path),
                                   content=raster[1], mime=raster[0]))
        for a in list(content.iter("a")):
            href = a.get("href") or ""
            target = resolve_href(entry.path, href) if self.keep_links else None
            a.attrib.clear()
            if self.keep_links:
                if target is not None:
                    if arch.entry(target) is not None:  # links to absent pages become text
                        a.set("href", arch.url(target))
                elif href.startswith(("http://", "https://")):
                    a.set("href", href)
        html = lxml.html.tostring(content, encoding="unicode")
        body = _ZimMarkdown(heading_style="ATX", bullets="-", escape_underscores=False,
                            escape_asterisks=False, bs4_options="lxml").convert(html)
        body = re.sub(r"\n{3,}", "\n\n", body).strip()
        return Page(url=page_url, title=title, markdown=f"# {title}\n\n{body}\n", images=images,
                    content_type="text/html")

    async def fetch(self, url: str) -> Page:
        """Async :meth:`fetch_sync` (Wikipedia URLs may need the title table: loaded off-loop)."""
        await self._aready()
        return await asyncio.to_thread(self.fetch_sync, url)
