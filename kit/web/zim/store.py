"""On-disk store of one archive's extract (issue 17, parts 2 and 3): article records in
compressed blocks, image records and their occurrences on pages, in one SQLite file
(``store.sqlite``) opened read-only and queried on demand, so nothing whole-archive is built in
Python at start.

Tables (ids are 0-based, in extraction order, as the BM25 index keys name them):

* ``blocks(id, data)``: articles ``BLOCK * id .. BLOCK * id + BLOCK - 1``, each a record of
  (path, title, first sentence, the first :data:`~kit.web.zim.tails.TEXT_PREFIX` characters of
  the body text BM25 indexes), packed by :func:`pack_records` into one zstd frame
  (:class:`TextCodec`, with the archive's trained dictionary). The tantivy index does not store
  text; the rest of long bodies is in ``tails.sqlite`` until the collection indexes are built
  (:mod:`kit.web.zim.tails`, :mod:`kit.web.zim.fulltext`). A path equal to the title with ``_``
  for spaces (Wikipedia's rule) is stored empty.
* ``titles(key, id)``: a 64-bit hash of the casefolded title -> article ids (Wikipedia-URL
  look-up, lowest id wins; :meth:`ArchiveStore.title_id` checks the title itself, so a hash
  collision cannot return another article).
* ``meta(key, value)``: ``zdict``, the dictionary (absent until trained, or for archives with
  less text than a sample), and ``articles``, the article count.
* ``images(id, path, mime, width, height)`` and ``occurrences(image, doc, position, alt,
  caption, context)`` (``position``: rank among the page's indexed images, 0 = lead image;
  ``context``: the text around the image, read by the collection build only, stored compressed
  with the archive's codec: :func:`pack_text`, empty for none).
* ``page_titles(doc, title)``: the title of every page that shows an indexed image, so image
  search picks an image's page and the image index names its pages without decompressing a
  block a page (a picture on thousands of pages would cost thousands of blocks a search).

Redirects are not stored: libzim follows them on demand (:meth:`_ZimArchive.entry`).
The views (:class:`ArticleView`, :class:`ImageView`, :class:`TitleMap`) keep the list/dict
interface the backend used when these were Python lists: one block read (~0.15 ms, cached) an
article, one indexed SQL look-up (~10 us) an image. Thread-safe: one connection per store,
serialised by a lock.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import zstandard

STORE_FILE = "store.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS blocks(id INTEGER PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS titles(key INTEGER NOT NULL, id INTEGER NOT NULL,
    PRIMARY KEY(key, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS images(id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE,
    mime TEXT NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS occurrences(image INTEGER NOT NULL, doc INTEGER NOT NULL,
    position INTEGER NOT NULL, alt TEXT NOT NULL, caption TEXT NOT NULL, context BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS page_titles(doc INTEGER PRIMARY KEY, title TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS aliases(doc INTEGER PRIMARY KEY, canonical INTEGER NOT NULL);
"""
#: SQLite page size of a store (kit: a block overflows onto full pages and leaves a remainder of
#: up to a page in its leaf, so smaller pages waste less: measured on 5,000 generated articles,
#: 1,316 / 1,365 / 1,347 B an article with 4 / 8 / 16 KB pages).
PAGE_SIZE = 4096
#: Created once the tables are filled (bulk inserts into an unindexed table are faster).
INDEXES = """
CREATE INDEX IF NOT EXISTS occurrences_image ON occurrences(image, position, doc);
"""
#: Articles a block (kit: measured on the shared archives' real articles, zstd level 5 with a
#: 64 KB dictionary: 1,961 B of text + 172 B of path/title/first sentence an article in frames
#: of one, 1,985 / 1,887 / 1,874 B for all of it in blocks of 8 / 16 / 32; on 5,000 generated
#: ones, 1,316 / 1,242 B in blocks of 16 / 32; a block of 32 is ~140 KB of text, ~0.15 ms to
#: decompress).
BLOCK = 32
#: Decoded blocks a store keeps (an LRU: a search's hits, then their fetch, read each block once).
BLOCK_CACHE = 64


@dataclass
class _ImageRecord:
    path: str
    mime: str
    width: int
    height: int
    #: {"doc", "position", "alt", "caption", "page_title"} (and "context" when asked for), in
    #: (doc, position) order
    occurrences: list[dict]


#: zstd level of the article blocks (kit, measured on 5,000 generated 4.2 KB articles in
#: blocks of 32 with a dictionary: level 5 1,242 B in 61 us an article, 9 1,208 B in 143 us of
#: CPU; decompression costs the same. On 1,200 blocks of the 200k realistic archive (issue 32):
#: level 5 946 B in 46 us, 6 936 B in 57 us, 9 920 B in 114 us; decompression 4.5-5.8 us at
#: each: 6 halves the articles phase's compression for 16 B an article).
ZSTD_LEVEL = 6
#: zstd level of frames deleted soon after the build (the tails: written once, read once by the
#: collection build, then dropped). Kit, 300 tail blocks of the 1M realistic archive: level 9
#: 176 us an article for 1,417 B, level 3 29 us for 1,626 B, level 1 20 us for 1,868 B.
FAST_LEVEL = 3
#: Dictionary size cap, and the text bytes a build samples before training one (kit: zstd's
#: guidance is samples of ~10-100x the dictionary; archives with less text get none).
ZDICT_MAX, ZDICT_SAMPLES = 131_072, 1_048_576
_PLAIN, _DICT = 0, 1  # first byte of a stored frame: its dictionary
#: Largest decoded frame a store writes or reads (a block of 32 articles is ~140 KB; Wikipedia's
#: longest article ~1 MB of text): a header claiming more is damaged, not an allocation to make.
FRAME_MAX = 1 << 28


class TextCodec:
    """Bytes <-> stored frame: a marker byte and one zstd frame, with the archive's dictionary
    (trained on its first :data:`ZDICT_SAMPLES` bytes of text) once there is one, and zstd's
    content checksum (4 bytes a block: a flipped bit decodes to an error, not to other text).
    Not thread-safe (callers hold a lock).

    Raises:
        ValueError: (pack) more than :data:`FRAME_MAX` bytes; (unpack) a frame that needs a
            dictionary this codec lacks, or whose header claims more than :data:`FRAME_MAX`.
    """

    def __init__(self, zdict: bytes = b"", level: int = ZSTD_LEVEL):
        self.zdict = bytes(zdict)
        self.level = level
        self._fast: TextCodec | None = None
        self._plain_c = zstandard.ZstdCompressor(level=level, write_checksum=True)
        self._plain_d = zstandard.ZstdDecompressor()
        if self.zdict:
            d = zstandard.ZstdCompressionDict(self.zdict)
            self._dict_c = zstandard.ZstdCompressor(level=level, dict_data=d, write_checksum=True)
            self._dict_d = zstandard.ZstdDecompressor(dict_data=d)

    @property
    def fast(self) -> TextCodec:
        """This codec at :data:`FAST_LEVEL`, same dictionary: for frames kept only until the
        collection build (the tails; any level reads back with :meth:`unpack`)."""
        if self._fast is None:
            self._fast = TextCodec(self.zdict, FAST_LEVEL)
        return self._fast

    @classmethod
    def train(cls, samples: list[str]) -> TextCodec:
        """A codec with a dictionary trained on ``samples`` (none if zstd cannot learn one)."""
        data = [t.encode("utf-8") for t in samples if t]
        try:
            zdict = zstandard.train_dictionary(min(ZDICT_MAX, sum(map(len, data)) // 8), data)
        except zstandard.ZstdError:  # too few or too alike samples: frames without one
            return cls()
        return cls(zdict.as_bytes())

    def pack(self, raw: bytes) -> bytes:
        if len(raw) > FRAME_MAX:
            raise ValueError(f"an article block of {len(raw)} bytes is over {FRAME_MAX}")
        if self.zdict:
            return bytes((_DICT,)) + self._dict_c.compress(raw)
        return bytes((_PLAIN,)) + self._plain_c.compress(raw)

    def unpack(self, blob: bytes) -> bytes:
        """Raises ValueError (or ``zstandard.ZstdError``) on a frame this codec did not write,
        including one whose header claims more than :data:`FRAME_MAX` bytes (a damaged header
        would otherwise be an allocation of that size)."""
        frame = blob[1:]
        size = zstandard.frame_content_size(frame)
        if size > FRAME_MAX:
            raise ValueError(f"a text frame claims {size} bytes (at most {FRAME_MAX})")
        if blob[:1] == bytes((_DICT,)):
            if not self.zdict:
                raise ValueError("a text frame needs the store's dictionary, which is missing")
            return self._dict_d.decompress(frame)
        return self._plain_d.decompress(frame)


def pack_text(codec: TextCodec, text: str) -> bytes:
    """One short text (an image's context) as a stored frame; ``b""`` for ``""`` (issue 32: ~280
    characters of context take ~110 bytes with the archive's dictionary, ~380 plain)."""
    return codec.pack(text.encode("utf-8")) if text else b""


def unpack_text(codec: TextCodec, blob: bytes) -> str:
    """Inverse of :func:`pack_text`; raises ValueError (or ``zstandard.ZstdError``) on a blob it
    did not write."""
    if not isinstance(blob, bytes):
        raise ValueError(f"stored as {type(blob).__name__}, not a blob")
    return codec.unpack(blob).decode("utf-8") if blob else ""


def read_codec(db: sqlite3.Connection) -> TextCodec:
    """The store's codec: its ``meta.zdict`` dictionary, or none yet."""
    row = db.execute("SELECT value FROM meta WHERE key = 'zdict'").fetchone()
    return TextCodec(row[0] if row else b"")


#: One article record: (path, title, first sentence, body text or its stored prefix).
Record = tuple[str, str, str, str]
_FIELDS = 4


def pack_strings(strings: Sequence[str]) -> bytes:
    """``strings`` as bytes: a little-endian uint32 count, a uint32 byte length each, then their
    UTF-8 (own format: a list of strings needs no serialisation library, and this one decodes by
    slicing)."""
    data = [f.encode("utf-8") for f in strings]
    return struct.pack(f"<I{len(data)}I", len(data), *map(len, data)) + b"".join(data)


def unpack_strings(raw: bytes, what: str = "a string list") -> list[str]:
    """Inverse of :func:`pack_strings`. Raises ValueError (naming ``what``) on bytes it did not
    write."""
    try:
        (n,) = struct.unpack_from("<I", raw)
        lens = struct.unpack_from(f"<{n}I", raw, 4)
    except struct.error as exc:
        raise ValueError(f"not {what}: {exc}") from exc
    at = 4 + 4 * n
    if at + sum(lens) != len(raw):
        raise ValueError(f"not {what}: field lengths do not add up")
    out = []
    for size in lens:
        out.append(raw[at:at + size].decode("utf-8"))
        at += size
    return out


def pack_records(records: Sequence[Record]) -> bytes:
    """``records`` as :func:`pack_strings` of their fields, four a record. A path that is the
    title with ``_`` for spaces is stored empty."""
    fields = []
    for path, title, first, text in records:
        fields += ["" if path == title.replace(" ", "_") else path, title, first, text]
    return pack_strings(fields)


def unpack_records(raw: bytes) -> list[Record]:
    """Inverse of :func:`pack_records`. Raises ValueError on bytes it did not write."""
    fields = unpack_strings(raw, "an article block")
    if len(fields) % _FIELDS:
        raise ValueError(f"not an article block: {len(fields)} fields")
    out = []
    for k in range(len(fields) // _FIELDS):
        path, title, first, text = fields[_FIELDS * k:_FIELDS * (k + 1)]
        out.append((path or title.replace(" ", "_"), title, first, text))
    return out


def title_hash(folded: str) -> int:
    """The ``titles.key`` of a casefolded title: the first 8 bytes of BLAKE2b of its UTF-8, as
    a signed int64 (SQLite's INTEGER)."""
    digest = hashlib.blake2b(folded.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


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
            row = self.db.execute("SELECT value FROM meta WHERE key = 'articles'").fetchone()
            if row is None:
                raise sqlite3.DatabaseError("no article count in meta")
            self.n_articles = int(row[0])
            (self.n_images,) = self.db.execute(
                "SELECT coalesce(max(id) + 1, 0) FROM images").fetchone()  # a B-tree descent
            codec = read_codec(self.db)
        except (sqlite3.Error, ValueError) as exc:
            raise ValueError(f"{path} is not a readable store: {exc}") from exc
        self.codec = codec
        self.path = path
        self.lock = threading.Lock()
        self._blocks: OrderedDict[int, list[Record]] = OrderedDict()

    def close(self) -> None:
        self.db.close()

    def _unpack(self, b: int, data: bytes) -> list[Record]:
        try:
            if not isinstance(data, bytes):  # SQLite keeps any type in any column
                raise ValueError(f"stored as {type(data).__name__}, not a blob")
            return unpack_records(self.codec.unpack(data))
        except (zstandard.ZstdError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise ValueError(f"{self.path}: article block {b} is damaged: {exc}") from exc

    def _decode(self, b: int, data: bytes) -> list[Record]:
        recs = self._blocks[b] = self._unpack(b, data)
        if len(self._blocks) > BLOCK_CACHE:
            self._blocks.popitem(last=False)
        return recs

    def records(self, ids: Sequence[int]) -> dict[int, Record]:
        """{id: record} of articles ``ids``, the blocks not cached read in one statement per
        :data:`IN_MAX` blocks (the cache is an LRU: blocks found are refreshed, and a call that
        needs more than :data:`BLOCK_CACHE` blocks leaves its last ones cached).

        Raises:
            IndexError: an id with no article.
            ValueError: a block that is missing, short or damaged.
        """
        for i in ids:
            if not 0 <= i < self.n_articles:
                raise IndexError(f"no article {i}")
        want = sorted({i // BLOCK for i in ids})
        with self.lock:
            got = {}
            for b in want:
                if b in self._blocks:
                    self._blocks.move_to_end(b)
                    got[b] = self._blocks[b]
            missing = [b for b in want if b not in got]
            for lo in range(0, len(missing), IN_MAX):
                part = missing[lo: lo + IN_MAX]
                rows = self.db.execute(f"SELECT id, data FROM blocks WHERE id IN "
                                       f"({','.join('?' * len(part))})", part).fetchall()
                for b, data in rows:
                    got[b] = self._decode(b, data)
        out = {}
        for i in ids:
            recs = got.get(i // BLOCK)
            if recs is None:
                raise ValueError(f"{self.path}: article block {i // BLOCK} is missing")
            if i % BLOCK >= len(recs):
                raise ValueError(f"{self.path}: article block {i // BLOCK} is short")
            out[i] = recs[i % BLOCK]
        return out

    def record(self, i: int) -> Record:
        """(path, title, first sentence, stored body prefix) of article ``i``; raises like
        :meth:`records`."""
        return self.records([i])[i]

    def article(self, i: int) -> dict:
        """{"path", "title", "first"} of article ``i``; IndexError when there is none."""
        path, title, first, _ = self.record(i)
        return {"path": path, "title": title, "first": first}

    def title_id(self, key: str) -> int | None:
        """Lowest article id whose casefolded title is ``key``."""
        with self.lock:
            ids = [i for (i,) in self.db.execute(
                "SELECT id FROM titles WHERE key = ? ORDER BY id", (title_hash(key),))]
        return next((i for i in ids if self.record(i)[1].casefold() == key), None)

    def block_len(self, block: int) -> int:
        """Articles in block ``block``: :data:`BLOCK`, fewer in the last one."""
        return min(BLOCK, self.n_articles - BLOCK * block)

    def iter_records(self, batch: int = 1024, start: int = 0
                     ) -> Iterator[tuple[int, Record]]:
        """(id, record) of every article from id ``start`` on, in id order, the blocks of about
        ``batch`` articles read at a time (not through the cache: a full pass would only evict
        it). Raises ValueError on a block that is missing, damaged or holds a wrong count (a
        pass never skips an article: the collection build and ``corpus()`` would silently
        index fewer)."""
        b, per_read = max(0, start) // BLOCK, max(1, batch // BLOCK)
        n_blocks = -(-self.n_articles // BLOCK)
        while b < n_blocks:
            with self.lock:
                rows = self.db.execute("SELECT id, data FROM blocks WHERE id >= ? ORDER BY id "
                                       "LIMIT ?", (b, per_read)).fetchall()
                decoded = [(k, self._unpack(k, d)) for k, d in rows]
            for k, recs in decoded:
                if b >= n_blocks:
                    break
                if k != b:  # a gap: every article of the count is in some block
                    raise ValueError(f"{self.path}: article block {b} is missing")
                if len(recs) != self.block_len(k):
                    raise ValueError(f"{self.path}: article block {k} holds {len(recs)} articles")
                for j, rec in enumerate(recs):
                    if BLOCK * k + j >= start:
                        yield BLOCK * k + j, rec
                b += 1
            if not rows:
                raise ValueError(f"{self.path}: article block {b} is missing")

    def iter_articles(self, batch: int = 1024, start: int = 0
                      ) -> Iterator[tuple[int, str, str, str]]:
        """(id, path, title, stored body prefix) of every article from id ``start`` on, in id
        order (full texts: :func:`kit.web.zim.fulltext.iter_full_texts`)."""
        for i, (path, title, _, text) in self.iter_records(batch, start):
            yield i, path, title, text

    def aliases(self) -> dict[int, int]:
        """{article: the earlier article whose body it duplicates} (full duplicate copies, not
        redirects: indexed once, under the first copy; see :mod:`kit.web.zim.build`)."""
        return dict(self.db.execute("SELECT doc, canonical FROM aliases").fetchall())

    def iter_meta(self, batch: int = 1024) -> Iterator[dict]:
        """{"path", "title", "first"} of every article in id order."""
        for _, (path, title, first, _) in self.iter_records(batch):
            yield {"path": path, "title": title, "first": first}

    def image(self, i: int) -> _ImageRecord:
        """Image ``i`` with its occurrences in (doc, position) order, each with its page's
        ``page_title`` and ``context``. Raises IndexError if there is no image ``i`` (or the store
        lacks a page's title: see :meth:`images_with_pages`), ValueError on a damaged context."""
        return self.images_with_pages([i], bare_ok=True, contexts=True)[i]

    def images_with_pages(self, ids: Sequence[int], *, pages: bool = False,
                          bare_ok: bool = False, sample: int | None = None,
                          contexts: bool = False) -> dict[int, _ImageRecord]:
        """Images ``ids`` with their occurrences in (doc, position) order, each with its page's
        ``page_title`` (table ``page_titles``: no block is read), in one statement per
        :data:`IN_MAX` ids (issue 17: image and reverse search read their hits in one go, not
        one look-up per image and per occurrence). ``pages``: also every page's ``page_path``
        and ``page_first`` (:meth:`add_pages`, one statement for the blocks not cached: an
        image on thousands of pages costs thousands of blocks, so search asks :meth:`add_pages`
        for the pages it shows only). ``bare_ok``: an image without occurrences is returned
        (:meth:`image`) rather than refused. ``sample``: an image's occurrences in (position,
        doc) order (lead images first) up to the first that cover ``sample`` distinct pages (at
        least one), read through the ``occurrences_image`` index (issue 32: the rows read do not
        grow with the pages that show an image, and an icon is on 10^4-10^5 Wikipedia pages):
        the first ``sample`` pages by (lowest position, doc) are exactly those of the full list;
        None: all of them. ``contexts``: each occurrence's ``context`` too (decompressed: only
        the collection build reads it; searches leave it out).

        Raises:
            TypeError: an id that is not an int (``1.7``, ``"3"``, ``None``, ``True``).
            IndexError: an id outside ``0 <= id < 2**63`` (SQLite's INTEGER range), an id with no
                image, an image with no occurrences unless ``bare_ok`` (the build stores only
                images some page shows), or an occurrence whose page is missing or has no
                title row. :meth:`LocalZimWeb._records` turns these into ``BackendError`` (index
                and store disagree).
            ValueError: (``pages``) a damaged block; (``contexts``) a damaged context.
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
            self._read_images(want[lo: lo + IN_MAX], sample, out, contexts)
        if sample is not None:  # an image whose first rows repeat pages: read further, alone
            need = max(1, int(sample))
            limit = need
            while short := [i for i, rec in out.items() if len(rec.occurrences) >= limit
                            and len({o["doc"] for o in rec.occurrences}) < need]:
                limit *= 4
                for i in short:
                    del out[i]
                for lo in range(0, len(short), IN_MAX):
                    self._read_images(short[lo: lo + IN_MAX], limit, out, contexts)
        missing = [i for i in want if i not in out]
        if missing:
            raise IndexError(f"no image {missing[0]}")
        bare = next((i for i, rec in out.items() if not rec.occurrences), None)
        if bare is not None and not bare_ok:  # a search hit needs a page to show it on
            raise IndexError(f"image {bare} has no occurrences")
        if pages:
            self.add_pages([o for rec in out.values() for o in rec.occurrences])
        return out

    def _read_images(self, part: list[int], limit: int | None,
                     out: dict[int, _ImageRecord], contexts: bool = False) -> None:
        """Step of :meth:`images_with_pages`: the records of ``part`` (at most :data:`IN_MAX`
        ids) into ``out``, each with at most ``limit`` occurrences (None: all), first in
        (position, doc) order, kept in (doc, position) order."""
        if limit is None:
            on, args = "o.image = i.id", part
        else:  # a correlated LIMIT: an index range of at most ``limit`` entries an image
            on = ("o.rowid IN (SELECT rowid FROM occurrences WHERE image = i.id"
                  " ORDER BY position, doc LIMIT ?)")
            args = [max(1, int(limit)), *part]
        with self.lock:
            rows = self.db.execute(
                "SELECT i.id, i.path, i.mime, i.width, i.height, o.doc, o.position, o.alt,"
                f" o.caption, {'o.context' if contexts else 'NULL'}, t.title FROM images i"
                f" LEFT JOIN occurrences o ON {on}"
                " LEFT JOIN page_titles t ON t.doc = o.doc"
                f" WHERE i.id IN ({','.join('?' * len(part))}) ORDER BY i.id, o.doc, o.position",
                args).fetchall()
        for i, path, mime, w, h, d, p, alt, cap, ctx, title in rows:
            rec = out.get(i)
            if rec is None:
                rec = out[i] = _ImageRecord(path, mime, w, h, [])
            if d is None:  # LEFT JOIN: an image without occurrences
                continue
            if not (type(d) is int and type(p) is int and 0 <= d < self.n_articles):
                raise IndexError(f"image {i}: occurrence on missing article {d!r} "
                                 f"(position {p!r})")
            if title is None:
                raise IndexError(f"image {i}: page {d} has no title row")
            occ = {"doc": d, "position": p, "alt": alt, "caption": cap, "page_title": title}
            if contexts:
                try:
                    occ["context"] = unpack_text(self.codec, ctx)
                except (zstandard.ZstdError, ValueError) as exc:
                    raise ValueError(f"{self.path}: image {i}: the context on page {d} is "
                                     f"damaged: {exc}") from exc
            rec.occurrences.append(occ)

    def add_pages(self, occurrences: Sequence[dict]) -> None:
        """Set ``page_path``, ``page_title`` and ``page_first`` on each of ``occurrences`` (as
        :meth:`images_with_pages` returns them), their pages' blocks read in one statement.
        Raises like :meth:`records`."""
        docs = self.records([o["doc"] for o in occurrences])
        for o in occurrences:
            path, title, first, _ = docs[o["doc"]]
            o.update(page_path=path, page_title=title, page_first=first)


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
