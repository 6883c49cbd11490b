"""Normalization is faithful to what happened (issue 14, part 4): labels come from the rule judge on
the trace's own answer, observations are what the model saw (or say what is missing), nothing is
invented, every published input shape is read, damaged files are quarantined with a reason."""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json

import pytest
from PIL import Image

from kit.data.normalize import MMSearchR1Adapter, normalize_rows, read_mmsearch_r1
from kit.eval.judges import RuleJudge

CASES = ("case_A_search_free.json", "case_B_image_search.json", "case_C_text_search.json")


@pytest.fixture(scope="module")
def shared(data_dir):
    t = data_dir / "trajectories" / "mmsearch_r1"
    rows = list(read_mmsearch_r1(t / "predictions_fvqa50.jsonl"))
    for c in CASES:
        rows += list(read_mmsearch_r1(t / c))
    return rows, data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images"


@pytest.fixture(scope="module")
def normalized(shared, tmp_path_factory):
    rows, imgs = shared
    return normalize_rows(MMSearchR1Adapter(imgs), rows, tmp_path_factory.mktemp("norm"))


def test_every_shared_trace_label_is_the_rule_judges_verdict(shared, normalized):
    rows, _ = shared
    recs, rep = normalized
    assert len(rows) == 53 and rep.kept == 53 and not rep.quarantined  # every trace judged, none dropped
    judge = RuleJudge("exact")
    for row, r in zip(rows, recs):
        tr = row["trace"]
        refs = [tr["ground_truth"]] + list(tr.get("candidate_answers") or [])
        verdict = judge.score(tr["final_answer"], refs).correct
        assert r.task.metadata["correct"] is verdict, r.id
        assert ("correct" if verdict else "incorrect") in r.labels
        assert judge.judge_task(r.task, r.final_response).correct is verdict  # re-judging agrees
        assert r.trainable == (verdict and r.status == "answered" and "input_image_missing" not in r.labels)
        assert r.task.metadata["source_fields"]["pass"] == row["pass"]  # kept for provenance only
    # the source's `pass` disagrees with the judge on real traces: it must not be the label
    assert any(row["pass"] and not r.task.metadata["correct"] for row, r in zip(rows, recs))


def test_references_are_deduplicated(shared, normalized):
    rows, _ = shared
    recs, _ = normalized
    pairs = [(row["trace"], r) for row, r in zip(rows, recs)]
    tr, r = next((tr, r) for tr, r in pairs if tr["ground_truth"] in tr["candidate_answers"])  # same answer twice
    assert r.task.answers[0] == tr["ground_truth"] and r.task.answers.count(tr["ground_truth"]) == 1
    from kit.data.normalize.base import dedupe_answers

    assert dedupe_answers("Ben Nevis", ["ben  nevis", "Beinn Nibheis", "Ben Nevis", 1345], '["1345", "Beinn Nibheis"]') \
        == ["Ben Nevis", "Beinn Nibheis", "1345"]
    for tr, r in pairs:
        assert len(r.task.answers) == len({a.casefold() for a in r.task.answers})


def test_hard_failure_gets_no_invented_observation(normalized):
    recs, _ = normalized
    failed = [r for r in recs if any(e.type == "tool_hard_failure" for e in r.events)]
    assert len(failed) == 11
    for r in failed:
        assert r.status == "error" and not r.trainable and r.error
        assert r.messages[-1].role == "assistant" and "<tool_call>" in r.messages[-1].text()
        assert not any('"error"' in m.text() for m in r.messages if m.role == "tool")
        n_tool = sum(m.role == "tool" for m in r.messages)
        assert n_tool == r.tool_calls - 1  # the failed call ran, but returned nothing to the model


def test_observations_say_what_is_reconstructed_or_missing(normalized):
    recs, _ = normalized
    img_rounds = [(r, e) for r in recs for e in r.events if e.type == "observation_images_missing"]
    assert img_rounds and all(e.detail["count"] > 0 and e.detail["images"][0]["url"] for _, e in img_rounds)
    for r in recs:
        n_tool = sum(m.role == "tool" for m in r.messages)
        assert sum(e.type == "observation_reconstructed" for e in r.events) == n_tool
        for e in r.events:
            if e.type == "observation_reconstructed":
                assert len(e.detail["returned_text_sha256"]) == 64
    missing = [r for r in recs if "input_image_missing" in r.labels]
    assert len(missing) == 13 and all(not r.messages[1].image_refs() and not r.trainable for r in missing)
    assert all(r.messages[1].image_refs() == ["user_image_1.png"] for r in recs if r not in missing)


def _png(color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (24, 16), color).save(buf, "PNG")
    return buf.getvalue()


def test_returned_text_verbatim_long_text_persisted_and_thumbnails_registered(shared, tmp_path):
    rows, imgs = shared
    row = copy.deepcopy(next(r for r in rows if r["trace"]["data_id"] == "fvqa_train_6"))  # case B: image search
    rnd = row["trace"]["rounds"][0]
    long_text = "Image search results. " + "x" * 20_000
    rnd["tool"]["returned_text"] = long_text
    rnd["tool"]["returned_text_sha256"] = hashlib.sha256(long_text.encode()).hexdigest()
    thumbs = tmp_path / "thumbs"
    thumbs.mkdir()
    first = rnd["tool"]["status"]["local_thumbnail_paths"][0]
    (thumbs / first.rsplit("/", 1)[-1]).write_bytes(_png())
    row["trace"]["image"] = {"bytes": base64.b64encode((imgs.parent / "images" / sorted(
        p.name for p in imgs.iterdir())[0]).read_bytes()).decode()}
    recs, rep = normalize_rows(MMSearchR1Adapter(imgs, thumbnail_dir=thumbs), [row], tmp_path / "out")
    r = recs[0]
    tool = next(m for m in r.messages if m.role == "tool")
    assert tool.text().startswith(long_text[:1500]) and "The full result is saved as tool_results/" in tool.text()
    ev = next(e for e in r.events if e.type == "result_persisted")
    assert ev.detail["chars"] == len(long_text)
    assert (tmp_path / "out" / "workspaces" / r.id / ev.detail["file"]).read_text() == long_text
    assert not any(e.type in ("observation_reconstructed", "observation_hash_mismatch") for e in r.events)
    assert tool.image_refs() == ["search_image_1.png"]
    reg = next(i for i in r.images if i.ref == "search_image_1")
    assert reg.source_url == rnd["tool"]["status"]["thumbnail_urls"][0] and reg.turn == 1
    miss = next(e for e in r.events if e.type == "observation_images_missing")
    assert miss.detail["count"] == len(rnd["tool"]["status"]["local_thumbnail_paths"]) - 1
    assert r.messages[1].image_refs() == ["user_image_1.png"]  # input image given as base64 bytes


@pytest.mark.parametrize("shape", ["path_string", "path_object", "url_object", "bytes_object", "b64_object"])
def test_input_image_shapes(shared, tmp_path, shape):
    rows, imgs = shared
    row = copy.deepcopy(rows[1])
    name = row["trace"]["image"]["path"].rsplit("/", 1)[-1]
    data = (imgs / name).read_bytes()
    row["trace"]["image"] = {"path_string": row["trace"]["image"]["path"],
                             "path_object": {"path": row["trace"]["image"]["path"]},
                             "url_object": {"url": f"https://example.org/fvqa/{name}?x=1"},
                             "bytes_object": {"bytes": data},
                             "b64_object": {"bytes": base64.b64encode(data).decode()}}[shape]
    recs, rep = normalize_rows(MMSearchR1Adapter(imgs), [row], tmp_path)
    assert rep.kept == 1 and recs[0].images[0].sha256 == hashlib.sha256(data).hexdigest()
    assert "input_image_missing" not in recs[0].labels


def test_file_shapes_and_damaged_files_are_quarantined(shared, tmp_path):
    rows, imgs = shared
    one = rows[1]
    (tmp_path / "list.json").write_text(json.dumps([one, rows[2]]))
    (tmp_path / "pretty.jsonl").write_text(json.dumps(one, indent=2))  # single case, wrong suffix
    (tmp_path / "lines.json").write_text(json.dumps(one) + "\n" + json.dumps(rows[2]) + "\n")
    (tmp_path / "truncated.json").write_text(json.dumps(one, indent=2)[:-40])
    (tmp_path / "latin1.jsonl").write_bytes(json.dumps(one).encode() + b"\n" + b'{"trace": "caf\xe9"}\n')
    assert [len(list(read_mmsearch_r1(tmp_path / f))) for f in ("list.json", "pretty.jsonl", "lines.json")] == [2, 1, 2]
    bad_types = [{"trace": {**one["trace"], "rounds": "three"}},
                 {"trace": {**one["trace"], "question": 42}},
                 {"trace": {**one["trace"], "hard_failures": {"round": 1}}},
                 {"trace": {**one["trace"], "candidate_answers": [{"a": 1}]}},
                 {"trace": {**one["trace"], "image": 7}}]
    rows_in = (list(read_mmsearch_r1(tmp_path / "truncated.json")) + list(read_mmsearch_r1(tmp_path / "latin1.jsonl"))
               + bad_types)
    recs, rep = normalize_rows(MMSearchR1Adapter(imgs), rows_in, tmp_path / "out")
    assert rep.kept == 1 and rep.quarantined == {"unparsable_json": 1, "bad_encoding": 1, "missing_rounds": 1,
                                                  "bad_type": 4}
    q = [json.loads(x) for x in (tmp_path / "out" / "mmsearch_r1_quarantine.jsonl").read_text().splitlines()]
    assert all(x["reason"] and x["reason"] != "adapter_error" for x in q)


def test_chat_adapters_label_by_judge_and_persist_long_observations(tmp_path):
    """Metis / OpenSearch-VL / REDSearcher rows: the label is the judge's verdict on the row's own
    final answer (a wrong answer is not trainable), a long observation is persisted, and an
    observation without a call is kept and marked, not attributed silently."""
    from kit.data.normalize import METIS, OPENSEARCH_VL, REDSEARCHER, ChatAdapter

    def row(i, final, obs="Golden Gate Bridge - Wikipedia", answer="Golden Gate Bridge"):
        msgs = [{"role": "user", "content": "Which bridge is in San Francisco?"},
                {"role": "assistant", "content": '<think>Search.</think><tool_call>{"name": "web_search", '
                                                 '"arguments": {"query": "bridge"}}</tool_call>'},
                {"role": "tool", "content": obs},
                {"role": "assistant", "content": f"<think>Known.</think><answer>{final}</answer>"}]
        return {"id": i, "messages": msgs, "images": [], "answer": answer}

    for spec in (METIS, OPENSEARCH_VL, REDSEARCHER):
        long_obs = "Golden Gate " * 2000
        stray = row(4, "Golden Gate Bridge")
        stray["messages"].insert(1, {"role": "tool", "content": "an observation nobody asked for"})
        recs, rep = normalize_rows(ChatAdapter(spec), [row(1, "Golden Gate Bridge"), row(2, "Bay Bridge"),
                                                       row(3, "the Golden Gate Bridge", long_obs), stray,
                                                       row(5, "Golden Gate Bridge", answer=None)],
                                   tmp_path / spec.name)
        ok, wrong, persisted, marked, unjudged = recs
        assert ok.task.metadata["correct"] is True and "correct" in ok.labels and ok.trainable
        assert wrong.task.metadata["correct"] is False and "incorrect" in wrong.labels and not wrong.trainable
        tool = next(m for m in persisted.messages if m.role == "tool")
        assert len(tool.text()) < 2000 and "full result is saved as tool_results/" in tool.text()
        assert any(e.type == "result_persisted" and e.detail["chars"] == len(long_obs) for e in persisted.events)
        assert any(e.type == "observation_without_call" for e in marked.events)
        assert unjudged.task.metadata["correct"] is None and "unjudged" in unjudged.labels and unjudged.trainable
