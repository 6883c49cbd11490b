"""Article HTML -> what the local web indexes and renders: noise removal (scripts, navigation,
citation apparatus, licence footers), plain text, first sentence, image references with their
captions and context, relative hrefs. Indexing and fetch both go through :func:`article_content` so
a search hit and its fetched page show the same content."""

from __future__ import annotations

import posixpath
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

import lxml.etree
import lxml.html

from kit.web.text_clean import (
    Tagged,
    boilerplate_marked,
    drop_boilerplate,
    drop_tree,
    flatten_headings,
    normalize_text,
    normalize_tree,
    plain_text,
    tagged_elements,
    text_content,
)
from kit.web.zim.decorative import decorative_path, decorative_role
from kit.web.zim.precut import NOISE_CLASSES, precut, verify
from kit.web.zim.text import _clip, _norm_ws, _one_line, first_sentence

# Elements that are never page content.
_NOISE_TAGS = (
    "script", "style", "noscript", "template", "link", "meta", "head", "video", "audio", "source",
    "track", "object", "embed", "iframe", "annotation", "button", "input", "select", "textarea",
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


_NOISE_SET = frozenset(NOISE_CLASSES)

_CAPTION_XPATH = {
    name: _class_xpath([name]) for name in ("thumbcaption", "gallerytext", "infobox-caption")
}
_URL_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*:")
#: libxml2's HTML parser, as ``lxml.html`` uses it, but building plain ``lxml.etree`` elements:
#: the same tree without ``lxml.html``'s Python class look-up for every element touched (a
#: quarter of the extraction time). ``collect_ids=False``: nothing here asks for ids by hash.
_PARSER = lxml.etree.HTMLParser(collect_ids=False)
#: Pages that declare no charset are UTF-8 (the ZIM format's encoding; libxml2 would read them as
#: Latin-1: "Zürich" as "ZÃ¼rich"), and so are pages whose meta tag declares UTF-8: read so from
#: their first byte (libxml2 guesses at a non-ASCII byte met before the meta tag: Latin-1 unless an
#: ``http-equiv ... charset=`` text follows somewhere, which the noise cut could remove). Another
#: charset declared by a meta tag in the head (``charset`` or ``http-equiv="Content-Type"``, as
#: browsers read them) or a BOM is left to libxml2, and one declared only by an XML declaration
#: (which libxml2's HTML parser ignores) is passed to it.
_PARSER_UTF8 = lxml.etree.HTMLParser(collect_ids=False, encoding="utf-8")
_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
_META = re.compile(rb"<meta\s[^>]*>", re.IGNORECASE)
_ATTR = re.compile(rb"""([a-zA-Z_:][-\w:.]*)\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+)""")
_CONTENT_CHARSET = re.compile(rb"""charset\s*=\s*["']?\s*([-\w.:]+)""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""\s*<\?xml\s[^>]*?\bencoding\s*=\s*["']([-\w.:]+)["']""", re.IGNORECASE)
_HEAD_END = re.compile(rb"</head\s*>|<body[\s>]", re.IGNORECASE)
#: bytes searched for a meta charset when the page has no ``</head>`` or ``<body>`` before them
_HEAD_SCAN = 65536
#: C0 controls other than tab, newline and carriage return: libxml2 keeps some in text nodes
#: (form feeds, vertical tabs), where lxml then refuses any edit of that text (the page was lost
#: as "unparsable") and a fetched page would show them to the model. Read as spaces; ESC (0x1b)
#: is kept in the ISO-2022 encodings, whose shift sequences it starts.
_CONTROLS = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_CONTROLS_NO_ESC = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f]")
#: the same bytes for ``bytes.translate`` (deleting them is ~20x faster than a regex search over a
#: page that has none, the usual case)
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)])
_CONTROL_BYTES_NO_ESC = _CONTROL_BYTES.replace(b"\x1b", b"")
_PARSERS: dict[str, lxml.etree.HTMLParser] = {}
_UTF8_NAMES = ("utf-8", "utf8")


def _meta_charsets(html: bytes) -> list[str]:
    """The charsets the meta tags of a page's head declare, in order (lower case): ``<meta
    charset>`` or ``<meta http-equiv="Content-Type" content="...; charset=...">``; a ``charset=``
    inside another meta's content, such as a description, is not one. Read from the bytes: a meta
    written inside a comment or an attribute value is among them."""
    out = []
    end = _HEAD_END.search(html, 0, _HEAD_SCAN)
    for tag in _META.finditer(html, 0, end.start() if end else _HEAD_SCAN):
        attrs = {k.lower(): v.strip(b"\"'") for k, v in _ATTR.findall(tag.group(0))}
        if attrs.get(b"charset"):
            out.append(attrs[b"charset"].decode("ascii", "replace").strip().lower())
        elif attrs.get(b"http-equiv", b"").lower() == b"content-type":
            m = _CONTENT_CHARSET.search(attrs.get(b"content", b""))
            if m:
                out.append(m.group(1).decode("ascii", "replace").lower())
    return out


def declared_charset(html: bytes) -> tuple[str, str] | None:
    """The charset a page declares, as ``(how, name)``: ``("bom", ...)``, ``("meta", name)`` for
    the first meta tag in the head that declares one (:func:`_meta_charsets`) or ``("xml", name)``
    for an XML declaration's ``encoding``; None when it declares none."""
    return _declared_charset(html)[0]


def _declared_charset(html: bytes) -> tuple[tuple[str, str] | None, list[str]]:
    """(:func:`declared_charset`, the head's meta charsets, ``[]`` after a BOM): the page's meta
    tags scanned once for both (:func:`_parser_for` reads the second)."""
    if html.startswith(_BOMS):
        return ("bom", "utf-16" if html.startswith(_BOMS[1:]) else "utf-8"), []
    metas = _meta_charsets(html)
    if metas:
        return ("meta", metas[0]), metas
    xml = _XML_ENCODING.match(html)
    return (("xml", xml.group(1).decode("ascii").lower()) if xml else None), metas


def _parser_for(declared: tuple[str, str] | None, metas: list[str]) -> lxml.etree.HTMLParser:
    """The parser of a page that declares ``declared`` (:func:`declared_charset`): forced UTF-8
    when it declares none, or when every meta charset its head declares (``metas``,
    :func:`_meta_charsets`) is UTF-8."""
    if declared is None:
        return _PARSER_UTF8
    how, name = declared
    if how == "meta" and all(c in _UTF8_NAMES for c in metas):
        return _PARSER_UTF8
    if how != "xml":
        return _PARSER  # libxml2 reads BOMs and other meta declarations itself
    if name not in _PARSERS:
        try:
            _PARSERS[name] = lxml.etree.HTMLParser(collect_ids=False, encoding=name)
        except LookupError:  # an encoding libxml2 does not know: the ZIM format's UTF-8
            _PARSERS[name] = _PARSER_UTF8
    return _PARSERS[name]


def _parse_html(html: bytes, tagged: list[Tagged] | None = None) -> lxml.etree._Element:
    """Parse article HTML into plain ``lxml.etree`` elements (the tree ``lxml.html.
    document_fromstring`` builds; use :func:`~kit.web.text_clean.text_content` and
    :func:`~kit.web.text_clean.drop_tree` on it), as UTF-8 unless the page declares its charset
    (:func:`declared_charset`), control characters as spaces (:data:`_CONTROLS`). The children of
    navboxes, reference lists and citation markers are cut from the bytes first where libxml2
    keeps them inside their element (:mod:`kit.web.zim.precut`; extraction removes those
    elements); a cut the marker check refuses parses the page as written. ``tagged``: a list to
    fill with the parsed page's :func:`~kit.web.text_clean.tagged_elements` (for
    :func:`article_content`; the marker check then reads them instead of walking the tree).
    Raises ValueError on an empty or unparsable document."""
    if not html.strip():
        raise ValueError("empty HTML")
    declared, metas = _declared_charset(html)
    if declared is None or declared[1] != "utf-16":
        esc = declared is not None and "2022" in declared[1]
        if len(html.translate(None, _CONTROL_BYTES_NO_ESC if esc else _CONTROL_BYTES)) != len(html):
            html = (_CONTROLS_NO_ESC if esc else _CONTROLS).sub(b" ", html)
    parser = _parser_for(declared, metas)
    # the noise cut needs an ASCII-compatible encoding that libxml2 fixes before it reads a byte
    if declared is None or (declared[1] in _UTF8_NAMES and (declared[0] != "meta" or parser is _PARSER_UTF8)):
        cut, names = precut(html)
        if names:
            try:
                root = lxml.etree.fromstring(cut, parser)
            except (lxml.etree.ParserError, lxml.etree.XMLSyntaxError, ValueError):
                root = None
            found = None if root is None or tagged is None else tagged_elements(root)
            if root is not None and verify(root, names, found):
                if tagged is not None:
                    tagged[:] = found or []
                return root
    try:
        root = lxml.etree.fromstring(html, parser)
    except (lxml.etree.ParserError, lxml.etree.XMLSyntaxError, ValueError) as exc:
        raise ValueError(f"unparsable HTML: {exc}") from exc
    if root is None:
        raise ValueError("unparsable HTML: Document is empty")
    if tagged is not None:
        tagged[:] = tagged_elements(root)
    return root


#: The tag noise elements get before they are stripped together: random, so no page can use it.
_DOOMED = f"kit-noise-{secrets.token_hex(6)}"


def _clean_tree(root: lxml.etree._Element, tagged: list[Tagged]) -> None:
    """Remove non-content elements in place (scripts, styles, navigation, citation apparatus, comments),
    keeping their tails (as :func:`~kit.web.text_clean.drop_tree`). ``tagged``: the page's
    :func:`~kit.web.text_clean.tagged_elements`, found before anything was removed; one removed
    since changes nothing. lxml's ``strip_elements`` removes them in C (noise elements are first
    renamed to :data:`_DOOMED`): ~2x faster than removing each from Python."""
    lxml.etree.strip_elements(root, *_NOISE_TAGS, with_tail=False)
    # One pass with a set test: an XPath of 20+ class tests per element is ~10x slower.
    for el, id_, classes in tagged:
        if el is not root and ((classes and not _NOISE_SET.isdisjoint(classes))
                               or (id_ and id_.startswith("cite_ref") and el.tag == "sup")):
            el.tag = _DOOMED  # legacy citation markers too: <sup id="cite_ref-3">[3]</sup>
    lxml.etree.strip_elements(root, _DOOMED, lxml.etree.Comment, with_tail=False)


def _drop_noindex_regions(root: lxml.etree._Element) -> int:
    """Drop what mwoffliner fences with ``<!--htdig_noindex-->`` (the licence footer): mwoffliner
    marks it as not for indexing. Returns how many elements were dropped."""
    dropped = 0
    for comment in list(root.iter(lxml.etree.Comment)):
        if normalize_text(comment.text or "").strip() != "htdig_noindex":  # as before NFC ran later
            continue
        sib = comment.getnext()
        while sib is not None:
            nxt = sib.getnext()
            if (isinstance(sib, lxml.etree._Comment)
                    and normalize_text(sib.text or "").strip() == "/htdig_noindex"):
                break
            drop_tree(sib)
            dropped += 1
            sib = nxt
    return dropped


def _content_root(root: lxml.etree._Element,
                  tagged: list[Tagged]) -> lxml.etree._Element:
    """``#mw-content-text`` (the first one still in ``root``), else ``<body>``, else ``root``."""
    for el, id_, _ in tagged:
        if id_ == "mw-content-text" and _top(el) is root:
            return el
    body = root.find("body")
    return body if body is not None else root


def _element_text(el: lxml.etree._Element) -> str:
    """Plain text of ``el`` with line breaks between block elements (lxml's ``text_content`` glues
    ``<td>a</td><td>b</td>`` into ``ab``). Modifies tails of ``el``'s descendants."""
    for sub in el.iter(*_BLOCK_TAGS):  # libxml2 picks the block elements
        if sub is not el:
            sub.tail = "\n" + (sub.tail or "")
            if sub.tag in ("td", "th"):
                sub.text = " " + (sub.text or "")
    return _norm_ws(text_content(el))


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


def _image_caption(img: lxml.etree._Element) -> str:
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
                return _clip(_one_line(text_content(cap)), 300)
        for cls, name in (("thumbinner", "thumbcaption"), ("thumb", "thumbcaption"),
                          ("gallerybox", "gallerytext")):
            if cls in classes:
                caps = _CAPTION_XPATH[name](node)
                if caps:
                    return _clip(_one_line(text_content(caps[0])), 300)
        if tag in ("td", "th"):
            caps = _CAPTION_XPATH["infobox-caption"](node)
            text = _one_line(text_content(caps[0] if caps else node))
            if not text:  # uncaptioned infobox image: the infobox's title names it
                title = node.xpath("ancestor::table[contains(@class, 'infobox')][1]/caption")
                if not title:
                    title = node.xpath("ancestor::table[contains(@class, 'infobox')][1]"
                                       "//th[1]")
                text = _one_line(text_content(title[0])) if title else ""
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
    decorative: bool = False  # shown as interface (role) or at an interface path: never indexed
    element: lxml.etree._Element | None = field(default=None, repr=False)

    @property
    def context(self) -> str:
        return _clip(" ".join(p for p in (self.heading, self.paragraph) if p), 400)


def _page_images(content: lxml.etree._Element, page_path: str) -> list[_ImgRef]:
    """All ``<img>`` of a cleaned content tree in document order, with caption and context (the
    current section heading and the next paragraph), in one pass over the tree."""
    refs: list[_ImgRef] = []
    pending: list[_ImgRef] = []
    heading = ""
    for el in content.iter("h2", "h3", "h4", "h5", "h6", "p", "img"):  # in document order
        tag = el.tag
        if tag in _HEADINGS:
            heading = _one_line(text_content(el))
        elif tag == "p" and pending:
            text = _one_line(text_content(el))
            if text:
                for ref in pending:
                    ref.paragraph = _clip(text, 300)
                pending = []
        elif tag == "img":
            target = resolve_href(page_path, el.get("src") or "")
            if target is None:
                continue
            ref = _ImgRef(target, _one_line(el.get("alt") or ""), _image_caption(el), heading,
                          decorative=decorative_role(el) or decorative_path(target), element=el)
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


def _top(el: lxml.etree._Element) -> lxml.etree._Element:
    while (parent := el.getparent()) is not None:
        el = parent
    return el


def _prepare_tree(root: lxml.etree._Element, tagged: list[Tagged] | None = None) -> list[Tagged]:
    """What indexing and fetch both do to a parsed page before reading it, in this order: noindex
    regions, noise elements (so that their content never steers a later rule, and the tree is the
    same whether :mod:`kit.web.zim.precut` emptied them or not), NFC text, licence footers and
    skin navigation, plain-text headings. Returns the elements that had an id or class (in
    document order, some now removed): one pass serves every step that looks for ids and
    classes. ``tagged``: those elements when the caller has them (:func:`_parse_html`), read
    before anything was removed."""
    if tagged is None:
        tagged = tagged_elements(root)
    marked = boilerplate_marked(tagged)
    _drop_noindex_regions(root)  # before the comments go
    _clean_tree(root, tagged)  # first: noise never steers the rules below (and the noise cut cannot)
    text = normalize_tree(root)  # the page's text when unchanged
    drop_boilerplate(root, tagged, text, marked)
    flatten_headings(root)
    return tagged


def article_content(root: lxml.etree._Element, tagged: list[Tagged] | None = None) -> lxml.etree._Element:
    """The content element of a parsed page, prepared (:func:`_prepare_tree`; ``tagged``: the
    tree's elements with an id or class, as :func:`_parse_html` gives them) and without its
    ``<h1>`` title heading: what indexing extracts and what fetch renders. Modifies ``root``."""
    content = _content_root(root, _prepare_tree(root, tagged))
    for h1 in list(content.iter("h1")):
        drop_tree(h1)
    return content


def page_title(entry_title: str, root: lxml.etree._Element | None, path: str) -> str:
    """Plain-text title of a page: the ZIM entry title, else the HTML ``<title>``, else the path
    (legacy archives may put ``<i>`` or entities in either: see :func:`plain_text`)."""
    title = plain_text(entry_title or "")
    if not title and root is not None:
        t = root.find(".//title")
        # <title> is raw text to lxml: entities already decoded, tags left as written.
        title = plain_text(text_content(t), entities=False) if t is not None else ""
    return title or path


def _extract_article(path: str, title: str, html: bytes) -> _Article:
    """Plain text, first sentence and images of one article. Raises ValueError on bad HTML."""
    tagged: list[Tagged] = []
    root = _parse_html(html, tagged)
    title = page_title(title, root, path)
    content = article_content(root, tagged)
    images = _page_images(content, path)
    lead = ""
    for p in content.iter("p"):
        text = _one_line(text_content(p))
        if len(text) >= 30 and " " in text:
            lead = text
            break
    text = _element_text(content)
    if not lead:
        lead = text.split("\n", 1)[0] if text else title
    return _Article(path, title, text, first_sentence(lead), images)
