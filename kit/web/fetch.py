"""HTTP fetch for the live web: HTML -> Markdown, PDF -> text, page images localized.

Implements the fetching half of ``web_extract`` (weagent_mmsearch Table 4: "Fetches HTML or PDF
content ... up to five localized page images") for the live backend (docs/contracts.md "Search backend").

Safety limits: only ``http``/``https`` URLs (the local ZIM web has its own ``zim://`` scheme and
never comes here); at most ``max_redirects`` redirects, each hop checked again; a byte cap on every
body (checked on ``Content-Length`` and while streaming); a wall-clock cap per attempt and, when a
:func:`time_budget` is active (e.g. the episode's), on all attempts and retry waits together; a
content-type allow-list; HTML and PDF conversion off the event loop with a time limit, pypdf's
resource limits tightened and external decoders disabled, and a cap on the extracted text; images
whose header declares more than ``max_image_pixels`` pixels refused before anything decodes them.

Addresses (SSRF): a host that is, or resolves to, a loopback, private, link-local (cloud metadata
169.254.169.254 included), unique-local (``fd00:ec2::254``), reserved, multicast or otherwise
non-global address is refused, IPv4 embedded in IPv6 (``::ffff:127.0.0.1``, NAT64, 6to4, Teredo)
included, unless the host is listed in ``allow_private_hosts``. With the built-in transport the
check happens at connection time and the connection goes to exactly the address that was checked
(the host name is still used for TLS SNI and certificate checks), so a DNS answer that changes
between check and connection (DNS rebinding) cannot redirect it; every redirect hop opens its
connection the same way. Environment proxies are never used. An injected ``transport`` (tests) cannot
be pinned: then the URL's host is resolved and checked before each request instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import io
import ipaddress
import logging
import math
import re
import socket
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpcore
import httpx
from PIL import Image, UnidentifiedImageError
from tenacity import AsyncRetrying, RetryError, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base
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
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
# Not global in practice although Python's tables call parts of them global: the IETF protocol
# assignments block holds Oracle Cloud's metadata service (192.0.0.192).
_ALSO_BLOCKED = (ipaddress.ip_network("192.0.0.0/24"),)


class AddressRefused(BackendError):
    """A URL refused by the address policy (never retried)."""

    def __init__(self, message: str):
        super().__init__(message, retryable=False)


# ==================================================================================================
# Time budget shared by all retries in a task (e.g. one episode)
# ==================================================================================================
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("kit_web_deadline", default=None)


@contextlib.contextmanager
def time_budget(seconds: float) -> Iterator[float]:
    """Within this block (and asyncio tasks started in it), every :class:`RetryConfig` and
    :class:`HttpFetcher` attempt and retry wait ends by ``now + seconds`` (monotonic clock), or by an
    enclosing budget's end if that is sooner. Yields the deadline. A harness sets it once per episode
    so that backoff never sleeps past the episode's wall-clock budget.

    Raises:
        ValueError: ``seconds`` is not positive.
    """
    if not seconds > 0:
        raise ValueError(f"time budget must be > 0 seconds, got {seconds!r}")
    deadline = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(deadline if outer is None else min(deadline, outer))
    try:
        yield _DEADLINE.get()  # type: ignore[misc]
    finally:
        _DEADLINE.reset(token)



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


class _StopAtDeadline(stop_base):
    """Stop when the next wait would end past the deadline (tenacity computes the wait first)."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline
        self.fired = False

    def __call__(self, retry_state) -> bool:
        if self.deadline is None:
            return False
        self.fired = time.monotonic() + (retry_state.upcoming_sleep or 0.0) >= self.deadline
        return self.fired


def _retryable(exc: BaseException) -> bool:
    return isinstance(
        exc, (RetryableHTTPStatus, httpx.TimeoutException, httpx.TransportError, asyncio.TimeoutError)
    )


@dataclass
class RetryConfig:
    """Retries on timeouts, connection errors, 408/429/5xx with exponential backoff (seconds);
    Retry-After is honoured up to ``retry_after_cap_s``.

    ``attempt_timeout_s`` (default 60 s; None: unbounded) bounds each attempt as a whole: httpx
    timeouts are per socket operation, so a server that trickles its body never trips them.
    ``max_total_s`` (optional) bounds all attempts and waits of one :meth:`run` together; an active
    :func:`time_budget` bounds them too. A wait that would end past that deadline is not started:
    the call fails at once instead."""

    max_retries: int = 2
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 20.0
    retry_after_cap_s: float = 30.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    max_total_s: float | None = None
    attempt_timeout_s: float | None = 60.0

    def deadline(self) -> float | None:
        """Monotonic time by which a :meth:`run` starting now must end (None: unbounded)."""
        ends = [d for d in (_DEADLINE.get(), None if self.max_total_s is None else time.monotonic() + self.max_total_s)
                if d is not None]
        return min(ends) if ends else None

    async def run(self, what: str, fn: Callable[[], Awaitable]):
        """Run ``fn`` with retries; raise :class:`BackendError` (``retryable=True``) once they are
        exhausted or the time budget would be passed. Non-retryable exceptions propagate unchanged."""
        deadline = self.deadline()
        if deadline is not None and deadline <= time.monotonic():
            raise BackendError(f"{what} not attempted: the time budget is used up", retryable=True)
        at_deadline = _StopAtDeadline(deadline)
        retrying = AsyncRetrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(self.max_retries + 1) | at_deadline,
            wait=_Wait(self.backoff_initial_s, self.backoff_max_s, self.retry_after_cap_s),
            sleep=self.sleep,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    limit = self.attempt_timeout_s
                    if deadline is not None:
                        limit = min(limit or math.inf, max(deadline - time.monotonic(), 0.001))
                    if limit is None:
                        return await fn()
                    try:  # an attempt may not outlive its own limit or the budget
                        return await asyncio.wait_for(fn(), limit)
                    except asyncio.TimeoutError as e:
                        if deadline is not None and time.monotonic() >= deadline - 0.001:
                            at_deadline.fired = True
                            raise BackendError(f"{what} stopped: the time budget ran out during the attempt",
                                               retryable=True) from e
                        raise  # the attempt's own limit: a timeout like any other, retried
        except RetryError as err:
            last = err.last_attempt.exception()
            n = err.last_attempt.attempt_number
            if isinstance(last, RetryableHTTPStatus):
                detail = f"HTTP {last.status}: {last.body!r}"
            elif isinstance(last, (httpx.TimeoutException, asyncio.TimeoutError)):
                detail = f"timed out ({type(last).__name__})"
            else:
                detail = f"{type(last).__name__}: {last}"
            why = " (the next retry would pass the time budget)" if at_deadline.fired else ""
            raise BackendError(f"{what} failed after {n} attempt(s){why}: {detail}", retryable=True) from last
        raise AssertionError("unreachable")  # pragma: no cover


# ==================================================================================================
# Address check
# ==================================================================================================
async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` with the system resolver (``getaddrinfo``), without blocking the loop."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


def is_public_ip(address: str) -> bool:
    """True when ``address`` is a globally routable unicast IP: not loopback, private, unique-local
    (``fc00::/7``, e.g. ``fd00:ec2::254``), link-local (``169.254.0.0/16`` with the cloud metadata
    address, ``fe80::/10``), site-local, shared, reserved, multicast, unspecified or in
    ``192.0.0.0/24`` (Oracle Cloud's metadata service 192.0.0.192). An IPv4 address
    embedded in IPv6 (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) must be public too.

    Raises:
        ValueError: ``address`` is not an IP address.
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        if any(ip in net for net in _NAT64) or int(ip) >> 32 == 0:  # NAT64 / IPv4-compatible ::a.b.c.d
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.is_site_local or any(not is_public_ip(str(v4)) for v4 in embedded):
            return False
        if ip.ipv4_mapped is not None:
            return True  # a public IPv4 address written in IPv6 form
    if any(ip in net for net in _ALSO_BLOCKED if net.version == ip.version):
        return False
    return ip.is_global and not ip.is_multicast and not ip.is_reserved


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
# Pinned connections
# ==================================================================================================
AddressCheck = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> checked IP addresses`` to connect to; raises :class:`AddressRefused`."""


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore network backend that resolves and checks the host itself and connects to exactly the
    addresses it checked (in order), so no second DNS lookup happens between check and connect.
    Unix sockets are refused. ``inner`` makes the actual connections (default: httpcore's anyio
    backend)."""

    def __init__(self, check: AddressCheck, inner: httpcore.AsyncNetworkBackend | None = None):
        self._check = check
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options=None) -> httpcore.AsyncNetworkStream:
        addresses = await self._check(host, port)
        last: Exception | None = None
        for ip in addresses:
            try:
                return await self._inner.connect_tcp(ip, port, timeout=timeout, local_address=local_address,
                                                     socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as err:
                last = err
        raise last if last is not None else httpcore.ConnectError(f"no address to connect to for {host!r}")

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        raise AddressRefused(f"refusing to connect to the unix socket {path!r}")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """An ``httpx`` transport whose connections go through a :class:`GuardedNetworkBackend`; TLS
    still verifies the certificate against the URL's host name. Environment proxies and ``.netrc``
    are ignored (a proxy would resolve names itself, defeating the check)."""

    def __init__(self, check: AddressCheck, *, network_backend: httpcore.AsyncNetworkBackend | None = None,
                 limits: httpx.Limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)):
        super().__init__(trust_env=False, limits=limits)
        # httpx builds its httpcore pool without a way to pass a network backend, so the pool is
        # rebuilt here with the same settings plus the guarded backend.
        if not hasattr(self, "_pool"):  # pragma: no cover - guards against an httpx layout change
            raise RuntimeError("this httpx version keeps no _pool; GuardedTransport needs updating")
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=GuardedNetworkBackend(check, network_backend),
        )


# ==================================================================================================
# Fetcher
# ==================================================================================================
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

    async def __aenter__(self) -> "HttpFetcher":
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
                raise BackendError(f"host {host!r} resolved to no address")
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
        except asyncio.TimeoutError as err:
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
        """Download one raster image: ``(bytes, mime, (width, height))``.

        Raises:
            BackendError: refused URL, HTTP error, non-image content type, over ``max_image_bytes``,
                or bytes Pillow cannot identify (SVG and other vector formats included).
        """
        body = await self._get(url, _accept_image, self.max_image_bytes, "image")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(io.BytesIO(body.data)) as img:  # reads the header only: nothing decoded
                    fmt, size = img.format, img.size
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
            raise BackendError(f"{url}: refused as a decompression bomb ({err})") from err
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            raise BackendError(f"{url} is not a raster image Pillow can read ({body.content_type or 'no type'})") from err
        if size[0] <= 0 or size[1] <= 0 or size[0] * size[1] > self.max_image_pixels:
            raise BackendError(f"{url}: image of {size[0]}x{size[1]} pixels refused (limit {self.max_image_pixels:,} "
                               "pixels: a decompression bomb or not a usable image)")
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
