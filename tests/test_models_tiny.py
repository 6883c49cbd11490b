"""Offline Qwen tokenizer, chat template, image-only processor and tiny Qwen-VL checkpoints."""

from __future__ import annotations

import json
import random
import unicodedata

import numpy as np
import pytest
import torch
from PIL import Image

import kit.models as km
from kit.models.qwen_tokenizer import (
    QWEN_ADDED_TOKENS,
    QWEN_BPE_SIZE,
    QWEN_VL_CHAT_TEMPLATE,
    is_qwen_vocab_available,
    load_qwen_tiktoken_encoding,
    load_qwen_tokenizer,
    shared_qwen_tokenizer,
)
from kit.models.tiny import TinyCheckpointError, build_tiny_checkpoint, tiny_metadata

if not is_qwen_vocab_available():  # dashscope is installed --no-deps: importing it fails, finding the file works
    pytest.skip("no Qwen BPE vocabulary (make setup: pip install --no-deps -r requirements/qwen-vocab.txt)",
                allow_module_level=True)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]


@pytest.fixture(scope="module")
def qwen_tok():
    return shared_qwen_tokenizer()


def _mixed_corpus(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    fixed = [
        "The Eiffel Tower was completed in 1889 and is 330 metres (1,083 ft) tall.",
        "上海中心大厦是位于中国上海浦东陆家嘴的一座超高层地标式摩天大楼，高632米。",
        "東京タワーは、東京都港区芝公園にある総合電波塔である。한국어 문장도 있습니다.",
        "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\n",
        'json = {"query": "red panda", "num": 10, "ratio": 3.14159, "ok": true}\r\n',
        "   leading spaces, trailing tabs\t\t\n\n  multiple   spaces    here  ",
        "Numbers: 0 12 345 6789 1234567890 3.0e-12 -42 +7 1_000_000 ٣٤٥ ⅷ",
        "Emoji 😀🚀👩‍👩‍👧‍👦 and accents: café naïve Ångström façade (e\u0301 combining)",
        "I'm can't we'll they've she'd IT'S Don'T ''' \"\" ``` ~~~ ### ***",
        "URL https://en.wikipedia.org/wiki/Special:Search?search=tallest+building&go=Go#top",
    ]
    alphabet = (
        [chr(c) for c in range(0x20, 0x7F)]
        + [chr(c) for c in range(0x4E00, 0x4E00 + 300)]
        + [chr(c) for c in range(0x0400, 0x0450)]
        + list("\n\r\t  ") * 10
        + [chr(c) for c in range(0x1F600, 0x1F650)]
        + [chr(c) for c in range(0xC0, 0x180)]
    )
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400))) for _ in range(150)]
    return fixed + fuzz


def test_qwen_tokenizer_matches_tiktoken(qwen_tok):
    enc = load_qwen_tiktoken_encoding()
    texts = [unicodedata.normalize("NFC", t) for t in _mixed_corpus()]
    hf = qwen_tok(texts, add_special_tokens=False)["input_ids"]
    total = mismatches = 0
    for text, ids in zip(texts, hf):
        ref = enc.encode_ordinary(text)
        total += len(ref)
        mismatches += ids != ref
        assert qwen_tok.decode(ids) == text
    assert mismatches == 0
    assert total > 20_000


def test_special_token_ids(qwen_tok):
    assert len(qwen_tok) == QWEN_BPE_SIZE + 22 == 151_665
    for i, (content, _special) in enumerate(QWEN_ADDED_TOKENS):
        assert qwen_tok.convert_tokens_to_ids(content) == 151_643 + i
        assert qwen_tok.encode(f"a{content}b", add_special_tokens=False)[1] == 151_643 + i
    ids = {t: qwen_tok.convert_tokens_to_ids(t) for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}
    assert ids == {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}
    assert [qwen_tok.convert_tokens_to_ids(t) for t in ["<|vision_start|>", "<|image_pad|>", "<tool_call>"]] == [
        151652,
        151655,
        151657,
    ]
    assert qwen_tok.eos_token == "<|im_end|>" and qwen_tok.pad_token == "<|endoftext|>"
    # <tool_call> is an added but not special token (as in Qwen2.5): kept when specials are skipped.
    ids = qwen_tok.encode("<|im_start|><tool_call>\n{}\n</tool_call><|im_end|>", add_special_tokens=False)
    assert qwen_tok.decode(ids, skip_special_tokens=True) == "<tool_call>\n{}\n</tool_call>"
    q3 = load_qwen_tokenizer("qwen3")
    assert len(q3) == 151_669
    assert [q3.convert_tokens_to_ids(t) for t in ["<tool_response>", "</tool_response>", "<think>", "</think>"]] == [
        151665,
        151666,
        151667,
        151668,
    ]
    with pytest.raises(ValueError, match="flavor"):
        load_qwen_tokenizer("qwen9")


def _conversation():
    return [
        {"role": "system", "content": [{"type": "text", "text": "You are a search agent."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where is this?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me search."}],
         "tool_calls": [{"type": "function", "function": {"name": "web_search", "arguments": {"query": "tower"}}}]},
        {"role": "tool", "content": [{"type": "text", "text": "Eiffel Tower, Paris"}, {"type": "image"}]},
        {"role": "tool", "content": "second result"},
        {"role": "assistant", "content": '<tool_call>\n{"name": "web_search", "arguments": {"query": "x"}}\n</tool_call>'},
        {"role": "tool", "content": [{"type": "text", "text": "third"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is in Paris."}]},
    ]  # fmt: skip


def test_chat_template_renders_tools_images_and_tool_groups(qwen_tok):
    text = qwen_tok.apply_chat_template(_conversation()[:5], tools=TOOLS, tokenize=False, add_generation_prompt=True)
    expected = (
        "<|im_start|>system\nYou are a search agent.\n\n# Tools\n\nYou may call one or more functions to assist with "
        "the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(TOOLS[0], ensure_ascii=False)
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Where is this?<|im_end|>\n"
        '<|im_start|>assistant\nLet me search.\n<tool_call>\n{"name": "web_search", "arguments": {"query": "tower"}}'
        "\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nEiffel Tower, Paris<|vision_start|><|image_pad|><|vision_end|>\n"
        "</tool_response>\n<tool_response>\nsecond result\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert text == expected
    # Without a system message the default one is used; without tools there is no tool block.
    plain = qwen_tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert plain == "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    with pytest.raises(Exception, match="unsupported message role"):
        qwen_tok.apply_chat_template([{"role": "robot", "content": "x"}], tokenize=False)


def test_chat_template_prefix_is_stable_as_turns_are_appended(qwen_tok):
    conv = _conversation()
    full = qwen_tok.apply_chat_template(conv, tools=TOOLS, tokenize=False)
    full_ids = qwen_tok.encode(full, add_special_tokens=False)
    for k, m in enumerate(conv):
        if m["role"] != "assistant":
            continue
        prompt = qwen_tok.apply_chat_template(conv[:k], tools=TOOLS, tokenize=False, add_generation_prompt=True)
        assert full.startswith(prompt)
        ids = qwen_tok.encode(prompt, add_special_tokens=False)
        assert full_ids[: len(ids)] == ids


def test_chat_template_marks_exactly_the_assistant_spans(qwen_tok):
    out = qwen_tok.apply_chat_template(
        _conversation(), tools=TOOLS, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    spans, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            spans.append(qwen_tok.decode(cur))
            cur = []
    assert spans == [
        'Let me search.\n<tool_call>\n{"name": "web_search", "arguments": {"query": "tower"}}\n</tool_call><|im_end|>',
        '<tool_call>\n{"name": "web_search", "arguments": {"query": "x"}}\n</tool_call><|im_end|>',
        "It is in Paris.<|im_end|>",
    ]


def _images(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]


@pytest.mark.parametrize("arch", km.ARCHS)
def test_tiny_checkpoint_builds_loads_and_generates(arch, tmp_path, qwen_tok):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = build_tiny_checkpoint(arch, tmp_path / arch, vocab="qwen")
    meta = tiny_metadata(path)
    assert meta["arch"] == arch and 19e6 < meta["params"] < 21e6
    processor = AutoProcessor.from_pretrained(path)
    assert isinstance(processor, km.QwenVLImageOnlyProcessor)
    assert processor.factor == (32 if arch == "qwen3_vl" else 28)
    model = AutoModelForImageTextToText.from_pretrained(path)
    assert model.config.model_type == arch
    # Same vocabulary as the real model: the saved tokenizer equals the offline Qwen tokenizer.
    probe = "Who designed it? 设计者是谁？ 1889 <tool_call>"
    assert processor.tokenizer.encode(probe) == qwen_tok.encode(probe)

    conv = _conversation()[:5]  # system, user+image, assistant tool call, tool+image, tool
    text = processor.apply_chat_template(conv, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=_images([(123, 77), (40, 300)]), return_tensors="pt")
    merge = model.config.vision_config.spatial_merge_size
    n_feat = int(inputs["image_grid_thw"].prod(-1).sum()) // merge**2
    assert int((inputs["input_ids"] == processor.image_token_id).sum()) == n_feat
    with torch.inference_mode():
        logits = model(**inputs).logits
    assert logits.shape[:2] == inputs["input_ids"].shape and torch.isfinite(logits).all()
    out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]


def test_local_vocab_checkpoints_are_small_and_reused(tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    for arch in km.ARCHS:
        path = build_tiny_checkpoint(arch, tmp_path / arch, vocab="local", seed=3)
        meta = tiny_metadata(path)
        assert meta["params"] < 600_000, meta
        processor = AutoProcessor.from_pretrained(path)
        model = AutoModelForImageTextToText.from_pretrained(path)
        tok = processor.tokenizer
        assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
        assert tok.encode("<tool_call><tool_response>", add_special_tokens=False) == [
            tok.convert_tokens_to_ids("<tool_call>"),
            tok.convert_tokens_to_ids("<tool_response>"),
        ]
        text = processor.apply_chat_template(_conversation()[:4], tokenize=False, add_generation_prompt=True)
        inputs = processor(text=[text], images=_images([(64, 64), (50, 90)]), return_tensors="pt")
        with torch.inference_mode():
            assert torch.isfinite(model(**inputs).logits).all()
    # Reuse: a complete folder with the same settings is returned untouched.
    path = tmp_path / "qwen2_vl"
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_checkpoint("qwen2_vl", path, vocab="local", seed=3) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp
    # Different settings in a non-empty folder: refuse instead of silently mixing.
    with pytest.raises(FileExistsError):
        build_tiny_checkpoint("qwen2_vl", path, vocab="local", seed=4)
    # Same seed -> same weights; other seed -> other weights.
    from safetensors.torch import load_file

    again = build_tiny_checkpoint("qwen2_vl", tmp_path / "again", vocab="local", seed=3)
    other = build_tiny_checkpoint("qwen2_vl", tmp_path / "other", vocab="local", seed=4)
    a, b, c = (load_file(p / "model.safetensors") for p in (path, again, other))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_default_cache_location_and_bad_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("MMSEARCH_KIT_CACHE", str(tmp_path))
    path = build_tiny_checkpoint("qwen2_5_vl", vocab="local", max_pixels=64 * 28 * 28)
    assert path == tmp_path / "tiny" / f"qwen2_5_vl-local-0-px{4 * 28 * 28}-{64 * 28 * 28}"
    assert json.loads((path / "processor_config.json").read_text())["image_processor"]["size"] == {
        "longest_edge": 64 * 28 * 28,
        "shortest_edge": 4 * 28 * 28,
    }
    assert build_tiny_checkpoint("qwen2_5_vl", vocab="local", max_pixels=64 * 28 * 28) == path
    assert not list((tmp_path / "tiny").glob(".*"))  # no staging folders left behind
    with pytest.raises(ValueError, match="arch"):
        build_tiny_checkpoint("llava", vocab="local")
    with pytest.raises(ValueError, match="vocab"):
        build_tiny_checkpoint("qwen2_vl", vocab="gpt2")
    with pytest.raises(ValueError, match="min_pixels"):
        build_tiny_checkpoint("qwen2_vl", vocab="local", min_pixels=10, max_pixels=5)
    with pytest.raises(TinyCheckpointError):
        tiny_metadata(tmp_path)


def test_processor_is_image_only(tmp_path):
    path = build_tiny_checkpoint("qwen2_vl", tmp_path / "c", vocab="local")
    processor = km.load_image_only_processor(path)
    assert processor.chat_template == QWEN_VL_CHAT_TEMPLATE
    with pytest.raises(ValueError, match="image-only"):
        processor(text=["<|vision_start|><|video_pad|><|vision_end|>"], videos=[np.zeros((2, 28, 28, 3))])
    with pytest.raises(FileNotFoundError):
        km.load_image_only_processor(tmp_path / "missing")
