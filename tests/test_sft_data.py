"""SFT data path: the loss mask is exactly the assistant spans (WeAgent §6.1, POINTS-Seeker §3.2.3)
on multi-turn, multi-image records for the three tiny Qwen-VL architectures; filters and bad input."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from kit.models.processor import load_image_only_processor
from kit.models.tiny import build_tiny_checkpoint
from kit.train.sample_records import ASSISTANT_TEXTS, sample_record
from kit.train.sft_data import (
    IGNORE_INDEX,
    ImageLoadError,
    NoAssistantTurn,
    ResponseTooLong,
    SFTCollator,
    SFTEncoder,
    TemplateError,
    TrajectoryTooLong,
)
from kit.types import ContentPart

ARCHS = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]

make_record = sample_record


def _text(t):
    return [ContentPart(type="text", text=t)]


@pytest.fixture(scope="module", params=ARCHS)
def encoder(request):
    path = build_tiny_checkpoint(request.param, vocab="local")
    return SFTEncoder(load_image_only_processor(path))


def test_mask_is_exactly_the_assistant_spans(encoder, tmp_path):
    rec = make_record(tmp_path / "ws")
    ex = encoder.encode(rec)
    tok = encoder.tokenizer
    ids = ex.input_ids
    assert ex.loss_mask.dtype == torch.bool and ex.loss_mask.shape == ids.shape
    # masked tokens form exactly three contiguous runs, one per assistant turn
    m = ex.loss_mask.int().tolist()
    runs = [(i, j) for i, j in _runs(m)]
    assert len(runs) == 3 and len(ex.response_tokens) == 3
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    for (a, b), want in zip(runs, ASSISTANT_TEXTS):
        assert tok.decode(ids[a:b].tolist(), skip_special_tokens=False) == want + "<|im_end|>"
        assert ids[b - 1] == im_end
        # the assistant header just before the span is not trained
        assert tok.decode(ids[a - 6:a].tolist(), skip_special_tokens=False).endswith("<|im_start|>assistant\n")
    # nothing else is trained: system (with the tool block), user prompt, tool images, interventions
    unmasked = tok.decode(ids[~ex.loss_mask].tolist(), skip_special_tokens=False)
    for s in ["You are a search agent.", "# Tools", '"name": "web_search"', "What is this?", "Found 2 images",
              "Duplicate call", "Answer now."]:
        assert s in unmasked
    assert not ex.loss_mask[ids == encoder.image_token_id].any()
    # the three images are all present and placeholders equal image features
    assert ex.image_grid_thw.shape[0] == 3
    assert int((ids == encoder.image_token_id).sum()) == int(ex.image_grid_thw.prod(-1).sum()) // encoder.merge**2


def test_tokens_equal_the_processor_output(encoder, tmp_path):
    """The mask path tokenizes exactly what the processor would feed the model."""
    rec = make_record(tmp_path / "ws")
    ex = encoder.encode(rec)
    text, _ = encoder.render(rec.messages)
    imgs = [Image.open(tmp_path / "ws" / f).convert("RGB") for f in ["user_image_1.png", "search_image_1.png",
                                                                     "search_image_2.png"]]
    ref = encoder.processor(text=[text], images=imgs, return_tensors="pt")
    assert torch.equal(ref["input_ids"][0], ex.input_ids)
    assert torch.equal(ref["mm_token_type_ids"][0], ex.mm_token_type_ids)
    assert torch.allclose(ref["pixel_values"], ex.pixel_values)


def test_prefix_fallback_matches_generation_blocks(encoder, tmp_path):
    """A template without {% generation %} gets the same mask by prefix rendering."""
    rec = make_record(tmp_path / "ws")
    plain = encoder.template.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")
    assert plain != encoder.template
    enc2 = SFTEncoder(encoder.processor, chat_template=plain)
    assert not enc2.has_generation_blocks and encoder.has_generation_blocks
    a, b = encoder.encode(rec), enc2.encode(rec)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)


def test_structured_tool_calls_are_rendered_and_trained(encoder, tmp_path):
    ex = encoder.encode(make_record(tmp_path / "ws", structured_call=True))
    a, b = _runs(ex.loss_mask.int().tolist())[0]
    got = encoder.tokenizer.decode(ex.input_ids[a:b].tolist(), skip_special_tokens=False)
    assert '"name": "image_search"' in got and got.startswith("<think>search</think>")


def test_assistant_intervention_is_not_trained(encoder, tmp_path):
    rec = make_record(tmp_path / "ws")
    rec.messages[2].intervention = True
    ex = encoder.encode(rec)
    assert len(_runs(ex.loss_mask.int().tolist())) == 2


def test_collator_labels_and_padding(encoder, tmp_path):
    e1 = encoder.encode(make_record(tmp_path / "a"))
    rec2 = make_record(tmp_path / "b", rid="ep-2")
    rec2.messages = [m for m in rec2.messages if not m.image_refs()] + []
    rec2.images = []
    e2 = encoder.encode(rec2)
    batch = SFTCollator(encoder.pad_token_id)([e1, e2])
    B, L = batch["input_ids"].shape
    assert (B, L) == (2, max(e1.num_tokens, e2.num_tokens))
    assert batch["attention_mask"][1].sum() == e2.num_tokens
    lab = batch["labels"]
    assert torch.equal(lab[0][: e1.num_tokens] != IGNORE_INDEX, e1.loss_mask)
    assert (lab[1][e2.num_tokens:] == IGNORE_INDEX).all()
    assert batch["image_grid_thw"].shape[0] == 3 and batch["pixel_values"].shape[0] == e1.pixel_values.shape[0]


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_with_batch(arch, tmp_path):
    """The collated batch runs through the model and gives a finite loss on masked tokens only."""
    from transformers import AutoModelForImageTextToText

    path = build_tiny_checkpoint(arch, vocab="local")
    enc = SFTEncoder(load_image_only_processor(path))
    model = AutoModelForImageTextToText.from_pretrained(str(path))
    batch = SFTCollator(enc.pad_token_id)([enc.encode(make_record(tmp_path / "ws"))])
    out = model(**batch)
    assert torch.isfinite(out.loss)


# ---------------------------------------------------------------------------------------- bad input
def test_bad_input(encoder, tmp_path):
    with pytest.raises(NoAssistantTurn):
        encoder.encode(make_record(tmp_path / "n", assistant=False))
    rec = make_record(tmp_path / "img")
    (tmp_path / "img" / "search_image_2.png").write_bytes(b"not a png")
    with pytest.raises(ImageLoadError, match="search_image_2"):
        encoder.encode(rec)
    rec = make_record(tmp_path / "miss")
    (tmp_path / "miss" / "user_image_1.png").unlink()
    with pytest.raises(ImageLoadError, match="not found"):
        encoder.encode(rec)
    small = SFTEncoder(encoder.processor, max_response_tokens=5)
    with pytest.raises(ResponseTooLong):
        small.encode(make_record(tmp_path / "r"))
    short = SFTEncoder(encoder.processor, max_trajectory_tokens=50)
    with pytest.raises(TrajectoryTooLong):
        short.encode(make_record(tmp_path / "t"))
    # A literal placeholder in user text is task data and is neutralized (issue 14 part 3); in the
    # kit's own system text it is not, and the placeholder check still refuses the record.
    rec = make_record(tmp_path / "lit")
    rec.messages[1].content.append(ContentPart(type="text", text="<|image_pad|>"))
    assert encoder.encode(rec).control_tokens_neutralized == 1
    assert rec.messages[0].role == "system"
    rec.messages[0].content.append(ContentPart(type="text", text="<|image_pad|>"))
    with pytest.raises(TemplateError, match="placeholders"):
        encoder.encode(rec)


def test_toolless_template(encoder):
    toolless = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    with pytest.raises(TemplateError, match="does not render tools"):
        SFTEncoder(encoder.processor, chat_template=toolless, replace_toolless_template=False)
    enc = SFTEncoder(encoder.processor, chat_template=toolless)
    assert "# Tools" in enc.template


def test_encode_many_counts_skips(encoder, tmp_path):
    good = make_record(tmp_path / "g")
    bad = make_record(tmp_path / "b", rid="b", assistant=False)
    untrainable = make_record(tmp_path / "u", rid="u")
    untrainable.trainable = False
    long = make_record(tmp_path / "l", rid="l")
    long.messages[-1].content = _text("<response>" + "word " * 6000 + "</response>")
    ex, rep = encoder.encode_many([good, bad, untrainable, long])
    assert [e.id for e in ex] == ["ep-1"] and rep.kept == 1
    assert rep.skipped == {"no_assistant_turn": 1, "not_trainable": 1, "response_over_limit": 1}
    assert json.dumps(rep.as_dict())


def _runs(mask):
    runs, start = [], None
    for i, v in enumerate(mask + [0]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i))
            start = None
    return runs
