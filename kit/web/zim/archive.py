"""One ZIM archive read with ``libzim``: entry look-up (redirects followed), article iteration, and
its per-archive extract (article text, image records, perceptual hashes) built once into the cache
(``<index root>/<key[:16]>-v<INDEX_FORMAT>/``, the key read from the ZIM header:
:mod:`kit.web.zim.identity`; streaming and resumable: :mod:`kit.web.zim.build`) and opened
lazily on later starts (an SQLite store read on demand, :mod:`kit.web.zim.store`, and memory-mapped
hashes)."""

from __future__ import annotations

import json
import logging
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import libzim.reader
import numpy as np

from kit.types import BackendError
from kit.web.urls import zim_url
from kit.web.zim.build import BUILD_FILE, FORMAT_FILE, _base_mime, build_archive, is_article_path
from kit.web.zim.cache import INDEX_FORMAT, _load_or_build, _write_json_atomic
from kit.web.zim.fulltext import full_texts, iter_full_texts
from kit.web.zim.html import _Article, _extract_article
from kit.web.zim.identity import IdleSha256, archive_key
from kit.web.zim.images import HASH_CROPS
from kit.web.zim.store import STORE_FILE, ArchiveStore, ArticleView, ImageView, TitleMap, _ImageRecord  # noqa: F401 (re-exported)
from kit.web.zim.tails import TAILS_FILE
from kit.web.zim.text import analyzer_language, text_analyzer

log = logging.getLogger(__name__)

#: Old-scheme ZIM namespaces that hold archive internals, never pages (ZIM spec "Namespaces").
_INTERNAL_NAMESPACES = {"M": "metadata", "-": "layout", "X": "search index", "Z": "search index",
                        "W": "well-known entry"}


class ZimError(ValueError):
    """A ZIM archive cannot be used: missing, unreadable, not a ZIM file, duplicate, or corrupt."""


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
        self.fingerprints = index_root / "_fingerprints"  # memoised sha256s (kit.web.zim.identity)
        try:
            checksum = self.archive.checksum if self.archive.has_checksum else None
            self.key = archive_key(str(self.archive.uuid), checksum, int(self.archive.filesize), path,
                                   self.fingerprints)
        except (OSError, RuntimeError) as exc:
            raise ZimError(f"cannot read ZIM archive {path}: {exc}") from exc
        # The index format is in the folder name: two kit versions never rebuild each other's index.
        self.index_dir = index_root / f"{self.key[:16]}-v{INDEX_FORMAT}"
        self.analyzer = text_analyzer(self.language)
        self.ready = False
        self.manifest: dict = {}
        self.store: ArchiveStore | None = None
        # Views over the store once loaded (list/dict interface, read on demand).
        self.articles: Sequence[dict] = []
        self.images: Sequence[_ImageRecord] = []
        self.hashes = np.zeros((0, len(HASH_CROPS), 2), dtype=np.uint64)
        self.title_map: TitleMap | dict[str, int] = {}

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

    def entry_indexes(self, paths: Sequence[str]) -> list[int] | None:
        """libzim's entry indexes of ``paths`` (redirects followed; a path with no entry is left
        out), or None when another thread holds the archive (read-ahead does not wait:
        :mod:`kit.web.zim.readahead`)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            out = []
            for p in paths:
                try:
                    e = self._follow(self.archive.get_entry_by_path(p)) if self.archive.has_entry_by_path(p) else None
                except (RuntimeError, KeyError):
                    e = None
                if e is not None:
                    out.append(int(e._index))
            return out
        finally:
            self.lock.release()

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
        return is_article_path(path, self.new_scheme)

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
    def build(self, out: Path, workers: int | None = None) -> dict:
        """Extract this archive into ``out`` (empty, or a killed build's folder: finished chunks
        are kept); returns the manifest. Streaming and parallel (:mod:`kit.web.zim.build`).

        Writes ``store.sqlite`` (articles with their text's prefix, images, occurrences:
        :mod:`kit.web.zim.store`), ``tails.sqlite`` (the rest of long texts, until the collection
        indexes are built: :mod:`kit.web.zim.tails`), ``hashes.npy`` (uint64, shape ``(images, len(HASH_CROPS),
        2)``: pHash, dHash per crop variant) and, last, ``manifest.json`` (counts, the archive's key
        and the sha256 of its bytes, hashed meanwhile by a child process on a core the build leaves
        idle: :class:`~kit.web.zim.identity.IdleSha256`).

        Raises:
            ZimError: a write failed (disk full, read-only folder); no index is left that loads.
        """
        done = out / "manifest.json"
        if done.is_file() and not (out / BUILD_FILE).exists():  # finished, killed before rename
            manifest = json.loads(done.read_text(encoding="utf-8"))
            if manifest.get("format") == INDEX_FORMAT and manifest.get("key") == self.key:
                return manifest
        try:
            sha256 = IdleSha256(self.file, self.fingerprints)  # on a core the build leaves idle
            try:
                counts = build_archive(self, out, workers)
            except BaseException:
                sha256.cancel()
                raise
            waited = time.perf_counter()
            digest = sha256.result()
            manifest = {
                "format": INDEX_FORMAT, "archive": self.file.name, "key": self.key,
                "sha256": digest, "size": sha256.stat.st_size, "mtime_ns": sha256.stat.st_mtime_ns,
                "language": self.language,
                "hash_crops": list(HASH_CROPS), **counts,
                # the wait for the idle child's sha256 after the build, and how it ended
                "sha256_after_build": {"seconds": round(time.perf_counter() - waited, 3), "how": sha256.after},
            }
            _write_json_atomic(done, manifest)  # last: marks a complete build
            (out / BUILD_FILE).unlink(missing_ok=True)
            (out / FORMAT_FILE).unlink(missing_ok=True)
        except (OSError, sqlite3.Error) as exc:
            raise ZimError(f"cannot build the index of {self.file.name} in {out}: {exc} (no index "
                           "was completed; finished chunks are kept for the next try)") from exc
        sa, si = counts["skipped_articles"], counts["skipped_images"]
        bad = {"unreadable entries": sa.get("unreadable", 0),
               "unparsable articles": sa.get("unparsable", 0),
               "undecodable images": si.get("undecodable", 0),
               "unreadable images": si.get("unreadable", 0)}
        bad = {k: n for k, n in bad.items() if n}
        if bad:
            log.warning("%s looks damaged: skipped %s (of %d entries)", self.file.name,
                        ", ".join(f"{n} {k}" for k, n in sorted(bad.items())), self.entry_count)
        return manifest

    def load(self) -> None:
        """Open the extracted data in ``self.index_dir`` lazily (an SQLite store and a
        memory-mapped hash array: nothing per article is read now); raises on anything
        missing/corrupt."""
        d = self.index_dir
        manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("format") != INDEX_FORMAT or manifest.get("key") != self.key:
            raise ValueError("index format or archive key differs")
        if manifest.get("hash_crops") != list(HASH_CROPS):
            raise ValueError("hash variants differ")
        # The key (UUID, stored MD5, size) is right in a partly downloaded file already: an index
        # built while entries could not be read is rebuilt once the file has changed since.
        unreadable = (manifest.get("skipped_articles", {}).get("unreadable", 0)
                      + manifest.get("skipped_images", {}).get("unreadable", 0))
        if unreadable and manifest.get("mtime_ns") != self.file.stat().st_mtime_ns:
            raise ValueError(f"the archive changed since a build that could not read {unreadable} of its entries")
        store = ArchiveStore(d / STORE_FILE)
        try:
            if (store.n_articles, store.n_images) != (manifest.get("articles"),
                                                      manifest.get("images")):
                raise ValueError("record counts differ from the manifest")
            shape = (store.n_images, len(HASH_CROPS), 2)
            hashes = (np.load(d / "hashes.npy", mmap_mode="r", allow_pickle=False)
                      if store.n_images else np.load(d / "hashes.npy", allow_pickle=False))
            if hashes.shape != shape or hashes.dtype != np.uint64:
                raise ValueError(f"hash array has shape {hashes.shape}, expected {shape}")
        except BaseException:
            store.close()
            raise
        if self.store is not None:
            self.store.close()
        self.manifest, self.store, self.hashes = manifest, store, hashes
        self.articles, self.images = ArticleView(store), ImageView(store)
        self.title_map = TitleMap(store)
        self.ready = True

    @contextmanager
    def store_reads(self) -> Iterator[ArchiveStore]:
        """The store, its read errors (IndexError: an id it lacks; ValueError: a missing or
        damaged block; ``sqlite3.Error``: a damaged file) raised as
        :class:`~kit.types.BackendError` naming the folder to delete: a search never fails with a
        traceback of the store's internals."""
        if self.store is None:
            raise BackendError(f"{self.file.name}: its index is not loaded")
        try:
            yield self.store
        except (IndexError, ValueError, sqlite3.Error) as exc:
            raise BackendError(f"{self.file.name}: index and store disagree ({exc}); delete "
                               f"{self.index_dir} to rebuild it") from exc

    def article_text(self, doc: int) -> str:
        """The indexed body text of article ``doc`` (without its title line): the store's copy,
        completed from the tails file or the archive when long (:mod:`kit.web.zim.fulltext`).
        Raises BackendError like :meth:`full_texts`."""
        return self.full_texts([doc])[doc]

    def full_texts(self, docs: Sequence[int]) -> dict[int, str]:
        """{doc: full indexed body text} of articles ``docs`` (:func:`~kit.web.zim.fulltext.full_texts`).

        Raises:
            BackendError: an id with no article, a damaged store, or an archive that extracts to
                another text than its index holds.
        """
        with self.store_reads() as store:
            return full_texts(self, store, docs)

    def iter_full_texts(self, start: int = 0) -> Iterator[tuple[int, str, str, str]]:
        """(doc, path, title, full body text) of every article from ``start``, in doc order
        (:func:`~kit.web.zim.fulltext.iter_full_texts`: the tails file, else the archive extracted
        again). Raises BackendError like :meth:`full_texts`."""
        with self.store_reads() as store:
            yield from iter_full_texts(self, store, start)

    def iter_corpus(self, text: bool = True) -> Iterator[tuple[int, str, str, str]]:
        """:meth:`iter_full_texts`, or with ``text=False`` (doc, path, title, "") from the store
        alone: paths and titles without reading a page (link graphs, title lists)."""
        if text:
            yield from self.iter_full_texts()
            return
        with self.store_reads() as store:
            for doc, (path, title, _first, _prefix) in store.iter_records(1024):
                yield doc, path, title, ""

    def drop_tails(self) -> bool:
        """Delete the tails file (the text of long bodies beyond the stored prefix, kept from the
        build until the collection indexes are built: :mod:`kit.web.zim.tails`); True if there
        was one. Readers that opened it keep reading it."""
        try:
            (self.index_dir / TAILS_FILE).unlink()
        except FileNotFoundError:
            return False
        return True

    def ensure_ready(self, build_fn=None) -> bool:
        """Load the cached data, extracting it first when missing or corrupt; True if built.

        ``build_fn`` (default :meth:`build`) is a seam for tests that check the cache is reused.
        """
        if self.ready:
            return False
        if getattr(multiprocessing.current_process(), "_inheriting", False):
            # A build-pool worker re-running an unguarded main script: waiting for the parent's
            # build lock would deadlock; failing lets the parent build in its own process.
            raise ZimError(f"{self.file.name}: index requested while a worker process starts "
                           "(guard the script's entry point with `if __name__ == '__main__':`)")
        return _load_or_build(self.index_dir, self.load, build_fn or self.build, self.file.name,
                              resumable=build_fn is None)
