"""WeAgent §4.5 RL query filtering as the paper runs it (issue 26, item 4).

§4.5: "For every candidate query, we sample an 8-rollout group from WeAgent-MMSearch-SFT and discard queries for
which all sampled answers are correct or all are incorrect. [...] We additionally use Kimi K2.6 to audit the
reference labels and remove ambiguous or non-verifiable targets."

Under the paper recipe the rollouts are judged by the kit's LLM answer judge through an OpenAI-compatible endpoint
(here a tiny local server) and every label is audited by a model; under smoke the substring rule judges and the
deterministic audit decides, both labelled "(smoke)"; a preflight's judge is the tiny stand-in, named so. Every
query gets one recorded decision (kept / dropped, stage, reason)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.policy.scripted import ScriptedPolicy
from kit.types import AssistantTurn

#: what the fake judge accepts as the same answer as a reference (the substring rule accepts only the reference)
EQUIVALENT = {"Lisbon": {"lisbon", "the capital of portugal"}, "Tagus": {"tagus", "the tejo"},
              "Around the World in 80 Days": {"around the world in 80 days", "verne's 1872 novel"},
              "Douro": {"douro"}}
UNVERIFIABLE = {"I cannot find the final answer.", "several rivers"}  # the fake auditor's "not verifiable"


def fake_model_reply(prompt: str) -> str:
    """The fake Kimi: grades the answer judge's prompt (VERDICT line) and the label audit's prompt (JSON)."""
    if prompt.startswith("You audit reference labels"):
        ref = prompt.split("Reference answer: ", 1)[1].split("\nIs the reference", 1)[0].strip()
        ok = ref not in UNVERIFIABLE
        return json.dumps({"verifiable": ok, "reason": "concrete" if ok else "a refusal, not an answer"})
    if prompt.startswith("You are grading the final answer"):
        refs = prompt.split("any one of these is acceptable):\n", 1)[1].split("\n\nAgent's answer:", 1)[0]
        pred = prompt.split("Agent's answer:\n", 1)[1].split("\n\nDecide whether", 1)[0].strip().lower()
        if "unparseable" in pred:
            return "I am not sure."
        ok = any(pred in EQUIVALENT.get(r[2:].strip(), {r[2:].strip().lower()}) for r in refs.splitlines())
        return f"VERDICT: {'CORRECT' if ok else 'INCORRECT'}"
    return "?"


def _prompt_of(body: dict) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def _completion(text: str) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


@pytest.fixture
def judge_server():
    """A local OpenAI-compatible endpoint serving the fake judge/auditor; ``calls`` records each prompt kind."""
    calls: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            prompt = _prompt_of(body)
            calls.append("judge" if prompt.startswith("You are grading") else "audit")
            data = json.dumps(_completion(fake_model_reply(prompt))).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", calls
    srv.shutdown()
    srv.server_close()


def mock_policy(model: str = "kimi-fake"):
    """An OpenAI-compatible policy on an in-process MockTransport (what notebook 02 passes as the expert)."""
    from kit.policy.openai_client import OpenAIChatPolicy
    from kit.policy.scripted import CharTokenCounter

    seen: list[str] = []

    def handler(request):
        prompt = _prompt_of(json.loads(request.content))
        seen.append("judge" if prompt.startswith("You are grading") else "audit")
        return httpx.Response(200, json=_completion(fake_model_reply(prompt)))

    pol = OpenAIChatPolicy("http://expert/v1", model, api_key="k", token_counter=CharTokenCounter(),
                           transport=httpx.MockTransport(handler), max_retries=0)
    return pol, seen


# crafted groups of 4 rollouts: the answers each sample gives
GROUPS = {
    # rule: all wrong (no rollout says "Lisbon"); LLM judge: 2 of 4 correct -> kept only by the paper's judge
    "semantic": (Task(id="semantic", question="Which city is the capital of Portugal?", answers=["Lisbon"]),
                 ["the capital of Portugal", "Madrid", "the capital of Portugal", "Porto"]),
    "all_pass": (Task(id="all_pass", question="Which river flows through Porto?", answers=["Douro"]),
                 ["Douro"] * 4),
    "all_fail": (Task(id="all_fail", question="Which river flows through Lisbon?", answers=["Tagus"]),
                 ["Ebro", "Seine", "Loire", "Rhine"]),
    "mixed": (Task(id="mixed", question="Which river flows through Lisbon?", answers=["Tagus"]),
              ["Tagus", "Ebro", "Tagus", "Seine"]),
    # the rule audit flags "Around" as a hedge; the paper's model audit keeps it (a concrete title)
    "title": (Task(id="title", question="Which novel features Phileas Fogg?", answers=["Around the World in 80 Days"]),
              ["Around the World in 80 Days", "Twenty Thousand Leagues", "Around the World in 80 Days", "Dracula"]),
    "refusal": (Task(id="refusal", question="What is shown?", answers=["I cannot find the final answer."]),
                ["x"] * 4),
    "ambiguous": (Task(id="ambiguous", question="Which river?", answers=["several rivers"]), ["x"] * 4),
    "empty": (Task(id="empty", question="Which river?", answers=[]), ["x"] * 4),
}


def make_harness(backend):
    def factory(task, k):
        ans = GROUPS[task.id][1][k]
        return Harness(ScriptedPolicy([f"<think>answer</think><response>{ans}</response>"]), backend, HarnessConfig())
    return factory


def tasks(*names):
    return [GROUPS[n][0] for n in names]


def decisions_of(out):
    return {d["id"]: d for d in (json.loads(x) for x in (out / "rl_decisions.jsonl").read_text().splitlines())}


# ------------------------------------------------------------------------------------------ the recipe
def test_recipe_keys_paper_llm_smoke_rule_and_strict_types():
    from kit.profiles import get_profile
    from kit.recipes.sections import section_problem

    paper = get_profile("paper")
    assert paper.value("data.rl_filter_judge") == "llm" and paper.value("data.rl_label_audit") == "llm"
    assert paper.value("data.rl_label_audit_model") == "kimi-k2.6"
    r = paper.recipe_obj()
    assert "§4.5" in r.entries["data.rl_label_audit"].source and "Kimi K2.6" in r.entries["data.rl_label_audit"].source
    assert "§4.5" in r.entries["data.rl_filter_judge"].source and r.entries["data.rl_filter_judge"].kit  # kit: who judges
    assert get_profile("paper", preflight=True).value("data.rl_filter_judge") == "llm"  # settings kept
    smoke = get_profile("smoke")
    assert (smoke.value("data.rl_filter_judge"), smoke.value("data.rl_label_audit")) == ("rule", "rule")
    assert smoke.recipe_obj().entries["data.rl_filter_judge"].kit.startswith("offline")
    assert section_problem("data", {"rl_filter_judge": "gpt"}) is not None
    assert section_problem("data", {"rl_label_audit": True}) is not None
    assert section_problem("data", {"rl_filter_judge": "llm", "rl_label_audit": "rule"}) is None


# ------------------------------------------------------------------------------------------ paper: the LLM judge
async def test_paper_filter_judges_through_the_endpoint_and_audits_every_label(tmp_path, judge_server, memory_backend):
    from kit.data.rl_filter import filter_rl_queries

    url, calls = judge_server
    names = ("semantic", "all_pass", "all_fail", "mixed", "title", "refusal", "ambiguous", "empty")
    res = await filter_rl_queries(tasks(*names), make_harness(memory_backend), tmp_path / "f", group_size=4,
                                  profile="paper", judge_endpoint=url)
    c = res.counts
    assert c["judge"] == "llm:kimi-k2.6@llm-judge-v1" and c["judge_kind"] == "llm"
    assert c["label_audit"] == "llm label audit (kimi-k2.6)" and c["profile"] == "weagent_mmsearch"
    assert calls.count("audit") == 7  # every label but the empty one (nothing to audit)
    assert calls.count("judge") > 0
    d = decisions_of(tmp_path / "f")
    assert list(d) == list(names)  # one decision per query, in input order
    assert {k: (v["decision"], v["stage"], v["reason"]) for k, v in d.items()} == {
        "semantic": ("kept", "rollout_group", None),  # the substring rule would drop it (see the smoke test)
        "all_pass": ("dropped", "rollout_group", "all_correct"),
        "all_fail": ("dropped", "rollout_group", "all_wrong"),
        "mixed": ("kept", "rollout_group", None),
        "title": ("kept", "rollout_group", None),  # the model keeps a label the rule calls a hedge
        "refusal": ("dropped", "label_audit", "unverifiable_target"),
        "ambiguous": ("dropped", "label_audit", "unverifiable_target"),
        "empty": ("dropped", "label_audit", "no_answer")}
    assert d["title"]["label_audit"]["rule_flags"] == ["hedged_answer"] and d["title"]["label_audit"]["flags"] == []
    assert d["refusal"]["label_audit"]["reason"] == "a refusal, not an answer"
    assert d["semantic"]["solve_rate"] == 0.5 and d["semantic"]["group"]["verdicts"] == [True, False, True, False]
    assert all(v["judge"] == "llm:kimi-k2.6@llm-judge-v1" for v in d["semantic"]["group"]["verdict_details"])
    assert c["kept"] == 3 and c["kept"] + sum(c["dropped"].values()) == len(names) and c["rollouts"] == 5 * 4
    kept = {t.id: t for t in res.kept}
    assert kept["semantic"].metadata["rl_group"]["judge"] == "llm:kimi-k2.6@llm-judge-v1"
    dropped = [json.loads(x) for x in (tmp_path / "f" / "rl_dropped.jsonl").read_text().splitlines()]
    assert {x["task"]["id"]: x["stage"] for x in dropped} == {k: v["stage"] for k, v in d.items() if v["decision"] == "dropped"}
    # a resume asks the judge nothing new: verdicts are cached beside the rollouts
    n = calls.count("judge")
    await filter_rl_queries(tasks(*names), make_harness(memory_backend), tmp_path / "f", group_size=4,
                            profile="paper", judge_endpoint=url)
    assert calls.count("judge") == n


async def test_paper_without_a_judge_endpoint_stops_naming_it(tmp_path, memory_backend):
    from kit.data.rl_filter import filter_rl_queries
    from kit.eval.judge_factory import JudgeConfigError

    with pytest.raises(JudgeConfigError, match="judge_endpoint") as e:
        await filter_rl_queries(tasks("mixed"), make_harness(memory_backend), tmp_path / "f", group_size=4,
                                profile="paper")
    assert "§4.5" in str(e.value) and "judge='rule'" in str(e.value)
    # the audit needs a model too when the rule judge is chosen explicitly
    with pytest.raises(JudgeConfigError, match="label_audit='rule'"):
        await filter_rl_queries(tasks("mixed"), make_harness(memory_backend), tmp_path / "g", group_size=4,
                                profile="paper", judge="rule")


async def test_notebook_02_call_picks_the_paper_judge_from_the_run_identity(tmp_path, memory_backend):
    """Notebook 02's call as it is (its profile, no judge endpoint, the expert as auditor): the LLM judge runs on
    the expert's endpoint."""
    from kit.data.rl_filter import LLMLabelAuditor, filter_rl_queries
    from kit.runs import claim_folder, run_identity

    out = tmp_path / "02_data_synthesis"
    claim_folder(out, run_identity("02_data_synthesis", "paper", {"expert_model": "kimi-fake"}))
    expert, seen = mock_policy()
    res = await filter_rl_queries(tasks("semantic", "all_fail", "refusal"), make_harness(memory_backend),
                                  out / "rl_filter", group_size=4, auditor=LLMLabelAuditor(expert), profile="paper")
    c = res.counts
    assert c["profile"] == "weagent_mmsearch" and c["profile_from"] == "argument"
    assert c["judge"] == "llm:kimi-fake@llm-judge-v1" and "expert" not in c["judge"] and "kimi-fake" in c["judge_via"]
    assert c["label_audit"] == "llm label audit (kimi-fake)"
    assert "judge" in seen and seen.count("audit") == 3
    assert [t.id for t in res.kept] == ["semantic"] and c["dropped"] == {"all_wrong": 1, "unverifiable_target": 1}


async def test_judge_errors_are_recorded_not_silently_scored(tmp_path, judge_server, memory_backend):
    from kit.data.rl_filter import filter_rl_queries

    url, _ = judge_server
    GROUPS["undecided"] = (Task(id="undecided", question="Which river flows through Lisbon?", answers=["Tagus"]),
                           ["unparseable", "Ebro", "Seine", "Loire"])  # decided ones all wrong: unknown contrast
    GROUPS["half"] = (Task(id="half", question="Which river flows through Lisbon?", answers=["Tagus"]),
                      ["unparseable", "Tagus", "Seine", "Loire"])  # decided ones mixed: kept, error counted
    try:
        res = await filter_rl_queries(tasks("undecided", "half"), make_harness(memory_backend), tmp_path / "f",
                                      group_size=4, profile="paper", judge_endpoint=url)
    finally:
        GROUPS.pop("undecided"), GROUPS.pop("half")
    d = decisions_of(tmp_path / "f")
    assert (d["undecided"]["decision"], d["undecided"]["reason"]) == ("dropped", "judge_error")
    assert d["half"]["decision"] == "kept" and d["half"]["group"]["judge_errors"] == 1 and d["half"]["solve_rate"] == 1 / 3
    assert d["half"]["group"]["verdicts"] == [None, True, False, False] and res.counts["judge_errors"] == 2
    err = d["undecided"]["group"]["verdict_details"][0]
    assert err["correct"] is None and "unparseable" in err["error"]


# ------------------------------------------------------------------------------------------ smoke: the rule, labelled
async def test_smoke_filter_uses_the_substring_rule_labelled(tmp_path, judge_server, memory_backend):
    from kit.data.rl_filter import filter_rl_queries

    _, calls = judge_server
    names = ("semantic", "all_pass", "all_fail", "mixed", "title", "refusal", "empty")
    with pytest.raises(TypeError, match="profile"):  # no guessed profile: the recipe decides who judges
        await filter_rl_queries(tasks(*names), make_harness(memory_backend), tmp_path / "f", group_size=4)
    with pytest.raises(ValueError, match="needs profile="):
        await filter_rl_queries(tasks(*names), make_harness(memory_backend), tmp_path / "f", group_size=4, profile=None)
    res = await filter_rl_queries(tasks(*names), make_harness(memory_backend), tmp_path / "f", group_size=4,
                                  profile="smoke")
    c = res.counts
    assert (c["profile"], c["judge"], c["label_audit"]) == ("smoke", "rule judge (smoke)", "rule label audit (smoke)")
    assert c["profile_from"] == "argument" and calls == []  # no model asked
    d = decisions_of(tmp_path / "f")
    assert {k: v["reason"] for k, v in d.items()} == {
        "semantic": "all_wrong",  # "the capital of Portugal" does not contain "Lisbon"
        "all_pass": "all_correct", "all_fail": "all_wrong", "mixed": None,
        "title": "hedged_answer", "refusal": "refusal_placeholder", "empty": "no_answer"}
    assert all(v["label_audit"]["by"] == "rule label audit (smoke)" for v in d.values())
    assert all(v["group"]["judge"] == "rule judge (smoke)" for v in d.values() if v["group"])
    assert [t.metadata["rl_group"]["judge"] for t in res.kept] == ["rule judge (smoke)"]
    assert all(json.loads(x)["judge"] == "rule judge (smoke)"
               for x in (tmp_path / "f" / "rl_dropped.jsonl").read_text().splitlines())
    assert json.loads((tmp_path / "f" / "rl_filter_counts.json").read_text())["judge"] == "rule judge (smoke)"


async def test_explicit_choices_under_paper_are_labelled_fallbacks(tmp_path, memory_backend):
    from kit.data.rl_filter import resolve_filter_setup

    s = resolve_filter_setup("paper", judge="rule", label_audit="rule")
    assert (s.judge_label, s.audit_label) == ("rule judge (fallback)", "rule label audit (fallback)")
    expert, _ = mock_policy()
    from kit.data.rl_filter import LLMLabelAuditor

    s = resolve_filter_setup("smoke", auditor=LLMLabelAuditor(expert))  # smoke with a named expert: rule, then model
    assert s.judge_label == "rule judge (smoke)" and s.audit_label == "rule label audit (smoke) + llm label audit (kimi-fake)"
    with pytest.raises(ValueError, match="one of"):
        resolve_filter_setup("smoke", judge="gpt")


# ------------------------------------------------------------------------------------------ preflight: the stand-in
class StandIn:
    """The tiny stand-in's place: a policy marked ``stand_in_for`` that answers like the fake model."""

    name = "transformers:tiny-fake"

    def __init__(self, role):
        from kit.policy.scripted import CharTokenCounter

        self.stand_in_for, self.token_counter, self.prompts = role, CharTokenCounter(), []

    async def generate(self, messages, tools, sampling, workspace=None):
        prompt = "".join(p.text or "" for m in messages for p in m.content if p.type == "text")
        self.prompts.append(prompt)
        return AssistantTurn(text=fake_model_reply(prompt))


async def test_preflight_judge_and_audit_are_the_stand_in_named_so(tmp_path, memory_backend, monkeypatch):
    import kit.profiles
    from kit.data.rl_filter import filter_rl_queries
    from kit.profiles import get_profile

    made = {}
    monkeypatch.setattr(kit.profiles, "stand_in_policy", lambda role, **kw: made.setdefault(role, StandIn(role)))
    res = await filter_rl_queries(tasks("semantic", "refusal"), make_harness(memory_backend), tmp_path / "f",
                                  group_size=4, profile=get_profile("paper", preflight=True))
    c = res.counts
    assert c["profile"] == "weagent_mmsearch (preflight)"
    assert c["judge"] == "llm:tiny stand-in (tiny-qwen2_vl, random weights) for kimi-k2.6@llm-judge-v1"
    assert c["label_audit"] == "llm label audit (tiny stand-in (tiny-qwen2_vl, random weights) for kimi-k2.6)"
    assert made["answer judge"].prompts  # the judge's prompt really ran on the stand-in
    assert [t.id for t in res.kept] == ["semantic"] and c["dropped"] == {"unverifiable_target": 1}
