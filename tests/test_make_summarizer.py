"""One web_extract summarizer factory for every path (WeAgent Table 4: pages "summarized by a LLM to at
most 5,000 characters"): the LLM under the paper profile, a loud stop without its endpoint, the
extractive ranking labelled when chosen explicitly, and the RL / data / verl paths taking it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from kit.harness.summarize import (
    ExtractiveSummarizer,
    LLMSummarizer,
    SummarizerConfigError,
    make_summarizer,
    summarizer_from_config,
)
from kit.policy.scripted import CharTokenCounter
from kit.types import AssistantTurn

ROOT = Path(__file__).resolve().parents[1]
PAGE = "# Lovell\n\nThe Lovell Telescope is in Cheshire.\n\n" + "\n\n".join(f"filler {i}" for i in range(50))


class FakeLLM:
    name = "fake-summarizer"

    def __init__(self):
        self.token_counter = CharTokenCounter()
        self.calls = 0

    async def generate(self, messages, tools, sampling, workspace=None):
        self.calls += 1
        return AssistantTurn(text="Cheshire (from the LLM).")


def test_smoke_default_is_extractive_and_unlabelled():
    s = make_summarizer("", "", "smoke")
    assert isinstance(s, ExtractiveSummarizer) and s.name == "extractive_bm25"
    _, how = asyncio.run(s.summarize(PAGE, goal="county of the Lovell Telescope", max_chars=60))
    assert how == "extractive_bm25"


def test_paper_default_is_the_llm_and_stops_without_an_endpoint():
    with pytest.raises(SummarizerConfigError, match="summarizer_endpoint") as e:
        make_summarizer("", "", "paper")
    assert "summarizer='extractive'" in str(e.value) and "Table 4" in str(e.value)
    # an endpoint without summarizer_model asks for the recipe's served name (it used to be refused)
    assert "kimi-k2.6" in make_summarizer("http://llm.test/v1", "", "paper").name
    assert "qwen3-235b-a22b" in make_summarizer("http://llm.test/v1", "", "points_seeker").name
    s = make_summarizer("http://llm.test/v1", "qwen3-235b", "paper")  # no request at construction
    assert isinstance(s, LLMSummarizer) and s.name.startswith("llm:") and "qwen3-235b" in s.name


def test_in_process_policy_is_used_under_any_profile():
    pol = FakeLLM()
    s = make_summarizer("", "", "paper", policy=pol)
    text, how = asyncio.run(s.summarize(PAGE, goal="county", max_chars=5000))
    assert pol.calls == 1 and text.startswith("Cheshire") and how == "llm:fake-summarizer"
    assert isinstance(make_summarizer("", "", "smoke", policy=pol), LLMSummarizer)  # smoke with a model: the model


def test_explicit_extractive_under_paper_is_labelled_fallback():
    s = make_summarizer("", "", "paper", kind="extractive")
    assert isinstance(s, ExtractiveSummarizer) and s.name == "extractive_bm25 (fallback)"
    _, how = asyncio.run(s.summarize(PAGE, goal="county of the Lovell Telescope", max_chars=60))
    assert how == "extractive_bm25 (fallback)"
    with pytest.raises(ValueError, match="one of"):
        make_summarizer("", "", "paper", kind="abstractive")


def test_verl_config_maps_to_the_factory():
    kit_cfg = yaml.safe_load((ROOT / "configs/verl/fa_gspo.yaml").read_text())["kit"]
    assert {"summarizer", "summarizer_endpoint", "summarizer_model"} <= set(kit_cfg)
    with pytest.raises(SummarizerConfigError, match="summarizer_endpoint"):
        summarizer_from_config(kit_cfg)  # the shipped config: harness paper, no endpoint named
    assert summarizer_from_config({**kit_cfg, "summarizer": "extractive"}).name == "extractive_bm25 (fallback)"
    assert summarizer_from_config({**kit_cfg, "harness": "smoke"}).name == "extractive_bm25"
    llm = summarizer_from_config({**kit_cfg, "summarizer_endpoint": "http://llm.test/v1", "summarizer_model": "m"})
    assert isinstance(llm, LLMSummarizer)


def test_rl_rollout_factory_passes_the_summarizer():
    from kit.harness.config import HarnessConfig
    from kit.harness.episode import Task
    from kit.rl.rollout import seeded_factory
    from kit.types import SamplingParams

    s = make_summarizer("", "", "paper", policy=FakeLLM())
    make = seeded_factory(FakeLLM(), object(), HarnessConfig.smoke(), SamplingParams(), summarizer=s)
    assert make(Task(id="t", question="q"), 0).summarizer is s


def test_data_stage4_harness_gets_the_summarizer(monkeypatch, tmp_path):
    import kit.harness.runner as runner
    from kit.data.sample import sample_trajectories
    from kit.harness.episode import Task

    seen = {}

    async def fake_run_batch(make, tasks, out_dir, **kw):
        seen["harness"] = make(tasks[0], 0)
        return []

    class Synth:  # what sample_trajectories reads of a SynthTask
        id = "s1"
        seed = type("SeedStub", (), {"labels": []})()

        def to_task(self):
            return Task(id="s1", question="q")

    monkeypatch.setattr(runner, "run_batch", fake_run_batch)
    s = make_summarizer("", "", "paper", policy=FakeLLM())
    asyncio.run(sample_trajectories([Synth()], object(), tmp_path, policy_factory=lambda t, k: FakeLLM(), summarizer=s))
    assert seen["harness"].summarizer is s


def test_fallback_summarizer_gives_a_run_label():
    from kit.harness.summarize import summarizer_labels

    assert summarizer_labels(make_summarizer("", "", "paper", kind="extractive")) == ["summarizer: extractive (fallback)"]
    assert summarizer_labels(make_summarizer("", "", "smoke")) == []
    assert summarizer_labels(make_summarizer("", "", "paper", policy=FakeLLM())) == []
