"""The model expert of the synthesis pipeline (WeAgent §4.1-4.2) on the shared ZIMs: LLMExpert hops through
the harness against a fake OpenAI-compatible endpoint (httpx.MockTransport), its provenance checks and
failure handling, and event seeds collected by a scripted expert in 5-day windows."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from kit.data.expert import ExpertError, LLMExpert
from kit.harness.config import HarnessConfig
from kit.harness.loop import Harness
from kit.policy.scripted import CharTokenCounter, ScriptedPolicy, tool_call_text

RAY = "zim://wikipedia_en_ray_charles_2015-06/A/Ray_Charles.html"


@pytest.fixture(scope="module")
def web(data_dir):
    from kit.data.pipeline import zim_paths
    from kit.web.zim import LocalZimWeb

    return LocalZimWeb(zim_paths(data_dir, ["wikipedia_en_ray_charles_2015-06"]))


def _body(content: str) -> dict:
    return {"id": "x", "model": "expert", "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                        "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}


def _text(m) -> str:
    c = m.get("content")
    return c if isinstance(c, str) else " ".join(p.get("text", "") for p in c or [] if isinstance(p, dict))


class FakeExpert:
    """A fake expert endpoint that plays the hop protocol from what the tools return: search the
    predecessor, open its page, answer with the sentence that mentions the current node. ``mode``
    makes it misbehave (unparsable / wrong evidence / leaking question / never-opened page / 500)."""

    def __init__(self, predecessor: str, mode: str = "ok"):
        self.predecessor, self.mode, self.requests = predecessor, mode, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.mode == "http500":
            return httpx.Response(500, text="upstream down")
        msgs = json.loads(request.content)["messages"]
        tools = [m for m in msgs if m["role"] == "tool"]
        if not tools:
            return httpx.Response(200, json=_body(tool_call_text("web_search", {"query": self.predecessor, "num": 3},
                                                                 "Find a page that links to the entity.")))
        last = _text(tools[-1])
        if len(tools) == 1:
            url = re.search(r"URL: (\S+)", last).group(1)
            return httpx.Response(200, json=_body(tool_call_text("web_extract", {"urls": [url], "goal": "Ray Charles"},
                                                                 "Open it.")))
        url = re.search(r"URL: (\S+)", last).group(1)
        flat = " ".join(last.replace("*", "").split())
        sent = next(s for s in re.split(r"(?<=[.!?])\s+", flat) if "Ray Charles" in s and len(s) > 30)
        obj = {"predecessor": self.predecessor, "predecessor_url": url,
               "question": f"Which bandleader hired {self.predecessor} as saxophonist and later music director?",
               "evidence": sent}
        if self.mode == "unparsable":
            return httpx.Response(200, json=_body("<response>I think it is him.</response>"))
        if self.mode == "bad_evidence":
            obj["evidence"] = "A sentence that is nowhere on the page about this musician at all."
        if self.mode == "leak":
            obj["question"] = "Which musician is Ray Charles?"
        if self.mode == "unopened":
            obj["predecessor_url"] = "zim://wikipedia_en_ray_charles_2015-06/A/Quincy_Jones.html"
        return httpx.Response(200, json=_body("<think>Found it.</think><response>" + json.dumps(obj) + "</response>"))


def _expert(tmp_path, web, fake: FakeExpert) -> LLMExpert:
    from kit.policy.openai_client import OpenAIChatPolicy

    pol = OpenAIChatPolicy("http://expert/v1", "kimi-fake", api_key="k", token_counter=CharTokenCounter(),
                           transport=httpx.MockTransport(fake), max_retries=0)
    return LLMExpert(pol, lambda: Harness(pol, web, HarnessConfig()), tmp_path)


async def test_llm_expert_hop_through_harness(tmp_path, web):
    from kit.harness.runner import read_episodes

    fake = FakeExpert("Hank Crawford")
    hop = await _expert(tmp_path, web, fake).expand_hop(RAY, "Ray Charles", avoid=set(), key="k1")
    assert hop.answer == "Ray Charles" and hop.answer_url == RAY
    assert hop.subject == "Hank Crawford" and "Hank_Crawford" in hop.subject_url
    assert "Ray Charles" in hop.evidence and "Ray Charles" not in hop.question
    eps = read_episodes(tmp_path / "hops" / "episodes.jsonl")
    assert len(eps) == 1 and hop.provenance["episode"] == eps[0].id and eps[0].tool_calls == 2
    assert hop.provenance["method"] == "llm_hop_episode"


@pytest.mark.parametrize("mode,reason", [("unparsable", "unparsable"), ("bad_evidence", "evidence_unverified"),
                                         ("leak", "answer_in_question"), ("unopened", "provenance_unverified")])
async def test_llm_expert_rejects_unverifiable_hops(tmp_path, web, mode, reason):
    with pytest.raises(ExpertError) as e:
        await _expert(tmp_path, web, FakeExpert("Hank Crawford", mode)).expand_hop(RAY, "Ray Charles", avoid=set(),
                                                                                  key="k")
    assert e.value.reason == reason and e.value.retryable


async def test_llm_expert_endpoint_failure_recorded_after_retries(tmp_path, web, data_dir):
    from kit.data.expand import expand_seeds
    from kit.data.records import Seed

    fake = FakeExpert("Hank Crawford", "http500")
    seed = Seed.model_validate({
        "id": "s_ray", "branch": "stable", "concept": "Ray Charles", "source_page": RAY, "as_of": "2026-01-01",
        "target": {"url": "x", "page_url": RAY, "page_title": "Ray Charles", "position": 1, "path": "/nonexistent",
                   "sha256": "0" * 64, "width": 1, "height": 1},
        "fact": {"kind": "tone_orientation", "question": "q", "answer": "colour, portrait"}})
    files = await expand_seeds(_expert(tmp_path, web, fake), [seed], tmp_path, depths=(2,), attempts=2)
    failed = files.failed.read()
    assert len(failed) == 1 and failed[0].attempts == 2 and fake.requests == 2  # one request per attempt, no retries inside
    assert not files.accepted.read()


async def test_llm_expert_review_and_query(tmp_path, web):
    from kit.policy.openai_client import OpenAIChatPolicy

    replies = iter(['{"consistent": true, "image_dependent": false, "reason": "caption states it"}',
                    "<response>Which colour is the first picture on the page of the singer who hired him?</response>"])
    pol = OpenAIChatPolicy("http://expert/v1", "kimi-fake", api_key="k", token_counter=CharTokenCounter(),
                           transport=httpx.MockTransport(lambda r: httpx.Response(200, json=_body(next(replies)))))
    ex = LLMExpert(pol, lambda: None, tmp_path)
    from kit.data.records import Chain, Hop, Seed, SynthTask

    seed = Seed.model_validate({
        "id": "s", "branch": "stable", "concept": "Ray Charles", "source_page": RAY, "as_of": "2026-01-01",
        "target": {"url": "x", "page_url": RAY, "page_title": "Ray Charles", "position": 1, "path": "/x",
                   "sha256": "0" * 64, "width": 1, "height": 1},
        "fact": {"kind": "tone_orientation", "question": "q", "answer": "colour, portrait"}})
    hop = Hop(subject="Hank Crawford", subject_url="u", answer="Ray Charles", answer_url=RAY, question="q?", evidence="e")
    chain = Chain(id="c", seed_id="s", depth=1, hops=[hop], anchor="Hank Crawford", anchor_url="u")
    task = SynthTask(id="t", seed_id="s", chain=chain, seed=seed, query="q", answer="a", answers=["a"],
                     modality="text_only")
    rev = await ex.review(task)
    assert rev == {"consistent": True, "image_dependent": False, "reason": "caption states it"}
    q = await ex.synthesize_query(chain, seed, "text_only")
    assert q.startswith("Which colour")


# ------------------------------------------------------------------------------------------- event seeds
def _event_script(messages, tools):
    """A scripted expert for the event branch: search, open the page, report the event with the first
    saved page image. The window and topic in the prompt decide the behaviour under test."""
    user = next(m for m in messages if m.role == "user").text()
    start, end = re.search(r"between (\S+) and (\S+)\.", user).groups()
    tool_msgs = [m for m in messages if m.role == "tool"]
    if not tool_msgs:
        return tool_call_text("web_search", {"query": "Ray Charles", "num": 3}, "Search the topic.")
    if len(tool_msgs) == 1:
        url = re.search(r"URL: (\S+)", tool_msgs[0].text()).group(1)
        return tool_call_text("web_extract", {"urls": [url], "goal": "event"}, "Open the source page.")
    obs = tool_msgs[-1].text()
    url = re.search(r"URL: (\S+)", obs).group(1)
    image = re.search(r"Page images saved: (\S+)", obs).group(1)
    obj = {"concept": "Ray Charles tribute", "definition": "A tribute concert.", "category": "music", "source_page": url,
           "event_date": start, "image": image, "fact_question": "What does the man wear over his eyes?",
           "fact_answer": "sunglasses"}
    if "finance" in user:
        obj["event_date"] = "2025-12-01"  # outside the window
    if "politics" in user:
        obj["fact_answer"] = "Ray Charles"  # stated by the page title
    if "sports" in user:
        obj["image"] = "page_image_99.png"  # never registered
    return "<think>Done.</think><response>" + json.dumps(obj) + "</response>"


async def test_collect_event_seeds_in_windows(tmp_path, web):
    from kit.data.seeds import collect_event_seeds, date_windows

    windows = date_windows("2026-01-01", "2026-01-10")
    assert [(a.isoformat(), b.isoformat()) for a, b in windows] == [("2026-01-01", "2026-01-06"),
                                                                     ("2026-01-06", "2026-01-10")]
    h = Harness(ScriptedPolicy(_event_script), web, HarnessConfig())
    topics = ["entertainment/culture", "finance", "politics/government", "sports/games"]
    files = await collect_event_seeds(h, topics, windows, tmp_path, as_of="2026-01-11T00:00:00+00:00")
    acc, rej = files.accepted.read(), files.rejected.read()
    assert len(acc) == 2 and len(rej) == 6
    assert {r.reason for r in rej} == {"event_outside_window", "answer_exposed_by_metadata", "target_unreachable"}
    for s in acc:
        assert s.branch == "event" and s.category == "music" and s.as_of.startswith("2026-01-11")
        assert s.provenance["topic"] == "entertainment/culture" and s.provenance["episode"]
        assert s.event_date in {w[0].isoformat() for w in windows}
        from pathlib import Path

        assert Path(s.target.path).is_file() and s.target.page_url == RAY and s.fact.answer == "sunglasses"
    # rerun: every (topic, window) is decided, no new episodes
    again = await collect_event_seeds(Harness(ScriptedPolicy([]), web, HarnessConfig()), topics, windows, tmp_path)
    assert len(again.accepted.read()) == 2 and len(again.rejected.read()) == 6


class GenericExpertEndpoint:
    """A fake OpenAI-compatible expert for the whole paper-profile pipeline: plays the hop protocol for
    any node (search its title, open another page among the results, quote a sentence naming the
    node), approves reviews, writes queries, and as the stage-4 solver answers without tools."""

    def __init__(self):
        self.calls = {"hop": 0, "review": 0, "query": 0, "solve": 0}

    def _reply(self, content: str) -> httpx.Response:
        return httpx.Response(200, json=_body(content))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        msgs = body["messages"]
        first_user = _text(next(m for m in msgs if m["role"] == "user"))
        if first_user.startswith("You are building a multi-hop"):
            self.calls["hop"] += 1
            title, url = re.search(r'The current entity is "(.+?)" \((\S+)\)', first_user).groups()
            tools = [_text(m) for m in msgs if m["role"] == "tool"]
            if not tools:
                return self._reply(tool_call_text("web_search", {"query": title, "num": 5}, "Who mentions it?"))
            if len(tools) == 1:
                hits = re.findall(r"^\s*\d+\. (.+)\n\s+URL: (\S+)\n(?:.*\n)*?\s+Snippet: (.*)", tools[0], re.M)
                others = [(u, snip) for t, u, snip in hits if u != url and t.strip() != title]
                other = next((u for u, snip in others if title in snip), others[0][0] if others else None)
                if other is None:
                    return self._reply("<response>no predecessor</response>")
                return self._reply(tool_call_text("web_extract", {"urls": [other], "goal": title}, "Open it."))
            page_url = re.search(r"URL: (\S+)", tools[-1]).group(1)
            page_title = re.search(r"^## (.+)$", tools[-1], re.M).group(1)
            flat = " ".join(tools[-1].split())
            at = flat.find(title, flat.find("URL: ") + len(page_url) + 6)
            if at < 0:
                return self._reply("<response>nothing found</response>")
            start = max(flat.rfind(". ", 0, at) + 2, flat.rfind("| ", 0, at) + 2, 0)
            sent = flat[start: at + len(title) + 60]  # the sentence around the mention, verbatim from the page
            return self._reply("<response>" + json.dumps({
                "predecessor": page_title, "predecessor_url": page_url, "evidence": sent,
                "question": "Which entity does the predecessor's page name in the quoted sentence?"})
                + "</response>")
        if first_user.startswith("Review this multi-hop"):
            self.calls["review"] += 1
            return self._reply('{"consistent": true, "image_dependent": true, "reason": "ok"}')
        if first_user.startswith("Write one natural"):
            self.calls["query"] += 1
            return self._reply("<response>Follow the chain from the anchor and tell me the colour and shape of the "
                               "picture at the end.</response>")
        self.calls["solve"] += 1
        return self._reply("<think>Guessing.</think><response>colour, landscape</response>")


async def test_pipeline_paper_path_with_model_expert(tmp_path, data_dir):
    """run_offline with the model expert (what notebook 02's paper profile runs): hops are harness
    episodes on the endpoint, review and query synthesis are model calls, stage 4 uses the model."""
    from kit.data.pipeline import run_offline, zim_paths
    from kit.data.records import Chain, StageFiles
    from kit.policy.openai_client import OpenAIChatPolicy

    fake = GenericExpertEndpoint()
    pol = OpenAIChatPolicy("http://expert/v1", "kimi-fake", api_key="k", token_counter=CharTokenCounter(),
                           transport=httpx.MockTransport(fake), max_retries=0)

    def expert_factory(graph, web):
        return LLMExpert(pol, lambda: Harness(pol, web, HarnessConfig()), tmp_path / "expert")

    counts = await run_offline(zim_paths(data_dir, ["wikipedia_en_ray_charles_2015-06"]), tmp_path, max_seeds=6,
                               depths=(2,), variants=1, samples=1, holdout_seed_fraction=0.0,
                               holdout_task_fraction=0.0, expert_factory=expert_factory,
                               policy_factory=lambda task, k: pol, labels=["expert:kimi-fake"])
    assert counts["expert"] == "llm:openai:kimi-fake" and counts["label"] == "expert:kimi-fake"
    chains = StageFiles(tmp_path, "chains", Chain)
    c2 = counts["stage2_chains"]
    assert c2["accepted"] + c2["rejected"] + c2["failed"] == 6 and c2["accepted"] > 0
    for ch in chains.accepted.read():
        assert all(h.provenance["method"] == "llm_hop_episode" for h in ch.hops)
    assert fake.calls["hop"] > 0 and (tmp_path / "expert" / "hops" / "episodes.jsonl").is_file()
    c3 = counts["stage3_tasks"]
    assert c3["accepted"] + c3["rejected"] + c3["failed"] == c2["accepted"]
    assert fake.calls["review"] >= c3["accepted"] and fake.calls["query"] >= c3["accepted"]
    assert counts["stage4"]["episodes"] == c3["accepted"] == fake.calls["solve"]
    eps = [json.loads(x) for x in (tmp_path / "trajectories" / "episodes.jsonl").read_text().splitlines()] \
        if c3["accepted"] else []
    # run label, then the seed's fact-source label (no fact_reader here: pixel-statistic facts)
    assert all(e["labels"] == ["expert:kimi-fake", "fact:pixel_statistics"] and e["policy"] == "openai:kimi-fake"
               for e in eps)
