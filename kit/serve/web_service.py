"""A Serper- and Jina-reader-compatible HTTP service over the local web (issue 17 part 6).

:func:`create_app` builds a Starlette (ASGI) app over a :class:`kit.web.zim.LocalZimWeb` with the
kit's exact-match cache (:class:`kit.web.cache.CachedBackend`) in front, so peers' code written for
Serper + Jina (MMSearch-R1, OpenSearch-VL, ...) and the kit's own :class:`kit.web.live.SerperBackend`
run offline against it. Routes (JSON bodies in Serper's shapes; docs/serve_web.md):

* ``POST /search``  ``{"q", "num"?, "gl"?, "hl"?}`` -> ``{"searchParameters", "organic": [{title,
  link, snippet, position, date?}], "credits"}`` (Table 4 ``web_search``).
* ``POST /images``  same body -> ``{"images": [{title, imageUrl, imageWidth, imageHeight,
  thumbnailUrl, thumbnailWidth, thumbnailHeight, source, domain, link, position}]}``.
* ``POST /lens``  ``{"url", "num"?}`` where ``url`` is an image of the local archives (a link this
  service gave) or an upload (``POST /upload``); or the image bytes themselves (``multipart/form-data``
  field ``image``, or an ``image/*`` body) -> ``{"organic": [{title, link, source, snippet,
  imageUrl?, thumbnailUrl?, position}], "knowledgeGraph"?}``.
* ``POST /upload``  image bytes (as for ``/lens``) -> ``{"url", "sha256"}``: an image host for
  :class:`~kit.web.live.SerperBackend`'s ``image_uploader`` (kept in this process's memory, LRU).
* ``GET /r/{url}``  Jina-reader text (``Title:`` / ``URL Source:`` / ``Markdown Content:``; JSON
  with ``Accept: application/json``) of a local page. ``url`` is a link of this service, a ``zim://``
  URL or a Wikipedia article URL present in the archives; nothing is ever fetched from the network.
* ``GET /zim/{stem}/{path}``  the raw archive entry (HTML page or image bytes) that links point to.
* ``GET /health``  archives and cache statistics.

With an ``api_key`` every route needs it (``X-API-KEY``, or ``Authorization: Bearer``) except
``/health`` (load-balancer probes) and ``/zim/...`` (the archive entries links and ``imageUrl`` point
to, which generic image downloaders fetch without a key).

Links are ``{base}/zim/<stem>/<entry path>`` (``base``: ``public_url`` or the request's own base
URL), the HTTP form of the embedded backend's ``zim://<stem>/<path>``.

Bad input never gives a 500 with a traceback: malformed JSON, missing or ill-typed fields, bodies
over ``max_body_bytes`` (413), unknown routes (404) and methods (405), a wrong key (403), a client
over its rate (429 with ``Retry-After``) all answer ``{"message", "statusCode", ...}`` JSON; an
unexpected failure answers a JSON 500 without details (logged here).
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

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kit.harness.tool_spec import MAX_QUERY_CHARS, MAX_URL_CHARS
from kit.serve.auth import check_api_key, key_matches, request_key
from kit.types import BackendError, ImageHit, RequestRejected, SearchBackend, SearchHit
from kit.web.zim.images import decode_image

log = logging.getLogger(__name__)

MAX_NUM = 100  # Serper's own ceiling on ``num``
ENGINE = "mmsearch-kit-local"


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


class ServiceError(Exception):
    """An HTTP error answered as ``{"message", "statusCode"}`` JSON."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return JSONResponse({"message": message, "statusCode": status, **extra}, status_code=status, headers=headers)


# ---------------------------------------------------------------------------------------- requests
def _no_bool(value: Any) -> Any:
    # pydantic's lax int takes true as 1: a JSON boolean is never a count
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    return value


class SearchRequest(BaseModel):
    """Body of ``/search`` and ``/images`` (Serper's; other Serper fields are accepted and ignored)."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)
    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)  # the harness's bound (kit.harness.tool_spec)
    num: int = Field(10, ge=1, le=MAX_NUM)
    gl: str = Field("us", max_length=16)
    hl: str = Field("en", max_length=16)
    _num_not_bool = field_validator("num", mode="before")(_no_bool)


class LensRequest(BaseModel):
    """JSON body of ``/lens``: an image URL of this service (or ``zim://``) and the result count."""

    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)
    url: str = Field(min_length=1, max_length=MAX_URL_CHARS)
    num: int = Field(10, ge=1, le=MAX_NUM)
    gl: str = Field("us", max_length=16)
    hl: str = Field("en", max_length=16)
    _num_not_bool = field_validator("num", mode="before")(_no_bool)


def _validation_message(err: ValidationError) -> tuple[str, list[dict[str, Any]]]:
    details = [{"field": ".".join(map(str, e["loc"])) or "(body)", "error": e["msg"]} for e in err.errors()]
    return "; ".join(f"{d['field']}: {d['error']}" for d in details), details


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
        key = request_key(scope["headers"]).decode("latin-1")
        answer = None
        # Open without the key: load-balancer probes, and the archive entries that result links and
        # imageUrl point to (generic image downloaders send no key; the entries are the archive's
        # public content, still rate-bound). Search, reader, lens and upload need it.
        open_path = scope["path"] == "/health" or scope["path"].startswith("/zim/")
        if self.api_key and not open_path and not key_matches(scope["headers"], self.api_key):
            answer = error_response(403, "Unauthorized.")  # Serper's answer to a bad key
        else:
            client = f"{key}@{(scope.get('client') or ('?', 0))[0]}"
            wait = self.rates.wait_s(client)
            if wait > 0:
                answer = error_response(429, f"rate limit exceeded: retry in {wait:.2f} s",
                                        headers={"Retry-After": str(max(1, round(wait + 0.5)))})
            else:
                length = headers.get("content-length", "")
                if length.isdigit() and int(length) > self.limits.max_body_bytes:
                    answer = error_response(413, f"request body of {length} bytes is over the "
                                                 f"{self.limits.max_body_bytes}-byte limit")
        if answer is not None:
            return await answer(scope, receive, send)
        return await self.app(scope, receive, send)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, at most ``limit`` bytes even when no Content-Length was sent (413 otherwise)."""
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise ServiceError(413, f"request body is over the {limit}-byte limit")
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # starlette's cache: request.form() parses these bytes, not the spent stream
    return body


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The JSON object of the body (400 for malformed JSON or anything but an object)."""
    import json

    body = await read_body(request, limit)
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ServiceError(400, f"malformed JSON body: {e}") from None
    except RecursionError:  # e.g. "[" * 100000: the parser's stack, not the service, gives up
        raise ServiceError(400, "malformed JSON body: nested too deeply") from None
    if not isinstance(data, dict):
        raise ServiceError(400, f"the JSON body must be an object, got {type(data).__name__}")
    return data


def _validated(model: type[BaseModel], data: dict[str, Any]) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ServiceError(400, _validation_message(e)[0]) from None


# ---------------------------------------------------------------------------------------- URLs
def service_url(url: str, base: str) -> str:
    """``zim://<stem>/<path>`` -> ``{base}/zim/<stem>/<path>`` (percent-encoding kept); others as is."""
    return f"{base}/zim/{url[6:]}" if url.startswith("zim://") else url


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


def create_app(web: Any, backend: SearchBackend | None = None, *, api_key: str | None = None,
               limits: ServiceLimits | None = None, public_url: str | None = None) -> Starlette:
    """The ASGI app of the service (module docstring).

    Args:
        web: a :class:`kit.web.zim.LocalZimWeb` (reads archive entries for ``/zim`` links and lens URLs).
        backend: what answers the four operations; default ``web`` itself. :mod:`kit.serve.web_cli`
            passes ``CachedBackend(web, cache)`` (the exact-match cache in front).
        api_key: required as ``X-API-KEY`` (or ``Authorization: Bearer``) on every route but
            ``/health`` when set; ``None``: any key is accepted (loopback use; the CLI refuses a
            non-loopback bind without one). The ``Bearer`` scheme is case-insensitive; keys are
            compared as bytes (:mod:`kit.serve.auth`).
        limits: :class:`ServiceLimits` (body size, per-client rate, uploads).
        public_url: base of the links handed out (e.g. the load balancer's URL); default the
            request's own base URL.

    Raises:
        ValueError: ``api_key`` is empty or not visible ASCII (:func:`kit.serve.auth.check_api_key`).
    """
    check_api_key(api_key, "api_key")
    backend = backend or web
    limits = limits or ServiceLimits()
    uploads = _Uploads(limits.max_uploads)

    def base_of(request: Request) -> str:
        return (public_url or str(request.base_url)).rstrip("/")

    async def entry_bytes(url: str) -> tuple[str, bytes]:
        def read() -> tuple[str, bytes]:
            arch, entry = web.resolve_url(url)
            return arch.read(entry)

        return await asyncio.to_thread(read)

    def hit_json(h: SearchHit, base: str, position: int) -> dict[str, Any]:
        item = {"title": h.title, "link": service_url(h.url, base), "snippet": h.snippet, "position": position}
        return {**item, "date": h.date} if h.date else item

    async def search(request: Request) -> Response:
        req = _validated(SearchRequest, await read_json(request, limits.max_body_bytes))
        hits = await backend.search(req.q, req.num)
        base = base_of(request)
        return JSONResponse({"searchParameters": {**req.model_dump(), "type": "search", "engine": ENGINE},
                             "organic": [hit_json(h, base, i) for i, h in enumerate(hits, 1)], "credits": 1})

    def image_json(h: ImageHit, base: str, position: int) -> dict[str, Any]:
        url = service_url(h.image_url, base)
        item: dict[str, Any] = {"title": h.title, "imageUrl": url}
        size = _image_size(h.content)
        if size:
            item |= {"imageWidth": size[0], "imageHeight": size[1]}
        item["thumbnailUrl"] = url  # the archives keep one size: the thumbnail is the image
        if size:
            item |= {"thumbnailWidth": size[0], "thumbnailHeight": size[1]}
        return item | {"source": h.domain, "domain": h.domain, "link": service_url(h.page_url, base),
                       "position": position}

    async def images(request: Request) -> Response:
        req = _validated(SearchRequest, await read_json(request, limits.max_body_bytes))
        hits = await backend.image_search(req.q, req.num)
        base = base_of(request)
        return JSONResponse({"searchParameters": {**req.model_dump(), "type": "images", "engine": ENGINE},
                             "images": [image_json(h, base, i) for i, h in enumerate(hits, 1)], "credits": 1})

    async def image_from_body(request: Request) -> tuple[bytes, dict[str, Any]]:
        """(image bytes, request echo) of a lens/upload request: JSON ``url``, multipart ``image``, raw bytes."""
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype in ("", "application/json"):
            req = _validated(LensRequest, await read_json(request, limits.max_body_bytes))
            return await image_for_url(req.url), req.model_dump()
        body = await read_body(request, limits.max_body_bytes)
        num = request.query_params.get("num", "10")
        if ctype == "multipart/form-data":
            async with request.form(max_files=1, max_fields=8) as form:
                upload = form.get("image")
                if upload is None or isinstance(upload, str):
                    raise ServiceError(400, "multipart body needs a file field named 'image'")
                body = await upload.read()
                num = str(form.get("num") or num)
        elif not (ctype.startswith("image/") or ctype == "application/octet-stream"):
            raise ServiceError(415, f"unsupported content type {ctype!r}: send JSON, multipart/form-data or image bytes")
        if not body:
            raise ServiceError(400, "empty image upload")
        return body, _validated(LensRequest, {"url": "upload", "num": num}).model_dump() | {"url": None}

    async def image_for_url(url: str) -> bytes:
        try:
            parts = urlsplit(url)
        except ValueError as e:
            raise ServiceError(400, f"malformed URL {url!r}: {e}") from None
        if parts.scheme in ("http", "https") and parts.path.startswith("/uploads/"):
            data = uploads.get(parts.path.removeprefix("/uploads/"))
            if data is None:
                raise ServiceError(404, f"no uploaded image {url} on this replica (uploads live in one "
                                        "process: send the bytes to /lens instead)")
            return data
        target = local_url(url)
        if not target.startswith("zim://"):
            raise ServiceError(400, f"lens reads only images of the local archives or uploads, not {url!r}: "
                                    "send the image bytes (multipart 'image' field or an image/* body)")
        mime, data = await entry_bytes(target)
        if not mime.startswith("image/"):
            raise ServiceError(400, f"{url} is a {mime} entry, not an image")
        return data

    async def lens(request: Request) -> Response:
        image, echo = await image_from_body(request)
        result = await backend.reverse_image_search(image, echo["num"])
        base = base_of(request)
        thumbs = {t.page_url: t for t in result.thumbnails}
        organic = []
        for i, p in enumerate(result.pages, 1):
            item: dict[str, Any] = {"title": p.title, "link": service_url(p.url, base), "source": urlsplit(p.url).netloc,
                                    "snippet": p.snippet}
            if p.url in thumbs:
                url = service_url(thumbs[p.url].image_url, base)
                item |= {"imageUrl": url, "thumbnailUrl": url}
            organic.append(item | {"position": i})
        out: dict[str, Any] = {"searchParameters": {**echo, "type": "lens", "engine": ENGINE}, "organic": organic}
        if result.knowledge_graph is not None:
            kg = result.knowledge_graph
            out["knowledgeGraph"] = {"title": kg.title, "description": kg.description,
                                     "descriptionLink": service_url(kg.url, base)}
        return JSONResponse(out | {"credits": 1})

    async def upload(request: Request) -> Response:
        image, _ = await image_from_body(request)
        try:  # only images are hosted (lens would refuse anything else; memory holds what is kept)
            await asyncio.to_thread(decode_image, image)
        except BackendError as e:
            raise ServiceError(400, f"not an image the local web can search by: {e}") from None
        digest = uploads.put(image)
        return JSONResponse({"url": f"{base_of(request)}/uploads/{digest}", "sha256": digest})

    async def reader(request: Request) -> Response:
        target = _raw_tail(request, "/r/")
        if not target:
            raise ServiceError(400, "no URL: GET /r/<url>")
        try:
            page = await backend.fetch(local_url(target))
        except BackendError as e:  # a page the archives do not hold (never fetched from the web)
            raise (e if e.retryable or isinstance(e, RequestRejected) else ServiceError(404, str(e))) from None
        base = base_of(request)
        url = service_url(page.url, base)
        markdown = page.markdown.replace("zim://", f"{base}/zim/")  # image/link URLs a client can GET
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse({"code": 200, "status": 20000,
                                 "data": {"title": page.title, "url": url, "content": markdown}})
        return PlainTextResponse(f"Title: {page.title}\n\nURL Source: {url}\n\nMarkdown Content:\n{markdown}")

    async def entry(request: Request) -> Response:
        try:
            mime, data = await entry_bytes("zim://" + _raw_tail(request, "/zim/"))
        except BackendError as e:
            raise ServiceError(404, str(e)) from None
        # Every entry, whatever its type: archive HTML, SVG, JS or XML is shown, never run, on the
        # service's origin (a sniffed or mislabelled entry too).
        headers = {"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff",
                   "Content-Security-Policy": "sandbox"}
        return Response(data, media_type=mime, headers=headers)

    async def health(request: Request) -> Response:
        cache = getattr(backend, "cache", None)
        return JSONResponse({"status": "ok", "archives": [a.stem for a in getattr(web, "archives", [])],
                             "cache": dict(cache.stats) if cache is not None else None})

    routes = [Route("/search", search, methods=["POST"]), Route("/images", images, methods=["POST"]),
              Route("/lens", lens, methods=["POST"]), Route("/upload", upload, methods=["POST"]),
              Route("/r/{url:path}", reader, methods=["GET"]), Route("/zim/{rest:path}", entry, methods=["GET"]),
              Route("/health", health, methods=["GET"])]
    app = Starlette(routes=routes, exception_handlers={
        ServiceError: _service_error, HTTPException: _http_error, BackendError: _backend_error,
        Exception: _internal_error})
    app.add_middleware(_Guard, api_key=api_key, limits=limits)
    return app


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return error_response(exc.status, exc.message, exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = {404: f"no route {request.method} {request.url.path}", 405: f"method {request.method} not allowed on "
               f"{request.url.path}"}.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, message, dict(exc.headers) if exc.headers else None)


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
    return error_response(status, text)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("serve-web: %s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, f"internal error ({type(exc).__name__}); details are in the service log")
