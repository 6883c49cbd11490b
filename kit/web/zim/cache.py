"""On-disk cache primitives of the local web: the index format version, atomic JSON writes, and the
load-or-build step shared by the per-archive extracts and the
collection indexes (docs/local_web.md, "Caching")."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

#: Bump when the on-disk index layout or the text/image extraction changes: old caches are rebuilt.
#: 2: plain NFC titles/text, licence footers and decorative images dropped, accent folding before
#: stemming. 3: titles parsed once (only known inline tags are markup), headings not decoded twice.
#: 4: images decoded by kit.images with the registry's limits (e.g. a 1:300 banner is not indexed).
#: 5: per-archive data in an SQLite store read on demand (kit.web.zim.store), text stored once
#: (not in tantivy), streaming resumable build (kit.web.zim.build). 6: article text as zstd
#: frames with a per-archive trained dictionary, 16 KB store pages, collection indexes committed
#: in steps (resumable). 7: article records (path, title, first sentence, text) in compressed
#: blocks of 32 on 4 KB pages, titles looked up by a 64-bit hash (index 2.45 -> ~1.9 KB an
#: article). 8: the titles of pages that show an image in their own table (image search reads
#: one block a hit, not one a page of the image). 9: decorative images by path and role too
#: (kit.web.zim.decorative: avatars, badges, sprites, icons), Greek/Cyrillic folding before the
#: analyzer and an ``exact`` field (exact forms first), duplicate bodies indexed once (aliases).
#: 10 (issue 32): pages without a declared charset read as UTF-8 (the ZIM format's encoding),
#: not libxml2's Latin-1; occurrences indexed by (image, position, doc) for lead-first samples.
#: 11 (issue 32): records keep a body's first 3,290 characters (the rest in ``tails.sqlite`` until
#: the collection indexes are built: kit.web.zim.tails), record blocks packed as one string list.
#: 12 (issue 32): image hashes resampled with a reducing gap (kit.web.zim.images.INDEX_REDUCING_GAP).
#: 13 (issue 32): the noise cut before parsing (kit.web.zim.precut): the same records on every page
#: tested, but a noise element's content no longer steers the licence-footer decisions.
#: 14 (issue 32): JPEG images hashed from their luminance decoded alone (kit.web.zim.images.decode_grey).
#: 15 (issue 32): folders named by the archive's key (its ZIM UUID, stored MD5 and size:
#: kit.web.zim.identity), not the sha256 of its bytes, which the build hashes on an idle core.
INDEX_FORMAT = 15
#: Bump when the collection indexes' layout changes (``<root>/collections/<key>/``, part of the
#: key, so those are rebuilt while the per-archive extracts are kept). 2 (issue 32): a
#: ``heads_<member>.bin`` table of each member's article paths and titles, so ranking returns
#: them without decompressing record blocks.
COLLECTION_FORMAT = 2


def sync_files(*paths: Path) -> None:
    """fsync each existing regular file (folders are walked, not followed into links): what was
    written without fsync is on disk before a manifest marks it complete. Raises OSError when a
    file cannot be synced (a write the OS could not complete earlier surfaces here)."""
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            sync_files(*sorted(path.iterdir()))
            continue
        if not path.is_file() or path.is_symlink():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_json_atomic(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())  # a manifest marks an index complete: never an empty file after a crash
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """Exclusive ``fcntl.flock`` on ``path`` (created): concurrent builders of the same index,
    in this or other processes, wait here for the one that builds."""
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _load_or_build(final: Path, load, build, what: str, *, resumable: bool = False) -> bool:
    """Run ``load()``; if it fails, ``build(work)`` into a build folder, move it to ``final`` and
    ``load()`` again. Returns True when it built.

    Concurrent builders (threads or processes) take an exclusive file lock
    (``<root>/.<name>.lock``): one builds, the others wait and then load its result. The final
    folder appears only by an atomic rename of a finished build, so a killed build never leaves
    an index that loads. ``resumable``: the build folder is the fixed ``<root>/.<name>.work``,
    kept when a build fails or is killed, and handed to the next ``build`` to resume; otherwise a
    fresh temporary folder, removed on failure.
    """
    try:
        load()
        return False
    except Exception as exc:  # noqa: BLE001 - any unreadable cache is rebuilt
        if final.exists():
            log.warning("rebuilding index %s for %s: %s", final, what, exc)
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    with _build_lock(root / f".{final.name}.lock"):
        try:  # another builder may have finished while this one waited
            load()
            return False
        except Exception:  # noqa: BLE001
            pass
        if resumable:
            tmp = root / f".{final.name}.work"
            tmp.mkdir(exist_ok=True)
        else:
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{final.name}.build-"))
        try:
            manifest = build(tmp)
            log.info("built ZIM index %s for %s: %s", final, what, manifest)
            if final.exists():  # stale or corrupt: move it aside, then replace
                stale = Path(tempfile.mkdtemp(dir=root, prefix=f".{final.name}.stale-"))
                try:
                    os.replace(final, stale / "old")
                except OSError:
                    pass
                shutil.rmtree(stale, ignore_errors=True)
            os.replace(tmp, final)
        except BaseException:
            if not resumable:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
    load()
    return True
