"""The ``kit`` section of the verl config → algorithm, harness config, stage, judge and summarizer,
without importing verl.

The ``kit_harness`` agent loop (:mod:`kit.rl.verl.agent_loop`) reads its settings through these
functions, so the verl path and the single-node trainer make the same decisions. Two modes:

* **recipe** (``kit.recipe: weagent_mmsearch`` | ``points_seeker`` | ``smoke``, ``kit.preflight``; what
  :mod:`kit.rl.verl.recipe_config` writes): the harness is the recipe's
  (``load_recipe(recipe, overlays).harness(**rl_rollout)``: POINTS-Seeker bypasses V-Fold during RL, App. A.4),
  with the budgets of the stage ``kit.stage`` of the recipe's schedule (``kit.stages``, default the
  recipe's ``rl_run.stages``: WeAgent ``weagent`` (its one Table 5 stage), Long-MDR its staged schedule,
  POINTS-Seeker ``h10``; or another named schedule or stage list; :func:`kit.rl.staging.resolve_schedule`;
  :meth:`kit.rl.staging.Stage.harness_config`), then ``kit.harness_overrides``. Judge and web_extract
  summarizer are the recipe's (``eval.judge`` / ``eval.summarizer`` and their models).
* **legacy** (``kit.recipe`` null): ``kit.harness`` ``paper`` | ``smoke`` with ``kit.harness_overrides``.

In both, ``kit.algorithm`` ``gspo`` (vanilla, WeAgent Table 3) runs episodes with
``HarnessConfig.self_recovery=False`` and no runtime filtering; ``fa_gspo`` recovers and filters (§6.2); a
contradiction is refused (:func:`kit.rl.eligibility.harness_config_for`). Importable (and tested)
outside the verl environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from kit.harness.config import HarnessConfig
from kit.rl.eligibility import harness_config_for
from kit.rl.objective import AlgorithmSpec, algorithm
from kit.rl.staging import resolve_schedule


def algorithm_of(kit_cfg: Mapping[str, Any]) -> AlgorithmSpec:
    """``kit.algorithm`` as its spec: the given name, else the recipe's ``rl.algorithm`` (recipe mode), else
    ``fa_gspo``. Raises ``ValueError`` for an unknown name."""
    name = kit_cfg.get("algorithm")
    if not name:
        name = recipe_of(kit_cfg).get("rl.algorithm") if kit_cfg.get("recipe") else "fa_gspo"
    return algorithm(str(name))


def recipe_of(kit_cfg: Mapping[str, Any]):
    """The :class:`~kit.recipes.Recipe` named by ``kit.recipe`` (with the ``preflight`` overlay when
    ``kit.preflight``). Raises ``ValueError`` when ``kit.recipe`` is not set, :class:`RecipeError` for an
    unknown one."""
    from kit.recipes import load_recipe

    name = kit_cfg.get("recipe")
    if not name:
        raise ValueError("kit.recipe is not set (recipe mode needs e.g. kit.recipe=weagent_mmsearch)")
    return load_recipe(str(name), ("preflight",) if kit_cfg.get("preflight") else ())


def profile_of(kit_cfg: Mapping[str, Any]):
    """The :class:`~kit.profiles.Profile` whose recipe is ``kit.recipe`` (``paper`` for weagent_mmsearch,
    ``points_seeker``, ``smoke``), a preflight when ``kit.preflight``. Legacy mode: ``smoke`` when
    ``kit.harness`` is ``smoke``, else ``paper``."""
    from kit.profiles import PROFILES, Profile, get_profile

    name = kit_cfg.get("recipe")
    if not name:
        return get_profile("smoke" if kit_cfg.get("harness") == "smoke" else "paper")
    prof = next((p for p in PROFILES.values() if p.recipe == name), None)
    if prof is None:
        prof = Profile(name=str(name), smoke=False, recipe=str(name))
    return get_profile(prof, preflight=bool(kit_cfg.get("preflight")))


def _recipe_harness(kit_cfg: Mapping[str, Any], over: dict[str, Any]) -> HarnessConfig:
    r = recipe_of(kit_cfg)
    rollout = r.section("rl_rollout")  # RL may differ from evaluation (POINTS-Seeker: no V-Fold, App. A.4)
    base = r.harness(**rollout)
    stages = resolve_schedule(r, base, kit_cfg.get("stages"))  # notebook 05 resolves stages the same way
    name = kit_cfg.get("stage")
    rl = [s for s in stages if s.kind == "rl"]
    if not rl:
        raise ValueError(f"recipe {r.label}: the schedule {kit_cfg.get('stages') or r.get('rl_run.stages')!r} has no RL stage")
    if name:
        found = [s for s in rl if s.name == name]
        if not found:
            raise ValueError(f"kit.stage={name!r} is not an RL stage of the schedule; choose one of {[s.name for s in rl]}")
        stage = found[0]
    else:
        stage = rl[0]
    cfg = stage.harness_config(base)
    return HarnessConfig(**{**cfg.model_dump(), **over}) if over else cfg


def harness_config(kit_cfg: Mapping[str, Any]) -> HarnessConfig:
    """The harness config of the rollouts (module docstring: recipe or legacy mode), then the algorithm's
    self-recovery rule. In recipe mode the recipe's own ``self_recovery`` is not an explicit choice (vanilla
    GSPO turns it off); one in ``kit.harness_overrides`` is.

    Raises:
        ValueError: ``kit.recipe`` together with ``kit.harness`` (choose one), an unknown ``kit.harness`` or
            ``kit.stage``, a bad override (pydantic's message), or a combination the algorithm refuses
            (``fa_gspo`` with ``self_recovery: false``, ``gspo`` with an explicit ``self_recovery: true``).
        RecipeError: an unknown ``kit.recipe``.
    """
    over = dict(kit_cfg.get("harness_overrides", {}) or {})
    if kit_cfg.get("recipe"):
        if kit_cfg.get("harness"):
            raise ValueError(f"kit.recipe={kit_cfg['recipe']!r} and kit.harness={kit_cfg['harness']!r} both set: the "
                             "recipe builds the harness (use kit.recipe=smoke for small budgets), leave kit.harness null")
        cfg = _recipe_harness(kit_cfg, over)
    else:
        name = kit_cfg.get("harness") or "paper"
        if name not in ("paper", "smoke"):
            raise ValueError(f"unknown kit.harness {name!r} (paper | smoke)")
        base = HarnessConfig.smoke() if name == "smoke" else HarnessConfig()
        cfg = HarnessConfig(**{**base.model_dump(), **over})
    return harness_config_for(algorithm_of(kit_cfg).name, cfg, explicit="self_recovery" in over)


def judge(kit_cfg: Mapping[str, Any]):
    """The reward's answer judge (C of Eq. 5, POINTS-Seeker's S_acc).

    Recipe mode: :func:`kit.eval.judge_factory.make_answer_judge` with ``kit.judge`` (null: the recipe's
    ``eval.judge``), ``kit.judge_endpoint``, ``kit.judge_model`` (empty: the recipe's ``eval.judge_model``),
    the key in ``$<kit.judge_api_key_env>``; a paper recipe without an endpoint stops with
    :class:`~kit.eval.judge_factory.JudgeConfigError` naming ``judge_endpoint``, as notebook 05 does.
    Legacy mode: ``rule`` (RuleJudge ``kit.rule_mode``) or ``llm`` (falling back to the rule judge when the
    endpoint fails)."""
    from kit.eval.judges import LLMJudge, RuleJudge

    if not kit_cfg.get("recipe"):
        if (kit_cfg.get("judge") or "rule") == "llm":
            return LLMJudge.from_endpoint(kit_cfg["judge_endpoint"], kit_cfg["judge_model"], fallback=RuleJudge())
        return RuleJudge(kit_cfg.get("rule_mode") or "contains")
    from kit.eval.judge_factory import make_answer_judge

    r = recipe_of(kit_cfg)
    return make_answer_judge(kit_cfg.get("judge") or None, profile=profile_of(kit_cfg),
                             endpoint=kit_cfg.get("judge_endpoint") or "",
                             model=kit_cfg.get("judge_model") or str(r.get("eval.judge_model", "")),
                             api_key=os.environ.get(kit_cfg.get("judge_api_key_env") or "JUDGE_API_KEY"),
                             rule_mode=kit_cfg.get("rule_mode") or "contains",
                             rule_on_endpoint_error=bool(kit_cfg.get("judge_rule_on_endpoint_error", False)))


def summarizer(kit_cfg: Mapping[str, Any]):
    """web_extract's summarizer (WeAgent Table 4: "summarized by a LLM"; POINTS-Seeker §4.1: Qwen3-235B).

    Recipe mode: :func:`kit.harness.summarize.make_summarizer` with ``kit.summarizer`` (null: the recipe's
    ``eval.summarizer``: ``llm`` in both paper recipes), ``kit.summarizer_endpoint``,
    ``kit.summarizer_model`` (empty: the recipe's ``eval.summarizer_model``); a paper recipe without an
    endpoint stops with a message naming ``summarizer_endpoint``. Legacy mode:
    :func:`kit.harness.summarize.summarizer_from_config`."""
    from kit.harness.summarize import make_summarizer, summarizer_from_config

    if not kit_cfg.get("recipe"):
        return summarizer_from_config(kit_cfg)
    r = recipe_of(kit_cfg)
    return make_summarizer(kit_cfg.get("summarizer_endpoint") or "",
                           kit_cfg.get("summarizer_model") or str(r.get("eval.summarizer_model", "")),
                           profile_of(kit_cfg), kind=kit_cfg.get("summarizer") or None,
                           api_key=os.environ.get(kit_cfg.get("summarizer_api_key_env") or "OPENAI_API_KEY"))


__all__ = ["algorithm_of", "harness_config", "judge", "profile_of", "recipe_of", "summarizer"]
