"""URL resolution of the local web: a ``zim://<stem>/<path>`` URL, a bare entry path or a
Wikipedia article URL -> (archive, final entry). Paths are tried decoded, as given and in NFC/NFD
(:func:`kit.web.urls.zim_path_candidates`); Wikipedia titles by slug, then by the title table."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote, urlsplit

from kit.types import BackendError
from kit.web.text_clean import normalize_text
from kit.web.urls import split_zim_url, zim_path_candidates
from kit.web.zim.text import analyzer_language

if TYPE_CHECKING:
    from kit.web.zim.archive import _ZimArchive


class ZimArchives(Protocol):
    """What :func:`resolve_entry` reads from the local web (:class:`kit.web.zim.LocalZimWeb` is one, and calls
    it: this module names what it reads instead of importing that class)."""

    archives: list[_ZimArchive]

    def _archive(self, stem: str) -> _ZimArchive: ...

    def ensure_ready(self) -> object: ...


def check_unicode(text: str, what: str) -> None:
    """Raise BackendError for text that is not valid Unicode (a lone surrogate such as
    ``"\\ud800"``: no analyzer, URL or archive entry can hold it)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BackendError(f"{what} is not valid Unicode: {exc.reason} at character {exc.start}",
                           retryable=False) from None


def lookup_path(arch: _ZimArchive, path: str):
    """Entry a URL path names: decoded first (result URLs are percent-encoded), then as given
    (URLs written before encoding), then NFC/NFD variants; ``None`` if absent."""
    for cand in zim_path_candidates(path):
        entry = arch.entry(cand)
        if entry is not None:
            return entry
    return None


def lookup_title(arch: _ZimArchive, title: str, ensure_ready: Callable[[], object]):
    """Entry of the article titled ``title``: its slug as a path (``A/<Title_with_underscores>``,
    with ``.html``/``.htm``, or bare), else the archive's title table (casefolded; needs the
    extract loaded, hence ``ensure_ready``); ``None`` if absent."""
    title = normalize_text(title)
    slug = title.replace(" ", "_")
    for cand in (f"A/{slug}", f"A/{slug}.html", f"A/{slug}.htm", slug):
        entry = arch.entry(cand)
        if entry is not None:
            return entry
    ensure_ready()
    with arch.store_reads() as store:  # a damaged store is a BackendError, not a traceback
        idx = store.title_id(title.replace("_", " ").casefold())
        return arch.entry(store.record(idx)[0]) if idx is not None else None


def resolve_entry(web: ZimArchives, url: str):
    """(archive, final entry) for a ``zim://`` URL, a bare entry path or a Wikipedia URL:
    :meth:`kit.web.zim.LocalZimWeb.resolve_url` without its archive-internal check. Raises
    :class:`~kit.types.BackendError` like it."""
    if not isinstance(url, str):
        raise BackendError(f"a URL must be a string, got {type(url).__name__}", retryable=False)
    if not url.strip():
        raise BackendError("empty URL")
    url = url.strip()
    check_unicode(url, "URL")
    if url.startswith("zim://"):
        stem, path = split_zim_url(url)
        arch = web._archive(stem)
        entry = lookup_path(arch, path) if path else None
        if entry is None:
            raise BackendError(f"not found: {url} is not an entry of {arch.file.name}")
        return arch, entry
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket: "https://[::1/x"
        raise BackendError(f"not found: malformed URL {url!r} ({exc})", retryable=False) from None
    if parts.scheme in ("http", "https"):
        host = (parts.hostname or "").lower()
        if (host == "wikipedia.org" or host.endswith(".wikipedia.org")) and parts.path.startswith("/wiki/"):
            title = unquote(parts.path[len("/wiki/"):])
            lang = host.split(".")[0]
            # Archives of the URL's language first, newest snapshot first.
            order = sorted(web.archives, key=lambda a: a.date or "", reverse=True)
            order.sort(key=lambda a: a.language != analyzer_language(lang))
            for arch in order:
                entry = lookup_title(arch, title, web.ensure_ready)
                if entry is not None:
                    return arch, entry
            raise BackendError(f"not found: {url} is not in the local archives")
        raise BackendError(
            f"the local web serves only zim:// URLs (and Wikipedia article URLs present in its "
            f"archives); cannot fetch {url}")
    if parts.scheme and parts.scheme != "zim" and "/" not in parts.scheme:
        raise BackendError(f"unsupported URL scheme {parts.scheme!r} in {url}; "
                           "the local web serves only zim:// URLs")
    for arch in web.archives:
        entry = lookup_path(arch, url)
        if entry is not None:
            return arch, entry
    raise BackendError(f"not found: no archive has an entry {url!r}")
