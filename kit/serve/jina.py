"""Jina Reader's request and answer shapes for serve-web (:mod:`kit.serve.web_service`).

Requests, as Jina's clients send them: ``GET /r/<url>``, the root form ``GET /<url>`` (what
``https://r.jina.ai/<url>`` is once the host is this service), and ``POST /`` or ``POST /r`` with ``url`` in a
JSON or form body (:data:`BODY_FIELDS` are read; another name is a 400). Options:

* ``X-Return-Format`` (or Jina's older ``X-Respond-With``; body ``respondWith``): ``markdown`` (default),
  ``text`` or ``html``; ``screenshot``/``pageshot`` (no browser here) and any other value are a 400.
* ``X-Retain-Images`` (body ``retainImages``): ``all`` (default) or ``none`` (images dropped); others: 400.
* ``Accept: application/json``: Jina's envelope ``{"code": 200, "status": 20000, "data": {"title",
  "description", "url", "content", "usage": {"tokens"}}}`` (``html`` / ``text`` formats also carry the
  content under that name, as Jina does); ``Accept: text/event-stream``: one ``event: data`` whose ``data``
  is that object. Otherwise text: markdown as ``Title: / URL Source: / Markdown Content:``, text and html as
  the content alone.

Search, as ``https://s.jina.ai/<query>`` is called: ``GET /s/<query>``, ``GET /s?q=...`` or ``POST /s`` with
``{"q"}`` (``num``/``count`` 1..10, default 5): the local web's top hits, each page read as the reader reads it
(the same format and image options), the hit's snippet as ``description`` (:func:`search_answer`).

``usage.tokens`` is an estimate (4 characters a token); ``description`` is ``""`` (archive pages carry no
meta description). Other ``X-`` headers (``X-No-Cache``, ``X-Timeout``, selectors) are accepted and have no
effect: the archives are a fixed snapshot.

Errors: Jina's shape ``{"data": null, "code", "name", "status", "message", "readableMessage"}`` plus the kit's
``statusCode``. A target the archives do not hold is Jina's answer to an unreachable target: 422
``AssertionFailureError`` (status 42206), never a page of text.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from kit.harness.tool_spec import MAX_URL_CHARS
from kit.serve._http import ServiceError, content_type, parse_json, parse_pairs, read_body

FORMATS = ("markdown", "text", "html")
NO_BROWSER_FORMATS = ("screenshot", "pageshot")
RETAIN_IMAGES = ("all", "none")
BODY_FIELDS = ("url", "respondWith", "retainImages", "noCache", "timeout", "withGeneratedAlt", "withLinksSummary",
               "withImagesSummary", "targetSelector", "removeSelector", "waitForSelector", "tokenBudget")
#: Jina's error names and status codes, by HTTP status (400, 401, 422, 429 as Jina answers them).
_ERRORS = {400: ("ParamValidationError", 40001), 401: ("AuthenticationFailedError", 40103),
           403: ("AuthenticationFailedError", 40303), 404: ("ResourceNotFoundError", 40401),
           405: ("MethodNotAllowedError", 40501), 413: ("RequestTooLargeError", 41301),
           415: ("UnsupportedMediaTypeError", 41501), 422: ("AssertionFailureError", 42206),
           429: ("RateLimitTriggeredError", 42903), 500: ("InternalServerError", 50000),
           503: ("ServiceUnavailableError", 50301)}
_URL_START = re.compile(r"(?i)(https?|zim)(:|%3a)")
_ONE_SLASH = re.compile(r"(?i)^(https?|zim):/(?!/)")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_EMPTY_LINK = re.compile(r"\[\s*\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_HTML_IMG = re.compile(r"<img\b[^>]*>", re.I)


def is_reader_path(path: str) -> bool:
    """True for Jina's routes: the reader's ``/``, ``/r``, ``/r/...``, the root form ``/<url>``, and search's
    ``/s`` and ``/s/...``."""
    return (path in ("/", "/r", "/s") or path.startswith(("/r/", "/s/"))
            or _URL_START.match(path[1:]) is not None)


def is_root_target(tail: str) -> bool:
    """True when ``tail`` (the path after ``/``) is a URL for the root form (``http(s)://``, ``zim://``, or
    those percent-encoded); anything else is a route of its own (or a 404)."""
    return _URL_START.match(tail) is not None


def clean_target(target: str) -> str:
    """The URL to read: percent-decoded once when the whole URL was encoded (``https%3A%2F%2F...``), a
    ``https:/x`` (a proxy merged the slashes) repaired.

    Raises:
        ServiceError: 400 no URL, or one over the harness's URL bound.
    """
    target = target.strip()
    if not target:
        raise ServiceError(400, "no URL: GET /r/<url>, GET /<url>, or POST / with {\"url\": ...}")
    if len(target) > MAX_URL_CHARS:
        raise ServiceError(400, f"URL of {len(target)} characters is over the {MAX_URL_CHARS}-character limit")
    if re.match(r"(?i)(https?|zim)%3a", target):
        target = unquote(target)
    return _ONE_SLASH.sub(lambda m: f"{m.group(1)}://", target)


@dataclass(frozen=True)
class ReaderOptions:
    """What one reader request asks for: format, images kept, and the answer's media type."""

    fmt: str = "markdown"
    retain_images: bool = True
    answer: str = "text"  # "text", "json" or "sse"


def _choice(value: str, allowed: tuple[str, ...], what: str, extra: str = "") -> str:
    v = value.strip().lower()
    if v not in allowed:
        raise ServiceError(400, f"{what} {value!r} is not supported{extra}: use one of {', '.join(allowed)}")
    return v


def reader_options(request: Request, body: dict[str, Any]) -> ReaderOptions:
    """The options of a reader request (module docstring); 400 for a value this service cannot honour."""
    h = request.headers
    fmt = str(body.get("respondWith") or h.get("x-return-format") or h.get("x-respond-with") or "markdown")
    extra = " (no browser renders pages here)" if fmt.strip().lower() in NO_BROWSER_FORMATS else ""
    fmt = _choice(fmt, FORMATS, "return format", extra)
    retain = _choice(str(body.get("retainImages") or h.get("x-retain-images") or "all"), RETAIN_IMAGES,
                     "X-Retain-Images")
    accept = h.get("accept", "").lower()
    answer = "sse" if "text/event-stream" in accept else "json" if "application/json" in accept else "text"
    return ReaderOptions(fmt, retain == "all", answer)


async def reader_body(request: Request, limit: int) -> dict[str, Any]:
    """The JSON or form body of ``POST /`` / ``POST /r`` (``{}`` for none).

    Raises:
        ServiceError: 400 malformed, not an object, an unknown field or a ``url`` that is not a string;
            413 over ``limit``; 415 another content type.
    """
    if request.method not in ("POST", "PUT"):
        return {}
    body = await read_body(request, limit)
    ctype = content_type(request)
    if ctype == "application/x-www-form-urlencoded":
        data: Any = parse_pairs(body, "form body")
    elif ctype in ("", "application/json", "text/plain"):
        data = parse_json(body)
    else:
        raise ServiceError(415, f"unsupported content type {ctype!r}: send JSON or a form body with \"url\"")
    if not isinstance(data, dict):
        raise ServiceError(400, f"the JSON body must be an object, got {type(data).__name__}")
    unknown = sorted(k for k in data if k not in BODY_FIELDS)
    if unknown:
        raise ServiceError(400, f"unknown field {unknown[0]!r}: this reader reads {', '.join(BODY_FIELDS)}")
    if "url" in data and not isinstance(data["url"], str):
        raise ServiceError(400, f"url must be a string, got {type(data['url']).__name__}")
    return data


def markdown_text(markdown: str) -> str:
    """Plain text of the reader's Markdown: images dropped, links as their text, heading marks, emphasis and
    table rules removed."""
    text = _LINK.sub(r"\1", _EMPTY_LINK.sub("", _IMAGE.sub("", markdown)))
    text = re.sub(r"(?m)^#{1,6}\s+", "", text)
    text = re.sub(r"(\*\*|__)(.+?)\1", r"\2", text)
    text = re.sub(r"(?m)^\s*\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*$", "", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def without_images(markdown: str) -> str:
    return re.sub(r"\n{3,}", "\n\n", _EMPTY_LINK.sub("", _IMAGE.sub("", markdown)))


def reader_answer(title: str, url: str, markdown: str, html: str | None, opts: ReaderOptions) -> Response:
    """The reader's answer for one page (``markdown`` with service URLs; ``html``: the entry, for that format)."""
    if opts.fmt == "html":
        content = html if html is not None else ""
        if not opts.retain_images:
            content = _HTML_IMG.sub("", content)
    elif opts.fmt == "text":
        content = markdown_text(markdown)
    else:
        content = markdown if opts.retain_images else without_images(markdown)
    if opts.answer == "text":
        if opts.fmt == "markdown":
            return PlainTextResponse(f"Title: {title}\n\nURL Source: {url}\n\nMarkdown Content:\n{content}")
        return PlainTextResponse(content)
    data: dict[str, Any] = {"title": title, "description": "", "url": url, "content": content}
    if opts.fmt != "markdown":
        data[opts.fmt] = content
    data["usage"] = {"tokens": math.ceil(len(content) / 4)}
    if opts.answer == "json":
        return JSONResponse({"code": 200, "status": 20000, "data": data})
    event = f"event: data\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"
    return Response(event, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


#: results of one Jina search (s.jina.ai reads the top five pages); ``num``/``count`` may ask for 1 to 10
SEARCH_DEFAULT, SEARCH_MAX = 5, 10
SEARCH_FIELDS = ("q", "num", "count", "respondWith", "retainImages", "noCache", "timeout")


class JinaSearchRequest(BaseModel):
    """The result count of a Jina search: ``num`` (or ``count``), an integer 1..SEARCH_MAX written without sign,
    padding zeros or a fraction (surrounding spaces allowed); a JSON boolean is never a count."""

    num: int

    @field_validator("num", mode="before")
    @classmethod
    def _strict_count(cls, raw: Any) -> int:
        """``raw`` as an int, or ValueError with the service's message (not an exact integer, or out of range)."""
        try:
            n = int(raw)
            if isinstance(raw, bool) or str(raw).strip() != str(n):
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(f"num must be an integer from 1 to {SEARCH_MAX}, got {raw!r}") from None
        if not 1 <= n <= SEARCH_MAX:
            raise ValueError(f"num must be from 1 to {SEARCH_MAX}, got {n}")
        return n

    @classmethod
    def of(cls, raw: Any) -> JinaSearchRequest:
        """``raw`` validated as the count.

        Raises:
            ServiceError: 400 with the validator's message.
        """
        try:
            return cls.model_validate({"num": raw})
        except ValidationError as e:
            raise ServiceError(400, str(e.errors()[0]["ctx"]["error"])) from None


def search_request(query_path: str, params: dict[str, Any]) -> tuple[str, int]:
    """``(query, results)`` of a Jina search: the query from the path (``/s/<query>``, percent-decoded) or ``q``;
    the count from ``num`` or ``count`` (default :data:`SEARCH_DEFAULT`).

    Raises:
        ServiceError: 400 no query, one over 1,000 characters, a count outside 1..SEARCH_MAX, an unknown field.
    """
    unknown = sorted(k for k in params if k not in SEARCH_FIELDS)
    if unknown:
        raise ServiceError(400, f"unknown field {unknown[0]!r}: search reads {', '.join(SEARCH_FIELDS)}")
    q = unquote(query_path).strip() or str(params.get("q") or "").strip()
    if not q:
        raise ServiceError(400, "no query: GET /s/<query>, GET /s?q=..., or POST /s with {\"q\": ...}")
    if len(q) > 1000:
        raise ServiceError(400, f"query of {len(q)} characters is over the 1000-character limit")
    return q, JinaSearchRequest.of(params.get("num", params.get("count", SEARCH_DEFAULT))).num


def search_answer(results: list[tuple[str, str, str, str]], opts: ReaderOptions) -> Response:
    """Jina search's answer for ``results`` (``(title, url, description, markdown)`` each, read pages): text as
    ``[i] Title: / [i] URL Source: / [i] Description: / [i] Markdown Content:`` blocks, or with
    ``Accept: application/json`` ``{"code": 200, "status": 20000, "data": [{"title", "url", "description",
    "content", "usage"}]}`` (one ``event: data`` per result for ``text/event-stream``)."""
    items = []
    for title, url, description, markdown in results:
        content = (markdown_text(markdown) if opts.fmt == "text"
                   else markdown if opts.retain_images else without_images(markdown))
        items.append({"title": title, "url": url, "description": description, "content": content,
                      "usage": {"tokens": math.ceil(len(content) / 4)}})
    if opts.answer == "json":
        return JSONResponse({"code": 200, "status": 20000, "data": items})
    if opts.answer == "sse":
        events = "".join(f"event: data\ndata: {json.dumps(d, ensure_ascii=False)}\n\n" for d in items)
        return Response(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    blocks = [f"[{i}] Title: {d['title']}\n[{i}] URL Source: {d['url']}\n[{i}] Description: {d['description']}\n"
              f"[{i}] {'Markdown Content' if opts.fmt == 'markdown' else 'Content'}:\n{d['content']}"
              for i, d in enumerate(items, 1)]
    return PlainTextResponse("\n\n".join(blocks))


def jina_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An error in Jina's shape (plus ``statusCode``, the kit's error field on every route)."""
    name, code = _ERRORS.get(status, ("ServiceError", status * 100))
    return JSONResponse({"data": None, "code": status, "name": name, "status": code, "message": message,
                         "readableMessage": f"{name}: {message}", "statusCode": status},
                        status_code=status, headers=headers)


__all__ = ["BODY_FIELDS", "FORMATS", "RETAIN_IMAGES", "SEARCH_DEFAULT", "SEARCH_FIELDS", "SEARCH_MAX", "ReaderOptions",
           "clean_target", "is_reader_path", "is_root_target", "jina_error", "markdown_text", "reader_answer",
           "reader_body", "reader_options", "search_answer", "search_request", "without_images"]
