"""A Serper- and Jina-reader-compatible HTTP service over the local web (issue 17 part 6, issue 28).

:func:`create_app` builds a Starlette (ASGI) app over a :class:`kit.web.zim.LocalZimWeb` with the
kit's exact-match cache (:class:`kit.web.cache.CachedBackend`) in front, so peers' code written for
Serper + Jina (MMSearch-R1, OpenSearch-VL, LangChain's ``GoogleSerperAPIWrapper``, ...) and the kit's own
:class:`kit.web.live.SerperBackend` run offline against it, unchanged but for a host name. Routes
(docs/serve_web.md; request parsing and answer shapes in :mod:`kit.serve.serper` and :mod:`kit.serve.jina`):

* ``GET|POST /search``  Serper's parameters (``q``, ``num``, ``page``, ``gl``, ``hl``, ...) from a JSON
  body, a form body or the query string; a JSON list is a batch -> ``{"searchParameters", "organic":
  [{title, link, snippet, position, date?}], "credits"}`` (Table 4 ``web_search``).
* ``GET|POST /images``  same parameters -> ``{"searchParameters", "images": [{title, imageUrl, imageWidth?,
  imageHeight?, thumbnailUrl, ..., source, domain, link, position}], "credits"}``.
* ``GET|POST /lens``  ``url`` (an image link this service gave, ``zim://``, or an upload), or the image
  bytes (``multipart/form-data`` field ``image``, or an ``image/*`` body) -> ``{"searchParameters",
  "organic": [{title, link, source, snippet, imageUrl?, thumbnailUrl?, position}], "knowledgeGraph"?}``.
* ``POST /upload``  image bytes (as for ``/lens``) -> ``{"url", "sha256"}``: an image host for
  :class:`~kit.web.live.SerperBackend`'s ``image_uploader`` (kept in this process's memory, LRU).
* Jina's reader: ``GET /r/{url}``, the root form ``GET /{url}``, ``POST /`` and ``POST /r`` with ``url`` in
  a JSON or form body; ``X-Return-Format``, ``X-Retain-Images``, ``Accept: application/json`` (Jina's
  envelope) or ``text/event-stream``. ``url`` is a link of this service, a ``zim://`` URL or a Wikipedia
  article URL present in the archives; nothing is ever fetched from the network, and any other URL is
  Jina's 422 for an unreachable target.
* ``GET /zim/{stem}/{path}``  the raw archive entry (HTML page or image bytes) that links point to.
* ``GET /health``  archives and cache statistics.
* Any other path (Serper's ``/news``, ``/scholar``, ``/places``, ...): a 404 naming the routes served.

With an ``api_key`` every route needs it (``X-API-KEY``, ``Authorization: Bearer``, a raw ``Authorization``
key, or Serper's ``?apiKey=``) except ``/health`` (load-balancer probes) and ``/zim/...`` (the archive
entries links and ``imageUrl`` point to, which generic image downloaders fetch without a key).

Links are ``{base}/zim/<stem>/<entry path>`` (``base``: ``public_url`` or the request's own base
URL), the HTTP form of the embedded backend's ``zim://<stem>/<path>``.

Bad input never gives a 500 with a traceback: malformed bodies, unknown parameters, missing or ill-typed
fields (400), bodies over ``max_body_bytes`` (413), unknown routes (404) and methods (405), a wrong key
(403 Serper / 401 reader), a client over its rate (429 with ``Retry-After``) all answer in the route's API
shape (:func:`error_for`: Serper's ``{"message", "statusCode"}``, Jina's envelope plus ``statusCode`` on the
reader's routes); an unexpected failure answers a JSON 500 without details (logged here).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kit.serve import jina, serper
from kit.serve._http import ServiceError, content_type, read_body
from kit.serve.auth import check_api_key, key_matches, request_key
from kit.serve.jina import is_reader_path, jina_error
from kit.serve.serper import (  # noqa: F401 - re-exported: the service's request models and link form
    ENGINE,
    MAX_NUM,
    LensRequest,
    SearchRequest,
    service_url,
)
from kit.types import BackendError, RequestRejected, SearchBackend
from kit.web.zim.images import decode_image

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceLimits:
    """Bounds of one service process.

    Args:
        max_body_bytes: largest request body, bytes (a lens upload is the largest legitimate one).
        rate_per_s: sustained requests per second per client (API key + client address); ``0``
            disables the bound.
        burst: requests a client may send at once before the sustained rate applies.
        max_uploads: images kept for ``/upload`` (least recently used dropped first).
        max_clients: rate buckets kept (the oldest is forgotten first).
    """

    max_body_bytes: int = 8 * 1024 * 1024
    rate_per_s: float = 500.0
    burst: int = 1000
    max_uploads: int = 256
    max_clients: int = 10_000

    def __post_init__(self):
        if self.max_body_bytes < 1 or self.rate_per_s < 0 or self.burst < 1 or self.max_uploads < 1 \
                or self.max_clients < 1:
            raise ValueError(f"bad service limits: {self}")


def error_response(status: int, message: str, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    """Serper's error shape: ``{"message", "statusCode"}``."""
    return JSONResponse({"message": message, "statusCode": status, **extra}, status_code=status, headers=headers)


def error_for(path: str, status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The error in the shape of the route family ``path`` belongs to: Jina's on the reader's routes
    (:func:`kit.serve.jina.is_reader_path`), Serper's elsewhere."""
    if is_reader_path(path):
        return jina_error(status, message, headers)
    return error_response(status, message, headers)


# ---------------------------------------------------------------------------------------- rate bound
class RateLimiter:
    """Token bucket per client: ``burst`` requests at once, then ``rate_per_s`` (0: unbounded)."""

    def __init__(self, rate_per_s: float, burst: int, *, max_clients: int = 10_000,
                 clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.max_clients, self.clock = rate_per_s, float(burst), max_clients, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # client -> (tokens, time)

    def wait_s(self, client: str) -> float:
        """0 when ``client`` may send now (one token taken), else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        tokens, then = self._buckets.pop(client, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        self._buckets[client] = (tokens, now)
        while len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return wait


class _Guard:
    """ASGI middleware in front of every route: API key, rate bound, declared body size."""

    def __init__(self, app: ASGIApp, api_key: str | None, limits: ServiceLimits):
        self.app, self.api_key, self.limits = app, api_key, limits
        self.rates = RateLimiter(limits.rate_per_s, limits.burst, max_clients=limits.max_clients)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = scope.get("query_string", b"")
        key = request_key(scope["headers"], query).decode("latin-1")
        path = scope["path"]
        answer = None
        # Open without the key: load-balancer probes, and the archive entries that result links and
        # imageUrl point to (generic image downloaders send no key; the entries are the archive's
        # public content, still rate-bound). Search, reader, lens and upload need it.
        open_path = path == "/health" or path.startswith("/zim/")
        if self.api_key and not open_path and not key_matches(scope["headers"], self.api_key, query):
            # Serper's answer to a bad key is 403 "Unauthorized."; Jina's reader answers 401
            answer = jina_error(401, "Invalid API key: send it as Authorization: Bearer <key>") \
                if is_reader_path(path) else error_response(403, "Unauthorized.")
        else:
            client = f"{key}@{(scope.get('client') or ('?', 0))[0]}"
            wait = self.rates.wait_s(client)
            if wait > 0:
                answer = error_for(path, 429, f"rate limit exceeded: retry in {wait:.2f} s",
                                   headers={"Retry-After": str(max(1, round(wait + 0.5)))})
            else:
                length = headers.get("content-length", "")
                if length.isdigit() and int(length) > self.limits.max_body_bytes:
                    answer = error_for(path, 413, f"request body of {length} bytes is over the "
                                                  f"{self.limits.max_body_bytes}-byte limit")
        if answer is not None:
            return await answer(scope, receive, send)
        return await self.app(scope, receive, send)


# ---------------------------------------------------------------------------------------- URLs
def local_url(url: str) -> str:
    """The local web's URL for ``url``: a service link (``http(s)://<any host>/zim/<stem>/<path>``) ->
    ``zim://<stem>/<path>``; anything else unchanged (``zim://`` and Wikipedia URLs are read by the
    archives' resolver, every other URL is "not found" there)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. "https://[::1/x": the archives' resolver refuses it as not found
        return url
    if parts.scheme in ("http", "https") and parts.path.startswith("/zim/"):
        return "zim://" + parts.path[5:] + (f"?{parts.query}" if parts.query else "")
    return url


def _raw_tail(request: Request, prefix: str) -> str:
    """The request target after ``prefix``, still percent-encoded (the decoded path would merge an
    encoded ``%2F`` or ``%3F`` of an entry path with real separators)."""
    raw = (request.scope.get("raw_path") or request.scope["path"].encode()).decode("latin-1")
    tail = raw.split(prefix, 1)[1] if prefix in raw else ""
    query = request.scope.get("query_string", b"").decode("latin-1")
    return tail + (f"?{query}" if query else "")


def _image_size(data: bytes | None) -> tuple[int, int] | None:
    if not data:
        return None
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:  # reads the header only
            return img.size
    except Exception:  # noqa: BLE001 - any undecodable bytes: the size is simply not reported
        return None


# ---------------------------------------------------------------------------------------- app
class _Uploads:
    """Uploaded query images by sha256 (LRU of ``capacity``)."""

    def __init__(self, capacity: int):
        self.capacity, self._items = capacity, OrderedDict[str, bytes]()

    def put(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self._items[digest] = data
        self._items.move_to_end(digest)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
        return digest

    def get(self, digest: str) -> bytes | None:
        return self._items.get(digest)


class _Routes:
    """The route handlers of one service: ``web``, the ``backend`` answering it, ``limits``, uploads."""

    def __init__(self, web: Any, backend: SearchBackend, limits: ServiceLimits, public_url: str | None):
        self.web, self.backend, self.limits, self.public_url = web, backend, limits, public_url
        self.uploads = _Uploads(limits.max_uploads)
        self.archive_dates = {a.date for a in getattr(web, "archives", []) if getattr(a, "date", None)}

    def base_of(self, request: Request) -> str:
        """The base of the links handed out: ``public_url`` or the request's own base URL."""
        return (self.public_url or str(request.base_url)).rstrip("/")

    async def entry_bytes(self, url: str) -> tuple[str, bytes]:
        """(mime, bytes) of the archive entry at ``url``, read off the event loop."""
        def read() -> tuple[str, bytes]:
            arch, entry = self.web.resolve_url(url)
            return arch.read(entry)

        return await asyncio.to_thread(read)

    async def serper_search(self, request: Request, kind: str) -> Response:
        """Serper's ``/search`` or ``/images`` (``kind``) answer: one query or a batch."""
        data = await serper.serper_params(request, self.limits.max_body_bytes)
        if isinstance(data, list):  # a batch: one answer per query, in order
            return JSONResponse(list(await asyncio.gather(*(self.one_search(request, d, kind) for d in data))))
        return JSONResponse(await self.one_search(request, data, kind))

    async def one_search(self, request: Request, data: dict[str, Any], kind: str) -> dict[str, Any]:
        """Serper's answer to one query ``data`` of ``kind`` ``"search"`` or ``"images"``."""
        req = serper.validated(SearchRequest, data, kind)
        base, echo = self.base_of(request), serper.echo(req, data, kind)
        want = serper.depth(req.num, req.page)
        backend = self.backend
        if kind == "search":
            hits = await backend.search(req.q, want) if (req.page - 1) * req.num < want else []
            return {"searchParameters": echo, "organic": [serper.organic_json(h, base, i, self.archive_dates)
                                                          for i, h in serper.page_of(hits, req.num, req.page)],
                    "credits": 1}
        images = await backend.image_search(req.q, want) if (req.page - 1) * req.num < want else []
        shown = serper.page_of(images, req.num, req.page)
        return {"searchParameters": echo, "images": [serper.image_json(h, base, i, _image_size(h.content))
                                                     for i, h in shown], "credits": 1}

    async def search(self, request: Request) -> Response:
        """``/search``."""
        return await self.serper_search(request, "search")

    async def images(self, request: Request) -> Response:
        """``/images``."""
        return await self.serper_search(request, "images")

    async def image_from_body(self, request: Request) -> tuple[bytes, dict[str, Any]]:
        """(image bytes, request echo) of a lens/upload request: ``url`` (JSON, form or query string),
        multipart ``image``, or the raw bytes."""
        ctype = content_type(request)
        if request.method == "GET" or ctype in ("", "application/json", "text/plain",
                                                 "application/x-www-form-urlencoded"):
            data = await serper.serper_params(request, self.limits.max_body_bytes)
            if isinstance(data, list):
                raise ServiceError(400, "/lens takes one image at a time: send a JSON object, not a list")
            req = serper.validated(LensRequest, data, "lens")
            return await self.image_for_url(req.url), serper.echo(req, data, "lens")
        body = await read_body(request, self.limits.max_body_bytes)
        params = serper.query_params(request)
        if ctype == "multipart/form-data":
            async with request.form(max_files=1, max_fields=8) as form:
                upload = form.get("image")
                if upload is None or isinstance(upload, str):
                    raise ServiceError(400, "multipart body needs a file field named 'image'")
                body = await upload.read()
                params |= {k: v for k, v in form.items() if k != "image" and isinstance(v, str)}
        elif not (ctype.startswith("image/") or ctype == "application/octet-stream"):
            raise ServiceError(415, f"unsupported content type {ctype!r}: send JSON, multipart/form-data or image bytes")
        if not body:
            raise ServiceError(400, "empty image upload")
        req = serper.validated(LensRequest, {"url": "upload", **params}, "lens")
        return body, serper.echo(req, params, "lens") | {"url": None}

    async def image_for_url(self, url: str) -> bytes:
        """The image bytes a lens ``url`` names: an upload of this process or a local archive image."""
        try:
            parts = urlsplit(url)
        except ValueError as e:
            raise ServiceError(400, f"malformed URL {url!r}: {e}") from None
        if parts.scheme in ("http", "https") and parts.path.startswith("/uploads/"):
            data = self.uploads.get(parts.path.removeprefix("/uploads/"))
            if data is None:
                raise ServiceError(404, f"no uploaded image {url} on this replica (uploads live in one "
                                        "process: send the bytes to /lens instead)")
            return data
        target = local_url(url)
        if not target.startswith("zim://"):
            raise ServiceError(400, f"lens reads only images of the local archives or uploads, not {url!r}: "
                                    "send the image bytes (multipart 'image' field or an image/* body)")
        mime, data = await self.entry_bytes(target)
        if not mime.startswith("image/"):
            raise ServiceError(400, f"{url} is a {mime} entry, not an image")
        return data

    async def lens(self, request: Request) -> Response:
        """``/lens``: reverse image search in Serper's shape."""
        image, echo = await self.image_from_body(request)
        result = await self.backend.reverse_image_search(image, echo.get("num", 10))
        base = self.base_of(request)
        thumbs = {t.page_url: t for t in result.thumbnails}
        organic = []
        for i, p in enumerate(result.pages, 1):
            item: dict[str, Any] = {"title": p.title, "link": service_url(p.url, base), "source": urlsplit(p.url).netloc,
                                    "snippet": p.snippet}
            if p.url in thumbs:
                url = service_url(thumbs[p.url].image_url, base)
                item |= {"imageUrl": url, "thumbnailUrl": url}
            organic.append(item | {"position": i})
        out: dict[str, Any] = {"searchParameters": echo, "organic": organic}
        if result.knowledge_graph is not None:
            kg = result.knowledge_graph
            out["knowledgeGraph"] = {"title": kg.title, "description": kg.description,
                                     "descriptionLink": service_url(kg.url, base)}
        return JSONResponse(out | {"credits": 1})

    async def upload(self, request: Request) -> Response:
        """``/upload``: keeps an image in memory and answers its URL."""
        image, _ = await self.image_from_body(request)
        try:  # only images are hosted (lens would refuse anything else; memory holds what is kept)
            await asyncio.to_thread(decode_image, image)
        except BackendError as e:
            raise ServiceError(400, f"not an image the local web can search by: {e}") from None
        digest = self.uploads.put(image)
        return JSONResponse({"url": f"{self.base_of(request)}/uploads/{digest}", "sha256": digest})

    async def read_page(self, request: Request, target: str, body: dict[str, Any]) -> Response:
        """The Jina reader's answer for ``target`` (:mod:`kit.serve.jina`)."""
        opts = jina.reader_options(request, body)  # a bad option is a 400 before any archive is read
        target = jina.clean_target(target)
        try:
            page = await self.backend.fetch(local_url(target))
            html = None
            if opts.fmt == "html":
                mime, data = await self.entry_bytes(page.url)
                html = data.decode("utf-8", "replace") if mime.startswith("text/") else \
                    f'<img src="{service_url(page.url, self.base_of(request))}">'
        except BackendError as e:  # a page the archives do not hold (never fetched from the web)
            if e.retryable or isinstance(e, RequestRejected):
                raise
            # Jina's answer to a target it cannot reach: 422 AssertionFailureError, no page text
            raise ServiceError(422, f"Failed to goto {target}: not in the local archives ({e})") from None
        base = self.base_of(request)
        markdown = page.markdown.replace("zim://", f"{base}/zim/")  # image/link URLs a client can GET
        return jina.reader_answer(page.title, service_url(page.url, base), markdown, html, opts)

    async def reader(self, request: Request) -> Response:
        """``/r/{url}``: the reader with the URL in the path (or the body)."""
        body = await jina.reader_body(request, self.limits.max_body_bytes)
        return await self.read_page(request, _raw_tail(request, "/r/") or body.get("url", ""), body)

    async def reader_post(self, request: Request) -> Response:
        """POST / and POST /r: the reader with the URL in the body."""
        body = await jina.reader_body(request, self.limits.max_body_bytes)
        return await self.read_page(request, body.get("url", ""), body)

    async def jina_search(self, request: Request) -> Response:
        """Jina search (``s.jina.ai``): the top hits of the local web, each page read (:mod:`kit.serve.jina`)."""
        body = await serper.serper_params(request, self.limits.max_body_bytes) if request.method == "POST" else {}
        if isinstance(body, list):
            raise ServiceError(400, "search takes one query: send a JSON object, not a list")
        params = {**serper.query_params(request), **body}
        opts = jina.reader_options(request, params)
        q, n = jina.search_request(_raw_tail(request, "/s/") if request.url.path.startswith("/s/") else "", params)
        base = self.base_of(request)
        results = []
        for h in await self.backend.search(q, n):
            try:
                page = await self.backend.fetch(h.url)
            except BackendError as e:
                if e.retryable:
                    raise
                continue  # a hit whose page cannot be read is left out, as Jina leaves out unreachable results
            results.append((page.title or h.title, service_url(page.url, base), h.snippet,
                            page.markdown.replace("zim://", f"{base}/zim/")))
        return jina.search_answer(results, opts)

    async def root(self, request: Request) -> Response:
        """``GET /<url>`` (Jina's root form); any other path: a Serper-shaped 404 naming the endpoints."""
        tail = _raw_tail(request, "/")
        if request.method in ("GET", "HEAD") and (not tail or jina.is_root_target(tail)):
            return await self.read_page(request, tail, {})  # "GET /" alone: the reader's 400 "no URL"
        raise ServiceError(404, serper.not_served(request.method, request.url.path.lstrip("/")))

    async def entry(self, request: Request) -> Response:
        """``/zim/{stem}/{path}``: the raw archive entry."""
        try:
            mime, data = await self.entry_bytes("zim://" + _raw_tail(request, "/zim/"))
        except BackendError as e:
            raise ServiceError(404, str(e)) from None
        # Every entry, whatever its type: archive HTML, SVG, JS or XML is shown, never run, on the
        # service's origin (a sniffed or mislabelled entry too).
        headers = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff",
                   "Content-Security-Policy": "sandbox"}
        return Response(data, media_type=mime, headers=headers)

    async def health(self, request: Request) -> Response:
        """``/health``: archives and cache statistics."""
        cache = getattr(self.backend, "cache", None)
        return JSONResponse({"status": "ok", "archives": [a.stem for a in getattr(self.web, "archives", [])],
                             "cache": dict(cache.stats) if cache is not None else None})

    def routes(self) -> list[Route]:
        """The routes in match order."""
        get_post = ["GET", "POST"]
        return [Route("/search", self.search, methods=get_post), Route("/images", self.images, methods=get_post),
                Route("/lens", self.lens, methods=get_post), Route("/upload", self.upload, methods=["POST"]),
                Route("/r/{url:path}", self.reader, methods=get_post),
                Route("/r", self.reader_post, methods=["POST"]), Route("/", self.reader_post, methods=["POST"]),
                Route("/zim/{rest:path}", self.entry, methods=["GET"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/s/{q:path}", self.jina_search, methods=get_post),
                Route("/s", self.jina_search, methods=get_post),
                # last: the reader's root form GET /<url>, and the 404 of every other path (Serper's /news ...)
                Route("/{rest:path}", self.root, methods=get_post)]


def create_app(web: Any, backend: SearchBackend | None = None, *, api_key: str | None = None,
               limits: ServiceLimits | None = None, public_url: str | None = None) -> Starlette:
    """The ASGI app of the service (module docstring).

    Args:
        web: a :class:`kit.web.zim.LocalZimWeb` (reads archive entries for ``/zim`` links and lens URLs).
        backend: what answers the four operations; default ``web`` itself. :mod:`kit.serve.web_cli`
            passes ``CachedBackend(web, cache)`` (the exact-match cache in front).
        api_key: required as ``X-API-KEY`` (or ``Authorization: Bearer``, a raw ``Authorization`` key,
            ``?apiKey=``) on every route but ``/health`` and ``/zim/...`` when set; ``None``: any key is
            accepted (loopback use; the CLI refuses a non-loopback bind without one). The ``Bearer`` scheme is case-insensitive; keys are
            compared as bytes (:mod:`kit.serve.auth`).
        limits: :class:`ServiceLimits` (body size, per-client rate, uploads).
        public_url: base of the links handed out (e.g. the load balancer's URL); default the
            request's own base URL.

    Raises:
        ValueError: ``api_key`` is empty or not visible ASCII (:func:`kit.serve.auth.check_api_key`).
    """
    check_api_key(api_key, "api_key")
    limits = limits or ServiceLimits()
    routes = _Routes(web, backend or web, limits, public_url).routes()
    app = Starlette(routes=routes, exception_handlers={
        ServiceError: _service_error, HTTPException: _http_error, BackendError: _backend_error,
        Exception: _internal_error})
    app.add_middleware(_Guard, api_key=api_key, limits=limits)
    return app


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return error_for(request.url.path, exc.status, exc.message, exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: f"no route {request.method} {request.url.path}", 405: f"method {request.method} not allowed on "
               f"{request.url.path}"}.get(exc.status_code, str(exc.detail))
    return error_for(request.url.path, exc.status_code, message, dict(exc.headers) if exc.headers else None)


async def _backend_error(request: Request, exc: Exception) -> Response:
    """The local web's refusals: unknown page -> 404, a refused image -> 422, a transient failure
    -> 503, other bad arguments -> 400."""
    assert isinstance(exc, BackendError)
    text = str(exc)
    if isinstance(exc, RequestRejected):
        status = 422
    elif exc.retryable:
        status = 503
    elif "not found" in text.lower() or "no archive" in text.lower() or "no entry" in text.lower():
        status = 404
    else:
        status = 400
    return error_for(request.url.path, status, text)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("serve-web: %s %s failed", request.method, request.url.path, exc_info=exc)
    return error_for(request.url.path, 500, f"internal error ({type(exc).__name__}); details are in the service log")
