"""Bounded image and reverse image search (issue 32, part 4): the work of a search does not grow
with the pages that show an image (an icon or flag is on 10^4-10^5 Wikipedia pages), and a single
reverse query runs faiss on one thread, restoring the caller's thread count after."""

from __future__ import annotations

import io
from pathlib import Path

import libzim.writer
import numpy as np
import pytest
from conftest import ZimItem as _Item
from PIL import Image

from kit.web.zim import LocalZimWeb
from kit.web.zim import backend as backend_mod
from kit.web.zim import build as build_mod
from kit.web.zim.hash_index import HashIndex, archive_hash_index, faiss_threads
from kit.web.zim.images import MATCH_DISTANCE
from kit.web.zim.text import Analyzer

N_PAGES = 600
#: image name -> (alt word, every how many pages it is shown): on 600, 120 and 12 pages.
IMAGES = {"big": ("lighthouse", 1), "mid": ("windmill", 5), "small": ("volcano", 50)}


def _png(seed: int) -> bytes:
    img = Image.effect_noise((200, 150), 60 + 40 * seed).convert("RGB")
    img = Image.merge("RGB", [c.point(lambda v, s=seed, k=k: (v * (3 + s + k)) % 256)
                              for k, c in enumerate(img.split())])
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def write_archive(path: Path) -> Path:
    """An English archive of :data:`N_PAGES` pages, each with its own title; the images of
    :data:`IMAGES` are shown on every page, every 5th and every 50th."""
    creator = libzim.writer.Creator(str(path)).config_indexing(False, "eng").config_compression(
        libzim.writer.Compression.none)
    with creator:
        creator.add_metadata("Language", "eng")
        for i in range(N_PAGES):
            title = f"Page {i} of the atlas"
            figs = "".join(
                f'<figure><img src="../I/{name}.png" alt="{alt} picture">'
                f"<figcaption>A {alt} seen from page {i}</figcaption></figure>"
                for name, (alt, every) in IMAGES.items() if i % every == 0)
            body = (f"<p>{title} describes place number {i} and its surroundings in some detail, "
                    f"with a few words about the coast.</p>{figs}")
            html = f"<html><head><title>{title}</title></head><body>{body}</body></html>"
            creator.add_item(_Item(f"A/Page_{i}", title, "text/html", html))
        for k, name in enumerate(IMAGES):
            creator.add_item(_Item(f"I/{name}.png", "", "image/png", _png(k)))
    return path


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> LocalZimWeb:
    d = tmp_path_factory.mktemp("bounded")
    mp = pytest.MonkeyPatch()
    mp.setattr(build_mod, "PARALLEL_MIN_ENTRIES", 10**9)  # build in this process
    try:
        w = LocalZimWeb([write_archive(d / "atlas.zim")], index_dir=d / "index")
        w.ensure_ready()
    finally:
        mp.undo()
    return w


def _image_id(web: LocalZimWeb, name: str) -> int:
    arch = web.archives[0]
    return next(i for i in range(len(arch.images)) if arch.images[i].path == f"I/{name}.png")


def _cost(web: LocalZimWeb, fn) -> dict[str, int]:
    """SQLite virtual-machine steps (deterministic, in 100s) and analyzer calls of ``fn()``."""
    store = web.archives[0].store
    steps = [0]

    def tick() -> int:
        steps[0] += 1
        return 0

    calls = [0]
    real = Analyzer.analyze

    def counted(self, text):
        calls[0] += 1
        return real(self, text)

    store._blocks.clear()
    store.db.set_progress_handler(tick, 100)
    mp = pytest.MonkeyPatch()
    mp.setattr(Analyzer, "analyze", counted)
    try:
        fn()
    finally:
        mp.undo()
        store.db.set_progress_handler(None, 100)
    return {"steps": steps[0], "analyze": calls[0]}


def test_the_archive_shows_images_on_many_pages(web):
    arch = web.archives[0]
    counts = {name: len(arch.images[_image_id(web, name)].occurrences) for name in IMAGES}
    assert counts == {"big": 600, "mid": 120, "small": 12}
    assert backend_mod.OCC_SAMPLE < counts["mid"]  # both larger ones are capped


def test_image_search_cost_does_not_grow_with_occurrences(web):
    got, cost = {}, {}
    for name, (alt, _) in IMAGES.items():
        got[name] = web.image_search_sync(f"{alt} page 100", 1)
        cost[name] = _cost(web, lambda alt=alt: web.image_search_sync(f"{alt} page 100", 1))
    assert all(h[0].image_url.endswith(f"I/{n}.png") for n, h in got.items())
    # the same work for an image on 600 pages as for one on 120 (both read OCC_SAMPLE pages)
    assert cost["big"]["analyze"] == cost["mid"]["analyze"] <= backend_mod.OCC_SAMPLE + 4
    assert cost["big"]["steps"] <= 1.1 * cost["mid"]["steps"] + 5, cost
    assert cost["small"]["analyze"] < cost["mid"]["analyze"]
    # the page chosen is the best of the sample (pages are in path order: Page_100 is the 4th):
    # the query's words in its caption and title
    assert {h[0].title for h in got.values()} == {"Page 100 of the atlas"}
    store = web.archives[0].store
    full = store.images_with_pages([_image_id(web, "big")])
    assert len(full[_image_id(web, "big")].occurrences) == 600  # what a search used to read


def test_sample_is_the_first_occurrences_in_page_order(web):
    store = web.archives[0].store
    i = _image_id(web, "mid")
    full = store.images_with_pages([i])[i].occurrences
    for k in (1, 5, 120, 500):
        part = store.images_with_pages([i], sample=k)[i].occurrences
        assert part == full[:k]


def test_reverse_search_cost_does_not_grow_with_occurrences(web):
    arch = web.archives[0]
    data = {n: arch.read(arch.entry(f"I/{n}.png"))[1] for n in IMAGES}
    res = {n: web.reverse_image_search_sync(data[n], 5) for n in IMAGES}
    for n, r in res.items():
        assert r.thumbnails and r.thumbnails[0].image_url.endswith(f"I/{n}.png")
        assert len(r.pages) == 5
    # closest first, lead image first, then page order: exactly the first 5 of all its pages
    store = arch.store
    for n in IMAGES:
        i = _image_id(web, n)
        occ = sorted(store.images_with_pages([i])[i].occurrences,
                     key=lambda o: (o["position"], o["doc"]))
        assert [p.title for p in res[n].pages] == [o["page_title"] for o in occ[:5]]
    cost = {n: _cost(web, lambda n=n: web.reverse_image_search_sync(data[n], 5)) for n in IMAGES}
    assert cost["big"]["steps"] <= 1.1 * cost["mid"]["steps"] + 5, cost


class _Recorder:
    """Stands in for faiss's flat index: records the OpenMP thread count each search ran with."""

    def __init__(self, flat):
        import faiss

        self.flat, self.faiss, self.threads = flat, faiss, []

    def range_search(self, q, radius):
        self.threads.append(self.faiss.omp_get_max_threads())
        return self.flat.range_search(q, radius)


def test_a_single_query_scans_on_one_faiss_thread_and_restores_the_count():
    faiss = pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 2**63, size=(300, 3, 2), dtype=np.uint64)
    idx = HashIndex.build(codes)
    want = idx.search(int(codes[7, 0, 0]), int(codes[7, 0, 1]), MATCH_DISTANCE, method="scan")
    rec = idx._flat = _Recorder(idx._flat)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(3)
    try:
        got = idx.search(int(codes[7, 0, 0]), int(codes[7, 0, 1]), MATCH_DISTANCE, method="scan")
        assert faiss.omp_get_max_threads() == 3  # restored
        with faiss_threads(2):
            assert faiss.omp_get_max_threads() == 2
        assert faiss.omp_get_max_threads() == 3
    finally:
        faiss.omp_set_num_threads(before)
    assert rec.threads == [1]
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_reverse_search_runs_faiss_on_one_thread(web):
    faiss = pytest.importorskip("faiss")
    arch = web.archives[0]
    data = arch.read(arch.entry("I/mid.png"))[1]
    web.reverse_image_search_sync(data, 3)  # loads the index; a 3-image archive is scanned
    idx = archive_hash_index(arch, MATCH_DISTANCE)
    assert idx._flat is not None, "expected the flat scan on a tiny archive"
    rec = idx._flat = _Recorder(idx._flat)
    before = faiss.omp_get_max_threads()
    try:
        res = web.reverse_image_search_sync(data, 3)
    finally:
        idx._flat = rec.flat
    assert rec.threads == [1] and res.thumbnails
    assert faiss.omp_get_max_threads() == before
