"""FA-GSPO / GSPO / GRPO advantages and losses against hand-computed values (WeAgent Eq. 4, 6, 7)."""

from __future__ import annotations

import math

import pytest
import torch

from kit.rl.objective import (
    ALGORITHMS,
    algorithm,
    group_advantages,
    grpo_loss,
    gspo_loss,
    policy_loss,
    sequence_log_ratio,
    token_nll_loss,
)

NAN = float("nan")

# Four groups: A (3 of 4 eligible), B (1 eligible), C (0 eligible), D (2 eligible + one NaN-reward excluded).
REWARDS = [[1.0, 0.0, 1.0, 0.1], [0.9, 0.0, 0.1], [0.0, 1.0], [0.9, 0.0, NAN]]
ELIGIBLE = [[True, True, False, True], [True, False, False], [False, False], [True, True, False]]


def test_eligible_only_mean_unbiased_std_and_advantages():
    adv = group_advantages(REWARDS, ELIGIBLE)
    # Group A: mean (1 + 0 + 0.1) / 3; unbiased std sqrt(0.60667 / 2); the ineligible 1.0 is ignored.
    assert adv.n == [3, 1, 0, 2]
    assert adv.mean[0] == pytest.approx(0.3666666667)
    assert adv.std[0] == pytest.approx(0.5507570547)
    assert adv.advantages[0] == pytest.approx([1.1499302242, -0.6657490771, 0.0, -0.4841811470])
    # Group B: one eligible -> dropped, every advantage 0 (mean/std still reported over its one member).
    assert adv.advantages[1] == [0.0, 0.0, 0.0]
    assert adv.mean[1] == pytest.approx(0.9) and adv.std[1] == 0.0
    # Group C: none eligible -> dropped, mean undefined.
    assert adv.advantages[2] == [0.0, 0.0] and math.isnan(adv.mean[2])
    # Group D: ±0.45 / (0.636396 + 1e-6); the NaN reward is excluded and gets 0.
    assert adv.std[3] == pytest.approx(0.6363961031)
    assert adv.advantages[3] == pytest.approx([0.7071056701, -0.7071056701, 0.0])
    assert adv.train_groups == [0, 3] and adv.dropped_groups == [1, 2]


def test_batch_weights_are_one_over_train_groups_times_n_g():
    w = group_advantages(REWARDS, ELIGIBLE).weights()
    assert w[0] == pytest.approx([1 / 6, 1 / 6, 0.0, 1 / 6])
    assert w[1] == [0.0, 0.0, 0.0] and w[2] == [0.0, 0.0]
    assert w[3] == pytest.approx([1 / 4, 1 / 4, 0.0])


def test_degenerate_group_has_no_signal_and_bad_inputs_raise():
    adv = group_advantages([[0.1, 0.1, 0.1]], [[True, True, True]])
    assert adv.advantages == [[0.0, 0.0, 0.0]] and adv.degenerate_groups == [0] and not adv.has_signal()
    assert not group_advantages([[1.0, 0.0]], [[True, False]]).train_groups
    with pytest.raises(ValueError, match="non-finite"):
        group_advantages([[NAN, 1.0]], [[True, True]])
    with pytest.raises(ValueError, match="eligibility flags"):
        group_advantages([[1.0, 0.0]], [[True]])
    with pytest.raises(ValueError, match="unknown algorithm"):
        algorithm("ppo")


def test_sequence_ratio_is_geometric_mean_over_generated_tokens_only():
    new = torch.tensor([[0.1, 0.3, 5.0]])
    old = torch.zeros(1, 3)
    mask = torch.tensor([[True, True, False]])  # the third token is a tool observation: ignored
    assert float(torch.exp(sequence_log_ratio(new, old, mask))) == pytest.approx(1.2214027582)
    with pytest.raises(ValueError, match="no model-generated token"):
        sequence_log_ratio(new, old, torch.zeros(1, 3, dtype=torch.bool))


def _batch():
    """Flattened groups A and D of REWARDS with token log-probs; row 2 (excluded) is NaN."""
    adv = group_advantages(REWARDS, ELIGIBLE)
    rows = [(0, 0), (0, 1), (0, 2), (0, 3), (3, 0), (3, 1), (3, 2)]
    a = [adv.advantages[g][i] for g, i in rows]
    w = [adv.weights()[g][i] for g, i in rows]
    old = torch.full((7, 4), -1.0)
    new = old.clone()
    new[2] = NAN  # an excluded trajectory with broken log-probs
    new[6] = NAN
    new.requires_grad_(True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0],
                         [1, 1, 1, 1], [0, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    return new, old, mask, a, w


def test_fa_gspo_gradient_matches_hand_values_and_excluded_rows_get_exactly_zero():
    new, old, mask, a, w = _batch()
    loss, st = gspo_loss(new, old, mask, a, w, eps_lo=3e-4, eps_hi=4e-4)
    assert float(loss) == pytest.approx(0.0, abs=1e-7)  # ρ = 1 and advantages sum to 0 within each group
    loss.backward()
    g = new.grad
    # d(-w·ρ·A)/d logp_t = -w·A/T on generated tokens at ρ = 1 (inside the clip range).
    T = mask.sum(-1).tolist()
    for r in (0, 1, 3, 4, 5):
        expect = torch.where(mask[r], torch.tensor(-w[r] * a[r] / T[r]), torch.tensor(0.0))
        assert torch.allclose(g[r], expect, atol=1e-7), r
    assert torch.equal(g[2], torch.zeros(4)) and torch.equal(g[6], torch.zeros(4))
    assert g[0, 0].item() == pytest.approx(-(1 / 6) * 1.1499302242 / 2)
    assert st["rows"] == 5 and st["ratio_mean"] == pytest.approx(1.0)


def test_asymmetric_clipping():
    old = torch.zeros(4, 1)
    mask = torch.ones(4, 1, dtype=torch.bool)
    # ratios 1.25, 0.85, 1.5, 0.5 with advantages +1, -1, -1, +1; eps_lo 0.1, eps_hi 0.3
    new = torch.log(torch.tensor([[1.25], [0.85], [1.5], [0.5]])).requires_grad_(True)
    a = [1.0, -1.0, -1.0, 1.0]
    loss, st = gspo_loss(new, old, mask, a, [1.0] * 4, eps_lo=0.1, eps_hi=0.3)
    # S = [1.25 (inside), -0.9 (clipped low), -1.5 (unclipped: min picks it), 0.5 (unclipped)]
    assert float(loss) == pytest.approx(-(1.25 - 0.9 - 1.5 + 0.5))
    loss.backward()
    assert new.grad[1].item() == 0.0  # clipped branch: no gradient
    assert new.grad[0].item() == pytest.approx(-1.25) and new.grad[2].item() == pytest.approx(1.5)
    assert st["clip_frac"] == pytest.approx(0.25)


def test_grpo_token_level_clip_hand_value():
    new = torch.tensor([[0.1, 0.3, 9.0]], requires_grad=True)
    old = torch.zeros(1, 3)
    mask = torch.tensor([[True, True, False]])
    loss, _ = grpo_loss(new, old, mask, [1.0], [0.5], eps_lo=0.2, eps_hi=0.2)
    # tokens: e^0.1 = 1.10517 (inside), e^0.3 = 1.34986 -> 1.2; mean 1.152585, weight 0.5
    assert float(loss) == pytest.approx(-0.5 * 1.1525854590)
    loss.backward()
    assert new.grad[0, 1].item() == 0.0 and new.grad[0, 2].item() == 0.0
    assert new.grad[0, 0].item() == pytest.approx(-0.5 * math.exp(0.1) / 2)


def test_policy_loss_dispatch_and_no_rows():
    new, old, mask, a, w = _batch()
    l1, _ = policy_loss(ALGORITHMS["fa_gspo"], new, old, mask, a, w)
    l2, _ = gspo_loss(new, old, mask, a, w, eps_lo=3e-4, eps_hi=4e-4)
    assert float(l1) == float(l2)
    l0, st = gspo_loss(new, old, mask, a, [0.0] * 7, eps_lo=0.1, eps_hi=0.1)
    assert float(l0) == 0.0 and st["rows"] == 0
    assert float(token_nll_loss(torch.tensor([[-1.0, -3.0]]), torch.tensor([[True, False]]))) == 1.0


def test_gspo_loss_optional_log_ratio_clamp():
    """``max_log_ratio`` (the verl recipe's overflow guard) clamps log ρ; None leaves the kit's loss as is."""

    old = torch.zeros(2, 3)
    new = torch.tensor([[12.0, 12.0, 12.0], [0.01, 0.0, -0.01]])
    mask = torch.ones(2, 3)
    adv, w = [-1.0, 0.5], [0.5, 0.5]
    plain, _ = gspo_loss(new, old, mask, adv, w, eps_lo=0.2, eps_hi=0.2)
    same, _ = gspo_loss(new, old, mask, adv, w, eps_lo=0.2, eps_hi=0.2, max_log_ratio=None)
    clamped, _ = gspo_loss(new, old, mask, adv, w, eps_lo=0.2, eps_hi=0.2, max_log_ratio=10.0)
    assert plain.item() == same.item() == pytest.approx(0.5 * math.exp(12.0) - 0.25, rel=1e-6)
    assert clamped.item() == pytest.approx(0.5 * math.exp(10.0) - 0.25, rel=1e-6)
