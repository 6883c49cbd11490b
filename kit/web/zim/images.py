"""Images of the local web: decoding untrusted bytes and perceptual hashes (pHash + dHash) from
:mod:`kit.images`, the center-crop variants indexed per image and the reverse-search distances."""

from __future__ import annotations

from PIL import Image

from kit.images import SAME_PICTURE_DISTANCE, ImageRejected, flatten_rgb, image_hashes  # noqa: F401 (re-exported)
from kit.images import decode_image as _decode
from kit.web.text_clean import MIN_IMAGE_LONG_SIDE, MIN_IMAGE_SIDE

#: Image types that are indexed, hashed and returned with pages (SVG is not raster: left out).
RASTER_MIMES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp", "image/bmp"})
#: Center-crop fractions hashed per indexed image: a query that is a slightly cropped copy of an
#: archive image still lands near one of them (pHash/dHash alone lose ~3 bits per 1% of crop).
HASH_CROPS = (0.0, 0.05, 0.10)
#: Summed pHash + dHash Hamming distance (0..128) up to which an indexed image (or one of its crop
#: variants) is a reverse-search match: the kit's one "same picture" threshold
#: (:data:`kit.images.SAME_PICTURE_DISTANCE`, measured by benchmarks/bench_same_picture.py).
MATCH_DISTANCE = SAME_PICTURE_DISTANCE
#: Distance up to which the best match is confident enough to name its page as knowledge graph.
STRONG_DISTANCE = 14


def decode_image(data: bytes) -> Image.Image:
    """Decode untrusted image bytes into a loaded RGB image (transparency flattened on white):
    :func:`kit.images.decode_image` with its default limits (:data:`kit.images.MAX_PIXELS`,
    :data:`kit.images.MAX_ASPECT_RATIO`), the ones the evidence registry applies, so an archive
    image the registry would refuse is skipped at index time (``undecodable``) instead of being
    returned as a thumbnail that cannot be registered.

    Raises:
        kit.images.ImageRejected: (a :class:`~kit.types.BackendError`) empty or not bytes, not an
            image, truncated or corrupt, over the pixel limit or PIL's ``MAX_IMAGE_PIXELS``
            (decompression-bomb guard), or an aspect ratio over 200.
    """
    return flatten_rgb(_decode(data, error=ImageRejected))


def _center_crop(img: Image.Image, frac: float) -> Image.Image:
    if frac <= 0:
        return img
    w, h = img.size
    dx, dy = int(w * frac), int(h * frac)
    return img.crop((dx, dy, w - dx, h - dy)) if w - 2 * dx >= 8 and h - 2 * dy >= 8 else img


def _is_decorative(width: int, height: int) -> bool:
    return max(width, height) < MIN_IMAGE_LONG_SIDE or min(width, height) < MIN_IMAGE_SIDE
