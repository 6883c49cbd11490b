"""Where the kit finds data and keeps caches (docs/contracts.md "Data location").

Resolution order for shared data: an explicit path, then ``$MMSEARCH_KIT_DATA``, then ``../shared/data``
beside the checkout; ZIM archives can also be downloaded from Kiwix into the cache (:mod:`kit.web.kiwix`).
Callers that need a file and get ``None`` must say so clearly (tests skip with a reason; notebooks raise with instructions).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """Return the real-data folder (ZIM archives, benchmark samples, trajectories) or ``None``.

    Raises:
        FileNotFoundError: ``explicit`` was given, or ``$MMSEARCH_KIT_DATA`` is set, and is not a folder (a
            misspelt variable is an error, never silently the default).
    """
    if explicit is not None:
        p = Path(explicit).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(f"data folder {p} does not exist")
        return p
    env = os.environ.get("MMSEARCH_KIT_DATA")
    if env:
        p = Path(env).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(f"MMSEARCH_KIT_DATA={env} is not a folder: point it at the shared data folder "
                                    "(with zim/) or unset it")
        return p
    p = PROJECT_ROOT.parent / "shared" / "data"
    return p if p.is_dir() else None


def zim_paths(data_dir: Path | None = None) -> list[Path]:
    """All ``*.zim`` archives under ``<data>/zim`` (sorted). Without a data folder: the archives
    downloaded into ``cache_dir()/zim`` (``python -m kit.cli fetch-zim NAME``), else ``[]``."""
    d = data_dir or shared_data_dir()
    if d is None or not (d / "zim").is_dir():
        if data_dir is None:
            return sorted((cache_dir() / "zim").glob("*.zim"))
        return []
    return sorted((d / "zim").glob("*.zim"))


def cache_dir() -> Path:
    """Kit cache folder (search indexes, tokenizer files, tiny checkpoints); created on demand."""
    p = Path(os.environ.get("MMSEARCH_KIT_CACHE", "~/.cache/mmsearch-kit")).expanduser()
    p.mkdir(parents=True, exist_ok=True)
    return p


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 hex digest of a file, read in 1 MiB chunks.

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


class JsonFileError(ValueError):
    """A small JSON state file that is not one: ``why`` is one line (``not a regular file``, ``N bytes, more
    than <what> holds``, ``a link to nothing``, ``not readable JSON (<exception>)``)."""

    def __init__(self, path: Path, why: str):
        self.path, self.why = path, why
        super().__init__(why)


def read_json_file(path: str | os.PathLike, *, max_bytes: int, what: str) -> object:
    """The JSON value of a small state file (a run's ``run_identity.json``, a sequence's ``sequence.json``),
    read only when it is a regular file of at most ``max_bytes`` bytes (a FIFO or a link to a device is never
    opened; a huge file is never read). ``what`` names the file's kind in the size message (``"an identity"``).

    Raises:
        FileNotFoundError: nothing is there (a link to nothing is a :class:`JsonFileError`).
        JsonFileError: not a regular file, over ``max_bytes``, not UTF-8 JSON (or nested too deeply).
    """
    import json
    import stat

    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        if not p.is_symlink():
            raise FileNotFoundError(str(p)) from None
        raise JsonFileError(p, "a link to nothing") from None
    if not stat.S_ISREG(st.st_mode):
        raise JsonFileError(p, "not a regular file")
    if st.st_size > max_bytes:
        raise JsonFileError(p, f"{st.st_size} bytes, more than {what} holds")
    try:
        return json.loads(p.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise JsonFileError(p, f"not readable JSON ({type(e).__name__})") from None
