"""Fetched pages as Markdown: a cleaned article tree -> ``Page`` (markdownify, images kept in table
cells and pointed at ``zim://`` URLs, decorative or non-raster images reduced to their alt text,
links kept or dropped)."""

from __future__ import annotations

import io
import re
import warnings
from typing import TYPE_CHECKING

import lxml.etree
import lxml.html
from markdownify import MarkdownConverter
from PIL import Image

from kit.types import ImageHit, Page
from kit.web.text_clean import drop_tree
from kit.web.zim.decorative import is_decorative
from kit.web.zim.html import _page_images, article_content, resolve_href
from kit.web.zim.images import RASTER_MIMES
from kit.web.zim.text import filename_words

if TYPE_CHECKING:
    from kit.web.zim.archive import _ZimArchive


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

    def convert_list(self, el, text, parent_tags):  # noqa: D102 - markdownify hook
        if isinstance(el, _El):  # markdownify's own reads bs4 siblings
            before_paragraph = el.next_block_is_not_a_list()
            if "li" in parent_tags:
                return "\n" + text.rstrip()
            return "\n\n" + text + ("\n" if before_paragraph else "")
        return super().convert_list(el, text, parent_tags)

    convert_ul = convert_list
    convert_ol = convert_list


_OPTIONS = dict(heading_style="ATX", bullets="-", escape_underscores=False, escape_asterisks=False)


def markdown_reference(html: str) -> str:
    """Markdown of serialized article HTML by markdownify over BeautifulSoup: the path before
    issue 32, kept as the reference :func:`html_markdown` is checked and measured against."""
    return _ZimMarkdown(**_OPTIONS, bs4_options="lxml").convert(html)


# ---- markdownify's traversal over lxml ----------------------------------------------------------
_RE_HEADING = re.compile(r"h(\d+)")
_RE_NEWLINE_WS = re.compile(r"[\t \r\n]*[\r\n][\t \r\n]*")
_RE_WS = re.compile(r" [\t ]+|\t[\t ]*")  # markdownify's [\t ]+ -> " ", single spaces left as they are
_WS_INSIDE = frozenset({"p", "blockquote", "article", "div", "section", "ol", "ul", "li", "dl",
                        "dt", "dd", "table", "thead", "tbody", "tfoot", "tr", "td", "th"})
_PARSER = lxml.etree.HTMLParser(encoding="utf-8", collect_ids=False)


def _is_tag(node) -> bool:
    return node is not None and not isinstance(node, str) and isinstance(node.tag, str)


_KIND: dict[str, int] = {}  # tag -> 2: whitespace goes inside and outside it, 1: outside only


def _kind(node) -> int:
    """2 when markdownify removes whitespace inside and around ``node`` (a block element), 1
    around it only (``pre``), 0 otherwise (inline elements, text, comments, ``None``)."""
    if node is None or isinstance(node, str) or not isinstance(node.tag, str):
        return 0
    kind = _KIND.get(node.tag)
    if kind is None:
        tag = node.tag
        kind = _KIND[tag] = (2 if tag in _WS_INSIDE or _RE_HEADING.match(tag) is not None
                             else 1 if tag == "pre" else 0)
    return kind


def _items(el) -> list:
    """``el``'s children as bs4 lists them: text (``str``), elements, comments, in order."""
    out: list = [el.text] if el.text else []
    for child in el:
        out.append(child)
        if child.tail:
            out.append(child.tail)
    return out


class _El:
    """The part of bs4's ``Tag`` that markdownify's conversion functions read, over an lxml
    element (``None``: the document, bs4's ``[document]``)."""

    __slots__ = ("e",)

    def __init__(self, e):
        self.e = e

    name = property(lambda self: "[document]" if self.e is None else self.e.tag)
    attrs = property(lambda self: {} if self.e is None else dict(self.e.attrib))
    parent = property(lambda self: None if self.e is None else _El(self.e.getparent()))

    def get(self, key, default=None):
        return default if self.e is None else self.e.get(key, default)

    def __getitem__(self, key):
        return self.e.attrib[key]

    def find_all(self, names):
        names = {names} if isinstance(names, str) else set(names)
        return [_El(d) for d in self.e.iterdescendants() if _is_tag(d) and d.tag in names]

    def find_previous_sibling(self):
        return next((_El(s) for s in self.e.itersiblings(preceding=True) if _is_tag(s)), None)

    def find_previous_siblings(self, name):
        return [_El(s) for s in self.e.itersiblings(preceding=True) if s.tag == name]

    def next_block_is_not_a_list(self) -> bool:
        """markdownify's ``convert_list`` test: the next content sibling (element or
        non-blank text) exists and is not a list."""
        parent = self.e.getparent()
        items = _items(parent) if parent is not None else [self.e]
        i = next(k for k, it in enumerate(items) if it is self.e)
        for it in items[i + 1:]:
            if _is_tag(it):
                return it.tag not in ("ul", "ol")
            if isinstance(it, str) and it.strip() != "":
                return True
        return False


def _convert_text(text: str, i: int, kinds: list[int], inside: bool,
                  parent_tags: frozenset) -> str:
    """markdownify's ``process_text`` for item ``i`` of an element's items (``kinds``: their
    :func:`_kind`; ``inside``: the element's is 2). No escaping: the options escape nothing."""
    if "pre" not in parent_tags:
        text = _RE_WS.sub(" ", _RE_NEWLINE_WS.sub("\n", text))
    last = len(kinds) - 1
    if (i and kinds[i - 1]) or (inside and not i):
        text = text.lstrip(" \t\r\n")
    if (i < last and kinds[i + 1]) or (inside and i == last):
        text = text.rstrip()
    return text


def _keep(it, i: int, kinds: list[int], inside: bool) -> bool:
    """markdownify's ``_can_ignore``, negated: elements and non-blank text; blank text unless
    at a block's edge or beside a block."""
    if not isinstance(it, str):
        return isinstance(it.tag, str)
    if it.strip() != "":
        return True
    last = len(kinds) - 1
    if inside and (i == 0 or i == last):
        return False
    return not ((i and kinds[i - 1]) or (i < last and kinds[i + 1]))


def _convert_tag(conv: _ZimMarkdown, el, parent_tags: frozenset) -> str:
    """markdownify's ``process_tag`` over an lxml element (``el.tag`` lower-case, libxml2's)."""
    name = el.tag
    items = _items(el)
    kinds = [_kind(it) for it in items]
    inside = _kind(el) == 2
    tags = _child_tags(parent_tags, name)
    strings = []
    for i, it in enumerate(items):
        if not _keep(it, i, kinds, inside):
            continue
        s = (_convert_text(it, i, kinds, inside, tags) if isinstance(it, str)
             else _convert_tag(conv, it, tags))
        if s:
            strings.append(s)
    if len(strings) > 1 and name != "pre" and "pre" not in parent_tags:
        strings = _collapse_newlines(strings)  # (one string is left as it is)
    text = "".join(strings)
    fn = conv.get_conv_fn_cached(name)
    return text if fn is None else fn(_El(el), text, parent_tags=parent_tags)


_CHILD_TAGS: dict[tuple[frozenset, str], frozenset] = {}


def _child_tags(parent_tags: frozenset, name: str) -> frozenset:
    """markdownify's ``parent_tags`` for the children of a ``name`` element (memoised: a page
    has few distinct ones)."""
    key = (parent_tags, name)
    tags = _CHILD_TAGS.get(key)
    if tags is None:
        new = {name}
        if _RE_HEADING.match(name) is not None or name in ("td", "th"):
            new.add("_inline")
        if name in ("pre", "code", "kbd", "samp"):
            new.add("_noformat")
        tags = parent_tags | new
        if len(_CHILD_TAGS) < 4096:
            _CHILD_TAGS[key] = tags
    return tags


def _collapse_newlines(strings: list[str]) -> list[str]:
    """At child boundaries, the larger of two newline runs, at most 2 (markdownify's)."""
    out = [""]
    for s in strings:
        body = s.lstrip("\n")
        leading = s[:len(s) - len(body)]
        content = body.rstrip("\n")
        trailing = body[len(content):]
        if out[-1] and leading:
            prev = out.pop()
            leading = "\n" * min(2, max(len(prev), len(leading)))
        out.extend([leading, content, trailing])
    return out


def html_markdown(html: str) -> str:
    """Markdown of serialized article HTML: :func:`markdown_reference`'s output (markdownify's
    rules, same options), its traversal run over lxml's parse of ``html`` instead of a
    BeautifulSoup tree (the same libxml2 parse bs4's lxml builder makes): 2-3x faster on
    40-50 KB pages. ``tests/test_zim_build_fast.py`` checks both agree on every shared page."""
    root = lxml.etree.fromstring(html.encode("utf-8"), _PARSER)
    if root is None:
        return ""
    conv = _ZimMarkdown(**_OPTIONS)
    text = _convert_tag(conv, root, frozenset({"[document]"}))
    return text.strip("\n")


_PIL_FORMAT = {"image/jpeg": "JPEG", "image/png": "PNG", "image/gif": "GIF", "image/webp": "WEBP",
               "image/bmp": "BMP"}


def _image_size(mime: str, data: bytes) -> tuple[int, int]:
    """(width, height) from the header: PIL's plugin for ``mime`` first (PIL otherwise tries
    its plugins in turn, ~5 a picture), then all of them, as before, when the type lies.
    Raises what :func:`PIL.Image.open` raises."""
    fmt = _PIL_FORMAT.get(mime)
    if fmt is not None:
        try:
            return Image.open(io.BytesIO(data), formats=[fmt]).size
        except (OSError, ValueError, SyntaxError):
            pass
    return Image.open(io.BytesIO(data)).size


def _raster(arch: _ZimArchive, path: str) -> tuple[str, bytes] | None:
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
            size = _image_size(mime, data)  # header only
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    return None if is_decorative(path, *size) else (mime, data)


def render_article(arch: _ZimArchive, entry, root: lxml.etree._Element, title: str,
                   page_url: str, keep_links: bool) -> Page:
    """The fetched :class:`~kit.types.Page` of a parsed HTML article ``root`` at ``entry``.

    Markdown body under ``# title``; ``Page.images``: the page's non-decorative raster images
    with bytes, in page order, each once. Each kept ``<img>`` points at its final ``zim://`` URL;
    others (svg, icon, missing) are reduced to their alt text. With ``keep_links``, internal links
    to present entries become ``zim://`` URLs and ``http(s)`` links stay; all other links are
    text. Modifies ``root``. Raises :class:`~kit.types.BackendError` when an image entry cannot
    be read.
    """
    content = article_content(root)
    images: list[ImageHit] = []
    seen: set[str] = set()
    for ref in _page_images(content, entry.path):
        el = ref.element
        raster = None if ref.decorative else _raster(arch, ref.src_path)
        if raster is None:  # svg, icon, missing: keep only its alt text
            el.tail = (el.get("alt") or "") + (el.tail or "")
            drop_tree(el)
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
        target = resolve_href(entry.path, href) if keep_links else None
        a.attrib.clear()
        if keep_links:
            if target is not None:
                if arch.entry(target) is not None:  # links to absent pages become text
                    a.set("href", arch.url(target))
            elif href.startswith(("http://", "https://")):
                a.set("href", href)
    html = lxml.html.tostring(content, encoding="unicode")
    body = html_markdown(html)
    body = re.sub(r"\n{3,}", "\n\n", body).strip()
    return Page(url=page_url, title=title, markdown=f"# {title}\n\n{body}\n", images=images,
                content_type="text/html")
