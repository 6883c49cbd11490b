"""``zim://`` URLs of the local web: building them percent-encoded and reading them back.

A result URL is ``zim://<archive stem>/<entry path>`` with both parts percent-encoded as RFC 3986
requires (UTF-8 bytes of non-ASCII characters, spaces, ``?``, ``#``, ``%``, quotes, brackets...
become ``%XX``; unreserved characters, ``/`` and the sub-delimiters ``!$&'()*+,;=:@`` stay as they
are). So a URL printed in a tool observation is one whitespace-free token that an agent (or the
kit's demonstrator, which reads ``URL: (\\S+)``) can copy back verbatim, and ``?``/``#`` in an entry
path (Gutenberg, StackExchange archives) can no longer be read as a query or fragment.

Reading is lenient: :func:`zim_path_candidates` yields the decoded path first (the canonical reading
of an encoded URL), then the text as given (URLs written by older versions of the kit, before
encoding) and Unicode NFC/NFD variants (archives and queries may store ``é`` either way); a raw
``#``/``?`` is tried as part of the path before it is read as a fragment or query.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from urllib.parse import quote, unquote

#: Characters left unencoded in a path: RFC 3986 ``pchar`` minus ``%`` (always encoded), plus "/".
PATH_SAFE = "/!$&'()*+,;=:@-._~"
_VALID = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def zim_url(stem: str, path: str) -> str:
    """``zim://<stem>/<path>`` with stem and entry path percent-encoded (UTF-8).

    >>> zim_url("gutenberg_en", "A/Moby Dick; or, The Whale?.html")
    'zim://gutenberg_en/A/Moby%20Dick;%20or,%20The%20Whale%3F.html'
    """
    return f"zim://{quote(stem, safe='')}/{quote(path, safe=PATH_SAFE)}"


def is_valid_url(url: str) -> bool:
    """True when ``url`` is an absolute URL made only of RFC 3986 characters (scheme, then
    unreserved/reserved characters; every ``%`` starts a two-hex-digit escape). Raw spaces,
    non-ASCII characters, quotes, ``<>{}|\\^``` ` and stray ``%`` make it invalid."""
    return bool(isinstance(url, str) and _VALID.fullmatch(url) and not _BAD_ESCAPE.search(url))


def split_zim_url(url: str) -> tuple[str, str]:
    """(decoded archive stem, entry-path part as written) of ``zim://<stem>/<path>``.

    Raises:
        ValueError: ``url`` does not start with ``zim://``.
    """
    if not url.startswith("zim://"):
        raise ValueError(f"not a zim:// URL: {url!r}")
    stem, _, path = url[len("zim://"):].partition("/")
    return unquote(stem), path


def zim_path_candidates(path: str) -> Iterator[str]:
    """Entry paths that ``path`` (the part after ``zim://<stem>/``, or a bare path) may name, most
    likely first, each once, then the NFC and NFD forms of each.

    * No raw ``#``/``?`` (every URL the kit writes encodes them as ``%23``/``%3F``): decoded; as
      given; decoded as a whole.
    * A raw ``#`` or ``?`` (a legacy or agent-typed URL): it may belong to the entry path
      (``A/C#_(programming_language)``, ``A/What?``), so the path as given and decoded as a whole
      come first, and only then the path without query/fragment (``A/Singer#Career`` ->
      ``A/Singer``): an article named by the text before the ``#`` (``A/C``) is never served in
      place of the one named in full.
    """
    bare = path.split("#", 1)[0].split("?", 1)[0]
    if bare == path:
        order = (unquote(path), path)
    else:
        order = (path, unquote(path), unquote(bare), bare)
    seen: set[str] = set()
    for cand in order:
        for form in (cand, unicodedata.normalize("NFC", cand), unicodedata.normalize("NFD", cand)):
            if form and form not in seen:
                seen.add(form)
                yield form
