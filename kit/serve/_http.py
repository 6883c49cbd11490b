"""Request bodies and errors shared by serve-web's Serper and Jina-reader routes (:mod:`kit.serve.web_service`).

Bodies are read with a byte bound whether or not a ``Content-Length`` was sent; JSON, form and query-string
parameters are parsed strictly (a repeated parameter, undecodable bytes or JSON nested past the parser's
stack are a 400, never a 500).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request

MAX_FIELDS = 64  # parameters in one query string or form body (Serper's have about ten)


class ServiceError(Exception):
    """An HTTP error answered in the route family's error shape (Serper's ``{"message", "statusCode"}``,
    or Jina's envelope on the reader routes)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


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


def parse_json(body: bytes) -> Any:
    """The JSON value of ``body`` (400 for malformed or too deeply nested JSON); an empty body is ``{}``
    (clients such as LangChain's Serper wrapper send ``Content-Type: application/json`` and no body, with the
    parameters in the query string)."""
    if not body.strip():
        return {}
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ServiceError(400, f"malformed JSON body: {e}") from None
    except RecursionError:  # e.g. "[" * 100000: the parser's stack, not the service, gives up
        raise ServiceError(400, "malformed JSON body: nested too deeply") from None


def parse_pairs(text: bytes | str, what: str) -> dict[str, str]:
    """``a=1&b=2`` (a query string or a form body) as a dict; 400 for undecodable bytes, a repeated name or
    more than :data:`MAX_FIELDS` fields."""
    try:
        raw = text.decode("utf-8") if isinstance(text, bytes) else text
        pairs = parse_qsl(raw, keep_blank_values=True, max_num_fields=MAX_FIELDS, errors="strict")
    except UnicodeDecodeError as e:
        raise ServiceError(400, f"{what} is not UTF-8: {e}") from None
    except ValueError as e:  # too many fields
        raise ServiceError(400, f"{what}: {e}") from None
    out: dict[str, str] = {}
    for k, v in pairs:
        if k in out:
            raise ServiceError(400, f"parameter {k!r} given twice in the {what}")
        out[k] = v
    return out


def content_type(request: Request) -> str:
    """The media type of the request body, lower case, without parameters (``""`` when none was sent)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


__all__ = ["MAX_FIELDS", "ServiceError", "content_type", "parse_json", "parse_pairs", "read_body"]
