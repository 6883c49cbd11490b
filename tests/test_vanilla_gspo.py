"""Vanilla GSPO, the WeAgent Table 3 baseline: no trajectory self-recovery (``HarnessConfig.self_recovery``)
and no invalid-trajectory filtering (§6.2 "Failure-aware recovery"). Each recovery rule fires under the
default and does not under ``self_recovery=False``; the safety limits still end episodes; the trainer and
the verl settings build vanilla harness configs for ``algorithm="gspo"`` and refuse mixed combinations."""

from __future__ import annotations

import asyncio
import json

import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.loop import Harness
from kit.harness.rules import RULES, rules_markdown
from kit.policy.scripted import ScriptedPolicy, tool_call_text
from kit.types import AssistantTurn, Usage

ANSWER = "<think>done</think><response>Paris</response>"
VANILLA = dict(self_recovery=False)


def run(policy, backend, tmp_path, *, task=None, **cfg):
    h = Harness(policy, backend, HarnessConfig(**cfg))
    return asyncio.run(h.run(task or Task(id="t1", question="Where is this tower?"), tmp_path / "ws", episode_id="ep"))


def types(rec: EpisodeRecord) -> list[str]:
    return [e.type for e in rec.events]


# ----------------------------------------------------------------------------- overlong response
def test_overlong_response_is_regenerated_by_default_and_kept_truncated_without_recovery(tmp_path, memory_backend):
    cut = AssistantTurn(text="<think>x</think><response>Par", finish_reason="length", usage=Usage(completion_tokens=4096))
    rec = run(ScriptedPolicy([cut, ANSWER]), memory_backend, tmp_path / "a")
    assert "overlong_regenerated" in types(rec) and rec.final_response == "Paris"

    policy = ScriptedPolicy([cut, ANSWER])
    rec = run(policy, memory_backend, tmp_path / "b", **VANILLA)
    assert len(policy.calls) == 1 and "overlong_regenerated" not in types(rec)
    kept = [e for e in rec.events if e.type == "overlong_kept"]
    assert len(kept) == 1 and kept[0].detail["self_recovery"] is False  # still recorded for analysis
    # the truncated response is the trajectory's last turn, as a vanilla rollout leaves it
    assert rec.messages[-1].text() == cut.text and rec.status == "answered" and rec.final_response == "Par"


# ----------------------------------------------------------------------------- malformed call
@pytest.mark.parametrize("body", [
    '{"name": "web_search", "arguments": {"num": 3}}',  # missing argument
    "search for eiffel tower",  # not JSON
    '{"name": "teleport", "arguments": {}}',  # unknown tool
])
def test_malformed_call_is_an_observation_by_default_and_ends_the_episode_without_recovery(tmp_path, memory_backend, body):
    script = [f"<tool_call>{body}</tool_call>", ANSWER]
    rec = run(ScriptedPolicy(script), memory_backend, tmp_path / "a")
    assert rec.messages[3].role == "tool" and "error" in json.loads(rec.messages[3].text())
    assert rec.status == "answered"

    policy = ScriptedPolicy(script)
    rec = run(policy, memory_backend, tmp_path / "b", **VANILLA)
    assert len(policy.calls) == 1 and rec.status == "invalid_action" and rec.final_response is None
    assert "invalid_call" in types(rec) and "invalid_action" in types(rec)  # what happened stays countable
    assert rec.messages[-1].role == "assistant"  # no corrective observation after the call
    assert memory_backend.calls == [] and not rec.trainable


@pytest.mark.parametrize("call,repair", [
    ('{"name": "Fetch", "arguments": {"url": "https://example.org/eiffel"}}', "tool_name:Fetch->web_extract"),
    ("{'name': 'web_search', 'arguments': {'query': 'eiffel',}}", "json_serialization_repaired"),
    ('{"name": "web_search", "arguments": {"query": "eiffel", "verbose": true}}', "ignored_field:verbose"),
])
def test_calls_are_repaired_by_default_and_not_without_recovery(tmp_path, memory_backend, call, repair):
    script = [f"<tool_call>{call}</tool_call>", ANSWER]
    rec = run(ScriptedPolicy(script), memory_backend, tmp_path / "a")
    assert repair in [r for e in rec.events if e.type == "argument_repair" for r in e.detail["repairs"]]
    assert rec.tool_calls == 1
    memory_backend.calls.clear()

    rec = run(ScriptedPolicy(script), memory_backend, tmp_path / "b", **VANILLA)
    assert rec.tool_calls == 0 and memory_backend.calls == [] and "argument_repair" not in types(rec)
    bad = [e for e in rec.events if e.type == "invalid_call"][0].detail
    assert bad["code"] == "repair_required" and repair in bad["message"]
    assert rec.status == "invalid_action"


def test_an_exact_call_runs_without_recovery(tmp_path, memory_backend):
    script = [tool_call_text("web_search", {"query": "eiffel"}), ANSWER]
    rec = run(ScriptedPolicy(script), memory_backend, tmp_path, **VANILLA)
    assert rec.status == "answered" and rec.tool_calls == 1 and rec.final_response == "Paris"


def test_no_action_turn_gets_a_format_prompt_by_default_and_ends_the_episode_without_recovery(tmp_path, memory_backend):
    rec = run(ScriptedPolicy(["I think it is Paris.", ANSWER]), memory_backend, tmp_path / "a")
    assert rec.status == "answered" and rec.messages[3].intervention
    policy = ScriptedPolicy(["I think it is Paris.", ANSWER])
    rec = run(policy, memory_backend, tmp_path / "b", **VANILLA)
    assert len(policy.calls) == 1 and rec.status == "invalid_action" and "no_action" in types(rec)
    assert not any(m.intervention for m in rec.messages)


# ----------------------------------------------------------------------------- budget synthesis
def test_turn_budget_requests_synthesis_by_default_and_just_ends_without_recovery(tmp_path, memory_backend):
    script = [tool_call_text("web_search", {"query": f"q{i}"}) for i in range(2)] + [ANSWER]
    rec = run(ScriptedPolicy(script), memory_backend, tmp_path / "a", max_turns=2)
    assert rec.status == "max_turns_synthesis" and rec.final_response == "Paris"

    policy = ScriptedPolicy(script)
    rec = run(policy, memory_backend, tmp_path / "b", max_turns=2, **VANILLA)
    assert len(policy.calls) == 2 and rec.status == "budget_exhausted" and rec.final_response is None
    assert "synthesis_requested" not in types(rec) and not any(m.intervention for m in rec.messages)
    ends = [e for e in rec.events if e.type == "budget_exhausted"]
    assert len(ends) == 1 and "max_turns" in ends[0].detail["reason"]


def test_call_budget_ends_without_synthesis(tmp_path, memory_backend):
    script = [tool_call_text("web_search", {"query": f"q{i}"}) for i in range(3)] + [ANSWER]
    rec = run(ScriptedPolicy(script), memory_backend, tmp_path, max_turns=10, max_calls=2, **VANILLA)
    assert rec.status == "budget_exhausted" and rec.tool_calls == 2 and "max_calls" in rec.error


def test_context_reserve_does_not_disable_tools_without_recovery(tmp_path, memory_backend):
    long_q = "x " * 2 * (32_768 - 4_096 - 1_300)  # <= 4,096 tokens remain (CharTokenCounter: 4 chars/token)
    task = Task(id="t", question=long_q)
    policy = ScriptedPolicy([ANSWER])
    rec = run(policy, memory_backend, tmp_path / "a", task=task)
    assert "synthesis_requested" in types(rec) and policy.calls[0]["tools"] == []
    policy = ScriptedPolicy([ANSWER])
    rec = run(policy, memory_backend, tmp_path / "b", task=task, **VANILLA)
    assert "synthesis_requested" not in types(rec) and policy.calls[0]["tools"] != []
    assert rec.status == "answered"


# ----------------------------------------------------------------------------- guards
def test_loop_guard_fires_by_default_and_not_without_recovery(tmp_path, memory_backend):
    bad = tool_call_text("web_search", {"num": 3})
    rec = run(ScriptedPolicy([bad, bad, ANSWER]), memory_backend, tmp_path / "a")
    assert "loop_guard" in types(rec)
    rec = run(ScriptedPolicy([bad, bad, ANSWER]), memory_backend, tmp_path / "b", **VANILLA)
    assert "loop_guard" not in types(rec) and types(rec).count("invalid_call") == 1


def test_duplicate_call_is_suppressed_by_default_and_executed_without_recovery(tmp_path, memory_backend):
    call = tool_call_text("web_search", {"query": "eiffel"})
    rec = run(ScriptedPolicy([call, call, ANSWER]), memory_backend, tmp_path / "a")
    assert "duplicate_suppressed" in types(rec) and rec.tool_calls == 1
    rec = run(ScriptedPolicy([call, call, ANSWER]), memory_backend, tmp_path / "b", **VANILLA)
    assert "duplicate_suppressed" not in types(rec) and rec.tool_calls == 2


# ----------------------------------------------------------------------------- safety limits stay
def test_wall_clock_and_context_limits_still_end_vanilla_episodes(tmp_path, memory_backend):
    slow = ScriptedPolicy([tool_call_text("web_search", {"query": f"q{i}"}) for i in range(20)], latency_s=0.1)
    assert run(slow, memory_backend, tmp_path / "a", wall_clock_s=0.3, **VANILLA).status == "wall_clock"
    huge = Task(id="t", question="word " * 40_000)
    assert run(ScriptedPolicy([ANSWER]), memory_backend, tmp_path / "b", task=huge, **VANILLA).status == "context_limit"


def test_rule_map_states_every_rule_under_vanilla():
    from kit.harness.rules import UNCHANGED, VANILLA

    names = {r.name for r in RULES}
    assert set(VANILLA) <= names  # no stale row
    recovery = ("Turn / executed-call limits", "Max-turn finalization", "Early final synthesis", "Argument repair",
                "Duplicate suppression", "Repeated format errors", "Overlong response")
    assert all(VANILLA[n] != UNCHANGED and not VANILLA[n].startswith("unchanged") for n in recovery)
    assert any(r.config == ("self_recovery",) for r in RULES)
    page = rules_markdown()
    assert "| self_recovery=False |" in page and page.count("- self_recovery=False: ") == len(RULES)


# ----------------------------------------------------------------------------- no filtering
def _rec(status: str, events=(), trainable=False) -> EpisodeRecord:
    from kit.harness.episode import Event

    return EpisodeRecord(id=status, task=Task(id="t", question="?"), config_hash="x", status=status, trainable=trainable,
                         events=[Event(type=e, turn=1) for e in events])


def test_gspo_eligibility_keeps_every_rollout_with_a_reward():
    from kit.rl.eligibility import check
    from kit.rl.objective import algorithm, group_advantages

    recs = [_rec("context_limit"), _rec("wall_clock"), _rec("budget_exhausted"), _rec("invalid_action"),
            _rec("answered", ["overlong_kept"], True), _rec("max_turns_synthesis"), _rec("answered", trainable=True)]
    fa, va = algorithm("fa_gspo"), algorithm("gspo")
    assert [check(r, 0.0, check_runtime=fa.check_runtime).eligible for r in recs] == [False] * 6 + [True]
    assert [check(r, 0.0, check_runtime=fa.check_runtime).reason for r in recs[2:4]] == ["budget_exhausted",
                                                                                          "invalid_action"]
    kept = [check(r, 0.0, check_runtime=va.check_runtime).eligible for r in recs]
    assert kept == [True] * len(recs)
    adv = group_advantages([[0.0] * 6 + [1.0]], [kept])
    assert adv.n == [7] and adv.advantages[0][0] < 0 < adv.advantages[0][-1]  # all 7 in the normalization


async def test_gspo_rollouts_are_vanilla_and_unfiltered(tmp_path, memory_backend):
    from kit.eval.judges import RuleJudge
    from kit.rl.objective import algorithm
    from kit.rl.rollout import rollout_groups
    from kit.rl.trainer import harness_config_for

    cfg = harness_config_for("gspo", HarnessConfig(max_turns=1))
    assert cfg.self_recovery is False
    script = [tool_call_text("web_search", {"query": "a"}), ANSWER]

    def factory(task, sample):
        return Harness(ScriptedPolicy(list(script)), memory_backend, cfg)

    batch = await rollout_groups(factory, [Task(id="q", question="?", answers=["Paris"])], 2, tmp_path,
                                 judge=RuleJudge("contains"), spec=algorithm("gspo"))
    assert [t.record.status for t in batch.trajectories()] == ["budget_exhausted"] * 2
    assert batch.eligible() == [[True, True]] and batch.exclusions() == {}


# ----------------------------------------------------------------------------- trainer / verl settings
def test_harness_config_for_each_algorithm_and_refused_combinations():
    from kit.rl.trainer import harness_config_for

    base = HarnessConfig.smoke(max_turns=2)
    assert harness_config_for("fa_gspo", base).self_recovery is True
    va = harness_config_for("gspo", base)
    assert va.self_recovery is False and va.max_turns == 2  # everything else kept
    assert harness_config_for("grpo", base).self_recovery is True
    assert harness_config_for("grpo", HarnessConfig(self_recovery=False)).self_recovery is False
    with pytest.raises(ValueError, match="FA-GSPO recovers"):
        harness_config_for("fa_gspo", HarnessConfig(self_recovery=False))
    with pytest.raises(ValueError, match="vanilla GSPO"):
        harness_config_for("gspo", HarnessConfig(self_recovery=True))  # explicitly set: a contradiction
    assert harness_config_for("gspo", None).self_recovery is False


def test_trainer_with_gspo_builds_vanilla_harness_configs_for_every_stage(tmp_path, monkeypatch):
    import kit.policy.transformers_policy as tp
    import kit.rl.trainer as trainer_mod
    from kit.rl.staging import Stage, parse_stages
    from tests.conftest import MemoryBackend

    built = []
    real = trainer_mod.harness_config_for
    monkeypatch.setattr(trainer_mod, "harness_config_for", lambda *a, **k: built.append(real(*a, **k)) or built[-1])

    class NoModel:  # the harness config is decided before the model loads: stop there
        def __init__(self, *a, **k):
            raise RuntimeError("no model needed")

    monkeypatch.setattr(tp, "TransformersPolicy", NoModel)
    task = Task(id="t", question="?", answers=["Paris"])
    with pytest.raises(RuntimeError, match="no model"):
        trainer_mod.RLTrainer("unused", MemoryBackend(), [task], tmp_path / "g", trainer_mod.RLConfig(algorithm="gspo"),
                              harness_config=HarnessConfig.smoke())
    base = built[-1]
    assert base.self_recovery is False and base.max_turns == HarnessConfig.smoke().max_turns
    # every stage (Long-MDR budgets, notebook 05's parse_stages) keeps the switch
    for st in [Stage("rl", max_turns=3, max_context_tokens=8_192), *parse_stages("h1:2,h2", base)]:
        assert st.harness_config(base).self_recovery is False
    with pytest.raises(ValueError, match="FA-GSPO recovers"):
        trainer_mod.RLTrainer("unused", MemoryBackend(), [task], tmp_path / "f", trainer_mod.RLConfig(algorithm="fa_gspo"),
                              harness_config=HarnessConfig.smoke(self_recovery=False))


def test_verl_settings_build_the_same_harness_config():
    from kit.rl.verl.settings import algorithm_of, harness_config

    assert harness_config({"algorithm": "gspo", "harness": "smoke"}).self_recovery is False
    assert harness_config({"algorithm": "fa_gspo"}).self_recovery is True
    assert harness_config({"algorithm": "fa_gspo"}).max_turns == 20  # paper budgets
    assert harness_config({"algorithm": "gspo", "harness_overrides": {"max_turns": 5}}).max_turns == 5
    with pytest.raises(ValueError, match="vanilla GSPO"):
        harness_config({"algorithm": "gspo", "harness_overrides": {"self_recovery": True}})
    with pytest.raises(ValueError, match="unknown algorithm"):
        algorithm_of({"algorithm": "ppo"})
    assert algorithm_of({}).name == "fa_gspo" and algorithm_of({"algorithm": "gspo"}).check_runtime is False
