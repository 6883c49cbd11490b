"""Configurations (empty tool list, no re-feed, text-only observations), the evaluation runner
(judging, VisTarget metrics, sensitive benchmarks, resume after a crash) and bad inputs."""

from __future__ import annotations

import json
import re
import shutil

import httpx
import pytest
from conftest import MemoryBackend, png_bytes

from kit.eval.configs import TextOnlyContextBuilder, make_configs
from kit.eval.judges import LLMJudge, RuleJudge
from kit.eval.loaders import LoadResult, sha256_text
from kit.eval.runner import load_benchmarks, read_predictions, redact, run_evaluation, summary_rows
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.policy.openai_client import OpenAIChatPolicy
from kit.policy.scripted import CharTokenCounter, ScriptedPolicy

SEARCH_IMG = '<tool_call>{"name": "web_search_for_image", "arguments": {"query": "eiffel", "num": 2}}</tool_call>'


def cite_first_image(messages, tools):
    """Search images when tools exist, then answer citing the first image found."""
    obs = [m.text() for m in messages if m.role == "tool"]
    if tools and not obs:
        return SEARCH_IMG
    names = [n for o in obs for n in re.findall(r"search_image_\d+\.\w+", o)]
    return "<response>The Eiffel Tower" + (f" <IMG: {names[0]}>" if names else "") + "</response>"


# ------------------------------------------------------------------------------------------ configurations
def test_make_configs():
    c = make_configs("smoke")
    assert list(c) == ["direct", "harness", "no_refeed", "text_only"]
    assert c["direct"].harness.tools_enabled == [] and len(c["harness"].harness.tools_enabled) == 5
    assert c["no_refeed"].harness.refeed_images is False and c["text_only"].text_only
    assert c["harness"].harness.max_turns == 5 and make_configs("paper")["harness"].harness.max_turns == 20
    # a named real model evaluated under smoke budgets keeps Table 5's response length (not the tiny model's 96)
    real = make_configs("smoke", real_model=True)
    assert c["harness"].harness.max_response_tokens == 96
    assert all(x.harness.max_response_tokens == 4096 and x.harness.max_turns == 5 for x in real.values())
    with pytest.raises(ValueError):
        make_configs("smoke", ["hermes"])
    with pytest.raises(ValueError):
        make_configs("fast")


async def test_direct_answer_with_empty_tool_list(tmp_path, memory_backend):
    cfg = make_configs("smoke", ["direct"])["direct"]
    pol = ScriptedPolicy(['<tool_call>{"name": "web_search", "arguments": {"query": "x"}}</tool_call>',
                          "<response>Paris</response>"])
    rec = await Harness(pol, memory_backend, cfg.harness).run(Task(id="q", question="Capital of France?"), tmp_path)
    assert rec.status == "answered" and rec.final_response == "Paris" and rec.tool_calls == 0
    assert all(c["tools"] == [] for c in pol.calls)  # the policy is offered no tool at all
    assert [e.detail.get("code") for e in rec.events if e.type == "invalid_call"] == ["unknown_tool"]
    assert memory_backend.calls == []


async def test_context_strategies_for_tool_images(tmp_path, memory_backend):
    seen = {}
    for name, cfg in make_configs("smoke", ["harness", "no_refeed", "text_only"]).items():
        pol = ScriptedPolicy(cite_first_image)
        await Harness(pol, memory_backend, cfg.harness,
                      context_builder=cfg.context_builder()).run(Task(id="q", question="Q?"), tmp_path / name)
        tool_msg = next(m for m in pol.calls[1]["messages"] if m.role == "tool")
        seen[name] = (tool_msg.image_refs(), tool_msg.text())
    assert len(seen["harness"][0]) == 2  # images re-fed as pixels
    assert seen["no_refeed"][0] == [] and "[images saved but not shown" in seen["no_refeed"][1]
    assert seen["text_only"][0] == [] and "[image: https://img.example.org/0.png — img 0]" in seen["text_only"][1]
    assert "[images saved but not shown" not in seen["text_only"][1]
    assert isinstance(make_configs("smoke", ["text_only"])["text_only"].context_builder(), TextOnlyContextBuilder)


# ------------------------------------------------------------------------------------------ runner
def _vistarget_tasks(tmp_path, data_dir):
    match = tmp_path / "target_match.png"
    match.write_bytes(png_bytes((0, 100, 50)))  # identical to MemoryBackend's first image-search hit
    other = sorted((data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images").glob("*.png"))[0]
    return LoadResult("vistarget", tasks=[
        Task(id="vt_match", question="Find the tower picture.", answers=["Eiffel Tower"], target_image=str(match)),
        Task(id="vt_other", question="Find the other picture.", answers=["Big Ben"], target_image=str(other))])


async def test_run_evaluation_scores_vistarget_and_resumes(tmp_path, data_dir):
    bench = {"vistarget": _vistarget_tasks(tmp_path, data_dir)}
    configs = make_configs("smoke", ["direct", "harness"])
    pol = ScriptedPolicy(cite_first_image)
    out = tmp_path / "out"
    kw = dict(policy=pol, backend=MemoryBackend(), out_dir=out, repeats=2, private_dir=tmp_path / "private")
    first = await run_evaluation(bench, configs, **kw)
    assert first.new_episodes == 8 and len(first.items) == 8
    by = {(i.config, i.task_id, i.repeat): i for i in first.items}
    m = by[("harness", "vt_match", 0)]
    assert m.cited and m.match is True and m.target_distance == 0 and m.score == 1.0
    assert m.judge == "rule:contains@rule-v1" and m.image_judge == "image:phash+dhash<=26"
    o = by[("harness", "vt_other", 0)]
    assert o.cited and o.match is False and o.score == 0.0 and o.response.startswith("The Eiffel Tower")
    d = by[("direct", "vt_match", 1)]
    assert not d.cited and d.match is False and d.tool_calls == 0
    assert m.tool_counts == {"web_search_for_image": 1}
    assert sorted(p.name for p in (out / "predictions").iterdir()) == sorted(
        f"vistarget__{c}__r{r}.jsonl" for c in ("direct", "harness") for r in range(2))

    # crash: the last run lost its second episode (torn line) and its predictions
    ep = out / "runs" / "vistarget" / "harness" / "r1" / "episodes.jsonl"
    lines = ep.read_text().splitlines(keepends=True)
    ep.write_text(lines[0] + lines[1][:50])
    (out / "predictions" / "vistarget__harness__r1.jsonl").unlink()
    calls_before = len(pol.calls)
    again = await run_evaluation(bench, configs, **kw)
    assert again.new_episodes == 1 and len(pol.calls) - calls_before == 2  # one episode of two turns re-ran
    assert len(ep.read_text().splitlines()) == 2
    assert sorted((i.config, i.task_id, i.repeat, i.match) for i in again.items) == sorted(
        (i.config, i.task_id, i.repeat, i.match) for i in first.items)
    assert len(read_predictions(out)) == 8
    done = await run_evaluation(bench, configs, **kw)  # finished: nothing re-runs
    assert done.new_episodes == 0 and len(pol.calls) - calls_before == 2


async def test_sensitive_benchmark_runs_privately_and_outputs_only_hashes(tmp_path, data_dir):
    lr = (await load_benchmarks(["mmbrowsecomp"], limit=2, data_dir=data_dir))["mmbrowsecomp"]
    assert len(lr.tasks) == 2
    out, private = tmp_path / "out", tmp_path / "private"
    oc = await run_evaluation({"mmbrowsecomp": lr}, make_configs("smoke", ["harness"]),
                              policy=ScriptedPolicy(cite_first_image), backend=MemoryBackend(), out_dir=out,
                              repeats=1, private_dir=private)
    assert not (out / "runs").exists() and (private / "mmbrowsecomp" / "harness" / "r0" / "episodes.jsonl").exists()
    for item in oc.items:
        assert item.sensitive and item.response is None and item.answers is None and item.response_sha256
    assert {i.question_sha256 for i in oc.items} == {sha256_text(t.question) for t in lr.tasks}
    blob = "".join(f.read_text(errors="ignore") for f in out.rglob("*") if f.is_file())
    for t in lr.tasks:
        assert t.metadata["judge_question"][:40] not in blob and t.answers[0] not in blob
    assert redact("judge endpoint failed: HTTP 500: echo of the secret prompt") == \
        "judge endpoint failed (details withheld: encrypted benchmark)"


async def test_bad_inputs_are_reported_and_counted(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the Hub unreachable and nothing cached
    loaded = await load_benchmarks(["fvqa", "no_such_bench", "hub:mmsearch"], limit=2, data_dir=data_dir,
                                   cache_dir=tmp_path / "hf")
    assert loaded["no_such_bench"].problems[0]["reason"].startswith("UnknownBenchmarkError")
    assert loaded["mmsearch"].problems[0]["reason"].startswith("BenchmarkError: mmsearch: dataset CaraJ/MMSearch@main")
    # an input image that disappears before the run: the episode ends with an error and a reason
    fvqa = loaded["fvqa"]
    img = tmp_path / "gone.png"
    shutil.copy(fvqa.tasks[0].input_images[0], img)
    fvqa.tasks[0] = fvqa.tasks[0].model_copy(update={"input_images": [str(img)]})
    img.unlink()

    failing_judge = LLMJudge(OpenAIChatPolicy("http://judge/v1", "j", api_key="k", token_counter=CharTokenCounter(),
                                              max_retries=0, transport=httpx.MockTransport(lambda r: httpx.Response(500))),
                             "j")
    out = tmp_path / "out"
    oc = await run_evaluation(loaded, make_configs("smoke", ["harness"]), policy=ScriptedPolicy(cite_first_image),
                              backend=MemoryBackend(), out_dir=out, repeats=1, judge=failing_judge,
                              private_dir=tmp_path / "p")
    rows = {r["benchmark"]: r for r in summary_rows(loaded, oc.items)}
    assert rows["fvqa"]["episode_errors"] == 1 and rows["fvqa"]["episodes"] == 2
    assert rows["fvqa"]["judge_errors"] == 1  # the answered episode; the errored one has no answer to judge
    assert rows["no_such_bench"]["load_problems"] == 1 and rows["no_such_bench"]["episodes"] == 0
    errored = next(i for i in oc.items if i.status == "error")
    assert "gone.png" in errored.error or "No such file" in errored.error
    problems = [json.loads(line) for line in (out / "problems.jsonl").read_text().splitlines()]
    assert {p["benchmark"] for p in problems} == {"no_such_bench", "mmsearch"}


async def test_rule_judge_modes_follow_task_metadata(tmp_path, data_dir):
    lr = (await load_benchmarks(["livevqa"], limit=1, data_dir=data_dir))["livevqa"]
    l1 = next(t for t in lr.tasks if t.metadata["level"] == 1)
    letter = l1.metadata["correct_choice"]
    v = RuleJudge().judge_task(l1, f"{letter}. {l1.answers[0]}")
    assert v.correct and v.judge == "rule:choice@rule-v1"
