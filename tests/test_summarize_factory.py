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


def test_factory_never_replaces_a_named_model(capfd):
    """A named endpoint that is down or does not serve the named model stops the run (even with
    allow_fallback, the default): never a silent tiny-model run."""
    from models_server import closed_port_url, models_server

    from kit.policy.factory import ModelUnavailable, make_policy

    dead = closed_port_url()
    with pytest.raises(ModelUnavailable, match=rf"endpoint {dead} unreachable"):
        make_policy("some-model", dead)
    with pytest.raises(ModelUnavailable, match=rf"endpoint {dead} unreachable"):
        make_policy("", dead)
    with pytest.raises(ModelUnavailable, match=r"model '/no/such/checkpoint' is not a local checkpoint folder"):
        make_policy("/no/such/checkpoint")
    with models_server(["Qwen/Qwen2.5-VL-7B-Instruct"]) as url:
        with pytest.raises(ModelUnavailable, match=r"does not serve model 'qwen-7b'; it serves \['Qwen/Qwen2.5-VL-7B-Instruct'\]"):
            make_policy("qwen-7b", url)
        policy, info = make_policy("Qwen/Qwen2.5-VL-7B-Instruct", url)
        assert info["kind"] == "openai" and not info["smoke"] and policy.model == "Qwen/Qwen2.5-VL-7B-Instruct"
        policy, info = make_policy("", url)  # the server's only model, announced
        assert info["model"] == "Qwen/Qwen2.5-VL-7B-Instruct"
        assert "serves exactly one" in capfd.readouterr().err
    with models_server(["a", "b"]) as url, pytest.raises(ModelUnavailable, match=r"serves 2 models \['a', 'b'\]: name one"):
        make_policy("", url)
    with pytest.raises(ModelUnavailable, match="fallback is disabled"):
        make_policy("", "", allow_fallback=False)


def test_smoke_labels_and_response_length_for_a_real_model():
    """Smoke budgets with a real model keep Table 5's response length and are not labelled tiny-model runs."""
    from kit.policy.factory import is_named, run_labels

    assert HarnessConfig.smoke().max_response_tokens == 96
    assert HarnessConfig.smoke(real_model=True).max_response_tokens == HarnessConfig().max_response_tokens == 4096
    assert HarnessConfig.for_profile("smoke", real_model=True, max_turns=2).max_turns == 2
    assert HarnessConfig.for_profile("paper") == HarnessConfig()
    with pytest.raises(ValueError, match="unknown profile"):
        HarnessConfig.for_profile("fast")
    assert is_named("", "http://x/v1") and is_named("/ckpt", "") and not is_named("tiny-qwen2_vl", "") and not is_named("", "")
    assert run_labels("smoke", {"smoke": False}) == ["smoke-budgets"]
    assert run_labels("smoke", {"smoke": True}) == ["smoke"] and run_labels("paper", {"smoke": False}) == []


@pytest.mark.slow
def test_factory_falls_back_loudly_to_a_tiny_model(capfd):
    """Only when nothing is named; announced on stderr (the terminal), not only as a warning."""
    from kit.policy.factory import make_policy

    with pytest.warns(UserWarning, match="RANDOM-WEIGHT"):
        policy, info = make_policy("", "")
    assert info["smoke"] and info["kind"] == "tiny" and "no model or endpoint named" in info["fallback_reason"]
    assert "RANDOM-WEIGHT" in capfd.readouterr().err
    assert policy.token_counter.count_text("hello world") == 2  # the real Qwen vocabulary


def test_evaluation_policy_kind_never_replaces_a_named_model():
    from kit.policy.factory import eval_policy_kind

    assert eval_policy_kind(None, "smoke", "", "") == "demonstrator"
    assert eval_policy_kind(None, "smoke", "", "http://127.0.0.1:8000/v1") == "model"
    assert eval_policy_kind(None, "smoke", "Qwen/Qwen2.5-VL-7B-Instruct", "") == "model"
    assert eval_policy_kind(None, "smoke", "tiny-qwen2_vl", "") == "model"
    assert eval_policy_kind("model", "smoke", "tiny-qwen2_vl", "") == "model"
    assert eval_policy_kind(None, "paper", "", "") == "model"
    with pytest.raises(ValueError, match="model is named"):
        eval_policy_kind("demonstrator", "smoke", "", "http://127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match="unknown policy_kind"):
        eval_policy_kind("oracle", "smoke", "", "")


@pytest.mark.parametrize("drip_headers", [False, True])
def test_served_models_has_an_overall_deadline(drip_headers):
    """A server that drips one byte at a time never trips a per-read timeout; the check still ends
    within its deadline with one line (C10)."""
    import time

    from models_server import models_server

    from kit.policy.factory import ModelUnavailable, served_models

    with models_server(drip_s=0.05, drip_headers=drip_headers) as url:
        t0 = time.monotonic()
        with pytest.raises(ModelUnavailable, match=r"no complete answer within 0.6 s"):
            served_models(url, timeout_s=0.6)
        assert time.monotonic() - t0 < 2.0


def test_bad_urls_and_odd_model_lists_are_one_line_errors():
    """An invalid URL is a ModelUnavailable, not an httpx.InvalidURL traceback (C12); a 404 on a URL
    without /v1 hints at it; a null model id is not a model named 'None' (Low)."""
    from models_server import models_server

    from kit.policy.factory import ModelUnavailable, check_endpoint, make_policy, served_models

    for bad in ("http://[::1", "localhost:8000/v1", "ftp://127.0.0.1/v1"):
        with pytest.raises(ModelUnavailable, match=r"endpoint .* (invalid|unreachable)"):
            served_models(bad, timeout_s=1)
        with pytest.raises(ModelUnavailable):
            make_policy("m", bad)
    with models_server(["m"]) as url:
        root = url[: -len("/v1")]
        with pytest.raises(ModelUnavailable, match=rf"HTTP 404.*did you mean {root}/v1\?"):
            served_models(root, timeout_s=1)
    with models_server(body=b'{"data": [{"id": null}, {"id": 7}, {"id": "a"}]}') as url:
        assert served_models(url, timeout_s=1) == ["a"]
        with pytest.raises(ModelUnavailable, match=r"does not serve model 'None'"):
            check_endpoint(url, "None", timeout_s=1)


def test_tiny_names_must_be_known_architectures():
    """``tiny-bogus`` is refused before anything is built (C13)."""
    from kit.models.tiny import ARCHS
    from kit.policy.factory import ModelUnavailable, local_model_problem, make_policy

    problem = local_model_problem("tiny-bogus")
    assert problem and "tiny-bogus" in problem and all(a in problem for a in ARCHS)
    with pytest.raises(ModelUnavailable, match="tiny-bogus"):
        make_policy("tiny-bogus")
    assert all(local_model_problem(f"tiny-{a}") is None for a in ARCHS)


def test_named_expert_is_used_under_smoke(capfd):
    """Notebook 02's roles: a named expert (or RL policy) is used under the smoke profile too, and the
    run is not labelled offline or tiny (H4); nothing named under smoke is the offline chain."""
    from models_server import closed_port_url, models_server

    from kit.policy.factory import ModelUnavailable, synthesis_policies

    off = synthesis_policies("smoke", "", "")
    assert off.offline and off.expert is None and off.rl is None and off.labels == ["synthetic-offline", "smoke"]
    assert off.manifest_model()["smoke"] is True
    with models_server(["kimi-fake"]) as url:
        r = synthesis_policies("smoke", url, "kimi-fake")
        assert not r.offline and r.expert.model == "kimi-fake" and r.rl is r.expert
        assert r.labels == ["expert:kimi-fake", "smoke-budgets"] and r.manifest_model() == {
            "smoke": False, "model": "kimi-fake", "expert_endpoint": url, "rl_model": "kimi-fake"}
        rl_only = synthesis_policies("smoke", "", "", url, "kimi-fake")
        assert rl_only.offline and rl_only.expert is None and rl_only.rl.model == "kimi-fake"
        assert synthesis_policies("paper", url, "kimi-fake").labels == ["expert:kimi-fake"]
        with pytest.raises(ModelUnavailable, match="does not serve model 'other'"):
            synthesis_policies("smoke", url, "other")
    with pytest.raises(ModelUnavailable, match="unreachable"):
        synthesis_policies("smoke", closed_port_url(), "m")
    with pytest.raises(ModelUnavailable, match="paper profile needs expert_endpoint and expert_model"):
        synthesis_policies("paper", "", "")
    with pytest.raises(ModelUnavailable, match="expert_model='m' is set but expert_endpoint is empty"):
        synthesis_policies("smoke", "", "m")


def test_notebook_02_takes_its_expert_from_the_named_roles():
    """Notebook 02 chooses the expert and RL policy by what is named (synthesis_policies), never by the
    profile alone: no cell builds the offline stand-ins on ``SMOKE`` (H4)."""
    import re

    import nbformat

    from kit.paths import PROJECT_ROOT

    nb = nbformat.read(str(PROJECT_ROOT / "notebooks" / "02_data_synthesis.ipynb"), as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "synthesis_policies(P, expert_endpoint, expert_model, rl_endpoint, rl_model" in code
    assert not re.search(r"if (not )?SMOKE( else|:)\s*\n?\s*(def rl_harness|solver|from kit.data.expert)", code)
    assert "OfflineVQAConverter() if OFFLINE" in code and "offline=SMOKE" not in code
    assert '"smoke": SMOKE' not in code and "roles.manifest_model()" in code and "roles.labels" in code


def test_one_bm25_engine_in_the_runtime_path():
    """The extractive summarizer ranks with tantivy, the engine of the local web's search (issue 15 part 6):
    no kit module imports another BM25 library; stemming and stop words work as in the search index."""
    import ast
    from pathlib import Path

    from kit.harness.summarize import bm25_block_scores

    root = Path(__file__).resolve().parents[1] / "kit"
    others = {"bm25s", "rank_bm25", "rank-bm25"}
    found = [f"{p.relative_to(root)}:{n.lineno}" for p in root.rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, (ast.Import, ast.ImportFrom))
             and ({a.name.split(".")[0] for a in n.names} if isinstance(n, ast.Import) else {(n.module or "").split(".")[0]})
             & others]
    assert found == []
    blocks = ["Telescopes observing the sky", "The observatory was founded in 1945.", "The and of the a"]
    s = bm25_block_scores(blocks, "Which telescope observed the sky?")
    assert s[0] > 0 and s[1] == 0 and s[2] == 0  # "telescope" ~ "Telescopes", "observed" ~ "observing"; stop words score 0
    assert bm25_block_scores(blocks, "the and of") == [0.0, 0.0, 0.0]
    assert bm25_block_scores([], "x") == []
