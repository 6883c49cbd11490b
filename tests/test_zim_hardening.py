"""The local web's fast paths under hostile or unusual input (issue 32 review): page samples that
keep lead images and distinct pages, heads tables whose offsets point outside their entries,
inline builds in threads, files closed when refused, pages without a declared charset, and pages
with control characters."""

from __future__ import annotations

import io
import json
import os
import struct
import threading
from pathlib import Path

import libzim.writer
import pytest
from conftest import ZimItem as _Item
from PIL import Image

from kit.types import BackendError
from kit.web.zim import LocalZimWeb
from kit.web.zim import backend as backend_mod
from kit.web.zim import build as build_mod


def _png(seed: int) -> bytes:
    img = Image.effect_noise((160, 120), 50 + 30 * seed).convert("RGB")
    img = img.point(lambda v, s=seed: (v * (5 + s)) % 256)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _write(path: Path, pages: dict[str, str], images: dict[str, bytes] | None = None,
           raw: dict[str, bytes] | None = None) -> Path:
    creator = libzim.writer.Creator(str(path)).config_indexing(False, "eng").config_compression(
        libzim.writer.Compression.none)
    with creator:
        creator.add_metadata("Language", "eng")
        for name, body in pages.items():
            title = name.replace("_", " ")
            html = f"<html><head><title>{title}</title></head><body>{body}</body></html>"
            creator.add_item(_Item(f"A/{name}", title, "text/html", html))
        for name, data in (raw or {}).items():
            creator.add_item(_Item(f"A/{name}", name.replace("_", " "), "text/html", data))
        for name, data in (images or {}).items():
            creator.add_item(_Item(f"I/{name}", "", "image/png", data))
    return path


@pytest.fixture
def inline(monkeypatch):
    monkeypatch.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)  # build in this process


# ---- samples of an image's pages -----------------------------------------------------------------
N_PAGES = 120
REPEATS = 3 * backend_mod.OCC_SAMPLE  # times page 2 shows the image
MOON = '<img src="../I/moon.png" alt="moon">'
MOON_REPEATS = 200


@pytest.fixture(scope="module")
def shared_image_web(tmp_path_factory) -> LocalZimWeb:
    """``star.png`` is the 4th image of pages 0..119, shown :data:`REPEATS` times on page 2 and
    as the lead image (position 0) of page 110 only."""
    d = tmp_path_factory.mktemp("sample")
    fillers = "".join(f'<img src="../I/f{k}.png" alt="filler {k}">' for k in range(3))
    pages = {}
    for i in range(N_PAGES):
        star = '<img src="../I/star.png" alt="star map">'
        figs = star + fillers if i == 110 else fillers + star * (REPEATS if i == 2 else 1)
        if i == 5:  # moon: after the star, 200 times on page 5 ...
            figs += MOON * MOON_REPEATS
        elif i in (6, 7, 8):  # ... and once on pages 6-8, after 40 more images
            figs += '<img src="../I/f0.png" alt="filler 0">' * 40 + MOON
        pages[f"Page_{i:03d}"] = (f"<p>Page {i} is about a place and the coast near it, in a few "
                                  f"words.</p>{figs}")
    images = {"star.png": _png(0), "moon.png": _png(7), **{f"f{k}.png": _png(k + 1) for k in range(3)}}
    mp = pytest.MonkeyPatch()
    mp.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)
    try:
        w = LocalZimWeb([_write(d / "stars.zim", pages, images)], index_dir=d / "index")
        w.ensure_ready()
    finally:
        mp.undo()
    return w


def _star(web: LocalZimWeb, name: str = "star") -> int:
    arch = web.archives[0]
    return next(i for i in range(len(arch.images)) if arch.images[i].path == f"I/{name}.png")


def test_a_sample_holds_the_lead_page_and_distinct_pages(shared_image_web):
    store, i = shared_image_web.archives[0].store, _star(shared_image_web)
    full = store.images_with_pages([i])[i].occurrences
    assert len(full) == N_PAGES - 1 + REPEATS
    # the exact order of pages: lowest position first, then document
    first_pos: dict[int, int] = {}
    for o in sorted(full, key=lambda o: (o["position"], o["doc"])):
        first_pos.setdefault(o["doc"], o["position"])
    exact = sorted(first_pos, key=lambda d: (first_pos[d], d))
    for k in (1, 5, backend_mod.OCC_SAMPLE):
        part = store.images_with_pages([i], sample=k)[i].occurrences
        docs = list(dict.fromkeys(o["doc"] for o in sorted(part, key=lambda o: (o["position"],
                                                                                 o["doc"]))))
        assert docs[:k] == exact[:k]  # the lead page first, k distinct pages
        assert part == sorted(part, key=lambda o: (o["doc"], o["position"]))  # kept in page order
    lead = store.images_with_pages([i], sample=1)[i].occurrences
    assert [o["page_title"] for o in lead] == ["Page 110"]


def test_a_sample_reads_past_a_page_that_repeats_the_image(shared_image_web, monkeypatch):
    """moon.png's first 40 rows by (position, doc) are all page 5: a sample of 2-4 pages reads
    further (4x the rows each time) until it covers them, in the exact order of the full list."""
    store, i = shared_image_web.archives[0].store, _star(shared_image_web, "moon")
    assert len(store.images_with_pages([i])[i].occurrences) == MOON_REPEATS + 3
    reads = []
    real = store._read_images
    monkeypatch.setattr(store, "_read_images", lambda part, limit, out, ctx=False: (
        reads.append(limit), real(part, limit, out, ctx)))
    for k, want in ((1, [5]), (2, [5, 6]), (4, [5, 6, 7, 8])):
        reads.clear()
        part = store.images_with_pages([i], sample=k)[i].occurrences
        docs = list(dict.fromkeys(o["doc"] for o in sorted(part, key=lambda o: (o["position"], o["doc"]))))
        assert docs[:k] == want  # the first k pages of the full list (the last read may hold more)
        assert max(reads) <= 4 * (40 + k)  # grows by 4x from k, stops once the pages are covered
        assert reads == [k * 4**n for n in range(len(reads))]
    assert reads == [4, 16, 64]


def test_reverse_search_lists_the_exact_first_pages(shared_image_web):
    arch = shared_image_web.archives[0]
    data = arch.read(arch.entry("I/star.png"))[1]
    store, i = arch.store, _star(shared_image_web)
    full = sorted(store.images_with_pages([i])[i].occurrences, key=lambda o: (o["position"], o["doc"]))
    want = list(dict.fromkeys(o["page_title"] for o in full))
    for num in (3, 10):
        res = shared_image_web.reverse_image_search_sync(data, num)
        assert [p.title for p in res.pages[:num]] == want[:num]
        assert len({p.url for p in res.pages}) == len(res.pages) == num
    assert res.thumbnails[0].page_url.endswith("Page_110")  # its lead page


# ---- heads tables ----------------------------------------------------------------------------------
def test_heads_offsets_outside_the_entries_are_damage(tmp_path):
    from kit.web.zim.index import Heads, write_heads

    rows = [("A/One", "One"), ("A/Two", "Two"), ("A/Three", "Three")]
    path = tmp_path / "heads_0.bin"
    write_heads(iter(rows), len(rows), path)
    data = bytearray(path.read_bytes())
    (blob,) = struct.unpack_from("<Q", data, 16)
    offs_at = 24 + blob
    struct.pack_into("<Q", data, offs_at + 8, blob + 16)  # entry 0 ends inside the offsets
    path.write_bytes(bytes(data))
    heads = Heads(path, len(rows))  # the header and the ends still check out
    for i in (0, 1):
        with pytest.raises(ValueError, match="damaged"):
            heads.get(i)
    assert heads.get(2) == ("A/Three", "Three")
    struct.pack_into("<Q", data, offs_at + 16, 2)  # entry 2 starts before entry 1 ends
    struct.pack_into("<Q", data, offs_at + 8, 4)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged"):
        Heads(path, len(rows)).get(1)


@pytest.mark.parametrize("entry", [b"\x80", b"\x80\x80\x80", b""])
def test_heads_entry_with_an_unended_length_is_damage(tmp_path, entry):
    """A uvarint cut short (its last byte has the continuation bit) or an empty entry was read
    as ("", ""): a hit with no path and no title."""
    from kit.web.zim.index import Heads, write_heads

    rows = [("A/One", "One"), ("A/Two", "Two")]
    path = tmp_path / "heads_0.bin"
    write_heads(iter(rows), len(rows), path)
    data = bytearray(path.read_bytes())
    (blob,) = struct.unpack_from("<Q", data, 16)
    (end0,) = struct.unpack_from("<Q", data, 24 + blob + 8)
    data[24:24 + end0] = entry.ljust(end0, b"\x80")[:end0] if entry else data[24:24 + end0]
    if not entry:
        struct.pack_into("<Q", data, 24 + blob + 8, 0)  # entry 0 = [0, 0)
        struct.pack_into("<Q", data, 24 + blob, 0)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged"):
        Heads(path, len(rows)).get(0)


def test_ranking_on_a_damaged_heads_table_is_a_backend_error(shared_image_web, monkeypatch):
    class Broken:
        def get(self, i):
            raise ValueError("heads_0.bin: entry 0 is damaged")

    monkeypatch.setattr(shared_image_web.collection, "heads", [Broken()])
    with pytest.raises(BackendError, match="delete"):
        shared_image_web.rank_sync("place coast", 3)


# ---- builds in threads and the files they hold -----------------------------------------------------
def _pages(n: int, word: str) -> dict[str, str]:
    return {f"{word}_{i}": f"<p>{word} {i} is a page of the {word} set, with words to index.</p>"
            for i in range(n)}


def test_inline_builds_in_threads_keep_their_own_files_and_the_cache(tmp_path, inline,
                                                                     monkeypatch):
    """Two inline builds in two threads of one process: each reads its own archive (a worker's
    open files are per thread), and the process-wide cluster cache goes back to its size only
    when the last one ends."""
    import libzim

    from kit.web.zim.archive import _ZimArchive

    a = _ZimArchive(_write(tmp_path / "alpha.zim", _pages(40, "alpha")), tmp_path / "idx")
    b = _ZimArchive(_write(tmp_path / "beta.zim", _pages(30, "beta")), tmp_path / "idx")
    original = libzim.get_cluster_cache_max_size()
    libzim.set_cluster_cache_max_size(1 << 20)  # under what a build asks for: raised, visibly
    entered, release = threading.Event(), threading.Event()
    real_images = build_mod._images
    out: dict[str, object] = {}

    def slow_images(arch, db, runner):
        if arch is a:  # a waits here, its cache raised, until b has started
            entered.set()
            assert release.wait(60)
        else:  # b lets a finish first, then ends itself
            out["during_b"] = libzim.get_cluster_cache_max_size()
            release.set()
            t.join(60)
            out["after_a"] = libzim.get_cluster_cache_max_size()
        return real_images(arch, db, runner)

    monkeypatch.setattr(build_mod, "_images", slow_images)

    def run_a():
        try:
            out["a"] = build_mod.build_archive(a, tmp_path / "ia", workers=1)
        except Exception as exc:  # noqa: BLE001 - handed to the test thread
            out["a"] = exc

    (tmp_path / "ia").mkdir()
    (tmp_path / "ib").mkdir()
    t = threading.Thread(target=run_a)
    try:
        t.start()
        assert entered.wait(60)
        out["b"] = build_mod.build_archive(b, tmp_path / "ib", workers=1)
        assert out["during_b"] > 1 << 20
        assert out["after_a"] == out["during_b"]  # a ended while b ran: not restored yet
        assert not isinstance(out["a"], Exception), out["a"]
        assert out["a"]["articles"] == 40 and out["b"]["articles"] == 30
        assert libzim.get_cluster_cache_max_size() == 1 << 20  # the last to end restored it
    finally:
        release.set()
        t.join(60)
        libzim.set_cluster_cache_max_size(original)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_pool_that_cannot_start_releases_the_cache_and_the_store(tmp_path, monkeypatch):
    import libzim

    from kit.web.zim.archive import _ZimArchive

    a = _ZimArchive(_write(tmp_path / "alpha.zim", _pages(5, "alpha")), tmp_path / "idx")
    (tmp_path / "ia").mkdir()

    def no_pool(workers):
        raise OSError("cannot start workers")

    monkeypatch.setattr(build_mod, "_Runner", no_pool)
    before, count, fds = libzim.get_cluster_cache_max_size(), build_mod._CACHE[0], _open_fds()
    for _ in range(2):  # twice: the count is not left raised by the first
        with pytest.raises(OSError, match="cannot start"):
            build_mod.build_archive(a, tmp_path / "ia", workers=2)
    assert build_mod._CACHE[0] == count and libzim.get_cluster_cache_max_size() == before
    assert _open_fds() == fds  # the store's connection was closed


def test_thread_state_is_per_thread(tmp_path):
    a = _write(tmp_path / "alpha.zim", _pages(3, "alpha"))
    b = _write(tmp_path / "beta.zim", _pages(3, "beta"))
    seen: dict[str, str] = {}

    def other():
        build_mod._worker_archive(str(b))
        seen["other"] = build_mod._worker_state()["path"]
        build_mod._release_worker_state()

    try:
        build_mod._worker_archive(str(a))
        t = threading.Thread(target=other)
        t.start()
        t.join(30)
        assert seen["other"] == str(b)
        assert build_mod._worker_state()["path"] == str(a)
        f = build_mod._worker_state()["dirents"][0]
        assert not f.closed  # the other thread's release did not close this one's file
        assert sorted(build_mod.cluster_order(str(a), 0, 3)) == [0, 1, 2]
    finally:
        build_mod._release_worker_state()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_refused_and_replaced_files_are_closed(tmp_path):
    short, other = tmp_path / "short.zim", tmp_path / "other.zim"
    short.write_bytes(b"ZIM\x04 too short")
    other.write_bytes(b"\0" * 200)
    n = _open_fds()
    for p in (short, other):
        assert build_mod._dirent_reader(str(p)) is None
    assert _open_fds() == n
    a = _write(tmp_path / "alpha.zim", _pages(3, "alpha"))
    b = _write(tmp_path / "beta.zim", _pages(3, "beta"))
    try:
        build_mod._worker_archive(str(a))
        held = build_mod._worker_state()["dirents"][0]
        build_mod._worker_archive(str(b))  # another archive: the first one's file is closed
        assert held.closed
    finally:
        build_mod._release_worker_state()


# ---- what a page's bytes say -----------------------------------------------------------------------
def test_pages_without_a_charset_are_utf8(tmp_path, inline):
    body = "<p>Zürich und Straße: die größte Stadt der Schweiz, am Zürichsee gelegen.</p>"
    latin = ('<html><head><meta charset="iso-8859-1"><title>Bern</title></head><body>'
             "<p>Bern ist die Bundesstadt der Schweiz, an der Aare gelegen, mit Brücken.</p>"
             "</body></html>").encode("latin-1")
    web = LocalZimWeb([_write(tmp_path / "ch.zim", {"Zürich": body}, raw={"Bern": latin})],
                      index_dir=tmp_path / "index")
    hits = web.search_sync("Straße größte", 3)
    assert hits and "Straße" in hits[0].snippet and "Ã" not in hits[0].snippet
    page = web.fetch_sync(hits[0].url)
    assert "die größte Stadt" in page.markdown
    bern = web.search_sync("Brücken Aare", 3)
    assert bern and bern[0].title == "Bern" and "Brücken" in web.fetch_sync(bern[0].url).markdown


LONG_HEAD = "".join(f'<link rel="stylesheet" href="../-/s/css_modules/m{k}.css">' for k in range(40))
JA = "\u65e5\u672c\u8a9e\u306e\u30da\u30fc\u30b8"  # "a Japanese page"


@pytest.mark.parametrize(("html", "want", "declared"), [
    # a meta charset after 1024 bytes of head (TemplateStyles links): libxml2 reads it there
    ((f"<html><head>{LONG_HEAD}<meta charset='iso-8859-1'><title>Z</title></head>"
      "<body><p>Z\u00fcrich</p></body></html>").encode("latin-1"), "Z\u00fcrich", ("meta", "iso-8859-1")),
    # a description that mentions a charset declares none: the page is UTF-8
    (("<html><head><meta name='description' content='pages in charset=latin1 and others'></head>"
      "<body><p>Z\u00fcrich</p></body></html>").encode("utf-8"), "Z\u00fcrich", None),
    # an http-equiv declaration
    (("<html><head><meta http-equiv='Content-Type' content='text/html; charset=windows-1252'></head>"
      "<body><p>Z\u00fcrich \u20ac</p></body></html>").encode("cp1252"), "Z\u00fcrich \u20ac", ("meta", "windows-1252")),
    # an XML declaration only (libxml2's HTML parser ignores it)
    (("<?xml version='1.0' encoding='iso-8859-1'?><html><head><title>Z</title></head>"
      "<body><p>Z\u00fcrich</p></body></html>").encode("latin-1"), "Z\u00fcrich", ("xml", "iso-8859-1")),
    # ISO-2022-JP: its escape sequences start with ESC, which is kept for it
    (f"<html><head><meta charset='iso-2022-jp'></head><body><p>{JA}</p></body></html>".encode("iso-2022-jp"),
     JA, ("meta", "iso-2022-jp")),
])
def test_declared_charsets_are_read_as_browsers_read_them(html, want, declared):
    from kit.web.zim.html import _parse_html, declared_charset

    assert declared_charset(html) == declared
    text = "".join(_parse_html(html).itertext())
    assert want in text and "\ufffd" not in text and "\u00c3" not in text


def test_control_characters_are_whitespace_not_a_lost_page(tmp_path, inline):
    """libxml2 keeps form feeds and vertical tabs in text; the page is indexed (they read as
    spaces), not skipped as unparsable."""
    pages = {"Feed": "<p>Alpha\x0cbeta gamma delta, a page whose text has a form feed in it.</p>"
                     "<p>Second\x0bparagraph in Zu\u0308rich (decomposed: NFC rewrites it).</p>"}
    web = LocalZimWeb([_write(tmp_path / "cc.zim", pages)], index_dir=tmp_path / "index")
    web.ensure_ready()
    manifest = json.loads((web.archives[0].index_dir / "manifest.json").read_text())
    assert manifest["skipped_articles"] == {} and manifest["articles"] == 1
    hits = web.search_sync("alpha beta gamma", 3)
    assert hits and hits[0].title == "Feed"
    assert "\x0c" not in hits[0].snippet and "Alpha beta" in hits[0].snippet
    page = web.fetch_sync(hits[0].url)
    assert "gamma delta" in page.markdown and "Zürich" in page.markdown
