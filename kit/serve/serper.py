"""Serper's request and answer shapes for serve-web (:mod:`kit.serve.web_service`).

Requests: Serper's clients send their parameters as a JSON body (``requests.post(url, json=...)``), as a
form body, or in the URL query string with no body at all (LangChain's ``GoogleSerperAPIWrapper`` posts
``?q=...&num=...`` with ``Content-Type: application/json`` and an empty body; Serper's GET form is
``/search?q=...&apiKey=...``). :func:`serper_params` merges the query string with the body (a body field
wins over the same query parameter); a JSON list is a batch (one answer per object, at most
:data:`MAX_BATCH`). :data:`SEARCH_FIELDS` and :data:`LENS_FIELDS` are the parameters read; any other name
is a 400 naming the ones read, never silently dropped. ``location``, ``tbs`` and ``autocorrect`` are
Serper's and accepted, echoed, and have no effect on the local web (documented in docs/serve_web.md).

Answers: ``searchParameters`` echoes ``q``, ``gl``, ``hl``, ``type``, ``num``, ``page`` (and ``location``,
``tbs``, ``autocorrect``) as given, with ``type`` and ``engine``; ``page`` N holds results
``(N-1)*num+1 .. N*num`` of the same ranking, with those positions. A hit has ``date`` only when the page
itself states one: an archive's snapshot date is never a publication date.

Errors (raised as :class:`~kit.serve._http.ServiceError`): ``{"message", "statusCode"}``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request

from kit.harness.tool_spec import MAX_QUERY_CHARS, MAX_URL_CHARS
from kit.serve._http import ServiceError, content_type, parse_json, parse_pairs, read_body
from kit.types import ImageHit, SearchHit

MAX_NUM = 100  # Serper's own ceiling on ``num``
MAX_PAGE = 100
MAX_DEPTH = 1000  # results ranked for one query: a page past it is empty (bounded work per request)
MAX_BATCH = 100  # objects in one batch (a JSON list body), as Serper
ENGINE = "mmsearch-kit-local"
#: The Serper endpoints this service answers, and the ones it does not (a 404 that names the first).
SERVED = ("search", "images", "lens")
NOT_SERVED = ("news", "scholar", "places", "maps", "videos", "shopping", "autocomplete", "reviews", "patents",
              "webpage", "scholar-cite", "suggest", "trends")
SEARCH_FIELDS = ("q", "num", "page", "gl", "hl", "location", "tbs", "autocorrect", "type")
LENS_FIELDS = ("url", "num", "gl", "hl", "type")
_ECHO_ORDER = ("q", "url", "gl", "hl", "location", "type", "num", "page", "tbs", "autocorrect")


def _no_bool(value: Any) -> Any:
    # pydantic's lax int takes true as 1: a JSON boolean is never a count
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    return value


class SearchRequest(BaseModel):
    """Parameters of ``/search`` and ``/images`` (Serper's; see :data:`SEARCH_FIELDS`)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)  # the harness's bound (kit.harness.tool_spec)
    num: int = Field(10, ge=1, le=MAX_NUM)
    page: int = Field(1, ge=1, le=MAX_PAGE)
    gl: str = Field("us", max_length=16)
    hl: str = Field("en", max_length=16)
    location: str | None = Field(None, max_length=256)
    tbs: str | None = Field(None, max_length=256)
    autocorrect: bool | None = None
    type: str | None = Field(None, max_length=32)
    _num_not_bool = field_validator("num", "page", mode="before")(_no_bool)


class LensRequest(BaseModel):
    """Parameters of ``/lens``: an image URL of this service (or ``zim://``, or an upload) and the count."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)
    url: str = Field(min_length=1, max_length=MAX_URL_CHARS)
    num: int = Field(10, ge=1, le=MAX_NUM)
    gl: str = Field("us", max_length=16)
    hl: str = Field("en", max_length=16)
    type: str | None = Field(None, max_length=32)
    _num_not_bool = field_validator("num", mode="before")(_no_bool)


def validation_message(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(body)'}: {e['msg']}" for e in err.errors())


def validated(model: type[BaseModel], data: dict[str, Any], endpoint: str) -> Any:
    """``data`` as ``model`` (400 naming an unknown parameter, a wrong ``type`` or a bad value)."""
    fields = LENS_FIELDS if model is LensRequest else SEARCH_FIELDS
    unknown = sorted(k for k in data if k not in fields)
    if unknown:
        raise ServiceError(400, f"unknown parameter {unknown[0]!r} for /{endpoint}: this service reads "
                                f"{', '.join(fields)}")
    if data.get("type") not in (None, endpoint):
        raise ServiceError(400, f"type {data['type']!r} does not match the endpoint /{endpoint}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ServiceError(400, validation_message(e)) from None


def query_params(request: Request) -> dict[str, str]:
    """The URL's query parameters without ``apiKey`` (a key, read by :mod:`kit.serve.auth`)."""
    params = parse_pairs(request.scope.get("query_string", b""), "query string")
    params.pop("apiKey", None)
    return params


async def serper_params(request: Request, limit: int) -> dict[str, Any] | list[dict[str, Any]]:
    """The request's Serper parameters: the query string, overlaid with a JSON or form body (GET: the query
    string only). A JSON list is a batch: a list of such dicts.

    Raises:
        ServiceError: 400 malformed JSON or form, a body that is not an object or a list of objects, a batch
            over :data:`MAX_BATCH`; 413 a body over ``limit``; 415 another content type.
    """
    params: dict[str, Any] = query_params(request)
    if request.method in ("GET", "HEAD"):
        return params
    ctype = content_type(request)
    body = await read_body(request, limit)
    if ctype == "application/x-www-form-urlencoded":
        return params | parse_pairs(body, "form body")
    if ctype not in ("", "application/json", "text/plain"):
        raise ServiceError(415, f"unsupported content type {ctype!r}: send JSON, a form body or query parameters")
    data = parse_json(body)
    if isinstance(data, dict):
        return params | data
    if isinstance(data, list):
        if not data:
            raise ServiceError(400, "empty batch: send a JSON object or a list of 1 to 100 objects")
        if len(data) > MAX_BATCH:
            raise ServiceError(400, f"batch of {len(data)} queries is over the limit of {MAX_BATCH}")
        for i, item in enumerate(data):
            if not isinstance(item, dict):
                raise ServiceError(400, f"the JSON body must be an object or a list of objects; item {i} is "
                                        f"{type(item).__name__}")
        return [params | item for item in data]
    raise ServiceError(400, f"the JSON body must be an object, got {type(data).__name__}")


def echo(req: BaseModel, given: Iterable[str], kind: str) -> dict[str, Any]:
    """``searchParameters`` as Serper writes it: the parameters the client gave, ``type`` and ``engine``."""
    values = req.model_dump() | {"type": kind}
    given = set(given) | {"q", "url", "type"}
    out = {k: values[k] for k in _ECHO_ORDER if k in given and k in values and values[k] is not None}
    return out | {"engine": ENGINE}


def depth(num: int, page: int) -> int:
    """Results to rank for ``page`` of ``num``: up to the end of that page, at most :data:`MAX_DEPTH`."""
    return min(num * page, MAX_DEPTH)


def page_of(hits: list[Any], num: int, page: int) -> list[tuple[int, Any]]:
    """(position, hit) of page ``page``: ranks ``(page-1)*num+1 .. page*num`` of ``hits``."""
    start = (page - 1) * num
    return list(enumerate(hits[start:start + num], start + 1))


def service_url(url: str, base: str) -> str:
    """``zim://<stem>/<path>`` -> ``{base}/zim/<stem>/<path>`` (percent-encoding kept); others as is."""
    return f"{base}/zim/{url[6:]}" if url.startswith("zim://") else url


def organic_json(h: SearchHit, base: str, position: int, archive_dates: set[str]) -> dict[str, Any]:
    """One ``organic`` item; ``date`` only when the page states one (never the archive's snapshot date)."""
    item: dict[str, Any] = {"title": h.title, "link": service_url(h.url, base), "snippet": h.snippet,
                            "position": position}
    if h.date and h.date not in archive_dates:
        item["date"] = h.date
    return item


def image_json(h: ImageHit, base: str, position: int, size: tuple[int, int] | None) -> dict[str, Any]:
    """One ``images`` item; width and height only when the image's header gives them."""
    url = service_url(h.image_url, base)
    item: dict[str, Any] = {"title": h.title, "imageUrl": url}
    if size:
        item |= {"imageWidth": size[0], "imageHeight": size[1]}
    item["thumbnailUrl"] = url  # the archives keep one size: the thumbnail is the image
    if size:
        item |= {"thumbnailWidth": size[0], "thumbnailHeight": size[1]}
    return item | {"source": h.domain, "domain": h.domain, "link": service_url(h.page_url, base),
                   "position": position}


def not_served(method: str, endpoint: str) -> str:
    """The 404 message of a Serper endpoint (or any path) this service does not answer."""
    what = f"Serper's /{endpoint} is not served by the local web" if endpoint in NOT_SERVED else \
        f"no route {method} /{endpoint}"
    return (f"{what}: this service answers /search, /images and /lens (Serper), /upload, the Jina reader "
            "(GET /r/<url>, GET /<url>, POST / with {\"url\"}), /zim/<archive>/<path> and /health")


__all__ = ["ENGINE", "LENS_FIELDS", "MAX_BATCH", "MAX_DEPTH", "MAX_NUM", "MAX_PAGE", "NOT_SERVED", "SEARCH_FIELDS",
           "SERVED", "LensRequest", "SearchRequest", "depth", "echo", "image_json", "not_served", "organic_json",
           "page_of", "query_params", "serper_params", "service_url", "validated", "validation_message"]
