"""Fetched pages as Markdown: a cleaned article tree -> ``Page`` (markdownify, images kept in table
cells and pointed at ``zim://`` URLs, decorative or non-raster images reduced to their alt text,
links kept or dropped)."""

from __future__ import annotations

import io
import re
import warnings
from typing import TYPE_CHECKING

import lxml.html
from markdownify import MarkdownConverter
from PIL import Image

from kit.types import ImageHit, Page
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
            size = Image.open(io.BytesIO(data)).size  # header only
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    return None if is_decorative(path, *size) else (mime, data)


def render_article(arch: _ZimArchive, entry, root: lxml.html.HtmlElement, title: str,
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
        target = resolve_href(entry.path, href) if keep_links else None
        a.attrib.clear()
        if keep_links:
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
