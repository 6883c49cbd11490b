"""Judges per profile (WeAgent §7.1 "Results are scored by Kimi K2.6", §5.2 Target Match by a VLM judge):
paper defaults, the loud stop without an endpoint, the labelled rule/perceptual fallbacks, the
versioned prompt recorded on verdicts and manifests, and MMSearch scored by the LLM judge."""

from __future__ import annotations

import asyncio
import hashlib
import io
from pathlib import Path

import pytest
from PIL import Image

from kit.eval import judge_factory as jf
from kit.eval.judges import (
    IMAGE_JUDGE_PROMPT,
    IMAGE_JUDGE_PROMPT_VERSION,
    JUDGE_PROMPT,
    JUDGE_PROMPT_VERSION,
    PROMPT_DIGESTS,
    LLMJudge,
    PerceptualImageJudge,
    RuleJudge,
    VLMImageJudge,
)
from kit.harness.episode import Task
from kit.policy.scripted import CharTokenCounter
from kit.types import AssistantTurn


class FakeJudgePolicy:
    """In-process judge model: answers ``reply`` and keeps every prompt it was shown."""

    name = "fake-judge"

    def __init__(self, reply: str = "VERDICT: CORRECT"):
        self.reply, self.prompts = reply, []
        self.token_counter = CharTokenCounter()

    async def generate(self, messages, tools, sampling, workspace=None):
        self.prompts.append("".join(p.text or "" for m in messages for p in m.content if p.type == "text"))
        return AssistantTurn(text=self.reply)


def test_profile_defaults_smoke_rule_phash_paper_llm_vlm():
    assert jf.resolve_judge_kinds("smoke") == ("rule", "phash")
    assert jf.resolve_judge_kinds("paper") == ("llm", "vlm")
    assert jf.resolve_judge_kinds("paper", "rule", None) == ("rule", "vlm")  # an explicit choice is kept
    assert jf.DEFAULT_JUDGE_MODEL == "kimi-k2.6"
    with pytest.raises(ValueError, match="one of"):
        jf.resolve_judge_kinds("paper", "gpt")


def test_paper_without_judge_endpoint_stops_naming_the_parameter():
    with pytest.raises(jf.JudgeConfigError, match="judge_endpoint") as e:
        jf.make_answer_judge(None, profile="paper")
    assert "judge='rule'" in str(e.value) and "§7.1" in str(e.value)
    with pytest.raises(jf.JudgeConfigError, match="image_judge_endpoint") as e:
        jf.make_image_judge(None, profile="paper")
    assert "image_judge='phash'" in str(e.value)
    # smoke keeps the offline judges without any endpoint
    assert isinstance(jf.make_answer_judge(None, profile="smoke"), RuleJudge)
    assert isinstance(jf.make_image_judge(None, profile="smoke"), PerceptualImageJudge)


def test_explicit_fallback_under_paper_is_labelled_on_every_verdict():
    rule = jf.make_answer_judge("rule", profile="paper")
    v = rule.judge_task(Task(id="t", question="q", answers=["Paris"]), "Paris")
    assert v.correct is True and v.judge.endswith("(fallback)") and "rule:contains" in v.judge
    assert jf.judge_labels(rule, jf.make_image_judge("phash", profile="paper")) == [
        "judge: rule (fallback)", "image_judge: phash (fallback)"]
    # the same choice under smoke is the profile's own judge, not a fallback
    smoke = jf.make_answer_judge("rule", profile="smoke")
    assert "(fallback)" not in smoke.judge_task(Task(id="t", question="q", answers=["Paris"]), "Paris").judge
    assert jf.judge_labels(smoke, jf.make_image_judge(None, profile="smoke")) == []
    assert "(fallback)" in jf.make_image_judge("phash", profile="paper").name


def test_llm_judge_with_in_process_policy_records_prompt_version():
    pol = FakeJudgePolicy("VERDICT: CORRECT")
    judge = jf.make_answer_judge(None, profile="paper", policy=pol)
    assert isinstance(judge, LLMJudge) and judge.model == "kimi-k2.6"
    v = asyncio.run(judge.judge_task(Task(id="t", question="Capital of France?", answers=["Paris"]), "It is Paris."))
    assert v.correct is True and v.judge == f"llm:kimi-k2.6@{JUDGE_PROMPT_VERSION}"
    assert v.details["prompt_version"] == JUDGE_PROMPT_VERSION
    assert "Capital of France?" in pol.prompts[0] and "It is Paris." in pol.prompts[0]
    d = jf.describe_judges(judge, jf.make_image_judge("phash", profile="paper"))
    assert d["answer_judge_prompt_version"] == JUDGE_PROMPT_VERSION and d["answer_judge_model"] == "kimi-k2.6"
    assert d["answer_judge_fallback"] is False and d["image_judge_fallback"] is True
    assert d["answer_judge_prompt_sha256"] == hashlib.sha256(JUDGE_PROMPT.encode()).hexdigest()


def test_prompt_text_is_pinned_to_its_version():
    """Editing a judge prompt without a new version would reuse cached verdicts of the old prompt."""
    assert PROMPT_DIGESTS[JUDGE_PROMPT_VERSION] == hashlib.sha256(JUDGE_PROMPT.encode()).hexdigest()
    assert PROMPT_DIGESTS[IMAGE_JUDGE_PROMPT_VERSION] == hashlib.sha256(IMAGE_JUDGE_PROMPT.encode()).hexdigest()


def test_vlm_image_judge_is_the_paper_default_with_a_configurable_model(tmp_path):
    pol = FakeJudgePolicy("VERDICT: SAME")
    j = jf.make_image_judge(None, profile="paper", policy=pol, model="qwen3-vl-235b")
    assert isinstance(j, VLMImageJudge) and j.name == f"image-vlm:qwen3-vl-235b@{IMAGE_JUDGE_PROMPT_VERSION}"
    assert jf.make_image_judge(None, profile="paper", policy=pol).model == jf.DEFAULT_IMAGE_JUDGE_MODEL
    a, b = tmp_path / "a.png", tmp_path / "b.png"
    Image.new("RGB", (8, 8), "red").save(a)
    Image.new("RGB", (8, 8), "blue").save(b)
    assert asyncio.run(j.judge(a, b)).match is True


def _mmsearch_task(tmp_path: Path) -> Task:
    from kit.eval.hub_loaders import RowContext, _mmsearch

    buf = io.BytesIO()
    Image.new("RGB", (4, 4), "green").save(buf, format="PNG")
    row = {"sample_id": 7, "query": "Which team won the 2024 final shown here?", "query_image": {"bytes": buf.getvalue()},
           "gt_answer": "Real Madrid", "alternative_gt_answers": []}
    ctx = RowContext("mmsearch", tmp_path, resolve_image=lambda s: Path(s))
    return _mmsearch(row, 0, ctx)[0]


def test_mmsearch_is_scored_by_the_llm_judge_under_paper(tmp_path):
    """§7.1: every benchmark, MMSearch included, "scored by Kimi K2.6"; token F1 is only the fallback's."""
    task = _mmsearch_task(tmp_path)
    assert jf.PAPER_SCORING["mmsearch"] == "llm" and set(jf.PAPER_SCORING.values()) == {"llm"}
    pol = FakeJudgePolicy("VERDICT: INCORRECT")
    judge = jf.make_answer_judge(None, profile="paper", policy=pol)
    pred = "Real Betis, not Madrid"  # token F1 0.5 against "Real Madrid": the rule f1 scorer accepts it
    v = asyncio.run(judge.judge_task(task, pred))
    assert v.correct is False and v.judge.startswith("llm:") and task.question in pol.prompts[0]
    fallback = jf.make_answer_judge("rule", profile="paper").judge_task(task, pred)
    assert fallback.correct is True and fallback.judge.startswith("rule:f1") and "(fallback)" in fallback.judge


def test_notebook_06_paper_run_stops_before_the_kernel_without_judge_endpoints(monkeypatch):
    """The CLI's cross-parameter check resolves None to the paper's judges and summarizer (kit.cli_params)."""
    monkeypatch.setenv("SERPER_API_KEY", "k")  # the recipe's live web (eval.web_backend) is not the subject here
    from kit.cli_params import ParameterError, check_combinations, notebook_parameters
    from kit.paths import PROJECT_ROOT

    declared = notebook_parameters(PROJECT_ROOT / "notebooks" / "06_evaluation.ipynb")
    assert declared["judge"].default is None and declared["image_judge"].default is None
    with pytest.raises(ParameterError, match="judge_endpoint") as e:
        check_combinations(declared, {}, "paper", "notebook 06")
    assert "judge='rule'" in str(e.value) and "§7.1" in str(e.value)
    with pytest.raises(ParameterError, match="image_judge_endpoint"):
        check_combinations(declared, {"judge": "rule"}, "paper")
    with pytest.raises(ParameterError, match="summarizer_endpoint"):
        check_combinations(declared, {"judge": "rule", "image_judge": "phash"}, "paper")
    check_combinations(declared, {"judge": "rule", "image_judge": "phash", "summarizer": "extractive"}, "paper")
    check_combinations(declared, {"judge_endpoint": "http://j/v1", "image_judge_endpoint": "http://j/v1",
                                  "summarizer_endpoint": "http://s/v1", "summarizer_model": "m"}, "paper")
    check_combinations(declared, {}, "smoke")  # smoke: the offline judges and summarizer need nothing
