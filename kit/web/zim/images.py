"""Images of the local web: decoding untrusted bytes (decompression-bomb guard), perceptual hashes
(pHash + dHash, with center-crop variants) and the distances that decide "same picture"."""

from __future__ import annotations

import io
import warnings

import imagehash
import numpy as np
from PIL import Image, UnidentifiedImageError

from kit.types import BackendError
from kit.web.text_clean import MIN_IMAGE_LONG_SIDE, MIN_IMAGE_SIDE

#: Image types that are indexed, hashed and returned with pages (SVG is not raster: left out).
RASTER_MIMES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp", "image/bmp"})
#: Center-crop fractions hashed per indexed image: a query that is a slightly cropped copy of an
#: archive image still lands near one of them (pHash/dHash alone lose ~3 bits per 1% of crop).
HASH_CROPS = (0.0, 0.05, 0.10)
#: Summed pHash + dHash Hamming distance (0..128) up to which two images count as the same picture.
#: Measured on the 239 indexed images of the shared archives: copies resized to 30-60% and
#: JPEG-recompressed (quality 50-70) are at most 9 away, 5%-per-side crops at most 6, 8% crops at
#: most 25 (95% within 17); 99.5% of pairs of archive images are 41 or more apart, and most pairs
#: under 26 are the same picture in two archives.
MATCH_DISTANCE = 26
#: Distance up to which the best match is confident enough to name its page as knowledge graph.
STRONG_DISTANCE = 14


def _flatten(img: Image.Image) -> Image.Image:
    """RGB image, transparent areas composited on white (so a PNG and its JPEG copy hash alike)."""
    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        bg.alpha_composite(rgba)
        return bg.convert("RGB")
    return img.convert("RGB")


def decode_image(data: bytes) -> Image.Image:
    """Decode untrusted image bytes into a loaded RGB image.

    Raises:
        BackendError: empty, not an image, truncated or corrupt data, or more pixels than
            ``PIL.Image.MAX_IMAGE_PIXELS`` (decompression-bomb guard).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BackendError(f"image must be bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise BackendError("image bytes are empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(bytes(data)))
            limit = Image.MAX_IMAGE_PIXELS
            w, h = img.size
            if limit is not None and w * h > limit:
                raise BackendError(
                    f"image of {w}x{h} pixels exceeds the decompression-bomb limit of "
                    f"{limit} pixels"
                )
            img.load()
            return _flatten(img)
    except BackendError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise BackendError(f"image rejected as a possible decompression bomb: {exc}") from exc
    except UnidentifiedImageError as exc:
        raise BackendError("bytes are not a recognised image format") from exc
    except (OSError, SyntaxError, ValueError, EOFError, TypeError) as exc:
        raise BackendError(f"corrupt or truncated image: {exc}") from exc


def _hash_int(h: imagehash.ImageHash) -> int:
    return int(np.packbits(h.hash.flatten()).view(">u8")[0])


def image_hashes(img: Image.Image) -> tuple[int, int]:
    """(pHash, dHash) of an RGB image as two 64-bit integers."""
    return _hash_int(imagehash.phash(img)), _hash_int(imagehash.dhash(img))


def _center_crop(img: Image.Image, frac: float) -> Image.Image:
    if frac <= 0:
        return img
    w, h = img.size
    dx, dy = int(w * frac), int(h * frac)
    return img.crop((dx, dy, w - dx, h - dy)) if w - 2 * dx >= 8 and h - 2 * dy >= 8 else img


def _is_decorative(width: int, height: int) -> bool:
    return max(width, height) < MIN_IMAGE_LONG_SIDE or min(width, height) < MIN_IMAGE_SIDE
