"""Downloading ZIM archives (kit.web.kiwix) through a format-true local stand-in for Kiwix's mirror:
a real shared archive served over an httpx mock transport with range requests, 404s on the current
path (archived releases), a body that breaks off mid-transfer (resumed), and corrupt payloads."""

from __future__ import annotations

import hashlib

import httpx
import pytest

from kit.paths import file_sha256, zim_paths
from kit.web.kiwix import ZimDownloadError, download_zim, kiwix_urls

NAME = "wikipedia_en_100_mini_2022-10"


@pytest.fixture
def archive(data_dir):
    p = data_dir / "zim" / f"{NAME}.zim"
    if not p.is_file():
        pytest.skip(f"{p} is not in the shared data")
    return p.read_bytes()


class Mirror:
    """Serves ``body`` at ``path`` with HTTP range support; ``cut`` breaks the first response off early."""

    def __init__(self, body: bytes, path: str, cut: int | None = None):
        self.body, self.path, self.cut, self.requests = body, path, cut, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.url.path, request.headers.get("range")))
        if request.url.path != self.path:
            return httpx.Response(404)
        start = int(request.headers["range"].split("=")[1].rstrip("-")) if "range" in request.headers else 0
        rest = self.body[start:]
        headers = {"content-length": str(len(rest))}
        if self.cut is not None:  # promise everything, send only part: the client must resume
            rest, self.cut = rest[: self.cut], None
        status = 206 if start else 200
        return httpx.Response(status, headers=headers, content=rest)


def _client(mirror):
    return httpx.Client(transport=httpx.MockTransport(mirror))


def test_urls_current_then_archived():
    assert kiwix_urls(NAME) == [f"https://download.kiwix.org/zim/wikipedia/{NAME}.zim",
                                f"https://download.kiwix.org/archive/zim/wikipedia/{NAME}.zim"]
    with pytest.raises(ValueError):
        kiwix_urls("../etc/passwd")
    with pytest.raises(ValueError):
        kiwix_urls("wikipedia en mini")


def test_download_from_archive_path_with_resume_and_digest(archive, tmp_path):
    mirror = Mirror(archive, f"/archive/zim/wikipedia/{NAME}.zim", cut=len(archive) // 3)
    path = download_zim(NAME, tmp_path, sha256=hashlib.sha256(archive).hexdigest()[:16], client=_client(mirror), progress=False)
    assert path.read_bytes() == archive and not list(tmp_path.glob("*.part"))
    paths = [p for p, _ in mirror.requests]
    assert paths[0] == f"/zim/wikipedia/{NAME}.zim"  # current path first (404), then the archive
    ranges = [r for p, r in mirror.requests if "archive" in p]
    assert ranges == [None, f"bytes={len(archive) // 3}-"]  # the broken transfer resumed where it stopped
    from kit.web.zim import LocalZimWeb

    assert LocalZimWeb([path]).name  # the local web opens it
    # a second call finds the archive in place and sends no request
    n = len(mirror.requests)
    assert download_zim(NAME, tmp_path, client=_client(mirror), progress=False) == path and len(mirror.requests) == n


def test_digest_mismatch_and_corrupt_archive_are_refused(archive, tmp_path):
    mirror = Mirror(archive, f"/zim/wikipedia/{NAME}.zim")
    with pytest.raises(ZimDownloadError, match="sha256"):
        download_zim(NAME, tmp_path, sha256="0" * 16, client=_client(mirror), progress=False)
    assert not list(tmp_path.iterdir())  # nothing half-written is left to be served
    junk = Mirror(b"<html>not a zim</html>" * 100, "/files/x.zim")
    with pytest.raises(ZimDownloadError, match="not a readable ZIM"):
        download_zim("https://example.org/files/x.zim", tmp_path, client=_client(junk), progress=False)
    assert not list(tmp_path.iterdir())


def test_not_found_and_bad_input(tmp_path):
    mirror = Mirror(b"", "/nowhere")
    with pytest.raises(ZimDownloadError, match="not found"):
        download_zim(NAME, tmp_path, client=_client(mirror), progress=False)
    with pytest.raises(ValueError):
        download_zim("ftp://example.org/a.zim", tmp_path)
    with pytest.raises(ValueError):
        download_zim(NAME, tmp_path, sha256="xyz")
    with pytest.raises(ValueError):
        download_zim(NAME, tmp_path, sha256="a" * 65)


def test_transport_errors_retry_then_fail(tmp_path):
    calls = []

    def broken(request):
        calls.append(request)
        raise httpx.ConnectError("mirror unreachable")

    with pytest.raises(ZimDownloadError, match="after 2 attempts"):
        download_zim(NAME, tmp_path, client=httpx.Client(transport=httpx.MockTransport(broken)), attempts=2,
                     progress=False)
    assert len(calls) == 2


def test_zim_paths_falls_back_to_downloaded_archives(tmp_path, monkeypatch, archive):
    import kit.paths

    monkeypatch.delenv("MMSEARCH_KIT_DATA", raising=False)
    monkeypatch.setattr(kit.paths, "PROJECT_ROOT", tmp_path / "checkout")  # no ../shared/data beside it
    monkeypatch.setenv("MMSEARCH_KIT_CACHE", str(tmp_path / "cache"))
    assert zim_paths() == []
    (tmp_path / "cache" / "zim").mkdir(parents=True)
    (tmp_path / "cache" / "zim" / f"{NAME}.zim").write_bytes(archive)
    assert [p.name for p in zim_paths()] == [f"{NAME}.zim"]
    assert file_sha256(zim_paths()[0]) == hashlib.sha256(archive).hexdigest()


def test_busy_mirror_is_retried_honouring_retry_after(archive, tmp_path):
    mirror = Mirror(archive, f"/zim/wikipedia/{NAME}.zim")
    busy = [503, 429]
    seen = []

    def handler(request):
        if busy:
            seen.append(busy[0])
            return httpx.Response(busy.pop(0), headers={"retry-after": "0"}, text="busy")
        return mirror(request)

    path = download_zim(NAME, tmp_path, client=httpx.Client(transport=httpx.MockTransport(handler)), progress=False)
    assert path.read_bytes() == archive and seen == [503, 429]  # Retry-After 0: no back-off sleep


def test_refused_download_is_not_retried(tmp_path):
    calls = []

    def forbidden(request):
        calls.append(request)
        return httpx.Response(403, text="forbidden")

    with pytest.raises(ZimDownloadError, match="403.*not retried|not retried.*403"):
        download_zim(NAME, tmp_path, client=httpx.Client(transport=httpx.MockTransport(forbidden)), progress=False)
    assert len(calls) == 1 and not list(tmp_path.glob("*.zim"))


def test_download_attempts_follow_the_policy(tmp_path):
    from kit.web.kiwix import DEFAULT_RETRY

    slept, calls = [], []

    def broken(request):
        calls.append(request)
        raise httpx.ReadTimeout("slow mirror", request=request)

    with pytest.raises(ZimDownloadError, match="after 3 attempts.*timed out"):
        download_zim(NAME, tmp_path, client=httpx.Client(transport=httpx.MockTransport(broken)), progress=False,
                     retry=DEFAULT_RETRY.with_(max_retries=2, sync_sleep=slept.append))
    assert len(calls) == 3 and slept == [1.0, 2.0]  # the downloads' back-off: 1 s doubling
