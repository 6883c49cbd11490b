"""Issue 33 part 3: sign checks on a tiny budget (tiny random Qwen2-VL, CPU).

* one SFT step (the warm start's loop, :func:`kit.rl.warmstart.sft_warm_start`) lowers the masked token loss on a
  held-out batch drawn from the same distribution;
* one RL update through the trainer's own path (:meth:`kit.rl.trainer.RLTrainer.rl_update`, FA-GSPO's sequence
  loss and GRPO's token loss) raises the log-probability of the higher-advantage trajectory of its group and lowers
  the lower-advantage one; with the rewards swapped the moves swap;
* the loss functions themselves (:func:`kit.rl.objective.gspo_loss` / :func:`~kit.rl.objective.grpo_loss`): the
  gradient of the loss w.r.t. a trajectory's log-probs has the sign of minus its advantage, only on masked tokens.

They catch a sign error in the advantage, a mask that trains the wrong tokens (prompt instead of generated tokens:
the generated tokens' log-probs would not move the right way) and a stale old policy (the first update's ratio is
exactly 1; a stale one makes the GSPO sequence ratio leave its 3e-4 clip band and the update would vanish).
"""

from __future__ import annotations

import pytest
import torch

from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.rl.eligibility import check
from kit.rl.logprobs import token_logprobs
from kit.rl.objective import grpo_loss, gspo_loss, token_nll_loss
from kit.rl.rewards import RewardBreakdown
from kit.rl.rollout import RolloutBatch, Trajectory
from kit.rl.trainer import RLConfig, RLTrainer
from kit.types import ContentPart, Message

TASK = Task(id="t", question="Is the picture with the caption \"Ray Charles at the piano\" shown on the Wikipedia "
            "page \"Ray Charles\"? Answer yes or no.", answers=["yes"], metadata={"rule_mode": "exact"})


@pytest.fixture(scope="module")
def tiny():
    from kit.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint("qwen2_vl", vocab="local")


def _text(role: str, text: str) -> Message:
    return Message(role=role, content=[ContentPart(type="text", text=text)])


def record(rid: str, question: str, answer: str) -> EpisodeRecord:
    msgs = [_text("system", "You answer questions."), _text("user", question),
            _text("assistant", f"<think>The claim is checked.</think><response>{answer}</response>")]
    return EpisodeRecord(id=rid, task=TASK, config_hash="x", messages=msgs, status="answered", trainable=True,
                         final_response=answer)


def test_one_sft_step_lowers_held_out_loss(tiny, tmp_path):
    from transformers import AutoModelForImageTextToText

    from kit.models.processor import load_image_only_processor
    from kit.rl.warmstart import sft_warm_start
    from kit.train.sft_data import SFTCollator, SFTEncoder

    subjects = ["Ray Charles", "Quincy Jones", "Aretha Franklin", "Billie Holiday", "Nat King Cole", "Count Basie",
                "Duke Ellington", "Etta James", "Sam Cooke", "Dinah Washington", "Milt Jackson", "Percy Mayfield"]
    recs = [record(f"r{i}", f"Is the picture of {s} shown on the page \"{s}\"? Answer yes or no.", "yes" if i % 2 else "no")
            for i, s in enumerate(subjects)]
    train, held = recs[:8], recs[8:]  # the same distribution, disjoint questions
    enc = SFTEncoder(load_image_only_processor(tiny))
    batch = SFTCollator(enc.pad_token_id)([enc.encode(r) for r in held])

    def held_loss(path) -> float:
        model = AutoModelForImageTextToText.from_pretrained(str(path), dtype=torch.float32)
        with torch.no_grad():
            ts = token_logprobs(model, batch)
        return float(token_nll_loss(ts.logp, ts.mask))

    out = sft_warm_start(tiny, train, tmp_path / "warm", steps=1, lr=5e-3, batch_size=4, seed=0)
    before, after = held_loss(tiny), held_loss(out["checkpoints"][1])
    assert after < before - 0.05, (before, after)


def _trainer(tiny, tmp_path, algorithm: str) -> RLTrainer:
    from tests.conftest import MemoryBackend

    cfg = RLConfig(algorithm=algorithm, group_size=2, prompts_per_step=1, lr=1e-4, micro_batch=2, save_every=10**6)
    return RLTrainer(tiny, MemoryBackend(), [TASK], tmp_path, cfg, labels=["smoke"],
                     harness_config=HarnessConfig.smoke(max_turns=1, tools_enabled=["web_search"]))


def _group(rewards: dict[str, float]) -> RolloutBatch:
    trajs = []
    for k, (ans, r) in enumerate(rewards.items()):
        rec = record(f"g{k}", TASK.question, ans)
        trajs.append(Trajectory(rec, 0, RewardBreakdown(r, r, 1.0, 0.0), check(rec, r)))
    return RolloutBatch(tasks=[TASK], groups=[trajs], wall_s=0.0)


def _seq_logp(tr: RLTrainer, batch: RolloutBatch) -> list[float]:
    """Summed log-prob of each trajectory's model-generated tokens under the trainer's current weights."""
    b = tr.collate([tr.encoder.encode(t.record) for t in batch.trajectories()])
    with torch.no_grad():
        ts = token_logprobs(tr.model, b)
    return [float(ts.logp[r][ts.mask[r]].sum()) for r in range(ts.logp.shape[0])]


@pytest.mark.parametrize("algorithm", ["fa_gspo", "grpo"])
@pytest.mark.parametrize("swap", [False, True])
def test_one_rl_update_moves_log_probs_in_the_advantage_direction(tiny, tmp_path, algorithm, swap):
    tr = _trainer(tiny, tmp_path, algorithm)
    # the two answers share few tokens: one Adam step moves every weight by about lr, so with near-identical
    # sequences (a lone "yes" vs "no") the shared tokens' context shift can outweigh the one differing token
    yes, no = "yes, the picture is on that page", "no, it is not shown there"
    rewards = {yes: 1.0, no: 0.0} if not swap else {yes: 0.0, no: 1.0}
    batch = _group(rewards)
    before = _seq_logp(tr, batch)
    m = tr.rl_update(batch, tr.schedule.knobs)
    assert "skipped" not in m and m["trained_trajectories"] == 2, m
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # old policy = the weights that are updated
    after = _seq_logp(tr, batch)
    hi, lo = (0, 1) if rewards[yes] > rewards[no] else (1, 0)
    assert after[hi] > before[hi] and after[lo] < before[lo], (algorithm, rewards, before, after)


@pytest.mark.parametrize("loss_fn", [gspo_loss, grpo_loss])
def test_loss_gradient_has_minus_the_advantage_sign_on_masked_tokens_only(loss_fn):
    torch.manual_seed(0)
    old = -torch.rand(2, 6) - 0.1
    new = old.clone().requires_grad_(True)
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0]], dtype=torch.bool)
    loss, st = loss_fn(new, old, mask, [1.0, -1.0], [0.5, 0.5], eps_lo=0.2, eps_hi=0.2)
    loss.backward()
    g = new.grad
    assert st["ratio_mean"] == pytest.approx(1.0)
    assert bool((g[0][mask[0]] < 0).all()) and bool((g[1][mask[1]] > 0).all())  # descent raises A>0, lowers A<0
    assert bool((g[~mask] == 0).all())  # prompt / observation tokens get no gradient


# ----------------------------------------------------------------------------- the benchmark's harness (issue 33)
def _search_then_answer_batch(algorithm_name: str, memory_backend, tmp_path):
    """Rollouts of a policy that searches in its one regular turn and answers when asked, in the learning
    benchmark's harness (smoke, one regular turn, web_search), as ``algorithm_name`` runs them."""
    import asyncio

    from kit.eval.judges import RuleJudge
    from kit.harness.loop import Harness
    from kit.policy.scripted import ScriptedPolicy, tool_call_text
    from kit.rl.eligibility import harness_config_for
    from kit.rl.objective import algorithm
    from kit.rl.rollout import rollout_groups

    cfg = harness_config_for(algorithm_name, HarnessConfig.smoke(max_turns=1, tools_enabled=["web_search"]))
    script = [tool_call_text("web_search", {"query": "a"}), "<think>done</think><response>yes</response>"]

    def factory(task, sample):
        return Harness(ScriptedPolicy(list(script)), memory_backend, cfg)

    return asyncio.run(rollout_groups(factory, [Task(id="q", question="Is it?", answers=["yes"])], 2, tmp_path,
                                      judge=RuleJudge("contains"), spec=algorithm(algorithm_name), progress=False))


def test_vanilla_gspo_cannot_answer_after_searching_with_one_regular_turn(memory_backend, tmp_path):
    """bench_learning's GSPO row (reward 0 at every step): without self-recovery there is no forced synthesis
    turn, so a policy that searches first ends budget_exhausted with no answer (C = F = 0); FA-GSPO's
    synthesis turn lets the same policy answer (C = F = 1)."""
    va = _search_then_answer_batch("gspo", memory_backend, tmp_path / "gspo")
    assert [t.record.status for t in va.trajectories()] == ["budget_exhausted"] * 2
    assert all(t.record.final_response is None and t.reward.reward == 0.0 and t.reward.format == 0.0
               for t in va.trajectories())
    assert va.eligible() == [[True, True]]  # no runtime filter: counted, with no advantage signal
    fa = _search_then_answer_batch("fa_gspo", memory_backend, tmp_path / "fa")
    assert [t.record.status for t in fa.trajectories()] == ["max_turns_synthesis"] * 2
    assert all(t.reward.reward == pytest.approx(1.0) and t.reward.format == 1.0 for t in fa.trajectories())


def test_score_groups_scores_the_same_records_for_another_algorithm(memory_backend, tmp_path):
    """The benchmark's shared lr-0 control: FA-GSPO's rollouts rescored as GRPO score them."""
    import asyncio

    from kit.eval.judges import RuleJudge
    from kit.rl.objective import algorithm
    from kit.rl.rewards import points_seeker_reward
    from kit.rl.rollout import score_groups

    fa = _search_then_answer_batch("fa_gspo", memory_backend, tmp_path)
    recs = [[t.record for t in g] for g in fa.groups]
    gr = asyncio.run(score_groups(recs, fa.tasks, judge=RuleJudge("contains"), spec=algorithm("grpo"),
                                  wall_s=fa.wall_s))
    assert [t.record for t in gr.trajectories()] == [t.record for t in fa.trajectories()]
    assert [t.reward.reward for t in gr.trajectories()] == [points_seeker_reward(r, 1.0).reward for g in recs for r in g]
    assert gr.wall_s == fa.wall_s and gr.eligible() == [[True, True]]
