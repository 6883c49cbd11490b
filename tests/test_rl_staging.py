"""Long-MDR staging: stage transitions (fixed steps, reward plateau), entropy-triggered rescue on a
synthetic entropy curve, run log, resume state, and the plot."""

from __future__ import annotations

import json

import pytest

from kit.harness.config import HarnessConfig
from kit.rl.staging import (
    RescueConfig,
    RunLog,
    Stage,
    StageSchedule,
    long_mdr_stages,
    plot_run_log,
)


def test_fixed_step_transitions_and_budgets(tmp_path):
    log = RunLog(tmp_path / "run_log.jsonl")
    s = StageSchedule([Stage("opd", "opd", max_turns=2, steps=1), Stage("h2", max_turns=2, steps=2),
                       Stage("h4", max_turns=4, max_context_tokens=2048)], log=log)
    s.start(0)
    names = []
    for step in range(6):
        names.append(s.stage.name)
        s.observe(step, 0.1, 1.0)
    assert names == ["opd", "h2", "h2", "h4", "h4", "h4"]
    tr = log.of_type("transition")
    assert [(e["step"], e["from"], e["to"], e["reason"]) for e in tr] == [(0, "opd", "h2", "steps"), (2, "h2", "h4", "steps")]
    cfg = s.stage.harness_config(HarnessConfig.smoke())
    assert cfg.max_turns == 4 and cfg.max_context_tokens == 2048 and cfg.synthesis_reserve_tokens < 2048
    lines = [json.loads(x) for x in (tmp_path / "run_log.jsonl").read_text().splitlines()]
    assert [e["type"] for e in lines].count("stage_start") == 3


def test_plateau_transition():
    s = StageSchedule([Stage("a", min_steps=4, plateau_window=2, plateau_delta=0.05), Stage("b")])
    rewards = [0.1, 0.2, 0.3, 0.4, 0.42, 0.43]  # gains: windows (0.3,0.4)->(0.42,0.43) +0.075, then plateau
    seen = []
    for step, r in enumerate(rewards + [0.44, 0.44]):
        ev = s.observe(step, r, 1.0)
        seen += [(step, e["reason"]) for e in ev if e["type"] == "transition"]
    # step 3: windows (0.1,0.2)->(0.3,0.4) gain 0.2; step 5: (0.3,0.4)->(0.42,0.43) gain 0.075;
    # step 6: (0.4,0.42)->(0.43,0.44) gain 0.025 < 0.05 -> plateau
    assert seen == [(6, "plateau")]
    assert s.stage.name == "b"


def test_entropy_rescue_on_synthetic_curve(tmp_path):
    log = RunLog(tmp_path / "log.jsonl")
    rc = RescueConfig(entropy_threshold=0.5, reward_saturation=0.8, patience=2, cooldown=3, action="raise_temperature",
                      temperature_step=0.2, max_temperature=1.3)
    s = StageSchedule([Stage("rl")], rescue=rc, log=log, temperature=1.0)
    entropy = [1.2, 0.9, 0.6, 0.45, 0.40, 0.35, 0.30, 0.30, 0.30, 0.30, 0.2, 0.2]
    reward = [0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9, 0.9]  # saturated at the end
    for step, (e, r) in enumerate(zip(entropy, reward)):
        s.observe(step, r, e)
    rescues = log.of_type("rescue")
    # below 0.5 from step 3; patience 2 -> step 4; cooldown 3 -> next possible at step 8 (2 more low steps);
    # steps 10-11 are below threshold but the reward is saturated -> no rescue.
    assert [e["step"] for e in rescues] == [4, 8]
    assert rescues[0]["knobs_before"]["temperature"] == 1.0 and rescues[0]["knobs_after"]["temperature"] == 1.2
    assert s.knobs.temperature == pytest.approx(1.3)  # capped
    # other actions
    for action, check in [("entropy_bonus", lambda k: k.entropy_coef == 1e-3), ("widen_clip", lambda k: k.eps_hi_scale == 2.0)]:
        s2 = StageSchedule([Stage("rl")], rescue=RescueConfig(entropy_threshold=0.5, patience=1, action=action))
        s2.observe(0, 0.1, 0.1)
        assert check(s2.knobs)
    s3 = StageSchedule([Stage("opd", "opd")], rescue=RescueConfig(entropy_threshold=0.5, patience=1))
    assert s3.observe(0, 0.1, 0.1) == []  # no rescue during distillation


def test_state_roundtrip_and_skipped_steps(tmp_path):
    s = StageSchedule([Stage("a", steps=3), Stage("b")], rescue=RescueConfig(patience=1, entropy_threshold=0.5))
    s.observe(0, 0.1, 0.1)
    s.observe(1, None, None)  # a skipped step still counts towards the stage length
    d = json.loads(json.dumps(s.state_dict()))
    s2 = StageSchedule([Stage("a", steps=3), Stage("b")], rescue=RescueConfig(patience=1, entropy_threshold=0.5))
    s2.load_state_dict(d)
    assert s2.state.stage_step == 2 and s2.knobs.temperature == s.knobs.temperature
    s2.observe(2, 0.2, 1.0)
    assert s2.stage.name == "b"


def test_paper_schedule_and_validation(tmp_path):
    st = long_mdr_stages()
    assert [s.max_turns for s in st] == [10, 10, 20, 50, 75] and st[0].kind == "opd"
    assert [s.max_context_tokens for s in st[1:]] == [32_768, 65_536, 131_072, 131_072]
    with pytest.raises(ValueError):
        Stage("x", kind="sft")
    with pytest.raises(ValueError):
        RescueConfig(action="pray")
    with pytest.raises(ValueError):
        StageSchedule([])
    log = RunLog(tmp_path / "l.jsonl")
    for i, (r, e) in enumerate([(0.1, 1.0), (0.2, 0.4)]):
        log.write("step", i, reward_mean=r, entropy_mean=e)
    log.write("transition", 0, **{"from": "a", "to": "b", "reason": "steps"})
    log.write("rescue", 1, entropy=0.4, action="raise_temperature")
    log.write("skip", 1, reason="no_training_group")
    fig = plot_run_log(RunLog(tmp_path / "l.jsonl").events, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000 and len(fig.axes) == 2
    assert (tmp_path / "p.svg").read_text().count("<svg") == 1 and fig.axes[0].get_ylabel() == "mean reward"
    assert list(fig.axes[0].lines[0].get_ydata()) == [0.1, 0.2]  # an older log's reward_mean


def test_run_plot_draws_the_reward_the_trainer_logs(tmp_path):
    """RLTrainer's step rows carry ``rollout_reward_mean`` (kit.rl.trainer): the reward panel draws it
    (it was empty: the plot read a key the trainer never writes), on whole-number step ticks."""
    import math

    log = RunLog(tmp_path / "l.jsonl")
    for i, r in enumerate([0.25, None, 0.5]):
        log.write("step", i, rollout_reward_mean=r, entropy_mean=1.0)
    fig = plot_run_log(RunLog(tmp_path / "l.jsonl").events)
    y = list(fig.axes[0].lines[0].get_ydata())
    assert y[0] == 0.25 and math.isnan(y[1]) and y[2] == 0.5
    assert all(float(t).is_integer() for t in fig.axes[1].get_xticks())


def test_parse_stages_builds_the_notebook_schedule_and_refuses_bad_specs():
    """Notebook 05's ``stages`` parameter (moved from a notebook cell into kit.rl.staging)."""
    from kit.harness.config import HarnessConfig
    from kit.rl.staging import parse_stages

    base = HarnessConfig.smoke(max_turns=1)
    opd, h1, h2 = parse_stages("opd:1, h1:2 ,h2", base)
    assert (opd.kind, opd.steps) == ("opd", 1) and (h1.kind, h1.max_turns, h1.steps) == ("rl", 1, 2)
    assert h2.steps is None and h2.max_turns == 2 and h2.max_calls == base.max_calls
    assert h2.max_context_tokens == 2 * base.max_context_tokens and h2.wall_clock_s == 2 * base.wall_clock_s
    assert parse_stages("h200", HarnessConfig())[0].max_context_tokens == 131_072  # capped
    assert parse_stages("opd", base)[0].steps == 1
    for bad in ["", " , ", "h0", "hx", "warmup", "h2:two", "opd:0"]:
        with pytest.raises(ValueError):
            parse_stages(bad, base)
