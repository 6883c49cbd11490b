"""In-process transformers policy and the Qwen token counter on tiny offline checkpoints."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from PIL import Image

import kit.models as km
from kit.models.qwen_tokenizer import is_qwen_vocab_available
from kit.policy.tokens import QwenTokenCounter, counter_for
from kit.policy.transformers_policy import TransformersPolicy
from kit.types import ContentPart, Message, Policy, PolicyError, SamplingParams, TokenCounter

if not is_qwen_vocab_available():  # dashscope is installed --no-deps: importing it fails, finding the file works
    pytest.skip("no Qwen BPE vocabulary (make setup: pip install --no-deps -r requirements/qwen-vocab.txt)",
                allow_module_level=True)

# width x height; odd sizes on purpose (rounding, extreme aspect, up/down-scaling)
SIZES = {
    "user_image_1.png": (311, 123),
    "search_image_1.jpg": (97, 500),
    "search_image_2.png": (1, 1),
    "page_image_1.png": (3, 500),
    "code_image_1.png": (999, 1001),
    "thumb.png": (28, 27),
    "wide.png": (2000, 30),
    "tiny.png": (29, 57),
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "Search the web for text results.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "web_search_based_on_image",
            "description": "Reverse image search.",
            "parameters": {"type": "object", "properties": {"image": {"type": "string"}}, "required": ["image"]},
        },
    },
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=6)


def text(t: str) -> ContentPart:
    return ContentPart(type="text", text=t)


def image(name: str) -> ContentPart:
    return ContentPart(type="image", image=name)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = tmp_path_factory.mktemp("ws")
    rng = np.random.default_rng(0)
    for name, (w, h) in SIZES.items():
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(ws / name)
    (ws / "broken.png").write_bytes(b"not an image")
    return ws


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ckpt")


@pytest.fixture(scope="module")
def local_policies(ckpt_dir):
    return {
        arch: TransformersPolicy(km.build_tiny_checkpoint(arch, ckpt_dir / f"{arch}-local", vocab="local"))
        for arch in km.ARCHS
    }


@pytest.fixture(scope="module")
def qwen_policy(ckpt_dir):
    return TransformersPolicy(km.build_tiny_checkpoint("qwen2_5_vl", ckpt_dir / "q25-qwen", vocab="qwen"))


def conversation() -> list[Message]:
    return [
        Message(role="system", content=[text("You are a multimodal search agent. Cite images by reference.")]),
        Message(role="user", content=[image("user_image_1.png"), text("Where was this photo taken? 拍摄地点？")]),
    ]


async def test_multi_turn_generation_with_images_in_user_and_tool_messages(local_policies, workspace):
    for arch, policy in local_policies.items():
        assert isinstance(policy, Policy) and isinstance(policy.token_counter, TokenCounter)
        msgs = conversation()
        tool_images = [["search_image_1.jpg", "search_image_2.png"], ["page_image_1.png"], ["thumb.png", "wide.png"]]
        prompt_sizes = []
        for turn, names in enumerate(tool_images):
            out = await policy.generate(msgs, TOOLS, GREEDY, str(workspace))
            assert out.tool_calls == [] and out.finish_reason in ("stop", "length")
            assert 1 <= out.usage.completion_tokens <= GREEDY.max_tokens
            if out.finish_reason == "length":
                assert out.usage.completion_tokens == GREEDY.max_tokens
            assert out.usage.prompt_tokens == policy.prompt_token_count(msgs, TOOLS, workspace)
            refs = [r for m in msgs for r in m.image_refs()]
            assert out.raw["images"] == len(refs)
            assert out.raw["image_tokens"] == sum(policy.token_counter.count_image(*SIZES[r]) for r in refs)
            prompt_sizes.append(out.usage.prompt_tokens)
            # The raw text goes back into the history; tool results bring new images each turn.
            msgs.append(Message(role="assistant", content=[text(out.text)], turn=turn))
            msgs.append(Message(role="tool", content=[text(f"result {turn}")] + [image(n) for n in names], turn=turn))
            if turn == 1:
                msgs.append(Message(role="tool", content=[text("second call result")], turn=turn))
        assert prompt_sizes == sorted(prompt_sizes) and len(set(prompt_sizes)) == 3, (arch, prompt_sizes)
        # Tool use disabled (synthesis turn): no tool block in the prompt.
        final = await policy.generate(msgs, [], GREEDY, str(workspace))
        with_tools = policy.prompt_token_count(msgs, TOOLS, workspace)
        assert final.usage.prompt_tokens == policy.prompt_token_count(msgs, [], workspace) < with_tools
        assert with_tools > prompt_sizes[-1]


async def test_sampling_seed_greedy_and_stop(local_policies, workspace):
    policy = local_policies["qwen2_vl"]
    msgs = conversation()
    sampled = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=8, seed=7)
    a, b = await asyncio.gather(  # concurrent calls are serialized, each with its own seed
        policy.generate(msgs, TOOLS, sampled, str(workspace)), policy.generate(msgs, TOOLS, sampled, str(workspace))
    )
    assert a.raw["completion_ids"] == b.raw["completion_ids"]
    g1 = await policy.generate(msgs, TOOLS, GREEDY, str(workspace))
    g2 = await policy.generate(msgs, TOOLS, GREEDY, str(workspace))
    assert g1.raw["completion_ids"] == g2.raw["completion_ids"]
    ids = g1.raw["completion_ids"]
    # Declare a token greedy decoding emits as EOS: generation stops there and it is not in the text.
    stop_id = ids[min(2, len(ids) - 1)]
    saved = policy.eos_token_ids
    try:
        policy.eos_token_ids = [stop_id]
        out = await policy.generate(msgs, TOOLS, GREEDY, str(workspace))
    finally:
        policy.eos_token_ids = saved
    assert out.finish_reason == "stop"
    assert out.raw["completion_ids"] == ids[: ids.index(stop_id) + 1]
    assert out.text == policy.tokenizer.decode(ids[: ids.index(stop_id)], skip_special_tokens=True)
    capped = TransformersPolicy(policy.model_path, max_new_tokens=2)
    out = await capped.generate(msgs, TOOLS, SamplingParams(temperature=0.0, max_tokens=50), str(workspace))
    assert out.usage.completion_tokens <= 2
    assert out.finish_reason == ("length" if out.raw["completion_ids"][-1] not in capped.eos_token_ids else "stop")


async def test_placeholder_mismatch_is_reported_with_both_counts(local_policies, workspace):
    policy = local_policies["qwen2_5_vl"]
    msgs = conversation()
    msgs.append(Message(role="tool", content=[text("page says <|image_pad|> here"), image("thumb.png")]))
    with pytest.raises(PolicyError, match=r"prompt has 3 <\|image_pad\|> placeholders but 2 images"):
        await policy.generate(msgs, TOOLS, GREEDY, str(workspace))
    # Processor configured unlike the model (merge 1 vs the model's 2): the token check catches it
    # before the forward pass.
    ip = policy.processor.image_processor
    try:
        ip.merge_size = 1
        with pytest.raises(PolicyError, match=r"input_ids has (\d+) <\|image_pad\|> tokens but the 1 image\(s\) give"):
            await policy.generate(conversation(), TOOLS, GREEDY, str(workspace))
    finally:
        ip.merge_size = 2
    out = await policy.generate(conversation(), TOOLS, GREEDY, str(workspace))
    assert out.raw["image_tokens"] == policy.token_counter.count_image(*SIZES["user_image_1.png"])


@pytest.mark.parametrize(
    ("part", "ws", "match"),
    [
        (image("missing.png"), True, "does not exist"),
        (image("../escape.png"), True, "not a path inside the workspace"),
        (image("user_image_1.png"), False, "no workspace"),
        (image("broken.png"), True, "cannot read image broken.png"),
        (ContentPart(type="image"), True, "without a filename"),
    ],
)
async def test_bad_images_raise_policy_error(local_policies, workspace, part, ws, match):
    msgs = [Message(role="user", content=[part, text("what is it?")])]
    with pytest.raises(PolicyError, match=match):
        await local_policies["qwen3_vl"].generate(msgs, [], GREEDY, str(workspace) if ws else None)


async def test_empty_messages_and_bad_limits(local_policies):
    with pytest.raises(PolicyError, match="no messages"):
        await local_policies["qwen2_vl"].generate([], [], GREEDY)
    with pytest.raises(PolicyError, match="max_tokens"):
        await local_policies["qwen2_vl"].generate(conversation()[:1], [], SamplingParams(max_tokens=0))
    with pytest.raises(FileNotFoundError):
        TransformersPolicy("/nonexistent/checkpoint")


@pytest.mark.parametrize(("arch", "factor"), [("qwen2_5_vl", 28), ("qwen3_vl", 32)])
def test_counter_image_tokens_equal_processor_output(local_policies, workspace, arch, factor):
    policy = local_policies[arch]
    counter = policy.token_counter
    assert counter.factor == factor
    proc = policy.processor
    placeholder = "<|vision_start|><|image_pad|><|vision_end|>"
    extra = [(1, 199), (199, 1), (4000, 3000), (57, 57), (640, 480)]
    for w, h in list(SIZES.values()) + extra:
        img = Image.new("RGB", (w, h), (120, 30, 200))
        inputs = proc(text=[placeholder], images=[img], return_tensors="pt")
        n_pad = int((inputs["input_ids"] == proc.image_token_id).sum())
        assert counter.count_image(w, h) == n_pad == int(inputs["image_grid_thw"].prod()) // 4, (w, h)
        rh, rw = counter.resized_size(w, h)
        assert rh % factor == 0 and rw % factor == 0
        assert counter.min_pixels <= rh * rw <= counter.max_pixels
    with pytest.raises(ValueError, match="aspect ratio"):
        counter.count_image(1, 201)
    with pytest.raises(ValueError, match="positive"):
        counter.count_image(0, 10)


def test_counter_text_equals_tokenizer(qwen_policy):
    counter, tok = qwen_policy.token_counter, qwen_policy.tokenizer
    texts = [
        "The Shanghai Tower is 632 metres tall.",
        "上海中心大厦高632米，共128层。",
        '<tool_call>\n{"name": "web_search", "arguments": {"query": "x"}}\n</tool_call>',
        "literal <|im_end|> and <|image_pad|> count as the special tokens",
        "def f(x):\n\treturn x ** 2  # comment\n\n\n",
        "",
        " " * 17 + "\n" * 3,
    ]
    expected = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert [counter.count_text(t) for t in texts] == expected
    assert counter.count_texts(texts) == expected
    assert counter.count_text(texts[0]) == expected[0]  # cached path
    with pytest.raises(TypeError):
        counter.count_text(None)  # type: ignore[arg-type]


def test_message_counts_add_up_to_the_exact_prompt_length(qwen_policy, workspace):
    counter = qwen_policy.token_counter
    msgs = conversation() + [
        Message(role="assistant", content=[text('Searching.\n<tool_call>\n{"name": "web_search", "arguments": {"query": "t"}}\n</tool_call>')]),  # noqa: E501
        Message(role="tool", content=[text("1. Eiffel Tower - Wikipedia."), image("search_image_1.jpg"), image("search_image_2.png")]),
        Message(role="tool", content=[image("page_image_1.png"), text("2. Paris, France.")]),
        Message(role="tool", content=[text("3. Tour Eiffel!")]),
        Message(role="assistant", content=[text("Let me look at one more.")]),
        Message(role="user", content=[image("code_image_1.png"), text("And this one?")]),
    ]  # fmt: skip
    exact = qwen_policy.prompt_token_count(msgs, TOOLS, workspace)
    total = counter.count_message(msgs[0], first=True, tools=TOOLS) + counter.generation_prompt_tokens
    for prev, m in zip(msgs, msgs[1:]):
        total += counter.count_message(m, [SIZES[r] for r in m.image_refs()], prev.role)
    assert total == exact
    assert counter.count_prompt(msgs, TOOLS, SIZES) == exact
    assert counter.count_prompt(msgs, [], SIZES.__getitem__) == qwen_policy.prompt_token_count(msgs, [], workspace)
    # Without a system message the default one is counted with the first message.
    no_sys = msgs[1:]
    first = counter.count_message(no_sys[0], [SIZES["user_image_1.png"]], first=True, tools=TOOLS)
    rest = sum(counter.count_message(m, [SIZES[r] for r in m.image_refs()], p.role) for p, m in zip(no_sys, no_sys[1:]))
    assert first + rest + 3 == qwen_policy.prompt_token_count(no_sys, TOOLS, workspace)
    # The cheap estimate (framing + text + images) is within one token per tool result (+1 for the
    # system/tool-block boundary).
    approx, prev = counter.count_tools(TOOLS) + counter.generation_prompt_tokens, None
    for m in msgs:
        approx += counter.count_message_overhead(m.role, prev) + counter.count_text(m.text())
        approx += sum(counter.count_image(*SIZES[r]) + counter.image_overhead for r in m.image_refs())
        prev = m.role
    assert abs(approx - exact) <= 1 + sum(m.role == "tool" for m in msgs)
    assert [counter.count_message_overhead(r) for r in ("system", "user", "assistant")] == [5, 5, 5]
    assert counter.image_overhead == 2 and counter.generation_prompt_tokens == 3
    with pytest.raises(ValueError, match="image sizes"):
        counter.count_message(msgs[1], [])
    with pytest.raises(ValueError, match="first=True"):
        counter.count_message(msgs[0], tools=TOOLS)
    with pytest.raises(ValueError, match="no size"):
        counter.count_prompt(msgs, TOOLS, {})
    with pytest.raises(ValueError, match="role"):
        counter.count_message_overhead("robot")


def test_counter_for_checkpoints_and_model_names(qwen_policy, local_policies):
    from_dir = counter_for(qwen_policy.model_path)
    assert (from_dir.factor, from_dir.min_pixels, from_dir.max_pixels) == (
        28,
        km.tiny.DEFAULT_MIN_PIXELS,
        km.tiny.DEFAULT_MAX_PIXELS,
    )
    assert from_dir.count_text("Hello 世界 42") == qwen_policy.token_counter.count_text("Hello 世界 42")
    q3_dir = counter_for(local_policies["qwen3_vl"].model_path)
    assert q3_dir.factor == 32 and len(q3_dir.tokenizer) == len(local_policies["qwen3_vl"].tokenizer)
    q25 = counter_for("Qwen/Qwen2.5-VL-7B-Instruct")
    assert q25.factor == 28 and len(q25.tokenizer) == 151_665
    assert q25.count_image(589, 842) == 630  # a rendered page at the Table 8 size
    q3 = counter_for("Qwen/Qwen3-VL-8B-Instruct")
    assert q3.factor == 32 and len(q3.tokenizer) == 151_669
    assert q3.count_image(64, 64) == (256 // 32) ** 2  # upscaled to min_pixels 65,536 = 256 x 256
    small = counter_for("Qwen/Qwen2-VL-2B-Instruct", max_pixels=256 * 28 * 28)
    assert small.count_image(4000, 3000) <= 256
    assert isinstance(QwenTokenCounter(), TokenCounter)
    with pytest.raises(TypeError, match="unknown override"):
        counter_for("x", max_pxels=1)
    with pytest.raises(ValueError):
        QwenTokenCounter(min_pixels=10, max_pixels=1)


def test_tool_schemas_reach_the_prompt(qwen_policy):
    prompt = qwen_policy.render(conversation()[:1] + [Message(role="user", content=[text("hi")])], TOOLS)
    for t in TOOLS:
        assert json.dumps(t, ensure_ascii=False) in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    # Structured tool calls (function-calling servers) are rendered as <tool_call> blocks once.
    from kit.types import ToolCall

    call = ToolCall(id="c1", name="web_search", arguments='{"query": "q"}')
    m = Message(role="assistant", content=[text("")], tool_calls=[call])
    rendered = qwen_policy.render(conversation()[:1] + [Message(role="user", content=[text("hi")]), m], [])
    assert rendered.count('<tool_call>\n{"name": "web_search", "arguments": {"query": "q"}}\n</tool_call>') == 1
    m2 = Message(role="assistant", content=[text('<tool_call>\n{"name": "web_search", "arguments": {"query": "q"}}\n</tool_call>')], tool_calls=[call])  # fmt: skip  # noqa: E501
    rendered2 = qwen_policy.render(conversation()[:1] + [Message(role="user", content=[text("hi")]), m2], [])
    assert rendered2 == rendered


def test_checkpoint_template_without_tools_is_replaced(local_policies, tmp_path):
    import shutil

    from kit.models.qwen_tokenizer import QWEN_VL_CHAT_TEMPLATE

    src = local_policies["qwen2_vl"].model_path
    dst = tmp_path / "no-tools-template"
    shutil.copytree(src, dst)
    # A template in the style of the stock Qwen2-VL one: no tools section.
    plain = (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    (dst / "chat_template.jinja").write_text(plain)
    policy = TransformersPolicy(dst)
    assert policy.tokenizer.chat_template == QWEN_VL_CHAT_TEMPLATE
    assert json.dumps(TOOLS[0], ensure_ascii=False) in policy.render(conversation()[:1], TOOLS)
    explicit = TransformersPolicy(dst, chat_template=plain)
    assert explicit.tokenizer.chat_template == plain
