"""Yes/no claim checks derived from VisTarget-style tasks (kit.eval.vistarget.verification_tasks) and the
demonstrator's verdicts on them through the real harness and local web."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.eval.judges import RuleJudge
from kit.eval.vistarget import QUESTION, build_zim_vistarget, verification_tasks
from kit.harness.episode import Task


def _task(i: int, caption: str, title: str) -> Task:
    return Task(id=f"t{i}", question=QUESTION.format(caption=caption), answers=[title])


def test_claims_alternate_true_and_false_and_score_exactly():
    tasks = [_task(0, 'A "quoted" caption', "Alpha"), _task(1, "Second caption", "Beta"), _task(2, "Third", "Gamma")]
    checks = verification_tasks(tasks)
    assert [c.answers for c in checks] == [["yes"], ["no"], ["yes"]]
    assert [c.metadata["claimed_title"] for c in checks] == ["Alpha", "Gamma", "Gamma"]
    assert 'caption "A "quoted" caption" shown on the Wikipedia page "Alpha"?' in checks[0].question
    assert all(c.metadata["rule_mode"] == "exact" and c.id.endswith("_verify") for c in checks)
    judge = RuleJudge("contains")  # the task's exact mode wins: a hedge is wrong
    assert judge.judge_task(checks[0], "Yes.").correct
    assert not judge.judge_task(checks[0], "yes or no").correct
    assert not judge.judge_task(checks[1], "Yes").correct


def test_a_borrowed_title_of_the_same_page_stays_true():
    checks = verification_tasks([_task(0, "x", "Alpha"), _task(1, "y", "alpha")])
    assert checks[1].answers == ["yes"]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least two"):
        verification_tasks([_task(0, "x", "A")])
    with pytest.raises(ValueError, match="not a VisTarget-style question"):
        verification_tasks([_task(0, "x", "A"), Task(id="q", question="What is this?", answers=["B"])])
    with pytest.raises(ValueError, match="non-empty answer"):
        verification_tasks([_task(0, "x", "A"), _task(1, "y", " ")])


async def test_demonstrator_checks_claims_on_the_local_web(tmp_path, data_dir):
    from kit.harness.config import HarnessConfig
    from kit.harness.loop import Harness
    from kit.harness.runner import run_batch
    from kit.paths import zim_paths
    from kit.policy.demonstrator import DemonstratorPolicy
    from kit.web.zim import LocalZimWeb

    web = LocalZimWeb([Path(p) for p in zim_paths(data_dir)])
    built = await build_zim_vistarget(web, 6, tmp_path / "targets")
    checks = verification_tasks(built.tasks)
    harness = Harness(DemonstratorPolicy(), web, HarnessConfig.smoke(max_turns=1, tools_enabled=["web_search"]))
    records = await run_batch(harness, checks, tmp_path / "eps", progress=False)
    judge = RuleJudge("contains")
    verdicts = []
    for r in records:
        calls = next(m for m in r.messages if m.role == "assistant").text()
        assert '"name": "web_search"' in calls  # one search on the caption, then the verdict
        assert r.final_response in ("Yes.", "No.")
        verdicts.append(judge.judge_task(r.task, r.final_response).correct)
    assert sum(verdicts) >= len(verdicts) // 2  # the rule is right on most claims (not a model result)
