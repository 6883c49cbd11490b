"""Search backends: local ZIM web, live Serper-compatible API with HTTP fetch, cache (docs/contracts.md "Search backend").

Importing this package stays light: the ZIM reader (libzim, BM25) and SQLite cache load inside the
functions below, which build what every notebook needs (the local web over the shared data, a tool cache).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kit.web.cache import ToolCache
    from kit.web.zim import LocalZimWeb

from kit._lazy import lazy_exports

# the backends, imported on first use; the three helpers below are defined here
_lazy_all, __getattr__, __dir__ = lazy_exports(__name__, {
    "LocalZimWeb": "kit.web.zim", "CachedBackend": "kit.web.cache", "ToolCache": "kit.web.cache",
    "SerperBackend": "kit.web.live", "HttpFetcher": "kit.web.fetch", "RetryConfig": "kit.web.retry",
})
__all__ = [*_lazy_all, "local_zim_paths", "open_local_web", "open_tool_cache"]


def local_zim_paths(paths: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *, data_dir: str | os.PathLike | None = None,
                    names: Sequence[str] | None = None) -> list[Path]:
    """The ZIM archives of a run: ``paths`` as given (one path or a list), else every ``*.zim`` under ``<data>/zim`` (sorted;
    ``names``: only those archive stems), where ``<data>`` is ``data_dir`` or the shared data folder
    (:func:`kit.paths.shared_data_dir`: ``MMSEARCH_KIT_DATA`` or ``../shared/data``); without any, the
    archives downloaded with ``python -m kit.cli fetch-zim`` (:func:`kit.paths.zim_paths`).

    Raises:
        ValueError: both ``paths`` and ``names``; an empty list of ZIM paths or of names (``None`` means all).
        FileNotFoundError: no shared data folder and no downloaded archive; no archive under
            ``<data>/zim``; a name in ``names`` with no archive (the message lists those present);
            a ``data_dir`` that does not exist.
    """
    from kit.paths import shared_data_dir, zim_paths

    if isinstance(paths, (str, os.PathLike)):  # one archive: iterating a str would give its characters
        paths = [paths]
    if paths is not None:
        if names is not None:
            raise ValueError("pass ZIM paths or archive names, not both")
        if not len(paths):  # not a silent fallback to every archive
            raise ValueError("an empty list of ZIM paths: pass None for every archive of the data folder")
        return [Path(p) for p in paths]
    if names is not None and not len(names):
        raise ValueError("an empty list of ZIM archive names: pass None for every archive")
    if isinstance(names, str):
        names = [names]
    data = shared_data_dir(data_dir)
    found = zim_paths(data)
    if not found:
        if data is None:
            raise FileNotFoundError("no shared data folder: set MMSEARCH_KIT_DATA to a folder with zim/*.zim, pass "
                                    "ZIM paths, or download an archive (python -m kit.cli fetch-zim NAME)")
        raise FileNotFoundError(f"no ZIM archive under {data / 'zim'}")
    if names:
        by_stem = {p.stem: p for p in found}
        missing = [n for n in names if n not in by_stem]
        if missing:
            raise FileNotFoundError(f"no ZIM archive named {', '.join(map(repr, missing))} in "
                                    f"{found[0].parent}; available: {sorted(by_stem)}")
        found = [p for p in found if p.stem in set(names)]
    return found


def open_local_web(paths: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *, data_dir: str | os.PathLike | None = None,
                   names: Sequence[str] | None = None, **web_kwargs: Any) -> LocalZimWeb:
    """:class:`kit.web.zim.LocalZimWeb` over :func:`local_zim_paths` (same arguments and errors);
    ``web_kwargs`` (``index_dir``, ``keep_links``) go to the backend. Indexes load on first use."""
    from kit.web.zim import LocalZimWeb  # lazy: libzim + BM25

    return LocalZimWeb(local_zim_paths(paths, data_dir=data_dir, names=names), **web_kwargs)


def open_tool_cache(path: str | os.PathLike | None, mode: str = "readwrite", *, refresh_after_s: float | None = None,
                    clock: Callable[[], float] | None = None) -> ToolCache:
    """A :class:`kit.web.cache.ToolCache` for a notebook's ``cache_mode``: ``"readwrite"`` / ``"readonly"``
    on the SQLite file ``path``; ``"off"`` ignores ``path`` (nothing is read or written).
    ``refresh_after_s``: entries older than this many seconds are refetched and replaced (§3.2
    periodic refresh; ``readwrite`` only, a ``readonly`` snapshot never refreshes); ``None``: never.
    ``clock``: the time source (default ``time.time``).

    Raises:
        ValueError: an unknown mode; ``path`` is not a SQLite database (the message names it); a bad
            ``refresh_after_s``.
        FileNotFoundError: ``"readonly"`` on a missing file. IsADirectoryError: ``path`` is a directory.
    """
    import sqlite3
    import time

    from kit.web.cache import ToolCache

    timing: dict[str, Any] = {"refresh_after_s": refresh_after_s, "clock": clock or time.time}
    if mode == "off":
        return ToolCache(None, mode="off", **timing)
    if path is not None and Path(path).is_dir():
        raise IsADirectoryError(f"tool cache path {os.fspath(path)!r} is a directory: give a SQLite file path")
    try:
        cache = ToolCache(path, mode=mode, **timing)
        if cache._db is not None:  # a read-only connection opens lazily: read the schema now, not at the first hit
            cache._db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as e:
        raise ValueError(f"tool cache {os.fspath(path)!r} is not a usable SQLite database: {e}") from e
    return cache
