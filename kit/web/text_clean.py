"""Clean text for the local web (kit/web/zim.py): plain titles, Unicode normalization, boilerplate
and decorative-image rules.

Everything here is applied alike when an archive is indexed and when a page is fetched, so search
results, knowledge-graph matches and fetched pages show the same text (weagent_mmsearch §3, Table
4 tools over the offline web).

* **Titles and headings are plain text.** Legacy mwoffliner archives store display titles with HTML
  (``<i>Blue</i> (album)``, ``R&amp;B``); :func:`plain_text` removes known inline tags and decodes
  entities once, in one pass (any other ``<`` is text: ``C++ <templates>``). Headings come from
  the page parser already decoded and are only normalized (:func:`flatten_headings`).
* **Unicode.** :func:`normalize_text` puts text in NFC and drops invisible format characters (soft
  hyphen, zero-width space/joiners, bidi marks, BOM) that split or hide words. Queries get the same
  treatment, so ``Beyoncé`` typed composed finds ``Beyonce\\u0301`` stored decomposed. Display
  text keeps its accents: accent folding happens only inside the search analyzer
  (``kit.web.zim.text_analyzer``) and, for snippets, in :func:`fold_accents`.
* **Boilerplate.** :func:`drop_boilerplate` removes licence footers ("This article is issued from
  Wikipedia … Creative Commons"), "Retrieved from" print footers, skin navigation and Wikidata
  authority lines, by the elements that carry them (licence links, MediaWiki ids and classes), not
  by rewriting the text.
* **Decorative images.** :func:`is_decorative_image` (rule in its docstring).
"""

from __future__ import annotations

import html
import posixpath
import re
import unicodedata
from urllib.parse import unquote

import lxml.etree
import lxml.html

# --------------------------------------------------------------------------------------------------
# Unicode
# --------------------------------------------------------------------------------------------------
#: Invisible format characters removed from indexed text and queries (they split or hide words):
#: soft hyphen, Arabic letter mark, zero-width space / non-joiner / joiner, LRM/RLM, bidi embeddings
#: and isolates, word joiner, invisible operators, BOM.
_INVISIBLE = dict.fromkeys(
    [0x00AD, 0x061C, 0x180E, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F),
     *range(0x2060, 0x2065), *range(0x2066, 0x206A), 0xFEFF]
)
_INVISIBLE_RE = re.compile("[" + "".join(map(chr, _INVISIBLE)) + "]")
_ASCII_BYTES = bytes(range(128))


def _has_invisible(text: str) -> bool:
    """``_INVISIBLE_RE.search(text) is not None``, searching only the non-ASCII characters (all
    of them are): the text's UTF-8 without its ASCII bytes is those characters, in order, and
    ``bytes.translate`` drops the rest in C (a page's 16k characters: 73 -> ~15 µs)."""
    rest = text.encode("utf-8", "surrogatepass").translate(None, _ASCII_BYTES)
    return bool(rest) and _INVISIBLE_RE.search(rest.decode("utf-8", "surrogatepass")) is not None


def normalize_text(text: str) -> str:
    """``text`` in Unicode NFC without invisible format characters (see ``_INVISIBLE``).

    NFC, not NFKC: compatibility characters (``ﬁ``, full-width letters, ``²``) keep their look in
    displayed text; the search analyzer's ASCII folding already matches most of them.
    """
    if text.isascii():
        return text
    # The same result, without copying a text that needs nothing (the usual case) and deleting by
    # regex: str.translate through a dict costs ~25 ns a character.
    if not _has_invisible(text):
        return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)
    return unicodedata.normalize("NFC", _INVISIBLE_RE.sub("", text))


class _FoldTable(dict):
    """``str.translate`` table: a character -> its base letter when it decomposes into one base
    letter plus combining marks (``é`` -> ``e``); others are left alone. Filled lazily."""

    def __missing__(self, code: int):
        ch = chr(code)
        decomposed = unicodedata.normalize("NFD", ch)
        base = decomposed[0]
        # Mapping to None would delete the character: unchanged ones map to themselves.
        out = base if len(decomposed) > 1 and all(unicodedata.combining(c) for c in
                                                  decomposed[1:]) else ch
        self[code] = out
        return out


_FOLD = _FoldTable()
_NON_ASCII_RUN = re.compile(r"[^\x00-\x7f]+")


def fold_accents(text: str) -> str:
    """``text`` with accented letters replaced by their base letters, one character for one, so
    positions in the folded text are positions in ``text`` (``héliosynchrone`` ->
    ``heliosynchrone``). Expects NFC text (:func:`normalize_text`)."""
    # Only the non-ASCII runs are translated: str.translate through a mapping costs ~25 ns a character,
    # and page text is mostly ASCII (2.6x faster on the shared archives' snippet leads).
    return text if text.isascii() else _NON_ASCII_RUN.sub(lambda m: m.group().translate(_FOLD), text)


# --------------------------------------------------------------------------------------------------
# Titles and headings
# --------------------------------------------------------------------------------------------------
#: Inline HTML elements a display title or heading may carry (mwoffliner puts ``<i>``, ``<b>``,
#: ``<sup>``, ``<span>`` in legacy titles). Only these are tags; any other ``<`` is text.
INLINE_TAGS = frozenset({
    "a", "abbr", "acronym", "b", "bdi", "bdo", "big", "br", "cite", "code", "data", "del", "dfn",
    "em", "font", "i", "ins", "kbd", "mark", "nobr", "q", "rp", "rt", "ruby", "s", "samp", "small",
    "span", "strike", "strong", "sub", "sup", "time", "tt", "u", "var", "wbr",
})
#: Elements dropped with their content (when closed: an unclosed ``<script>`` is text).
_RAW_TAGS = frozenset({"script", "style"})
_ATTR = r"""[A-Za-z_:][-A-Za-z0-9_:.]*(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
#: A tag: ``<name`` (no space after ``<``), well-formed attributes, optional ``/``, ``>``; or a
#: complete comment. ``a<b && c>d`` is not a tag (``&&`` is no attribute name).
_TAG = re.compile(rf"<!--.*?-->|<(/?)([A-Za-z][A-Za-z0-9]*)((?:\s+{_ATTR})*)\s*/?>", re.S)
#: An entity with its terminating ``;`` (``AT&T``, ``&notation`` are text, not entities).
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_SPACES = re.compile(r"\s+")


def one_line(text: str) -> str:
    """``text`` normalized (:func:`normalize_text`) with whitespace runs as one space, stripped."""
    return _SPACES.sub(" ", normalize_text(text)).strip()


def _decode(text: str, entities: bool) -> str:
    return _ENTITY.sub(lambda m: html.unescape(m.group()), text) if entities else text


def plain_text(markup: str, *, entities: bool = True) -> str:
    """Plain, normalized one-line text of a title that may hold inline HTML (ZIM display titles:
    mwoffliner's convention; legacy archives store ``<i>Blue</i> (album)``, ``R&amp;B``).

    One pass, no re-parsing of its own output:

    * a tag is markup only when it is a known inline element (:data:`INLINE_TAGS`, any case,
      well-formed attributes): ``<i>Blue</i> (album)`` -> ``Blue (album)``; ``<br>`` is a space;
    * ``<script>``/``<style>`` elements are dropped with their content when closed;
    * complete comments are dropped;
    * every other ``<`` is text: ``x<y``, ``C++ <templates>``, ``if a<b && c>d`` stay;
    * entities (``&name;``, ``&#N;``, ``&#xH;``, with the ``;``) are decoded exactly once, and the
      result is text: ``&lt;br&gt;`` -> ``<br>``, ``&amp;lt;`` -> ``&lt;``; ``R&B`` stays.

    ``entities=False`` for text whose entities a parser already decoded (an HTML ``<title>``, whose
    content lxml reads as raw text with entities decoded): only tags are removed then.
    """
    text = markup or ""
    if "<" not in text and "&" not in text:
        return one_line(text)
    out: list[str] = []
    pos = 0
    for m in _TAG.finditer(text):
        if m.start() < pos:  # inside a dropped script/style element
            continue
        name = (m.group(2) or "").lower()
        comment = m.group().startswith("<!--")
        if not comment and name not in INLINE_TAGS and name not in _RAW_TAGS:
            continue  # not markup: stays in the text
        if name in _RAW_TAGS and not m.group(1):
            close = re.compile(rf"</{name}\s*>", re.I).search(text, m.end())
            if close is None:  # an unclosed <script> is not an element: text
                continue
            out.append(_decode(text[pos:m.start()], entities))
            pos = close.end()
            continue
        out.append(_decode(text[pos:m.start()], entities))
        if name == "br":
            out.append(" ")
        pos = m.end()
    out.append(_decode(text[pos:], entities))
    return one_line("".join(out))


def flatten_headings(root: lxml.etree._Element) -> None:
    """Replace the content of every ``h1``-``h6`` under ``root`` by its plain text (so fetched
    Markdown headings carry no emphasis, links or stray markup). The parser already decoded the
    heading's entities and tags, so its text is used as is (``Using &lt;br&gt; tags`` reads
    ``Using <br> tags``), never parsed a second time."""
    for h in root.iter("h1", "h2", "h3", "h4", "h5", "h6"):
        text = one_line(text_content(h))
        tail = h.tail
        for child in list(h):
            h.remove(child)
        h.text, h.tail = text, tail


#: Comments and processing instructions, and ``alt``/``title`` values: what
#: :func:`normalize_tree` touches besides text nodes.
_OTHER_NODES = (lxml.etree.Comment, lxml.etree.ProcessingInstruction)
_ALT_TITLE = lxml.etree.XPath("descendant-or-self::*/@alt | descendant-or-self::*/@title",
                              smart_strings=False)


def _is_normal(text: str) -> bool:
    """``normalize_text(text) == text``, without building the normalized copy."""
    return text.isascii() or (not _has_invisible(text)
                              and unicodedata.is_normalized("NFC", text))


#: ``el.text_content()`` of ``lxml.html`` for any element (plain ``lxml.etree`` ones too).
text_content = lxml.etree.XPath("string()", smart_strings=False)


def drop_tree(el: lxml.etree._Element) -> None:
    """``lxml.html``'s ``drop_tree`` for any element: remove ``el`` and its children, keeping
    its tail (joined to the previous sibling's tail or the parent's text). ``el`` must have a
    parent (AssertionError otherwise)."""
    parent = el.getparent()
    assert parent is not None
    if el.tail:
        previous = el.getprevious()
        if previous is None:
            parent.text = (parent.text or "") + el.tail
        else:
            previous.tail = (previous.tail or "") + el.tail
    parent.remove(el)


def normalize_tree(root: lxml.etree._Element) -> str | None:
    """Apply :func:`normalize_text` to every text node and to ``alt``/``title`` attributes.
    Returns ``root``'s text (:func:`text_content`) when nothing needed a change, else ``None``.

    Most pages need nothing: when the page's text (every text node joined, in C), comments and
    ``alt``/``title`` values are already normal, the tree is left as it is without a Python pass
    over every element. (A string in NFC has only NFC substrings: composition and reordering
    look back from a mark to its starter, both inside the text node.)
    """
    text = text_content(root)
    parts = [text, root.tail or "", *_ALT_TITLE(root)]
    parts += [el.text or "" for el in root.iter(*_OTHER_NODES)]
    if _is_normal("\n".join(parts)):
        return text
    for el in root.iter():
        if el.text and not el.text.isascii():
            el.text = normalize_text(el.text)
        if el.tail and not el.tail.isascii():
            el.tail = normalize_text(el.tail)
        if isinstance(el.tag, str):
            for attr in ("alt", "title"):
                val = el.get(attr)
                if val and not val.isascii():
                    el.set(attr, normalize_text(val))
    return None


# --------------------------------------------------------------------------------------------------
# Boilerplate
# --------------------------------------------------------------------------------------------------
#: Skin and footer parts of MediaWiki pages (ids), never article content.
_BOILERPLATE_IDS = frozenset({
    "footer", "mw-footer", "mw-navigation", "mw-head", "mw-panel", "siteSub", "contentSub",
    "jump-to-nav", "mw-indicators", "catlinks", "toc",
})
#: Classes of the same, and of Wikidata authority lines ("Notices d'autorité").
_BOILERPLATE_CLASSES = frozenset({
    "printfooter", "mw-jump-link", "mw-footer", "footer-places", "footer-info", "wd_identifiers",
    "mw-indicators", "toc", "mw-editsection",
})
_LICENCE_HREFS = ("creativecommons.org/licenses", "gnu.org/copyleft", "gnu.org/licenses/fdl")


def _licence_links(root: lxml.etree._Element) -> list[lxml.etree._Element]:
    """The ``<a>`` below ``root`` whose ``href`` holds a licence address, in document order."""
    # three inline tests, not any() over a generator: ~100 links a page (0.15 -> 0.10 ms)
    c, g, f = _LICENCE_HREFS
    return [a for a in root.iterdescendants("a")
            if (href := a.get("href")) and (c in href or g in href or f in href)]


_FOOTER_PHRASES = (r"(This article is issued from|Retrieved from [\"“]|Cet article est issu de|"
                   r"Text is available under the Creative Commons|Content is available under)")
_FOOTER_TEXT = re.compile(r"^\s*" + _FOOTER_PHRASES, re.I)
#: A footer phrase anywhere: a page whose text has none has no footer block to look for.
_FOOTER_ANYWHERE = re.compile(_FOOTER_PHRASES, re.I)
_FOOTER_LOWER = ("this article is issued from", 'retrieved from "', "retrieved from “",
                 "cet article est issu de", "text is available under the creative commons",
                 "content is available under")
#: The phrases as mwoffliner and MediaWiki write them (each one a match of ``_FOOTER_ANYWHERE``).
_FOOTER_AS_WRITTEN = ("This article is issued from", "Retrieved from \"", "Retrieved from “",
                      "Cet article est issu de")
#: The ASCII beginning of each of ``_FOOTER_LOWER`` (up to its first non-ASCII character).
_FOOTER_ASCII_PARTS = tuple(p.split("“")[0].encode("ascii") for p in _FOOTER_LOWER)
#: The non-ASCII letters that ``re.I`` matches to ASCII ones (Python's ``re`` documentation).
_CASE_SPECIAL = "\u0130\u0131\u017f\u212a"


def _has_footer_phrase(text: str) -> bool:
    """``_FOOTER_ANYWHERE.search(text)``, ~10x faster, by substring tests:

    * the phrases as written: the footer of every mwoffliner page has one;
    * else, when none of the four letters ``re.I`` also maps to ASCII is present, a phrase can
      only match ASCII characters, which stay together in the page's ASCII characters: those,
      lower-cased as bytes, must hold a phrase's ASCII part before the lower-cased text is
      searched (a page whose footer was already dropped is rejected without lower-casing its
      text: 0.1 ms for 20k characters)."""
    if any(p in text for p in _FOOTER_AS_WRITTEN):
        return True
    if any(c in text for c in _CASE_SPECIAL):
        return _FOOTER_ANYWHERE.search(text) is not None
    ascii_low = text.encode("ascii", "ignore").lower()
    if not any(p in ascii_low for p in _FOOTER_ASCII_PARTS):
        return False
    low = text.lower()
    return any(p in low for p in _FOOTER_LOWER)


#: An element with its ``id`` (or ``None``) and its class names.
Tagged = tuple[lxml.etree._Element, "str | None", list[str]]


def tagged_elements(root: lxml.etree._Element) -> list[Tagged]:
    """The elements of ``root`` (itself included) with an ``id`` or ``class``, in document
    order, each with its id and class names: read once for every step that looks for them (a
    Python loop: faster than libxml2's XPath for this)."""
    out = []
    for el in root.iter(lxml.etree.Element):
        cls, id_ = el.get("class"), el.get("id")
        if cls is not None or id_ is not None:
            out.append((el, id_, cls.split() if cls else []))
    return out


#: A licence footer is a short block: longer ones are article text that cites a licence.
_FOOTER_MAX_CHARS = 600
#: Blocks that can be a footer; a licence link inside prose (``p``, ``li``) is article text.
_FOOTER_BLOCKS = frozenset({"div", "footer", "section", "td", "table"})
_PROSE = frozenset({"p", "li", "dd", "blockquote"})


def _top(el: lxml.etree._Element) -> lxml.etree._Element:
    while el.getparent() is not None:
        el = el.getparent()
    return el


#: A paragraph, a heading or the article's content root at or below an element.
_CONTENT_INSIDE = lxml.etree.XPath(
    "boolean(descendant-or-self::*[self::p or self::h1 or self::h2 or self::h3 or self::h4 or "
    "self::h5 or self::h6 or @id='mw-content-text' or "
    "contains(concat(' ', normalize-space(@class), ' '), ' mw-parser-output ')])")


def _holds_content(block: lxml.etree._Element) -> bool:
    """Whether a block holds a paragraph, a heading or the article's content root: never a licence
    footer, however short (a stub whose text cites its licence outside a paragraph kept its text
    only while a navbox beside it counted towards the 600 characters)."""
    return bool(_CONTENT_INSIDE(block))


def _footer_blocks(root: lxml.etree._Element) -> list[lxml.etree._Element]:
    """The ``div``/``footer``/``section``/``p`` below ``root`` (itself included) whose text is at most
    600 characters and starts with a footer phrase, in document order.

    Read in reverse document order, where an element comes after all its descendants: an element
    with a descendant over 600 characters is over 600 itself (its text contains the descendant's),
    so its text is never built. Without this, every wrapper ``div`` of a page built its whole text
    (0.32 -> 0.17 ms on a 29 KiB page that still holds its footer).
    """
    found = []
    long_: set[lxml.etree._Element] = set()
    for el in reversed(list(root.iter("div", "footer", "section", "p"))):
        if el in long_:
            continue
        text = text_content(el)
        if len(text) > _FOOTER_MAX_CHARS:
            up: lxml.etree._Element | None = el.getparent()
            while up is not None and up not in long_:
                long_.add(up)
                up = up.getparent()
        elif _FOOTER_TEXT.match(text):
            found.append(el)
    found.reverse()
    return found


def boilerplate_marked(tagged: list[Tagged]) -> list[lxml.etree._Element]:
    """The elements :func:`drop_boilerplate` removes by id or class (skin parts, footers, Wikidata
    identifier lines: for an identifiers label, its list item), from a page's
    :func:`tagged_elements`. Read before anything is removed: a label's list item is its parent
    then."""
    doomed: list[lxml.etree._Element] = []
    for el, id_, classes in tagged:
        if id_ in _BOILERPLATE_IDS:
            doomed.append(el)
            continue
        if classes and not _BOILERPLATE_CLASSES.isdisjoint(classes):
            parent = el.getparent()
            # An identifiers label is one span in a list item: the whole item is the line.
            doomed.append(parent if "wd_identifiers" in classes and parent is not None
                          and parent.tag == "li" else el)
    return doomed


def drop_boilerplate(root: lxml.etree._Element,
                     tagged: list[Tagged] | None = None, text: str | None = None,
                     marked: list[lxml.etree._Element] | None = None) -> int:
    """Remove licence footers, print footers, skin navigation and authority-identifier lines from
    a parsed page in place; returns how many elements were removed. ``tagged``: the page's
    :func:`tagged_elements`, when the caller has them (elements since removed may be among them);
    ``text``: ``text_content(root)``, when the caller has it; ``marked``: :func:`boilerplate_marked`
    of the page, when the caller read it before removing anything.

    * a licence footer is the nearest ``div``/``footer``/``section``/``td``/``table`` around a link
      to a licence (Creative Commons, GNU FDL), when its text is at most 600 characters, the
      link is not inside prose (``p``, ``li``: an article about licences keeps its text) and the
      block holds no paragraph, heading or content root (:func:`_holds_content`); or a
      block of at most 600 characters that starts with a footer phrase ("This article is issued
      from", "Retrieved from", "Cet article est issu de", "Text is available under the Creative
      Commons");
    * MediaWiki skin parts by id (``footer``, ``mw-navigation``, ``siteSub``, ``toc``...) and
      class (``printfooter``, ``mw-jump-link``...);
    * a Wikidata identifiers line ("Notices d'autorité : VIAF • ISNI …"), the whole list item.
    """
    if marked is None:
        marked = boilerplate_marked(tagged_elements(root) if tagged is None else tagged)
    doomed = list(marked)
    for link in _licence_links(root):
        block = link.getparent()
        while block is not None and block.tag not in _FOOTER_BLOCKS and block.tag not in _PROSE:
            block = block.getparent()
        if (block is not None and block.tag in _FOOTER_BLOCKS
                and len(text_content(block)) <= _FOOTER_MAX_CHARS and not _holds_content(block)):
            doomed.append(block)
    if _has_footer_phrase(text_content(root) if text is None else text):  # else no block can start with a phrase
        doomed += _footer_blocks(root)
    top = _top(root)
    removed = 0
    for el in doomed:
        # Skip what an earlier removal already took (an ancestor of it left the tree).
        if el.getparent() is not None and _top(el) is top:
            drop_tree(el)
            removed += 1
    return removed


# --------------------------------------------------------------------------------------------------
# Decorative images
# --------------------------------------------------------------------------------------------------
MIN_IMAGE_SIDE = 16  # px; thinner images are rules and spacers
MIN_IMAGE_LONG_SIDE = 50  # px; smaller images are icons, flags, stars and bullets
#: Width/height (or height/width) beyond which an image whose short side is under
#: :data:`BANNER_SHORT_SIDE` px is a separator or banner, not a picture.
MAX_ASPECT = 8.0
BANNER_SHORT_SIDE = 64
#: File names (thumbnail prefix and extensions removed, case-insensitive) of interface icons:
#: MediaWiki file-type icons, icon sets (Nuvola, Crystal Clear, Gnome, Tango, Oxygen), maintenance
#: and sister-project symbols (Ambox, Question book, Wiki letter w, Commons/Wikiquote logos, class
#: symbols), rating stars, padlocks, loudspeakers, trend arrows, and web-UI images (identicons,
#: spinners, loaders).
DECORATIVE_NAME = re.compile(
    r"^(fileicon-|nuvola[_ ]|crystal[_ ]clear|gnome-|oxygen480-|edit-(clear|find|undo)|"
    r"ambox[_ -]|imbox[_ -]|question[_ ]book|wiki[_ ]letter[_ ]w|"
    r"(commons|wikiquote|wikisource|wiktionary|wikinews|wikibooks|wikiversity|wikivoyage|"
    r"wikidata|wikispecies)[_ -]logo|symbol[_ ].*[_ ]class|"
    r"star[_ ](full|empty|half)|rating-|padlock-|semi-protection|speakerlink|"
    r"(increase|decrease|steady)\d*$|disambig[_ .-]|portal-puzzle|red[_ ]pog|blue[_ ]pencil|"
    r"folder[_ ]hexagonal|text[_ ]document[_ ]with|"
    r"(ajax-loader|spinner|loading|throbber|loader)$)"
    r"|identicon|(^|[_ -])icon([_ .-]|$)",
    re.I,
)
_THUMB_PREFIX = re.compile(r"^(lossy-)?(page\d+-)?\d+px-")


def _file_name(path: str) -> str:
    name = _THUMB_PREFIX.sub("", unquote(posixpath.basename(path)))
    while True:
        stem, ext = posixpath.splitext(name)
        if not ext or len(ext) > 5 or not stem:
            return name
        name = stem


def is_decorative_image(path: str | None, width: int, height: int) -> bool:
    """True for an image that is interface decoration, never evidence.

    The rule (any one suffices), checked on every archive image before it is indexed or shown as a
    page image:

    * size: longest side under :data:`MIN_IMAGE_LONG_SIDE` (50 px) or shortest side under
      :data:`MIN_IMAGE_SIDE` (16 px): icons, small flags, rating stars, bullets, rules;
    * shape: aspect ratio over :data:`MAX_ASPECT` (8:1) with the short side under
      :data:`BANNER_SHORT_SIDE` (64 px): separators and banners;
    * name: the file name (``path``'s base name without thumbnail prefix such as ``220px-`` and
      without extensions) matches :data:`DECORATIVE_NAME`: file-type icons (``fileicon-ogg.png``,
      120 x 120 in the 2015 Ray Charles archive), icon sets, maintenance and sister-project
      symbols, identicons and spinners, whatever their size.

    ``path`` may be ``None`` (a query image: size and shape rules only). Vector images (SVG) are
    not raster evidence at all and are filtered by MIME type, not here.
    """
    long_side, short_side = max(width, height), min(width, height)
    if long_side < MIN_IMAGE_LONG_SIDE or short_side < MIN_IMAGE_SIDE:
        return True
    if short_side < BANNER_SHORT_SIDE and long_side > MAX_ASPECT * short_side:
        return True
    return bool(path) and bool(DECORATIVE_NAME.search(_file_name(path)))
