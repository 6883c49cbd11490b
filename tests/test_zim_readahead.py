"""Read-ahead of a search's hits (issue 32): the byte ranges read from the ZIM file itself match what
libzim reads, on archives written with python-libzim (compressed and not) and on the shared real ones;
searches queue their hits without waiting; a busy archive or a damaged file is skipped, never raised."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import libzim.reader
import libzim.writer
import pytest
from conftest import ZimItem as _Item

from kit.paths import zim_paths
from kit.web.zim import LocalZimWeb
from kit.web.zim import build as build_mod
from kit.web.zim.readahead import READ_AHEAD, ReadAhead, advise, entry_span

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="needs posix_fadvise")


def _write(path: Path, n: int, compression) -> Path:
    creator = libzim.writer.Creator(str(path)).config_indexing(False, "eng").config_compression(compression)
    with creator:
        creator.add_metadata("Language", "eng")
        for i in range(n):
            body = f"<p>River {i} flows past the town of Page {i}, a place with a bridge and a mill.</p>" * 8
            creator.add_item(_Item(f"A/Page_{i}", f"Page {i}", "text/html",
                                   f"<html><head><title>Page {i}</title></head><body>{body}</body></html>"))
        creator.add_redirection("A/Other", "Other", "A/Page_0", {})
    return path


def _spans(path: Path):
    arch = libzim.reader.Archive(str(path))
    fd = os.open(path, os.O_RDONLY)
    try:
        for i in range(arch.all_entry_count):
            e = arch._get_entry_by_id(i)
            yield e, entry_span(fd, e._index), (None if e.is_redirect else bytes(e.get_item().content)), fd
    finally:
        os.close(fd)


def test_uncompressed_spans_are_the_blobs_libzim_reads(tmp_path):
    path = _write(tmp_path / "plain.zim", 30, libzim.writer.Compression.none)
    seen = 0
    for e, span, data, fd in _spans(path):
        if e.is_redirect:
            assert span is None
        else:
            assert span is not None and os.pread(fd, span[1], span[0]) == data
            seen += "Page_" in e.path
    assert seen == 30


def test_compressed_spans_are_whole_clusters_inside_the_file(tmp_path):
    path = _write(tmp_path / "zstd.zim", 30, libzim.writer.Compression.zstd)
    size = path.stat().st_size
    pages = [(e, span) for e, span, _, _ in _spans(path) if "Page_" in e.path]
    assert len(pages) == 30
    for _, span in pages:
        assert span is not None and 0 < span[0] and span[0] + span[1] <= size and span[1] > 0
    first = open(path, "rb").read()[pages[0][1][0]]
    assert first & 0x0F > 1  # a compressed cluster's info byte


@pytest.mark.skipif(not zim_paths(), reason="needs the shared archives")
def test_every_entry_of_the_real_archives_has_a_span():
    for path in zim_paths():
        for e, span, data, fd in _spans(path):
            assert (span is None) == e.is_redirect, (path.name, e.path)
            if span is not None and span[1] == len(data) and os.pread(fd, span[1], span[0]) != data:
                pytest.fail(f"{path.name}: {e.path}: a blob-sized span that is not the blob")


def test_damaged_or_foreign_files_give_no_span(tmp_path):
    path = _write(tmp_path / "plain.zim", 3, libzim.writer.Compression.none)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert entry_span(fd, 10**6) is None and entry_span(fd, -1) is None
    finally:
        os.close(fd)
    for name, data in {"empty": b"", "short": b"ZIM\x04", "zeros": b"\0" * 200,
                       "cut": path.read_bytes()[:200]}.items():
        (tmp_path / name).write_bytes(data)
        fd = os.open(tmp_path / name, os.O_RDONLY)
        try:
            assert entry_span(fd, 0) is None, name
        finally:
            os.close(fd)
    assert advise(tmp_path / "missing.zim", [0]) == 0


@pytest.fixture
def web(tmp_path, monkeypatch):
    monkeypatch.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)
    w = LocalZimWeb([_write(tmp_path / "rivers.zim", 40, libzim.writer.Compression.none)],
                    index_dir=tmp_path / "index")
    w.ensure_ready()
    return w


def test_a_search_reads_its_hits_ahead(web):
    READ_AHEAD.join()
    before = dict(READ_AHEAD.stats)
    hits = web.search_sync("river bridge mill", 5)
    READ_AHEAD.join()
    assert len(hits) == 5
    assert READ_AHEAD.stats["queued"] == before["queued"] + 1  # one search, one archive: one item
    assert READ_AHEAD.stats["advised"] == before["advised"] + 5
    web.read_ahead = False
    web.search_sync("river bridge mill", 5)
    READ_AHEAD.join()
    assert READ_AHEAD.stats["queued"] == before["queued"] + 1


def test_a_busy_archive_is_skipped_not_waited_for(web):
    ahead = ReadAhead()
    arch = web.archives[0]
    with arch.lock:  # a fetch in another thread holds the archive
        ahead.pages(arch, ["A/Page_1", "A/Page_2"])
        done = threading.Event()
        threading.Thread(target=lambda: (ahead.join(), done.set()), daemon=True).start()
        assert done.wait(10)  # finished while the lock was held: it did not wait
    assert ahead.stats == {"queued": 1, "dropped": 1, "advised": 0}
    ahead.pages(arch, ["A/Page_1", "A/Other", "A/Missing"])  # a redirect is followed, a missing path left out
    ahead.join()
    assert ahead.stats["advised"] == 2


def test_image_and_reverse_search_ask_for_their_images_together(shared_zim_web, monkeypatch):
    from kit.web.zim import backend as backend_mod
    from kit.web.zim.readahead import advise_now

    calls: list = []
    monkeypatch.setattr(backend_mod, "advise_now",
                        lambda arch, paths: calls.append((arch.stem, list(paths))) or advise_now(arch, paths))
    web = shared_zim_web
    hits = web.image_search_sync("Ray Charles piano", 5)
    assert hits and calls
    assert sorted(p for _, paths in calls for p in paths) == sorted(h.image_url.split("/", 3)[3] for h in hits)
    arch = next(a for a in web.archives if len(a.images))
    data = arch.read(arch.entry(arch.images[0].path))[1]
    calls.clear()
    res = web.reverse_image_search_sync(data, 5)
    assert res.thumbnails and {p for _, paths in calls for p in paths} == {
        h.image_url.split("/", 3)[3] for h in res.thumbnails}
    calls.clear()
    monkeypatch.setattr(web, "read_ahead", False)
    web.image_search_sync("Ray Charles piano", 5)
    web.reverse_image_search_sync(data, 5)
    assert not calls
