"""On-disk store of one archive's extract (issue 17, parts 2 and 3): article metadata and text,
image records and their occurrences on pages, in one SQLite file (``store.sqlite``) opened
read-only and queried on demand, so nothing whole-archive is built in Python at start.

Tables (ids are 0-based, in extraction order, as the BM25 index keys name them):

* ``articles(id, path, title, title_key, first, text)``: ``title_key`` is the casefolded title
  (Wikipedia-URL look-up, first article wins), ``first`` the first sentence, ``text`` the body
  text BM25 indexes (zlib-compressed UTF-8; the only copy of the corpus text: the tantivy index
  does not store it).
* ``images(id, path, mime, width, height)`` and ``occurrences(image, doc, position, alt,
  caption, context)`` (``position``: rank among the page's indexed images, 0 = lead image).

Redirects are not stored: libzim follows them on demand (:meth:`_ZimArchive.entry`).
The views (:class:`ArticleView`, :class:`ImageView`, :class:`TitleMap`) keep the list/dict
interface the backend used when these were Python lists, one indexed SQL look-up (~10 us) per
item. Thread-safe: one connection per store, serialised by a lock.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

STORE_FILE = "store.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS articles(id INTEGER PRIMARY KEY, path TEXT NOT NULL,
    title TEXT NOT NULL, title_key TEXT NOT NULL, first TEXT NOT NULL, text BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS images(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE,
    mime TEXT NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS occurrences(image INTEGER NOT NULL, doc INTEGER NOT NULL,
    position INTEGER NOT NULL, alt TEXT NOT NULL, caption TEXT NOT NULL, context TEXT NOT NULL);
"""
#: Created once the tables are filled (bulk inserts into an unindexed table are faster).
INDEXES = """
CREATE INDEX IF NOT EXISTS articles_title ON articles(title_key, id);
CREATE INDEX IF NOT EXISTS occurrences_image ON occurrences(image, doc, position);
"""


@dataclass
class _ImageRecord:
    path: str
    mime: str
    width: int
    height: int
    occurrences: list[dict]  # {"doc", "alt", "caption", "context", "position"}, (doc, position)


def pack_text(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), 6)


class ArchiveStore:
    """Read-only handle on a finished ``store.sqlite`` (``immutable=1``: no locks, no journal).

    Raises:
        ValueError: the file is missing or not a store of this layout.
    """

    def __init__(self, path: Path):
        if not path.is_file():
            raise ValueError(f"{path} is missing")
        uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
        try:
            self.db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self.n_articles = self._count("articles")
            self.n_images = self._count("images")
        except sqlite3.Error as exc:
            raise ValueError(f"{path} is not a readable store: {exc}") from exc
        self.path = path
        self.lock = threading.Lock()

    def _count(self, table: str) -> int:
        # max(id) + 1 is a B-tree descent; count(*) would scan the table.
        (n,) = self.db.execute(f"SELECT coalesce(max(id) + 1, 0) FROM {table}").fetchone()
        return int(n)

    def close(self) -> None:
        self.db.close()

    def article(self, i: int) -> dict:
        """{"path", "title", "first"} of article ``i``; IndexError when there is none."""
        with self.lock:
            row = self.db.execute("SELECT path, title, first FROM articles WHERE id = ?",
                                  (i,)).fetchone()
        if row is None:
            raise IndexError(f"no article {i}")
        return {"path": row[0], "title": row[1], "first": row[2]}

    def article_text(self, i: int) -> str:
        """The body text BM25 indexed for article ``i`` (title line not included)."""
        with self.lock:
            row = self.db.execute("SELECT text FROM articles WHERE id = ?", (i,)).fetchone()
        if row is None:
            raise IndexError(f"no article {i}")
        return zlib.decompress(row[0]).decode("utf-8")

    def title_id(self, key: str) -> int | None:
        """Lowest article id whose casefolded title is ``key``."""
        with self.lock:
            row = self.db.execute("SELECT id FROM articles WHERE title_key = ? ORDER BY id "
                                  "LIMIT 1", (key,)).fetchone()
        return None if row is None else int(row[0])

    def iter_articles(self, batch: int = 1000) -> Iterator[tuple[int, str, str, str]]:
        """(id, path, title, body text) of every article in id order, read in batches."""
        last = -1
        while True:
            with self.lock:
                rows = self.db.execute("SELECT id, path, title, text FROM articles WHERE id > ? "
                                       "ORDER BY id LIMIT ?", (last, batch)).fetchall()
            if not rows:
                return
            for i, path, title, text in rows:
                yield i, path, title, zlib.decompress(text).decode("utf-8")
            last = rows[-1][0]

    def iter_meta(self, batch: int = 1000) -> Iterator[dict]:
        """{"path", "title", "first"} of every article in id order, read in batches."""
        last = -1
        while True:
            with self.lock:
                rows = self.db.execute("SELECT id, path, title, first FROM articles WHERE id > ?"
                                       " ORDER BY id LIMIT ?", (last, batch)).fetchall()
            if not rows:
                return
            for _, path, title, first in rows:
                yield {"path": path, "title": title, "first": first}
            last = rows[-1][0]

    def image(self, i: int) -> _ImageRecord:
        """Image ``i`` with its occurrences in (doc, position) order; IndexError if none."""
        with self.lock:
            row = self.db.execute("SELECT path, mime, width, height FROM images WHERE id = ?",
                                  (i,)).fetchone()
            occs = self.db.execute("SELECT doc, position, alt, caption, context FROM occurrences"
                                   " WHERE image = ? ORDER BY doc, position", (i,)).fetchall()
        if row is None:
            raise IndexError(f"no image {i}")
        return _ImageRecord(row[0], row[1], row[2], row[3], [
            {"doc": d, "position": p, "alt": a, "caption": c, "context": x}
            for d, p, a, c, x in occs])


class ArticleView(Sequence):
    """``arch.articles``: a read-only sequence of {"path", "title", "first"} read on demand."""

    def __init__(self, store: ArchiveStore):
        self.store = store

    def __len__(self) -> int:
        return self.store.n_articles

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self.store.article(i)

    def __iter__(self) -> Iterator[dict]:
        return self.store.iter_meta()


class ImageView(Sequence):
    """``arch.images``: a read-only sequence of :class:`_ImageRecord` read on demand."""

    def __init__(self, store: ArchiveStore):
        self.store = store

    def __len__(self) -> int:
        return self.store.n_images

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self.store.image(i)


class TitleMap:
    """``arch.title_map``: casefolded title -> article id, looked up in the store's index."""

    def __init__(self, store: ArchiveStore):
        self.store = store

    def get(self, key: str, default: int | None = None) -> int | None:
        found = self.store.title_id(key)
        return default if found is None else found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.store.title_id(key) is not None
