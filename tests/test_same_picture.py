"""The same-picture decision is brightness-aware and undecidable without spatial structure (issue 27
part 6): pHash and dHash compare an image with itself, so flat white, grey and black images hash alike
(distance 1) and the colour guard (chroma only) let them through as "the same picture". Now: never the
same picture by hash; different brightness or colour is no match, otherwise undecidable (reported)."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
from PIL import Image, ImageEnhance

from kit.eval.judges import PerceptualImageJudge
from kit.images import MIN_STRUCTURE, SAME_PICTURE_LUMA_DISTANCE, same_picture

FLAT = {"white": (255, 255, 255), "black": (0, 0, 0), "grey": (128, 128, 128), "light_grey": (200, 200, 200)}


def write(path: Path, img: Image.Image, fmt: str = "PNG", **kw) -> Path:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    path.write_bytes(buf.getvalue())
    return path


@pytest.fixture
def flats(tmp_path) -> dict[str, Path]:
    out = {k: write(tmp_path / f"{k}.png", Image.new("RGB", (320, 240), c)) for k, c in FLAT.items()}
    out["white_jpeg"] = write(tmp_path / "white.jpg", Image.new("RGB", (160, 120), FLAT["white"]), "JPEG", quality=80)
    return out


@pytest.fixture(scope="module")
def photo(data_dir) -> Image.Image:
    src = sorted((data_dir / "benchmarks" / "livevqa_news_sample" / "images").glob("*.jpg"))[0]
    with Image.open(src) as im:
        return im.convert("RGB")


def test_flat_white_black_and_grey_are_never_the_same_picture(flats):
    for a, b in itertools.combinations(["white", "black", "grey", "light_grey"], 2):
        m = same_picture(flats[a], flats[b])
        assert m.match is not True, (a, b, m)
    # far apart in brightness: decided, different pictures
    for a, b in [("white", "black"), ("white", "grey"), ("black", "grey")]:
        assert same_picture(flats[a], flats[b]).match is False


def test_two_flat_images_of_one_tone_are_undecidable(flats):
    m = same_picture(flats["white"], flats["white_jpeg"])  # a white PNG and a smaller white JPEG
    assert m.match is None and "undecidable" in (m.error or "") and "spatial structure" in m.error
    assert same_picture(flats["white"], flats["white"]).match is True  # the same file is the same file


def test_a_flat_image_is_not_a_structured_picture(tmp_path, flats, photo):
    p = write(tmp_path / "photo.png", photo)
    assert same_picture(p, flats["grey"]).match is False and same_picture(flats["white"], p).match is False


def test_one_layout_in_two_brightnesses_is_two_pictures(tmp_path, photo):
    """Same structure, same chroma, other brightness: the hashes agree, the luminance guard does not."""
    grey = photo.convert("L").convert("RGB")
    dark = ImageEnhance.Brightness(grey).enhance(0.45)
    a, b = write(tmp_path / "a.png", grey), write(tmp_path / "b.png", dark)
    m = same_picture(a, b)
    assert m.match is False and m.distance is not None and m.distance <= 26  # only brightness tells them apart


def test_real_copies_still_match(tmp_path, photo):
    w, h = photo.size
    src = write(tmp_path / "src.png", photo)
    copies = {"jpeg50": write(tmp_path / "q.jpg", photo, "JPEG", quality=50),
              "thumb": write(tmp_path / "t.jpg", photo.resize((w // 3, h // 3)), "JPEG", quality=75),
              "crop05": write(tmp_path / "c.jpg", photo.crop((w // 20, h // 20, w - w // 20, h - h // 20)), "JPEG")}
    for kind, p in copies.items():
        assert same_picture(src, p).match is True, kind


async def test_the_image_judge_never_matches_flat_images(flats):
    judge = PerceptualImageJudge()
    for a, b in itertools.permutations(["white", "black", "grey", "white_jpeg"], 2):
        v = await judge.judge(flats[a], flats[b])
        assert v.match is not True, (a, b, v)
    v = await judge.judge(flats["white"], flats["white_jpeg"])
    assert v.match is None and "undecidable" in v.error


def test_thresholds_are_sane():
    assert 0 < MIN_STRUCTURE < 5.8 and 38.9 < SAME_PICTURE_LUMA_DISTANCE < 127


def test_reverse_search_refuses_a_query_image_without_structure(data_dir):
    """A flat query image hashes like every flat image in the archives: the local web refuses it with a reason
    (a structured tool error), and a real photo of the archive still finds its page."""
    import io

    from PIL import Image

    from kit.paths import zim_paths
    from kit.types import RequestRejected
    from kit.web.zim import LocalZimWeb

    found = [p for p in zim_paths(data_dir) if p.stem == "wikipedia_en_ray_charles_maxi_2023-09"]
    if not found:
        pytest.skip("shared ZIM archive missing")
    web = LocalZimWeb(found)
    web.ensure_ready()
    for colour in ("white", "black", (128, 128, 128)):
        buf = io.BytesIO()
        Image.new("RGB", (300, 200), colour).save(buf, "PNG")
        with pytest.raises(RequestRejected, match="no spatial structure"):
            web.reverse_image_search_sync(buf.getvalue(), 5)
    arch = web.archives[0]
    photo = arch.read(arch.entry(arch.images[0].path))[1]
    assert web.reverse_image_search_sync(photo, 5).pages
