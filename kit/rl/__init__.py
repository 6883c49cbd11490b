"""Agentic RL for the kit's harness (WeAgent-MMSearch §6.2, Long-MDR staging; issue 8).

Modules: :mod:`rewards` (Eq. 5 and the POINTS-Seeker GRPO reward), :mod:`eligibility` (runtime checks,
Eq. 3), :mod:`objective` (FA-GSPO / GSPO / GRPO advantages and losses, Eq. 4, 6, 7), :mod:`rollout`
(groups through the harness, Figure 7 statistics), :mod:`logprobs` (token log-probs and entropy on
model-generated tokens), :mod:`opd` (on-policy distillation), :mod:`staging` (Long-MDR stages,
transitions, entropy rescue, run log), :mod:`trainer` (the single-node loop), :mod:`warmstart` (the
smoke profile's supervised warm start on demonstrator trajectories). The verl recipe lives in
:mod:`kit.rl.verl`, which needs the separate ``.venv-verl`` environment and is never imported here.
"""
