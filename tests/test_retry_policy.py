"""One retry policy (kit.web.retry) for the fetcher, the OpenAI-compatible client, ZIM downloads and the
expert: the policy's arithmetic, the time budget, each caller retrying a transient failure and stopping
on a permanent one, and an ast check that no other kit module builds its own retry loop."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest

from kit.data.expert import DEFAULT_RETRY as EXPERT_RETRY
from kit.data.expert import ExpertError, with_retries
from kit.policy.openai_client import DEFAULT_RETRY as CLIENT_RETRY
from kit.policy.openai_client import OpenAIChatPolicy
from kit.policy.scripted import CharTokenCounter
from kit.types import BackendError, ContentPart, Message, PolicyError, SamplingParams
from kit.web import retry as retry_module
from kit.web.budget import time_budget
from kit.web.kiwix import DEFAULT_RETRY as ZIM_RETRY
from kit.web.retry import RetryableHTTPStatus, RetryConfig, RetryError, budget_stopped, retrying

KIT = Path(__file__).resolve().parents[1] / "kit"
HELPER = KIT / "web" / "retry.py"


def _recorder():
    delays: list[float] = []

    async def sleep(s: float) -> None:
        delays.append(s)

    return delays, sleep


# ------------------------------------------------------------------------------------ the policy
def test_backoff_retry_after_jitter_and_validation():
    p = RetryConfig(backoff_initial_s=0.5, backoff_max_s=3.0, retry_after_cap_s=10.0)
    assert [p.wait_s(k) for k in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    hurried = RetryableHTTPStatus("u", 429, "", retry_after=60.0)
    assert p.wait_s(1, hurried) == 10.0  # Retry-After replaces the back-off, capped
    assert p.with_(honour_retry_after=False).wait_s(1, hurried) == 0.5
    jittered = p.with_(jitter_s=0.25)
    waits = [jittered.wait_s(2) for _ in range(200)]
    assert all(1.0 <= w < 1.25 for w in waits) and len(set(waits)) > 1
    assert p.attempts == 3 and p.with_(max_retries=None).attempts == 3  # None: a shorthand left unset
    with pytest.raises(ValueError):
        p.with_(max_retries=-1)
    with pytest.raises(ValueError):  # frozen: one policy object, changed only through with_()
        p.max_retries = 5  # type: ignore[misc]
    assert p.retries_status(503) and p.retries_status(408) and not p.retries_status(404)
    assert p.with_(retry_statuses=frozenset({418})).retries_status(418)
    assert not p.is_retryable(BackendError("x", retryable=True))  # not in retry_on
    assert not EXPERT_RETRY.is_retryable(ExpertError("dead end", retryable=False))


def test_caller_defaults_are_the_documented_ones():
    web = RetryConfig()
    assert (web.attempts, web.backoff_initial_s, web.backoff_max_s, web.retry_after_cap_s, web.attempt_timeout_s) == \
        (3, 0.5, 20.0, 30.0, 60.0) and web.honour_time_budget
    assert (CLIENT_RETRY.attempts, CLIENT_RETRY.backoff_initial_s, CLIENT_RETRY.backoff_max_s,
            CLIENT_RETRY.retry_after_cap_s, CLIENT_RETRY.honour_time_budget) == (4, 1.0, 30.0, 60.0, False)
    assert (ZIM_RETRY.attempts, ZIM_RETRY.backoff_initial_s, ZIM_RETRY.backoff_max_s) == (4, 1.0, 30.0)
    assert (EXPERT_RETRY.attempts, EXPERT_RETRY.backoff_initial_s, EXPERT_RETRY.backoff_max_s) == (3, 0.5, 5.0)
    for doc in ("fetcher", "OpenAI-compatible client", "ZIM downloads", "expert"):
        assert doc in retry_module.__doc__


def test_sync_helper_stops_at_the_time_budget():
    slept: list[float] = []
    calls = []
    policy = RetryConfig(max_retries=5, backoff_initial_s=1.0, sync_sleep=slept.append)
    with time_budget(0.2):
        r = retrying(policy)
        with pytest.raises(RetryError):
            for attempt in r:
                with attempt:
                    calls.append(1)
                    raise httpx.ConnectError("down")
    assert calls == [1] and slept == [] and budget_stopped(r)  # a 1 s wait would pass the 0.2 s budget
    # the same policy told to ignore the budget retries as configured
    calls.clear()
    with time_budget(0.2):
        r = retrying(policy.with_(honour_time_budget=False, max_retries=2))
        with pytest.raises(RetryError):
            for attempt in r:
                with attempt:
                    calls.append(1)
                    raise httpx.ConnectError("down")
    assert calls == [1, 1, 1] and slept == [1.0, 2.0] and not budget_stopped(r)


# ------------------------------------------------------------------------------------ callers
async def test_fetcher_policy_transient_then_permanent():
    delays, sleep = _recorder()
    policy = RetryConfig(max_retries=2, backoff_initial_s=0.01, sleep=sleep)
    n = []

    async def flaky():
        n.append(1)
        if len(n) == 1:
            raise RetryableHTTPStatus("u", 503, "busy", retry_after=None)
        return "ok"

    assert await policy.run("GET u", flaky) == "ok" and len(n) == 2 and delays == [0.01]

    async def gone():
        n.append(1)
        raise BackendError("HTTP 404 from u")

    n.clear()
    with pytest.raises(BackendError, match="404"):
        await policy.run("GET u", gone)
    assert len(n) == 1


def _msg():
    return [Message(role="user", content=[ContentPart(type="text", text="q")])]


def _ok(request):
    return httpx.Response(200, json={"id": "c", "model": "m", "usage": {"prompt_tokens": 1, "completion_tokens": 1},
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": "fine"}}]})


async def test_openai_client_takes_a_policy_object():
    delays, sleep = _recorder()
    statuses = [418, 200]  # a policy that (for this test) retries 418 and nothing else

    def handler(request):
        s = statuses.pop(0)
        return _ok(request) if s == 200 else httpx.Response(s, text="teapot")

    policy = RetryConfig(max_retries=1, backoff_initial_s=0.02, retry_statuses=frozenset({418}), sleep=sleep,
                         retry_on=CLIENT_RETRY.retry_on, attempt_timeout_s=None)
    async with OpenAIChatPolicy("http://t/v1", "m", token_counter=CharTokenCounter(), retry=policy,
                                transport=httpx.MockTransport(handler)) as p:
        assert (await p.generate(_msg(), [], SamplingParams())).text == "fine"
    assert delays == [0.02] and p.max_retries == 1
    # 503 is not in this policy's statuses: permanent, one request
    n = []

    def down(request):
        n.append(1)
        return httpx.Response(503, text="busy")

    async with OpenAIChatPolicy("http://t/v1", "m", token_counter=CharTokenCounter(), retry=policy,
                                transport=httpx.MockTransport(down)) as p:
        with pytest.raises(PolicyError, match="HTTP 503.*not retried") as ei:
            await p.generate(_msg(), [], SamplingParams())
    assert len(n) == 1 and not ei.value.retryable


async def test_openai_client_does_not_stop_at_the_episode_budget():
    """The harness labels an episode whose wall clock ends during a policy call ``wall_clock``; the
    client keeps retrying inside the budget instead of failing early as ``error``."""
    delays, sleep = _recorder()
    codes = [503, 200]
    async with OpenAIChatPolicy("http://t/v1", "m", token_counter=CharTokenCounter(), sleep=sleep,
                                transport=httpx.MockTransport(
                                    lambda r: _ok(r) if codes.pop(0) == 200 else httpx.Response(503))) as p:
        with time_budget(0.5):
            assert (await p.generate(_msg(), [], SamplingParams())).text == "fine"
    assert delays == [1.0]  # the default 1 s back-off, although the budget is 0.5 s


async def test_expert_with_retries_transient_permanent_and_policy():
    n = []

    async def flaky():
        n.append(1)
        if len(n) < 3:
            raise PolicyError("endpoint 503", retryable=True)
        return "hop"

    assert await with_retries(flaky, 3, wait_s=0.001) == "hop" and len(n) == 3

    async def dead_end():
        n.append(1)
        raise ExpertError("no predecessor", retryable=False, reason="no_predecessor")

    n.clear()
    with pytest.raises(ExpertError, match="no predecessor"):
        await with_retries(dead_end, 5, wait_s=0.001)
    assert len(n) == 1

    delays, sleep = _recorder()

    async def down():
        raise ExpertError("503", retryable=True)

    with pytest.raises(ExpertError):
        await with_retries(down, retry=EXPERT_RETRY.with_(sleep=sleep), attempts=None, wait_s=None)
    assert delays == [0.5, 1.0]  # the documented defaults: 3 attempts, 0.5 s doubling


# ------------------------------------------------------------------------------------ one helper
def _kit_modules():
    words = ("tenacity", "Retrying", "sleep")  # only these files can hold a retry loop: parse just them
    return [p for p in KIT.rglob("*.py") if p != HELPER and any(w in p.read_text(encoding="utf-8") for w in words)]


def _loops_that_sleep_and_catch(tree: ast.AST):
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
            continue
        nodes = list(ast.walk(loop))
        sleeps = any(isinstance(n, ast.Call) and (getattr(n.func, "attr", None) == "sleep" or
                                                   getattr(n.func, "id", None) == "sleep") for n in nodes)
        catches = any(isinstance(n, ast.ExceptHandler) for n in nodes)
        if sleeps and catches:
            yield loop.lineno


def test_no_kit_module_builds_its_own_retry_loop():
    offenders = []
    for path in _kit_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(KIT.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tenacity":
                offenders.append(f"{rel}:{node.lineno} imports tenacity")
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tenacity" for a in node.names):
                offenders.append(f"{rel}:{node.lineno} imports tenacity")
            elif isinstance(node, ast.Call) and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) \
                    in ("Retrying", "AsyncRetrying"):
                offenders.append(f"{rel}:{node.lineno} builds a tenacity {ast.unparse(node.func)}")
        offenders += [f"{rel}:{line} sleeps inside a loop that catches errors" for line in
                      _loops_that_sleep_and_catch(tree)]
    assert offenders == [], "retry through kit.web.retry (retrying / async_retrying):\n" + "\n".join(offenders)


def test_the_ast_check_sees_a_hand_rolled_retry_loop():
    src = ("import asyncio\nasync def f(g):\n    for i in range(3):\n        try:\n            return await g()\n"
           "        except OSError:\n            await asyncio.sleep(2 ** i)\n")
    assert list(_loops_that_sleep_and_catch(ast.parse(src))) == [3]
