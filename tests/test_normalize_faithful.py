"""Normalization is faithful to what happened (issue 14, part 4): labels come from the rule judge on
the trace's own answer, observations are what the model saw (or say what is missing), nothing is
invented, every published input shape is read, damaged files are quarantined with a reason."""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import shutil
from pathlib import Path

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
        assert r.trainable == (verdict and r.status == "answered" and "input_image_missing" not in r.labels
                               and "observation_images_missing" not in r.labels)  # issue 27: thumbnails seen
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
    for _tr, r in pairs:
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
    assert (Path(r.workspace) / ev.detail["file"]).read_text() == long_text
    assert Path(r.workspace).parent == tmp_path / "out" / "workspaces"
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
        assert unjudged.task.metadata["correct"] is None and "unjudged" in unjudged.labels and not unjudged.trainable


# ------------------------------------------------------------------ review findings (issue 14 part 4)
def _q(out, source="mmsearch_r1"):
    return [json.loads(x) for x in (out / f"{source}_quarantine.jsonl").read_text().splitlines()]


def test_damaged_lines_never_lose_the_good_rows(shared, tmp_path):
    """A damaged first line, a line nested 100k deep, concatenated pretty objects, empty files:
    every good row is read, every damaged part is one quarantine line with its place and the id."""
    rows, imgs = shared
    a, b = json.dumps(rows[1]).encode(), json.dumps(rows[2]).encode()
    deep = b"[" * 100_000 + b"]" * 100_000
    pretty = json.dumps(rows[1], indent=2).encode()
    files = {"cut_first.jsonl": a[:100] + b"\n" + a + b"\n" + b + b"\n",
             "deep_between.jsonl": a + b"\n" + deep + b"\n" + b + b"\n",
             "deep_only.json": deep,
             "concat.json": pretty + b"\n" + json.dumps(rows[2], indent=2).encode() + b"\n",
             "pretty_then_cut.json": pretty + b"\n" + pretty[:-300],
             "empty.jsonl": b"", "blank.jsonl": b"\n \n\t\n", "nothing.json": b"[]"}
    got = {}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        got[name] = list(read_mmsearch_r1(tmp_path / name))  # never raises on content
    assert {k: len(v) for k, v in got.items()} == {"cut_first.jsonl": 3, "deep_between.jsonl": 3, "deep_only.json": 1,
                                                   "concat.json": 2, "pretty_then_cut.json": 2, "empty.jsonl": 1,
                                                   "blank.jsonl": 1, "nothing.json": 1}
    recs, rep = normalize_rows(MMSearchR1Adapter(imgs), [r for v in got.values() for r in v], tmp_path / "out")
    assert rep.read == 14 and rep.kept == 7
    assert rep.quarantined == {"unparsable_json": 4, "empty_file": 3}
    q = _q(tmp_path / "out")
    assert any("line 1" in x["detail"] and "cut_first.jsonl" in x["detail"] for x in q)
    assert any("line 2" in x["detail"] and "deep_between.jsonl" in x["detail"] for x in q)
    # a row the adapter rejects carries the trace's data_id in its quarantine line
    recs, rep = normalize_rows(MMSearchR1Adapter(imgs), [{"trace": {**rows[1]["trace"], "rounds": "x"}}],
                               tmp_path / "out2")
    assert _q(tmp_path / "out2")[0]["id"] == rows[1]["trace"]["data_id"]


def _hard_row(shared):
    rows, _ = shared
    return copy.deepcopy(next(r for r in rows if r["trace"]["data_id"] == "fvqa_train_4724"))  # round 2 failed


@pytest.mark.parametrize("variant", ["round_str", "round_null", "no_hard_failures"])
def test_failed_call_never_gets_a_rendered_observation(shared, tmp_path, variant):
    row = _hard_row(shared)
    tr = row["trace"]
    assert tr["terminal_status"] == "text_search_hard_failure" and tr["hard_failures"][0]["round"] == 2
    if variant == "round_str":
        tr["hard_failures"][0]["round"] = "2"
    elif variant == "round_null":
        tr["hard_failures"][0]["round"] = None
    else:
        tr["hard_failures"] = []
    recs, rep = normalize_rows(MMSearchR1Adapter(shared[1]), [row], tmp_path)
    r = recs[0]
    tools = [m for m in r.messages if m.role == "tool"]
    assert [m.turn for m in tools] == [1]  # round 1's image search only; round 2 returned nothing to the model
    types = [e.type for e in r.events]
    assert "observation_reconstructed" not in [e.type for e in r.events if e.turn == 2]
    assert ("tool_hard_failure" if variant == "round_str" else "observation_missing") in types
    assert r.status == "error" and not r.trainable and r.tool_calls == 2


def test_round_without_tool_data_is_missing_not_made_up(shared, tmp_path):
    rows, imgs = shared
    row = copy.deepcopy(next(r for r in rows if [x["action"] for x in r["trace"]["rounds"]]
                             == ["image_search", "text_search", "answer"] and r["trace"]["terminal_status"] == "answered"))
    row["trace"]["rounds"][0].pop("tool")
    row["trace"]["rounds"][1]["tool"] = {"status": {}}
    recs, _ = normalize_rows(MMSearchR1Adapter(imgs), [row], tmp_path)
    r = recs[0]
    assert not [m for m in r.messages if m.role == "tool"]
    assert not any("No results." in m.text() or "results: none" in m.text() for m in r.messages)
    miss = [e for e in r.events if e.type == "observation_missing"]
    assert [e.turn for e in miss] == [1, 2] and "observation_missing" in r.labels and not r.trainable
    assert r.tool_calls == 2


def test_workspace_folder_is_safe_whatever_the_id(shared, tmp_path):
    from kit.data.normalize import METIS, ChatAdapter

    rows, imgs = shared
    row = copy.deepcopy(rows[1])
    evil = "../../../../../" + str(tmp_path / "PWNED").lstrip("/")
    row["trace"]["data_id"] = evil
    recs, _ = normalize_rows(MMSearchR1Adapter(imgs), [row], tmp_path / "out")
    r = recs[0]
    assert r.task.metadata["data_id"] == evil and evil in r.id  # the id as given
    ws = (tmp_path / "out" / "workspaces").resolve()
    assert Path(r.workspace).resolve().parent == ws and (Path(r.workspace) / "user_image_1.png").is_file()
    chat = {"id": evil, "messages": [{"role": "user", "content": "<image>Where?"},
                                     {"role": "assistant", "content": "<answer>Paris</answer>"}],
            "images": [base64.b64encode(_png()).decode()], "answer": "Paris"}
    recs, _ = normalize_rows(ChatAdapter(METIS), [chat], tmp_path / "out")
    assert Path(recs[0].workspace).resolve().parent == ws and evil in recs[0].id
    assert not (tmp_path / "PWNED").exists()


def test_input_image_checked_against_its_hash(shared, tmp_path):
    rows, imgs = shared
    row = copy.deepcopy(rows[1])
    name = row["trace"]["image"]["path"].rsplit("/", 1)[-1]
    other = next(p for p in sorted(imgs.iterdir()) if p.name != name)
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / name).write_bytes(other.read_bytes())  # a different picture under the same name
    recs, _ = normalize_rows(MMSearchR1Adapter(tmp_path / "imgs"), [row], tmp_path / "out")
    r = recs[0]
    ev = next(e for e in r.events if e.type == "input_image_mismatch")
    assert ev.detail["expected_sha256"] == row["trace"]["image"]["png_sha256"]
    assert "input_image_mismatch" in r.labels and not r.trainable


def _answer_row(shared):
    rows, _ = shared
    return copy.deepcopy(next(r for r in rows if r["trace"]["final_answer"] == "Tagus River"))


def test_several_answers_last_wins_and_later_rounds_are_events(shared, tmp_path):
    rows, imgs = shared
    two = _answer_row(shared)
    two["trace"]["rounds"][-1]["response"] = "<reason>x</reason><answer>Ebro</answer><answer>Tagus River</answer>"
    after = _answer_row(shared)
    extra = copy.deepcopy(after["trace"]["rounds"][-1])
    extra["response"] = "<reason>y</reason><answer>Ebro</answer>"
    after["trace"]["rounds"].append(extra)
    lst = _answer_row(shared)
    lst["trace"]["rounds"][-1].update(response="<reason>x</reason>", parsed_payload=["Tagus River"])
    disagree = _answer_row(shared)
    disagree["trace"]["final_answer"] = "Ebro"
    recs, rep = normalize_rows(MMSearchR1Adapter(imgs), [two, after, lst, disagree], tmp_path)
    r_two, r_after, r_lst, r_dis = recs
    assert r_two.final_response == "Tagus River" and r_two.task.metadata["correct"] is True
    assert any(e.type == "multiple_responses" and e.detail["count"] == 2 for e in r_two.events)
    assert r_after.final_response == "Tagus River"
    assert any(e.type == "rounds_after_answer" and e.detail["count"] == 1 for e in r_after.events)
    assert r_lst.final_response == "Tagus River"
    ev = next(e for e in r_dis.events if e.type == "final_answer_mismatch")
    assert ev.detail["final_answer"] == "Ebro" and r_dis.final_response == "Tagus River"


def test_more_input_image_shapes(shared, tmp_path):
    """A data URL given as a plain string, base64 with line breaks."""
    rows, imgs = shared
    base = rows[1]
    name = base["trace"]["image"]["path"].rsplit("/", 1)[-1]
    data = (imgs / name).read_bytes()
    out = []
    for img in ("data:image/png;base64," + base64.b64encode(data).decode(), {"bytes": base64.encodebytes(data).decode()}):
        row = copy.deepcopy(base)
        row["trace"]["image"] = img
        out.append(row)
    recs, rep = normalize_rows(MMSearchR1Adapter(tmp_path / "nothing"), out, tmp_path / "out")
    assert rep.kept == 2 and all(r.images and r.images[0].sha256 == hashlib.sha256(data).hexdigest() for r in recs)


def _chat(msgs, **kw):
    return {"id": kw.pop("id", 1), "messages": msgs, "images": kw.pop("images", []), **kw}


_Q = {"role": "user", "content": "Which city is the capital of France?"}
_CALLM = {"role": "assistant", "content": '<think>s</think><tool_call>{"name": "web_search", "arguments": {"query": "capital"}}</tool_call>'}  # noqa: E501


def test_chat_reference_fields_and_unjudged_not_trainable(tmp_path):
    from kit.data.normalize import METIS, ChatAdapter

    ans = {"role": "assistant", "content": "<answer>Lyon</answer>"}
    rows = [_chat([_Q, ans], id=k, **{k: "Paris"}) for k in ("ground_truth", "label", "solution", "answer")]
    rows.append(_chat([_Q, ans], id="none"))
    recs, _ = normalize_rows(ChatAdapter(METIS), rows, tmp_path)
    assert [r.task.metadata["correct"] for r in recs] == [False, False, False, False, None]
    assert all(r.task.answers == ["Paris"] for r in recs[:4]) and not any(r.trainable for r in recs)
    assert "unjudged" in recs[-1].labels


def test_chat_call_without_result_and_orphan_response_are_events(tmp_path):
    from kit.data.normalize import METIS, ChatAdapter

    ans = {"role": "assistant", "content": "<answer>Paris</answer><answer>Paris, France</answer>"}
    no_result = _chat([_Q, _CALLM, {"role": "assistant", "content": "<answer>Paris</answer>"}], answer="Paris")
    orphan = _chat([_Q, {"role": "user", "content": "<tool_response>orphan</tool_response>"},
                    {"role": "assistant", "content": "<answer>Paris</answer>"}], id=2, answer="Paris")
    several = _chat([_Q, ans], id=3, answer="Paris")
    recs, _ = normalize_rows(ChatAdapter(METIS), [no_result, orphan, several], tmp_path)
    r1, r2, r3 = recs
    assert r1.tool_calls == 1 and any(e.type == "observation_missing" and e.turn == 1 for e in r1.events)
    assert not r1.trainable and "observation_missing" in r1.labels
    assert any(e.type == "observation_without_call" for e in r2.events) and not r2.trainable
    assert [m.role for m in r2.messages] == ["user", "tool", "assistant"]
    assert r3.final_response == "Paris, France" and any(e.type == "multiple_responses" for e in r3.events)


def test_chat_image_shapes(tmp_path):
    """``{"url"}`` images (data URL or local file), a string images column, base64 with line breaks."""
    from kit.data.normalize import METIS, ChatAdapter

    png = _png()
    (tmp_path / "a.png").write_bytes(png)
    msgs = [{"role": "user", "content": "<image>Where?"}, {"role": "assistant", "content": "<answer>Paris</answer>"}]
    rows = [_chat(msgs, id=1, images=[{"url": "data:image/png;base64," + base64.b64encode(png).decode()}]),
            _chat(msgs, id=2, images=[{"url": str(tmp_path / "a.png")}]),
            _chat(msgs, id=3, images=base64.b64encode(png).decode()),
            _chat(msgs, id=4, images=[base64.encodebytes(png).decode()]),
            _chat(msgs, id=5, images=[{"url": "https://example.org/a.png"}])]
    recs, rep = normalize_rows(ChatAdapter(METIS), rows, tmp_path / "out")
    assert rep.kept == 4 and all(r.images[0].sha256 == hashlib.sha256(png).hexdigest() for r in recs)
    assert rep.quarantined == {"image_missing": 1}


def test_unverifiable_observation_is_not_trainable_and_stray_results_are_events(shared, tmp_path):
    rows, imgs = shared
    thumbs = tmp_path / "thumbs"  # the thumbnails the model saw, supplied (issue 27: else never trainable)
    thumbs.mkdir()
    for row in rows:
        for rnd in row["trace"]["rounds"]:
            st = (rnd.get("tool") or {}).get("status") or {}
            for p, u in zip(st.get("local_thumbnail_paths") or [], st.get("thumbnail_urls") or []):
                (thumbs / (p or u.split("?", 1)[0]).rsplit("/", 1)[-1]).write_bytes(_png())
    good, _ = normalize_rows(MMSearchR1Adapter(imgs, thumbnail_dir=thumbs), rows, tmp_path / "all")
    src = next(row for row, r in zip(rows, good) if r.trainable and r.tool_calls)  # a correct trace with a search
    row = copy.deepcopy(src)
    rnd = row["trace"]["rounds"][0]
    rnd["tool"]["returned_text"] = "not what the model read"  # disagrees with returned_text_sha256
    stray = copy.deepcopy(src)
    stray["trace"]["rounds"][-1]["tool"] = copy.deepcopy(src["trace"]["rounds"][0]["tool"])
    recs, _ = normalize_rows(MMSearchR1Adapter(imgs, thumbnail_dir=thumbs), [src, row, stray], tmp_path)
    ok, bad, st = recs
    assert ok.trainable and not bad.trainable and "observation_hash_mismatch" in bad.labels
    assert any(e.type == "observation_without_call" for e in st.events) and st.trainable


def test_normalizing_never_writes_through_to_the_source_images(shared, tmp_path):
    """Workspace images are copies: re-normalizing into the same workspace with other bytes (or any
    write to the workspace file) leaves the source dataset untouched. (Hard links let one such rerun
    overwrite a shared benchmark image.)"""
    rows, imgs = shared
    src_dir = tmp_path / "imgs"
    shutil.copytree(imgs, src_dir)
    row = copy.deepcopy(rows[1])
    name = row["trace"]["image"]["path"].rsplit("/", 1)[-1]
    before = (src_dir / name).read_bytes()
    recs, _ = normalize_rows(MMSearchR1Adapter(src_dir), [row], tmp_path / "out")
    ws_img = Path(recs[0].workspace) / "user_image_1.png"
    assert ws_img.stat().st_ino != (src_dir / name).stat().st_ino
    other = copy.deepcopy(row)
    other["trace"]["image"] = {"bytes": base64.b64encode(_png()).decode()}
    normalize_rows(MMSearchR1Adapter(src_dir), [other], tmp_path / "out")  # same workspace, other bytes
    ws_img.write_bytes(b"changed by code run in the workspace")
    assert (src_dir / name).read_bytes() == before
