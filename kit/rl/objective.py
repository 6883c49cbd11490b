"""FA-GSPO, vanilla GSPO and GRPO: group advantages and clipped policy losses (WeAgent-MMSearch §6.2).

Eligible-only group normalization (Eq. 4) and advantages (Eq. 6), for group ``g`` with eligible set
``E_g`` of size ``n_g``::

    mean_g = Σ_{i∈E_g} R_gi / max(n_g, 1)
    σ_g    = sqrt( Σ_{i∈E_g} (R_gi − mean_g)² / max(n_g − 1, 1) )          (unbiased)
    A_gi   = (R_gi − mean_g) / (σ_g + δ)   if i ∈ E_g and n_g ≥ 2, else 0,  δ = 1e-6

Objective (Eq. 7), maximized; the losses here return its negative::

    J = 1/max(|G_train|, 1) · Σ_{g∈G_train} 1/n_g · Σ_{i∈E_g} min(ρ_gi A_gi, clip(ρ_gi, 1−ε_lo, 1+ε_hi) A_gi)
    ρ_gi = exp( mean over model-generated tokens t of [log π_θ(a_t|h_t) − log π_old(a_t|h_t)] )

with ``G_train = {g : n_g ≥ 2}``. The per-trajectory factor ``1/(|G_train|·n_g)`` is :func:`batch_weights`;
a trajectory with weight 0 (excluded, or in a dropped group) is removed before the loss is formed, so it
contributes exactly zero gradient even when its log-probabilities are NaN.

Baselines: vanilla GSPO is the same loss with every trajectory of a computable reward eligible (no
runtime filtering); GRPO (POINTS-Seeker §3.2.4) uses token-level ratios, per-token clipping and a
per-trajectory token mean. Clip ranges are configuration: WeAgent does not publish its ε values; the
defaults (GSPO: 3e-4 / 4e-4 on the sequence ratio, GRPO: 0.2 / 0.2 on token ratios) are the kit's choice,
following the GSPO and GRPO papers' published ranges.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kit.extras import RL_FEATURE, import_extra
from kit.recipes import paper_default as _P  # clip ranges: kit/recipes/*.yaml, section clip
from kit.rl import registry as _registry
from kit.rl.registry import _add_algorithm, register_advantage_estimator, register_policy_loss

DELTA = float(_P("advantage.delta"))  # δ of Eq. 6 (kit/recipes/weagent_mmsearch.yaml)
MIN_ELIGIBLE = 2  # groups with fewer eligible trajectories are dropped (Eq. 6/7)


# the algorithms' specs live in the registry (kit.rl.registry); these names stay importable from here
AlgorithmSpec = _registry.AlgorithmSpec
ALGORITHMS = _registry.ALGORITHMS  # the same dict: an algorithm registered later is visible here too
algorithm = _registry.algorithm


@dataclass
class GroupAdvantages:
    """Eq. 4/6 results for a batch of groups (lists indexed ``[g][i]``).

    ``mean``/``std`` are NaN for a group with no eligible member; ``train_groups`` are the indices with
    ``n_g ≥ 2`` (``G_train``); ``degenerate_groups`` are training groups whose eligible rewards are all
    equal (all their advantages are 0: no preference signal).
    """

    advantages: list[list[float]]
    eligible: list[list[bool]]
    n: list[int]
    mean: list[float]
    std: list[float]
    train_groups: list[int]
    degenerate_groups: list[int] = field(default_factory=list)

    @property
    def dropped_groups(self) -> list[int]:
        """Groups with fewer than two eligible trajectories (discarded from the update)."""
        return [g for g, n in enumerate(self.n) if n < MIN_ELIGIBLE]

    def weights(self) -> list[list[float]]:
        """Per-trajectory factor ``1/(max(|G_train|,1)·n_g)`` of Eq. 7 (0 outside ``E_g`` or ``G_train``)."""
        denom = max(len(self.train_groups), 1)
        train = set(self.train_groups)
        return [[(1.0 / (denom * self.n[g])) if (g in train and e) else 0.0 for e in elig]
                for g, elig in enumerate(self.eligible)]

    def has_signal(self) -> bool:
        """True when at least one trajectory has a non-zero advantage and a non-zero weight."""
        w = self.weights()
        return any(a != 0.0 and wi > 0 for ag, wg in zip(self.advantages, w) for a, wi in zip(ag, wg))

    def summary(self) -> dict[str, Any]:
        return {"groups": len(self.n), "train_groups": len(self.train_groups), "dropped_groups": len(self.dropped_groups),
                "degenerate_groups": len(self.degenerate_groups), "eligible": sum(self.n),
                "trajectories": sum(len(e) for e in self.eligible)}


@register_advantage_estimator("eligible_group_norm", equation="WeAgent Eq. 4 and 6")
def group_advantages(rewards: Sequence[Sequence[float]], eligible: Sequence[Sequence[bool]], *,
                     delta: float = DELTA) -> GroupAdvantages:
    """Eligible-only group normalization and advantages (Eq. 4 and 6).

    Args:
        rewards: ``[B][G]`` rewards (an ineligible member's reward is ignored and may be NaN).
        eligible: ``[B][G]`` membership of ``E_g``.
    Raises:
        ValueError: shapes differ, or an eligible reward is not finite.
    """
    if len(rewards) != len(eligible):
        raise ValueError(f"{len(rewards)} reward groups for {len(eligible)} eligibility groups")
    out = GroupAdvantages([], [], [], [], [], [])
    for g, (rg, eg) in enumerate(zip(rewards, eligible)):
        if len(rg) != len(eg):
            raise ValueError(f"group {g}: {len(rg)} rewards for {len(eg)} eligibility flags")
        vals = [float(r) for r, e in zip(rg, eg) if e]
        if any(not math.isfinite(v) for v in vals):
            raise ValueError(f"group {g}: an eligible trajectory has a non-finite reward {vals}")
        n = len(vals)
        mean = sum(vals) / max(n, 1) if n else math.nan
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / max(n - 1, 1)) if n else math.nan
        if n >= MIN_ELIGIBLE:
            out.train_groups.append(g)
            if all(v == vals[0] for v in vals):  # exactly 0 (the float mean may differ from R by 1 ulp)
                out.degenerate_groups.append(g)
                adv = [0.0] * len(rg)
            else:
                adv = [((float(r) - mean) / (std + delta)) if e else 0.0 for r, e in zip(rg, eg)]
        else:
            adv = [0.0] * len(rg)
        out.advantages.append(adv)
        out.eligible.append([bool(e) for e in eg])
        out.n.append(n)
        out.mean.append(mean)
        out.std.append(std)
    return out


# ------------------------------------------------------------------------------------------ losses
def sequence_log_ratio(logp_new, logp_old, mask):
    """``log ρ`` per sequence: mean of ``logp_new − logp_old`` over model-generated tokens.

    Shapes: ``logp_new``, ``logp_old``, ``mask``: ``[B, T]`` (mask bool or 0/1) → ``[B]``. Positions off the
    mask are selected out, not multiplied by 0: a NaN or ±inf there (a padded position's log-prob) stays inert.
    Raises ``ValueError`` when a sequence has no model-generated token.
    """
    mb = mask.bool()
    count = mb.sum(-1).to(logp_new.dtype)
    if bool((count == 0).any()):
        raise ValueError("a sequence has no model-generated token (empty loss mask)")
    return _on_mask(mb, logp_new - logp_old).sum(-1) / count


def _on_mask(mb, x):
    """``x`` on the mask, 0 off it (``torch.where``: NaN * 0 is NaN, a selected-out NaN is nothing)."""
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    return torch.where(mb, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _select(weights, *tensors):
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    w = torch.as_tensor(weights, dtype=torch.float64)
    keep = torch.nonzero(w > 0).flatten()
    dev = tensors[0].device
    return w[keep].to(device=dev), keep.to(dev), [t.index_select(0, keep.to(t.device)) for t in tensors]


@register_policy_loss("gspo", level="sequence", equation="WeAgent Eq. 7")
def gspo_loss(logp_new, logp_old, mask, advantages, weights, *, eps_lo: float, eps_hi: float,
              max_log_ratio: float | None = None):
    """Negative FA-GSPO / GSPO objective of Eq. 7 for a (micro-)batch of trajectories.

    Args:
        logp_new: ``[B, T]`` log π_θ of the taken tokens (with grad); ``logp_old``: ``[B, T]`` log π_old
            (no grad); ``mask``: ``[B, T]`` model-generated tokens; ``advantages``: ``[B]`` (Eq. 6);
            ``weights``: ``[B]`` from :meth:`GroupAdvantages.weights` (global over the whole batch, so
            micro-batch losses add up to the batch loss).
        max_log_ratio: optional upper clamp on ``log ρ`` before ``exp`` (verl's overflow guard, 10 in
            the verl recipe :mod:`kit.rl.verl.algos`); None (the kit's trainer): no clamp.
    Returns:
        ``(loss, stats)``: scalar tensor (0 with no weighted row, still attached to ``logp_new``), and a
        dict with ``ratio_mean``, ``clip_frac``, ``rows``.
    """
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    w, keep, (new, old, m) = _select(weights, logp_new, logp_old, mask)
    if keep.numel() == 0:
        return logp_new.new_zeros((), requires_grad=logp_new.requires_grad), {"ratio_mean": math.nan, "clip_frac": 0.0, "rows": 0}
    a = torch.as_tensor(advantages, dtype=new.dtype, device=new.device).index_select(0, keep)
    log_ratio = sequence_log_ratio(new, old, m)
    if max_log_ratio is not None:
        log_ratio = torch.clamp(log_ratio, max=max_log_ratio)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - eps_lo, 1.0 + eps_hi)
    s = torch.minimum(ratio * a, clipped * a)
    loss = -(w.to(new.dtype) * s).sum()
    with torch.no_grad():
        clip_frac = float(((ratio * a) > (clipped * a)).float().mean())
    return loss, {"ratio_mean": float(ratio.detach().mean()), "clip_frac": clip_frac, "rows": int(keep.numel())}


@register_policy_loss("grpo", level="token", equation="POINTS-Seeker §3.2.4 (GRPO)")
def grpo_loss(logp_new, logp_old, mask, advantages, weights, *, eps_lo: float, eps_hi: float):
    """Negative GRPO objective: token ratios ``r_t = π_θ/π_old`` clipped per token, averaged over each
    trajectory's model-generated tokens, weighted like Eq. 7. Shapes and returns as :func:`gspo_loss`."""
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    w, keep, (new, old, m) = _select(weights, logp_new, logp_old, mask)
    if keep.numel() == 0:
        return logp_new.new_zeros((), requires_grad=logp_new.requires_grad), {"ratio_mean": math.nan, "clip_frac": 0.0, "rows": 0}
    a = torch.as_tensor(advantages, dtype=new.dtype, device=new.device).index_select(0, keep)[:, None]
    mb = m.bool()
    count = mb.sum(-1).to(new.dtype)
    if bool((count == 0).any()):
        raise ValueError("a sequence has no model-generated token (empty loss mask)")
    ratio = torch.exp(_on_mask(mb, new - old))  # 1 off the mask (NaN/inf there selected out); masked out below
    clipped = torch.clamp(ratio, 1.0 - eps_lo, 1.0 + eps_hi)
    s = _on_mask(mb, torch.minimum(ratio * a, clipped * a)).sum(-1) / count
    loss = -(w.to(new.dtype) * s).sum()
    with torch.no_grad():
        clip_frac = float(_on_mask(mb, ((ratio * a) > (clipped * a)).to(new.dtype)).sum() / count.sum())
        ratio_mean = float(_on_mask(mb, ratio).sum() / count.sum())
    return loss, {"ratio_mean": ratio_mean, "clip_frac": clip_frac, "rows": int(keep.numel())}


def policy_loss(spec: AlgorithmSpec, logp_new, logp_old, mask, advantages, weights, *,
                eps_lo: float | None = None, eps_hi: float | None = None):
    """The registered loss of ``spec`` (:func:`kit.rl.registry.policy_loss_spec`) with its default or given clip range.

    Raises:
        TypeError: the loss returned something else than ``(0-dim tensor, dict)`` (its registration contract).
    """
    loss_spec = _registry.policy_loss_spec(spec.loss)
    out = loss_spec.fn(logp_new, logp_old, mask, advantages, weights, eps_lo=spec.eps_lo if eps_lo is None else eps_lo,
                       eps_hi=spec.eps_hi if eps_hi is None else eps_hi)
    if not (isinstance(out, tuple) and len(out) == 2 and getattr(out[0], "ndim", None) == 0 and isinstance(out[1], dict)):
        raise TypeError(f"policy loss {spec.loss!r} returned {type(out).__name__}, not (0-dim tensor, stats dict) "
                        "(kit.rl.registry)")
    return out


def estimate_advantages(spec: AlgorithmSpec, rewards: Sequence[Sequence[float]],
                        eligible: Sequence[Sequence[bool]]) -> GroupAdvantages:
    """``spec``'s registered advantage estimator on ``[B][G]`` rewards and eligibility.

    Raises:
        TypeError: the estimator did not return :class:`GroupAdvantages` of the input's shape.
    """
    out = _registry.advantage_spec(spec.advantage).fn(rewards, eligible)
    if not isinstance(out, GroupAdvantages) or [len(a) for a in out.advantages] != [len(r) for r in rewards]:
        raise TypeError(f"advantage estimator {spec.advantage!r} returned {type(out).__name__} of another shape than "
                        "the rewards, not GroupAdvantages (kit.rl.registry)")
    return out


# the papers' algorithms (WeAgent §6.2: FA-GSPO and its vanilla-GSPO baseline; POINTS-Seeker §3.2.4: GRPO)
_add_algorithm("fa_gspo", loss="gspo", advantage="eligible_group_norm", reward="weagent", check_runtime=True,
               eps_lo=_P("clip.gspo_eps_lo"), eps_hi=_P("clip.gspo_eps_hi"), self_recovery=True)
_add_algorithm("gspo", loss="gspo", advantage="eligible_group_norm", reward="weagent", check_runtime=False,
               eps_lo=_P("clip.gspo_eps_lo"), eps_hi=_P("clip.gspo_eps_hi"), self_recovery=False)
_add_algorithm("grpo", loss="grpo", advantage="eligible_group_norm", reward="points_seeker", check_runtime=False,
               eps_lo=_P("clip.grpo_eps", "points_seeker"), eps_hi=_P("clip.grpo_eps", "points_seeker"))


def token_nll_loss(logp_new, mask):
    """Plain token loss (mean negative log-likelihood over model-generated tokens): the baseline the
    loss-overhead benchmark compares against. Shapes: ``[B, T]`` → scalar."""
    mb = mask.bool()
    return -_on_mask(mb, logp_new).sum() / mb.sum().to(logp_new.dtype).clamp_min(1.0)
