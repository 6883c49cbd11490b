"""Reverse-image thumbnail cap (WeAgent Table 4: <= 512 vision tokens) in the POLICY's own vision
tokens: 28-px tokens for Qwen2/2.5-VL (14-px patch x 2 merge), 32-px for Qwen3-VL (16 x 2)."""

from __future__ import annotations

import asyncio
import functools

import pytest
from PIL import Image

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.harness.registry import EvidenceRegistry, shrink_to_tokens
from kit.harness.summarize import ExtractiveSummarizer
from kit.harness.tool_spec import DEFAULT_VISION_TOKEN_PIXELS, ToolContext, policy_vision_token_pixels
from kit.harness.tools import web_search_based_on_image
from kit.policy.scripted import ScriptedPolicy, tool_call_text
from kit.types import ImageHit, ReverseImageResult, SearchHit
from tests.conftest import MemoryBackend, png_bytes

CAP = 64  # small enough that the tiny checkpoints' processors (<= 256 tokens) do not clamp it


@functools.cache
def _tiny(arch: str):
    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.policy.tokens import QwenTokenCounter

    proc = load_image_only_processor(build_tiny_checkpoint(arch, vocab="local"))
    return proc, QwenTokenCounter.from_processor(proc)


def _processor_tokens(proc, path) -> int:
    """Vision tokens the checkpoint's processor really gives the image (image_grid_thw / merge²)."""
    out = proc.image_processor(images=[Image.open(path).convert("RGB")], return_tensors="pt")
    return int(out["image_grid_thw"].prod(dim=-1).sum()) // proc.image_processor.merge_size ** 2


class _Thumbs(MemoryBackend):
    def __init__(self, size):
        super().__init__()
        self.size = size

    async def reverse_image_search(self, image, num):
        return ReverseImageResult(pages=[SearchHit(title="p", url="https://example.org/p")],
                                  thumbnails=[ImageHit(image_url="https://img.example.org/t.png",
                                                       content=png_bytes(size=self.size))])


def _reverse(tmp_path, pixels: int, size, cap: int = CAP):
    reg = EvidenceRegistry(tmp_path)
    user = reg.register_bytes(png_bytes(size=(40, 40)), "user_image")
    ctx = ToolContext(registry=reg, backend=_Thumbs(size), config=HarnessConfig(reverse_search_max_vision_tokens=cap),
                      summarizer=ExtractiveSummarizer(), vision_token_pixels=pixels)
    asyncio.run(web_search_based_on_image({"image": user.filename, "num": 1}, ctx))
    thumb = reg.images[-1]
    assert thumb.kind == "search_image"
    return thumb, tmp_path / thumb.filename


# (400, 300) is over both caps; 129x101 px is under 17*28² px in area, yet rounds to 5x4 = 20 tokens.
@pytest.mark.parametrize(("size", "cap"), [((400, 300), CAP), ((129, 101), 17)])
def test_cap_uses_each_policys_patch_size(tmp_path, size, cap):
    """Same thumbnail, two policies: different pixel caps, and each stays <= cap of its own tokens
    as the checkpoint's processor counts them (image_grid_thw)."""
    results = {}
    for arch in ("qwen2_vl", "qwen3_vl"):
        proc, counter = _tiny(arch)
        thumb, path = _reverse(tmp_path / arch, counter.factor, size, cap)
        n = _processor_tokens(proc, path)
        assert n == counter.count_image(thumb.width, thumb.height) <= cap, (arch, thumb.width, thumb.height, n)
        results[arch] = (thumb.width, thumb.height)
    if size == (400, 300):  # over both caps: Qwen3-VL keeps more pixels (32-px tokens)
        (w2, h2), (w3, h3) = results["qwen2_vl"], results["qwen3_vl"]
        assert w2 * h2 <= CAP * 28 * 28 < w3 * h3 <= CAP * 32 * 32


def test_area_under_budget_but_rounded_over_is_shrunk():
    """129x101 px is under 17*28² px, yet Qwen's smart resize rounds it to 5x4 = 20 tokens."""
    im = Image.new("RGB", (129, 101))
    small = shrink_to_tokens(im, 17, 28)
    w, h = small.size
    assert small is not im and max(1, round(w / 28)) * max(1, round(h / 28)) <= 17
    assert abs(w / h - 129 / 101) < 0.05  # aspect kept
    assert shrink_to_tokens(im, 20, 28) is im  # already within its cap: untouched


def test_policy_geometry_resolution():
    class WithAttr:
        vision_token_pixels = 32

    class WithCounter:
        token_counter = type("C", (), {"factor": 32})()

    assert policy_vision_token_pixels(WithAttr()) == 32
    assert policy_vision_token_pixels(WithCounter()) == 32
    assert policy_vision_token_pixels(ScriptedPolicy([])) == DEFAULT_VISION_TOKEN_PIXELS == 28
    with pytest.raises(ValueError, match="vision_token_pixels"):
        policy_vision_token_pixels(type("Bad", (), {"vision_token_pixels": 0})())


def test_openai_policy_geometry_follows_its_counter():
    from kit.policy.openai_client import OpenAIChatPolicy

    api = OpenAIChatPolicy("http://127.0.0.1:9/v1", "some-model")
    assert api.vision_token_pixels == 28  # processor unknown: kit default, counter not built
    assert api._token_counter is None
    _, counter = _tiny("qwen3_vl")
    assert OpenAIChatPolicy("http://127.0.0.1:9/v1", "m", token_counter=counter).vision_token_pixels == 32


def test_harness_passes_policy_geometry_to_tools(tmp_path):
    policy = ScriptedPolicy([tool_call_text("web_search_based_on_image", {"image": "user_image_1.png", "num": 1}),
                             "<think>ok</think><response>done</response>"])
    policy.vision_token_pixels = 32
    img = tmp_path / "q.png"
    img.write_bytes(png_bytes(size=(40, 40)))
    h = Harness(policy, _Thumbs((400, 300)), HarnessConfig(reverse_search_max_vision_tokens=CAP))
    rec = asyncio.run(h.run(Task(id="t", question="what?", input_images=[str(img)]), tmp_path / "ws", episode_id="e"))
    thumb = [i for i in rec.images if i.kind == "search_image"][0]
    assert CAP * 28 * 28 < thumb.width * thumb.height <= CAP * 32 * 32


@pytest.mark.parametrize(("arch", "px"), [("qwen2_vl", 28), ("qwen3_vl", 32)])
def test_transformers_policy_reads_processor_geometry(arch, px):
    from kit.models.tiny import build_tiny_checkpoint
    from kit.policy.transformers_policy import TransformersPolicy

    pol = TransformersPolicy(build_tiny_checkpoint(arch, vocab="local"))
    assert pol.vision_token_pixels == policy_vision_token_pixels(pol) == pol.token_counter.factor == px
