"""The index build reads pages and images in the order they lie in the archive (issue 32):
entries' clusters from the ZIM file's own tables (:mod:`kit.web.zim.locations`), the store still
written in entry-id order, so an index is the same whatever order its pages were read in."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import libzim.reader
import numpy as np
import pytest

from kit.paths import zim_paths
from kit.web.zim import build as build_mod
from kit.web.zim import build_articles, build_images
from kit.web.zim.archive import _ZimArchive
from kit.web.zim.locations import HEADER, NO_CLUSTER, Locations
from kit.web.zim.store import STORE_FILE
from kit.web.zim.tails import TAILS_FILE


def _dirent_cluster(f, url_ptr: int, eid: int) -> tuple[int, int]:
    """(cluster, blob) of entry ``eid`` read one at a time (-1, 0 for a redirect)."""
    f.seek(url_ptr + 8 * eid)
    (ptr,) = struct.unpack("<Q", f.read(8))
    f.seek(ptr)
    mime, _plen, _ns, _rev, cluster, blob = struct.unpack("<HBcIII", f.read(16))
    return (-1, 0) if mime >= 0xFFFD else (cluster, blob)


@pytest.fixture(scope="module")
def shared(data_dir) -> list[Path]:
    paths = sorted(zim_paths(data_dir))
    if not paths:
        pytest.skip("no shared ZIM archives")
    return paths


def test_locations_are_the_dirents_of_every_entry(shared):
    for path in shared:
        locs = Locations.read(path)
        assert locs is not None
        with open(path, "rb") as f:
            count, url_ptr = (lambda h: (h[4], h[6]))(HEADER.unpack(f.read(HEADER.size)))
            want = [_dirent_cluster(f, url_ptr, e) for e in range(count)]
        got = [(-1, 0) if k == NO_CLUSTER else (int(k) >> 32, int(k) & 0xFFFFFFFF) for k in locs.key]
        assert got == want
        arch = libzim.reader.Archive(str(path))  # libzim's own view: redirects have no cluster
        assert [arch._get_entry_by_id(e).is_redirect for e in range(count)] == [c < 0 for c, _ in want]
        order = locs.order().tolist()
        assert sorted(order) == list(range(count))
        none = [e for e in range(count) if want[e][0] < 0]
        assert order[:len(none)] == none  # no cluster to read: first, in id order
        keys = [want[e] for e in order[len(none):]]
        assert keys == sorted(keys)  # then front to back through the file


def test_files_whose_tables_do_not_read_have_no_locations(tmp_path, shared):
    (tmp_path / "empty.zim").write_bytes(b"")
    (tmp_path / "text.zim").write_bytes(b"not a zim file at all" * 10)
    head = shared[0].read_bytes()[:HEADER.size + 100]  # header only: the pointer list is cut off
    (tmp_path / "cut.zim").write_bytes(head)
    for name in ("empty.zim", "text.zim", "cut.zim", "missing.zim"):
        assert Locations.read(tmp_path / name) is None


def _tables(out: Path) -> tuple:
    dumps = []
    for name, tables in ((STORE_FILE, ("blocks", "titles", "meta", "images", "occurrences",
                                       "page_titles", "aliases")), (TAILS_FILE, ("tails",))):
        db = sqlite3.connect(out / name)
        try:
            have = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            dumps.append(tuple(sorted(db.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                               for t in tables if t in have))
        finally:
            db.close()
    return (*dumps, np.load(out / "hashes.npy").tobytes())


def test_build_reads_in_cluster_order_and_writes_the_entry_order_store(shared, tmp_path, monkeypatch):
    """On a shared archive whose pages lie out of path order, the build reads articles and images
    front to back through the file, and its store, tails and hashes equal a build that read in
    entry-id order (locations unreadable)."""
    path = next(p for p in shared if "ray_charles_maxi" in p.name)
    arch = _ZimArchive(path, tmp_path / "idx")
    locs = Locations.read(path)
    read_articles: list[int] = []
    read_images: list[int] = []
    real_packed, real_read = build_mod.extract_packed, arch.read

    def spy_packed(p, eids, *a):
        read_articles.extend(eids)
        return real_packed(p, eids, *a)

    def spy_read(entry):
        read_images.append(int(entry._index))
        return real_read(entry)

    monkeypatch.setattr(build_mod, "extract_packed", spy_packed)
    monkeypatch.setattr(build_images, "IMAGE_CHUNK", 7)
    arch.read = spy_read
    (tmp_path / "ordered").mkdir()
    counts = build_mod.build_archive(arch, tmp_path / "ordered", workers=1)
    assert counts["articles"] > 50 and counts["images"] > 10
    del arch.read

    def keys(eids):
        return [int(locs.key[e]) for e in eids if locs.key[e] != NO_CLUSTER]

    assert read_articles and keys(read_articles) == sorted(keys(read_articles))
    assert read_articles != sorted(read_articles)  # this archive is out of path order
    assert read_images and keys(read_images) == sorted(keys(read_images))

    monkeypatch.setattr(Locations, "read", classmethod(lambda cls, p: None))
    (tmp_path / "plain").mkdir()
    assert build_mod.build_archive(_ZimArchive(path, tmp_path / "idx2"), tmp_path / "plain",
                                   workers=1)["articles"] == counts["articles"]
    assert _tables(tmp_path / "ordered") == _tables(tmp_path / "plain")


class _Killed(Exception):
    """Stands for a kill at a chosen point of the build."""


def _dies_on(n: int, real):
    calls = [0]

    def fn(*a, **k):
        calls[0] += 1
        if calls[0] == n:
            raise _Killed
        return real(*a, **k)
    return fn


@pytest.mark.parametrize("point", ["extract", "articles", "resolve", "images"])
def test_a_build_killed_in_any_phase_resumes_to_the_same_index(shared, tmp_path, monkeypatch, point):
    """Killed in the middle of each phase, then resumed (by then the file's tables no longer read:
    the stored reading order is what the resumed build follows), the index equals a build that
    ran through."""
    path = next(p for p in shared if "ray_charles_maxi" in p.name)
    monkeypatch.setattr(build_mod, "ARTICLE_CHUNK", 64)
    monkeypatch.setattr(build_images, "IMAGE_CHUNK", 16)
    monkeypatch.setattr(build_images, "RESOLVE_BATCH", 16)
    arch = _ZimArchive(path, tmp_path / "idx")
    (tmp_path / "ref").mkdir()
    build_mod.build_archive(arch, tmp_path / "ref", workers=1)
    with monkeypatch.context() as m:
        if point == "extract":
            m.setattr(build_mod, "extract_packed", _dies_on(3, build_mod.extract_packed))
        elif point == "articles":
            m.setattr(build_articles, "unpack_extracted", _dies_on(100, build_articles.unpack_extracted))
        elif point == "resolve":
            m.setattr(arch, "entry", _dies_on(40, arch.entry))
        else:
            m.setattr(build_images, "_hash_batch", _dies_on(3, build_images._hash_batch))
        (tmp_path / "work").mkdir()
        with pytest.raises(_Killed):
            build_mod.build_archive(arch, tmp_path / "work", workers=1)
    monkeypatch.setattr(Locations, "read", classmethod(lambda cls, p: None))
    counts = build_mod.build_archive(arch, tmp_path / "work", workers=1)
    if point == "extract":
        assert counts["chunks_resumed"] == 2
    assert not (tmp_path / "work" / build_mod.EXTRACT_FILE).exists()
    assert _tables(tmp_path / "work") == _tables(tmp_path / "ref")


def test_blocks_compressed_on_threads_and_a_lost_scratch_file(shared, tmp_path, monkeypatch, caplog):
    """The articles phase with three compressing threads writes the store of one thread; a build
    killed in its articles phase that then loses extract.sqlite (the records of the documents not
    yet in a block) starts again rather than resume from records extracted anew, and ends equal."""
    path = next(p for p in shared if "ray_charles_maxi" in p.name)
    monkeypatch.setattr(build_mod, "ARTICLE_CHUNK", 64)
    arch = _ZimArchive(path, tmp_path / "idx")
    (tmp_path / "ref").mkdir()
    build_mod.build_archive(arch, tmp_path / "ref", workers=1)
    real = build_articles._articles
    monkeypatch.setattr(build_mod, "_articles", lambda arch, db, chunk, threads=1: real(arch, db, chunk, 3))
    (tmp_path / "threads").mkdir()
    build_mod.build_archive(arch, tmp_path / "threads", workers=1)
    assert _tables(tmp_path / "threads") == _tables(tmp_path / "ref")

    with monkeypatch.context() as m:
        m.setattr(build_articles, "unpack_extracted", _dies_on(100, build_articles.unpack_extracted))
        (tmp_path / "work").mkdir()
        with pytest.raises(_Killed):
            build_mod.build_archive(arch, tmp_path / "work", workers=1)
    assert sqlite3.connect(tmp_path / "work" / "build.sqlite").execute("SELECT count(*) FROM titles").fetchone()[0]
    (tmp_path / "work" / build_mod.EXTRACT_FILE).unlink()
    with caplog.at_level("WARNING"):
        build_mod.build_archive(arch, tmp_path / "work", workers=1)
    assert "lost its extract.sqlite" in caplog.text
    assert _tables(tmp_path / "work") == _tables(tmp_path / "ref")


def test_a_build_killed_before_dropping_its_scratch_deletes_it_on_resume(shared, tmp_path, monkeypatch):
    """Killed after the articles phase committed but before extract.sqlite was deleted, the resumed
    build deletes it (the index folder keeps no scratch) and ends equal to an uninterrupted one."""
    path = next(p for p in shared if "ray_charles_maxi" in p.name)
    arch = _ZimArchive(path, tmp_path / "idx")
    (tmp_path / "ref").mkdir()
    build_mod.build_archive(arch, tmp_path / "ref", workers=1)
    with monkeypatch.context() as m:
        m.setattr(build_mod, "_drop_extract", _dies_on(1, build_mod._drop_extract))
        (tmp_path / "work").mkdir()
        with pytest.raises(_Killed):
            build_mod.build_archive(arch, tmp_path / "work", workers=1)
    assert (tmp_path / "work" / build_mod.EXTRACT_FILE).exists()
    build_mod.build_archive(arch, tmp_path / "work", workers=1)
    assert not (tmp_path / "work" / build_mod.EXTRACT_FILE).exists()
    assert _tables(tmp_path / "work") == _tables(tmp_path / "ref")
