"""API keys of the two services (serve-web, serve-mcp): one check of the key itself and one reading of
the request's key, so both accept the same headers the same way.

A key travels in an HTTP header, whose value is bytes; only visible ASCII (``!``..``~``) survives every
client and proxy unchanged, so :func:`check_api_key` refuses anything else when the service starts,
instead of a service whose key can never match. The comparison is of bytes, in constant time.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl

_VISIBLE_ASCII = re.compile(rb"[\x21-\x7e]+")


def check_api_key(key: str | None, what: str = "--api-key") -> None:
    """Refuse a key a client could not send as a header value.

    Raises:
        ValueError: ``key`` is empty or holds anything but visible ASCII (spaces, control characters,
            non-ASCII letters); the message names ``what`` and the first bad character.
    """
    if key is None:
        return
    raw = key.encode("utf-8", "surrogatepass")
    if not raw:
        raise ValueError(f"{what} is empty")
    if _VISIBLE_ASCII.fullmatch(raw) is None:
        bad = next(c for c in key if not ("!" <= c <= "~"))
        raise ValueError(f"{what} may hold only visible ASCII characters (no spaces or non-ASCII letters: HTTP "
                         f"header values are bytes and clients encode others differently); found {bad!r}")


def request_key(headers: Iterable[tuple[bytes, bytes]], query_string: bytes = b"") -> bytes:
    """The key a request carries, as raw bytes, first found of: ``X-API-Key: <key>``; ``Authorization: Bearer
    <key>`` (the scheme is case-insensitive, RFC 9110 11.1) or a raw ``Authorization: <key>`` (one token, no
    scheme, as some Jina clients send it); the ``apiKey`` query parameter (Serper's GET form,
    ``/search?q=...&apiKey=...``). ``b""`` when there is none. Another scheme (``Basic ...``) is no key."""
    x_key = auth = b""
    for name, value in headers:
        low = name.lower()
        if low == b"x-api-key" and not x_key:
            x_key = value.strip()
        elif low == b"authorization" and not auth:
            scheme, _, rest = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                auth = rest.strip()
            elif not rest:  # a single token: the raw key
                auth = scheme
    if x_key or auth:
        return x_key or auth
    if b"apiKey=" in query_string:
        try:
            pairs = parse_qsl(query_string.decode("latin-1"), max_num_fields=64, encoding="latin-1")
        except ValueError:  # more fields than any client sends: no key is read from it
            return b""
        return next((v.strip().encode("latin-1") for k, v in pairs if k == "apiKey"), b"")
    return b""


def key_matches(headers: Iterable[tuple[bytes, bytes]], api_key: str, query_string: bytes = b"") -> bool:
    """True when the request's key (:func:`request_key`) equals ``api_key`` byte for byte (constant time)."""
    return hmac.compare_digest(request_key(headers, query_string), api_key.encode("utf-8"))


__all__ = ["check_api_key", "key_matches", "request_key"]
