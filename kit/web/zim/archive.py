"""One ZIM archive read with ``libzim``: entry look-up (redirects followed), article iteration, and
its per-archive extract (article text, image records, perceptual hashes) built once into the cache
(``<index root>/<sha256[:16]>/``) and loaded on later starts."""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import libzim.reader
import numpy as np

from kit.types import BackendError
from kit.web.text_clean import is_decorative_image
from kit.web.urls import zim_url
from kit.web.zim.cache import INDEX_FORMAT, _load_or_build, _write_json_atomic, archive_sha256
from kit.web.zim.html import _Article, _extract_article
from kit.web.zim.images import HASH_CROPS, RASTER_MIMES, _center_crop, decode_image, image_hashes
from kit.web.zim.text import analyzer_language, text_analyzer

log = logging.getLogger(__name__)

#: Old-scheme ZIM namespaces that hold archive internals, never pages (ZIM spec "Namespaces").
_INTERNAL_NAMESPACES = {"M": "metadata", "-": "layout", "X": "search index", "Z": "search index",
                        "W": "well-known entry"}


class ZimError(ValueError):
    """A ZIM archive cannot be used: missing, unreadable, not a ZIM file, duplicate, or corrupt."""


def _base_mime(mimetype: str) -> str:
    return mimetype.split(";", 1)[0].strip().lower()


@dataclass
class _ImageRecord:
    path: str
    mime: str
    width: int
    height: int
    occurrences: list[dict]  # {"doc", "alt", "caption", "context", "position"}, page order


class _ZimArchive:
    """One opened archive with its (lazily loaded) indexes. Internal to :class:`LocalZimWeb`."""

    def __init__(self, path: Path, index_root: Path):
        self.file = path
        self.stem = path.stem
        if not path.exists():
            raise ZimError(f"ZIM archive {path} does not exist")
        if not path.is_file():
            raise ZimError(f"ZIM archive {path} is not a regular file")
        try:
            self.archive = libzim.reader.Archive(str(path))
            self.entry_count = self.archive.all_entry_count
        except (RuntimeError, OSError, ValueError) as exc:
            raise ZimError(f"cannot open ZIM archive {path}: {exc}") from exc
        self.lock = threading.RLock()  # libzim reads from several episodes' threads
        self.language = analyzer_language(self._meta("Language"))
        self.date = self._meta("Date") or None
        self.new_scheme = bool(self.archive.has_new_namespace_scheme)
        self.main_path = self._main_path()
        try:
            self.sha256 = archive_sha256(path, index_root / "_fingerprints")
        except OSError as exc:
            raise ZimError(f"cannot read ZIM archive {path}: {exc}") from exc
        self.index_dir = index_root / self.sha256[:16]
        self.analyzer = text_analyzer(self.language)
        self.ready = False
        self.manifest: dict = {}
        self.articles: list[dict] = []
        self.images: list[_ImageRecord] = []
        self.hashes = np.zeros((0, len(HASH_CROPS), 2), dtype=np.uint64)
        self.title_map: dict[str, int] = {}

    # ---- archive access ------------------------------------------------------------------------
    def _meta(self, key: str) -> str:
        try:
            if key in self.archive.metadata_keys:
                return bytes(self.archive.get_metadata(key)).decode("utf-8", "replace").strip()
        except (RuntimeError, KeyError):
            pass
        return ""

    def _main_path(self) -> str | None:
        try:
            if not self.archive.has_main_entry:
                return None
            entry = self._follow(self.archive.main_entry)
            return entry.path if entry is not None else None
        except RuntimeError:
            return None

    @staticmethod
    def _follow(entry, hops: int = 16):
        """Final entry after redirects, or ``None`` for a redirect loop/dangling redirect."""
        for _ in range(hops):
            if not entry.is_redirect:
                return entry
            try:
                entry = entry.get_redirect_entry()
            except (RuntimeError, KeyError):
                return None
        return None

    def entry(self, path: str):
        """Final (redirects followed) entry at ``path``, or ``None``."""
        with self.lock:
            try:
                if not self.archive.has_entry_by_path(path):
                    return None
                return self._follow(self.archive.get_entry_by_path(path))
            except (RuntimeError, KeyError):
                return None

    def read(self, entry) -> tuple[str, bytes]:
        """(mimetype without parameters, content bytes) of an entry.

        Raises:
            BackendError: libzim cannot read the entry (corrupt cluster), not retryable.
        """
        with self.lock:
            try:
                item = entry.get_item()
                return _base_mime(item.mimetype), bytes(item.content)
            except RuntimeError as exc:
                raise BackendError(
                    f"cannot read {entry.path} from {self.file.name}: {exc}") from exc

    def non_page_kind(self, path: str) -> str | None:
        """What a final entry at ``path`` is when it is neither an article nor a file (image) but
        archive-internal: ``"metadata"`` (``M/Counter``, ``M/Title``), ``"layout"`` (``-/favicon``,
        styles, scripts), ``"search index"`` (``X/``, ``Z/``), ``"well-known entry"`` (``W/``);
        ``None`` for content. Old-scheme archives only: the new scheme keeps those entries out of
        the content namespace that paths resolve in."""
        if self.new_scheme or len(path) < 2 or path[1] != "/":
            return None
        return _INTERNAL_NAMESPACES.get(path[0])

    def is_article_path(self, path: str) -> bool:
        if self.new_scheme:
            return not path.startswith(("-/", "_", "M/", "X/"))
        return path.startswith("A/")

    def iter_articles(self, skipped: dict[str, int] | None = None) -> Iterator[_Article]:
        """Every article (non-redirect ``text/html`` entry of the article namespace, except the main
        page) in entry-id order, extracted. Unreadable or unparsable pages are logged, counted in
        ``skipped`` (reason -> count) and left out."""
        skipped = {} if skipped is None else skipped
        for eid in range(self.entry_count):
            with self.lock:
                try:
                    entry = self.archive._get_entry_by_id(eid)
                    if entry.is_redirect or not self.is_article_path(entry.path):
                        continue
                    if entry.path == self.main_path:
                        continue
                    item = entry.get_item()
                    if _base_mime(item.mimetype) != "text/html":
                        continue
                    path, title, html = entry.path, entry.title, bytes(item.content)
                except RuntimeError as exc:
                    log.warning("%s: skipping unreadable entry #%d: %s", self.file.name, eid, exc)
                    skipped["unreadable"] = skipped.get("unreadable", 0) + 1
                    continue
            try:
                yield _extract_article(path, title, html)
            except ValueError as exc:
                log.warning("%s: skipping article %s: %s", self.file.name, path, exc)
                skipped["unparsable"] = skipped.get("unparsable", 0) + 1

    def url(self, path: str) -> str:
        """Percent-encoded ``zim://<stem>/<path>`` (see :mod:`kit.web.urls`)."""
        return zim_url(self.stem, path)

    # ---- per-archive data: extracted text, image records, perceptual hashes ----------------------
    def build(self, out: Path) -> dict:
        """Extract this archive into the empty folder ``out``; returns the manifest.

        Writes ``articles.json`` (path, title, first sentence per article), ``corpus.jsonl.gz`` (the
        text BM25 indexes, one JSON string per article, same order), ``images.json`` (indexed
        images with their occurrences on pages), ``hashes.npy`` (uint64, shape
        ``(images, len(HASH_CROPS), 2)``: pHash, dHash per crop variant) and ``manifest.json``.
        """
        t0 = time.perf_counter()
        articles: list[dict] = []
        occurrences: dict[str, list[dict]] = {}  # image src path -> its occurrences, page order
        page_occs: list[list[dict]] = []  # per article: its image occurrences in document order
        skipped_articles: dict[str, int] = {}
        with open(out / "corpus.jsonl.gz", "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            for art in self.iter_articles(skipped_articles):
                doc = len(articles)
                gz.write(json.dumps(art.indexed_text, ensure_ascii=False).encode() + b"\n")
                articles.append({"path": art.path, "title": art.title, "first": art.first_sentence})
                page: list[dict] = []
                for ref in art.images:
                    occ = {"doc": doc, "alt": ref.alt, "caption": ref.caption,
                           "context": ref.context}
                    occurrences.setdefault(ref.src_path, []).append(occ)
                    page.append(occ)
                page_occs.append(page)

        skipped: dict[str, int] = {}
        images: list[_ImageRecord] = []
        hashes: list[list[tuple[int, int]]] = []
        resolved: dict[str, int] = {}  # final path -> image index (refs may go through redirects)
        for src, occs in occurrences.items():
            entry = self.entry(src)
            if entry is None:
                skipped["missing"] = skipped.get("missing", 0) + 1
                continue
            if entry.path in resolved:
                images[resolved[entry.path]].occurrences.extend(occs)
                continue
            try:
                mime, data = self.read(entry)
            except BackendError:
                skipped["unreadable"] = skipped.get("unreadable", 0) + 1
                continue
            reason, rec, hs = self._hash_image(entry.path, mime, data, occs)
            if reason:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            resolved[entry.path] = len(images)
            images.append(rec)
            hashes.append(hs)
        # Position of each kept image among the kept images of its page (0 = lead image).
        kept = {id(o) for rec in images for o in rec.occurrences}
        for occs in page_occs:
            n = 0
            for occ in occs:
                if id(occ) in kept:
                    occ["position"] = n
                    n += 1
        for rec in images:
            rec.occurrences.sort(key=lambda o: (o["doc"], o["position"]))

        arr = np.array(hashes, dtype=np.uint64).reshape(len(images), len(HASH_CROPS), 2)
        np.save(out / "hashes.npy", arr, allow_pickle=False)
        _write_json_atomic(out / "articles.json", articles)
        _write_json_atomic(out / "images.json", [rec.__dict__ for rec in images])
        manifest = {
            "format": INDEX_FORMAT, "archive": self.file.name, "sha256": self.sha256,
            "size": self.file.stat().st_size, "language": self.language,
            "articles": len(articles), "skipped_articles": skipped_articles,
            "images": len(images), "skipped_images": skipped,
            "hash_crops": list(HASH_CROPS), "build_seconds": round(time.perf_counter() - t0, 3),
        }
        _write_json_atomic(out / "manifest.json", manifest)  # written last: marks a complete build
        return manifest

    def _hash_image(self, path: str, mime: str, data: bytes, occs: list[dict]):
        """(skip reason or "", record, hashes of the crop variants) for one referenced image."""
        if mime == "image/svg+xml":
            return "svg", None, None
        if mime not in RASTER_MIMES:
            return "not_raster", None, None
        try:
            img = decode_image(data)
        except BackendError:
            return "undecodable", None, None
        if is_decorative_image(path, *img.size):
            return "decorative", None, None
        rec = _ImageRecord(path, mime, img.size[0], img.size[1], list(occs))
        return "", rec, [image_hashes(_center_crop(img, c)) for c in HASH_CROPS]

    def load(self) -> None:
        """Load the extracted data from ``self.index_dir``; raises on anything missing/corrupt."""
        d = self.index_dir
        manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("format") != INDEX_FORMAT or manifest.get("sha256") != self.sha256:
            raise ValueError("index format or archive checksum differs")
        if manifest.get("hash_crops") != list(HASH_CROPS):
            raise ValueError("hash variants differ")
        articles = json.loads((d / "articles.json").read_text(encoding="utf-8"))
        images = [_ImageRecord(**r) for r in json.loads((d / "images.json").read_text("utf-8"))]
        hashes = np.load(d / "hashes.npy", allow_pickle=False)
        if hashes.shape != (len(images), len(HASH_CROPS), 2) or hashes.dtype != np.uint64:
            raise ValueError(f"hash array has shape {hashes.shape}, expected {len(images)} images")
        if len(articles) != manifest.get("articles") or len(images) != manifest.get("images"):
            raise ValueError("record counts differ from the manifest")
        if not (d / "corpus.jsonl.gz").is_file():
            raise ValueError("corpus.jsonl.gz is missing")
        self.manifest = manifest
        self.articles, self.images, self.hashes = articles, images, hashes
        self.title_map = {}
        for i, a in enumerate(articles):
            self.title_map.setdefault(a["title"].casefold(), i)
        self.ready = True

    def corpus_texts(self) -> Iterator[str]:
        """The indexed text of every article, in article order (from the cache)."""
        with gzip.open(self.index_dir / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                yield json.loads(line)

    def ensure_ready(self, build_fn=None) -> bool:
        """Load the cached data, extracting it first when missing or corrupt; True if built.

        ``build_fn`` (default :meth:`build`) is a seam for tests that check the cache is reused.
        """
        if self.ready:
            return False
        return _load_or_build(self.index_dir, self.load, build_fn or self.build, self.file.name)
