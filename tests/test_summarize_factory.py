"""Goal-conditioned summaries, context-overflow mapping and the policy factory."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.harness.summarize import ExtractiveSummarizer, LLMSummarizer
from kit.policy.openai_client import OpenAIChatPolicy
from kit.policy.scripted import CharTokenCounter
from kit.types import PolicyError, SamplingParams

PAGE = "\n\n".join([
    "# Jodrell Bank", "Jodrell Bank Observatory hosts radio telescopes.",
    *[f"Filler paragraph {i} about weather and unrelated topics." for i in range(200)],
    "The Lovell Telescope is in the historic county of Cheshire, England.",
])


def test_extractive_summary_is_goal_conditioned_and_bounded():
    s = ExtractiveSummarizer().summarize_sync(PAGE, goal="Which county is the Lovell Telescope in?", max_chars=300)
    assert "Cheshire" in s and len(s) <= 300
    lead = ExtractiveSummarizer().summarize_sync(PAGE, goal=None, max_chars=300)
    assert lead.startswith("# Jodrell Bank") and "Cheshire" not in lead and len(lead) <= 300
    assert ExtractiveSummarizer().summarize_sync("", goal="x", max_chars=100) == "(the page has no text)"
    short = "one paragraph only"
    assert ExtractiveSummarizer().summarize_sync(short, goal="zzz", max_chars=5000) == short


def _policy(handler) -> OpenAIChatPolicy:
    return OpenAIChatPolicy("http://llm.test/v1", "m", transport=httpx.MockTransport(handler),
                            token_counter=CharTokenCounter(), max_retries=0)


def test_llm_summarizer_uses_the_endpoint_and_falls_back():
    seen = {}

    def ok(request):
        seen["body"] = json.loads(request.content)
        return httpx.Response(200, json={"choices": [{"message": {"content": "Cheshire. " * 1000}, "finish_reason": "stop"}],
                                         "usage": {"prompt_tokens": 5, "completion_tokens": 5}})

    text, how = asyncio.run(LLMSummarizer(_policy(ok)).summarize(PAGE, goal="county?", max_chars=5000, title="JB"))
    assert how.startswith("llm:") and len(text) <= 5000 and text.startswith("Cheshire")
    content = seen["body"]["messages"][0]["content"]
    assert "Goal: county?" in (content if isinstance(content, str) else content[0]["text"])

    def down(request):
        return httpx.Response(400, json={"error": "bad"})

    text, how = asyncio.run(LLMSummarizer(_policy(down)).summarize(PAGE, goal="Lovell Telescope county", max_chars=500))
    assert how.startswith("extractive_fallback") and "Cheshire" in text


def test_context_overflow_from_server_ends_in_context_limit(tmp_path, memory_backend):
    def too_long(request):
        return httpx.Response(400, json={"object": "error", "message": "This model's maximum context length is 4096 tokens. "
                                                                       "However, you requested 5000 tokens."})

    with pytest.raises(PolicyError) as e:
        asyncio.run(_policy(too_long).generate([], [], SamplingParams()))
    assert e.value.context_overflow
    rec = asyncio.run(Harness(_policy(too_long), memory_backend, HarnessConfig()).run(Task(id="t", question="q"), tmp_path / "ws"))
    assert rec.status == "context_limit" and not rec.trainable and len(rec.messages) == 2

    def bad_request(request):
        return httpx.Response(400, json={"message": "unknown field"})

    rec = asyncio.run(Harness(_policy(bad_request), memory_backend, HarnessConfig()).run(Task(id="t", question="q"), tmp_path / "w2"))
    assert rec.status == "error" and "unknown field" in rec.error


def test_factory_unreachable_endpoint(monkeypatch):
    from kit.policy.factory import endpoint_reachable, make_policy

    ok, why = endpoint_reachable("http://127.0.0.1:9/v1", timeout_s=1)
    assert not ok and why
    with pytest.raises(RuntimeError, match="unreachable"):
        make_policy("some-model", "http://127.0.0.1:9/v1", allow_fallback=False)


@pytest.mark.slow
def test_factory_falls_back_loudly_to_a_tiny_model():
    from kit.policy.factory import make_policy

    with pytest.warns(UserWarning, match="RANDOM-WEIGHT"):
        policy, info = make_policy("", "http://127.0.0.1:9/v1")
    assert info["smoke"] and info["kind"] == "tiny" and "unreachable" in info["fallback_reason"]
    assert policy.token_counter.count_text("hello world") == 2  # the real Qwen vocabulary
