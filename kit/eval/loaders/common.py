"""What every benchmark loader shares (WeAgent §7.1, POINTS-Seeker §4.1): the result type, the
row-id rule, limits, JSON lines, and images that arrive as bytes.

Every loader returns a :class:`LoadResult`: the tasks, the rows that could not become tasks
(``problems``: one dict per row with a reason), and the rows a benchmark's own subset rule leaves
out (``filtered``: counts per reason, e.g. MMSearch rows without a query image). Nothing is
dropped silently.

Every image a row names is checked at load, decoded once by the kit's one decoder
(:func:`kit.images.decode_image`): a file that is not an image (a text file named ``.png``, a
truncated JPEG, an empty file) is that row's problem (:class:`BadImage`, the decoder's reason), never
a task that is then scored wrong. Images that arrive as bytes are written once under ``image_dir``
by content hash (:func:`save_image_bytes`); a picture with an EXIF orientation tag is stored upright
(as PNG) there and in :func:`checked_image`'s folder, so every consumer sees it as displayed.
``Task.input_images`` are absolute paths of the files used, and any hash a loader stores is of that file.
"""

from __future__ import annotations

import base64 as _base64
import hashlib as _hashlib
import io as _io
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.harness.episode import Task

__all__ = ["MAX_IMAGE_PIXELS", "MISSING_IMAGES", "TEXT_ONLY_LABEL", "BadImage", "BenchmarkError", "CheckedImage",
           "LoadResult", "check_limit", "check_missing_images", "checked_image", "default_image_dir", "image_to_bytes",
           "json_line", "resolve_by_name", "row_id", "save_image_bytes", "sha256_text"]


class BenchmarkError(ValueError):
    """A benchmark file or row that cannot be turned into a task (the message names the file)."""


class BadImage(BenchmarkError):
    """An image a row names exists but is not a picture the kit decodes (not an image, truncated,
    empty, over the limits): always that row's problem, also where an *absent* image loads the row
    text-only (MM-BrowseComp's ``missing_images="text_only"``)."""


MAX_IMAGE_PIXELS = 64_000_000  # same decompression-bomb guard as the harness registry


@dataclass
class LoadResult:
    """Outcome of loading one benchmark.

    Attributes:
        tasks: loaded tasks, in file order.
        problems: ``{"benchmark", "row", "id", "reason"}`` per row that could not be turned into a
            task (missing image, corrupt row, failed decryption ...).
        filtered: ``{reason: count}`` of rows left out by the benchmark's subset rule.
        info: provenance (files read with sha256, hub id and revision, subset rule).
    """

    benchmark: str
    tasks: list[Task] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)
    filtered: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def problem(self, row: Any, reason: str, task_id: str | None = None) -> None:
        """Record a row that could not be loaded (never includes decrypted text)."""
        self.problems.append({"benchmark": self.benchmark, "row": row, "id": task_id, "reason": reason})

    def add(self, tasks: list[Task], row: Any) -> list[Task]:
        """Append ``tasks`` converted from ``row``; a task whose id is already loaded is not added
        but reported as a problem of that row (a duplicate id would make episodes collide and stop
        the whole run). Returns the tasks added."""
        seen = self.__dict__.setdefault("_first_row", {t.id: None for t in self.tasks})
        added = []
        for t in tasks:
            if t.id in seen:
                self.problem(row, f"duplicate id {t.id!r} (first loaded from row {seen[t.id]})", t.id)
                continue
            seen[t.id] = row
            self.tasks.append(t)
            added.append(t)
        return added

    def skip(self, reason: str) -> None:
        """Count a row excluded by the benchmark's subset rule."""
        self.filtered[reason] = self.filtered.get(reason, 0) + 1

    def summary(self) -> dict[str, Any]:
        """Counts for reports: tasks, problem rows, filtered rows."""
        return {"benchmark": self.benchmark, "tasks": len(self.tasks), "problems": len(self.problems),
                "filtered": sum(self.filtered.values()), "filtered_by_reason": dict(self.filtered),
                "text_only": sum(1 for t in self.tasks if (t.metadata or {}).get("text_only"))}


TEXT_ONLY_LABEL = "text_only:missing_images"
MISSING_IMAGES = ("problem", "text_only")


def row_id(row: dict[str, Any], key: str) -> str:
    """The row's id from field ``key`` as text, by one rule for every loader: a string (stripped)
    or a number (an integral float is the integer: ``4.0`` and ``4`` are the same id ``"4"``), so
    ids that differ only in spacing or number type are caught as duplicates.

    Raises:
        BenchmarkError: ``missing id`` (absent, null, empty or blank) or ``bad id`` (a boolean, a
            list, an object, NaN or infinity).
    """
    import math

    v = row.get(key)
    if v is None or (isinstance(v, str) and not v.strip()):
        raise BenchmarkError(f"missing id: field {key!r} is {'absent' if key not in row else repr(v)[:40]}")
    if isinstance(v, bool) or not isinstance(v, (str, int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise BenchmarkError(f"bad id: field {key!r} must be a string or a number, got {repr(v)[:40]}")
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    return str(v).strip()


def check_limit(limit: Any) -> None:
    """``limit`` is ``None`` (all rows) or an integer >= 0.

    Raises:
        BenchmarkError: anything else (a negative number would otherwise load one row or none).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BenchmarkError(f"limit must be None or an integer >= 0, got {limit!r}")


def json_line(raw: bytes) -> Any:
    """One JSON line (UTF-8; a byte-order mark is ignored).

    Raises:
        ValueError: not UTF-8 or not JSON (``UnicodeDecodeError`` / ``JSONDecodeError``), or nested
            too deeply to decode (the decoder's ``RecursionError``, reworded).
    """
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None


def check_missing_images(missing_images: Any) -> None:
    """Raises ``ValueError`` unless ``missing_images`` is one of :data:`MISSING_IMAGES`."""
    if missing_images not in MISSING_IMAGES:
        raise ValueError(f"missing_images must be one of {MISSING_IMAGES}, got {missing_images!r}")


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` (UTF-8): how decrypted questions and answers appear in outputs."""
    return _hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_image_dir() -> Path:
    """Where images that arrive as bytes (parquet / hub rows) are materialized: the kit cache."""
    from kit.paths import cache_dir

    return cache_dir() / "benchmark_images"


def _store(data: bytes, image_dir: str | Path, prefix: str, ext: str) -> Path:
    """Write ``data`` once as ``image_dir/<prefix>_<sha256[:20]>.<ext>`` (atomically); the absolute path."""
    d = Path(image_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{prefix}_{_hashlib.sha256(data).hexdigest()[:20]}.{ext}"
    if not path.exists():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path.resolve()


def _decode(data: bytes, what: str):
    from kit.images import ImageError, decode_image

    try:
        return decode_image(data, max_pixels=MAX_IMAGE_PIXELS)
    except ImageError as e:
        raise BadImage(f"{what} rejected: {e.message}") from e


_EXT = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "BMP": "bmp"}


def save_image_bytes(data: bytes, image_dir: str | Path, prefix: str) -> Path:
    """Validate image bytes (full decode by :func:`kit.images.decode_image`, bomb guard) and store
    them once under ``image_dir`` as ``<prefix>_<sha256[:20]>.<ext>`` (the sha256 of the bytes
    stored). A picture with an EXIF orientation tag is stored upright, as PNG. Returns the absolute path.

    Raises:
        BadImage: the bytes are not a decodable image (message gives the decoder's reason).
    """
    from kit.images import encode_png, was_reoriented

    im = _decode(data, "image")
    if was_reoriented(im):
        return _store(encode_png(im), image_dir, prefix, "png")
    return _store(data, image_dir, prefix, _EXT.get(im.format or "", "png"))


@dataclass(frozen=True)
class CheckedImage:
    """An image file checked by :func:`checked_image`: the file to use and its sha256."""

    path: Path
    sha256: str


_CHECKED: dict[tuple[str, int, int, int], CheckedImage] = {}  # (path, inode, size, mtime) -> the file used
_CHECKED_MAX = 20_000


def checked_image(path: str | Path, upright_dir: str | Path | None = None) -> CheckedImage:
    """Check an image file a row names: read it (a regular file, not through a symlink at its last
    component once resolved) and decode it once with the kit's decoder. A picture with an EXIF
    orientation tag is written upright (PNG, by content hash) under ``upright_dir`` (default
    ``default_image_dir() / "upright"``) and that copy is the file used. The result of an unchanged
    file (same inode, size and modification time) is remembered: one decode per file per process.

    Raises:
        BenchmarkError: the file does not exist; :class:`BadImage`: it is not an image the kit decodes.
    """
    from kit.images import ImageError, encode_png, read_regular_file, was_reoriented

    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError as e:
        raise BenchmarkError(f"image {p.name!r} not found ({e.strerror})") from e
    key = (str(p), st.st_ino, st.st_size, st.st_mtime_ns)
    hit = _CHECKED.get(key)
    if hit is not None and hit.path.is_file():
        return hit
    try:
        data = read_regular_file(p)
    except ImageError as e:
        raise BadImage(f"image {p.name!r} rejected: {e.message}") from e
    im = _decode(data, f"image {p.name!r}")
    if was_reoriented(im):
        used = _store(encode_png(im), upright_dir or default_image_dir() / "upright", p.stem, "png")
        out = CheckedImage(used, _hashlib.sha256(used.read_bytes()).hexdigest())
    else:
        out = CheckedImage(p, _hashlib.sha256(data).hexdigest())
    if len(_CHECKED) >= _CHECKED_MAX:
        _CHECKED.clear()
    _CHECKED[key] = out
    return out


def image_to_bytes(value: Any) -> bytes | None:
    """Bytes of an image cell in any of the forms ``datasets`` / parquet give: ``{"bytes": ...}``,
    raw ``bytes``, a base64 string, or a PIL image (re-encoded as PNG). ``None`` for an empty cell.

    Raises:
        BenchmarkError: a value of another type, or a string that is not base64.
    """
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path") and Path(value["path"]).is_file():
            return Path(value["path"]).read_bytes()
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value) or None
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return _base64.b64decode(value, validate=True)
        except ValueError as e:
            raise BenchmarkError(f"image string is not base64 ({len(value)} characters)") from e
    if hasattr(value, "save") and hasattr(value, "size"):  # PIL.Image
        buf = _io.BytesIO()
        value.save(buf, format="PNG")
        return buf.getvalue()
    raise BenchmarkError(f"unsupported image value of type {type(value).__name__}")


def resolve_by_name(ref: str, folder: Path) -> Path:
    """Resolve an image reference (URL or foreign absolute path) to a file in ``folder`` by its
    file name, as the shared samples require, and check it (:func:`checked_image`: the file used,
    an upright copy for a picture with an EXIF orientation tag).

    Raises:
        BenchmarkError: no such file; :class:`BadImage`: the file is not an image the kit decodes.
    """
    name = Path(str(ref).split("?", 1)[0]).name
    p = folder / name
    if not name or not p.is_file():
        raise BenchmarkError(f"image {name or ref!r} not found in {folder}")
    return checked_image(p).path


def _aslist(value: Any) -> list:
    """A cell that should be a list: lists/tuples/arrays as lists, JSON-list strings parsed, a
    scalar string wrapped, None -> []."""
    if value is None:
        return []
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            try:
                out = json.loads(s)
                return list(out) if isinstance(out, list) else [out]
            except json.JSONDecodeError:
                pass
        return [value] if s else []
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _answers(*groups: Iterable[Any]) -> list[str]:
    """Reference answer first, then alternatives; stripped, non-empty, de-duplicated, order kept."""
    out: list[str] = []
    for g in groups:
        for a in g:
            s = str(a).strip() if a is not None else ""
            if s and s not in out:
                out.append(s)
    return out


def _file_info(path: Path) -> dict[str, Any]:
    from kit.manifest import file_sha256

    return {"path": str(path), "sha256": file_sha256(path)}
