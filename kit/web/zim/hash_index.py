"""Sublinear exact reverse image search: a multi-index hash (MIH) over the perceptual hashes of an
archive's images (weagent_mmsearch Table 4 ``web_search_based_on_image``; docs/local_web.md
"Reverse image search").

Each indexed image has :data:`~kit.web.zim.images.HASH_CROPS` variants, each a 128-bit code
(pHash word, dHash word). A query matches an image when the summed Hamming distance of the query's
code to the closest variant is at most ``radius`` (:data:`~kit.web.zim.images.MATCH_DISTANCE`).

Index (Norouzi et al., "Fast exact search in Hamming space with multi-index hashing", 2014): each
64-bit word is cut into ``k`` contiguous chunks; per chunk a table sorts the codes by the chunk's
value (CSR: ``offsets[value] .. offsets[value + 1]`` in ``ids``). Generalised pigeonhole: with
per-chunk thresholds ``t_i`` and ``sum(t_i + 1) > radius``, every code within ``radius`` has some
chunk within ``t_i`` of the query's chunk, so probing every chunk value within ``t_i`` finds every
match. Each candidate is then verified by its exact 128-bit Hamming distance: the result is the
exact set of the linear scan (:func:`scan_matches`), for any radius. A query whose probes would cost
more than a scan (tiny archive, huge radius) is answered by faiss's exact ``IndexBinaryFlat``.

Persisted as ``ids.npy``/``offsets.npy``/``manifest.json`` in ``<archive extract>/hash_index/``,
built once (atomically, :func:`kit.web.zim.cache._load_or_build`) on the first reverse search and
memory-mapped on load, after one checking read (sizes and sha256 from the manifest, CSR structure):
a corrupt store is rebuilt with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import logging
import os
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from math import comb
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kit.web.zim.cache import INDEX_FORMAT, _load_or_build, _write_json_atomic, sync_files
from kit.web.zim.images import MATCH_DISTANCE

if TYPE_CHECKING:
    from kit.web.zim.archive import _ZimArchive

log = logging.getLogger(__name__)

#: Layout version of the files in ``hash_index/`` (bump on change: old ones are rebuilt).
#: 2: the manifest records each array file's size and sha256.
HASH_INDEX_FORMAT = 2
_ARRAYS = ("ids.npy", "offsets.npy")
_WORD_BITS = 64
#: Relative cost of one bucket probe, one candidate verification and one code of a linear scan
#: (measured on this kit's 2-core machine: ~50 ns, ~50 ns and ~3 ns with faiss's flat scan).
_PROBE_COST, _CANDIDATE_COST, _SCAN_COST = 50.0, 50.0, 3.0
#: faiss (OpenMP) threads of one query's flat scan (issue 32: a query's scan is too short to
#: split; with OpenMP's default of a thread a core, 13.4 ms wall against 5.1 ms on one thread at
#: 30k articles, 57 against 13 ms on a busy machine). Batches of queries may use more.
QUERY_THREADS = 1


@contextlib.contextmanager
def faiss_threads(n: int) -> Iterator[None]:
    """Run the block with faiss's OpenMP thread count at ``n`` (>= 1), then restore the count it
    had. OpenMP keeps the count per calling thread, so concurrent queries in other threads are
    not affected."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)



def chunk_layout(k: int) -> list[tuple[int, int, int]]:
    """(word, shift, bits) of the ``2 * k`` chunks: each 64-bit word cut into ``k`` contiguous
    chunks of near-equal size (larger chunks first), most significant first."""
    out = []
    for word in range(2):
        shift = _WORD_BITS
        for i in range(k):
            bits = _WORD_BITS // k + (1 if i < _WORD_BITS % k else 0)
            shift -= bits
            out.append((word, shift, bits))
    return out


@functools.lru_cache(maxsize=256)
def chunk_thresholds(bits: tuple[int, ...], radius: int, n_codes: int = 0) -> tuple[int, ...]:
    """Per-chunk probe radius ``t_i`` (``-1``: chunk not probed) with ``sum(t_i + 1) = radius + 1``
    at the least modelled work ``sum(C(bits_i, <= t_i) * (1 + n_codes / 2**bits_i))`` (probes plus
    expected candidates of uniform codes): greedy on the convex marginal cost, optimal while
    ``t_i < bits_i / 2``.

    Raises:
        ValueError: ``radius`` < 0 or not below the code length (every code would match).
    """
    if not 0 <= radius < sum(bits):
        raise ValueError(f"radius {radius} out of range for {sum(bits)}-bit codes")
    t = [-1] * len(bits)
    for _ in range(radius + 1):
        i = min((j for j in range(len(bits)) if t[j] < bits[j]),
                key=lambda j: (comb(bits[j], t[j] + 1) * (1.0 + n_codes / 2.0 ** bits[j]), j))
        t[i] += 1
    return tuple(t)


def _probes(bits: tuple[int, ...], t: tuple[int, ...]) -> int:
    return sum(sum(comb(b, j) for j in range(x + 1)) for b, x in zip(bits, t, strict=True))


def choose_k(n_codes: int, radius: int) -> int:
    """Chunks per word (3..8: chunks of at most 22 bits, so a table's CSR offsets stay <= 2**22)
    minimising the modelled query cost at ``radius``: probes plus expected candidates
    (``probes * n_codes / 2**bits``, uniform codes)."""
    def cost(k: int) -> float:
        bits = tuple(b for _, _, b in chunk_layout(k))
        t = chunk_thresholds(bits, radius, n_codes)
        probes = _probes(bits, t)
        cands = sum(sum(comb(b, j) for j in range(x + 1)) * n_codes / 2.0 ** b
                    for b, x in zip(bits, t, strict=True))
        return probes * _PROBE_COST + cands * _CANDIDATE_COST
    return min(range(3, 9), key=cost)


@functools.lru_cache(maxsize=64)
def _flip_masks(bits: int, t: int) -> np.ndarray:
    """All ``bits``-bit masks of popcount <= ``t`` (uint32), popcount order."""
    return np.array([sum(1 << p for p in c) for j in range(t + 1)
                     for c in itertools.combinations(range(bits), j)], dtype=np.uint32)


def scan_matches(hashes: np.ndarray, ph: int, dh: int, radius: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference linear scan (the search before this index): images (ascending) whose closest
    variant is within ``radius``, and that distance. ``hashes``: uint64 ``(images, variants, 2)``."""
    if not len(hashes):
        return np.zeros(0, np.int64), np.zeros(0, np.int32)
    dist = (np.bitwise_count(hashes[..., 0] ^ np.uint64(ph)).astype(np.int32)
            + np.bitwise_count(hashes[..., 1] ^ np.uint64(dh)).astype(np.int32))
    best = dist.min(axis=1)
    idx = np.flatnonzero(best <= radius)
    return idx.astype(np.int64), best[idx]


@dataclass(frozen=True)
class _ProbePlan:
    """Vectorised probes of one threshold tuple: per probed chunk ``(word, shift, bits)``, its
    number of flip masks; all masks end to end (int64) and each one's table base."""

    chunks: list[tuple[int, int, int]]
    counts: np.ndarray
    masks: np.ndarray
    bases: np.ndarray


class HashIndex:
    """Exact radius search over ``(images, variants, 2)`` uint64 perceptual hashes (see module doc).

    Args:
        hashes: the archive's hash array (the index reads codes from it, it does not copy them).
        ids: int32 ``(2k * codes,)``: per chunk table, code numbers sorted by the chunk's value.
        offsets: int64 ``(sum 2**bits + 1,)``: CSR bounds, tables one after the other.
        k: chunks per word.
    """

    def __init__(self, hashes: np.ndarray, ids: np.ndarray, offsets: np.ndarray, k: int):
        if hashes.ndim != 3 or hashes.shape[2] != 2 or hashes.dtype != np.uint64:
            raise ValueError(f"hashes must be uint64 (images, variants, 2), got {hashes.shape} {hashes.dtype}")
        self.hashes = hashes
        self.n_images, self.variants = hashes.shape[0], hashes.shape[1]
        self.codes = hashes.reshape(-1, 2)
        self.n_codes = len(self.codes)
        self.k = k
        self.chunks = chunk_layout(k)
        self.bases = np.cumsum([0] + [1 << b for _, _, b in self.chunks])
        if ids.shape != (len(self.chunks) * self.n_codes,) or offsets.shape != (int(self.bases[-1]) + 1,):
            raise ValueError("hash index arrays do not match the hash array")
        self.ids, self.offsets = ids, offsets
        self._pos_dtype = np.int32 if len(ids) < 2**31 else np.int64
        self._flat = None
        self._flat_lock = threading.Lock()
        self._plans: dict[tuple[int, ...], _ProbePlan] = {}

    # ---- build / persist ----------------------------------------------------------------------
    @classmethod
    def build(cls, hashes: np.ndarray, k: int | None = None, radius: int = MATCH_DISTANCE) -> HashIndex:
        """Build in memory; ``k`` defaults to :func:`choose_k` for ``radius``. O(codes log codes)."""
        codes = hashes.reshape(-1, 2)
        n = len(codes)
        if n >= 2**31:
            raise ValueError(f"{n} hash codes: over the int32 code numbers of the index")
        k = k or choose_k(n, radius)
        if not 3 <= k <= 16:
            raise ValueError(f"chunks per word must be 3..16, got {k}")
        ids, offs = [], []
        for table, (word, shift, bits) in enumerate(chunk_layout(k)):
            col = np.ascontiguousarray(codes[:, word])
            val = ((col >> np.uint64(shift)) & np.uint64((1 << bits) - 1)).astype(np.uint32)
            # Sort (value, code number) pairs: unique keys, so code order within a bucket
            # (deterministic) at a plain sort's speed (a stable argsort is ~4x slower).
            key = (val.astype(np.uint64) << np.uint64(32)) | np.arange(n, dtype=np.uint64)
            key.sort()
            ids.append((key & np.uint64(0xFFFFFFFF)).astype(np.int32))
            del key
            counts = np.bincount(val, minlength=1 << bits)
            off = np.empty(1 << bits, dtype=np.int64)
            off[0] = 0
            np.cumsum(counts[:-1], out=off[1:])
            offs.append(off + table * n)
        offsets = np.concatenate(offs + [np.array([len(ids) * n], dtype=np.int64)])
        return cls(hashes, np.concatenate(ids) if ids else np.zeros(0, np.int32), offsets, k)

    def save(self, out: Path) -> dict:
        """Write the index into folder ``out``; returns the manifest (written last), which records
        each array file's size and sha256 (checked by :meth:`load`)."""
        np.save(out / "ids.npy", self.ids, allow_pickle=False)
        np.save(out / "offsets.npy", self.offsets, allow_pickle=False)
        manifest = {"format": HASH_INDEX_FORMAT, "index_format": INDEX_FORMAT, "k": self.k,
                    "images": self.n_images, "variants": self.variants, "codes": self.n_codes,
                    "files": _file_records(out)}
        sync_files(out / "ids.npy", out / "offsets.npy")  # on disk before the manifest vouches for them
        _write_json_atomic(out / "manifest.json", manifest)
        return manifest

    @classmethod
    def load(cls, hashes: np.ndarray, d: Path) -> HashIndex:
        """Open a saved index memory-mapped, after checking it (one sequential read of its files).

        Checks: the manifest's format, image count and chunk count; each array file's size and sha256
        against the manifest; then the structure (:meth:`validate`), so a corrupt store never answers
        a query with an IndexError or a silently empty match list.

        Raises:
            ValueError: missing, stale (another format) or corrupt; OSError: unreadable. The caller
                (:func:`archive_hash_index`) rebuilds the store with a warning.
        """
        m = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
        if not isinstance(m, dict):
            raise ValueError("hash index manifest is not a JSON object")
        if (m.get("format"), m.get("index_format")) != (HASH_INDEX_FORMAT, INDEX_FORMAT) or (
                m.get("images"), m.get("variants")) != tuple(hashes.shape[:2]):
            raise ValueError("hash index format or image count differs")
        k = m.get("k")
        if type(k) is not int or not 3 <= k <= 16:
            raise ValueError(f"hash index manifest: chunks per word k={k!r}, not an integer 3..16")
        files = m.get("files")
        if not isinstance(files, dict) or any(
                not isinstance(files.get(n), dict) or files[n].get("bytes") != (d / n).stat().st_size for n in _ARRAYS):
            raise ValueError("hash index files differ from their manifest's sizes (or an older manifest)")
        if files != _file_records(d):
            raise ValueError("hash index files differ from their manifest's sha256: corrupt")
        ids = np.load(d / "ids.npy", mmap_mode="r", allow_pickle=False)
        offsets = np.load(d / "offsets.npy", mmap_mode="r", allow_pickle=False)
        if ids.dtype != np.int32 or offsets.dtype != np.int64:
            raise ValueError("hash index arrays have the wrong dtype")
        # Plain ndarray views of the maps: np.memmap's per-indexing wrapper costs ~10% a query.
        idx = cls(hashes, ids.view(np.ndarray), offsets.view(np.ndarray), k)
        idx.validate()
        return idx

    def validate(self) -> None:
        """Check the CSR structure: offsets non-decreasing from 0 to ``len(ids)``, each chunk table
        starting at ``table * n_codes``, every code number in ``0 .. n_codes - 1``.

        Raises:
            ValueError: the first violated condition.
        """
        offs, n = self.offsets, self.n_codes
        if int(offs[0]) != 0 or int(offs[-1]) != len(self.ids):
            raise ValueError(f"hash index offsets run {int(offs[0])}..{int(offs[-1])}, not 0..{len(self.ids)}")
        if bool(np.any(offs[1:] < offs[:-1])):
            raise ValueError("hash index offsets are not monotonic")
        starts = offs[self.bases[:-1]]
        if not np.array_equal(starts, np.arange(len(self.chunks), dtype=np.int64) * n):
            raise ValueError("hash index chunk tables do not start at multiples of the code count")
        if len(self.ids) and (int(self.ids.min()) < 0 or int(self.ids.max()) >= n):
            raise ValueError(f"hash index code numbers outside 0..{n - 1}")

    # ---- query --------------------------------------------------------------------------------
    def search(self, ph: int, dh: int, radius: int, *, method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
        """Images whose closest variant is within ``radius`` of code ``(ph, dh)``: (image numbers
        ascending int64, that distance int32), exactly :func:`scan_matches`'s answer.

        ``method``: ``"auto"`` (probe the tables unless the cost model says a flat scan is
        cheaper), ``"probe"`` or ``"scan"`` (faiss flat) to force one; a radius of 128 or more is
        always scanned. Raises ValueError for another ``method``."""
        if method not in ("auto", "probe", "scan"):
            raise ValueError(f"method must be auto, probe or scan, got {method!r}")
        if self.n_codes == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        bits = tuple(b for _, _, b in self.chunks)
        try:
            t = chunk_thresholds(bits, radius, self.n_codes)
        except ValueError:
            t = None
        per_probe = _PROBE_COST + _CANDIDATE_COST * self.n_codes / 2.0 ** max(bits)
        if t is None or method == "scan" or (
                method == "auto" and _probes(bits, t) * per_probe > self.n_codes * _SCAN_COST):
            return self._scan(ph, dh, radius)
        plan = self._plan(t)
        # Bucket numbers: each probed chunk's query value XOR its flip masks, plus its table base.
        qv = np.array([(ph if w == 0 else dh) >> s & ((1 << b) - 1) for w, s, b in plan.chunks],
                      dtype=np.int64)
        key = np.repeat(qv, plan.counts)
        key ^= plan.masks
        key += plan.bases
        offs = self.offsets
        start = np.take(offs, key)
        key += 1
        length = np.take(offs, key)
        length -= start
        # Positions of every candidate in ``ids``: the buckets' ranges laid end to end (empty
        # buckets repeat nothing, so they need no filtering first).
        ends = np.cumsum(length)
        if not len(ends) or not ends[-1]:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        start -= ends
        start += length
        pos = np.arange(int(ends[-1]), dtype=self._pos_dtype)
        pos += np.repeat(start.astype(self._pos_dtype, copy=False), length)
        cand = np.take(self.ids, pos)
        # Exact 128-bit Hamming distance of each candidate (0..128 fits uint8), in place.
        codes = np.take(self.codes, cand, axis=0)
        codes ^= np.array([ph, dh], dtype=np.uint64)
        bc = np.bitwise_count(codes)
        dist = bc[:, 0] + bc[:, 1]
        keep = np.flatnonzero(dist <= radius)
        return self._best_per_image(cand[keep].astype(np.int64), dist[keep].astype(np.int32))

    def _plan(self, t: tuple[int, ...]) -> _ProbePlan:
        """The probe plan of thresholds ``t`` (cached: one per radius in practice)."""
        plan = self._plans.get(t)
        if plan is None:
            probed = [(c, x, base) for c, x, base in zip(self.chunks, t, self.bases[:-1], strict=True)
                      if x >= 0]
            masks = [_flip_masks(c[2], x) for c, x, _ in probed]
            counts = np.array([len(m) for m in masks], dtype=np.int64)
            plan = _ProbePlan(chunks=[c for c, _, _ in probed], counts=counts,
                              masks=np.concatenate(masks).astype(np.int64),
                              bases=np.repeat(np.array([int(b) for _, _, b in probed], np.int64), counts))
            self._plans[t] = plan
        return plan

    def _best_per_image(self, code_no: np.ndarray, dist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(image numbers ascending, each one's smallest distance) of matched codes: one sort of
        ``image << 8 | distance`` (distances are 0..128), ~5x faster than a two-key lexsort on the
        ~4,000 codes a common picture matches at 1M images."""
        key = code_no // self.variants
        key <<= 8
        key |= dist
        key.sort()
        image = key >> 8
        first = np.ones(len(image), dtype=bool)
        first[1:] = image[1:] != image[:-1]
        return image[first], (key[first] & 0xFF).astype(np.int32)

    def _scan(self, ph: int, dh: int, radius: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact linear scan with faiss's ``IndexBinaryFlat`` (built on first use), on
        :data:`QUERY_THREADS` OpenMP threads."""
        import faiss

        with self._flat_lock:
            if self._flat is None:
                flat = faiss.IndexBinaryFlat(128)
                flat.add(_faiss_codes(self.codes))
                self._flat = flat
        q = _faiss_codes(np.array([[ph, dh]], dtype=np.uint64))
        with faiss_threads(QUERY_THREADS):  # one query: threads would only wait on each other
            _, dist, code_no = self._flat.range_search(q, radius + 1)  # keeps distances < radius
        return self._best_per_image(code_no.astype(np.int64), dist.astype(np.int32))


def merge_matches(parts: list[tuple[int, np.ndarray, np.ndarray]]) -> list[tuple[int, int, int]]:
    """``(distance, archive, image)`` of every match of several archives' :meth:`HashIndex.search`
    answers ``(archive, images, distances)``, sorted: in numpy, not as Python tuples (a common
    picture matches ~1,300 images at 1M)."""
    if not parts:
        return []
    i = np.concatenate([f for _, f, _ in parts])
    d = np.concatenate([b for _, _, b in parts])
    a = np.concatenate([np.full(len(f), ai, dtype=np.int64) for ai, f, _ in parts])
    order = np.lexsort((i, a, d))
    return list(zip(d[order].tolist(), a[order].tolist(), i[order].tolist(), strict=True))


def _file_records(d: Path) -> dict[str, dict[str, int | str]]:
    """Size (bytes) and sha256 of each array file of an index folder (the manifest's ``files``);
    a missing file raises OSError."""
    out: dict[str, dict[str, int | str]] = {}
    for name in _ARRAYS:
        with open(d / name, "rb") as f:
            out[name] = {"bytes": os.fstat(f.fileno()).st_size, "sha256": hashlib.file_digest(f, "sha256").hexdigest()}
    return out


def _faiss_codes(codes: np.ndarray) -> np.ndarray:
    """uint64 ``(n, 2)`` codes as faiss's uint8 ``(n, 16)`` rows (same bits, so same distances)."""
    return np.ascontiguousarray(codes, dtype=np.uint64).view(np.uint8).reshape(len(codes), 16)


_INDEXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def archive_hash_index(arch: _ZimArchive, radius: int) -> HashIndex:
    """The (loaded or now built) :class:`HashIndex` of a ready archive, kept per archive object.

    Stored in ``<arch.index_dir>/hash_index/``; where that folder cannot be written (read-only
    cache) the index is built in memory only, with a warning.
    """
    with _LOCK:
        idx = _INDEXES.get(arch)
        hashes = arch.hashes
        if idx is not None and idx.hashes is hashes:  # reloaded hashes: open the index again
            return idx
        final = Path(arch.index_dir) / "hash_index"
        box: list[HashIndex] = []

        def load() -> None:
            box[:] = [HashIndex.load(hashes, final)]

        def build(out: Path) -> dict:
            return HashIndex.build(hashes, radius=radius).save(out)

        try:
            _load_or_build(final, load, build, f"reverse image index of {arch.file.name}")
            idx = box[0]
        except OSError as exc:
            log.warning("cannot store the reverse image index of %s (%s): kept in memory",
                        arch.file.name, exc)
            idx = HashIndex.build(hashes, radius=radius)
        _INDEXES[arch] = idx
        return idx
