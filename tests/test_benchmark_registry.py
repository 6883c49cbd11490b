"""A benchmark of your own (kit.eval.benchmarks.register_benchmark) and the judge protocols (kit.eval.judges)."""

from __future__ import annotations

import json

import pytest

from kit.eval import benchmarks as B
from kit.eval.benchmarks import BenchmarkError, LoadResult, load_benchmark, register_benchmark
from kit.eval.judges import AnswerJudge, ImageJudge, LLMJudge, PerceptualImageJudge, RuleJudge
from kit.eval.report import display_name
from kit.harness import Task


@pytest.fixture
def registry_restored():
    saved = (dict(B.BENCHMARKS), list(B.TABLE_ORDER), dict(B._REGISTERED))
    yield
    B.BENCHMARKS.clear(), B.BENCHMARKS.update(saved[0])
    B.TABLE_ORDER[:] = saved[1]
    B._REGISTERED.clear(), B._REGISTERED.update(saved[2])


def _rows(tmp_path, n=3):
    p = tmp_path / "qa.jsonl"
    p.write_text("".join(json.dumps({"id": str(i), "q": f"question {i}", "a": f"answer {i}"}) + "\n" for i in range(n)))
    return p


def _loader(path, limit):
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [Task(id=r["id"], question=r["q"], answers=[r["a"]]) for r in rows[:limit]]


def test_registered_benchmark_loads_by_spec_with_limit_and_display(tmp_path, registry_restored):
    info = register_benchmark("my_qa", _loader, display="My QA")
    assert info.group == B.KNOWLEDGE_QA and display_name("my_qa") == "My QA" and "my_qa" in B.TABLE_ORDER
    res = load_benchmark("local:my_qa", local_path=_rows(tmp_path), limit=2)
    assert [t.id for t in res.tasks] == ["0", "1"] and res.benchmark == "my_qa" and not res.problems
    assert load_benchmark("my_qa", local_path=_rows(tmp_path)).info["path"].endswith("qa.jsonl")


def test_duplicate_ids_are_problems_not_lost(tmp_path, registry_restored):
    register_benchmark("dup_qa", lambda p, limit: [Task(id="x", question="a"), Task(id="x", question="b")])
    res = load_benchmark("local:dup_qa", local_path=tmp_path)
    assert [t.question for t in res.tasks] == ["a"] and "duplicate id" in res.problems[0]["reason"]


def test_loader_may_return_a_load_result(tmp_path, registry_restored):
    def loader(path, limit):
        res = LoadResult("mine", tasks=[Task(id="1", question="q")])
        res.problem(2, "unreadable row")
        return res
    register_benchmark("mine", loader, group=B.MMSEARCH_STYLE)
    res = load_benchmark("local:mine", local_path=tmp_path)
    assert len(res.tasks) == 1 and res.problems[0]["reason"] == "unreadable row"


@pytest.mark.parametrize("key,loader,kw,msg", [
    ("fvqa", _loader, {}, "built in"),
    ("My-QA", _loader, {}, "lower-case"),
    ("ok_qa", "not callable", {}, "callable"),
    ("ok_qa", _loader, {"group": "Other"}, "group"),
])
def test_bad_registrations_are_refused(key, loader, kw, msg, registry_restored):
    with pytest.raises(ValueError, match=msg):
        register_benchmark(key, loader, **kw)


def test_reregistering_needs_replace_and_bad_returns_are_named(tmp_path, registry_restored):
    register_benchmark("twice", _loader)
    with pytest.raises(ValueError, match="replace=True"):
        register_benchmark("twice", _loader)
    register_benchmark("twice", lambda p, limit: {"not": "tasks"}, replace=True)
    with pytest.raises(BenchmarkError, match="returned dict"):
        load_benchmark("local:twice", local_path=tmp_path)
    with pytest.raises(BenchmarkError, match="local_path"):
        load_benchmark("local:twice")


def test_kit_judges_satisfy_the_protocols():
    assert isinstance(RuleJudge(), AnswerJudge) and isinstance(PerceptualImageJudge(), ImageJudge)
    assert callable(LLMJudge.judge_task) and isinstance(LLMJudge.name, property)
    assert not isinstance(object(), AnswerJudge)
