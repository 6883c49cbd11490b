"""Pictures as shown (issue 27 part 6): an EXIF orientation tag is applied once, by the kit's one decoder
(kit.images.decode_image, PIL.ImageOps.exif_transpose), so a camera JPEG stored sideways with the tag
is the same picture as its upright copy for every consumer: the image registry (also when it
downscales, which dropped the tag), benchmark loaders, the same-picture decision, SFT encoding and the
in-process policy.

The camera JPEG is made from a real news photo of the shared LiveVQA sample: its pixels stored turned
90 degrees, with the EXIF orientation 6 a camera writes ("rotate 90 degrees clockwise to display")."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from kit.harness.registry import EvidenceRegistry
from kit.images import (
    EXIF_ORIENTATION,
    ORIENTATION_APPLIED,
    decode_image,
    load_image_file,
    picture_hashes,
    same_picture,
    was_reoriented,
)

# orientation tag -> the transpose that *stores* an upright picture so that the tag displays it upright
STORE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
         5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_90, 7: Image.Transpose.TRANSVERSE,
         8: Image.Transpose.ROTATE_270}


@pytest.fixture(scope="module")
def photo(data_dir) -> Image.Image:
    """A real, landscape news photo (upright), as RGB."""
    src = sorted((data_dir / "benchmarks" / "livevqa_news_sample" / "images").glob("*.jpg"))[0]
    with Image.open(src) as im:
        out = im.convert("RGB")
    assert out.width > out.height
    return out


def camera_jpeg(upright: Image.Image, orientation: int = 6) -> bytes:
    """``upright`` as a camera stores it: pixels turned, EXIF orientation ``orientation``."""
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = orientation
    buf = io.BytesIO()
    upright.transpose(STORE[orientation]).save(buf, format="JPEG", quality=92, exif=exif)
    return buf.getvalue()


def jpeg(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=92)
    return buf.getvalue()


def raw_size(path: Path) -> tuple[int, int]:
    """Size of a file's pixels as a reader that ignores EXIF sees them."""
    with Image.open(path) as im:
        return im.size


# ------------------------------------------------------------------------------------------ the decoder
@pytest.mark.parametrize("orientation", sorted(STORE))
def test_decoder_shows_every_orientation_upright(photo, orientation):
    data = camera_jpeg(photo, orientation)
    im = decode_image(data)
    assert im.size == photo.size and im.format == "JPEG" and was_reoriented(im)
    assert im.info[ORIENTATION_APPLIED] == orientation
    assert same_picture_bytes(data, jpeg(photo)) <= 4


def same_picture_bytes(a: bytes, b: bytes) -> int:
    from kit.images import hash_distance

    return hash_distance(picture_hashes(a), picture_hashes(b))


def test_untagged_and_orientation_1_images_are_untouched(photo):
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = 1
    buf = io.BytesIO()
    photo.save(buf, format="JPEG", exif=exif)
    for data in (buf.getvalue(), jpeg(photo)):
        im = decode_image(data)
        assert im.size == photo.size and not was_reoriented(im) and im.format == "JPEG"


def test_camera_jpeg_is_the_same_picture_as_its_upright_copy(tmp_path, photo):
    (tmp_path / "camera.jpg").write_bytes(camera_jpeg(photo))
    (tmp_path / "upright.jpg").write_bytes(jpeg(photo))
    m = same_picture(tmp_path / "camera.jpg", tmp_path / "upright.jpg")
    assert m.match is True and m.distance is not None and m.distance <= 4  # before: distance 71, no match


def test_load_image_file_is_upright(tmp_path, photo):
    (tmp_path / "camera.jpg").write_bytes(camera_jpeg(photo))
    assert load_image_file(tmp_path / "camera.jpg").size == photo.size
    assert raw_size(tmp_path / "camera.jpg") == photo.size[::-1]  # the file itself is stored sideways


# ------------------------------------------------------------------------------------------ the registry
@pytest.mark.parametrize("max_tokens", [None, 256])
def test_registry_stores_the_picture_upright(tmp_path, photo, max_tokens):
    """The file the registry writes shows the picture upright to any reader, also after a downscale
    (which re-encodes and used to drop the tag: the picture stayed sideways)."""
    reg = EvidenceRegistry(tmp_path / "ws")
    e = reg.register_bytes(camera_jpeg(photo), "search_image", max_vision_tokens=max_tokens)
    stored = tmp_path / "ws" / e.filename
    w, h = raw_size(stored)
    assert (e.width, e.height) == (w, h) and w > h  # landscape, as displayed
    (tmp_path / "upright.jpg").write_bytes(jpeg(photo))
    assert same_picture(stored, tmp_path / "upright.jpg").match is True
    # an untagged JPEG is still stored byte for byte
    plain = reg.register_bytes(jpeg(photo), "search_image")
    assert (tmp_path / "ws" / plain.filename).read_bytes() == jpeg(photo)


# ------------------------------------------------------------------------------------------ benchmark images
def test_benchmark_loader_gives_the_upright_file(tmp_path, data_dir, photo, monkeypatch):
    from kit.eval.loaders import load_livevqa, save_image_bytes

    monkeypatch.setenv("MMSEARCH_KIT_CACHE", str(tmp_path / "kitcache"))
    src = data_dir / "benchmarks" / "livevqa_news_sample"
    rows = json.loads((src / "benchmark.sample.json").read_text())[:2]
    (tmp_path / "lv" / "images").mkdir(parents=True)
    (tmp_path / "lv" / "b.json").write_text(json.dumps(rows))
    shutil.copy(src / "images" / rows[1]["img_path"], tmp_path / "lv" / "images")
    (tmp_path / "lv" / "images" / rows[0]["img_path"]).write_bytes(camera_jpeg(photo))
    res = load_livevqa(tmp_path / "lv", levels=(2,))
    assert res.problems == [] and len(res.tasks) == 2
    used = Path(res.tasks[0].input_images[0])
    assert raw_size(used) == photo.size and used.is_relative_to(tmp_path / "kitcache")
    assert Path(res.tasks[1].input_images[0]) == (tmp_path / "lv" / "images" / rows[1]["img_path"]).resolve()
    # image bytes of parquet / hub rows: stored upright too
    saved = save_image_bytes(camera_jpeg(photo), tmp_path / "bytes", "row")
    assert saved.suffix == ".png" and raw_size(saved) == photo.size


# ------------------------------------------------------------------------------------------ consumers
def test_sft_encoder_loads_images_upright(tmp_path, photo):
    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.sft_data import ImageLoadError, SFTEncoder

    (tmp_path / "camera.jpg").write_bytes(camera_jpeg(photo))
    (tmp_path / "broken.png").write_bytes(b"not an image")
    enc = SFTEncoder(load_image_only_processor(build_tiny_checkpoint("qwen2_5_vl", vocab="local")))
    [im] = enc.load_images([tmp_path / "camera.jpg"], "r1")
    assert im.size == photo.size and im.mode == "RGB"
    with pytest.raises(ImageLoadError, match="cannot load image broken.png"):
        enc.load_images([tmp_path / "broken.png"], "r1")


def test_transformers_policy_sees_the_picture_upright(tmp_path, photo):
    from kit.models.qwen_tokenizer import is_qwen_vocab_available

    if not is_qwen_vocab_available():
        pytest.skip("no Qwen BPE vocabulary (make setup)")
    import kit.models as km
    from kit.policy.transformers_policy import TransformersPolicy
    from kit.types import ContentPart, Message

    ws = tmp_path / "ws"
    ws.mkdir()
    small = photo.resize((photo.width // 4, photo.height // 4))
    (ws / "camera.jpg").write_bytes(camera_jpeg(small))
    policy = TransformersPolicy(km.build_tiny_checkpoint("qwen2_5_vl", tmp_path / "ckpt", vocab="local"))
    msgs = [Message(role="user", content=[ContentPart(type="image", image="camera.jpg"),
                                          ContentPart(type="text", text="where?")])]
    inputs = policy.prepare_inputs(msgs, [], str(ws))
    _, gh, gw = (int(x) for x in inputs["image_grid_thw"][0])
    assert gw > gh  # landscape patches: the processor got the picture as displayed, not as stored
