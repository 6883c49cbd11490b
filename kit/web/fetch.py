"""HTTP fetch for the live web: HTML -> Markdown, PDF -> text, page images localized.

Implements the fetching half of ``web_extract`` (weagent_mmsearch Table 4: "Fetches HTML or PDF
content ... up to five localized page images") for the live backend (docs/contracts.md "Search backend").

Safety limits: only ``http``/``https`` URLs (the local ZIM web has its own ``zim://`` scheme and
never comes here); at most ``max_redirects`` redirects, each hop checked again; a byte cap on every
body (checked on ``Content-Length`` and while streaming); a wall-clock cap per attempt and, when a
:func:`time_budget` is active (e.g. the episode's), on all attempts and retry waits together; a
content-type allow-list; HTML and PDF conversion off the event loop with a time limit, pypdf's
resource limits tightened and external decoders disabled, and a cap on the extracted text; images
decoded off the event loop by :func:`kit.images.decode_image` (the registry's decoder: a header
declaring more than ``max_image_pixels`` pixels is refused before anything decodes it).
Addresses: the SSRF policy of :mod:`kit.web.fetch_guard` (an injected ``transport``, as in tests,
cannot be pinned: then the URL's host is resolved and checked before each request instead).

Split by concern: :mod:`kit.web.budget` (time budget), :mod:`kit.web.retry` (retries),
:mod:`kit.web.fetch_guard` (address policy, pinned transport), :mod:`kit.web.convert` (documents ->
Markdown); their public names are re-exported here.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
import httpx
from PIL import Image

from kit.images import ImageRejected
from kit.images import decode_image as _decode_image
from kit.types import BackendError, ImageHit, Page
from kit.web.budget import time_budget
from kit.web.convert import (
    HTML_TYPES,
    PDF_TYPES,
    TEXT_TYPES,
    _accept_document,
    _accept_image,
    _decode,
    _document_kind,
    extract_markdown_images,
    html_to_markdown,
    pdf_to_markdown,
)
from kit.web.fetch_guard import (
    AddressCheck,
    AddressRefused,
    GuardedNetworkBackend,
    GuardedTransport,
    Resolver,
    is_public_ip,
    system_resolver,
)
from kit.web.retry import RetryableHTTPStatus, RetryConfig, is_retryable_status, parse_retry_after

__all__ = [
    "AddressCheck", "AddressRefused", "GuardedNetworkBackend", "GuardedTransport", "HTML_TYPES", "HttpFetcher",
    "PDF_TYPES", "Resolver", "RetryConfig", "RetryableHTTPStatus", "TEXT_TYPES", "extract_markdown_images",
    "html_to_markdown", "is_public_ip", "is_retryable_status", "parse_retry_after", "pdf_to_markdown",
    "system_resolver", "time_budget",
]

log = logging.getLogger(__name__)

_BODY_EXCERPT = 300


_PARSE_POOL: ThreadPoolExecutor | None = None
_PARSE_POOL_LOCK = threading.Lock()


def _parse_pool() -> ThreadPoolExecutor:
    # Own small pool: a slow document must not occupy the loop's default executor, which the ZIM
    # backend and the code sandbox also use.
    global _PARSE_POOL
    with _PARSE_POOL_LOCK:
        if _PARSE_POOL is None:
            _PARSE_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kit-doc-parse")
        return _PARSE_POOL


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
        transport: ``httpx.AsyncBaseTransport`` (tests use ``httpx.MockTransport``); None: a
            :class:`GuardedTransport` that connects only to checked addresses.
        retry: :class:`RetryConfig` for timeouts, connection errors and 408/429/5xx.
        user_agent: the ``User-Agent`` header.
        max_image_pixels: images declaring more pixels (width x height) are refused (decompression
            bombs); the harness registry applies the same default.
        max_text_chars: longest Markdown/text kept from one document (a note marks the cut).
        parse_timeout_s: seconds allowed for converting one HTML or PDF document.
        network_backend: httpcore backend that makes the pinned connections (default: anyio); tests
            pass one that records or refuses connections.

    All methods raise :class:`~kit.types.BackendError`: ``retryable`` is True for timeouts,
    connection errors and 408/429/5xx after retries, False for refused URLs
    (:class:`AddressRefused`), 4xx, wrong content types, oversize bodies and documents that cannot
    be converted within the limits.
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
        max_image_pixels: int = 64_000_000,
        max_text_chars: int = 1_000_000,
        parse_timeout_s: float = 30.0,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ):
        if max_redirects < 0 or max_bytes <= 0 or max_image_bytes <= 0 or timeout_s <= 0:
            raise ValueError("timeout_s, max_bytes, max_image_bytes must be > 0 and max_redirects >= 0")
        if max_image_pixels <= 0 or max_text_chars <= 0 or parse_timeout_s <= 0 or max_pdf_pages <= 0:
            raise ValueError("max_image_pixels, max_text_chars, parse_timeout_s and max_pdf_pages must be > 0")
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
        self.max_image_pixels = max_image_pixels
        self.max_text_chars = max_text_chars
        self.parse_timeout_s = parse_timeout_s
        self._transport = transport
        self._network_backend = network_backend
        self._pinned = transport is None  # the built-in transport checks at connection time
        self._user_agent = user_agent
        self._client: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ lifecycle
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            transport = self._transport or GuardedTransport(self._checked_addresses,
                                                            network_backend=self._network_backend)
            self._client = httpx.AsyncClient(
                transport=transport,
                follow_redirects=False,  # redirects are followed by hand so each hop is checked
                timeout=httpx.Timeout(self.timeout_s),
                headers={"User-Agent": self._user_agent},
                trust_env=False,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the connection pool (idempotent)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> HttpFetcher:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ checks
    async def check_url(self, url: str, *, resolve: bool = True) -> None:
        """Refuse non-http(s) URLs and hosts that are or resolve to non-public addresses.

        ``resolve=False`` checks only the scheme, the host's presence and IP literals (the pinned
        transport checks resolved addresses when it connects).

        Raises:
            BackendError: scheme, missing host or bad port; unresolvable host (``retryable``);
                :class:`AddressRefused` for a non-public address.
        """
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as err:  # e.g. a port out of range, or an unbalanced IPv6 bracket
            raise BackendError(f"refusing URL {url!r}: {err}") from err
        if parts.scheme not in ("http", "https"):
            raise BackendError(f"refusing URL {url!r}: only http and https are fetched")
        host = (parts.hostname or "").lower()
        if not host:
            raise BackendError(f"refusing URL {url!r}: no host")
        if host in self.allow_private_hosts:
            return
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
            literal = True
        except ValueError:
            literal = False
        if literal or resolve:
            await self._checked_addresses(host, port or (443 if parts.scheme == "https" else 80), url=url)

    async def _checked_addresses(self, host: str, port: int, url: str | None = None) -> list[str]:
        """Addresses of ``host`` that may be connected to: its IP literal or its resolved
        addresses, all of which must be public unless the host is allow-listed."""
        host = host.lower().strip("[]")
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
            addresses = [host]
        except ValueError:
            try:
                addresses = list(await self.resolver(host, port))
            except OSError as err:
                raise BackendError(f"cannot resolve host {host!r}: {err}", retryable=True) from err
            if not addresses:
                raise BackendError(f"host {host!r} resolved to no address") from None
        if host in self.allow_private_hosts:
            return addresses
        bad = []
        for a in addresses:
            try:
                public = is_public_ip(a)
            except ValueError:
                public = False
            if not public:
                bad.append(a)
        if bad:
            raise AddressRefused(
                f"refusing {url or host!r}: host {host!r} is or resolves to a non-public address "
                f"({', '.join(bad)}); add it to allow_private_hosts to allow it explicitly"
            )
        return addresses

    # ------------------------------------------------------------------ raw GET
    async def _get_once(self, url: str, accept: Callable[[str, bytes], bool], limit: int, what: str) -> _Body:
        # One deadline for the whole redirect chain and body (wait_for: asyncio.timeout needs 3.11).
        return await asyncio.wait_for(self._get_chain(url, accept, limit, what), self.timeout_s)

    async def _get_chain(self, url: str, accept: Callable[[str, bytes], bool], limit: int, what: str) -> _Body:
        client = self._http()
        for _hop in range(self.max_redirects + 1):
            await self.check_url(url, resolve=not self._pinned)
            async with client.stream("GET", url) as resp:
                if resp.is_redirect:
                    location = resp.headers.get("location")
                    if not location:
                        raise BackendError(f"HTTP {resp.status_code} redirect without Location from {url}")
                    try:
                        url = str(resp.url.join(location))
                    except (httpx.InvalidURL, ValueError) as err:
                        raise BackendError(f"bad redirect Location {location[:200]!r} from {url}") from err
                    continue
                if resp.status_code >= 400:
                    await resp.aread()
                    body = resp.text[:_BODY_EXCERPT]
                    if self.retry.retries_status(resp.status_code):
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
            title, markdown = await self._convert(pdf_to_markdown, body.data, self.max_pdf_pages, body.url,
                                                  what=f"PDF {body.url}")
            return Page(url=body.url, title=title, markdown=self._cap(markdown), images=[],
                        content_type="application/pdf")
        if kind == "text":
            text = self._cap(await self._convert(_decode, body.data, body.charset, what=f"text {body.url}"))
            images = await self.localize_images(extract_markdown_images(text, body.url), body.url)
            return Page(url=body.url, title="", markdown=text, images=images, content_type=body.content_type or "text/plain")
        title, markdown = await self._convert(html_to_markdown, body.data, body.url, body.charset,
                                              what=f"HTML {body.url}")
        markdown = self._cap(markdown)
        images = await self.localize_images(extract_markdown_images(markdown, body.url), body.url)
        return Page(url=body.url, title=title, markdown=markdown, images=images, content_type="text/html")

    async def _convert(self, fn, *args, what: str):
        """Run a document conversion in the parse pool with ``parse_timeout_s``. A conversion that
        times out keeps its thread until it finishes (threads cannot be killed), but the caller
        goes on; the pool has two threads, so at most two such documents are in flight."""
        loop = asyncio.get_running_loop()
        try:
            return await asyncio.wait_for(loop.run_in_executor(_parse_pool(), lambda: fn(*args)), self.parse_timeout_s)
        except TimeoutError as err:
            raise BackendError(f"converting {what} took longer than {self.parse_timeout_s:g} s") from err
        except RecursionError as err:
            raise BackendError(f"{what} is nested too deeply to convert") from err

    def _cap(self, text: str) -> str:
        if len(text) <= self.max_text_chars:
            return text
        note = f"\n\n[document truncated: {len(text):,} characters, limit {self.max_text_chars:,}]"
        return text[: self.max_text_chars] + note

    # ------------------------------------------------------------------ images
    async def fetch_image(self, url: str) -> tuple[bytes, str, tuple[int, int]]:
        """Download one raster image: ``(bytes, mime, (width, height))``, decoded (in a worker
        thread) by :func:`kit.images.decode_image` with ``max_image_pixels`` and the registry's
        aspect limit, so an image handed on is one the evidence registry accepts.

        Raises:
            BackendError: refused URL, HTTP error, non-image content type, over ``max_image_bytes``;
                :class:`kit.images.ImageRejected` (a ``BackendError``) for bytes the decoder refuses
                (not an image, SVG and other vector formats, truncated, decompression bomb, aspect).
        """
        body = await self._get(url, _accept_image, self.max_image_bytes, "image")
        try:
            img = await asyncio.to_thread(_decode_image, body.data, max_pixels=self.max_image_pixels,
                                        error=ImageRejected)
        except ImageRejected as err:
            raise ImageRejected(err.code, f"{url} ({body.content_type or 'no type'}): {err.message}") from err
        mime = Image.MIME.get(img.format or "")
        if not mime:
            raise ImageRejected("bad_image", f"{url}: image format {img.format!r} has no MIME type")
        return body.data, mime, img.size

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
