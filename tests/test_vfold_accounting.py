"""Token accounting against the real Qwen processors, trajectory replay, and the fully rendered SFT
variant of episode records."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.loop import Harness
from kit.harness.registry import EvidenceRegistry
from kit.policy.scripted import ScriptedPolicy, tool_call_text
from kit.policy.tokens import QWEN2_VL_IMAGE_DEFAULTS, QWEN3_VL_IMAGE_DEFAULTS
from kit.vfold.accounting import PROCESSORS, observation_tokens, processor_counter, trajectory_accounting
from kit.vfold.fold import DiscardContext, FullContext, VFoldContext
from kit.vfold.render import default_renderer
from kit.vfold.training import render_dataset, render_trajectory
from tests.test_vfold_fold import PARA, history


def _image_processor(arch: str):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    d = QWEN3_VL_IMAGE_DEFAULTS if arch == "qwen3_vl" else QWEN2_VL_IMAGE_DEFAULTS
    return Qwen2VLImageProcessorPil(size={"shortest_edge": d["min_pixels"], "longest_edge": d["max_pixels"]},
                                    patch_size=d["patch_size"], temporal_patch_size=2, merge_size=d["merge_size"])


@pytest.mark.parametrize("arch", sorted(PROCESSORS))
def test_vision_tokens_match_the_processor(arch):
    counter = processor_counter(arch)
    proc = _image_processor(arch)
    res = default_renderer().render((PARA * 60) + "\nshort tail")
    pages = res.pages + default_renderer().render("tiny").pages
    assert pages[0].size[1] == 842 and pages[-1].size[1] == 30
    for page in pages:
        out = proc(images=[page.convert("RGB")], return_tensors="np")
        grid = np.asarray(out["image_grid_thw"])[0]
        assert int(np.prod(grid)) // proc.merge_size ** 2 == counter.count_image(*page.size), (arch, page.size)
    factor = 32 if arch == "qwen3_vl" else 28
    assert counter.factor == factor


def test_text_tokens_match_the_tokenizer():
    counter = processor_counter("qwen2_5_vl")
    text = PARA * 5 + "| Released | May 1970 |\n中文 עברית"
    ids = counter.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert counter.count_text(text) == len(ids)


def test_observation_tokens_dense_prose_saves():
    ob = observation_tokens(PARA * 40, processor_counter("qwen2_vl"))
    assert ob.pages == 1 and ob.text_tokens > 0 and ob.ratio > 2 and ob.saving > 0.5
    empty = observation_tokens("", processor_counter("qwen2_vl"))
    assert empty.pages == 0 and empty.vision_tokens == 0 and empty.saving == 0.0


def _record(tmp_path, n=6, chars=3000) -> EpisodeRecord:
    msgs = history(n, chars)
    msgs.append(msgs[-2].model_copy(update={"content": msgs[-2].content, "tool_calls": [], "turn": n + 1}))
    return EpisodeRecord(id="ep", task=Task(id="ep", question="Who was Ray Charles?"), config_hash="x",
                         messages=msgs, status="answered", trainable=True, workspace=str(tmp_path / "ws"))


def test_trajectory_accounting_under_vfold(tmp_path):
    counter = processor_counter("qwen2_vl")
    rec = _record(tmp_path)
    acct = trajectory_accounting(rec, lambda c: VFoldContext(c, tau=3000, keep=2), counter)
    assert len(acct.turns) == 7
    for t in acct.turns:
        if not t["triggered"]:
            assert t["strategy_tokens"] == t["full_tokens"]
        else:
            assert t["strategy_tokens"] < t["full_tokens"] and t["history_tokens"] > 3000
    assert acct.turns[0]["triggered"] is False and acct.turns[-1]["triggered"] is True
    assert len(acct.folded) == 4  # 6 observations, the last 2 stay text
    assert all(f.folded_tokens < f.text_tokens and f.pages == 1 for f in acct.folded)
    s = acct.summary()
    assert 0.3 < s["mean_saving_per_folded_observation"] < 0.95 and s["final_saving"] > 0.2
    assert s["total_prompt_strategy"] < s["total_prompt_full"]
    json.dumps(acct.to_dict())
    full = trajectory_accounting(rec, FullContext, counter)
    assert full.total_strategy == full.total_full == acct.total_full
    disc = trajectory_accounting(rec, lambda c: DiscardContext(c, tau=3000, keep=2), counter)
    assert disc.final_strategy < acct.final_strategy < acct.final_full and disc.folded == []


def test_trajectory_accounting_on_record_without_messages(tmp_path):
    rec = EpisodeRecord(id="e", task=Task(id="e", question="q"), config_hash="x")
    with pytest.raises(ValueError):
        trajectory_accounting(rec, FullContext, processor_counter("qwen2_vl"))


def _real_record(tmp_path, memory_backend):
    script = [tool_call_text("web_extract", {"urls": ["https://example.org/eiffel"], "goal": "year"}, think="read"),
              tool_call_text("web_search_for_image", {"query": "eiffel", "num": 2}, think="look"),
              "<think>done</think><response>Paris</response>"]
    h = Harness(ScriptedPolicy(script), memory_backend, HarnessConfig())
    return asyncio.run(h.run(Task(id="t", question="Where is the Eiffel Tower?"), tmp_path / "ws", episode_id="ep"))


def test_render_trajectory_replaces_every_observation(tmp_path, memory_backend):
    rec = _real_record(tmp_path, memory_backend)
    before = rec.model_dump_json()
    new = render_trajectory(rec, tmp_path / "rendered")
    assert rec.model_dump_json() == before, "the source record is not modified"
    assert new.id == "ep-vfold" and "vfold_rendered" in new.labels and new.workspace == str(tmp_path / "rendered")
    kinds = {e.filename: e for e in new.images}
    tools_old = [m for m in rec.messages if m.role == "tool"]
    tools_new = [m for m in new.messages if m.role == "tool"]
    assert len(tools_old) == len(tools_new) == 2
    for a, b in zip(tools_old, tools_new):
        pages = [r for r in b.image_refs() if kinds[r].kind == "rendered_obs"]
        assert pages and a.text()[:40] not in b.text()
        assert [r for r in b.image_refs() if kinds[r].kind != "rendered_obs"] == a.image_refs()
        assert all(kinds[p].tool == a.name and kinds[p].turn == a.turn for p in pages)
    for e in new.images:
        assert (tmp_path / "rendered" / e.filename).is_file()
    assert [m for m in new.messages if m.role != "tool"] == [m for m in rec.messages if m.role != "tool"]
    back = EpisodeRecord.model_validate_json(new.model_dump_json())
    assert back == new
    reg = EvidenceRegistry.from_images(tmp_path / "rendered", new.images)
    assert all(reg.read(e.filename)[:4] in (b"\x89PNG", b"\xff\xd8\xff\xe0", b"\xff\xd8\xff\xdb") for e in new.images)


def test_render_dataset_and_unrenderable_observation(tmp_path, memory_backend):
    rec = _real_record(tmp_path, memory_backend)
    bad = rec.model_copy(deep=True, update={"id": "bad"})
    m = next(m for m in bad.messages if m.role == "tool")
    m.content[0].text = "private use \U0010fffd only"
    untrainable = rec.model_copy(update={"id": "x", "trainable": False})
    out = render_dataset([rec, bad, untrainable], tmp_path / "ds")
    assert [r.id for r in out] == ["ep-vfold", "bad-vfold"]
    lines = (tmp_path / "ds" / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["id"] == "ep-vfold"
    kept = [e for e in out[1].events if e.type == "vfold_kept_as_text"]
    assert kept and kept[0].detail["reason"] == "missing_glyphs"
    with pytest.raises(FileNotFoundError):
        gone = rec.model_copy(update={"workspace": str(tmp_path / "nowhere")})
        render_trajectory(gone, tmp_path / "other")
