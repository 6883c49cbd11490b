"""kit.images (issue 15 part 3): one image decoder for the registry, the ZIM web and the fetcher,
and one "same picture" decision for Target Match and the data pipeline. No shared data needed."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

import kit.images as images
from kit.harness.errors import ImageError, ToolError
from kit.types import BackendError


def _hash_int(h) -> int:
    """An ``imagehash.ImageHash`` of 8 x 8 bits as the 64-bit integer :mod:`kit.images` uses."""
    import numpy as np

    return int(np.packbits(h.hash.flatten()).view(">u8")[0])


def png_header(width: int, height: int) -> bytes:
    """A tiny, well-formed PNG that declares ``width`` x ``height`` pixels (its pixels are missing)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def encode(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


BANNER = encode(Image.new("RGB", (30_000, 100), (200, 30, 30)))  # 1:300, 3 MP: a real, decodable banner
OVER_LIMIT = png_header(8_100, 8_100)  # 65.6 MP: under PIL's own bomb limit, over the kit's 64 MP


# ----------------------------------------------------------------------------------------- decoder
def test_one_error_type_for_every_caller():
    assert issubclass(images.ImageError, ToolError) and images.ImageError is ImageError
    assert issubclass(images.ImageRejected, ImageError) and issubclass(images.ImageRejected, BackendError)
    e = images.ImageRejected("bad_image", "x")
    assert e.code == "bad_image" and str(e) == "x" and e.retryable is False


@pytest.mark.parametrize("data, code, words", [
    (b"", "bad_image", "empty"), ("text", "bad_image", "must be bytes"),
    (b"definitely not an image", "bad_image", "not a raster image"),
    (png_header(60_000, 60_000), "image_too_large", "decompression bomb"),
    (OVER_LIMIT, "image_too_large", "64000000-pixel limit"),
    (BANNER, "bad_image", "aspect ratio over 200"),
])
def test_decoder_refusals_carry_a_code(data, code, words):
    with pytest.raises(ImageError) as e:
        images.decode_image(data)
    assert e.value.code == code and words in e.value.message


def test_decoder_refuses_truncated_and_keeps_format():
    good = encode(Image.new("RGB", (300, 200), "navy"), "JPEG", quality=90)
    im = images.decode_image(good)
    assert im.format == "JPEG" and im.size == (300, 200)
    with pytest.raises(ImageError, match="truncated"):
        images.decode_image(good[: len(good) // 2])
    assert images.decode_image(BANNER, max_aspect=400).size == (30_000, 100)  # limits are parameters
    with pytest.raises(images.ImageRejected):
        images.decode_image(b"", error=images.ImageRejected)


def test_registry_uses_the_one_decoder():
    import kit.harness.registry as registry
    import kit.web.zim.images as zim_images

    assert registry.decode_image is images.decode_image and registry.read_regular_file is images.read_regular_file
    assert registry.MAX_ASPECT_RATIO == images.MAX_ASPECT_RATIO == 200
    assert zim_images.MATCH_DISTANCE == images.SAME_PICTURE_DISTANCE


# ------------------------------------------------------------- ZIM web: what the registry refuses
@pytest.mark.parametrize("data, code", [(BANNER, "bad_image"), (OVER_LIMIT, "image_too_large")])
def test_zim_decoder_refuses_what_the_registry_refuses(data, code, tmp_path):
    """Before: the ZIM web decoded a 1:300 banner (and indexed it) although the registry refuses
    it, and checked PIL's 89 MP limit instead of the registry's 64 MP."""
    from kit.harness.registry import EvidenceRegistry
    from kit.web.zim.images import decode_image as zim_decode

    with pytest.raises(ImageError) as reg_err:
        EvidenceRegistry(tmp_path).register_bytes(data, "search_image")
    with pytest.raises(BackendError) as zim_err:  # still a BackendError for the web's callers
        zim_decode(data)
    assert isinstance(zim_err.value, ImageError) and zim_err.value.code == reg_err.value.code == code


def test_zim_index_skips_a_banner_the_registry_refuses():
    import numpy as np

    from kit.web.zim.build import hash_image  # the index build's per-image step (kit.web.zim.build)

    reason, rec, _ = hash_image("I/banner.png", "image/png", BANNER)
    assert (reason, rec) == ("undecodable", None)
    reason, rec, hashes = hash_image("I/photo.png", "image/png", encode(Image.new("RGB", (300, 200), "red")))
    assert reason == "" and rec[1:] == (300, 200) and np.frombuffer(hashes, dtype=np.uint64).size == 3 * 2


# ----------------------------------------------------------------------------------- same picture
def _gradient(w=240, h=180, seed=0) -> Image.Image:
    import numpy as np

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)  # smooth blobs: a photo-like picture
    return Image.fromarray(base).resize((w, h), Image.Resampling.BICUBIC)


def _transparent_picture() -> Image.Image:
    """A picture on a fully transparent border whose hidden RGB is black (as many PNG exporters
    leave it): on a page, and in its JPEG copy, the border is white."""
    im = Image.new("RGBA", (240, 180), (0, 0, 0, 0))
    im.paste(_gradient(160, 110).convert("RGBA"), (40, 35))
    return im


def test_target_match_and_target_selection_decide_alike(tmp_path):
    """Before: the Target Match judge flattened transparency (pHash <= 10) and the data pipeline's
    selection did not (pHash + dHash <= 26), so a transparent PNG and its JPEG copy were the same
    picture for evaluation and a different one for selection."""
    import asyncio

    from kit.data.sample import same_picture as selection
    from kit.eval.judges import PerceptualImageJudge

    png, jpg, other = tmp_path / "t.png", tmp_path / "t.jpg", tmp_path / "o.jpg"
    pic = _transparent_picture()
    png.write_bytes(encode(pic))
    jpg.write_bytes(encode(images.flatten_rgb(pic), "JPEG", quality=70))
    other.write_bytes(encode(_gradient(seed=1), "JPEG", quality=70))
    judge = PerceptualImageJudge()
    for a, b, expected in ((png, jpg, True), (jpg, png, True), (png, other, False), (png, png, True)):
        verdict = asyncio.run(judge.judge(a, b))
        decision = images.same_picture(a, b)
        assert verdict.match is decision.match is selection(a, b) is expected, (a.name, b.name)
        assert verdict.distance == decision.distance
    assert images.same_picture(png, png).distance == 0


def test_same_picture_reports_unreadable_files(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"not an image")
    good = tmp_path / "g.png"
    good.write_bytes(encode(_gradient()))
    for a in (tmp_path / "missing.png", tmp_path / "bad.png"):
        m = images.same_picture(a, good)
        assert m.match is None and m.distance is None and m.error.startswith("bad_image")
    from kit.data.sample import same_picture as selection

    assert selection(tmp_path / "bad.png", good) is False
    memo: dict = {}
    assert images.same_picture(good, good, memo=memo).match is True and len(memo) == 1


def _flag(colours, vertical: bool) -> Image.Image:
    im = Image.new("RGB", (300, 200))
    n = len(colours)
    for i, c in enumerate(colours):
        im.paste(c, (i * 300 // n, 0, (i + 1) * 300 // n, 200) if vertical else (0, i * 200 // n, 300, (i + 1) * 200 // n))
    return im


FLAGS = {
    "france": _flag([(0, 35, 149), (255, 255, 255), (237, 41, 57)], True),
    "italy": _flag([(0, 146, 70), (255, 255, 255), (206, 43, 55)], True),
    "ireland": _flag([(22, 155, 98), (255, 255, 255), (255, 136, 62)], True),
    "russia": _flag([(255, 255, 255), (0, 57, 166), (213, 43, 30)], False),
    "netherlands": _flag([(174, 28, 40), (255, 255, 255), (33, 70, 139)], False),
}


@pytest.mark.parametrize("a, b", [("france", "ireland"), ("france", "italy"), ("italy", "ireland"),
                                  ("russia", "netherlands")])
def test_same_picture_separates_flags_of_one_layout_and_other_colours(a, b, tmp_path):
    """Before: only luminance was hashed, so France and Ireland matched at distance 0 (and the
    others at 4). The colour guard separates them; the hashes are unchanged."""
    pa, pb = tmp_path / f"{a}.png", tmp_path / f"{b}.png"
    pa.write_bytes(encode(FLAGS[a]))
    pb.write_bytes(encode(FLAGS[b]))
    m = images.same_picture(pa, pb)
    assert m.match is False and m.distance <= images.SAME_PICTURE_DISTANCE  # the hashes alone would match


def test_colour_guard_keeps_copies_of_one_flag_matching(tmp_path):
    src = tmp_path / "f.png"
    src.write_bytes(encode(FLAGS["italy"]))
    flat = FLAGS["italy"]
    w, h = flat.size
    copies = {"jpeg50": encode(flat, "JPEG", quality=50),
              "thumb": encode(flat.resize((w // 2, h // 2)), "JPEG", quality=75),
              "crop05": encode(flat.crop((w // 20, h // 20, w - w // 20, h - h // 20)), "JPEG", quality=90)}
    for kind, data in copies.items():
        (tmp_path / f"{kind}.jpg").write_bytes(data)
        assert images.same_picture(src, tmp_path / f"{kind}.jpg").match is True, kind


def test_decoder_parses_raster_formats_only():
    """Before: EPS went to Ghostscript and ICO/PCX/TGA were parsed; now only RASTER_FORMATS are opened."""
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    for data in (eps, encode(Image.new("RGB", (32, 32), (1, 2, 3)), "ICO"),
                 encode(Image.new("RGB", (20, 20), (1, 2, 3)), "PCX")):
        with pytest.raises(ImageError) as e:
            images.decode_image(data)
        assert e.value.code == "bad_image" and "not a raster image format" in e.value.message and "EPS" in e.value.message
    for fmt in ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF"):  # every listed format still decodes
        assert images.decode_image(encode(Image.new("RGB", (20, 20), (9, 9, 9)), fmt)).format == fmt


def _test_pictures() -> list[Image.Image]:
    """150 random pictures of many shapes and modes, and the shared archives' JPEG and PNG images."""
    import random

    import numpy as np

    from kit.paths import zim_paths

    rng = np.random.default_rng(0)
    pictures = []
    for _ in range(150):
        h, w = (int(x) for x in rng.integers(8, 400, 2))
        mode = random.Random(h * w).choice(["RGB", "L", "RGBA"])
        bands = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
        smooth = np.add.outer(np.linspace(0, 255, h), np.linspace(0, 120, w))[..., None]
        arr = np.clip(smooth + rng.normal(0, 25, (h, w, bands)), 0, 255).astype(np.uint8)
        pictures.append(Image.fromarray(arr[..., 0] if bands == 1 else arr, mode))
    if zim_paths():
        import libzim.reader

        for path in zim_paths()[:2]:
            arch = libzim.reader.Archive(str(path))
            for eid in range(arch.entry_count):
                entry = arch._get_entry_by_id(eid)
                if not entry.is_redirect and entry.get_item().mimetype.startswith(("image/jpeg", "image/png")):
                    pictures.append(images.flatten_rgb(Image.open(io.BytesIO(bytes(entry.get_item().content)))))
    assert len(pictures) >= 150
    return pictures


def test_image_hashes_are_imagehash_bit_for_bit():
    """image_hashes (one grey conversion, the DCTs in a batch) gives imagehash's phash and dhash,
    bit for bit, on random pictures of many shapes and modes and on the shared archives' images."""
    import imagehash

    for img in _test_pictures():
        want = (_hash_int(imagehash.phash(img)), _hash_int(imagehash.dhash(img)))
        assert images.image_hashes(img) == want, img.size


def test_local_web_hashes_are_imagehash_up_to_resampling():
    """The local web's hashes (kit.web.zim.images.query_hashes: the resampling box-reduces first)
    stay close to imagehash's exact ones: a few bits of 128 on average, never near the same-picture
    threshold; and an indexed image's crop hashes are query_hashes of its crops, bit for bit."""
    import imagehash
    import numpy as np

    from kit.web.zim.images import HASH_CROPS, _center_crop, crop_hashes, query_hashes

    dist = []
    for img in _test_pictures():
        w, h = img.size
        if max(w, h) > images.MAX_ASPECT_RATIO * min(w, h):
            continue  # refused by decode_image: never indexed nor a query (a 21 x 5983 strip: 29 apart)
        exact = (_hash_int(imagehash.phash(img)), _hash_int(imagehash.dhash(img)))
        fast = query_hashes(img.convert("RGB"))
        dist.append(images.hash_distance(exact, fast))
        if min(img.size) >= 50:
            rgb = img.convert("RGB")
            assert crop_hashes(rgb) == [query_hashes(_center_crop(rgb, c)) for c in HASH_CROPS]
    assert np.mean(dist) <= 3.0 and max(dist) <= images.SAME_PICTURE_DISTANCE // 2, (np.mean(dist), max(dist))
    assert max(dist) > 0  # the resampling is not the exact one (else this test compares nothing)


def test_local_web_decodes_jpeg_luminance_alone():
    """kit.web.zim.images.decode_grey (index format 14): a colour JPEG's luminance decoded alone is the
    RGB picture's grey up to the colour planes' upsampling (a fraction of a grey level on average),
    its hashes a few bits from the RGB path's at most, and a query of the same bytes hashes exactly as
    the index did; grey JPEGs, CMYK JPEGs and other formats decode as the RGB path's grey, pixel for
    pixel; an EXIF orientation is applied either way."""
    import numpy as np

    from kit.paths import zim_paths
    from kit.web.zim.images import crop_hashes, decode_grey, decode_image, query_hashes, query_image

    rng = np.random.default_rng(3)
    smooth = np.add.outer(np.linspace(0, 200, 180), np.linspace(0, 50, 240))
    photo = np.clip(smooth[..., None] + rng.normal(0, 30, (180, 240, 3)), 0, 255).astype(np.uint8)
    rgb = Image.fromarray(photo, "RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: shown rotated by 90 degrees
    jpegs = [encode(rgb, "JPEG", quality=85), encode(rgb, "JPEG", quality=85, exif=exif.tobytes())]
    same = [encode(rgb.convert("L"), "JPEG"), encode(rgb.convert("CMYK"), "JPEG"), encode(rgb),
            encode(rgb.convert("RGBA"), "WEBP")]
    if zim_paths():
        import libzim.reader

        for path in zim_paths()[:2]:
            arch = libzim.reader.Archive(str(path))
            for eid in range(arch.entry_count):
                entry = arch._get_entry_by_id(eid)
                if not entry.is_redirect and entry.get_item().mimetype == "image/jpeg":
                    jpegs.append(bytes(entry.get_item().content))
    assert len(jpegs) > 2 or not zim_paths()
    dist, means = [], []
    for data in jpegs + same:
        grey, full = decode_grey(data), decode_image(data).convert("L")
        assert grey.mode == "L" and grey.size == full.size, (grey.mode, grey.size, full.size)
        diff = np.abs(np.asarray(grey, np.int16) - np.asarray(full, np.int16))
        if data in same:
            assert not diff.any()
            continue
        means.append(diff.mean())
        fast, rgb_path = crop_hashes(grey), crop_hashes(decode_image(data))
        dist += [images.hash_distance(a, b) for a, b in zip(fast, rgb_path, strict=True)]
        if min(grey.size) >= 50:
            assert query_hashes(query_image(data)) == fast[0]  # the same bytes: distance 0
    assert np.mean(means) <= 0.5 and max(means) <= 3, (np.mean(means), max(means))
    assert np.mean(dist) <= 1.0 and max(dist) <= 8, (np.mean(dist), max(dist))
    assert decode_grey(jpegs[1]).size == (180, 240)  # upright
