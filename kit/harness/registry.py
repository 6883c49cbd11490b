"""Evidence registry: persistent multimodal state of an episode (WeAgent §3.1, docs/contracts.md).

Every image that enters an episode (user input, search thumbnail, page image, code output) is
validated, saved in the episode workspace under a stable relative file name (``search_image_3.jpg``),
bound to a model-visible reference (``<search_image_3>``) and kept with its provenance. Tools accept
only registered relative names; anything else is an :class:`ImageError`.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import re
import stat
import tempfile
from pathlib import Path, PurePosixPath

from PIL import Image

from kit.harness.episode import RegisteredImage
from kit.harness.errors import ImageError

# The decoder and its limits live in kit.images (one home for every caller); re-exported here for
# the old import paths (kit.eval.loaders, kit.harness.transcript, tests).
from kit.images import MAX_ASPECT_RATIO, MAX_FILE_BYTES, MAX_PIXELS, decode_image, read_regular_file, was_reoriented

KINDS = ("user_image", "search_image", "page_image", "code_image", "rendered_obs")  # rendered_obs: V-Fold pages
_KEEP_FORMATS = {"PNG": ("png", "image/png"), "JPEG": ("jpg", "image/jpeg")}
_REF_RE = re.compile(r"^(?:<)?\s*(?:IMG:\s*)?([A-Za-z0-9_\-\.]+?)\s*(?:>)?$")
RASTER_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff"}
__all__ = ["KINDS", "MAX_ASPECT_RATIO", "MAX_FILE_BYTES", "RASTER_SUFFIXES", "EvidenceRegistry", "decode_image",
           "qwen_vision_tokens", "read_regular_file", "shrink_to_tokens"]


def qwen_vision_tokens(width: int, height: int, patch: int = 28) -> int:
    """Vision tokens of a ``width`` x ``height`` image under Qwen's smart resize before its area clamps:
    each side rounded to a multiple of ``patch`` (at least one), ``round(w/patch) * round(h/patch)``."""
    return max(1, round(width / patch)) * max(1, round(height / patch))


def shrink_to_tokens(im: Image.Image, max_tokens: int, patch: int = 28) -> Image.Image:
    """Downscale ``im`` (aspect kept) until it is at most ``max_tokens`` vision tokens of ``patch`` x
    ``patch`` pixels as Qwen's smart resize counts them (:func:`qwen_vision_tokens`; WeAgent Table 4,
    reverse-search thumbnails at <= 512 tokens). ``patch`` is the policy's ``patch_size * merge_size``:
    28 for Qwen2/2.5-VL, 32 for Qwen3-VL. Returns ``im`` unchanged when already within the cap.
    A processor whose ``min_pixels`` exceeds ``max_tokens * patch**2`` still upsizes the image.

    Raises:
        ValueError: ``max_tokens`` or ``patch`` below 1."""
    if max_tokens < 1 or patch < 1:
        raise ValueError(f"max_tokens and patch must be >= 1, got {max_tokens}, {patch}")
    w, h = im.size
    if qwen_vision_tokens(w, h, patch) <= max_tokens:
        return im
    scale = math.sqrt(max_tokens * patch * patch / (w * h))
    # The area bound alone is not enough: rounding each side to the nearest token can add a row.
    while True:
        nw, nh = max(1, int(w * scale)), max(1, int(h * scale))
        if qwen_vision_tokens(nw, nh, patch) <= max_tokens or (nw, nh) == (1, 1):
            break
        scale *= 0.98
    return im.resize((nw, nh), Image.Resampling.LANCZOS)


class EvidenceRegistry:
    """Images of one episode, stored under ``workspace`` with stable names and provenance.

    Thread-unsafe by design: one registry per episode, used from that episode's task only.
    """

    def __init__(self, workspace: Path, *, max_pixels: int = MAX_PIXELS):
        self.workspace = Path(workspace)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.max_pixels = max_pixels
        self.images: list[RegisteredImage] = []
        self._by_name: dict[str, RegisteredImage] = {}
        self._counters = {k: 0 for k in KINDS}
        self._stat: dict[str, tuple[int, int, int]] = {}

    @classmethod
    def from_images(cls, workspace: Path, images: list[RegisteredImage], *, max_pixels: int = MAX_PIXELS) -> EvidenceRegistry:
        """Rebuild the registry of a finished episode from its record's ``images`` (for replay,
        token accounting and training-data conversion). Files are not re-read."""
        reg = cls(workspace, max_pixels=max_pixels)
        for e in images:
            reg.images.append(e)
            reg._by_name[e.filename] = reg._by_name[e.ref] = e
            n = int(e.ref.rsplit("_", 1)[1]) if e.ref.rsplit("_", 1)[-1].isdigit() else 0
            reg._counters[e.kind] = max(reg._counters.get(e.kind, 0), n)
        return reg

    # ------------------------------------------------------------------ registration
    def register_bytes(
        self,
        data: bytes,
        kind: str,
        *,
        tool: str | None = None,
        turn: int = 0,
        source_url: str | None = None,
        page_url: str | None = None,
        title: str | None = None,
        max_vision_tokens: int | None = None,
        vision_token_pixels: int = 28,
    ) -> RegisteredImage:
        """Validate ``data``, save it as ``<kind>_<n>.<ext>`` and return its registry entry.

        PNG and JPEG bytes are stored as given (their sha256 is the content's); other formats (WebP,
        GIF, BMP, TIFF) are converted to PNG, and so is a picture with an EXIF orientation tag, turned
        upright first (:func:`kit.images.decode_image`), so every reader of the file sees it as displayed.
        ``max_vision_tokens`` downscales before saving
        (:func:`shrink_to_tokens`), counting tokens of ``vision_token_pixels`` px per side (the policy's).

        Raises:
            ImageError: corrupt, truncated or oversized image, or unknown ``kind``.
        """
        if kind not in KINDS:
            raise ImageError("bad_image_kind", f"unknown image kind {kind!r}; expected one of {KINDS}")
        im = decode_image(data, max_pixels=self.max_pixels)  # upright: an EXIF orientation is applied here
        fmt = im.format or ""
        if was_reoriented(im):  # the bytes show the picture turned to any reader that ignores the tag: store it upright
            data = b""
        if max_vision_tokens is not None:
            small = shrink_to_tokens(im, max_vision_tokens, vision_token_pixels)
            if small is not im:
                im, fmt, data = small, "", b""
        if fmt in _KEEP_FORMATS and data:
            ext, mime = _KEEP_FORMATS[fmt]
            out = data
        else:
            ext, mime = "png", "image/png"
            buf = io.BytesIO()
            frame = im if im.mode in ("RGB", "RGBA", "L", "LA", "P") else im.convert("RGBA")
            frame.save(buf, format="PNG")
            out = buf.getvalue()
        self._counters[kind] += 1
        ref = f"{kind}_{self._counters[kind]}"
        filename = f"{ref}.{ext}"
        self._write(filename, out)
        entry = RegisteredImage(
            ref=ref, filename=filename, kind=kind, tool=tool, turn=turn, source_url=source_url,
            page_url=page_url, title=title, sha256=hashlib.sha256(out).hexdigest(),
            width=im.size[0], height=im.size[1], mime=mime,
        )
        self.images.append(entry)
        self._by_name[filename] = entry
        self._by_name[ref] = entry
        return entry

    def _write(self, filename: str, data: bytes) -> None:
        """Write atomically: a temp file then ``os.replace``, which replaces a symlink planted at the
        name instead of writing through it."""
        self.workspace.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.workspace, prefix=".reg-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.workspace / filename)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        st = os.lstat(self.workspace / filename)
        self._stat[filename] = (st.st_ino, st.st_size, st.st_mtime_ns)

    def register_file(self, path: Path, kind: str, **provenance) -> RegisteredImage:
        """Register an image file from disk (read, validated and copied under its stable name).

        Raises:
            ImageError: unreadable file or invalid image.
        """
        return self.register_bytes(read_regular_file(path), kind, **provenance)

    # ------------------------------------------------------------------ resolution
    def resolve(self, name: str) -> RegisteredImage:
        """Resolve a model-written reference to a registered image.

        Accepts ``search_image_3.jpg``, ``search_image_3``, ``<search_image_3>``, ``./search_image_3.jpg``
        and ``<IMG: search_image_3.jpg>``.

        Raises:
            ImageError: absolute path, ``..``, or a name that is not registered in this episode.
        """
        if not isinstance(name, str) or not name.strip():
            raise ImageError("bad_image_ref", "image reference must be a non-empty string")
        raw = name.strip()
        if raw.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", raw) or raw.startswith("~"):
            raise ImageError("bad_image_ref", f"absolute paths are not allowed: {raw!r}; pass a registered relative filename",
                             registered=self.filenames()[:20])
        parts = PurePosixPath(raw.replace("\\", "/")).parts
        if ".." in parts:
            raise ImageError("bad_image_ref", f"'..' is not allowed in image paths: {raw!r}", registered=self.filenames()[:20])
        cleaned = "/".join(p for p in parts if p != ".")
        m = _REF_RE.match(cleaned)
        key = m.group(1) if m else cleaned
        entry = self._by_name.get(key)
        if entry is None:
            raise ImageError("bad_image_ref", f"{raw!r} is not a registered image of this episode",
                             registered=self.filenames()[:20])
        return entry

    def path(self, name: str) -> Path:
        """Absolute path of a registered image (see :meth:`resolve`)."""
        return self.workspace / self.resolve(name).filename

    def read(self, name: str) -> bytes:
        """Bytes of a registered image (see :meth:`resolve`), checked against its recorded sha256.

        Raises:
            ImageError: bad reference, or the file was replaced, removed or modified since it was
                registered (``evidence_modified``).
        """
        entry = self.resolve(name)
        try:
            data = read_regular_file(self.workspace / entry.filename)
        except ImageError as e:
            raise ImageError("evidence_modified", f"{entry.filename} is no longer the registered image: {e.message}") from e
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise ImageError("evidence_modified", f"{entry.filename} was modified after it was registered")
        return data

    def intact(self, name: str) -> bool:
        """Cheap integrity check (lstat: still a regular file with the inode, size and mtime it had
        when registered). Images restored with :meth:`from_images` are checked by size only."""
        try:
            entry = self.resolve(name)
            st = os.lstat(self.workspace / entry.filename)
        except (ImageError, OSError):
            return False
        if not stat.S_ISREG(st.st_mode):
            return False
        known = self._stat.get(entry.filename)
        return known is None or known == (st.st_ino, st.st_size, st.st_mtime_ns)

    def filenames(self) -> list[str]:
        return [e.filename for e in self.images]

    def __contains__(self, name: str) -> bool:
        try:
            self.resolve(name)
            return True
        except ImageError:
            return False

    def __len__(self) -> int:
        return len(self.images)
