"""Fault injection in the search, fetch, summarizer and policy backends (issue "Harness under
attack", part 6). Real HTTP servers on 127.0.0.1 misbehave on purpose: 429 with Retry-After, 5xx,
connection resets, slow bodies, malformed JSON, a policy server that dies mid-run and comes back.
Every episode must end with a recorded status, retries must respect the time budget, and request
loops stay bounded."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.harness.runner import read_episodes, run_batch
from kit.harness.summarize import LLMSummarizer
from kit.policy.openai_client import OpenAIChatPolicy
from kit.policy.scripted import CharTokenCounter, ScriptedPolicy, tool_call_text
from kit.types import BackendError
from kit.web.fetch import HttpFetcher, RetryConfig, time_budget
from kit.web.live import SerperBackend
from tests.conftest import MemoryBackend
from tests.test_fetch_safety import LocalServer, html, reset_connection, slow_body

STATUSES = {"answered", "max_turns_synthesis", "context_limit", "wall_clock", "error"}


def quick_retry(**kw) -> RetryConfig:
    return RetryConfig(**{"max_retries": 3, "backoff_initial_s": 0.02, "backoff_max_s": 0.1, "attempt_timeout_s": 1.0,
                          **kw})


def serper_json(hits: list[tuple[str, str]]) -> bytes:
    return json.dumps({"organic": [{"title": t, "link": u, "snippet": "s"} for t, u in hits]}).encode()


class Plan:
    """A fault schedule: an explicit list (then ``default``), or random draws from ``weights``."""

    def __init__(self, items=(), default: str = "ok", weights: dict[str, float] | None = None, seed: int = 0):
        self.items, self.default, self.weights = list(items), default, weights
        self.rng = random.Random(seed)
        self.n = 0

    def next(self) -> str:
        self.n += 1
        if self.items:
            return self.items.pop(0)
        if self.weights:
            return self.rng.choices(list(self.weights), list(self.weights.values()))[0]
        return self.default


def faulty(plan: Plan, ok, *, retry_after: str = "0.05"):
    """A route that applies the plan's next fault, or answers with ``ok(handler)``."""

    def route(h):
        fault = plan.next()
        if fault == "ok":
            return ok(h)
        if fault == "reset":
            return reset_connection(h)
        if fault == "slow":  # a trickling body: no single read waits long, the whole takes 3 s
            return slow_body(h, content_type="application/json", chunk=b" ", delay=0.2, chunks=15)
        status, headers, body = {
            "429": (429, {"retry-after": retry_after}, b'{"error": "rate limited"}'),
            "500": (500, {}, b"internal error"),
            "503": (503, {}, b"unavailable"),
            "malformed": (200, {"content-type": "application/json"}, b'{"choices": [{"message": '),
        }[fault]
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("content-length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return route


def send_json(h, obj, status: int = 200) -> None:
    body = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


class ChatAgent:
    """The policy server's behaviour (OpenAI ``/chat/completions``): with tools, first a
    ``web_search``, then a ``web_extract`` of ``page_url``, then an answer; without tools (the
    summarizer), a summary."""

    def __init__(self, page_url: str = "https://example.org/eiffel"):
        self.page_url = page_url
        self.requests = 0

    def __call__(self, h) -> None:
        self.requests += 1
        body = json.loads(h.body or b"{}")
        tools_done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        if not body.get("tools"):
            message = {"role": "assistant", "content": "LLM-SUMMARY: the tower opened in 1889."}
        elif tools_done == 0:
            message = self._call("web_search", {"query": "eiffel tower opening"})
        elif tools_done == 1:
            message = self._call("web_extract", {"urls": [self.page_url], "goal": "opening year"})
        else:
            message = {"role": "assistant", "content": "<think>done</think><response>1889</response>"}
        send_json(h, {"id": "x", "model": "m", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 10, "completion_tokens": 5}})

    @staticmethod
    def _call(name: str, args: dict) -> dict:
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def chat_policy(url: str, **kw) -> OpenAIChatPolicy:
    return OpenAIChatPolicy(url, "m", api_key="", token_counter=CharTokenCounter(),
                            **{"max_retries": 3, "backoff_initial_s": 0.02, "backoff_max_s": 0.1, "timeout_s": 2.0, **kw})


# ==================================================================================================
# Search backend
# ==================================================================================================
async def test_search_retries_429_5xx_and_resets_then_succeeds():
    plan = Plan(["429", "503", "reset"])
    ok = lambda h: send_json(h, json.loads(serper_json([("Eiffel", "https://example.org/eiffel")])))  # noqa: E731
    with LocalServer({"/search": faulty(plan, ok)}) as srv:
        async with SerperBackend(api_key="k", base_url=srv.url(""), retry=quick_retry()) as s:
            hits = await s.search("eiffel", 3)
    assert [h.url for h in hits] == ["https://example.org/eiffel"] and srv.hits("/search") == 4


async def test_retry_after_beyond_the_budget_fails_at_once():
    plan = Plan(default="429")
    with LocalServer({"/search": faulty(plan, None, retry_after="120")}) as srv:
        async with SerperBackend(api_key="k", base_url=srv.url(""),
                                 retry=RetryConfig(max_retries=5, retry_after_cap_s=120)) as s:
            t0 = time.monotonic()
            with time_budget(3.0):
                with pytest.raises(BackendError, match="time budget") as ei:
                    await s.search("eiffel", 3)
            assert time.monotonic() - t0 < 1.5 and ei.value.retryable
            assert srv.hits("/search") == 1  # no second request: the wait would outlast the budget
            t0 = time.monotonic()
            s.retry = RetryConfig(max_retries=5, backoff_initial_s=0.4, max_total_s=1.0)
            plan.default = "503"
            with pytest.raises(BackendError, match="time budget"):
                await s.search("eiffel", 3)
            assert time.monotonic() - t0 < 1.5


async def test_budget_cuts_a_hanging_attempt():
    with LocalServer({"/search": faulty(Plan(default="slow"), None)}) as srv:
        async with SerperBackend(api_key="k", base_url=srv.url(""), timeout_s=30, retry=quick_retry()) as s:
            t0 = time.monotonic()
            with time_budget(0.5):
                with pytest.raises(BackendError, match="time budget"):
                    await s.search("eiffel", 3)
            assert time.monotonic() - t0 < 1.5


async def test_malformed_and_exhausted_search_answers_are_backend_errors():
    with LocalServer({"/search": faulty(Plan(["malformed"], default="500"), None)}) as srv:
        async with SerperBackend(api_key="k", base_url=srv.url(""), retry=quick_retry(max_retries=2)) as s:
            with pytest.raises(BackendError, match="malformed JSON"):
                await s.search("eiffel", 3)
            with pytest.raises(BackendError, match="3 attempt.*HTTP 500") as ei:
                await s.search("eiffel", 3)
            assert ei.value.retryable
        assert srv.hits("/search") == 4  # bounded: 1 + (1 + 2 retries)


# ==================================================================================================
# Fetch backend
# ==================================================================================================
async def test_fetch_faults_are_bounded_backend_errors():
    plan = Plan(["503", "reset"])
    with LocalServer({"/flaky": faulty(plan, lambda h: html_route(h, "<p>recovered page text</p>")),
                      "/slow": slow_body, "/reset": reset_connection}) as srv:
        async with HttpFetcher(allow_private_hosts=["127.0.0.1"], timeout_s=0.5, retry=quick_retry(max_retries=2)) as f:
            page = await f.fetch(srv.url("/flaky"))
            assert "recovered page text" in page.markdown and srv.hits("/flaky") == 3
            t0 = time.monotonic()
            with pytest.raises(BackendError, match="timed out") as ei:
                await f.fetch(srv.url("/slow"))
            assert ei.value.retryable and time.monotonic() - t0 < 3 * 0.5 + 1.5 and srv.hits("/slow") == 3
            with pytest.raises(BackendError, match="failed after 3 attempt"):
                await f.fetch(srv.url("/reset"))


def html_route(h, body: str) -> None:
    status, headers, data = html(body)
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


# ==================================================================================================
# Summarizer backend
# ==================================================================================================
@pytest.mark.parametrize("fault", ["500", "malformed", "reset", "429"])
async def test_summarizer_endpoint_failures_fall_back_to_extractive(fault):
    agent = ChatAgent()
    with LocalServer({"/v1/chat/completions": faulty(Plan(default=fault), agent)}) as srv:
        async with chat_policy(srv.url("/v1"), max_retries=1) as p:
            summary, how = await LLMSummarizer(p).summarize("The tower opened in 1889. " * 20, goal="opening year",
                                                           max_chars=300)
    assert how.startswith("extractive_fallback") and "1889" in summary and len(summary) <= 300
    assert srv.hits() == (1 if fault == "malformed" else 2)  # one retry (none for a bad answer), then fallback


async def test_episode_with_llm_summarizer_survives_a_dead_endpoint(tmp_path):
    srv = LocalServer({"/v1/chat/completions": ChatAgent()}).__enter__()
    srv.kill()  # nobody listens there any more
    async with chat_policy(srv.url("/v1"), max_retries=1) as dead:
        h = Harness(ScriptedPolicy([tool_call_text("web_extract", {"urls": ["https://example.org/eiffel"]}),
                                    "<response>1889</response>"]), MemoryBackend(), HarnessConfig(),
                    summarizer=LLMSummarizer(dead))
        rec = await h.run(Task(id="t", question="q"), tmp_path / "ws")
    assert rec.status == "answered" and "completed in 1889" in rec.messages[3].text()


# ==================================================================================================
# Policy backend
# ==================================================================================================
@pytest.mark.parametrize("fault,status,needle", [
    ("malformed", "error", "malformed JSON"),
    ("500", "error", "HTTP 500"),
    ("reset", "error", "failed after"),
    ("429", "answered", None),
])
async def test_policy_faults_end_with_a_recorded_status(tmp_path, fault, status, needle):
    plan = Plan([fault] * 4)  # more than the retries for every fault
    agent = ChatAgent()
    with LocalServer({"/v1/chat/completions": faulty(plan, agent)}) as srv:
        async with chat_policy(srv.url("/v1"), max_retries=4 if fault == "429" else 2) as p:
            rec = await Harness(p, MemoryBackend(), HarnessConfig(wall_clock_s=20)).run(Task(id="t", question="q"),
                                                                                        tmp_path / "ws")
    assert rec.status == status, rec.error
    if needle:
        assert needle in rec.error and not rec.trainable
    else:
        assert rec.final_response == "1889"


async def test_policy_server_dies_mid_batch_and_comes_back(tmp_path):
    agent = ChatAgent()
    routes = {"/v1/chat/completions": agent}
    srv = LocalServer(routes).__enter__()
    port = srv.port
    state = {"killed": False, "restarted": None}

    async def outage():
        while agent.requests < 6:
            await asyncio.sleep(0.01)
        srv.kill()
        state["killed"] = True
        await asyncio.sleep(1.0)
        state["restarted"] = LocalServer(routes, port=port).__enter__()

    tasks = [Task(id=f"q{i}", question=f"question {i}") for i in range(10)]
    try:
        async with chat_policy(f"http://127.0.0.1:{port}/v1", max_retries=8, backoff_initial_s=0.05,
                               backoff_max_s=0.4) as p:
            h = Harness(p, MemoryBackend(), HarnessConfig(wall_clock_s=30))
            killer = asyncio.ensure_future(outage())
            recs = await run_batch(h, tasks, tmp_path / "run", concurrency=4, progress=False)
            await killer
    finally:
        if state["restarted"] is not None:
            state["restarted"].kill()
    assert state["killed"] and len(recs) == 10
    assert all(r.status == "answered" for r in recs), [(r.id, r.status, r.error) for r in recs]
    on_disk = read_episodes(tmp_path / "run" / "episodes.jsonl")
    assert sorted(r.id for r in on_disk) == sorted(t.id for t in tasks)


async def test_policy_server_that_stays_dead_ends_every_episode_with_error(tmp_path):
    srv = LocalServer().__enter__()
    srv.kill()
    async with chat_policy(srv.url("/v1"), max_retries=2) as p:
        t0 = time.monotonic()
        recs = await run_batch(Harness(p, MemoryBackend()), [Task(id=f"q{i}", question="q") for i in range(6)],
                               tmp_path / "run", concurrency=3, progress=False)
    assert [r.status for r in recs] == ["error"] * 6 and time.monotonic() - t0 < 10
    assert all("failed after 3 attempt" in r.error for r in recs)


# ==================================================================================================
# Everything at once
# ==================================================================================================
FAULT_WEIGHTS = {"ok": 0.72, "429": 0.06, "500": 0.05, "503": 0.05, "reset": 0.05, "malformed": 0.04, "slow": 0.03}


async def fault_batch(out_dir: Path, n: int, seed: int = 0, concurrency: int = 16) -> dict:
    """Run ``n`` episodes whose policy, search, page fetch and LLM summarizer all sit behind local
    servers that inject random faults (``FAULT_WEIGHTS``). Returns counts: ``started``,
    ``recorded`` (episodes with a status in the file), ``statuses``, ``lines_valid``."""
    chat_plan, search_plan, page_plan = (Plan(weights=FAULT_WEIGHTS, seed=seed + k) for k in range(3))
    with LocalServer() as pages, LocalServer() as api, LocalServer() as chat:
        page_url = pages.url("/eiffel")
        pages.routes["/eiffel"] = faulty(page_plan, lambda h: html_route(
            h, "<p>The Eiffel Tower was completed in 1889 for the World's Fair in Paris.</p>" * 5))
        api.routes["/search"] = faulty(search_plan, lambda h: send_json(h, json.loads(serper_json([("Eiffel", page_url)]))))
        chat.routes["/v1/chat/completions"] = faulty(chat_plan, ChatAgent(page_url))
        fetcher = HttpFetcher(allow_private_hosts=["127.0.0.1"], timeout_s=1.0, retry=quick_retry())
        async with SerperBackend(api_key="k", base_url=api.url(""), fetcher=fetcher, timeout_s=1.0,
                                 retry=quick_retry()) as backend, \
                chat_policy(chat.url("/v1"), timeout_s=1.0) as policy, \
                chat_policy(chat.url("/v1"), timeout_s=1.0) as summary_policy:
            cfg = HarnessConfig(wall_clock_s=20, tool_timeout_s=10, max_turns=6)
            h = Harness(policy, backend, cfg, summarizer=LLMSummarizer(summary_policy))
            tasks = [Task(id=f"f{i}", question="When was the Eiffel Tower completed?") for i in range(n)]
            with time_budget(600):
                await run_batch(h, tasks, out_dir, concurrency=concurrency, progress=False)
    lines = (out_dir / "episodes.jsonl").read_text().splitlines()
    valid = 0
    for line in lines:
        try:
            json.loads(line)
            valid += 1
        except ValueError:
            pass
    recs = read_episodes(out_dir / "episodes.jsonl")
    statuses: dict[str, int] = {}
    for r in recs:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return {"started": n, "recorded": sum(1 for r in recs if r.status in STATUSES), "unique": len({r.id for r in recs}),
            "statuses": statuses, "lines": len(lines), "lines_valid": valid,
            "faults_injected": sum(p.n for p in (chat_plan, search_plan, page_plan))}


async def test_every_episode_ends_with_a_recorded_status_under_random_faults(tmp_path):
    res = await fault_batch(tmp_path / "run", n=24, seed=7, concurrency=8)
    assert res["recorded"] == res["unique"] == res["lines"] == res["lines_valid"] == 24, res
    assert res["statuses"].get("answered", 0) > 0 and res["faults_injected"] > 24
