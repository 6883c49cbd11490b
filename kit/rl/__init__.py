"""Agentic RL for the kit's harness (WeAgent-MMSearch §6.2, Long-MDR staging; issue 8).

Modules: :mod:`rewards` (Eq. 5 and the POINTS-Seeker GRPO reward), :mod:`eligibility` (runtime checks,
Eq. 3), :mod:`objective` (FA-GSPO / GSPO / GRPO advantages and losses, Eq. 4, 6, 7), :mod:`rollout`
(groups through the harness, Figure 7 statistics), :mod:`logprobs` (token log-probs and entropy on
model-generated tokens), :mod:`opd` (on-policy distillation), :mod:`staging` (Long-MDR stages,
transitions, entropy rescue, run log), :mod:`trainer` (the single-node loop), :mod:`warmstart` (the
smoke profile's supervised warm start on demonstrator trajectories). The verl recipe lives in
:mod:`kit.rl.verl`, which needs the separate ``.venv-verl`` environment and is never imported here.
"""

from kit._lazy import lazy_exports

# public names, imported on first use (``import kit.rl`` stays cheap)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "RLConfig": "kit.rl.trainer",
    "RLTrainer": "kit.rl.trainer",
    "Stage": "kit.rl.staging",
    "RescueConfig": "kit.rl.staging",
    "StageSchedule": "kit.rl.staging",
    "RunLog": "kit.rl.staging",
    "long_mdr_stages": "kit.rl.staging",
    "parse_stages": "kit.rl.staging",
    "plot_run_log": "kit.rl.staging",
    "AlgorithmSpec": "kit.rl.objective",
    "algorithm": "kit.rl.objective",
    "group_advantages": "kit.rl.objective",
    "policy_loss": "kit.rl.objective",
    "gspo_loss": "kit.rl.objective",
    "grpo_loss": "kit.rl.objective",
    "Eligibility": "kit.rl.eligibility",
    "harness_config_for": "kit.rl.eligibility",
    "RewardBreakdown": "kit.rl.rewards",
    "score_records": "kit.rl.rewards",
    "rollout_groups": "kit.rl.rollout",
    "recovery_stats": "kit.rl.rollout",
    "recovery_table": "kit.rl.rollout",
    "RolloutBatch": "kit.rl.rollout",
    "InProcessTeacher": "kit.rl.opd",
    "EndpointTeacher": "kit.rl.opd",
    "sft_warm_start": "kit.rl.warmstart",
    "token_logprobs": "kit.rl.logprobs",
})
