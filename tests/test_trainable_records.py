"""Issue 27 part 2 and part 6 ("trainable implies encodable"): a trainable normalized record holds every
observation and image the model saw, and encodes. Each rule on the shared MMSearch-R1 traces and on
traces written in each file layout the normalizer reads (JSON lines, one case, a list, pretty cases)."""

from __future__ import annotations

import copy
import hashlib
import io
import json

import pytest
from PIL import Image

from kit.data.normalize import METIS, ChatAdapter, MMSearchR1Adapter, normalize_rows, read_mmsearch_r1
from kit.data.normalize.trainable import VISION_PLACEHOLDER, verify_rebuilt

CASES = ("case_A_search_free.json", "case_B_image_search.json", "case_C_text_search.json")
LAYOUTS = ("jsonl", "case_json", "list_json", "pretty_cases")


@pytest.fixture(scope="module")
def shared(data_dir):
    t = data_dir / "trajectories" / "mmsearch_r1"
    rows = list(read_mmsearch_r1(t / "predictions_fvqa50.jsonl"))
    for c in CASES:
        rows += list(read_mmsearch_r1(t / c))
    return rows, data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images"


def _png(color=(20, 120, 200)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (28, 28), color).save(buf, "PNG")
    return buf.getvalue()


def _thumbs(rows, folder):
    folder.mkdir(exist_ok=True)
    for row in rows:
        for rnd in row["trace"]["rounds"]:
            st = (rnd.get("tool") or {}).get("status") or {}
            for p, u in zip(st.get("local_thumbnail_paths") or [], st.get("thumbnail_urls") or []):
                (folder / (p or u.split("?", 1)[0]).rsplit("/", 1)[-1]).write_bytes(_png())
    return folder


def _written(rows, layout, tmp_path):
    """``rows`` written in one published layout and read back through the normalizer's reader."""
    f = tmp_path / f"traces.{ 'jsonl' if layout == 'jsonl' else 'json'}"
    if layout == "jsonl":
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif layout == "case_json":
        assert len(rows) == 1
        f.write_text(json.dumps(rows[0], indent=2))
    elif layout == "list_json":
        f.write_text(json.dumps(rows))
    else:
        f.write_text("\n".join(json.dumps(r, indent=2) for r in rows))
    return list(read_mmsearch_r1(f))


def _correct_with_search(shared, action):
    rows, _ = shared
    return next(r for r in rows if r["trace"]["final_answer"] == r["trace"]["ground_truth"]
                and any(x.get("action") == action and x.get("tool") for x in r["trace"]["rounds"])
                and not r["trace"].get("hard_failures"))


# ------------------------------------------------------------------ rebuilt observations: hash or length
def test_shared_rebuilt_observations_match_the_traces_own_hash(shared, tmp_path):
    rows, imgs = shared
    recs, _ = normalize_rows(MMSearchR1Adapter(imgs), rows, tmp_path)
    rebuilt = [e for r in recs for e in r.events if e.type == "observation_reconstructed"]
    assert len(rebuilt) == 61 and all(e.detail["verified"] == "sha256" for e in rebuilt)
    assert all(e.detail["rendered_characters"] == e.detail["returned_text_characters"] for e in rebuilt)
    assert not any(e.type == "observation_hash_mismatch" for r in recs for e in r.events)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rebuilt_observation_off_the_hash_is_kept_untrainable_with_an_event(shared, tmp_path, layout):
    _, imgs = shared
    src = _correct_with_search(shared, "text_search")
    off = copy.deepcopy(src)  # a status that no longer renders to what the model read
    rnd = next(x for x in off["trace"]["rounds"] if x.get("action") == "text_search")
    rnd["tool"]["status"]["summaries"] = rnd["tool"]["status"]["summaries"][:1]
    by_len = copy.deepcopy(src)  # a trace that stores only the length: the length decides
    for x in by_len["trace"]["rounds"]:
        if x.get("tool"):
            x["tool"].pop("returned_text_sha256")
    short = copy.deepcopy(by_len)
    next(x for x in short["trace"]["rounds"] if x.get("tool"))["tool"]["returned_text_characters"] += 1
    rows = _written([src, off, by_len, short] if layout != "case_json" else [off], layout, tmp_path)
    ad = MMSearchR1Adapter(imgs, thumbnail_dir=_thumbs([src], tmp_path / "thumbs"))
    recs, rep = normalize_rows(ad, rows, tmp_path / "out")
    assert rep.kept == len(rows)
    by_id = dict(zip(["src", "off", "by_len", "short"] if layout != "case_json" else ["off"], recs))
    bad = by_id["off"]
    ev = next(e for e in bad.events if e.type == "observation_hash_mismatch")
    assert ev.detail["reconstructed"] and ev.detail["rendered_characters"] < ev.detail["returned_text_characters"]
    assert not bad.trainable and "observation_hash_mismatch" in bad.labels and bad.task.metadata["correct"]
    if layout != "case_json":
        assert by_id["src"].trainable and by_id["by_len"].trainable
        assert {e.detail["verified"] for e in by_id["by_len"].events if e.type == "observation_reconstructed"} \
            == {"characters"}
        assert not by_id["short"].trainable and "observation_hash_mismatch" in by_id["short"].labels
    assert verify_rebuilt("abc", None, None)[0] is None  # nothing to check against: never assumed


# ------------------------------------------------------------------ images the model saw
def test_shared_traces_missing_thumbnails_are_never_trainable(shared, tmp_path):
    rows, imgs = shared
    recs, _ = normalize_rows(MMSearchR1Adapter(imgs), rows, tmp_path / "a")
    missing = [r for r in recs if "observation_images_missing" in r.labels]
    assert len(missing) == 37 and not any(r.trainable for r in missing)
    assert sum(r.trainable for r in recs) == 3  # search-free, correct, input image present
    supplied, _ = normalize_rows(MMSearchR1Adapter(imgs, thumbnail_dir=_thumbs(rows, tmp_path / "t")), rows, tmp_path / "b")
    assert sum(r.trainable for r in supplied) == 15
    assert not any("observation_images_missing" in r.labels for r in supplied)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_thumbnails_stand_where_the_model_saw_them(shared, tmp_path, layout):
    _, imgs = shared
    src = _correct_with_search(shared, "image_search")
    rows = _written([src] if layout == "case_json" else [src, src], layout, tmp_path)
    bare, _ = normalize_rows(MMSearchR1Adapter(imgs), rows, tmp_path / "bare")
    assert not bare[0].trainable and "observation_images_missing" in bare[0].labels
    tool = next(m for m in bare[0].messages if m.role == "tool")
    assert VISION_PLACEHOLDER not in tool.text() and "[image not available]" in tool.text()
    recs, _ = normalize_rows(MMSearchR1Adapter(imgs, thumbnail_dir=_thumbs([src], tmp_path / "th")), rows, tmp_path / "o")
    r = recs[0]
    tool = next(m for m in r.messages if m.role == "tool")
    n = len(next(x for x in src["trace"]["rounds"] if x.get("action") == "image_search")["tool"]["status"]["titles"])
    assert r.trainable and tool.image_refs() == [f"search_image_{i}.png" for i in range(1, n + 1)]
    kinds = [p.type for p in tool.content]
    assert kinds[:3] == ["text", "image", "text"]  # "1. image: " <thumbnail> "\ntitle: …"
    assert "".join(p.text if p.type == "text" else VISION_PLACEHOLDER for p in tool.content) \
        .startswith("[Image Search Results]")


# ------------------------------------------------------------------ persisted previews
@pytest.mark.parametrize("layout", LAYOUTS)
def test_persisted_preview_names_no_tool_the_record_lacks_and_is_not_trainable(shared, tmp_path, layout):
    _, imgs = shared
    src = _correct_with_search(shared, "text_search")
    row = copy.deepcopy(src)
    rnd = next(x for x in row["trace"]["rounds"] if x.get("action") == "text_search")
    long_text = "Search results. " + "evidence " * 3000
    rnd["tool"]["returned_text"] = long_text
    rnd["tool"]["returned_text_sha256"] = hashlib.sha256(long_text.encode()).hexdigest()
    rows = _written([row] if layout == "case_json" else [row, src], layout, tmp_path)
    recs, _ = normalize_rows(MMSearchR1Adapter(imgs, thumbnail_dir=_thumbs([src], tmp_path / "th")), rows, tmp_path / "o")
    r = recs[0]
    tool = next(m for m in r.messages if m.role == "tool" and m.name == "MMR1_text_search")
    assert "The full result is saved as tool_results/" in tool.text() and "execute_code" not in tool.text()
    assert not r.trainable and "observation_truncated" in r.labels
    ev = next(e for e in r.events if e.type == "result_persisted")
    assert ev.detail["seen_by_model"] == "the full text"
    if layout != "case_json":
        assert recs[1].trainable


def test_chat_persisted_preview_names_only_the_sources_own_reader(tmp_path):
    big = "y" * 20_000

    def row(i, tool):
        return {"id": i, "answer": "Paris", "messages": [
            {"role": "user", "content": "Where is the Eiffel Tower?"},
            {"role": "assistant", "content": f'<think>look</think><tool_call>{{"name": "{tool}", "arguments": {{"q": "x"}}}}</tool_call>'},
            {"role": "tool", "content": big},
            {"role": "assistant", "content": "<think>ok</think><answer>Paris</answer>"}]}

    recs, _ = normalize_rows(ChatAdapter(METIS), [row(1, "search")], tmp_path / "a")
    tool = next(m for m in recs[0].messages if m.role == "tool")
    assert "execute_code" not in tool.text() and not recs[0].trainable and "observation_truncated" in recs[0].labels
    ad = ChatAdapter(METIS)
    recs, _ = normalize_rows(ad, [row(2, "execute_code"), row(3, "search")], tmp_path / "b")
    assert all("read it with METIS_execute_code" in next(m for m in r.messages if m.role == "tool").text() for r in recs)


# ------------------------------------------------------------------ trainable implies encodable
@pytest.fixture(scope="module")
def encoder_for():
    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.sft_data import SFTEncoder

    proc = load_image_only_processor(build_tiny_checkpoint("qwen2_5_vl", vocab="local"))
    return lambda ad: SFTEncoder(proc, tools=ad.tool_schemas())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_literal_image_placeholder_in_the_final_turn_is_not_trainable(shared, tmp_path, layout, encoder_for):
    from kit.data.normalize import token_filter

    rows, imgs = shared
    src = next(r for r in rows if r["trace"]["final_answer"] == r["trace"]["ground_truth"]
               and len(r["trace"]["rounds"]) == 1 and r["trace"]["image"])
    bad = []
    for ph in ("<image>", VISION_PLACEHOLDER):
        b = copy.deepcopy(src)
        ans = b["trace"]["rounds"][0]
        assert "</reason>" in ans["response"]
        ans["response"] = ans["response"].replace("</reason>", f" the picture {ph} shows it</reason>")
        bad.append(b)
    rows_in = _written(bad[:1] if layout == "case_json" else [src] + bad, layout, tmp_path)
    ad = MMSearchR1Adapter(imgs)
    recs, _ = normalize_rows(ad, rows_in, tmp_path / "o")
    for r in recs[-len(bad[:1] if layout == "case_json" else bad):]:
        assert r.task.metadata["correct"] and not r.trainable and "literal_image_placeholder" in r.labels
    kept, counts = token_filter(recs, encoder_for(ad))
    assert counts["kept"] == sum(r.trainable for r in recs) and not counts["skipped"].get("template_error")
    enc = encoder_for(ad)
    from kit.train.sft_data import SFTDataError

    for r in recs[-1:]:  # the encoder itself refuses it, by the same rule
        with pytest.raises(SFTDataError):
            enc.encode(r.model_copy(update={"trainable": True}))


def test_every_trainable_shared_record_encodes(shared, tmp_path, encoder_for):
    from kit.data.normalize import token_filter

    rows, imgs = shared
    ad = MMSearchR1Adapter(imgs, thumbnail_dir=_thumbs(rows, tmp_path / "th"))
    recs, _ = normalize_rows(ad, rows, tmp_path / "o")
    kept, counts = token_filter(recs, encoder_for(ad))
    assert counts["kept"] == sum(r.trainable for r in recs) == 15 and set(counts["skipped"]) == {"not_trainable"}


# ------------------------------------------------------------------ no answer key, never correct
@pytest.mark.parametrize("layout", LAYOUTS)
def test_record_without_an_answer_key_is_never_labelled_correct(shared, tmp_path, layout):
    rows, imgs = shared
    row = copy.deepcopy(next(r for r in rows if r["trace"]["final_answer"] == r["trace"]["ground_truth"]))
    row["trace"]["ground_truth"], row["trace"]["candidate_answers"] = None, []
    row["pass"] = True
    recs, _ = normalize_rows(MMSearchR1Adapter(imgs), _written([row], layout, tmp_path), tmp_path / "o")
    r = recs[0]
    assert r.task.metadata["correct"] is None and "unjudged" in r.labels and "correct" not in r.labels
    assert not r.trainable
