"""The text of long articles beyond the stored prefix (issue 32: at most 2 KB of index an article).

An article record in the store (:mod:`kit.web.zim.store`) keeps the first
:data:`~kit.web.zim.snippets.LEAD_TEXT_CHARS` characters of its body: all a search snippet needs
whenever a query term is in the lead (:func:`~kit.web.zim.snippets.lead_snippet`). The rest of
each body, its *tail*, is written beside the store in ``tails.sqlite`` (table ``tails(id, data)``:
block ``id`` holds the tails of the store's block ``id``, packed with
:func:`~kit.web.zim.store.pack_strings` and compressed with the store's codec; a block whose
articles all fit their prefix has no row). The collection build reads the full texts from it; then
:meth:`LocalZimWeb.ensure_ready` deletes it unless ``keep_text=True`` (Wikipedia-weight pages:
~1.3 KB an article of the ~3.4 KB the full text would cost). Without it, a full text is read again
from the archive (:mod:`kit.web.zim.fulltext`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import zstandard

from kit.web.zim.snippets import LEAD_TEXT_CHARS
from kit.web.zim.store import TextCodec, pack_strings, unpack_strings

TAILS_FILE = "tails.sqlite"
#: Characters of a body kept in its store record (kit's choice: the snippet's lead region and one
#: window, so stored prefixes give the full texts' snippets whenever a term is in the lead).
TEXT_PREFIX = LEAD_TEXT_CHARS
TAILS_SCHEMA = "CREATE TABLE IF NOT EXISTS t.tails(id INTEGER PRIMARY KEY, data BLOB NOT NULL);"


def split_body(text: str) -> tuple[str, str]:
    """(stored prefix, tail) of a body text: ``text[:TEXT_PREFIX]`` and the rest."""
    return text[:TEXT_PREFIX], text[TEXT_PREFIX:]


def is_whole(prefix: str) -> bool:
    """Whether a stored body ``prefix`` is its whole text (shorter than :data:`TEXT_PREFIX`; one
    exactly that long may have a tail)."""
    return len(prefix) < TEXT_PREFIX


def tails_frame(codec: TextCodec, texts: Sequence[str]) -> bytes | None:
    """The compressed tails of one block's bodies ``texts`` (full texts, in record order), at the
    codec's :attr:`~kit.web.zim.store.TextCodec.fast` level; None when every body fits its prefix
    (the block then has no row). Thread-safe only with a codec of the calling thread's own."""
    tails = [split_body(t)[1] for t in texts]
    return codec.fast.pack(pack_strings(tails)) if any(tails) else None


def write_tails(db: sqlite3.Connection, block: int, frame: bytes | None) -> None:
    """Write block ``block``'s :func:`tails_frame` (if any) to the attached ``t`` database.
    Caller holds a transaction."""
    if frame is not None:
        db.execute("INSERT INTO t.tails VALUES (?, ?)", (block, frame))


class Tails:
    """Read-only handle on a store's ``tails.sqlite`` (``immutable=1``; the file may be deleted
    while open: the handle keeps reading it). Not thread-safe (callers hold the store's lock).

    Raises:
        FileNotFoundError: (constructor) no tails file.
        ValueError: (:meth:`block`) a damaged block or one with a wrong count.
    """

    def __init__(self, path: Path, codec: TextCodec):
        if not path.is_file():
            raise FileNotFoundError(path)
        uri = f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1"
        self.db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self.path, self.codec = path, codec

    def block(self, b: int, n: int) -> list[str]:
        """The ``n`` tails of block ``b`` (all empty when it has no row)."""
        row = self.db.execute("SELECT data FROM tails WHERE id = ?", (b,)).fetchone()
        if row is None:
            return [""] * n
        try:
            if not isinstance(row[0], bytes):
                raise ValueError(f"stored as {type(row[0]).__name__}, not a blob")
            tails = unpack_strings(self.codec.unpack(row[0]), "a tail block")
        except (zstandard.ZstdError, ValueError) as exc:
            raise ValueError(f"{self.path}: tail block {b} is damaged: {exc}") from exc
        if len(tails) != n:
            raise ValueError(f"{self.path}: tail block {b} holds {len(tails)} tails, not {n}")
        return tails

    def close(self) -> None:
        self.db.close()
