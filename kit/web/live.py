"""Live search backend over a Serper-compatible API (docs/contracts.md "Search backend": "live API
(Serper-compatible) with HTTP fetch").

Endpoints (all ``POST {base_url}/<endpoint>`` with a JSON body and the ``X-API-KEY`` header):

* ``/search``  ``{"q", "num", "gl", "hl"}`` -> ``organic[]`` (title, link, snippet, date) ->
  :class:`~kit.types.SearchHit` (Table 4 ``web_search``: titles, URLs, snippets, publication times).
* ``/images``  ``{"q", "num", "gl", "hl"}`` -> ``images[]`` (title, imageUrl, thumbnailUrl, link,
  domain/source) -> :class:`~kit.types.ImageHit` with the thumbnail downloaded ("localizes
  successful thumbnails", Table 4 ``web_search_for_image``); when the thumbnail cannot be fetched the
  full image is tried, and a hit whose image could not be fetched keeps ``content=None``.
* ``/lens``    ``{"url", "gl", "hl"}`` -> ``organic[]`` / ``visual_matches[]`` (title, link, source,
  imageUrl, thumbnailUrl) and ``knowledgeGraph`` -> :class:`~kit.types.ReverseImageResult`
  (Table 4 ``web_search_based_on_image``). The lens endpoint takes an image **URL**, not bytes: the
  query image must be reachable on the public web. Give the backend an ``image_uploader``
  (``bytes -> public URL``, sync or async) that puts the image on an image host you control;
  without one, reverse search raises :class:`~kit.types.BackendError` saying so.
* ``fetch(url)`` goes through :class:`kit.web.fetch.HttpFetcher`, or, when ``reader_base_url`` is
  set, through a Jina-reader-compatible service (``GET {reader_base_url}/{url}`` answering
  ``Title: / URL Source: / Published Time: / Markdown Content:`` text).

Locale (Table 4: "query language selects the search locale automatically"): a query containing
kana is sent with ``gl=jp, hl=ja``, Hangul with ``gl=kr, hl=ko``, other CJK ideographs with
``gl=cn, hl=zh-cn``; everything else uses the configured defaults (``us``/``en``).

Retries: 429, 408, 5xx, timeouts and connection errors are retried with exponential backoff
(Retry-After honoured); other 4xx fail at once with the API's message.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from kit.types import BackendError, ImageHit, KnowledgeGraph, Page, ReverseImageResult, SearchHit
from kit.web.fetch import (
    HttpFetcher,
    RetryableHTTPStatus,
    RetryConfig,
    extract_markdown_images,
    parse_retry_after,
)

log = logging.getLogger(__name__)

ImageUploader = Callable[[bytes], str | Awaitable[str]]
"""``(image bytes) -> public URL`` of the uploaded image; may be a plain or an async function."""

_BODY_EXCERPT = 300

# Unicode blocks used to pick the search locale (stdlib ``re`` has no script classes).
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f]")
_HANGUL = re.compile(r"[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")


def locale_for_query(query: str, default: tuple[str, str] = ("us", "en")) -> tuple[str, str]:
    """``(gl, hl)`` for a query: kana -> ``("jp", "ja")``, Hangul -> ``("kr", "ko")``, other CJK
    ideographs -> ``("cn", "zh-cn")``, otherwise ``default`` (Table 4, ``web_search``)."""
    if _KANA.search(query):
        return "jp", "ja"
    if _HANGUL.search(query):
        return "kr", "ko"
    if _HAN.search(query):
        return "cn", "zh-cn"
    return default


def parse_reader_text(text: str, requested_url: str) -> tuple[str, str, str, str | None]:
    """Split a Jina-reader text answer into ``(title, url, markdown, published_time)``.

    The answer starts with ``Title:``, ``URL Source:`` and optional ``Published Time:`` lines, then
    ``Markdown Content:`` and the page. An answer without that header is taken as Markdown as is.
    """
    marker = re.search(r"^Markdown Content:[ \t]*\n?", text, re.M)
    if not marker:
        return "", requested_url, text, None
    head, body = text[: marker.start()], text[marker.end() :]
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    return fields.get("title", ""), fields.get("url source") or requested_url, body, fields.get("published time")


_TARGET_ERROR = re.compile(r"^Warning:\s*Target URL returned error (\d{3})\b[^\n]*", re.M | re.I)


def reader_target_error(text: str) -> str | None:
    """The ``Warning: Target URL returned error 404: Not Found`` line of a Jina-reader answer's header (the
    reader answers 200 with the target's error page as its content, e.g. ``Unknown.``), else None. Only the
    header before ``Markdown Content:`` is read: a page about HTTP errors is not its own error."""
    marker = re.search(r"^Markdown Content:", text, re.M)
    head = text[: marker.start()] if marker else text[:2000]
    m = _TARGET_ERROR.search(head)
    return m.group(0).strip() if m and int(m.group(1)) >= 400 else None


def _domain(url: str) -> str:
    host = urlsplit(url).hostname or ""
    return host[4:] if host.startswith("www.") else host


def _checked(resp: httpx.Response, url: str, what: str, retry: RetryConfig) -> httpx.Response:
    """``resp`` when it is a success; statuses ``retry`` retries (408, 429, 5xx) raise for a retry,
    others raise :class:`BackendError` naming ``what``."""
    if resp.status_code >= 400:
        body = resp.text[:_BODY_EXCERPT]
        if retry.retries_status(resp.status_code):
            raise RetryableHTTPStatus(url, resp.status_code, body, parse_retry_after(resp.headers.get("retry-after")))
        raise BackendError(f"{what} failed with HTTP {resp.status_code}: {body!r}")
    return resp


class SerperBackend:
    """:class:`~kit.types.SearchBackend` over the Serper API (``name = "serper"``).

    Args:
        api_key: Serper key; ``None`` reads ``$SERPER_API_KEY``.
        base_url: API root (a compatible proxy or a local replay server may stand in).
        fetcher: :class:`HttpFetcher` for pages and thumbnails (default: a new one).
        transport: ``httpx.AsyncBaseTransport`` for the API client (tests use
            ``httpx.MockTransport``); the fetcher has its own.
        image_uploader: ``bytes -> public URL`` used by :meth:`reverse_image_search`.
        reader_base_url: Jina-reader-compatible service used by :meth:`fetch` instead of the
            fetcher (e.g. ``https://r.jina.ai``); ``reader_api_key`` (``$JINA_API_KEY``) is sent as
            a bearer token when set.
        default_locale: ``(gl, hl)`` for queries without CJK script.
        timeout_s: per-request timeout of API calls, seconds.
        retry: :class:`RetryConfig` (timeouts, connection errors, 408/429/5xx).
        max_thumbnail_concurrency: parallel thumbnail downloads.

    Raises:
        ValueError: no API key (argument or environment).

    Every search method raises :class:`~kit.types.BackendError` for empty queries, ``num < 1``,
    HTTP errors (non-retryable 4xx at once, ``retryable=True`` after retries), and answers that are
    not JSON objects.
    """

    name = "serper"

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str = "https://google.serper.dev",
        fetcher: HttpFetcher | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        image_uploader: ImageUploader | None = None,
        reader_base_url: str | None = None,
        reader_api_key: str | None = None,
        default_locale: tuple[str, str] = ("us", "en"),
        timeout_s: float = 20.0,
        retry: RetryConfig | None = None,
        max_thumbnail_concurrency: int = 8,
    ):
        key = api_key if api_key is not None else os.environ.get("SERPER_API_KEY")
        if not key:
            raise ValueError("SerperBackend needs an API key: pass api_key or set SERPER_API_KEY")
        self.api_key = key
        self.base_url = base_url.rstrip("/")
        self.fetcher = fetcher or HttpFetcher()
        self.image_uploader = image_uploader
        self.reader_base_url = reader_base_url.rstrip("/") if reader_base_url else None
        self.reader_api_key = reader_api_key if reader_api_key is not None else os.environ.get("JINA_API_KEY")
        self.default_locale = default_locale
        self.timeout_s = timeout_s
        self.retry = retry or RetryConfig()
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        if max_thumbnail_concurrency < 1:
            raise ValueError(f"max_thumbnail_concurrency must be >= 1, got {max_thumbnail_concurrency}")
        self.max_thumbnail_concurrency = max_thumbnail_concurrency

    # ------------------------------------------------------------------ lifecycle
    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self._transport, timeout=httpx.Timeout(self.timeout_s))
        return self._client

    async def aclose(self) -> None:
        """Close the API client and the fetcher (idempotent)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await self.fetcher.aclose()

    async def __aenter__(self) -> SerperBackend:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ API call
    async def _post(self, endpoint: str, payload: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/{endpoint}"

        async def once() -> httpx.Response:
            resp = await self._http().post(url, json=payload, headers={"X-API-KEY": self.api_key})
            return _checked(resp, url, f"Serper {endpoint}", self.retry)

        resp = await self.retry.run(f"Serper {endpoint}", once)
        try:
            data = resp.json()
        except ValueError as err:
            raise BackendError(f"Serper {endpoint} answered malformed JSON: {resp.text[:_BODY_EXCERPT]!r}") from err
        if not isinstance(data, dict):
            raise BackendError(f"Serper {endpoint} answered {type(data).__name__}, not an object")
        return data

    def _payload(self, query: str, num: int, **extra: Any) -> dict[str, Any]:
        if not query or not query.strip():
            raise BackendError("empty search query")
        if num < 1:
            raise BackendError(f"num must be >= 1, got {num}")
        gl, hl = locale_for_query(query, self.default_locale)
        return {"q": query.strip(), "num": int(num), "gl": gl, "hl": hl, **extra}

    # ------------------------------------------------------------------ search
    async def search(self, query: str, num: int) -> list[SearchHit]:
        """Web search: up to ``num`` organic results in rank order."""
        data = await self._post("search", self._payload(query, num))
        hits = []
        for item in _items(data, "organic", "search"):
            link = item.get("link")
            if not link:
                log.warning("Serper organic result without link ignored: %r", item)
                continue
            hits.append(
                SearchHit(
                    title=str(item.get("title") or ""),
                    url=str(link),
                    snippet=str(item.get("snippet") or ""),
                    date=str(item["date"]) if item.get("date") else None,
                )
            )
        return hits[:num]

    async def image_search(self, query: str, num: int) -> list[ImageHit]:
        """Text-to-image search: up to ``num`` images with their thumbnails localized."""
        data = await self._post("images", self._payload(query, num))
        items = [i for i in _items(data, "images", "images") if i.get("imageUrl") or i.get("thumbnailUrl")][:num]
        slots = asyncio.Semaphore(self.max_thumbnail_concurrency)
        return list(await asyncio.gather(*(self._image_hit(i, slots) for i in items)))

    async def reverse_image_search(self, image: bytes, num: int) -> ReverseImageResult:
        """Reverse image search through the lens endpoint (needs ``image_uploader``, see module
        docstring): up to ``num`` related pages (``organic`` then ``visual_matches``, duplicate links
        removed; lens results have no snippet, so ``snippet`` holds the source site name), the
        optional knowledge-graph match, and the thumbnails of those pages that have an image
        (localized when they download; ``content=None`` otherwise)."""
        if num < 1:
            raise BackendError(f"num must be >= 1, got {num}")
        if not image:
            raise BackendError("reverse image search got an empty image")
        if self.image_uploader is None:
            raise BackendError(
                "reverse image search needs an image host: Serper's lens endpoint takes an image URL, "
                "so configure SerperBackend(image_uploader=...) with a function that uploads the "
                "bytes and returns a public URL"
            )
        try:
            uploaded = self.image_uploader(image)
            if inspect.isawaitable(uploaded):
                uploaded = await uploaded
        except BackendError:
            raise
        except Exception as err:  # the uploader is user code: report whatever it raised
            raise BackendError(f"image upload for reverse search failed: {type(err).__name__}: {err}", retryable=True) from err
        if not isinstance(uploaded, str) or urlsplit(uploaded).scheme not in ("http", "https"):
            raise BackendError(f"image_uploader returned {uploaded!r}, not an http(s) URL")
        gl, hl = self.default_locale
        data = await self._post("lens", {"url": uploaded, "gl": gl, "hl": hl})
        matches = _items(data, "organic", "lens") + _items(data, "visual_matches", "lens") + _items(data, "visualMatches", "lens")
        pages: list[SearchHit] = []
        seen: set[str] = set()
        for item in matches:
            link = item.get("link")
            if not link or link in seen:
                continue
            seen.add(link)
            pages.append(
                SearchHit(
                    title=str(item.get("title") or ""),
                    url=str(link),
                    snippet=str(item.get("snippet") or item.get("source") or ""),
                    date=str(item["date"]) if item.get("date") else None,
                )
            )
        pages = pages[:num]
        by_link = {i.get("link"): i for i in matches if i.get("link")}
        with_images = [by_link[p.url] for p in pages if by_link[p.url].get("thumbnailUrl") or by_link[p.url].get("imageUrl")]
        slots = asyncio.Semaphore(self.max_thumbnail_concurrency)
        thumbnails = list(await asyncio.gather(*(self._image_hit(i, slots) for i in with_images)))
        kg = data.get("knowledgeGraph")
        knowledge = None
        if isinstance(kg, dict) and kg.get("title"):
            knowledge = KnowledgeGraph(
                title=str(kg["title"]),
                description=str(kg.get("description") or ""),
                url=str(kg.get("website") or kg.get("descriptionLink") or kg.get("link") or ""),
            )
        return ReverseImageResult(pages=pages, knowledge_graph=knowledge, thumbnails=thumbnails)

    async def _image_hit(self, item: dict[str, Any], slots: asyncio.Semaphore) -> ImageHit:
        image_url = str(item.get("imageUrl") or item.get("thumbnailUrl"))
        page_url = str(item.get("link") or "")
        hit = ImageHit(
            title=str(item.get("title") or ""),
            image_url=image_url,
            page_url=page_url,
            domain=str(item.get("domain") or _domain(page_url) or item.get("source") or ""),
        )
        candidates = [u for u in (item.get("thumbnailUrl"), item.get("imageUrl")) if u]
        async with slots:
            for url in dict.fromkeys(candidates):
                try:
                    hit.content, hit.mime, _ = await self.fetcher.fetch_image(str(url))
                    break
                except BackendError as err:
                    log.info("image %s not localized: %s", url, err)
        return hit

    # ------------------------------------------------------------------ fetch
    async def fetch(self, url: str) -> Page:
        """Fetch a page as Markdown: through the reader service when configured, else
        :meth:`HttpFetcher.fetch`. Page images are localized by the fetcher either way."""
        if not self.reader_base_url:
            return await self.fetcher.fetch(url)
        await self.fetcher.check_url(url)  # the reader fetches for us: apply the same URL policy
        reader_url = f"{self.reader_base_url}/{url}"
        headers = {"Accept": "text/plain"}
        if self.reader_api_key:
            headers["Authorization"] = f"Bearer {self.reader_api_key}"

        async def once() -> httpx.Response:
            return _checked(await self._http().get(reader_url, headers=headers), reader_url, f"reader for {url}",
                            self.retry)

        resp = await self.retry.run(f"reader {url}", once)
        target_error = reader_target_error(resp.text)
        if target_error:  # the target's error page is not evidence: a structured fetch error
            raise BackendError(f"reader for {url}: {target_error[len('Warning:'):].strip()}")
        title, source, markdown, _published = parse_reader_text(resp.text, url)
        if not markdown.strip():
            raise BackendError(f"reader returned an empty page for {url}")
        images = await self.fetcher.localize_images(extract_markdown_images(markdown, source), source)
        return Page(url=source, title=title, markdown=markdown, images=images, content_type="text/html")


def _items(data: dict[str, Any], key: str, endpoint: str) -> list[dict[str, Any]]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BackendError(f"Serper {endpoint}: field {key!r} is {type(value).__name__}, not a list")
    return [v for v in value if isinstance(v, dict)]
