"""Notebook parameters that switch a kit mechanism (:mod:`kit.recipes.mechanisms`), checked before a notebook's kernel
starts (:func:`kit.cli_params.check_combinations` calls :func:`mechanism_problems`): a setting of a mechanism the
run does not have, and an algorithm that cannot run with the profile's self-recovery."""

from __future__ import annotations

from typing import Any

__all__ = ["mechanism_problems"]


def _profile_has(profile, key: str) -> bool:
    """Whether the profile's recipe has ``key`` (e.g. ``rescue.action``: Long-MDR's rescue is in it)."""
    from kit.profiles import get_profile

    return get_profile(profile).recipe_obj().has(key)


def mechanism_problems(declared, value: dict[str, Any], profile, at: str = "", *, preflight: bool = False) -> list[str]:
    """One line per rule broken (empty: none):

    * ``entropy_threshold`` / ``rescue_action`` under a profile without entropy rescue (WeAgent's and
      POINTS-Seeker's recipes) or with ``rescue=False``: add ``-p rescue true``, the labelled ablation;
    * ``algorithm="fa_gspo"`` without self-recovery (it recovers first, then filters: WeAgent §6.2), and
      ``algorithm="gspo"`` (Table 3's vanilla GSPO) with ``self_recovery=True`` given
      (:func:`kit.rl.eligibility.harness_config_for` would refuse both inside the kernel).

    ``declared``: the notebook's parameters; ``value``: every parameter's value (given or default); ``profile``:
    a profile name or a :class:`kit.profiles.ResolvedRun` (messages name it as given).
    """
    problems: list[str] = []
    if "rescue" in declared and value.get("rescue") is not True and not (
            value.get("rescue") is None and _profile_has(profile, "rescue.action")):
        tuned = [n for n in ("entropy_threshold", "rescue_action") if value.get(n) is not None]
        if tuned:  # a setting of a mechanism the run does not have (kit.recipes.mechanisms)
            why = ("rescue is switched off (-p rescue false)" if value.get("rescue") is False else
                   f"the {profile} profile runs no entropy-triggered rescue (Long-MDR's: profiles long_mdr and smoke)")
            problems.append(f"{', '.join(tuned)}{at} set, but {why}; add -p rescue true for the labelled ablation")
    if "algorithm" in declared and "self_recovery" in declared:  # kit.rl.eligibility.harness_config_for, before the kernel
        from kit.profiles import get_profile

        prof = get_profile(profile, preflight=preflight)
        algo = value.get("algorithm") or prof.value("rl.algorithm")
        recovery = value.get("self_recovery")
        recovery = prof.harness().self_recovery if recovery is None else recovery
        if algo == "fa_gspo" and not recovery:
            why = ("-p self_recovery false switches it off; drop it, or" if value.get("self_recovery") is False
                   else f"the {profile} profile runs without self-recovery; pass -p self_recovery true (labelled ablation) or")
            problems.append(f"algorithm='fa_gspo'{at} recovers first and then filters (WeAgent §6.2) but {why} "
                            "choose another algorithm (gspo: Table 3's vanilla baseline; grpo)")
        if algo == "gspo" and value.get("self_recovery") is True:
            problems.append(f"algorithm='gspo'{at} is WeAgent Table 3's vanilla GSPO, without self-recovery, but "
                            "-p self_recovery true is set; drop it, or use algorithm 'fa_gspo'")
    return problems
