"""FA-GSPO as a verl advantage estimator and policy loss (WeAgent-MMSearch §6.2, Eq. 4, 6, 7).

Eligibility travels in the batch as the ``response_mask``: the ``kit_harness`` agent loop zeroes the
mask of an excluded trajectory (context / wall-clock limit, aborted episode, incomplete max-turn
synthesis, overlong turn, judge failure), so it enters neither the group statistics nor the loss.

Advantage estimator ``fa_gspo``: for each group (verl ``uid``), eligible-only mean and unbiased std
(:func:`kit.rl.objective.group_advantages`), ``A = (R − mean)/(σ + 1e-6)`` for groups with ``n_g ≥ 2``,
0 otherwise. The Eq. 7 weight ``1/(|G_train|·n_g)`` is folded into the advantage as
``A · N/(|G_train|·n_g)`` with ``N`` the number of trajectories in the batch: the policy loss below
divides by ``N`` (verl's ``global_batch_size``: ``ppo_mini_batch_size × rollout.n`` sequences, excluded
ones included), and the clipped term is
positively homogeneous in ``A``, so the product is exactly Eq. 7. This holds when the optimizer step
sees the whole rollout batch (``ppo_mini_batch_size = train_batch_size``, as in ``configs/verl``).

Policy loss ``fa_gspo``: the kit's own Eq. 7 loss, :func:`kit.rl.objective.gspo_loss` (``ρ_i = exp(mean
over response tokens of (log π − log π_old))``, ``S_i = min(ρ_i A_i, clip(ρ_i, 1 − clip_ratio_low,
1 + clip_ratio_high) A_i)``), with weight 1 on every live row (× its mean rollout importance weight when
verl passes one), divided by ``N`` and multiplied by the data-parallel size, as verl's own aggregation,
so gradients average to the global mean. ``log ρ`` is clamped at :data:`MAX_LOG_RATIO` before ``exp``
(verl's GSPO overflow guard). Nothing of Eq. 4/6/7 is re-implemented here: this module only moves
verl's tensors into the kit's functions.

Policy loss ``kit_grpo`` (POINTS-Seeker §3.2.4, the kit's GRPO): :func:`kit.rl.objective.grpo_loss`
(token-level ratios clipped per token, averaged over each trajectory's model-generated tokens) with the
same row weights and aggregation as ``fa_gspo``; the advantages come from the same ``fa_gspo`` estimator
(eligible-only, Eq. 7 weights folded in), as :mod:`kit.rl.objective` weights GRPO like Eq. 7.

Both are read from the kit's registry (:mod:`kit.rl.registry`), and so is every policy loss registered there
before this module is imported or in a module named in ``$MMSEARCH_KIT_PLUGINS`` (imported here, in the driver and
in every worker): yours is registered with verl as ``kit_<name>`` (:func:`kit.rl.verl.recipe_config.verl_loss_name`),
with the same plumbing.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est, register_policy_loss

from kit.rl.objective import group_advantages
from kit.rl.registry import POLICY_LOSSES, registered
from kit.rl.verl.recipe_config import verl_loss_name

NAME = "fa_gspo"
GRPO_NAME = "kit_grpo"
MAX_LOG_RATIO = 10.0  # verl's clamp on the sequence log-ratio (exp overflow guard)


@register_adv_est(NAME)
def compute_fa_gspo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                              config: Any = None, epsilon: float = 1e-6, **_: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """FA-GSPO advantages for verl.

    Args:
        token_level_rewards: ``[B, T]`` (the trajectory reward on its last token).
        response_mask: ``[B, T]``; an all-zero row is an excluded trajectory.
        index: ``[B]`` group id (verl ``uid``).
    Returns:
        ``(advantages, returns)``, both ``[B, T]``: the weighted advantage on every response token.
    Raises:
        ValueError: an eligible trajectory's reward is not finite.
    """
    scores = token_level_rewards.sum(dim=-1).detach().cpu().double()
    eligible = (response_mask.sum(dim=-1) > 0).cpu()
    groups: dict[Any, list[int]] = {}
    for i, g in enumerate(index.tolist() if hasattr(index, "tolist") else list(index)):
        groups.setdefault(g, []).append(i)
    keys = list(groups)
    rewards = [[float(scores[i]) if bool(eligible[i]) else float("nan") for i in groups[k]] for k in keys]
    elig = [[bool(eligible[i]) for i in groups[k]] for k in keys]
    adv = group_advantages(rewards, elig, delta=epsilon)
    weights = adv.weights()
    n_rows = int(scores.shape[0])
    out = torch.zeros(scores.shape[0], dtype=torch.float32)
    for gi, k in enumerate(keys):
        for j, i in enumerate(groups[k]):
            out[i] = adv.advantages[gi][j] * weights[gi][j] * n_rows
    a = out.to(response_mask.device).unsqueeze(-1) * response_mask
    return a, a


def _rows(advantages, response_mask, log_prob, config, rollout_is_weights):
    """verl's tensors → the kit loss's inputs: mask, per-row advantage (the Eq. 7 weight already folded
    in), row weights (0 on an excluded row: all-zero mask; × the mean rollout importance weight), clip."""
    mask = response_mask.to(log_prob.dtype)
    lengths = mask.sum(-1)
    live = lengths > 0
    n = lengths.clamp_min(1.0)
    a = (advantages * mask).sum(-1) / n
    weights = live.to(torch.float64)
    if rollout_is_weights is not None:
        weights = weights * ((rollout_is_weights * mask).sum(-1) / n).to(torch.float64)
    clip_lo = getattr(config, "clip_ratio_low", None) or getattr(config, "clip_ratio", 0.2)
    clip_hi = getattr(config, "clip_ratio_high", None) or getattr(config, "clip_ratio", 0.2)
    return mask, live, a, weights, clip_lo, clip_hi


def _aggregate(name: str, neg_sum, stats, mask, live, log_prob, old_log_prob, config):
    """Divide by verl's global batch and multiply by the data-parallel size (verl's own aggregation)."""
    info = getattr(config, "global_batch_info", None) or {}
    dp = int(info.get("dp_size", 1) or 1)
    total = info.get("global_batch_size") or int(mask.shape[0])
    loss = neg_sum / total * dp
    with torch.no_grad():
        m = mask[live]
        metrics = {"actor/pg_clipfrac": stats["clip_frac"],
                   "actor/ppo_kl": float((-(log_prob[live] - old_log_prob[live]) * m).sum() / m.sum()),
                   f"actor/{name}_ratio_mean": stats["ratio_mean"], f"actor/{name}_rows": stats["rows"]}
    return loss, metrics


def _empty(name: str, log_prob):
    return (log_prob * 0.0).sum(), {"actor/pg_clipfrac": 0.0, "actor/ppo_kl": 0.0, f"actor/{name}_rows": 0}


def _verl_loss(spec) -> Any:
    """verl's policy-loss function for the kit loss ``spec`` (:mod:`kit.rl.registry`), registered with verl under
    :func:`kit.rl.verl.recipe_config.verl_loss_name`. Shapes ``[B, T]``; returns ``(loss, metrics)``;
    ``loss_agg_mode`` is ignored: Eq. 7 fixes the aggregation."""
    name = verl_loss_name(spec.name)
    clamp = {"max_log_ratio": MAX_LOG_RATIO} if "max_log_ratio" in inspect.signature(spec.fn).parameters else {}

    def compute(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
                response_mask: torch.Tensor, loss_agg_mode: str = "seq-mean-token-mean",
                config: Any = None, rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        mask, live, a, weights, lo, hi = _rows(advantages, response_mask, log_prob, config, rollout_is_weights)
        if not bool(live.any()):
            return _empty(name, log_prob)
        neg_sum, stats = spec.fn(log_prob, old_log_prob, mask, a, weights, eps_lo=lo, eps_hi=hi, **clamp)
        return _aggregate(name, neg_sum, stats, mask, live, log_prob, old_log_prob, config)

    compute.__name__ = compute.__qualname__ = f"compute_{name}_policy_loss"
    compute.__doc__ = f"{spec.name} ({spec.equation}, level {spec.level}) for verl: {_verl_loss.__doc__}"
    return register_policy_loss(name)(compute)


# every kit policy loss (the papers', any registered before this import, $MMSEARCH_KIT_PLUGINS'), under its verl name
registered()
VERL_LOSSES = {spec.name: _verl_loss(spec) for spec in list(POLICY_LOSSES.values())}
compute_fa_gspo_policy_loss = VERL_LOSSES["gspo"]  # Eq. 7 (verl name fa_gspo)
compute_kit_grpo_policy_loss = VERL_LOSSES["grpo"]  # POINTS-Seeker §3.2.4 (verl name kit_grpo)
