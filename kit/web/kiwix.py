"""Download Kiwix ZIM archives for the local web on a machine without the shared data folder.

docs/contracts.md "Data location": an explicit path or ``$MMSEARCH_KIT_DATA`` first, then the shared
folder beside the checkout, then archives downloaded from Kiwix's official mirror into the kit cache
(``cache_dir()/zim``), where :func:`kit.paths.zim_paths` finds them.

Kiwix lays out its mirror as ``https://download.kiwix.org/zim/<project>/<name>.zim`` for current
releases and ``https://download.kiwix.org/archive/zim/<project>/<name>.zim`` for older ones
(``<project>`` is the name's first ``_``-separated part: ``wikipedia``, ``wiktionary``, ...).
:func:`download_zim` tries both, resumes an interrupted transfer with an HTTP range request, checks an
optional sha256 (full digest or a prefix, e.g. the 16-hex prefixes in the shared data README), checks
that libzim opens the file, and only then moves it into place, so a partial or corrupt file is never
served to the local web.

    python -m kit.cli fetch-zim wikipedia_en_100_mini_2022-10 [--sha256 07f8a6f95ac3f6d9]
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from kit.paths import cache_dir, file_sha256
from kit.web.retry import RetryableHTTPStatus, RetryConfig, RetryError, exhausted_detail, parse_retry_after, retrying

KIWIX_MIRROR = "https://download.kiwix.org"
CHUNK = 1 << 20  # bytes per write


class ZimDownloadError(RuntimeError):
    """An archive could not be downloaded, or what arrived is not the archive asked for."""


class _Incomplete(Exception):
    """The body ended before Content-Length bytes arrived (retried, resuming where it stopped)."""


# Downloads' defaults (kit.web.retry's table): 4 attempts, 1 s doubling to 30 s, connection errors,
# timeouts, cut-off bodies and 408/429/5xx retried, Retry-After up to 30 s; no per-attempt limit.
DEFAULT_RETRY = RetryConfig(max_retries=3, backoff_initial_s=1.0, backoff_max_s=30.0, retry_after_cap_s=30.0,
                            retry_on=(httpx.TransportError, RetryableHTTPStatus, _Incomplete), attempt_timeout_s=None)


def kiwix_urls(name: str, mirror: str = KIWIX_MIRROR) -> list[str]:
    """Candidate URLs of archive ``name`` (with or without ``.zim``): current, then archived.

    Raises:
        ValueError: ``name`` is empty or contains a path separator.
    """
    stem = name[:-4] if name.endswith(".zim") else name
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", stem):
        raise ValueError(f"not a Kiwix archive name: {name!r} (expected e.g. wikipedia_en_100_mini_2022-10)")
    project = stem.split("_", 1)[0]
    return [f"{mirror}/zim/{project}/{stem}.zim", f"{mirror}/archive/zim/{project}/{stem}.zim"]


def _check(path: Path, sha256: str | None) -> None:
    if sha256:
        got = file_sha256(path)
        if not got.startswith(sha256.lower()):
            raise ZimDownloadError(f"{path.name}: sha256 {got[:16]}… does not match the expected {sha256[:16]}…")
    try:
        from libzim.reader import Archive

        Archive(str(path))
    except Exception as e:  # libzim raises RuntimeError subclasses for every kind of bad file
        raise ZimDownloadError(f"{path.name} is not a readable ZIM archive: {e}") from e


def _fetch(client: httpx.Client, url: str, part: Path, progress: bool, retry: RetryConfig = DEFAULT_RETRY) -> int:
    """One attempt: append the rest of ``url`` to ``part``; returns the HTTP status (404: try the next URL).

    Raises:
        RetryableHTTPStatus: a status ``retry`` retries (408, 429, 5xx); ``httpx.HTTPStatusError``: another
            error status; ``_Incomplete``: the body ended early; ``httpx.TransportError``."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    with client.stream("GET", url, headers=headers) as r:
        if r.status_code == 404:
            return 404
        if r.status_code == 416 and offset:  # nothing left to send: the part file is complete
            return 206
        if r.status_code >= 400 and retry.retries_status(r.status_code):
            raise RetryableHTTPStatus(url, r.status_code, r.read()[:300].decode("utf-8", "replace"),
                                      parse_retry_after(r.headers.get("retry-after")))
        r.raise_for_status()
        if r.status_code == 200 and offset:  # the server ignored the range: start over
            offset = 0
        expected = int(r.headers["content-length"]) + offset if "content-length" in r.headers else None
        from tqdm.auto import tqdm

        bar = tqdm(total=expected, initial=offset, unit="B", unit_scale=True, desc=part.name[:-5], disable=not progress)
        with open(part, "ab" if offset else "wb") as f:
            for block in r.iter_bytes(CHUNK):
                f.write(block)
                bar.update(len(block))
        bar.close()
        if expected is not None and part.stat().st_size < expected:
            raise _Incomplete(f"{part.stat().st_size} of {expected} bytes")
        return r.status_code


def download_zim(source: str, dest_dir: str | Path | None = None, *, sha256: str | None = None,
                 client: httpx.Client | None = None, attempts: int | None = None, progress: bool = True,
                 retry: RetryConfig | None = None) -> Path:
    """Download a ZIM archive by Kiwix name or URL into ``dest_dir`` (default ``cache_dir()/zim``).

    Args:
        source: a Kiwix archive name (``wikipedia_en_100_mini_2022-10``) or an ``http(s)://`` URL of a
            ``.zim`` file.
        sha256: expected digest (full, or a prefix of at least 8 hex characters).
        client: an ``httpx.Client`` (tests pass one with a mock transport); default: a client that
            follows redirects with a 60 s timeout per read.
        attempts: transfer attempts per URL (default 4); each retry resumes from the bytes already
            written. Shorthand for ``retry.max_retries + 1``.
        retry: the :class:`~kit.web.retry.RetryConfig` (default :data:`DEFAULT_RETRY`: connection
            errors, timeouts, cut-off bodies and HTTP 408/429/5xx are retried; other statuses are not).
    Returns:
        The archive's path. An existing archive is checked (sha256, readable) and returned as is.
    Raises:
        ValueError: bad ``source`` or ``sha256``.
        ZimDownloadError: not found at any URL, an HTTP error that is not retried, transfer failed after
            ``attempts``, digest mismatch (the partial file is removed), or the file is not a readable ZIM.
    """
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    policy = (retry or DEFAULT_RETRY).with_(max_retries=None if attempts is None else attempts - 1)
    if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{8,64}", sha256):
        raise ValueError(f"sha256 must be 8 to 64 hex characters, got {sha256!r}")
    if "://" in source:
        if not source.startswith(("http://", "https://")) or not source.split("?")[0].endswith(".zim"):
            raise ValueError(f"expected an http(s) URL of a .zim file, got {source!r}")
        urls = [source]
    else:
        urls = kiwix_urls(source)
    name = urls[0].split("?")[0].rsplit("/", 1)[-1]
    dest = Path(dest_dir) if dest_dir else cache_dir() / "zim"
    dest.mkdir(parents=True, exist_ok=True)
    final = dest / name
    if final.exists():
        try:
            _check(final, sha256)
        except ZimDownloadError as e:
            raise ZimDownloadError(f"{e}; the file already at {final} is kept: delete it to download again") from e
        return final
    part = dest / (name + ".part")
    own = client is None
    client = client or httpx.Client(follow_redirects=True, timeout=httpx.Timeout(60.0, connect=20.0))
    try:
        for url in urls:
            try:
                for attempt in retrying(policy):
                    with attempt:
                        status = _fetch(client, url, part, progress, policy)
            except RetryError as e:
                n, last = e.last_attempt.attempt_number, e.last_attempt.exception()
                raise ZimDownloadError(f"downloading {url} failed after {n} attempts: {exhausted_detail(last)}") from last
            except httpx.HTTPError as e:  # an error status that is not retried (403, 410, ...)
                raise ZimDownloadError(f"downloading {url} failed (not retried): {e}") from e
            if status != 404:
                break
        else:
            raise ZimDownloadError(f"{name} not found at {' or '.join(urls)}")
    finally:
        if own:
            client.close()
    try:
        _check(part, sha256)
    except ZimDownloadError:
        part.unlink(missing_ok=True)
        raise
    part.replace(final)
    return final
