"""Harness hooks (issue 30 part 2): guardrails written outside the kit — a domain blocklist, a search budget
that stops the episode, a rewrite, an observation filter, an end-of-episode inspector — run on real episodes
against the local web (ZIM archives) with a scripted policy; the kit's own pre-call rules run first as built-in
hooks and leave every existing record unchanged; a failing hook is an error record naming it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from urllib.parse import urlsplit

import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.hooks import Call, Decision, EpisodeView, Hook
from kit.harness.loop import Harness
from kit.harness.transcript import write_transcript
from kit.paths import zim_paths
from kit.policy.scripted import ScriptedPolicy, tool_call_text

OLD = "wikipedia_en_ray_charles_2015-06"  # two archives hold a Ray Charles page: block (or redirect) the old one
NEW = "wikipedia_en_ray_charles_maxi_2023-09"
OLD_URL, NEW_URL = f"zim://{OLD}/A/Ray_Charles.html", f"zim://{NEW}/A/Ray_Charles"
ANSWER = "<think>enough</think><response>Ray Charles</response>"
TASK = Task(id="rc", question="Who recorded the album 'Genius Loves Company'?", answers=["Ray Charles"])


def call(name, args):
    return "<think>next</think>" + tool_call_text(name, args)


# ---------------------------------------------------------------- guardrails a researcher writes outside the kit
class BlockDomains(Hook):
    """Deny any call that would open a page of a blocked domain (for the local web: an archive)."""

    name = "block_domains"

    def __init__(self, *domains: str):
        self.domains = frozenset(domains)

    def before_call(self, call: Call, episode: EpisodeView) -> Decision | None:
        blocked = [u for u in call.urls if urlsplit(u).hostname in self.domains]
        if blocked:
            return Decision.deny(f"Blocked: {', '.join(blocked)} is on a blocked domain; use another source.",
                                 reason="blocked domain")
        return None


def search_budget(n: int):
    def stop_after_searches(call: Call, episode: EpisodeView) -> Decision | None:
        if call.name == "web_search" and episode.executed("web_search") >= n:
            return Decision.stop(f"You have used all {n} searches.")
        return None

    return stop_after_searches


class RedirectArchive(Hook):
    """Rewrite URLs of an old archive to its newer copy."""

    name = "redirect_archive"

    def before_call(self, call, episode):
        if any(OLD in u for u in call.urls):
            return Decision.rewrite(arguments={**call.arguments, "urls": [u.replace(f"zim://{OLD}/A/Ray_Charles.html",
                                                                                   NEW_URL) for u in call.urls]})
        return None


class Recording:
    """The local web, recording what it was asked to fetch."""

    def __init__(self, web):
        self.web, self.fetched = web, []
        self.name = web.name

    def __getattr__(self, attr):
        return getattr(self.web, attr)

    async def fetch(self, url):
        self.fetched.append(url)
        return await self.web.fetch(url)


@pytest.fixture(scope="module")
def local_web(data_dir):
    from kit.web.zim import LocalZimWeb

    return LocalZimWeb(zim_paths(data_dir))


def run(script, backend, tmp_path, hooks=(), **cfg):
    policy = ScriptedPolicy(list(script))
    harness = Harness(policy, backend, HarnessConfig(max_turns=cfg.pop("max_turns", 6), **cfg), hooks=hooks)
    return asyncio.run(harness.run(TASK, tmp_path / "ws")), policy


def tool_messages(rec):
    return [m for m in rec.messages if m.role == "tool"]


# -------------------------------------------------------------------------------------- on the local web
def test_a_domain_blocklist_denies_the_fetch_with_its_observation(tmp_path, local_web):
    web = Recording(local_web)
    script = [call("web_search", {"query": "Ray Charles"}),
              call("web_extract", {"urls": OLD_URL, "goal": "albums"}),  # a scalar: repaired before the hook sees it
              call("web_extract", {"urls": [NEW_URL], "goal": "albums"}), ANSWER]
    rec, _ = run(script, web, tmp_path, hooks=[BlockDomains(OLD)])
    assert rec.status == "answered" and rec.trainable and rec.tool_calls == 2
    assert web.fetched == [NEW_URL]  # the blocked page was never opened
    search, denied, extract = tool_messages(rec)
    assert OLD_URL in search.text() and not search.intervention  # the search itself offered the blocked page
    assert denied.name == "web_extract" and denied.intervention
    assert denied.text() == f"Blocked: {OLD_URL} is on a blocked domain; use another source."
    assert "Ray Charles" in extract.text() and not extract.intervention
    hook_events = [(e.type, e.turn, e.detail) for e in rec.events if e.type in ("argument_repair", "hook_denied")]
    assert hook_events == [("argument_repair", 2, {"tool": "web_extract", "repairs": ["scalar_to_list:urls"]}),
                           ("hook_denied", 2, {"hook": "block_domains", "tool": "web_extract", "reason": "blocked domain"})]
    html = write_transcript(rec, tmp_path / "t.html").read_text()
    assert "hook_denied" in html and "block_domains" in html  # visible in the transcript


def test_a_search_budget_stops_into_the_synthesis_turn(tmp_path, local_web):
    script = [call("web_search", {"query": "Ray Charles"}), call("web_search", {"query": "Genius Loves Company"}),
              call("web_search", {"query": "Ray Charles duets"}), ANSWER]
    rec, policy = run(script, local_web, tmp_path, hooks=[search_budget(2)], max_turns=8)
    assert rec.status == "max_turns_synthesis" and rec.final_response == "Ray Charles" and rec.trainable
    assert rec.tool_calls == 2 and rec.turns == 4
    stopped = tool_messages(rec)[-1]
    assert stopped.intervention and stopped.text() == "Not executed: You have used all 2 searches."
    types = [e.type for e in rec.events]
    assert types[-2:] == ["hook_stop", "synthesis_requested"]
    assert rec.events[-2].detail == {"hook": "stop_after_searches", "tool": "web_search",
                                     "reason": "You have used all 2 searches."}
    assert rec.events[-1].detail == {"reason": "hook_stop"} and rec.events[-1].turn == 3
    prompt = [m for m in rec.messages if m.role == "user"][-1]
    assert prompt.intervention and prompt.text().startswith("You have used all 2 searches. Tools are now disabled.")
    assert policy.calls[-1]["tools"] == [] and policy.calls[-2]["tools"]  # the last turn had no tools


def test_without_self_recovery_a_stop_ends_like_a_budget(tmp_path, local_web):
    script = [call("web_search", {"query": "Ray Charles"}), call("web_search", {"query": "Ray Charles duets"})]
    rec, policy = run(script, local_web, tmp_path, hooks=[search_budget(1)], self_recovery=False)
    assert rec.status == "budget_exhausted" and not rec.trainable and len(policy.calls) == 2
    assert [e.type for e in rec.events][-2:] == ["hook_stop", "budget_exhausted"]
    assert rec.error == "hook_stop: You have used all 1 searches."


def test_a_rewrite_runs_the_rewritten_call_which_the_duplicate_rule_then_remembers(tmp_path, local_web):
    web = Recording(local_web)
    script = [call("web_extract", {"urls": [OLD_URL], "goal": "albums"}),
              call("web_extract", {"urls": [NEW_URL], "goal": "albums"}), ANSWER]
    rec, _ = run(script, web, tmp_path, hooks=[RedirectArchive()])
    assert rec.status == "answered" and web.fetched == [NEW_URL] and rec.tool_calls == 1
    [rw] = [e for e in rec.events if e.type == "hook_rewrite"]
    assert rw.detail == {"hook": "redirect_archive", "tool": "web_extract", "new_tool": "web_extract",
                         "arguments": {"urls": [NEW_URL], "goal": "albums"}}
    extracted, dup = tool_messages(rec)
    assert "Ray Charles" in extracted.text() and not extracted.intervention
    # the model's next call equals what ran: the built-in duplicate rule suppresses it
    assert dup.intervention and [e.type for e in rec.events if e.turn == 2] == ["duplicate_suppressed"]


def test_an_observation_hook_replaces_text_before_the_kit_result_policy(tmp_path, local_web):
    class Redact(Hook):
        name = "redact"

        def after_observation(self, call, observation, episode):
            assert episode.calls == 1 and call.name == "web_search"
            return "<|im_end|>" + observation.replace("Ray Charles", "[name]") + "x" * 200

    rec, _ = run([call("web_search", {"query": "Ray Charles"}), ANSWER], local_web, tmp_path, hooks=[Redact()],
                 persist_threshold_chars=100, persist_preview_chars=60)
    obs = tool_messages(rec)[0]
    assert "[name]" in obs.text() and "Ray Charles" not in obs.text()
    types = [e.type for e in rec.events]
    assert types.index("hook_observation") < types.index("result_persisted")  # still persisted and previewed
    assert "control_tokens_neutralized" in types  # the hook's text is cleaned like any result
    saved = (tmp_path / "ws" / "tool_results" / "turn01_web_search.txt").read_text()
    assert "[name]" in saved and "Ray Charles" not in saved
    [ev] = [e for e in rec.events if e.type == "hook_observation"]
    assert ev.detail["hook"] == "redact" and ev.detail["tool"] == "web_search" and ev.detail["new_chars"] == len(saved)


# ------------------------------------------------------------------------------- failures, order, contracts
class Explodes(Hook):
    name = "exploding"

    def __init__(self, point):
        self.point = point

    def before_call(self, call, episode):
        if self.point == "before_call":
            raise RuntimeError("boom")

    def after_observation(self, call, observation, episode):
        if self.point == "after_observation":
            raise RuntimeError("boom")

    def episode_end(self, record):
        if self.point == "episode_end":
            raise RuntimeError("boom")


@pytest.mark.parametrize("point", ["before_call", "after_observation", "episode_end"])
def test_a_hook_that_raises_ends_the_episode_as_an_error_naming_it(tmp_path, memory_backend, point):
    seen = []

    class Inspector(Hook):
        def episode_end(self, record):
            seen.append(record.status)

    rec, _ = run([call("web_search", {"query": "eiffel"}), ANSWER], memory_backend, tmp_path,
                 hooks=[Explodes(point), Inspector()])
    assert rec.status == "error" and not rec.trainable
    assert rec.error == f"hook 'exploding' failed in {point}: RuntimeError: boom"
    assert rec.events[-1].type == "episode_error" and rec.events[-1].detail == {"reason": rec.error}
    assert seen == ["error"]  # later end hooks still run, and see the failure
    assert [c[0] for c in memory_backend.calls] == ([] if point == "before_call" else ["search"])
    json.loads(rec.model_dump_json())


@pytest.mark.parametrize("bad, message", [
    (lambda c, e: True, "returned bool, not a Decision"),
    (lambda c, e: Decision.rewrite(arguments={"nope": 1}), "rewrote the call to an invalid one (missing_argument)"),
])
def test_an_unusable_decision_is_the_hooks_error(tmp_path, memory_backend, bad, message):
    rec, _ = run([call("web_search", {"query": "eiffel"}), ANSWER], memory_backend, tmp_path, hooks=[bad])
    assert rec.status == "error" and "hook '<lambda>' failed in before_call" in rec.error and message in rec.error
    assert memory_backend.calls == []


def test_builtin_rules_run_first_and_hooks_see_canonical_calls(tmp_path, memory_backend):
    seen = []

    async def watch(call, episode):  # an async function is a before_call hook too
        seen.append((call.name, dict(call.arguments), episode.turn, episode.calls))

    script = [call("nope", {}), call("Web-Search", {"q": "a"}), call("web_search", {"query": "a"}),
              call("web_search_for_image", {"query": "tower"}), ANSWER]
    rename = lambda c, e: Decision.rewrite("web_search", {"query": c.arguments["query"]}) \
        if c.name == "web_search_for_image" else None  # noqa: E731
    rec, _ = run(script, memory_backend, tmp_path, hooks=[rename, watch])
    # the invalid call and the duplicate never reach the harness's hooks; aliases and defaults are resolved
    assert seen == [("web_search", {"query": "a", "num": 3}, 2, 0), ("web_search", {"query": "tower", "num": 3}, 4, 1)]
    assert [m.name for m in tool_messages(rec)] == ["nope", "web_search", "web_search", "web_search"]
    assert [e.detail["new_tool"] for e in rec.events if e.type == "hook_rewrite"] == ["web_search"]
    assert [c[0] for c in memory_backend.calls] == ["search", "search"]


def test_hooks_keep_no_episode_state_and_concurrent_episodes_count_their_own(tmp_path, memory_backend):
    harness = Harness(ScriptedPolicy(lambda msgs, tools: call("web_search", {"query": f"q{len(msgs)}"}) if tools
                                     else ANSWER), memory_backend, HarnessConfig(max_turns=9), hooks=[search_budget(3)])
    assert isinstance(harness.hooks, list) and len(harness.hooks) == 1

    async def both():
        return await asyncio.gather(*(harness.run(Task(id=str(i), question="?"), tmp_path / str(i)) for i in range(2)))

    for rec in asyncio.run(both()):
        assert rec.status == "max_turns_synthesis" and rec.tool_calls == 3
        assert [e.type for e in rec.events][-2:] == ["hook_stop", "synthesis_requested"]


def test_a_pass_through_hook_leaves_every_record_unchanged(tmp_path, memory_backend):
    class Passive(Hook):
        pass

    scripts = [[call("nope", {"a": 1}), call("nope", {"a": 1}), call("web_search", {"q": "a", "x": 1}),
                call("web_search", {"query": "a"}), "no action", ANSWER],
               [call("web_search", {"query": "fail"}), call("web_search_for_image", {"query": "tower"}), ANSWER]]
    for i, script in enumerate(scripts):
        for cfg in ({}, {"self_recovery": False}):
            recs = []
            for hooks in ((), (Passive(), lambda c, e: None)):
                rec, _ = run(script, memory_backend, tmp_path / f"{i}{len(hooks)}{len(cfg)}", hooks=hooks,
                             prompt_time="2025-01-01T00:00:00+00:00", **cfg)
                recs.append(rec.model_dump(exclude={"timings", "workspace", "id"}))
            assert recs[0] == recs[1]


def test_decisions_are_frozen_and_checked():
    d = Decision.deny("no")
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.action = "allow"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Decision.rewrite(arguments={"query": "a"}).arguments["query"] = "b"  # type: ignore[index]
    for bad in (lambda: Decision.deny(""), lambda: Decision.rewrite(), lambda: Decision.stop(""),
                lambda: Decision("allow", name="x"), lambda: Decision("deny", observation="x", end="invalid_action"),
                lambda: Decision("block")):  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            bad()
    assert Decision.allow().action == "allow" and Decision.stop("Enough.").observation == "Not executed: Enough."
    with pytest.raises(TypeError, match="a hook needs"):
        Harness(ScriptedPolicy([]), None, hooks=[42])  # type: ignore[arg-type]


def test_the_docs_hooks_example_runs_as_written(tmp_path, data_dir, monkeypatch):
    import pathlib
    import re

    page = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "harness.md").read_text()
    code = re.search(r"^## Hooks\n.*?^```python\n(.*?)^```", page, re.S | re.M).group(1)
    assert sum(1 for line in code.splitlines() if line.strip()) <= 15
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code, "docs/harness.md", "exec"), ns)  # its last line asserts the hook events and the status
    assert ns["rec"].final_response == "Ray Charles"
