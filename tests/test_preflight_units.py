"""Preflight helpers (issue "paper recipes", part 4): what counts as a real RL update, the stand-in policy cache,
and the honest record of every stand-in role in a preflight's manifest and judge names."""

from __future__ import annotations

import asyncio
import json

import pytest

from kit.rl.preflight import PreflightError, is_rl_update, require_rl_update, rl_updates, train_until_rl_update

UPDATE = {"step": 1, "stage": "h10", "kind": "rl", "loss": -0.01, "grad_norm": 0.3, "trained_trajectories": 2,
          "advantage_abs_mean": 0.7}


@pytest.mark.parametrize("change", [
    {"kind": "opd", "opd_kl": 0.1},                       # distillation, not the RL objective
    {"skipped": "no_advantage_signal", "loss": None},     # a tied group
    {"skipped": "no_training_group", "loss": None},       # every trajectory excluded
    {"advantage_abs_mean": 0.0},                          # an update without signal is no update
    {"trained_trajectories": 0},
    {"loss": float("nan")}, {"grad_norm": None},
])
def test_only_a_policy_gradient_step_with_signal_is_a_real_rl_update(change):
    assert is_rl_update(UPDATE)
    assert not is_rl_update({**UPDATE, **change})


def test_require_rl_update_fails_loudly_with_each_steps_reason():
    opd = {"step": 0, "stage": "opd_warmup", "kind": "opd", "opd_kl": 0.02, "grad_norm": 1.0}
    tied = {"step": 1, "stage": "h10", "kind": "rl", "skipped": "no_training_group",
            "exclusions": {"synthesis_incomplete": 2}}
    with pytest.raises(PreflightError, match=r"no RL step.*step 1 \(h10\): no_training_group.*synthesis_incomplete"):
        require_rl_update([opd, tied], "notebook 05 (paper, fa_gspo)")
    assert require_rl_update([opd, tied, UPDATE], "x") == 1 == rl_updates([opd, tied, UPDATE])


class _Trainer:
    """The trainer surface train_until_rl_update uses: history and train_step (real steps of the schedule)."""

    def __init__(self, rows):
        self.rows, self.history = list(rows), []

    async def train_step(self):
        self.history.append(self.rows.pop(0))
        return self.history[-1]


def test_train_until_rl_update_steps_on_only_until_one_update_and_at_most_the_cap():
    tied = {**UPDATE, "skipped": "no_advantage_signal", "loss": None}
    t = _Trainer([tied, tied, UPDATE, UPDATE])
    assert asyncio.run(train_until_rl_update(t, 10)) == 3 and len(t.history) == 3
    assert asyncio.run(train_until_rl_update(t, 10)) == 0  # already proven: no further step
    t = _Trainer([tied] * 5)
    assert asyncio.run(train_until_rl_update(t, 2)) == 2 and rl_updates(t.history) == 0
    with pytest.raises(ValueError):
        asyncio.run(train_until_rl_update(t, -1))


@pytest.fixture
def fake_stand_ins(monkeypatch):
    """stand_in_policy with the tiny model's load replaced by a counting fake (the cache is what is tested; the
    real build runs in tests/test_preflight.py); the cache is emptied before and after."""
    import kit.models.tiny
    import kit.policy.transformers_policy
    from kit.profiles import stand_in_policy

    built = []

    class FakePolicy:
        def __init__(self, path, max_new_tokens=None):
            self.path, self.max_new_tokens, self.name = path, max_new_tokens, "transformers:fake"
            built.append(self)

    monkeypatch.setattr(kit.models.tiny, "build_tiny_checkpoint", lambda *a, **k: "/nowhere/tiny")
    monkeypatch.setattr(kit.policy.transformers_policy, "TransformersPolicy", FakePolicy)
    stand_in_policy.cache_clear()
    yield built
    stand_in_policy.cache_clear()


def test_stand_in_policy_is_built_once_per_role_and_args(fake_stand_ins):
    from kit.profiles import stand_in_policy

    a = stand_in_policy("answer judge", max_new_tokens=16)
    assert stand_in_policy("answer judge", max_new_tokens=16) is a and len(fake_stand_ins) == 1
    b = stand_in_policy("summarizer", max_new_tokens=16)
    assert b is not a and (a.stand_in_for, b.stand_in_for) == ("answer judge", "summarizer")
    assert stand_in_policy("answer judge", max_new_tokens=32).max_new_tokens == 32 and len(fake_stand_ins) == 3
    with pytest.raises(ValueError):
        stand_in_policy("x", max_new_tokens=0)


def test_preflight_judges_are_named_as_stand_ins_not_as_the_papers_model(fake_stand_ins):
    from kit.eval.judge_factory import make_answer_judge, make_image_judge
    from kit.profiles import get_profile

    for profile, model in (("paper", "kimi-k2.6"), ("points_seeker", "qwen3-235b-a22b")):
        P = get_profile(profile, preflight=True)
        j = make_answer_judge(profile=P)
        assert j.name.startswith("llm:tiny stand-in") and f"for {model}@" in j.name
    assert "tiny stand-in" in make_image_judge(profile=get_profile("paper", preflight=True)).name
    assert make_answer_judge(profile="paper", endpoint="http://x:1/v1").name.startswith("llm:kimi-k2.6@")  # a real run


@pytest.mark.parametrize("notebook, profile, judge", [("05_rl_long_mdr", "paper", "kimi-k2.6"),
                                                      ("06_evaluation", "points_seeker", "qwen3-235b-a22b")])
def test_every_preflight_manifest_records_what_ran_for_every_role(tmp_path, notebook, profile, judge):
    from kit.manifest import write_manifest
    from kit.profiles import DEFAULT_STAND_IN, STAND_IN_ROLES

    cfg = {"notebook": notebook, "profile": profile, "preflight": True}
    m = json.loads(write_manifest(tmp_path, config=cfg, seed=0,
                                  stand_ins={"policy": "tiny-qwen2_vl warm-started on demonstrations"}).read_text())
    s = m["stand_ins"]
    assert set(s) == set(STAND_IN_ROLES)
    assert s["answer judge"] == {"stands_in_for": judge, "ran": DEFAULT_STAND_IN} and "tiny-qwen2_vl" in DEFAULT_STAND_IN
    assert s["policy"]["ran"] == "tiny-qwen2_vl warm-started on demonstrations"
    assert s["OPD teacher"]["stands_in_for"] == "teacher_model"
    plain = json.loads(write_manifest(tmp_path / "p", config={**cfg, "preflight": False}, seed=0).read_text())
    assert "stand_ins" not in plain
    with pytest.raises(ValueError, match="preflight"):
        write_manifest(tmp_path / "q", config={**cfg, "preflight": False}, seed=0, stand_ins={"policy": "x"})
    with pytest.raises(ValueError, match="unknown stand-in roles"):
        write_manifest(tmp_path / "r", config=cfg, seed=0, stand_ins={"critic": "x"})


def test_protocol_demonstrator_answers_in_the_protocols_tag():
    from kit.harness.prompts import turn_protocol
    from kit.rl.warmstart import ProtocolDemonstrator
    from kit.types import ContentPart, Message, SamplingParams

    q = 'Is the picture with the caption "A red bridge" shown on the Wikipedia page "Golden Gate"? Answer yes or no.'
    msgs = [Message(role="user", content=[ContentPart(type="text", text=q)])]
    for protocol in ("weagent_mmsearch", "points_seeker"):
        tag = turn_protocol(protocol).answer_tag
        turn = asyncio.run(ProtocolDemonstrator(protocol).generate(msgs, [], SamplingParams()))
        assert f"<{tag}>No.</{tag}>" in turn.text
    with pytest.raises(ValueError):
        ProtocolDemonstrator("nope")
