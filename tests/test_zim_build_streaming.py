"""The local web's per-archive build and load at scale (issue 17, parts 2 and 3): on-disk stores
read on demand (no per-article Python objects at load), bounded-memory streaming build, the same
result from a process pool, a SIGKILLed build that resumes without redoing finished chunks, one
builder among concurrent ones, a clear error and no half index on a full disk, and a warning with
counts for damaged content. Archives are generated here with ``libzim.writer``."""

from __future__ import annotations

import errno
import io
import logging
import sqlite3
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import libzim.reader
import libzim.writer
import numpy as np
import pytest
import tantivy
from conftest import ZimItem as _Item
from PIL import Image

from kit.web import zim as zimmod
from kit.web.zim import LocalZimWeb, ZimError, build_images
from kit.web.zim import build as build_mod
from kit.web.zim.archive import _ZimArchive
from kit.web.zim.locations import Locations
from kit.web.zim.store import STORE_FILE

WORDS = ("river", "castle", "engine", "violin", "harbor", "glacier", "orchard", "comet", "bridge",
         "lantern", "meadow", "falcon", "quartz", "canyon", "tundra", "basalt")
N_IMAGES = 12


def _png(seed: int) -> bytes:
    img = Image.effect_noise((200, 150), 40 + 9 * seed).convert("RGB")
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def write_archive(path: Path, n: int) -> Path:
    """An English archive of ``n`` short articles; article i shows image ``i % N_IMAGES``, every
    50th also a corrupt PNG (``I/broken.png``: undecodable)."""
    creator = libzim.writer.Creator(str(path)).config_indexing(False, "eng").config_compression(
        libzim.writer.Compression.none)  # zstd would cost seconds per 1000 articles
    with creator:
        creator.add_metadata("Language", "eng")
        for i in range(n):
            w = [WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5, 7)]
            title = f"Article {i} {w[0]}"
            imgs = f'<figure><img src="../I/img_{i % N_IMAGES}.png" alt="{w[1]} picture">' \
                   f"<figcaption>The {w[2]} of article {i}</figcaption></figure>"
            if i % 50 == 0:
                imgs += '<img src="../I/broken.png" alt="broken">'
            body = (f"<p>{title} is about the {w[0]} and the {w[1]} near a {w[2]}. "
                    f"It also mentions a {w[3]} and number {i}.</p>{imgs}"
                    f"<h2>History</h2><p>The {w[3]} history of item {i} is long.</p>")
            html = f"<html><head><title>{title}</title></head><body>{body}</body></html>"
            creator.add_item(_Item(f"A/Article_{i}", title, "text/html", html))
        for k in range(N_IMAGES):
            creator.add_item(_Item(f"I/img_{k}.png", "", "image/png", _png(k)))
        creator.add_item(_Item("I/broken.png", "", "image/png", b"\x89PNG\r\n\x1a\n" + b"x" * 300))
    return path


@pytest.fixture(scope="module")
def zims(tmp_path_factory) -> dict[int, Path]:
    d = tmp_path_factory.mktemp("genzim")
    return {n: write_archive(d / f"gen_{n}.zim", n) for n in (100, 1000)}


@pytest.fixture(autouse=True)
def inline_build(monkeypatch):
    """Builds run in this process unless a test asks for a pool (spawning costs seconds)."""
    monkeypatch.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)


def _dump(index_dir: Path) -> tuple:
    """Everything a finished extract holds, for equality checks."""
    db = sqlite3.connect(index_dir / STORE_FILE)
    try:
        tables = tuple(db.execute(f"SELECT * FROM {t} ORDER BY {order}").fetchall()
                       for t, order in (("blocks", "id"), ("titles", "key, id"), ("meta", "key"),
                                        ("images", "rowid"), ("occurrences", "rowid"),
                                        ("page_titles", "doc")))
        # a title row for exactly the pages that show a kept image
        assert [d for (d,) in db.execute("SELECT doc FROM page_titles ORDER BY doc")] == [
            d for (d,) in db.execute("SELECT DISTINCT doc FROM occurrences ORDER BY doc")]
    finally:
        db.close()
    return tables, np.load(index_dir / "hashes.npy").tobytes()


def test_load_builds_no_per_article_objects(zims, tmp_path):
    peaks, web_peaks = {}, {}
    for n, path in zims.items():
        LocalZimWeb([path], index_dir=tmp_path).archives[0].ensure_ready()  # build
        arch = LocalZimWeb([path], index_dir=tmp_path).archives[0]  # a cold start
        tracemalloc.start()
        arch.ensure_ready()
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert len(arch.articles) == n and len(arch.images) == N_IMAGES
        assert isinstance(arch.hashes, np.memmap)
        web = LocalZimWeb([path], index_dir=tmp_path)
        web.ensure_ready()  # builds the collection
        web = LocalZimWeb([path], index_dir=tmp_path)  # the whole backend's cold start
        tracemalloc.start()
        web.ensure_ready()
        web_peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    # 1000 articles as Python dicts alone would be ~0.5 MB; the views read rows on demand.
    print("load peaks", peaks, web_peaks)
    # The collection's (segment, doc) -> key table is read from disk: 8 bytes an article.
    assert web_peaks[1000] < 1.5 * web_peaks[100] + 8 * 1000 + 20_000, web_peaks
    assert peaks[1000] < 150_000 and peaks[1000] < 1.5 * peaks[100] + 20_000, peaks
    seven = arch.title_map.get("article 7 " + WORDS[7])
    assert arch.articles[seven]["path"] == "A/Article_7"
    assert arch.articles[-1] == arch.articles[999] and arch.articles[999]["path"].startswith("A/")
    assert arch.images[0].occurrences[0] | {"context": ""} == {
        "doc": 0, "position": 0, "alt": "river picture", "caption": "The river of article 0",
        "context": "", "page_title": arch.articles[0]["title"]}


def test_text_is_stored_once_and_snippets_still_work(zims, tmp_path):
    web = LocalZimWeb([zims[100]], index_dir=tmp_path)
    web.ensure_ready()
    files = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert not files & {"corpus.jsonl.gz", "articles.json", "images.json"}
    hit = web.search_sync("glacier number 42", 1)[0]
    assert hit.url.endswith("/A/Article_42") and "number 42" in hit.snippet
    li = web.collection.searchable[0]
    addr = li.text_searcher.search(tantivy.Query.all_query(), 1).hits[0][1]
    assert "content" not in li.text_searcher.doc(addr).to_dict()  # the store holds the one copy
    arch = web.archives[0]
    doc = arch.title_map.get(f"article 42 {WORDS[42 % len(WORDS)]}")
    assert arch.article_text(doc).startswith("Article 42 ")


def test_image_search_reads_one_page_a_hit_however_many_pages_show_it(zims, tmp_path):
    """An image shown on ~83 pages of 1,000 (spread over all 32 blocks) is placed on its best
    page from the ``page_titles`` table; only the pages shown are read from the blocks (before
    format 8 every page of every hit was: a picture on thousands of pages cost thousands of
    block reads a search). The page chosen is the one the rule picks over all its pages."""
    web = LocalZimWeb([zims[1000]], index_dir=tmp_path)
    web.ensure_ready()
    arch = web.archives[0]
    store = arch.store
    real, requested = store.records, []

    def spy(ids):
        requested.extend(ids)
        return real(ids)

    store.records = spy
    not_first = 0
    for q, num in (("castle picture", 3), ("river", 1), ("the glacier of article 512", 5)):
        store._blocks.clear()
        requested.clear()
        hits = web.image_search_sync(q, num)
        assert hits and len(set(requested)) <= len(hits), (q, sorted(set(requested)))
        assert len(store._blocks) <= len(hits)  # blocks decoded from a cold cache
        qtok = set(arch.analyzer.analyze(q))
        for h in hits:
            rec = arch.images[next(i for i in range(len(arch.images))
                                   if arch.url(arch.images[i].path) == h.image_url)]
            assert len(rec.occurrences) > 60
            best = min(rec.occurrences, key=lambda o: (-len(qtok & set(arch.analyzer.analyze(
                f"{o['caption']} {o['alt']} {arch.articles[o['doc']]['title']}"))),
                o["position"], o["doc"]))
            page = arch.articles[best["doc"]]
            assert (h.title, h.page_url) == (page["title"], arch.url(page["path"])), q
            not_first += best["doc"] != rec.occurrences[0]["doc"]
    assert not_first  # some hit's best page is not merely its first


def test_build_memory_is_bounded(zims, tmp_path):
    peaks = {}
    for n, path in zims.items():
        arch = LocalZimWeb([path], index_dir=tmp_path / str(n)).archives[0]
        out = tmp_path / f"out{n}"
        out.mkdir()
        tracemalloc.start()
        manifest = arch.build(out)
        peaks[n] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert manifest["articles"] == n
    print("build peaks", peaks)
    assert peaks[1000] < 2.0 * peaks[100], peaks  # 10x the articles, about the same memory


def test_process_pool_build_equals_inline(zims, tmp_path, monkeypatch):
    monkeypatch.setattr(build_mod, "ARTICLE_CHUNK", 24)
    monkeypatch.setattr(build_images, "IMAGE_CHUNK", 5)
    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    m1 = arch.build(tmp_path / "one", workers=1)
    m2 = arch.build(tmp_path / "two", workers=2)
    assert m1["chunks_built"] == m2["chunks_built"] == 5
    assert _dump(tmp_path / "one") == _dump(tmp_path / "two")


_KILLED_BUILD = """
import os, signal, sys
from kit.web.zim import LocalZimWeb
from kit.web.zim import build as b
b.PARALLEL_MIN_ENTRIES, b.ARTICLE_CHUNK = 10**9, 16
real, calls = b.extract_packed, []
def dying(*args):
    calls.append(args)
    if len(calls) == 6:  # chunks 0..4 are committed: die like `kill -9`
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args)
b.extract_packed = dying
LocalZimWeb([sys.argv[1]], index_dir=sys.argv[2]).ensure_ready()
"""


def test_killed_build_resumes_without_redoing_chunks(zims, tmp_path, monkeypatch):
    idx = tmp_path / "idx"
    proc = subprocess.run([sys.executable, "-c", _KILLED_BUILD, str(zims[100]), str(idx)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    arch = LocalZimWeb([zims[100]], index_dir=idx).archives[0]
    assert not arch.index_dir.exists()  # no half index
    with pytest.raises(FileNotFoundError):  # manifest.json of the final folder
        arch.load()
    monkeypatch.setattr(build_mod, "ARTICLE_CHUNK", 16)
    assert arch.ensure_ready()
    n_chunks = -(-len(Locations.read(arch.file).order()) // 16)  # entries in a cluster
    assert arch.manifest["chunks_resumed"] == 5
    assert arch.manifest["chunks_built"] == n_chunks - 5
    assert not list(idx.glob(".*.work"))  # renamed into place
    ref = tmp_path / "ref"
    ref.mkdir()
    LocalZimWeb([zims[100]], index_dir=tmp_path / "r").archives[0].build(ref)
    assert _dump(arch.index_dir) == _dump(ref)


def test_concurrent_builds_build_once(zims, tmp_path, monkeypatch):
    calls = []
    real = _ZimArchive.build

    def counted(self, out, *a, **k):
        calls.append(out)
        return real(self, out, *a, **k)

    monkeypatch.setattr(zimmod._ZimArchive, "build", counted)
    webs = [LocalZimWeb([zims[100]], index_dir=tmp_path) for _ in range(3)]
    threads = [threading.Thread(target=w.ensure_ready) for w in webs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(calls) == 1
    assert all(w.search_sync("castle", 3) == webs[0].search_sync("castle", 3) for w in webs)


def test_disk_full_gives_a_clear_error_and_no_half_index(zims, tmp_path, monkeypatch):
    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(build_mod, "save_hashes", full)
    web = LocalZimWeb([zims[100]], index_dir=tmp_path)
    with pytest.raises(ZimError, match="cannot build the index of gen_100.zim.*No space left"):
        web.ensure_ready()
    assert not web.archives[0].index_dir.exists()
    monkeypatch.undo()
    monkeypatch.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)
    again = LocalZimWeb([zims[100]], index_dir=tmp_path)
    again.ensure_ready()
    assert again.archives[0].manifest["chunks_resumed"] == 1  # the extracted chunk was kept
    assert again.search_sync("castle", 1)


def test_damaged_content_is_logged_with_counts(zims, tmp_path, caplog):
    arch = LocalZimWeb([zims[100]], index_dir=tmp_path).archives[0]
    with caplog.at_level(logging.WARNING, logger="kit.web.zim.archive"):
        arch.ensure_ready()
    assert arch.manifest["skipped_images"] == {"undecodable": 1}
    assert any("gen_100.zim looks damaged: skipped 1 undecodable images" in r.getMessage()
               for r in caplog.records)


def test_a_broken_pool_falls_back_to_this_process(zims, tmp_path, monkeypatch, caplog):
    def broken(self, fn, jobs):
        raise build_mod.BrokenProcessPool("a worker died while starting")
        yield

    real_init = build_mod._Runner.__init__

    def no_pool(self, workers):  # a pool that breaks at once, without starting processes
        real_init(self, 1)
        if workers > 1:
            self.workers = workers
            self.map = broken.__get__(self)

    monkeypatch.setattr(build_mod._Runner, "__init__", no_pool)
    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    (tmp_path / "out").mkdir()
    with caplog.at_level(logging.WARNING, logger="kit.web.zim.build"):
        manifest = arch.build(tmp_path / "out", workers=2)
    assert manifest["articles"] == 100 and manifest["images"] == N_IMAGES
    assert any("extraction pool failed" in r.getMessage() for r in caplog.records)


def test_mid_file_corruption_builds_and_warns_with_counts(zims, tmp_path, caplog):
    data = bytearray(zims[100].read_bytes())
    # Stored raw (no compression): find the image's bytes in the file and damage their middle.
    png = bytes(libzim.reader.Archive(str(zims[100])).get_entry_by_path("I/img_3.png")
                .get_item().content)
    at = data.find(png)
    assert at > 0
    data[at + len(png) // 2: at + len(png) // 2 + 64] = b"\0" * 64
    bad = tmp_path / "damaged.zim"
    bad.write_bytes(bytes(data))
    web = LocalZimWeb([bad], index_dir=tmp_path / "i")
    with caplog.at_level(logging.WARNING, logger="kit.web.zim.archive"):
        web.ensure_ready()
    arch = web.archives[0]
    assert arch.manifest["skipped_images"] == {"undecodable": 2}
    assert len(arch.images) == N_IMAGES - 1 and len(arch.articles) == 100
    assert any("damaged.zim looks damaged: skipped 2 undecodable images" in r.getMessage()
               for r in caplog.records)


def test_index_folder_is_named_by_archive_and_format(zims, tmp_path, monkeypatch):
    """Two kit versions sharing one cache must not rebuild each other's index: the folder carries the format."""
    from kit.web.zim import archive as archive_mod

    arch = LocalZimWeb([zims[100]], index_dir=tmp_path).archives[0]
    assert Path(arch.index_dir).name == f"{arch.key[:16]}-v{archive_mod.INDEX_FORMAT}"
    monkeypatch.setattr(archive_mod, "INDEX_FORMAT", archive_mod.INDEX_FORMAT + 1)
    other = LocalZimWeb([zims[100]], index_dir=tmp_path).archives[0]
    assert other.index_dir != arch.index_dir


def test_index_build_shows_progress_per_chunk(zims, tmp_path, monkeypatch):
    """Issue 18 part 3: index builds are long loops with a progress bar (articles, then images)."""
    from kit.web.zim import build as build_mod

    bars = []

    class Bar:
        def __init__(self, total=None, desc=None, unit="it", **kw):
            self.total, self.desc, self.n = total, desc, 0
            bars.append(self)

        def update(self, n=1):
            self.n += n

        def close(self):
            pass

    monkeypatch.setattr(build_mod, "progress", Bar)
    monkeypatch.setattr(build_images, "progress", Bar)
    LocalZimWeb([zims[100]], index_dir=tmp_path).archives[0].ensure_ready()
    assert [b.desc.rsplit(": ", 1)[1] for b in bars] == ["articles", "images"]
    assert all(b.total >= 1 and b.n == b.total for b in bars)


def test_page_titles_hold_exactly_the_pages_that_show_a_kept_image(tmp_path):
    """A page whose only image is undecodable, and a page with none, get no title row."""
    path = tmp_path / "few.zim"
    creator = libzim.writer.Creator(str(path)).config_indexing(False, "eng")
    with creator:
        creator.add_metadata("Language", "eng")
        pages = {"A/Shows": '<img src="../I/good.png" alt="a good picture">',
                 "A/Broken": '<img src="../I/broken.png" alt="broken">', "A/None": ""}
        for p, img in pages.items():
            title = p[2:] + " page"
            creator.add_item(_Item(p, title, "text/html", f"<html><head><title>{title}</title></head>"
                                   f"<body><p>{title} is a page about rivers and castles.</p>{img}</body></html>"))
        creator.add_item(_Item("I/good.png", "", "image/png", _png(1)))
        creator.add_item(_Item("I/broken.png", "", "image/png", b"\x89PNG\r\n\x1a\n" + b"x" * 300))
    web = LocalZimWeb([path], index_dir=tmp_path / "i")
    web.ensure_ready()
    arch = web.archives[0]
    rows = arch.store.db.execute("SELECT doc, title FROM page_titles").fetchall()
    assert [t for _, t in rows] == ["Shows page"]
    assert arch.articles[rows[0][0]]["title"] == "Shows page"
    (hit,) = web.image_search_sync("good picture", 5)
    assert (hit.title, hit.page_url) == ("Shows page", arch.url("A/Shows"))


def test_block_cache_is_an_lru_refreshed_on_hits(zims, tmp_path, monkeypatch):
    from kit.web.zim import store as store_mod

    monkeypatch.setattr(store_mod, "BLOCK_CACHE", 2)
    web = LocalZimWeb([zims[1000]], index_dir=tmp_path)
    web.ensure_ready()
    store, B = web.archives[0].store, store_mod.BLOCK
    store._blocks.clear()
    store.records([0, B])        # blocks 0, 1
    store.records([5])           # block 0 found: now the most recent
    store.records([2 * B])       # block 2 evicts the least recent, block 1
    assert list(store._blocks) == [0, 2]
    assert store.records([3 * B, 4 * B, 5 * B, 1])[1] == store.record(1)  # more blocks than it holds
    assert len(store._blocks) <= 2


def test_a_killed_build_whose_tails_file_was_deleted_starts_again(zims, tmp_path, monkeypatch, caplog):
    """The tails of the blocks written before the kill are gone: resuming would leave those
    bodies without their ends (ATTACH makes a new, empty file), so the build starts again."""
    from kit.web.zim.tails import TAILS_FILE

    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    out = tmp_path / "work"
    out.mkdir()
    real = build_mod._images

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_mod, "_images", killed)
    with pytest.raises(KeyboardInterrupt):
        arch.build(out)
    assert (out / TAILS_FILE).stat().st_size > 0
    (out / TAILS_FILE).unlink()
    monkeypatch.setattr(build_mod, "_images", real)
    with caplog.at_level(logging.WARNING):
        m = arch.build(out)
    assert any("lost its tails.sqlite" in r.getMessage() for r in caplog.records)
    assert m["chunks_resumed"] == 0
    ref = tmp_path / "ref"
    ref.mkdir()
    arch.build(ref)
    assert _dump(out) == _dump(ref)


def _runner_in_daemon(q) -> None:
    from kit.web.zim.runner import _Runner

    r = _Runner(2)
    q.put((r.workers, r.pool is None))
    r.close()


def test_a_daemonic_process_runs_build_jobs_inline():
    """A multiprocessing pool's worker (daemonic) may not start children: builds and full-text
    passes in it run inline instead of failing."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_runner_in_daemon, args=(q,), daemon=True)
    p.start()
    try:
        assert q.get(timeout=60) == (1, True)
    finally:
        p.join(60)


def _killed_in_images(arch, out, monkeypatch):
    real = build_mod._images

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_mod, "_images", killed)
    with pytest.raises(KeyboardInterrupt):
        arch.build(out)
    monkeypatch.setattr(build_mod, "_images", real)


def test_a_killed_build_resumes_in_the_same_boot_and_starts_again_after_a_restart(zims, tmp_path, monkeypatch, caplog):
    """The build commits without fsync (``boot_id``): a killed process loses nothing, a restarted
    machine may have, so its build folder is not resumed."""
    boot = tmp_path / "boot_id"
    boot.write_text("11111111-aaaa\n")
    monkeypatch.setattr(build_mod, "_BOOT_ID", boot)
    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    for restarted in (False, True):
        out = tmp_path / f"work{int(restarted)}"
        out.mkdir()
        boot.write_text("11111111-aaaa\n")
        _killed_in_images(arch, out, monkeypatch)
        assert (out / build_mod.FORMAT_FILE).read_text() == f"{build_mod.BUILD_LAYOUT} boot 11111111-aaaa"
        if restarted:
            boot.write_text("22222222-bbbb\n")
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            m = arch.build(out)
        warned = any("before the machine restarted" in r.getMessage() for r in caplog.records)
        assert warned == restarted
        assert (m["chunks_resumed"] == 0) == restarted, m


def test_without_a_boot_id_the_build_commits_with_fsync(zims, tmp_path, monkeypatch):
    monkeypatch.setattr(build_mod, "_BOOT_ID", tmp_path / "absent")
    monkeypatch.setattr(build_mod, "sync_files", lambda *p: pytest.fail("synced a build committed with fsync"))
    seen = []
    real = build_mod._extract

    def spy(arch, db, *a, **k):
        seen.append({s: db.execute(f"PRAGMA {s}.synchronous").fetchone()[0] for s in ("main", "b", "t", "x")})
        return real(arch, db, *a, **k)

    monkeypatch.setattr(build_mod, "_extract", spy)
    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    out = tmp_path / "work"
    out.mkdir()
    arch.build(out)
    assert seen == [{"main": 2, "b": 2, "t": 2, "x": 2}]  # FULL: nothing to sync at the end
    assert build_mod.boot_id() is None
    monkeypatch.setattr(build_mod, "_BOOT_ID", Path("/proc/sys/kernel/random/boot_id"))
    if build_mod.boot_id() is not None:  # Linux: OFF, and the files synced before the manifest
        synced = []
        monkeypatch.setattr(build_mod, "sync_files", lambda *p: synced.extend(x.name for x in p))
        seen.clear()
        out2 = tmp_path / "work2"
        out2.mkdir()
        arch.build(out2)
        assert seen == [{"main": 0, "b": 0, "t": 0, "x": 0}]
        assert synced == ["store.sqlite", "tails.sqlite", "hashes.npy"]


@pytest.mark.parametrize("stamp", ["missing", "trailing newline", "without a boot", "fsync failed"])
def test_the_build_folder_stamp_decides_resume_or_start_again(zims, tmp_path, monkeypatch, caplog, stamp):
    """Resumed: this boot's stamp as written by hand (a trailing newline), or a stamp without a
    boot (its pages were committed with fsync). Started again: files without a stamp, or a build
    whose final fsync failed (some written pages may never have reached the disk)."""
    boot = tmp_path / "boot_id"
    boot.write_text("11111111-aaaa\n")
    monkeypatch.setattr(build_mod, "_BOOT_ID", boot)
    arch = LocalZimWeb([zims[100]], index_dir=tmp_path / "i").archives[0]
    out = tmp_path / "work"
    out.mkdir()
    if stamp == "fsync failed":
        def failing(*paths):
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(build_mod, "sync_files", failing)
        with pytest.raises(Exception, match="Input/output error"):
            arch.build(out)
        monkeypatch.undo()
        monkeypatch.setattr(build_mod, "_BOOT_ID", boot)
        assert not (out / build_mod.FORMAT_FILE).exists()
    else:
        _killed_in_images(arch, out, monkeypatch)
        stamp_file = out / build_mod.FORMAT_FILE
        if stamp == "missing":
            stamp_file.unlink()
        elif stamp == "trailing newline":
            stamp_file.write_text(stamp_file.read_text() + "\n")
        else:
            stamp_file.write_text(build_mod.BUILD_LAYOUT)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        m = arch.build(out)
    again = stamp in ("missing", "fsync failed")
    assert (m["chunks_resumed"] == 0) == again, m
    assert any("has no build.format stamp" in r.getMessage() for r in caplog.records) == again
    ref = tmp_path / "ref"
    ref.mkdir()
    arch.build(ref)
    assert _dump(out) == _dump(ref)

