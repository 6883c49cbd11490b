"""Article HTML -> what the local web indexes and renders: noise removal (scripts, navigation,
citation apparatus, licence footers), plain text, first sentence, image references with their
captions and context, relative hrefs. Indexing and fetch both go through :func:`article_content` so
a search hit and its fetched page show the same content."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

import lxml.etree
import lxml.html

from kit.web.text_clean import drop_boilerplate, flatten_headings, normalize_tree, plain_text
from kit.web.zim.decorative import decorative_path, decorative_role
from kit.web.zim.text import _clip, _norm_ws, _one_line, first_sentence

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
    decorative: bool = False  # shown as interface (role) or at an interface path: never indexed
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


def _prepare_tree(root: lxml.html.HtmlElement) -> None:
    """What indexing and fetch both do to a parsed page before reading it: NFC text, noindex
    regions, licence footers and skin navigation, noise elements, plain-text headings."""
    normalize_tree(root)
    _drop_noindex_regions(root)
    drop_boilerplate(root)
    _clean_tree(root)
    flatten_headings(root)


def article_content(root: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    """The content element of a parsed page, prepared (:func:`_prepare_tree`) and without its
    ``<h1>`` title heading: what indexing extracts and what fetch renders. Modifies ``root``."""
    _prepare_tree(root)
    content = _content_root(root)
    for h1 in list(content.iter("h1")):
        h1.drop_tree()
    return content


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
    content = article_content(root)
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
