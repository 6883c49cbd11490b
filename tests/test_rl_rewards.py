"""Rewards (WeAgent Eq. 5, POINTS-Seeker GRPO reward), eligibility (Eq. 3) and Figure 7 statistics,
including a judge that times out and a policy server that dies mid-rollout."""

from __future__ import annotations

import asyncio
import math

import pytest

from kit.eval.judges import RuleJudge
from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Event, Task
from kit.policy.scripted import ScriptedPolicy, tool_call_text
from kit.rl.eligibility import check, exclusion_counts
from kit.rl.objective import algorithm
from kit.rl.rewards import format_ok, score_record, tool_ok
from kit.rl.rollout import recovery_stats, rollout_groups, seeded_factory
from kit.types import ContentPart, Message, PolicyError, SamplingParams

TASK = Task(id="t1", question="Which tower is in Paris?", answers=["Eiffel Tower"])


def rec(last: str, status="answered", trainable=True, final="Eiffel Tower", events=(), tool_calls=1, rid="r"):
    msgs = [Message(role="system", content=[ContentPart(type="text", text="sys")]),
            Message(role="user", content=[ContentPart(type="text", text=TASK.question)]),
            Message(role="assistant", content=[ContentPart(type="text", text=last)])]
    return EpisodeRecord(id=rid, task=TASK, config_hash="x", messages=msgs, status=status, trainable=trainable,
                         final_response=final, events=[Event(type=e, turn=1) for e in events], tool_calls=tool_calls)


async def test_weagent_reward_terms():
    j = RuleJudge("contains")
    good = await score_record(rec("<think>ok</think><response>The Eiffel Tower</response>"), j)
    assert (good.reward, good.correct, good.format) == (pytest.approx(1.0), 1.0, 1.0)
    wrong = await score_record(rec("<think>sure</think><response>Big Ben</response>", final="Big Ben"), j)
    assert wrong.reward == pytest.approx(0.1) and wrong.correct == 0.0
    no_think = await score_record(rec("<response>Big Ben</response>", final="Big Ben"), j)  # Table 6 needs <think>
    assert no_think.reward == 0.0 and no_think.format == 0.0
    unclosed = await score_record(rec("<response>Eiffel Tower", final="Eiffel Tower"), j)
    assert unclosed.reward == pytest.approx(0.9) and unclosed.format == 0.0
    none = await score_record(rec("I do not know", final=None), j)
    assert none.reward == 0.0


async def test_points_seeker_grpo_reward():
    j = RuleJudge("contains")
    r = await score_record(rec("<think>a</think><response>Eiffel Tower</response>"), j, kind="points_seeker")
    assert r.reward == pytest.approx(0.7 + 0.2 + 0.1)
    no_think = await score_record(rec("<response>Eiffel Tower</response>", events=["invalid_call"]), j,
                                  kind="points_seeker")
    assert no_think.reward == pytest.approx(0.7) and no_think.tool == 0.0
    assert not tool_ok(rec("x", tool_calls=0))
    assert not format_ok(rec('<response>a</response><tool_call>{"name": "web_search"}</tool_call>'))
    with pytest.raises(ValueError, match="unknown reward 'nope'; registered"):
        await score_record(rec("x"), j, kind="nope")


class SlowJudge:
    name = "slow"

    async def judge_task(self, task, prediction):
        await asyncio.sleep(5)


class BrokenJudge:
    name = "broken"

    def judge_task(self, task, prediction):
        raise RuntimeError("endpoint down")


async def test_judge_timeout_and_failure_give_nan_and_exclusion():
    r = await score_record(rec("<response>Eiffel Tower</response>"), SlowJudge(), timeout_s=0.05)
    assert math.isnan(r.reward) and "timed out" in r.judge_error
    e = check(rec("<response>Eiffel Tower</response>"), r.reward, judge_error=r.judge_error)
    assert (e.eligible, e.reason) == (False, "judge_error")
    b = await score_record(rec("<response>Eiffel Tower</response>"), BrokenJudge())
    assert math.isnan(b.reward) and "endpoint down" in b.judge_error


@pytest.mark.parametrize("status,trainable,events,reason", [
    ("answered", True, (), None),
    ("answered", False, ("response_unclosed",), None),  # model-side format error: kept with F = 0
    ("max_turns_synthesis", True, ("synthesis_requested",), None),
    ("max_turns_synthesis", False, ("synthesis_requested", "synthesis_incomplete"), "synthesis_incomplete"),
    ("context_limit", False, (), "context_limit"),
    ("wall_clock", False, (), "wall_clock"),
    ("error", False, (), "error"),
    ("answered", True, ("overlong_regenerated", "overlong_kept"), "overlong"),
    ("answered", True, ("overlong_regenerated",), None),  # recovered by the regeneration
])
def test_eligibility_rules(status, trainable, events, reason):
    e = check(rec("<response>x</response>", status=status, trainable=trainable, events=events), 0.1)
    assert e.eligible == (reason is None) and e.reason == reason
    # vanilla GSPO: no runtime filtering, only an undefined reward excludes
    assert check(rec("x", status=status, trainable=trainable, events=events), 0.1, check_runtime=False).eligible
    assert check(rec("x"), math.nan, check_runtime=False).reason == "reward_nan"


class DyingPolicy(ScriptedPolicy):
    """Answers a few episodes, then behaves like a policy server that went away."""

    def __init__(self, alive_calls: int):
        super().__init__(lambda m, t: tool_call_text("web_search", {"query": "Eiffel"}) if len(m) < 4 else
                         "<think>done</think><response>Eiffel Tower</response>", latency_s=0.01)
        self.alive = alive_calls
        self.n = 0

    async def generate(self, messages, tools, sampling, workspace=None):
        self.n += 1
        if self.n > self.alive:
            raise PolicyError("connection refused: server died")
        return await super().generate(messages, tools, sampling, workspace)


async def test_policy_server_dying_mid_rollout_is_counted_not_raised(tmp_path):
    from tests.conftest import MemoryBackend

    pol = DyingPolicy(alive_calls=5)
    f = seeded_factory(pol, MemoryBackend(), HarnessConfig.smoke(tools_enabled=["web_search"]), SamplingParams())
    batch = await rollout_groups(f, [TASK], 4, tmp_path, judge=RuleJudge(), spec=algorithm("fa_gspo"), concurrency=1)
    statuses = [t.record.status for t in batch.trajectories()]
    assert statuses.count("error") >= 2 and statuses.count("answered") >= 1
    assert batch.exclusions()["error"] == statuses.count("error")
    s = batch.summary()
    assert s["trajectories"] == 4 and s["eligible"] == statuses.count("answered")


def test_recovery_stats_figure7():
    from kit.rl.rewards import RewardBreakdown
    from kit.rl.rollout import Trajectory

    def t(r, elig):
        return Trajectory(r, 0, RewardBreakdown(0.0, 0.0, 0.0, 0.0), check(r, 0.0) if elig else check(r, math.nan))

    trajs = [t(rec("x", events=("overlong_regenerated",)), True),
             t(rec("x", events=("overlong_regenerated", "overlong_kept")), True),
             t(rec("x", status="max_turns_synthesis", events=("synthesis_requested", "invalid_call")), True),
             t(rec("x", status="context_limit", trainable=False), True)]
    rows = {r["mechanism"]: r for r in recovery_stats(trajs)}
    assert rows["overlong_retry"]["trigger_rate"] == 0.5 and rows["overlong_retry"]["retention_rate"] == 0.5
    assert rows["forced_final_answer"]["triggered"] == 1 and rows["forced_final_answer"]["retention_rate"] == 1.0
    assert rows["invalid_tool_call"]["triggered"] == 1
    assert rows["context_limit"]["trigger_rate"] == 0.25 and rows["context_limit"]["retention_rate"] is None
    assert exclusion_counts([x.eligibility for x in trajs]) == {"overlong": 1, "context_limit": 1}
