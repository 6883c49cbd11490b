"""On-disk store of one archive's extract (issue 17, parts 2 and 3): article metadata and text,
image records and their occurrences on pages, in one SQLite file (``store.sqlite``) opened
read-only and queried on demand, so nothing whole-archive is built in Python at start.

Tables (ids are 0-based, in extraction order, as the BM25 index keys name them):

* ``articles(id, path, title, title_key, first, text)``: ``title_key`` is the casefolded title
  (Wikipedia-URL look-up, first article wins), ``first`` the first sentence, ``text`` the body
  text BM25 indexes (UTF-8, a marker byte and a zstd frame an article, with the archive's trained dictionary:
  :class:`TextCodec`; the only copy of the corpus text: the tantivy index does not store it).
* ``meta(key, value)``: ``zdict``, that dictionary (absent until trained).
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import zstandard

STORE_FILE = "store.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS articles(id INTEGER PRIMARY KEY, path TEXT NOT NULL,
    title TEXT NOT NULL, title_key TEXT NOT NULL, first TEXT NOT NULL, text BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS images(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE,
    mime TEXT NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS occurrences(image INTEGER NOT NULL, doc INTEGER NOT NULL,
    position INTEGER NOT NULL, alt TEXT NOT NULL, caption TEXT NOT NULL, context TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
"""
#: SQLite page size of a store (kit: 4 KB pages hold one ~2 KB article row each and waste the
#: rest; 16 KB pages pack rows with ~5 % slack, measured on generated archives).
PAGE_SIZE = 16_384
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


#: zstd level of article text (kit, measured on 1,250 generated 4.2 KB articles with a
#: dictionary: level 3 1.46 KB in 36 us, 5 1.36 KB in 77 us, 9 1.31 KB in 269 us of CPU).
ZSTD_LEVEL = 5
#: Dictionary size cap, and the text bytes a build samples before training one (kit: zstd's
#: guidance is samples of ~10-100x the dictionary; articles before it are stored without one).
ZDICT_MAX, ZDICT_SAMPLES = 131_072, 1_048_576
_PLAIN, _DICT = 0, 1  # first byte of a stored text: its frame's dictionary


class TextCodec:
    """Article text <-> stored bytes: a marker byte and one zstd frame an article, with the
    archive's dictionary (trained on its first :data:`ZDICT_SAMPLES` bytes of text) once there
    is one. Articles are short, so a frame alone cannot use the phrasing they share; measured on
    generated archives: 2.16 KB an article with zlib, ~1.36 KB with a dictionary (generated
    archives recombine real sentences: real Wikipedia gains less). Not thread-safe (callers
    hold a lock).

    Raises (unpack): ValueError on a frame that needs a dictionary this codec lacks.
    """

    def __init__(self, zdict: bytes = b""):
        self.zdict = bytes(zdict)
        self._plain_c = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=False)
        self._plain_d = zstandard.ZstdDecompressor()
        if self.zdict:
            d = zstandard.ZstdCompressionDict(self.zdict)
            self._dict_c = zstandard.ZstdCompressor(level=ZSTD_LEVEL, dict_data=d,
                                                    write_checksum=False)
            self._dict_d = zstandard.ZstdDecompressor(dict_data=d)

    @classmethod
    def train(cls, samples: list[str]) -> TextCodec:
        """A codec with a dictionary trained on ``samples`` (none if zstd cannot learn one)."""
        data = [t.encode("utf-8") for t in samples if t]
        try:
            zdict = zstandard.train_dictionary(min(ZDICT_MAX, sum(map(len, data)) // 8), data)
        except zstandard.ZstdError:  # too few or too alike samples: frames without one
            return cls()
        return cls(zdict.as_bytes())

    def pack(self, text: str) -> bytes:
        raw = text.encode("utf-8")
        if self.zdict:
            return bytes((_DICT,)) + self._dict_c.compress(raw)
        return bytes((_PLAIN,)) + self._plain_c.compress(raw)

    def unpack(self, blob: bytes) -> str:
        if blob[:1] == bytes((_DICT,)):
            if not self.zdict:
                raise ValueError("a text frame needs the store's dictionary, which is missing")
            return self._dict_d.decompress(blob[1:]).decode("utf-8")
        return self._plain_d.decompress(blob[1:]).decode("utf-8")


def read_codec(db: sqlite3.Connection) -> TextCodec:
    """The store's codec: its ``meta.zdict`` dictionary, or none yet."""
    row = db.execute("SELECT value FROM meta WHERE key = 'zdict'").fetchone()
    return TextCodec(row[0] if row else b"")


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
            codec = read_codec(self.db)
        except sqlite3.Error as exc:
            raise ValueError(f"{path} is not a readable store: {exc}") from exc
        self.codec = codec
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
            return self.codec.unpack(row[0])

    def title_id(self, key: str) -> int | None:
        """Lowest article id whose casefolded title is ``key``."""
        with self.lock:
            row = self.db.execute("SELECT id FROM articles WHERE title_key = ? ORDER BY id "
                                  "LIMIT 1", (key,)).fetchone()
        return None if row is None else int(row[0])

    def iter_articles(self, batch: int = 1000, start: int = 0
                      ) -> Iterator[tuple[int, str, str, str]]:
        """(id, path, title, body text) of every article from id ``start`` on, in id order, read
        in batches."""
        last = start - 1
        while True:
            with self.lock:
                rows = self.db.execute("SELECT id, path, title, text FROM articles WHERE id > ? "
                                       "ORDER BY id LIMIT ?", (last, batch)).fetchall()
                texts = [self.codec.unpack(r[3]) for r in rows]
            if not rows:
                return
            for (i, path, title, _), text in zip(rows, texts, strict=True):
                yield i, path, title, text
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

    def images_with_pages(self, ids: Sequence[int]) -> dict[int, _ImageRecord]:
        """Images ``ids`` with their occurrences, each occurrence also carrying its page's
        ``page_path``, ``page_title`` and ``page_first``: one joined statement per
        :data:`IN_MAX` ids (issue 17: image and reverse search read their hits in one go, not
        one look-up per image and per occurrence). Occurrences in (doc, position) order, as
        :meth:`image`.

        Raises:
            TypeError: an id that is not an int (``1.7``, ``"3"``, ``None``, ``True``).
            IndexError: an id outside ``0 <= id < 2**63`` (SQLite's INTEGER range), an id with no
                image, an image with no occurrences (the build stores only images some page shows),
                or an occurrence whose page is missing. :meth:`LocalZimWeb._records` turns these
                into ``BackendError`` (index and store disagree).
        """
        import numbers  # local: this method's own check (numpy ints are ints too)

        for i in ids:  # checked first: SQLite would overflow on 2**63, and int() would round 1.7
            if isinstance(i, bool) or not isinstance(i, numbers.Integral):
                raise TypeError(f"image ids are ints, got {i!r} ({type(i).__name__})")
            if not 0 <= i < 2**63:
                raise IndexError(f"no image {i}: ids are in 0 <= id < 2**63")
        want = sorted({int(i) for i in ids})
        out: dict[int, _ImageRecord] = {}
        for lo in range(0, len(want), IN_MAX):
            part = want[lo: lo + IN_MAX]
            with self.lock:
                rows = self.db.execute(
                    "SELECT i.id, i.path, i.mime, i.width, i.height, o.doc, o.position, o.alt,"
                    " o.caption, o.context, a.path, a.title, a.first FROM images i"
                    " LEFT JOIN occurrences o ON o.image = i.id LEFT JOIN articles a ON a.id = o.doc"
                    f" WHERE i.id IN ({','.join('?' * len(part))}) ORDER BY i.id, o.doc, o.position",
                    part).fetchall()
            for i, path, mime, w, h, d, p, alt, cap, ctx, ppath, ptitle, pfirst in rows:
                rec = out.get(i)
                if rec is None:
                    rec = out[i] = _ImageRecord(path, mime, w, h, [])
                if d is None:  # LEFT JOIN: an image without occurrences
                    continue
                if ppath is None:
                    raise IndexError(f"image {i}: occurrence on missing article {d}")
                rec.occurrences.append({"doc": d, "position": p, "alt": alt, "caption": cap,
                                        "context": ctx, "page_path": ppath,
                                        "page_title": ptitle, "page_first": pfirst})
        missing = [i for i in want if i not in out]
        if missing:
            raise IndexError(f"no image {missing[0]}")
        bare = next((i for i, rec in out.items() if not rec.occurrences), None)
        if bare is not None:  # a search hit needs a page to show it on
            raise IndexError(f"image {bare} has no occurrences")
        return out


#: Ids per ``IN (...)`` list (SQLite's default limit on bound parameters is 32,766; smaller
#: lists keep each statement's plan and result set small).
IN_MAX = 500


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
