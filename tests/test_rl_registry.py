"""kit.rl.registry: losses, advantage estimators, rewards and algorithms registered by name from outside the kit,
checked at registration and at config time, and trained with through the kit's own trainer."""

from __future__ import annotations

import math

import pytest
import torch

from kit.harness.config import HarnessConfig
from kit.rl import registry as R
from kit.rl.objective import ALGORITHMS, GroupAdvantages, algorithm, group_advantages, grpo_loss, gspo_loss, policy_loss
from kit.rl.rewards import RewardBreakdown, score_record
from kit.rl.trainer import RLConfig, RLTrainer
from tests.test_rl_trainer import TASK, batch_of, record, snapshot


@pytest.fixture
def clean_registry():
    saved = {t: dict(getattr(R, t)) for t in ("POLICY_LOSSES", "ADVANTAGE_ESTIMATORS", "REWARDS", "ALGORITHMS")}
    yield
    for t, d in saved.items():
        getattr(R, t).clear()
        getattr(R, t).update(d)


@pytest.fixture(scope="module")
def tiny():
    from kit.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint("qwen2_vl", vocab="local")


def _trainer(tiny, tmp_path, algo):
    from tests.conftest import MemoryBackend

    cfg = RLConfig(algorithm=algo, group_size=2, prompts_per_step=1, lr=1e-2, micro_batch=2)
    return RLTrainer(tiny, MemoryBackend(), [TASK], tmp_path, cfg, labels=["smoke"],
                     harness_config=HarnessConfig.smoke(max_turns=1, tools_enabled=["web_search"]))


def test_the_papers_parts_are_registered_under_their_equations():
    reg = R.registered()
    assert {"gspo", "grpo"} <= set(reg["policy_losses"]) and {"weagent", "points_seeker"} <= set(reg["rewards"])
    assert R.policy_loss_spec("gspo").fn is gspo_loss and R.policy_loss_spec("gspo").level == "sequence"
    assert R.policy_loss_spec("grpo").fn is grpo_loss and R.policy_loss_spec("grpo").level == "token"
    assert R.advantage_spec("eligible_group_norm").fn is group_advantages
    assert "Eq. 7" in R.policy_loss_spec("gspo").equation and "Eq. 5" in R.reward_spec("weagent").equation
    assert (algorithm("fa_gspo").loss, algorithm("fa_gspo").check_runtime, algorithm("gspo").check_runtime) == \
        ("gspo", True, False)
    assert (algorithm("grpo").loss, algorithm("grpo").reward, algorithm("grpo").level) == ("grpo", "points_seeker", "token")
    assert ALGORITHMS is R.ALGORITHMS  # one table: the old name reads the registry


def test_policy_loss_dispatches_to_the_registered_function_with_identical_numbers():
    torch.manual_seed(0)
    old = -torch.rand(3, 6)
    new = old + 0.05 * torch.randn(3, 6)
    mask = torch.ones(3, 6)
    mask[1, 4:] = 0
    adv, w = [1.0, -0.5, 0.2], [0.5, 0.25, 0.25]
    for name, fn in (("fa_gspo", gspo_loss), ("grpo", grpo_loss)):
        spec = algorithm(name)
        got, _ = policy_loss(spec, new, old, mask, adv, w)
        ref, _ = fn(new, old, mask, adv, w, eps_lo=spec.eps_lo, eps_hi=spec.eps_hi)
        assert got.item() == ref.item()


@pytest.mark.parametrize("make, err, words", [
    (lambda: RLConfig(algorithm="ppo"), ValueError, "registered: \\['fa_gspo', 'grpo', 'gspo'"),
    (lambda: R.register_algorithm("a1", loss="nope", advantage="eligible_group_norm", reward="weagent",
                                  check_runtime=True, eps_lo=0.2, eps_hi=0.2), ValueError, "unknown policy loss 'nope'"),
    (lambda: R.register_algorithm("a2", loss="gspo", advantage="eligible_group_norm", reward="nope",
                                  check_runtime=True, eps_lo=0.2, eps_hi=0.2), ValueError, "unknown reward 'nope'"),
    (lambda: R.register_algorithm("a3", loss="gspo", advantage="eligible_group_norm", reward="weagent",
                                  check_runtime=True, eps_lo=math.nan, eps_hi=0.2), ValueError, "eps_lo"),
    (lambda: R.register_algorithm("fa_gspo", loss="gspo", advantage="eligible_group_norm", reward="weagent",
                                  check_runtime=True, eps_lo=0.2, eps_hi=0.2), ValueError, "replace=True"),
    (lambda: R.register_policy_loss("x", level="turn"), ValueError, "'sequence' or 'token'"),
    (lambda: R.register_policy_loss("x", level="token")(lambda logp_new, logp_old, mask: 0), TypeError, "by position"),
    (lambda: R.register_policy_loss("x", level="token")(lambda a, b, c, d, e: 0), TypeError, "eps_lo"),
    (lambda: R.register_policy_loss("x", level="token")(lambda a, b, c, d, e, beta, *, eps_lo, eps_hi: 0), TypeError,
     "beta"),
    (lambda: R.register_reward("r")(lambda record: 0.0), TypeError, "by position"),
    (lambda: R.register_reward("bad name!")(lambda record, correct, *, protocol: 0.0), ValueError, "letters"),
    (lambda: R.register_advantage_estimator("e")(lambda rewards: None), TypeError, "by position"),
])
def test_bad_names_and_contracts_fail_at_once(make, err, words, clean_registry):
    with pytest.raises(err, match=words):
        make()


def test_a_loss_registered_outside_the_kit_trains_a_step(tiny, tmp_path, clean_registry):
    calls = []

    @R.register_policy_loss("clipped_pg", level="sequence", equation="REINFORCE with a clipped sequence ratio")
    def clipped_pg(logp_new, logp_old, mask, advantages, weights, *, eps_lo, eps_hi):
        calls.append((logp_new.shape, eps_lo, eps_hi))
        m = mask.bool()
        seq = torch.where(m, logp_new, torch.zeros_like(logp_new)).sum(-1) / m.sum(-1)
        a = torch.as_tensor(advantages, dtype=seq.dtype)
        loss = -(torch.as_tensor(weights, dtype=seq.dtype) * a * seq).sum()
        return loss, {"ratio_mean": 1.0, "clip_frac": 0.0, "rows": int(m.shape[0])}

    R.register_algorithm("my_pg", loss="clipped_pg", advantage="eligible_group_norm", reward="weagent",
                         check_runtime=True, eps_lo=0.1, eps_hi=0.3)
    tr = _trainer(tiny, tmp_path, "my_pg")
    before = snapshot(tr)
    m = tr.rl_update(batch_of([[("Eiffel Tower", 1.0, "answered"), ("Big Ben", 0.0, "answered")]]), tr.schedule.knobs)
    assert "skipped" not in m and m["trained_trajectories"] == 2 and calls and calls[0][1:] == (0.1, 0.3)
    assert any(float((p - before[n]).abs().max()) > 0 for n, p in snapshot(tr).items())
    assert tr.cfg.resolved_dump()["eps_hi"] == 0.3


def test_a_loss_breaking_its_contract_is_named(tiny, tmp_path, clean_registry):
    R.register_policy_loss("no_stats", level="token")(lambda a, b, c, d, e, *, eps_lo, eps_hi: a.sum())
    R.register_algorithm("broken", loss="no_stats", advantage="eligible_group_norm", reward="weagent",
                         check_runtime=False, eps_lo=0.2, eps_hi=0.2)
    with pytest.raises(TypeError, match="policy loss 'no_stats' returned"):
        policy_loss(algorithm("broken"), torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), [1.0], [1.0])


async def test_a_reward_registered_outside_the_kit_scores_and_trains(tiny, tmp_path, clean_registry):
    from kit.eval.judges import RuleJudge

    @R.register_reward("short_answer", equation="C · (1 if the answer has at most 3 words else 0.5)")
    def short_answer(record, correct, *, protocol):
        return correct * (1.0 if len((record.final_response or "").split()) <= 3 else 0.5)

    R.register_algorithm("short_fa_gspo", loss="gspo", advantage="eligible_group_norm", reward="short_answer",
                         check_runtime=True, eps_lo=0.2, eps_hi=0.2)
    judge = RuleJudge("contains")
    long_rb = await score_record(record(0, "It is the Eiffel Tower in Paris"), judge, kind="short_answer")
    short_rb = await score_record(record(1, "Eiffel Tower"), judge, kind="short_answer")
    assert (long_rb.reward, short_rb.reward, short_rb.format, short_rb.judge) == (0.5, 1.0, 1.0, judge.name)
    tr = _trainer(tiny, tmp_path, "short_fa_gspo")
    before = snapshot(tr)
    m = tr.rl_update(batch_of([[("It is the Eiffel Tower in Paris", long_rb.reward, "answered"),
                                ("Eiffel Tower", short_rb.reward, "answered")]]), tr.schedule.knobs)
    assert "skipped" not in m and m["trained_trajectories"] == 2
    assert any(float((p - before[n]).abs().max()) > 0 for n, p in snapshot(tr).items())


async def test_a_failed_judge_makes_a_registered_reward_nan_and_a_bad_return_is_named(clean_registry):
    class Dead:
        name = "dead"

        def judge_task(self, task, prediction):
            raise ConnectionError("down")

    calls = []
    R.register_reward("half")(lambda record, correct, *, protocol: calls.append(correct) or 0.5 * correct)
    rb = await score_record(record(0, "Eiffel Tower"), Dead(), kind="half")
    assert math.isnan(rb.reward) and rb.correct is None and "down" in rb.judge_error
    assert calls == [] and rb.format == 1.0  # never called with a made-up C; the kit's format term is reported
    ps = await score_record(record(0, "Eiffel Tower"), Dead(), kind="points_seeker")
    assert math.isnan(ps.reward) and (ps.format, ps.tool) == (1.0, 0.0)  # the kit's own reward's terms
    R.register_reward("text")(lambda record, correct, *, protocol: "high")
    from kit.eval.judges import RuleJudge

    with pytest.raises(TypeError, match="reward 'text' returned str"):
        await score_record(record(0, "Eiffel Tower"), RuleJudge(), kind="text")
    assert isinstance(await score_record(record(0, "x"), RuleJudge(), kind="weagent"), RewardBreakdown)


def test_an_estimator_registered_outside_the_kit_is_used_by_the_trainer(tiny, tmp_path, clean_registry):
    seen = []

    @R.register_advantage_estimator("rank", equation="centred ranks within the group")
    def rank(rewards, eligible):
        seen.append(rewards)
        out = group_advantages(rewards, eligible)
        for g, rg in enumerate(rewards):
            order = sorted(range(len(rg)), key=lambda i: rg[i])
            out.advantages[g] = [float(order.index(i)) - (len(rg) - 1) / 2 for i in range(len(rg))]
        return out

    R.register_algorithm("rank_gspo", loss="gspo", advantage="rank", reward="weagent", check_runtime=True,
                         eps_lo=0.2, eps_hi=0.2)
    tr = _trainer(tiny, tmp_path, "rank_gspo")
    m = tr.rl_update(batch_of([[("Eiffel Tower", 0.9, "answered"), ("Big Ben", 0.1, "answered")]]), tr.schedule.knobs)
    assert seen == [[[0.9, 0.1]]] and "skipped" not in m
    assert isinstance(R.advantage_spec("rank").fn([[1.0, 0.0]], [[True, True]]), GroupAdvantages)


def test_a_built_in_name_is_refused_even_when_registered_before_any_lookup():
    """A fresh interpreter registering ``weagent`` first must not shadow the paper's Eq. 5 reward."""
    import subprocess
    import sys

    code = ("import kit.rl.registry as R\n"
            "try:\n    R.register_reward('weagent')(lambda record, correct, *, protocol: 1.0)\n"
            "except ValueError as e:\n    print('refused', e)\n"
            "print(R.reward_spec('weagent').fn.__module__, R.algorithm('fa_gspo').reward)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "refused reward 'weagent' is registered already" in out and "kit.rl.rewards weagent" in out


def test_modules_named_in_the_plugins_variable_register_in_every_process(tmp_path):
    """``$MMSEARCH_KIT_PLUGINS``: how a loss registered by the user reaches a process that never imported it (verl's
    Ray workers); a module that cannot be imported is named with the variable."""
    import os
    import subprocess
    import sys

    (tmp_path / "my_lab_losses.py").write_text(
        "from kit.rl.registry import register_policy_loss\n"
        "@register_policy_loss('lab_pg', level='token')\n"
        "def lab_pg(logp_new, logp_old, mask, advantages, weights, *, eps_lo, eps_hi):\n"
        "    return -(logp_new * mask).sum(), {'ratio_mean': 1.0, 'clip_frac': 0.0, 'rows': 1}\n")
    code = "import kit.rl.registry as R; print(R.policy_loss_spec('lab_pg').level, sorted(R.registered()['policy_losses']))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "MMSEARCH_KIT_PLUGINS": " my_lab_losses , "}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "token ['grpo', 'gspo', 'lab_pg']"
    env["MMSEARCH_KIT_PLUGINS"] = "my_lab_lossez"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert r.returncode != 0 and "MMSEARCH_KIT_PLUGINS names 'my_lab_lossez'" in r.stderr
