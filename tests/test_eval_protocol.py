"""Evaluation protocols (issue 16 part 3, POINTS-Seeker §4.1, §4.3, App. B.3): benchmark filters apply
only under the protocol that names them, runs per benchmark follow its trials rule, and the
long-horizon hard subset (more than 10 rounds) is computed from a reference run, saved, loaded and
reported."""

from __future__ import annotations

import base64
import io
import json

import pytest
from conftest import MemoryBackend

from kit.eval.configs import EvalConfig, make_configs
from kit.eval.loaders import LoadResult
from kit.eval.protocols import (
    PROTOCOLS,
    EvalProtocol,
    ProtocolError,
    apply_filters,
    get_protocol,
    hard_subset,
    read_id_list,
    save_id_list,
)
from kit.eval.runner import load_benchmarks, run_evaluation, summary_rows
from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.policy.scripted import ScriptedPolicy


def answer(messages, tools):
    return "<response>Paris</response>"


def test_protocols_by_name_and_their_rules():
    assert sorted(PROTOCOLS) == ["points_seeker", "weagent_mmsearch"] and get_protocol().name == "weagent_mmsearch"
    ps, we = get_protocol("points_seeker"), get_protocol("weagent_mmsearch")
    assert (ps.trials(299, default=5), ps.trials(300, default=5), ps.trials(2, default=1)) == (3, 1, 3)  # App. B.3
    assert (we.trials(2, default=5), we.trials(5000, default=3)) == (5, 3)  # WeAgent: the run's own repeats
    assert ps.filters == {"mmsearch": ("image_containing",), "mmsearch_plus": ("single_image",), "simplevqa": ("english",)}
    assert we.filters == {} and ps.hard_min_rounds == 11 and we.hard_min_rounds is None
    assert set(ps.benchmarks) == {"mmsearch", "mmsearch_plus", "fvqa", "simplevqa", "livevqa", "browsecomp_vl"}
    with pytest.raises(ProtocolError, match="unknown evaluation protocol 'pointseeker'"):
        get_protocol("pointseeker")
    with pytest.raises(ValueError, match="unknown filter"):
        EvalProtocol(name="x", label="X", source="-", filters={"mmsearch": ("has_image",)})
    with pytest.raises(ValueError, match="trials_below must be >= 1"):
        EvalProtocol(name="x", label="X", source="-", trials_threshold=10, trials_below=0)
    cfgs = make_configs("smoke", ["direct", "harness"], protocol="points_seeker")
    assert {c.protocol for c in cfgs.values()} == {"points_seeker"} and cfgs["direct"].eval_protocol() is ps
    assert make_configs("smoke", ["direct"])["direct"].protocol == "weagent_mmsearch"
    with pytest.raises(ValueError, match="unknown evaluation protocol"):
        EvalConfig(name="d", label="D", harness=HarnessConfig(), protocol="points")
    with pytest.raises(ValueError, match="unknown evaluation protocol"):
        make_configs("smoke", ["direct"], protocol="points")


def _simplevqa_copy(root):
    datasets = pytest.importorskip("datasets")
    from conftest import png_bytes

    b64 = base64.b64encode(png_bytes()).decode()
    (root / "data").mkdir(parents=True)
    buf = io.BytesIO()
    datasets.Dataset.from_dict({"data_id": [0, 1, 2], "image": [b64] * 3, "question": ["What bird?", "这是什么鸟?", "Which city?"],
                                "answer": ["Robin", "麻雀", "Paris"], "language": ["EN", "CN", "EN"]}).to_parquet(buf)
    (root / "data" / "test-00000-of-00001.parquet").write_bytes(buf.getvalue())
    return root


async def test_points_seeker_filters_apply_only_under_its_protocol(tmp_path):
    local = {"simplevqa": str(_simplevqa_copy(tmp_path / "svqa"))}
    ps = (await load_benchmarks(["hub:simplevqa"], local_paths=local, protocol="points_seeker", image_dir=tmp_path / "i"))["simplevqa"]
    we = (await load_benchmarks(["hub:simplevqa"], local_paths=local, image_dir=tmp_path / "i"))["simplevqa"]
    assert [t.id for t in ps.tasks] == ["simplevqa_0", "simplevqa_2"]
    assert ps.filtered == {"points_seeker/english: language 'CN', not English": 1}
    assert ps.info["protocol"] == {"name": "points_seeker", "filters": ["english"]}
    assert [t.id for t in we.tasks] == ["simplevqa_0", "simplevqa_1", "simplevqa_2"] and not we.filtered
    assert we.info["protocol"] == {"name": "weagent_mmsearch", "filters": []}
    # the limit counts kept tasks: the filtered CN row does not use up a place
    two = (await load_benchmarks(["hub:simplevqa"], local_paths=local, protocol="points_seeker", limit=2,
                                 image_dir=tmp_path / "i"))["simplevqa"]
    assert [t.id for t in two.tasks] == ["simplevqa_0", "simplevqa_2"]


def test_a_filter_that_cannot_decide_is_a_problem_not_a_silent_drop():
    lr = LoadResult("simplevqa", tasks=[Task(id="a", question="q", answers=["x"], metadata={"language": "EN"}),
                                        Task(id="b", question="q", answers=["x"])])
    apply_filters(lr, "points_seeker")
    assert [t.id for t in lr.tasks] == ["a"] and not lr.filtered
    assert lr.problems[0]["id"] == "b" and "needs metadata['language']" in lr.problems[0]["reason"]


async def test_runs_per_benchmark_follow_the_protocol_and_protocols_must_match(tmp_path):
    def bench(n):
        lr = LoadResult("fvqa", tasks=[Task(id=f"t{i}", question="Capital of France?", answers=["Paris"]) for i in range(n)])
        return lr

    kw = dict(policy=ScriptedPolicy(answer), backend=MemoryBackend(), repeats=1, private_dir=tmp_path / "p")
    ps = apply_filters(bench(2), "points_seeker")
    oc = await run_evaluation({"fvqa": ps}, make_configs("smoke", ["direct"], protocol="points_seeker"),
                              out_dir=tmp_path / "ps", **kw)
    assert oc.trials == {("fvqa", "direct"): 3} and sorted({i.repeat for i in oc.items}) == [0, 1, 2]  # 2 < 300 tasks
    row = summary_rows({"fvqa": ps}, oc.items)[0]
    assert (row["protocol"], row["trials"], row["subset"], row["episodes"]) == ("points_seeker", 3, "full", 6)
    we = await run_evaluation({"fvqa": apply_filters(bench(2), "weagent_mmsearch")}, make_configs("smoke", ["direct"]),
                              out_dir=tmp_path / "we", **kw)
    assert we.trials == {("fvqa", "direct"): 1} and len(we.items) == 2  # the run's own repeats
    with pytest.raises(ProtocolError, match="loaded under protocol 'points_seeker' but configuration 'direct' runs"):
        await run_evaluation({"fvqa": ps}, make_configs("smoke", ["direct"]), out_dir=tmp_path / "x", **kw)


def _rec(tid: str, turns: int, sample: int = 0, *, synthesis: bool = False) -> EpisodeRecord:
    """An episode of ``turns`` tool-calling model turns (interaction rounds), then a tool-free synthesis turn
    (``synthesis``) or an answer turn; ``EpisodeRecord.turns`` counts every model turn, as the harness does."""
    from kit.types import Message, ToolCall

    msgs = [Message(role="user", content=[])]
    for i in range(turns):
        msgs += [Message(role="assistant", content=[], tool_calls=[ToolCall(id=f"c{i}", name="web_search",
                                                                             arguments='{"query": "x"}')]),
                 Message(role="tool", content=[], name="web_search", tool_call_id=f"c{i}")]
    if synthesis:
        msgs.append(Message(role="user", content=[], intervention=True))
    msgs.append(Message(role="assistant", content=[]))
    return EpisodeRecord(id=f"{tid}#{sample}", task=Task(id=tid, question="q", answers=["a"]), config_hash="h",
                         status="max_turns_synthesis" if synthesis else "answered", turns=turns + 1, messages=msgs)


def test_hard_subset_counts_interaction_rounds_not_the_synthesis_turn():
    """POINTS-Seeker §4.3: "over ten interaction rounds". An episode that ran out of a 10-turn budget and then
    answered in WeAgent's tool-free synthesis turn has 11 model turns but 10 rounds: not hard (it was)."""
    from kit.eval.protocols import interaction_rounds

    at_limit, over = _rec("a", 10, synthesis=True), _rec("b", 11, synthesis=True)
    assert (at_limit.turns, interaction_rounds(at_limit), interaction_rounds(over)) == (11, 10, 11)
    assert hard_subset([at_limit, over, _rec("c", 10)]) == ["b"]


def test_hard_subset_is_the_items_over_ten_rounds_of_a_reference_run(tmp_path):
    recs = [_rec("a", 10), _rec("b", 11), _rec("c", 3), _rec("c", 12, sample=1), _rec("d", 25)]
    assert hard_subset(recs) == ["b", "c", "d"]  # more than ten rounds; a task's longest sample counts
    assert hard_subset(recs, min_rounds=20) == ["d"]
    run = tmp_path / "ref" / "r0"
    run.mkdir(parents=True)
    (run / "episodes.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in recs))
    assert hard_subset(run) == hard_subset(run / "episodes.jsonl") == ["b", "c", "d"]
    with pytest.raises(ProtocolError, match="no episodes file"):
        hard_subset(tmp_path / "nowhere")
    with pytest.raises(ProtocolError, match="min_rounds must be >= 1"):
        hard_subset(recs, min_rounds=0)
    p = save_id_list(tmp_path / "hard.json", hard_subset(run), benchmark="fvqa", reference="ref/r0 (claude)", min_rounds=11)
    meta = read_id_list(p)
    assert meta["ids"] == ["b", "c", "d"] and meta["reference"] == "ref/r0 (claude)" and len(meta["sha256"]) == 64
    (tmp_path / "bad.json").write_text(json.dumps({"ids": [1, 2]}))
    with pytest.raises(ProtocolError, match="list of task ids"):
        read_id_list(tmp_path / "bad.json")


async def test_a_saved_id_list_restricts_a_benchmark_before_the_limit_and_is_reported(tmp_path, data_dir):
    full = (await load_benchmarks(["fvqa"], data_dir=data_dir, image_dir=tmp_path / "i"))["fvqa"]
    late = [t.id for t in full.tasks[-3:]]
    p = save_id_list(tmp_path / "hard.json", [*late, "fvqa_absent"], benchmark="fvqa", reference="ref/r0", min_rounds=11)
    lr = (await load_benchmarks(["fvqa"], data_dir=data_dir, limit=2, subset_ids={"fvqa": p},
                                image_dir=tmp_path / "i", protocol="points_seeker"))["fvqa"]
    assert [t.id for t in lr.tasks] == late[:2]  # the subset first, then the limit
    assert lr.filtered == {f"subset: not in {p}": len(full.tasks) - 3}
    assert [x["id"] for x in lr.problems] == ["fvqa_absent"]
    assert lr.info["id_subset"]["reference"] == "ref/r0" and lr.info["id_subset"]["ids"] == 4
    label = summary_rows({"fvqa": lr}, [])[0]["subset"]
    assert label == f"id list {p} (4 ids, >= 11 rounds, reference ref/r0)"
    with pytest.raises(ValueError, match="no spec names them"):
        await load_benchmarks(["fvqa"], data_dir=data_dir, subset_ids={"livevqa": p})
    other = (await load_benchmarks(["livevqa"], data_dir=data_dir, subset_ids={"livevqa": p}))["livevqa"]
    assert other.tasks == [] and "is for 'fvqa', not 'livevqa'" in other.problems[0]["reason"]


def test_a_hub_release_subset_name_is_not_read_as_an_id_list():
    """A hub release records its own ``subset`` (the release's config name, e.g. "end2end"); the id-list
    restriction has its own key, so the summary of a hub benchmark does not crash on the string."""
    from kit.eval.loaders import LoadResult

    lr = LoadResult("mmsearch", tasks=[])
    lr.info["subset"] = "end2end"
    assert summary_rows({"mmsearch": lr}, [])[0]["subset"] == "full"


def test_rounds_count_calls_written_in_text_as_the_harness_records_them():
    """The transformers policy, the demonstrator and endpoints without a tool parser write calls in the text
    (``tool_calls`` stays empty); a round is a model turn answered by a tool observation either way."""
    from kit.eval.protocols import interaction_rounds
    from kit.types import ContentPart, Message

    def t(role, text="", **kw):
        return Message(role=role, content=[ContentPart(type="text", text=text)], **kw)

    msgs = [t("system"), t("user", "q")]
    for _ in range(3):
        msgs += [t("assistant", '<tool_call>{"name": "web_search", "arguments": {"query": "x"}}</tool_call>'),
                 t("tool", "r1", name="web_search"), t("tool", "r2", name="web_search")]  # two calls, one round
    msgs += [t("assistant", "no action"), t("user", "format reminder", intervention=True), t("assistant", "<response>a</response>")]
    rec = EpisodeRecord(id="x#0", task=Task(id="x", question="q", answers=["a"]), config_hash="h", messages=msgs, turns=5)
    assert interaction_rounds(rec) == 3
