"""Reverse image search through the multi-index hash (kit/web/zim/hash_index.py): exactly the linear
scan's matches (same threshold, same distances, same result order) on every image of the shared
archives and on synthetic codes with planted near-duplicates; built once, persisted, loaded lazily."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from kit.paths import zim_paths
from kit.web.zim import MATCH_DISTANCE, LocalZimWeb, decode_image
from kit.web.zim import hash_index as hix
from kit.web.zim.hash_index import HashIndex, archive_hash_index, chunk_thresholds, scan_matches

LEGACY = "wikipedia_en_ray_charles_2015-06"
FRENCH = "wikipedia_fr_test_2017-07"


@pytest.fixture(scope="module")
def web(data_dir) -> LocalZimWeb:
    paths = zim_paths(data_dir)
    if len(paths) < 2:
        pytest.skip("shared ZIM archives missing")
    w = LocalZimWeb(paths)
    w.ensure_ready()
    return w


def _random_codes(rng, n: int, variants: int = 3) -> np.ndarray:
    return rng.integers(0, 2**64, size=(n, variants, 2), dtype=np.uint64, endpoint=False)


def _flip(code: np.ndarray, rng, nbits: int) -> tuple[int, int]:
    """``code`` (2 words) with ``nbits`` distinct random bits flipped."""
    v = (int(code[0]) << 64) | int(code[1])
    for b in rng.choice(128, size=nbits, replace=False):
        v ^= 1 << int(b)
    return v >> 64, v & (2**64 - 1)


def _same(a, b) -> bool:
    return np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_every_shared_image_as_query_matches_the_scan(web):
    """Each variant of each indexed image of the shared archives, queried against every archive."""
    n = 0
    largest = max(web.archives, key=lambda a: len(a.hashes))
    for arch in web.archives:
        # The stored index (tiny archives: its cost model scans) on every query; probing tables
        # of 8 chunks per word (the layout of ~100 variants) on every 2nd and, for the largest
        # archive, of 3 (the layout from 1M variants up) on every 5th.
        stored, k8 = archive_hash_index(arch, MATCH_DISTANCE), HashIndex.build(arch.hashes, k=8)
        k3 = HashIndex.build(arch.hashes, k=3) if arch is largest else None
        for other in web.archives:
            for q, (ph, dh) in enumerate(other.hashes.reshape(-1, 2)):
                want = scan_matches(arch.hashes, int(ph), int(dh), MATCH_DISTANCE)
                assert _same(stored.search(int(ph), int(dh), MATCH_DISTANCE), want)
                if q % 2 == 0:
                    assert _same(k8.search(int(ph), int(dh), MATCH_DISTANCE, method="probe"), want)
                if k3 is not None and q % 5 == 0:
                    assert _same(k3.search(int(ph), int(dh), MATCH_DISTANCE, method="probe"), want)
                n += len(want[0])
    assert n > sum(len(a.hashes) for a in web.archives)  # every image found itself, plus twins


def _jpeg(img: Image.Image, scale: float, quality: int) -> bytes:
    img = img.convert("RGB").resize((max(8, int(img.width * scale)), max(8, int(img.height * scale))))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def test_backend_results_equal_the_scan_backends(web, monkeypatch):
    """Whole reverse search results (pages, order, knowledge graph, thumbnails) with the index and
    with the old scan, for resized/recompressed copies of shared images."""
    queries = []
    for arch in web.archives:
        for rec in arch.images[:: max(1, len(arch.images) // 6)]:
            data = arch.read(arch.entry(rec.path))[1]
            queries.append(_jpeg(decode_image(data), 0.8, 70))
    got = [web.reverse_image_search_sync(q, 10) for q in queries]
    monkeypatch.setattr(HashIndex, "search", lambda self, ph, dh, r: scan_matches(
        self.codes.reshape(self.n_images, self.variants, 2), ph, dh, r))
    want = [web.reverse_image_search_sync(q, 10) for q in queries]
    assert got == want
    assert sum(bool(r.pages) for r in got) >= len(queries) * 0.8


@pytest.mark.parametrize("k", [3, 4, 5, 8])
def test_planted_near_duplicates_at_the_threshold(k):
    """Codes at distance radius and radius + 1 from the query, with the flipped bits spread over
    the chunks, are found / not found exactly as the scan says; also for other radii."""
    rng = np.random.default_rng(k)
    hashes = _random_codes(rng, 3000)
    index = HashIndex.build(hashes, k=k)
    for trial in range(15):
        i = int(rng.integers(len(hashes)))
        radius = [MATCH_DISTANCE, 0, 5, 12, 40][trial % 5]
        for d in (radius, radius + 1, max(0, radius - 3)):
            ph, dh = _flip(hashes[i, trial % 3], rng, d)
            want = scan_matches(hashes, ph, dh, radius)
            assert _same(index.search(ph, dh, radius), want)
            assert (i in want[0]) == (d <= radius)


def test_clustered_codes_and_full_buckets():
    """Many codes sharing chunks (crowded buckets) and duplicates: best variant distance per image."""
    rng = np.random.default_rng(7)
    base = _random_codes(rng, 1, 1)[0, 0]
    hashes = np.empty((400, 3, 2), dtype=np.uint64)
    for i in range(400):
        for v in range(3):
            hashes[i, v] = _flip(base, rng, int(rng.integers(0, 40)))
    hashes[5] = hashes[6]  # an exact duplicate image
    index = HashIndex.build(hashes, k=3)
    for _ in range(20):
        ph, dh = _flip(base, rng, int(rng.integers(0, 30)))
        got = index.search(ph, dh, MATCH_DISTANCE)
        assert _same(got, scan_matches(hashes, ph, dh, MATCH_DISTANCE))
        assert np.all(np.diff(got[0]) > 0)


def test_flat_fallback_for_large_radius_and_empty_index():
    rng = np.random.default_rng(3)
    hashes = _random_codes(rng, 500)
    index = HashIndex.build(hashes)
    ph, dh = int(hashes[0, 0, 0]), int(hashes[0, 0, 1])
    for radius in (70, 127, 500):  # scan cheaper than probing, or every code matches
        assert _same(index.search(ph, dh, radius), scan_matches(hashes, ph, dh, radius))
    assert len(index.search(ph, dh, 500)[0]) == 500
    empty = HashIndex.build(np.zeros((0, 3, 2), dtype=np.uint64))
    assert [len(x) for x in empty.search(ph, dh, MATCH_DISTANCE)] == [0, 0]


def test_probe_with_every_bucket_empty_and_several_radii():
    """All codes far from the query: every probed bucket is empty (no candidate at all); then
    the per-radius probe plans (cached) each give the scan's answer on the same index."""
    hashes = np.zeros((300, 3, 2), dtype=np.uint64)
    index = HashIndex.build(hashes, k=4)
    ones = 2**64 - 1
    got = index.search(ones, ones, MATCH_DISTANCE, method="probe")
    assert [len(x) for x in got] == [0, 0] and got[0].dtype == np.int64 and got[1].dtype == np.int32
    rng = np.random.default_rng(11)
    codes = _random_codes(rng, 300)
    codes[::7] = np.array(_flip(codes[0, 0], rng, 9), dtype=np.uint64)
    index = HashIndex.build(codes, k=4)
    for radius in (0, 8, 9, 26, 9):
        ph, dh = int(codes[0, 0, 0]), int(codes[0, 0, 1])
        assert _same(index.search(ph, dh, radius, method="probe"), scan_matches(codes, ph, dh, radius))


def test_thresholds_satisfy_the_pigeonhole():
    for bits in ((21, 21, 22, 21, 21, 22), (16,) * 8, (8,) * 16, (32, 32, 32, 32)):
        for radius in (0, 1, 13, 26, 60):
            t = chunk_thresholds(bits, radius)
            assert sum(x + 1 for x in t) == radius + 1
            assert all(-1 <= x <= b for x, b in zip(t, bits, strict=True))
    with pytest.raises(ValueError, match="out of range"):
        chunk_thresholds((64, 64), 128)


def test_built_once_persisted_and_loaded_lazily(data_dir, tmp_path, monkeypatch):
    src = next(p for p in zim_paths(data_dir) if p.stem == FRENCH)
    shutil.copy(src, tmp_path / src.name)
    w = LocalZimWeb(tmp_path / src.name, index_dir=tmp_path / "idx")
    w.ensure_ready()
    arch = w.archives[0]
    store = Path(arch.index_dir) / "hash_index"
    assert not store.exists()  # not built at start
    data = arch.read(arch.entry(arch.images[0].path))[1]
    first = w.reverse_image_search_sync(data, 5)
    assert (store / "manifest.json").is_file() and first.pages

    def no_build(*a, **k):
        raise AssertionError("rebuilt a stored index")

    monkeypatch.setattr(HashIndex, "build", no_build)
    w2 = LocalZimWeb(tmp_path / src.name, index_dir=tmp_path / "idx")
    w2.ensure_ready()
    assert w2.reverse_image_search_sync(data, 5) == first
    idx = archive_hash_index(w2.archives[0], MATCH_DISTANCE)
    assert isinstance(idx.ids.base, np.memmap) and isinstance(idx.offsets.base, np.memmap)  # not read whole
    monkeypatch.undo()

    # A corrupt store is rebuilt, with the same results.
    (store / "ids.npy").write_bytes(b"garbage")
    w3 = LocalZimWeb(tmp_path / src.name, index_dir=tmp_path / "idx")
    assert w3.reverse_image_search_sync(data, 5) == first
    assert hix.HashIndex.load(w3.archives[0].hashes, store).n_codes == w3.archives[0].hashes.size // 2


def _corruptions():
    """(label, mutate(folder)) of a saved index: same shapes and dtypes, wrong contents (attack H1)."""
    def arr(name, f):
        def go(d: Path):
            a = np.load(d / name)
            f(a)
            np.save(d / name, a)
        return go

    def bitflip(d: Path):
        b = bytearray((d / "ids.npy").read_bytes())
        for p in range(200, len(b), 4096):
            b[p] ^= 0x01  # low bits: code numbers stay in range, only the checksum sees it
        (d / "ids.npy").write_bytes(bytes(b))

    def manifest(**kw):
        def go(d: Path):
            m = json.loads((d / "manifest.json").read_text())
            m.update(kw)
            (d / "manifest.json").write_text(json.dumps({k: v for k, v in m.items() if v is not None}))
        return go

    def rehash(f):  # the contents changed AND the manifest's checksums updated: the structure checks
        def go(d: Path):
            f(d)
            m = json.loads((d / "manifest.json").read_text())
            m["files"] = hix._file_records(d)
            (d / "manifest.json").write_text(json.dumps(m))
        return go

    def big(a):
        a[:] = 2**31 - 1

    def zero(a):
        a[:] = 0

    def neg(a):
        a[:] = -5

    def huge(a):
        a[:] = 2**40

    def rev(a):
        a[:] = a[::-1].copy()

    def last(a):
        a[-1] -= 1

    def swap(a):  # two unequal neighbours swapped: the ends and the table starts still right
        i = int(np.flatnonzero(np.diff(a[: len(a) // 2]) > 0)[-1])
        a[i], a[i + 1] = a[i + 1], a[i]

    return [("ids out of range", arr("ids.npy", big)), ("ids all zero", arr("ids.npy", zero)),
            ("offsets negative", arr("offsets.npy", neg)), ("offsets huge", arr("offsets.npy", huge)),
            ("offsets reversed", arr("offsets.npy", rev)), ("bit flips in ids", bitflip),
            ("truncated ids", lambda d: (d / "ids.npy").write_bytes((d / "ids.npy").read_bytes()[:-8])),
            ("no checksums (older manifest)", manifest(files=None)), ("k a string", manifest(k="x")),
            ("manifest a list", lambda d: (d / "manifest.json").write_text("[1]")),
            ("rehashed: ids out of range", rehash(arr("ids.npy", big))),
            ("rehashed: ids negative", rehash(arr("ids.npy", neg))),
            ("rehashed: offsets reversed", rehash(arr("offsets.npy", rev))),
            ("rehashed: offsets[-1] != len(ids)", rehash(arr("offsets.npy", last))),
            ("rehashed: offsets not monotonic", rehash(arr("offsets.npy", swap)))]


class _Archive:
    """What :func:`archive_hash_index` reads of an archive."""

    def __init__(self, hashes: np.ndarray, index_dir: Path):
        self.hashes, self.index_dir, self.file = hashes, str(index_dir), Path("toy.zim")


def test_corrupt_index_contents_are_refused_and_rebuilt(tmp_path, caplog):
    """Every corruption of a stored index is refused by HashIndex.load (never an IndexError or a silently
    empty answer at query time); through archive_hash_index it is rebuilt with a warning and answers as
    the scan does on the probing path."""
    rng = np.random.default_rng(11)
    hashes = _random_codes(rng, 4000)
    d = tmp_path / "hash_index"
    d.mkdir()
    HashIndex.build(hashes, k=4).save(d)
    orig = {p.name: p.read_bytes() for p in d.iterdir()}
    assert HashIndex.load(hashes, d).n_codes == 12000
    ph, dh = _flip(hashes[123, 1], rng, 3)
    want = scan_matches(hashes, ph, dh, MATCH_DISTANCE)
    assert 123 in want[0]
    for label, mutate in _corruptions():
        for name, data in orig.items():
            (d / name).write_bytes(data)
        mutate(d)
        with pytest.raises(ValueError):
            HashIndex.load(hashes, d)
            pytest.fail(f"{label}: loaded")
        arch = _Archive(hashes, tmp_path)
        caplog.clear()
        with caplog.at_level("WARNING"):
            idx = archive_hash_index(arch, MATCH_DISTANCE)
        assert [r for r in caplog.records if r.levelname == "WARNING"], label  # said, not silent
        assert _same(idx.search(ph, dh, MATCH_DISTANCE, method="probe"), want), label
        assert HashIndex.load(hashes, d).n_codes == 12000  # the rebuilt store loads
