"""Open-source normalization (WeAgent §4.5) on the real MMSearch-R1 traces and format-true chat rows:
canonical assistant forms, tool namespace, quarantine with reasons, garbled-text filter, and
acceptance by the SFT data path (tiny model) with its length filters."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from kit.data.normalize import (
    METIS,
    REDSEARCHER,
    ChatAdapter,
    MMSearchR1Adapter,
    garbled,
    normalize_rows,
    read_mmsearch_r1,
    token_filter,
)

CANON = re.compile(r"^<think>.*</think>\n(<tool_call>\n\{.*\}\n</tool_call>|<response>.*</response>)$", re.S)


@pytest.fixture(scope="module")
def traces(data_dir):
    return data_dir / "trajectories" / "mmsearch_r1", data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images"


def test_mmsearch_r1_real_traces(traces, tmp_path):
    tdir, imgs = traces
    rows = list(read_mmsearch_r1(tdir / "predictions_fvqa50.jsonl"))
    rows.append({"trace": {"rounds": []}})  # malformed
    rows.append("not a dict")
    recs, rep = normalize_rows(MMSearchR1Adapter(imgs), rows, tmp_path)
    q = [json.loads(x) for x in (tmp_path / "mmsearch_r1_quarantine.jsonl").read_text().splitlines()]
    assert rep.read == 52 and rep.kept + sum(rep.quarantined.values()) == 52 == rep.kept + len(q)
    assert rep.quarantined["missing_rounds"] == 1 and rep.quarantined["not_an_object"] == 1
    assert all(x["reason"] for x in q)
    failed = [r for r in recs if r.status == "error"]
    assert failed and all(not r.trainable and r.error for r in failed)  # traces ending in tool failures
    # a hard tool failure ended the episode before any observation: none is invented (issue 14)
    assert all(r.messages[-1].role == "assistant" for r in failed)
    for r in recs:
        for m in r.messages:
            if m.role == "assistant":
                assert CANON.match(m.text()), m.text()[:200]
            if m.role == "tool":
                assert m.name.startswith("MMR1_")
        assert r.messages[1].image_refs() == ["user_image_1.png"] or "input_image_missing" in r.labels


def test_mmsearch_r1_case_files_and_sft_acceptance(traces, tmp_path):
    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.sft_data import SFTEncoder

    tdir, imgs = traces
    rows = list(read_mmsearch_r1(tdir / "predictions_fvqa50.jsonl"))[:12]
    ad = MMSearchR1Adapter(imgs)
    recs, _ = normalize_rows(ad, rows, tmp_path)
    proc = load_image_only_processor(build_tiny_checkpoint("qwen2_5_vl", vocab="local"))
    kept, counts = token_filter(recs, SFTEncoder(proc, tools=ad.tool_schemas()))
    assert kept and counts["skipped"].get("not_trainable", 0) == sum(not r.trainable for r in recs)
    assert counts["kept"] == sum(r.trainable for r in recs)
    _, strict = token_filter(recs, SFTEncoder(proc, tools=ad.tool_schemas(), max_response_tokens=16))
    assert strict["skipped"]["response_over_limit"] == counts["kept"]
    _, short = token_filter(recs, SFTEncoder(proc, tools=ad.tool_schemas(), max_trajectory_tokens=200))
    assert short["skipped"]["trajectory_over_limit"] > 0


def test_garbled_detection():
    assert garbled("plain text, fine.") is None
    assert garbled("broken \ufffd\ufffd\ufffd bytes") == "replacement_char"
    assert garbled("cafÃ© rÃ©sumÃ© naÃ¯ve") == "mojibake"
    assert garbled("ctrl \x01\x02\x03 chars") == "control_chars"


def _b64png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 120, 200)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _chat_row(**over):
    msgs = [{"role": "system", "content": "You are an efficient problem-solving agent."},
            {"role": "user", "content": "<image>Which bridge is this?"},
            {"role": "assistant", "content": '<think>Search by image.</think><tool_call>{"name": "image_search", '
                                             '"arguments": {"image": "img_1"}}</tool_call>'},
            {"role": "user", "content": "<tool_response>Golden Gate Bridge - Wikipedia</tool_response>"},
            {"role": "assistant", "content": "<think>It is the Golden Gate.</think><answer>Golden Gate Bridge</answer>"}]
    row = {"id": 7, "messages": json.dumps(msgs), "images": [_b64png()], "answer": "Golden Gate Bridge"}
    row.update(over)
    return row


def test_chat_adapter_namespace_and_quarantine(tmp_path):
    ad = ChatAdapter(REDSEARCHER)
    rows = [_chat_row(), _chat_row(images=[]), _chat_row(messages="{not json"),
            _chat_row(messages=json.dumps([{"role": "user", "content": "hi"}])),
            _chat_row(messages=json.dumps([{"role": "user", "content": "q \ufffd\ufffd\ufffd"},
                                           {"role": "assistant", "content": "<answer>a</answer>"}]), images=[])]
    recs, rep = normalize_rows(ad, rows, tmp_path)
    assert rep.kept == 1 and rep.quarantined == {"image_count_mismatch": 1, "unparsable_json": 1,
                                                  "no_assistant_turn": 1, "garbled_text": 1}
    r = recs[0]
    tool = [m for m in r.messages if m.role == "tool"][0]
    assert tool.name == "RED_image_search" and "Golden Gate" in tool.text()
    asst = [m.text() for m in r.messages if m.role == "assistant"]
    assert all(CANON.match(a) for a in asst) and r.final_response == "Golden Gate Bridge" and r.trainable
    assert [s["function"]["name"] for s in ad.tool_schemas()] == ["RED_image_search"]
    assert ChatAdapter(METIS).prefix == "METIS_"


def test_chat_adapter_output_encodes(tmp_path):
    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.sft_data import SFTEncoder

    ad = ChatAdapter(METIS)
    recs, _ = normalize_rows(ad, [_chat_row()], tmp_path)
    enc = SFTEncoder(load_image_only_processor(build_tiny_checkpoint("qwen2_vl", vocab="local")), tools=ad.tool_schemas())
    ex = enc.encode(recs[0])
    assert ex.num_loss_tokens > 0 and ex.pixel_values is not None


def test_threaded_normalization_matches_serial_and_reruns(traces, tmp_path):
    from kit.data.normalize.base import _FILE_MEMO

    tdir, imgs = traces
    rows = list(read_mmsearch_r1(tdir / "predictions_fvqa50.jsonl"))
    rows.insert(3, {"trace": {"rounds": [{"response": "x"}], "image": {"path": "/elsewhere/missing.png"}}})
    ad = MMSearchR1Adapter(imgs)
    _FILE_MEMO.clear()
    serial, rep1 = normalize_rows(ad, rows, tmp_path / "a", workers=1)
    threaded, rep2 = normalize_rows(ad, rows, tmp_path / "b", workers=2, window=7)
    assert [r.id for r in serial] == [r.id for r in threaded] and rep1.quarantined == rep2.quarantined
    assert [[i.sha256 for i in r.images] for r in serial] == [[i.sha256 for i in r.images] for r in threaded]
    assert (tmp_path / "a" / "mmsearch_r1_quarantine.jsonl").read_text() == \
        (tmp_path / "b" / "mmsearch_r1_quarantine.jsonl").read_text()
    # rerun into the same folder: workspace images are replaced, not duplicated or failed
    again, rep3 = normalize_rows(ad, rows, tmp_path / "a")
    assert rep3.kept == rep1.kept and len(list(Path(again[0].workspace).iterdir())) == 1


def test_chat_adapter_reads_ms_swift_agent_and_sharegpt_layouts(tmp_path):
    """REDSearcher publishes for ms-swift: ``tool_call`` / ``tool_response`` messages (and ShareGPT
    ``conversations``); both become the same canonical episode as the ``<tool_call>`` text layout."""
    think = "<think>Search by image.</think>\n"
    call = json.dumps({"name": "image_search", "arguments": {"image": "img_1"}})
    swift = {"id": 1, "images": [_b64png()], "messages": [
        {"role": "user", "content": "<image>Which bridge is this?"},
        {"role": "assistant", "content": think},
        {"role": "tool_call", "content": call},
        {"role": "tool_response", "content": "Golden Gate Bridge - Wikipedia"},
        {"role": "assistant", "content": "<think>It is the Golden Gate.</think><answer>Golden Gate Bridge</answer>"}]}
    share = {"id": 2, "images": [_b64png()], "conversations": [
        {"from": "human", "value": "<image>Which bridge is this?"},
        {"from": "function_call", "value": call},
        {"from": "observation", "value": "Golden Gate Bridge - Wikipedia"},
        {"from": "gpt", "value": "<think>It is the Golden Gate.</think><answer>Golden Gate Bridge</answer>"}]}
    parallel = {"id": 3, "images": [], "messages": [
        {"role": "user", "content": "Two bridges?"}, {"role": "assistant", "content": think},
        {"role": "tool_call", "content": call}, {"role": "tool_call", "content": call}]}
    bad = {"id": 4, "images": [], "messages": [{"role": "user", "content": "q"}, {"role": "tool_call", "content": "{x"}]}
    ad = ChatAdapter(REDSEARCHER)
    recs, rep = normalize_rows(ad, [swift, share, parallel, bad], tmp_path)
    assert rep.kept == 2 and rep.quarantined == {"parallel_tool_calls": 1, "bad_tool_call": 1}
    for r in recs:
        asst = [m.text() for m in r.messages if m.role == "assistant"]
        assert all(CANON.match(a) for a in asst) and len(asst) == 2
        assert '"name": "RED_image_search"' in asst[0] and r.final_response == "Golden Gate Bridge"
        tool = next(m for m in r.messages if m.role == "tool")
        assert tool.name == "RED_image_search" and "Golden Gate" in tool.text()
    assert "<think>Search by image.</think>" in [m.text() for m in recs[0].messages if m.role == "assistant"][0]
    assert REDSEARCHER.hub_ids[0] == "honglyhly/REDSearcher_MM_SFT_5K"


def test_source_rows_from_local_release_files(tmp_path):
    """A release saved as Parquet with a decoded image column (what ``load_dataset`` yields) and as
    jsonl with base64 images both normalize; bad file lists are refused with a clear reason."""
    from datasets import Dataset, Features, Sequence, Value
    from datasets import Image as HFImage

    from kit.data.normalize import NormalizeError, source_rows

    png = base64.b64decode(_b64png())
    msgs = [{"role": "user", "content": "<image>Which bridge is this?"},
            {"role": "assistant", "content": "<think>Search.</think>"},
            {"role": "tool_call", "content": json.dumps({"name": "image_search", "arguments": {"image": "img_1"}})},
            {"role": "tool_response", "content": "Golden Gate Bridge - Wikipedia"},
            {"role": "assistant", "content": "<think>Known.</think><answer>Golden Gate Bridge</answer>"}]
    feats = Features({"id": Value("int64"), "messages": [{"role": Value("string"), "content": Value("string")}],
                      "images": Sequence(HFImage())})
    ds = Dataset.from_list([{"id": i, "messages": msgs, "images": [{"bytes": png, "path": None}]} for i in range(3)],
                           features=feats)
    ds.to_parquet(str(tmp_path / "rel.parquet"))
    rows = list(source_rows(data_files=tmp_path / "rel.parquet", limit=2))
    assert len(rows) == 2 and hasattr(rows[0]["images"][0], "size")  # decoded PIL images
    recs, rep = normalize_rows(ChatAdapter(REDSEARCHER), rows, tmp_path / "out")
    assert rep.kept == 2 and recs[0].images[0].width == 64 and recs[0].final_response == "Golden Gate Bridge"
    (tmp_path / "rel.jsonl").write_text(json.dumps({"id": 9, "messages": msgs, "images": [_b64png()]}) + "\n")
    recs2, _ = normalize_rows(ChatAdapter(METIS), source_rows(data_files=[tmp_path / "rel.jsonl"]), tmp_path / "o2")
    assert len(recs2) == 1 and recs2[0].images[0].sha256 == recs[0].images[0].sha256
    with pytest.raises(NormalizeError, match="source_unavailable"):
        list(source_rows(data_files=[tmp_path / "rel.jsonl", tmp_path / "rel.parquet"]))
    with pytest.raises(NormalizeError, match="source_unavailable"):
        list(source_rows())
    with pytest.raises(NormalizeError, match="source_unavailable"):
        list(source_rows(data_files=tmp_path / "missing.jsonl"))


def test_adapter_bugs_quarantine_the_row_not_the_run(tmp_path):
    """An adapter that raises something unforeseen on one row: that row is quarantined as
    ``adapter_error`` with the exception named, the other rows are converted."""
    from kit.data.normalize.base import normalize_rows
    from kit.harness.episode import EpisodeRecord, Task

    class Fragile:
        source = "fragile"

        def to_episode(self, row, index, workspace_root):
            return EpisodeRecord(id=f"r{index}", task=Task(id=str(index), question=row["question"]), config_hash="x")

        def tool_schemas(self):
            return []

    rows = [{"question": "Which river?"}, {"q": "typo in the key"}, {"question": "Which bridge?"}]
    kept, rep = normalize_rows(Fragile(), rows, tmp_path)
    assert [r.id for r in kept] == ["r0", "r2"] and rep.read == 3 and rep.quarantined == {"adapter_error": 1}
    line = json.loads((tmp_path / "fragile_quarantine.jsonl").read_text())
    assert line["index"] == 1 and line["reason"] == "adapter_error" and "KeyError" in line["detail"]
