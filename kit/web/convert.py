"""Fetched bodies -> Markdown for ``web_extract``: content-type routing, HTML (trafilatura, with
markdownify as fallback), PDF (pypdf, resource limits tightened), charset decoding and the page's
Markdown images. Pure functions of the bytes: no network; :class:`kit.web.fetch.HttpFetcher` runs
them off the event loop with a time limit.
"""

from __future__ import annotations

import io
import re
from urllib.parse import urljoin, urlsplit

from kit.extras import require
from kit.types import BackendError

__all__ = ["HTML_TYPES", "PDF_TYPES", "TEXT_TYPES", "extract_markdown_images", "html_to_markdown",
           "pdf_to_markdown"]

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
# Markdown image syntax ![alt](url "title"); a small regex is enough because both producers here
# (trafilatura and markdownify, or a reader service) write this one form.
_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def extract_markdown_images(markdown: str, base_url: str) -> list[tuple[str, str]]:
    """``(absolute_url, alt)`` of the Markdown images in page order, first occurrence of each URL;
    relative URLs are resolved against ``base_url``; non-http(s) sources (``data:``) are left out
    because they cannot be fetched or attributed to a URL."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for m in _MD_IMAGE.finditer(markdown):
        url = urljoin(base_url, m.group(2))
        if urlsplit(url).scheme not in ("http", "https") or url in seen:
            continue
        seen.add(url)
        out.append((url, m.group(1).strip()))
    return out


def _absolutize_markdown_images(markdown: str, base_url: str) -> str:
    return _MD_IMAGE.sub(lambda m: f"![{m.group(1)}]({urljoin(base_url, m.group(2))})", markdown)


def _accept_image(ctype: str, data: bytes) -> bool:
    # Any image/* type is downloaded (within max_image_bytes); Pillow then decides whether it is a
    # raster image (SVG and other vector formats are refused there).
    return ctype.startswith("image/") or ctype in ("", "application/octet-stream")


def _accept_document(ctype: str, data: bytes) -> bool:
    return _document_kind(ctype, data) is not None


def _document_kind(ctype: str, data: bytes) -> str | None:
    if ctype in PDF_TYPES or (ctype in ("", "application/octet-stream") and data.startswith(b"%PDF-")):
        return "pdf"
    if ctype in HTML_TYPES:
        return "html"
    if ctype in TEXT_TYPES:
        return "text"
    if ctype == "" and b"<html" in data[:2048].lower():
        return "html"
    return None


def _decode(data: bytes, charset: str | None) -> str:
    if charset:
        try:
            return data.decode(charset, errors="replace")
        except LookupError:
            pass
    require("fetch", "trafilatura", feature="live-web page conversion")
    from trafilatura.utils import decode_file  # charset detection

    return decode_file(data)


def html_to_markdown(data: bytes | str, url: str, charset: str | None = None) -> tuple[str, str]:
    """``(title, markdown)`` of an HTML document; image and link URLs made absolute.

    trafilatura extracts the main content (boilerplate such as menus and footers removed); when it
    finds none (very short or unusual pages), the whole ``<body>`` is converted with markdownify
    after dropping scripts and styles.

    Raises:
        BackendError: the document is empty or not parseable HTML.
    """
    require("fetch", "trafilatura", feature="live-web page conversion")
    import lxml.html
    import trafilatura
    from markdownify import markdownify

    text = data if isinstance(data, str) else _decode(data, charset)
    if not text.strip():
        raise BackendError(f"empty HTML document at {url}")
    try:
        # Parse UTF-8 bytes: lxml refuses str input that carries an XML encoding declaration.
        doc = lxml.html.fromstring(text.encode("utf-8"), parser=lxml.html.HTMLParser(encoding="utf-8"))
    except Exception as err:  # lxml raises several types (ParserError, ValueError)
        raise BackendError(f"unparseable HTML at {url}: {err}") from err
    title = (doc.findtext(".//title") or "").strip()
    markdown = trafilatura.extract(
        text,
        url=url,
        output_format="markdown",
        include_images=True,
        include_links=True,
        include_tables=True,
        favor_recall=True,
    )
    if not markdown:
        for el in doc.xpath("//script|//style|//noscript|//template|//head"):
            el.drop_tree()
        body = doc.find("body")
        markdown = markdownify(lxml.html.tostring(body if body is not None else doc, encoding="unicode"),
                               heading_style="ATX").strip()
    if not title:
        meta = trafilatura.extract_metadata(text, default_url=url)
        title = (meta.title or "") if meta else ""
    return title, _absolutize_markdown_images(markdown, url)


# pypdf's own limits, tightened: no decoded stream or image over 32 MB (pages here are at most a few
# MB of text), less decoding work per stream, and no external JBIG2 decoder on untrusted input.
_PDF_LIMITS = dict(
    maximum_declared_stream_length=32_000_000, array_based_stream_maximum_output_length=32_000_000,
    jbig2_maximum_output_length=32_000_000, lzw_maximum_output_length=32_000_000,
    run_length_maximum_output_length=32_000_000, zlib_maximum_output_length=32_000_000,
    brotli_maximum_output_length=32_000_000, image_maximum_buffer_size=32_000_000,
    stream_decoding_work_maximum_length=100_000_000, jbig2dec_binary=None,
)


def pdf_to_markdown(data: bytes, max_pages: int, url: str = "") -> tuple[str, str]:
    """``(title, markdown)`` of a PDF: one ``## Page N`` section per page for the first
    ``max_pages`` pages (pypdf text extraction), then a note naming how many pages were cut.

    Raises:
        BackendError: pypdf cannot read the file (damaged, encrypted without an empty password).
    """
    require("fetch", "pypdf", feature="live-web PDF conversion")
    from pypdf import PdfReader, apply_configuration
    from pypdf.errors import LimitReachedError, PyPdfError

    try:
        with apply_configuration(**_PDF_LIMITS):
            reader = PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                raise BackendError(f"PDF at {url} is encrypted")
            total = len(reader.pages)
            sections = []
            for i, page in enumerate(reader.pages[:max_pages]):
                sections.append(f"## Page {i + 1}\n\n{(page.extract_text() or '').strip()}")
            title = str((reader.metadata or {}).get("/Title") or "").strip()
    except BackendError:
        raise
    except LimitReachedError as err:
        raise BackendError(f"PDF at {url} exceeds a resource limit (decompression bomb?): {err}") from err
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError,
            ZeroDivisionError) as err:  # pypdf surfaces damaged files through many types
        raise BackendError(f"unreadable PDF at {url}: {type(err).__name__}: {err}") from err
    if total > max_pages:
        sections.append(f"[PDF truncated: first {max_pages} of {total} pages]")
    return title, "\n\n".join(sections)
