"""The single-node trainer on a tiny random Qwen2-VL (CPU): an update from hand-made groups, excluded
trajectories contributing nothing, skipped steps, LoRA with a frozen vision tower, checkpoint/resume,
OPD, and (slow) a full step through the harness."""

from __future__ import annotations

import math

import pytest
import torch

from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Event, Task
from kit.rl.eligibility import check
from kit.rl.rewards import RewardBreakdown
from kit.rl.rollout import RolloutBatch, Trajectory
from kit.rl.staging import Stage
from kit.rl.trainer import RLConfig, RLTrainer
from kit.types import ContentPart, Message

TASK = Task(id="t", question="Which tower is in Paris?", answers=["Eiffel Tower"])


@pytest.fixture(scope="module")
def tiny():
    from kit.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint("qwen2_vl", vocab="local")


def record(i: int, answer: str, status="answered", events=()):
    msgs = [Message(role="system", content=[ContentPart(type="text", text="You answer questions.")]),
            Message(role="user", content=[ContentPart(type="text", text=TASK.question)]),
            Message(role="assistant", content=[ContentPart(type="text", text=f"<think>t{i}</think><response>{answer}</response>")])]
    return EpisodeRecord(id=f"r{i}", task=TASK, config_hash="x", messages=msgs, status=status,
                         trainable=status == "answered", final_response=answer,
                         events=[Event(type=e, turn=1) for e in events])


def batch_of(groups):
    """groups: [[(answer, reward, status), ...], ...] -> RolloutBatch with eligibility from the rules."""
    out, k = [], 0
    for g, members in enumerate(groups):
        row = []
        for ans, r, status in members:
            rec = record(k, ans, status)
            row.append(Trajectory(rec, g, RewardBreakdown(r, r, 1.0, 0.0), check(rec, r)))
            k += 1
        out.append(row)
    return RolloutBatch(tasks=[TASK] * len(groups), groups=out, wall_s=1.0)


def make(tiny, tmp_path, **kw):
    from tests.conftest import MemoryBackend

    cfg = RLConfig(**{"group_size": 2, "prompts_per_step": 1, "lr": 1e-2, "micro_batch": 2, **kw})
    return RLTrainer(tiny, MemoryBackend(), [TASK], tmp_path, cfg, labels=["smoke"],
                     harness_config=HarnessConfig.smoke(max_turns=1, tools_enabled=["web_search"]))


def snapshot(tr):
    return {n: p.detach().clone() for n, p in tr.model.named_parameters() if p.requires_grad}


def test_update_changes_weights_and_excluded_trajectories_contribute_nothing(tiny, tmp_path):
    base = [[("Eiffel Tower", 1.0, "answered"), ("Big Ben", 0.1, "answered")]]
    with_excluded = [[("Eiffel Tower", 1.0, "answered"), ("Big Ben", 0.1, "answered"),
                      ("garbage garbage", 0.0, "context_limit")]]
    deltas = []
    for i, groups in enumerate([base, with_excluded]):
        tr = make(tiny, tmp_path / f"run{i}", micro_batch=1)
        before = snapshot(tr)
        m = tr.rl_update(batch_of(groups), tr.schedule.knobs)
        assert "skipped" not in m and m["trained_trajectories"] == 2 and m["groups"]["train_groups"] == 1
        after = snapshot(tr)
        deltas.append({n: after[n] - before[n] for n in before})
        assert any(float(d.abs().max()) > 0 for d in deltas[-1].values())
    assert m["exclusions"] == {"context_limit": 1}
    for n in deltas[0]:
        assert torch.allclose(deltas[0][n], deltas[1][n], atol=1e-7), n
    # vision tower frozen (paper): no gradient reaches it
    assert not any(p.requires_grad for n, p in tr.model.named_parameters() if "visual" in n)


def test_steps_without_signal_are_skipped_not_silent(tiny, tmp_path):
    tr = make(tiny, tmp_path)
    before = snapshot(tr)
    m = tr.rl_update(batch_of([[("a", 1.0, "answered"), ("b", 0.0, "wall_clock")],
                               [("c", 0.0, "error"), ("d", 0.0, "error")]]), tr.schedule.knobs)
    assert m["skipped"] == "no_training_group" and m["groups"]["dropped_groups"] == 2
    m = tr.rl_update(batch_of([[("a", 0.1, "answered"), ("b", 0.1, "answered")]]), tr.schedule.knobs)
    assert m["skipped"] == "no_advantage_signal" and m["groups"]["degenerate_groups"] == 1
    m = tr.rl_update(batch_of([[("a", math.nan, "answered"), ("b", 1.0, "answered")]]), tr.schedule.knobs)
    assert m["skipped"] == "no_training_group" and m["exclusions"] == {"reward_nan": 1}
    after = snapshot(tr)
    assert all(torch.equal(before[n], after[n]) for n in before)


def test_lora_checkpoint_and_resume(tiny, tmp_path):
    tr = make(tiny, tmp_path, finetune="lora", lora_rank=4)
    trainable, total = tr.trainable_parameter_count()
    assert 0 < trainable < total
    assert all("lora_" in n for n, p in tr.model.named_parameters() if p.requires_grad)
    tr.rl_update(batch_of([[("Eiffel Tower", 1.0, "answered"), ("x", 0.0, "answered")]]), tr.schedule.knobs)
    for k in range(4):  # logged metrics: steps 0-2 done before the checkpoint (step 1 logged twice), 3 after
        tr._append_metrics({"step": k, "loss": float(k)})
    tr._append_metrics({"step": 1, "loss": 10.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "lo')  # a line cut by a crash
    tr.step = 3
    tr.schedule.observe(2, 0.5, 1.0)
    tr.save_checkpoint()
    w = snapshot(tr)
    tr2 = make(tiny, tmp_path, finetune="lora", lora_rank=4)
    assert tr2.step == 3 and tr2.schedule.state.stage_step == 1
    # the resumed trainer reports the steps before its checkpoint, last logged row per step
    assert [(m["step"], m["loss"]) for m in tr2.history] == [(0, 0.0), (1, 10.0), (2, 2.0)]
    w2 = snapshot(tr2)
    assert all(torch.equal(w[n], w2[n]) for n in w)
    assert tr2.log.of_type("resume")
    final = tr2.save_final()
    assert (final / "config.json").exists() and (final / "model.safetensors").exists()


def test_a_checkpoint_of_another_run_is_never_resumed(tiny, tmp_path):
    """Issue 26: notebook 05 under points_seeker after a paper run loaded the paper run's checkpoint, optimizer
    and stage index from the same folder. A trainer resumes only its own configuration's checkpoint."""
    from kit.runs import ResumeMismatch

    tr = make(tiny, tmp_path, lr=1e-2)
    tr.step = 1
    tr.save_checkpoint()
    with pytest.raises(ResumeMismatch, match=r"rl\.lr: 0\.01 -> 0\.001") as e:
        make(tiny, tmp_path, lr=1e-3)
    assert "another run" in str(e.value)
    with pytest.raises(ResumeMismatch, match="stages"):
        RLTrainer(tiny, tr.backend, [TASK], tmp_path, tr.cfg, stages=[Stage("h2", max_turns=2)],
                  harness_config=HarnessConfig.smoke(max_turns=1, tools_enabled=["web_search"]))
    assert make(tiny, tmp_path, lr=1e-2, save_every=3).step == 1  # cadence is not identity: resumed


def test_opd_update_moves_student_toward_teacher(tiny, tmp_path):
    from kit.models.tiny import build_tiny_checkpoint
    from kit.rl.opd import InProcessTeacher
    from tests.conftest import MemoryBackend

    teacher = InProcessTeacher(build_tiny_checkpoint("qwen2_vl", vocab="local", seed=1))
    tr = RLTrainer(tiny, MemoryBackend(), [TASK], tmp_path, RLConfig(group_size=2, prompts_per_step=1, lr=3e-3, micro_batch=2),
                   stages=[Stage("opd", "opd", steps=1), Stage("rl")], teacher=teacher,
                   harness_config=HarnessConfig.smoke(tools_enabled=["web_search"]))
    b = batch_of([[("Eiffel Tower", 1.0, "answered"), ("x", 0.0, "answered")]])
    kls = [tr.opd_update(b)["opd_kl"] for _ in range(4)]
    assert kls[0] > 0 and kls[-1] < kls[0]
    with pytest.raises(ValueError, match="teacher"):
        RLTrainer(tiny, MemoryBackend(), [TASK], tmp_path / "x", stages=[Stage("opd", "opd")])


@pytest.mark.slow
async def test_full_step_through_harness(tiny, tmp_path):
    tr = make(tiny, tmp_path, group_size=2)
    m = await tr.train_step()
    assert m["rollout_trajectories"] == 2 and m["step"] == 0
    assert "skipped" in m or "loss" in m  # a tiny random model: usually skipped (no eligible pair), always logged
    types = [e["type"] for e in tr.log.events]
    assert types[:2] == ["stage_start", "run_start"] and "step" in types and "checkpoint" in types
    assert (tmp_path / "metrics.jsonl").exists() and (tmp_path / "rollouts" / "step_00000" / "episodes.jsonl").exists()
    assert {r["mechanism"] for r in m["recovery"]} >= {"overlong_retry", "forced_final_answer", "context_limit"}


def test_nan_logprobs_are_excluded_and_nan_loss_skips(tiny, tmp_path, monkeypatch):
    import kit.rl.trainer as trainer_mod

    real = trainer_mod.token_logprobs
    poison = {"old": True, "new": False}

    def fake(model, batch, **kw):
        ts = real(model, batch, **kw)
        which = "new" if torch.is_grad_enabled() else "old"
        if poison[which]:
            ts.logp = ts.logp.clone()
            ts.logp[0] = float("nan")
        return ts

    monkeypatch.setattr(trainer_mod, "token_logprobs", fake)
    tr = make(tiny, tmp_path, micro_batch=3)
    groups = [[("Eiffel Tower", 1.0, "answered"), ("x", 0.0, "answered"), ("y", 0.5, "answered")]]
    m = tr.rl_update(batch_of(groups), tr.schedule.knobs)
    assert m["exclusions"] == {"logprob_nan": 1} and m["trained_trajectories"] == 2 and math.isfinite(m["loss"])
    assert all(torch.isfinite(p).all() for p in tr.model.parameters())
    poison.update(old=False, new=True)
    before = snapshot(tr)
    m = tr.rl_update(batch_of(groups), tr.schedule.knobs)
    # the NaN row has weight > 0 here, so the loss is NaN: the update is skipped, weights untouched
    assert m["skipped"] == "loss_nan"
    assert all(torch.equal(before[n], p) for n, p in snapshot(tr).items())
