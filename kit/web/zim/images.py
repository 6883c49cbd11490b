"""Images of the local web: decoding untrusted bytes and perceptual hashes (pHash + dHash) from
:mod:`kit.images`, the center-crop variants indexed per image and the reverse-search distances."""

from __future__ import annotations

from PIL import Image

from kit.images import SAME_PICTURE_DISTANCE, ImageRejected, flatten_rgb, grey_hashes, has_structure, image_hashes  # noqa: F401 (re-exported)
from kit.images import decode_image as _decode
from kit.types import BackendError, RequestRejected
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
#: Pillow ``reducing_gap`` of the local web's hashes, indexed images and reverse-search queries
#: alike (kit's choice, issue 32, part 2: the cost of resampling an image for its hashes): each
#: picture is box-reduced to at least 3x the hash's size before its Lanczos resampling, 2.1 -> 0.9 ms
#: an image (three crops, two hashes each) on the realistic generator's images. Measured against the exact
#: resampling (:func:`kit.images.image_hashes`): 1.6 bits apart on average (p99 6, max 15 of 128)
#: on 1,260 archive images; on the shared images (``benchmarks/bench_same_picture.py``) the
#: same-picture decision at :data:`MATCH_DISTANCE` keeps 0 false matches and matches 99.2 % of
#: recompressions and thumbnails and 77.5 % of 5 % crops (exact: 0, 99.2 %, 78.0 %).
INDEX_REDUCING_GAP = 3.0


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


def decode_grey(data: bytes) -> Image.Image:
    """The grey picture (mode ``L``) the local web hashes, indexed images and reverse-search queries
    alike: a colour JPEG's luminance decoded alone (``kit.images.decode_image(grey=True)``: issue 32,
    part 2, 2.3 -> 1.7 ms an image on the realistic generator's JPEGs; 0.25 bits of 128 from the
    hashes of the RGB picture's grey on average, p99 3, max 5 on 800 of them), any other image
    decoded by :func:`decode_image` and converted to grey. Limits and errors: :func:`decode_image`'s."""
    img = _decode(data, error=ImageRejected, grey=True)
    return img if img.mode == "L" else flatten_rgb(img).convert("L")


def _grey(img: Image.Image) -> Image.Image:
    return img if img.mode == "L" else img.convert("L")


def query_hashes(img: Image.Image) -> tuple[int, int]:
    """(pHash, dHash) of a :func:`decode_grey` picture (or a :func:`decode_image` RGB one, converted
    to grey) as the local web indexes them: the algorithm of :func:`kit.images.image_hashes` with the
    resampling of :data:`INDEX_REDUCING_GAP`. Reverse search hashes its query with this."""
    return grey_hashes([_grey(img)], INDEX_REDUCING_GAP)[0]


def crop_hashes(img: Image.Image) -> list[tuple[int, int]]:
    """(pHash, dHash) of ``img`` (a :func:`decode_grey` picture or a :func:`decode_image` RGB one) and of each of its
    :data:`HASH_CROPS` center crops, in that order: the 64-bit integers
    :func:`query_hashes` gives for ``_center_crop(img, c)``, bit for bit.

    Faster than hashing each crop on its own (which converts the full RGB picture to grey
    twice per crop, six times an image): the picture is converted to grey once and cropped in
    grey (a crop of the grey image is the grey of the crop, pixel for pixel); each crop is then
    resampled to the two hash sizes (32 x 32 Lanczos for pHash, 9 x 8 for dHash, as
    ``imagehash`` does: two sizes of three different crops cannot share one resampling), and
    the three DCTs run as one batch.
    """
    gray = _grey(img)
    return grey_hashes([_center_crop(gray, c) for c in HASH_CROPS], INDEX_REDUCING_GAP)


def _center_crop(img: Image.Image, frac: float) -> Image.Image:
    if frac <= 0:
        return img
    w, h = img.size
    dx, dy = int(w * frac), int(h * frac)
    return img.crop((dx, dy, w - dx, h - dy)) if w - 2 * dx >= 8 and h - 2 * dy >= 8 else img


def _is_decorative(width: int, height: int) -> bool:
    return max(width, height) < MIN_IMAGE_LONG_SIDE or min(width, height) < MIN_IMAGE_SIDE


def query_image(image: bytes) -> Image.Image:
    """Step of :meth:`~kit.web.zim.backend.LocalZimWeb.reverse_image_search_sync`: the query image decoded
    (:func:`decode_grey`, as the index decodes its images: the same bytes hash the same) and checked.

    Raises:
        RequestRejected: bytes that are not a usable image, too small to search by, or without spatial
            structure (a flat colour hashes like every other flat image: no match would mean anything).
    """
    try:
        img = decode_grey(image)
    except BackendError as e:  # the query image itself: the same bytes are always refused
        raise RequestRejected(str(e)) from e
    if _is_decorative(*img.size):
        raise RequestRejected(
            f"image of {img.size[0]}x{img.size[1]} pixels is too small to search by "
            f"(needs at least {MIN_IMAGE_LONG_SIDE} px on its long side and "
            f"{MIN_IMAGE_SIDE} px on its short side)"
        )
    if not has_structure(img):
        raise RequestRejected("the image has no spatial structure to search by (a flat colour or a blank "
                              "pictogram): its perceptual hash matches any other such image")
    return img
