"""HTTP fetch for the live web: HTML -> Markdown, PDF -> text, page images localized.

Implements the fetching half of ``web_extract`` (weagent_mmsearch Table 4: "Fetches HTML or PDF
content ... up to five localized page images") for the live backend (docs/contracts.md "Search backend").

Safety limits: only ``http``/``https`` URLs; at most ``max_redirects`` redirects, each hop checked
again; a byte cap on every body (checked on ``Content-Length`` and while streaming); a wall-clock cap
per attempt; a content-type allow-list. Addresses: a host that is, or resolves to, a loopback,
private, link-local, reserved, multicast or otherwise non-global address is refused unless it is
listed in ``allow_private_hosts`` (tests name their local server there). The check resolves the host
itself (injectable ``resolver``) before connecting; it does not pin the address it checked, so a
DNS answer that changes between the check and the connection is not caught (full SSRF protection is
a separate, later piece of work).
"""

from __future__ import annotations

import asyncio
import email.utils
import io
import ipaddress
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx
from PIL import Image, UnidentifiedImageError
from tenacity import AsyncRetrying, RetryError, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_base

from kit.types import BackendError, ImageHit, Page

log = logging.getLogger(__name__)

Resolver = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> list of IP address strings`` used for the address check."""

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/x-markdown"})
PDF_TYPES = frozenset({"application/pdf", "application/x-pdf"})
_BODY_EXCERPT = 300
# Markdown image syntax ![alt](url "title"); a small regex is enough because both producers here
# (trafilatura and markdownify, or a reader service) write this one form.
_MD_IMAGE = re.compile(r"!\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


# ==================================================================================================
# Retry helpers shared by the live web modules
# ==================================================================================================
class RetryableHTTPStatus(Exception):
    """An HTTP answer worth retrying (408, 429, 5xx); keeps the status, a body excerpt and the
    server's Retry-After in seconds."""

    def __init__(self, url: str, status: int, body: str, retry_after: float | None):
        self.url, self.status, self.body, self.retry_after = url, status, body, retry_after
        super().__init__(f"HTTP {status} from {url}: {body!r}")


def is_retryable_status(status: int) -> bool:
    """True for 408, 429 and 5xx."""
    return status in (408, 429) or status >= 500


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or HTTP-date), ``None`` if unusable."""
    if not value:
        return None
    try:
        return max(0.0, float(value.strip()))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _Wait(wait_base):
    def __init__(self, initial: float, maximum: float, retry_after_cap: float):
        self.initial, self.maximum, self.cap = initial, maximum, retry_after_cap

    def __call__(self, retry_state) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, RetryableHTTPStatus) and exc.retry_after is not None:
            return min(exc.retry_after, self.cap)
        return min(self.maximum, self.initial * 2 ** (retry_state.attempt_number - 1))


def _retryable(exc: BaseException) -> bool:
    return isinstance(
        exc, (RetryableHTTPStatus, httpx.TimeoutException, httpx.TransportError, asyncio.TimeoutError)
    )


@dataclass
class RetryConfig:
    """Retries on timeouts, connection errors, 408/429/5xx with exponential backoff (seconds);
    Retry-After is honoured up to ``retry_after_cap_s``."""

    max_retries: int = 2
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 20.0
    retry_after_cap_s: float = 30.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    async def run(self, what: str, fn: Callable[[], Awaitable]):
        """Run ``fn`` with retries; raise :class:`BackendError` (``retryable=True``) once they are
        exhausted. Non-retryable exceptions propagate unchanged."""
        retrying = AsyncRetrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(self.max_retries + 1),
            wait=_Wait(self.backoff_initial_s, self.backoff_max_s, self.retry_after_cap_s),
            sleep=self.sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await fn()
        except RetryError as err:
            last = err.last_attempt.exception()
            n = err.last_attempt.attempt_number
            if isinstance(last, RetryableHTTPStatus):
                detail = f"HTTP {last.status}: {last.body!r}"
            elif isinstance(last, (httpx.TimeoutException, asyncio.TimeoutError)):
                detail = f"timed out ({type(last).__name__})"
            else:
                detail = f"{type(last).__name__}: {last}"
            raise BackendError(f"{what} failed after {n} attempt(s): {detail}", retryable=True) from last
        raise AssertionError("unreachable")  # pragma: no cover


# ==================================================================================================
# Address check
# ==================================================================================================
async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` with the system resolver (``getaddrinfo``), without blocking the loop."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


def is_public_ip(address: str) -> bool:
    """True when ``address`` is a globally routable unicast IP (not loopback/private/link-local/
    reserved/shared/multicast/unspecified, IPv4-mapped IPv6 included)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


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


# ==================================================================================================
# Fetcher
# ==================================================================================================
@dataclass
class _Body:
    url: str  # final URL after redirects
    content_type: str  # lower-case media type without parameters ("" when the server sent none)
    charset: str | None
    data: bytes


class HttpFetcher:
    """Fetch web pages and images over HTTP(S) with size, time, redirect and address limits.

    Args:
        timeout_s: wall-clock limit of one attempt (all redirect hops and the body), seconds.
        max_bytes: largest page or PDF body, bytes.
        max_redirects: most redirects followed (each hop is checked like the first URL).
        max_pdf_pages: PDF pages converted to text; later pages are cut with a note.
        max_images: page images downloaded per page (the harness re-feeds at most 5, Table 4).
        max_image_bytes: largest image body, bytes.
        min_image_side: images whose shorter side is below this (pixels) are not counted as
            localized (icons, spacers); they stay in ``Page.images`` without content.
        allow_private_hosts: host names or IP literals exempt from the address check.
        resolver: ``async (host, port) -> [ip, ...]``; default :func:`system_resolver`.
        transport: ``httpx.AsyncBaseTransport`` (tests use ``httpx.MockTransport``).
        retry: :class:`RetryConfig` for timeouts, connection errors and 408/429/5xx.
        user_agent: the ``User-Agent`` header.

    All methods raise :class:`~kit.types.BackendError`: ``retryable`` is True for timeouts,
    connection errors and 408/429/5xx after retries, False for refused URLs, 4xx, wrong content
    types, oversize bodies and unparseable documents.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 20.0,
        max_bytes: int = 8 * 1024 * 1024,
        max_redirects: int = 5,
        max_pdf_pages: int = 50,
        max_images: int = 5,
        max_image_bytes: int = 5 * 1024 * 1024,
        min_image_side: int = 32,
        allow_private_hosts: Iterable[str] = (),
        resolver: Resolver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryConfig | None = None,
        user_agent: str = "mmsearch-kit/0.1 (research agent kit)",
    ):
        if max_redirects < 0 or max_bytes <= 0 or max_image_bytes <= 0 or timeout_s <= 0:
            raise ValueError("timeout_s, max_bytes, max_image_bytes must be > 0 and max_redirects >= 0")
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.max_pdf_pages = max_pdf_pages
        self.max_images = max_images
        self.max_image_bytes = max_image_bytes
        self.min_image_side = min_image_side
        self.allow_private_hosts = frozenset(h.lower().strip("[]") for h in allow_private_hosts)
        self.resolver = resolver or system_resolver
        self.retry = retry or RetryConfig()
        self._transport = transport
        self._user_agent = user_agent
        self._client: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ lifecycle
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=self._transport,
                follow_redirects=False,  # redirects are followed by hand so each hop is checked
                timeout=httpx.Timeout(self.timeout_s),
                headers={"User-Agent": self._user_agent},
            )
        return self._client

    async def aclose(self) -> None:
        """Close the connection pool (idempotent)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> "HttpFetcher":
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ checks
    async def check_url(self, url: str) -> None:
        """Refuse non-http(s) URLs and hosts that are or resolve to non-public addresses.

        Raises:
            BackendError: scheme, missing host, unresolvable host, or non-public address.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise BackendError(f"refusing URL {url!r}: only http and https are fetched")
        host = (parts.hostname or "").lower()
        if not host:
            raise BackendError(f"refusing URL {url!r}: no host")
        if host in self.allow_private_hosts:
            return
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None:
            addresses = [host]
        else:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                addresses = await self.resolver(host, port)
            except OSError as err:
                raise BackendError(f"cannot resolve host {host!r}: {err}", retryable=True) from err
            if not addresses:
                raise BackendError(f"host {host!r} resolved to no address")
        bad = [a for a in addresses if not is_public_ip(a)]
        if bad:
            raise BackendError(
                f"refusing URL {url!r}: host {host!r} is or resolves to a non-public address "
                f"({', '.join(bad)}); add it to allow_private_hosts to allow it explicitly"
            )

    # ------------------------------------------------------------------ raw GET
    async def _get_once(self, url: str, accept: Callable[[str, bytes], bool], limit: int, what: str) -> _Body:
        # One deadline for the whole redirect chain and body (wait_for: asyncio.timeout needs 3.11).
        return await asyncio.wait_for(self._get_chain(url, accept, limit, what), self.timeout_s)

    async def _get_chain(self, url: str, accept: Callable[[str, bytes], bool], limit: int, what: str) -> _Body:
        client = self._http()
        for _hop in range(self.max_redirects + 1):
            await self.check_url(url)
            async with client.stream("GET", url) as resp:
                if resp.is_redirect:
                    location = resp.headers.get("location")
                    if not location:
                        raise BackendError(f"HTTP {resp.status_code} redirect without Location from {url}")
                    url = str(resp.url.join(location))
                    continue
                if resp.status_code >= 400:
                    await resp.aread()
                    body = resp.text[:_BODY_EXCERPT]
                    if is_retryable_status(resp.status_code):
                        raise RetryableHTTPStatus(
                            url, resp.status_code, body, parse_retry_after(resp.headers.get("retry-after"))
                        )
                    raise BackendError(f"HTTP {resp.status_code} from {url}: {body!r}")
                length = resp.headers.get("content-length")
                if length and length.isdigit() and int(length) > limit:
                    raise BackendError(f"{what} {url} is {int(length)} bytes; the limit is {limit}")
                raw_type = resp.headers.get("content-type", "")
                ctype = raw_type.split(";", 1)[0].strip().lower()
                sniff = ctype in ("", "application/octet-stream")  # only these need the bytes to decide
                if not sniff and not accept(ctype, b""):
                    raise BackendError(f"unsupported content type {raw_type!r} for {what} {url}")
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise BackendError(f"{what} {url} exceeds the {limit}-byte limit")
                    chunks.append(chunk)
                data = b"".join(chunks)
                if not accept(ctype, data):
                    raise BackendError(f"unsupported content type {raw_type or '(none)'!r} for {what} {url}")
                m = re.search(r"charset=([\w.:-]+)", raw_type, re.I)
                return _Body(str(resp.url), ctype, m.group(1) if m else None, data)
        raise BackendError(f"more than {self.max_redirects} redirects starting from {url}")

    async def _get(self, url: str, accept: Callable[[str, bytes], bool], limit: int, what: str) -> _Body:
        return await self.retry.run(f"GET {url}", lambda: self._get_once(url, accept, limit, what))

    # ------------------------------------------------------------------ pages
    async def fetch(self, url: str) -> Page:
        """Fetch ``url`` and return it as a :class:`~kit.types.Page`.

        HTML/XHTML -> Markdown (trafilatura main-content extraction with links, tables and images;
        markdownify of the whole body when trafilatura finds no main content); PDF -> text of the
        first ``max_pdf_pages`` pages (pypdf); plain text/Markdown as is. ``Page.images`` lists the
        page's images in page order with absolute URLs; the first ``max_images`` that download and
        pass the size checks carry ``content``/``mime``, the others only the URL.

        Raises:
            BackendError: see the class docstring.
        """
        body = await self._get(url, _accept_document, self.max_bytes, "page")
        kind = _document_kind(body.content_type, body.data)
        if kind == "pdf":
            title, markdown = pdf_to_markdown(body.data, self.max_pdf_pages, body.url)
            return Page(url=body.url, title=title, markdown=markdown, images=[], content_type="application/pdf")
        if kind == "text":
            text = _decode(body.data, body.charset)
            images = await self.localize_images(extract_markdown_images(text, body.url), body.url)
            return Page(url=body.url, title="", markdown=text, images=images, content_type=body.content_type or "text/plain")
        title, markdown = html_to_markdown(body.data, body.url, body.charset)
        images = await self.localize_images(extract_markdown_images(markdown, body.url), body.url)
        return Page(url=body.url, title=title, markdown=markdown, images=images, content_type="text/html")

    # ------------------------------------------------------------------ images
    async def fetch_image(self, url: str) -> tuple[bytes, str, tuple[int, int]]:
        """Download one raster image: ``(bytes, mime, (width, height))``.

        Raises:
            BackendError: refused URL, HTTP error, non-image content type, over ``max_image_bytes``,
                or bytes Pillow cannot identify (SVG and other vector formats included).
        """
        body = await self._get(url, lambda ct, data: ct.startswith("image/") or ct in ("", "application/octet-stream"),
                               self.max_image_bytes, "image")
        try:
            with Image.open(io.BytesIO(body.data)) as img:
                fmt, size = img.format, img.size
        except (UnidentifiedImageError, OSError) as err:
            raise BackendError(f"{url} is not a raster image Pillow can read ({body.content_type or 'no type'})") from err
        mime = Image.MIME.get(fmt or "")
        if not mime:
            raise BackendError(f"{url}: image format {fmt!r} has no MIME type")
        return body.data, mime, size

    async def localize_images(self, images: list[tuple[str, str]], page_url: str) -> list[ImageHit]:
        """Turn ``(url, alt)`` pairs into :class:`ImageHit` s and download the first
        ``max_images`` usable ones (batches of the remaining quota, in page order, at most
        ``3 * max_images`` attempts). Failures are logged and leave ``content=None``."""
        domain = urlsplit(page_url).hostname or ""
        hits = [ImageHit(title=alt, image_url=u, page_url=page_url, domain=domain, caption=alt) for u, alt in images]
        localized, tried = 0, 0
        budget = 3 * self.max_images
        while localized < self.max_images and tried < min(len(hits), budget):
            batch = hits[tried : tried + min(self.max_images - localized, budget - tried)]
            tried += len(batch)
            results = await asyncio.gather(*(self.fetch_image(h.image_url) for h in batch), return_exceptions=True)
            for hit, res in zip(batch, results):
                if isinstance(res, BaseException):
                    if not isinstance(res, BackendError):
                        raise res
                    log.info("page image not localized: %s", res)
                    continue
                data, mime, (w, h) = res
                if min(w, h) < self.min_image_side:
                    log.info("page image %s skipped: %dx%d below %d px", hit.image_url, w, h, self.min_image_side)
                    continue
                hit.content, hit.mime = data, mime
                localized += 1
        return hits


# ==================================================================================================
# Document conversion
# ==================================================================================================
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


def pdf_to_markdown(data: bytes, max_pages: int, url: str = "") -> tuple[str, str]:
    """``(title, markdown)`` of a PDF: one ``## Page N`` section per page for the first
    ``max_pages`` pages (pypdf text extraction), then a note naming how many pages were cut.

    Raises:
        BackendError: pypdf cannot read the file (damaged, encrypted without an empty password).
    """
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
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
    except (PdfReadError, ValueError, KeyError, TypeError) as err:
        raise BackendError(f"unreadable PDF at {url}: {type(err).__name__}: {err}") from err
    if total > max_pages:
        sections.append(f"[PDF truncated: first {max_pages} of {total} pages]")
    return title, "\n\n".join(sections)
