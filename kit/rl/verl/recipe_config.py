"""A paper recipe → the verl run's Hydra overrides (``configs/verl/fa_gspo.yaml`` has ``???`` for every
recipe value, so the recipe is the one source). No verl import: runs and is tested in the main env.

``python -m kit.cli recipe NAME --verl [--preflight] [--stage S]`` prints :func:`verl_overrides` one per
line; ``scripts/launch_verl.sh`` (``RECIPE=...``) passes them before the user's own overrides.

**Stages.** verl's agent loop is not told the trainer's global step, so one verl run cannot switch harness
budgets mid-run. The verl path therefore runs **one launch per RL stage** of the recipe's schedule
(:func:`verl_stages`): launch ``k`` sets ``kit.stage`` (the agent loop applies that stage's budgets,
:meth:`kit.rl.staging.Stage.harness_config`), the context split (``data.max_response_length`` = the
stage's context − :data:`PROMPT_TOKENS`) and ``trainer.total_training_steps`` = the step at which the stage
ends; launch ``k+1`` resumes from launch ``k``'s last checkpoint (verl ``trainer.resume_mode=auto``, same
``trainer.default_local_dir``). WeAgent's recipe runs its one stage at Table 5's budgets (``weagent``); the
long_mdr recipe the Long-MDR schedule's RL stages h10 → h20 → h50 → h75 (200, 200, 200 steps, then the
rest); POINTS-Seeker's runs h10 for 60 steps (App. A.4). The launch constants
(prompt length, ``trainer.total_epochs``, warmup, KL and entropy terms) are the recipe's ``verl`` section. What the verl
path does not do, by design: the **OPD warmup** stage (it needs the in-process teacher of
:mod:`kit.rl.opd`; run it with notebook 05, ``stages="opd:50"``, and launch verl from its checkpoint; its
steps are taken off ``rl_run.total_steps``), the **plateau** early end of a stage (it needs the reward
history across workers: every stage but the last runs its fixed ``steps``; a schedule with an open-ended
stage before the last is refused) and the **entropy rescue** (single-node trainer only).

**Algorithms.** Every algorithm uses the ``fa_gspo`` advantage estimator (:mod:`kit.rl.verl.algos`: the
kit's eligible-only Eq. 4/6 advantages with the Eq. 7 weights folded in, which :mod:`kit.rl.objective`
applies to all three): ``fa_gspo`` and vanilla ``gspo`` the ``fa_gspo`` sequence-level loss (they differ
only in self-recovery and runtime filtering, decided in the agent loop by ``kit.algorithm``), ``grpo``
the ``kit_grpo`` token-level loss (:func:`kit.rl.objective.grpo_loss`). Clip ranges are
:data:`kit.rl.objective.ALGORITHMS`' (or the recipe's ``rl.eps_lo``/``rl.eps_hi``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kit.recipes import Recipe, load_recipe
from kit.recipes import paper_default as _P
from kit.rl.objective import ALGORITHMS, algorithm

#: WeAgent recipe's ``verl.prompt_tokens`` (kit choice): tokens of the first user turn (system prompt with the
#: tool schemas + the question); the rest of a stage's context is verl's response budget. Each launch reads
#: its own recipe's value (:func:`verl_settings`).
PROMPT_TOKENS = int(_P("verl.prompt_tokens"))
#: the verl policy-loss name of each kit policy loss (kit.rl.registry): the papers' keep their verl names, a loss
#: registered by you is ``kit_<name>`` (kit.rl.verl.algos registers every kit loss with verl under it)
VERL_LOSS_NAMES = {"gspo": "fa_gspo", "grpo": "kit_grpo"}
#: the kit advantage estimators verl can run (kit.rl.verl.algos: verl's estimator of that name)
VERL_ADVANTAGE = {"eligible_group_norm": "fa_gspo"}


def verl_loss_name(loss: str) -> str:
    """The name kit policy loss ``loss`` is registered under in verl."""
    return VERL_LOSS_NAMES.get(loss, f"kit_{loss}")


def verl_mapping(algorithm_name: str) -> tuple[str, str] | None:
    """(verl advantage estimator, verl policy loss mode) of a registered kit algorithm; None when its advantage
    estimator has no verl counterpart. Raises ``ValueError`` for an unregistered algorithm."""
    spec = ALGORITHMS[algorithm_name] if algorithm_name in ALGORITHMS else algorithm(algorithm_name)
    est = VERL_ADVANTAGE.get(spec.advantage)
    return None if est is None else (est, verl_loss_name(spec.loss))


#: (verl advantage estimator, verl policy loss mode) per kit algorithm registered at import (module docstring).
VERL_LOSS: dict[str, tuple[str, str]] = {a: m for a in sorted(ALGORITHMS) if (m := verl_mapping(a)) is not None}


class VerlConfigError(ValueError):
    """A recipe the verl path cannot run as written (the message says which value and why)."""


@dataclass(frozen=True)
class VerlStage:
    """One verl launch: the RL stage ``stage`` (a :class:`kit.rl.staging.Stage`) trains from global step
    ``start`` (exclusive) to ``end`` (``trainer.total_training_steps``)."""

    stage: Any
    start: int
    end: int

    @property
    def name(self) -> str:
        return str(self.stage.name)


def _recipe(recipe: str | Recipe, overlays: Iterable[str] = ()) -> Recipe:
    return recipe if isinstance(recipe, Recipe) else load_recipe(recipe, tuple(overlays))


def _kit_cfg(r: Recipe) -> dict[str, Any]:
    return {"recipe": r.name, "preflight": "preflight" in r.overlays}


def verl_stages(recipe: str | Recipe, overlays: Iterable[str] = (), stages: str | None = None) -> list[VerlStage]:
    """The verl launches of ``recipe`` (module docstring): its schedule's RL stages with their step ranges.
    ``stages``: a schedule spec of :func:`kit.rl.staging.resolve_schedule` (default the recipe's
    ``rl_run.stages``; ``"weagent"``: WeAgent's one Table 5 stage). The RL step total is
    :func:`~kit.rl.staging.schedule_total_steps` (a named schedule's own steps, else ``rl_run.total_steps``)
    minus the OPD stages' steps; a stage past it is dropped.

    Raises:
        VerlConfigError: an OPD stage without a step count, an open-ended RL stage before the last, or no RL
            step left.
    """
    from kit.rl.staging import resolve_schedule, schedule_total_steps

    r = _recipe(recipe, overlays)
    base = r.harness(**r.section("rl_rollout"))
    schedule = resolve_schedule(r, base, stages)
    opd = [s for s in schedule if s.kind == "opd"]
    if any(s.steps is None for s in opd):
        raise VerlConfigError(f"recipe {r.label}: an OPD stage without a step count")
    total = schedule_total_steps(r, stages) - sum(int(s.steps) for s in opd)
    rl = [s for s in schedule if s.kind == "rl"]
    if total < 1 or not rl:
        raise VerlConfigError(f"recipe {r.label}: no RL step left for verl (rl_run.total_steps "
                              f"{r.get('rl_run.total_steps')}, OPD steps {sum(int(s.steps) for s in opd)})")
    out: list[VerlStage] = []
    at = 0
    for i, s in enumerate(rl):
        last = i == len(rl) - 1
        if s.steps is None and not last:
            raise VerlConfigError(f"recipe {r.label}: stage {s.name!r} has no fixed step count; verl cannot detect "
                                  "a reward plateau, so every stage but the last needs steps (e.g. h10:200)")
        end = total if last or s.steps is None else min(at + int(s.steps), total)
        if end <= at:
            break
        out.append(VerlStage(s, at, end))
        at = end
    return out


def verl_settings(recipe: str | Recipe, overlays: Iterable[str] = (), stage: str | None = None,
                  stages: str | None = None) -> dict[str, Any]:
    """``{dotted key: value}`` for one verl launch of ``recipe`` (``stage``: an RL stage name of
    :func:`verl_stages` of the schedule ``stages``, default the recipe's; ``stage`` default the first). The
    launch constants (prompt length, epochs, warmup, KL and entropy terms) are the recipe's ``verl`` section.

    Raises:
        VerlConfigError: an unknown stage, ``rl.finetune`` other than ``full`` (the verl path trains the full
            language model), an algorithm without a verl mapping, a stage context not above
            :data:`PROMPT_TOKENS`.
    """
    from kit.rl.verl.settings import harness_config

    r = _recipe(recipe, overlays)
    spec = str(stages or r.get("rl_run.stages"))
    runs = verl_stages(r, stages=spec)
    pick = runs[0] if stage is None else next((v for v in runs if v.name == stage), None)
    if pick is None:
        raise VerlConfigError(f"recipe {r.label}: no verl stage {stage!r}; choose one of {[v.name for v in runs]}")
    rl = r.build("rl")
    if rl.finetune != "full":
        raise VerlConfigError(f"recipe {r.label}: rl.finetune={rl.finetune!r}; the verl path trains the full model")
    mapping = verl_mapping(rl.algorithm)
    if mapping is None:
        raise VerlConfigError(f"recipe {r.label}: algorithm {rl.algorithm!r} has no verl mapping ({sorted(VERL_LOSS)})")
    algo = algorithm(rl.algorithm)
    est, loss = mapping
    kit = {**_kit_cfg(r), "stages": spec, "stage": pick.name, "algorithm": rl.algorithm}
    hc = harness_config(kit)  # what the agent loop will build: its context sets verl's lengths
    prompt = int(r.get("verl.prompt_tokens"))
    if hc.max_context_tokens <= prompt:
        raise VerlConfigError(f"stage {pick.name}: context {hc.max_context_tokens} leaves no response budget "
                              f"after the {prompt}-token prompt (verl.prompt_tokens)")
    return {
        "data.train_batch_size": rl.prompts_per_step,
        "data.max_prompt_length": prompt,
        "data.max_response_length": hc.max_context_tokens - prompt,
        "algorithm.adv_estimator": est,
        # Eq. 7 is exact when one optimizer step sees the whole rollout batch (kit.rl.verl.algos)
        "actor_rollout_ref.actor.ppo_mini_batch_size": rl.prompts_per_step,
        "actor_rollout_ref.actor.ppo_epochs": rl.updates_per_batch,
        "actor_rollout_ref.actor.optim.lr": rl.lr,
        "actor_rollout_ref.actor.optim.weight_decay": rl.weight_decay,
        "actor_rollout_ref.actor.grad_clip": rl.max_grad_norm,
        "actor_rollout_ref.actor.optim.lr_warmup_steps": int(r.get("verl.lr_warmup_steps")),
        "actor_rollout_ref.actor.use_kl_loss": bool(r.get("verl.use_kl_loss")),
        "actor_rollout_ref.actor.entropy_coeff": float(r.get("verl.entropy_coeff")),
        "actor_rollout_ref.actor.clip_ratio_low": rl.eps_lo if rl.eps_lo is not None else algo.eps_lo,
        "actor_rollout_ref.actor.clip_ratio_high": rl.eps_hi if rl.eps_hi is not None else algo.eps_hi,
        "actor_rollout_ref.actor.policy_loss.loss_mode": loss,
        "actor_rollout_ref.actor.freeze_vision_tower": rl.freeze_vision,
        "actor_rollout_ref.rollout.n": rl.group_size,
        "actor_rollout_ref.rollout.temperature": rl.temperature,
        "actor_rollout_ref.rollout.top_p": rl.top_p,
        "trainer.total_epochs": int(r.get("verl.total_epochs")),
        "trainer.total_training_steps": pick.end,
        "trainer.experiment_name": f"{rl.algorithm}-{r.label}",
        "kit.recipe": r.name,
        "kit.preflight": "preflight" in r.overlays,
        "kit.stages": spec,
        "kit.stage": pick.name,
        "kit.algorithm": rl.algorithm,
        "kit.harness": None,  # the recipe builds the harness (kit.rl.verl.settings)
        # the rollouts' web (kit.rl.verl.agent_loop): paper recipes the live web (WeAgent §3.2, POINTS-Seeker §4.1)
        "kit.backend": str(r.get("rl_run.web_backend", "zim")),
        "kit.judge": str(r.get("eval.judge")),
        "kit.judge_model": str(r.get("eval.judge_model", "")),
        "kit.summarizer": str(r.get("eval.summarizer")),
        "kit.summarizer_model": str(r.get("eval.summarizer_model", "")),
    }


_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_\-./]*")


def hydra_value(v: Any) -> str:
    """``v`` in Hydra's override grammar, also a YAML flow scalar (so tests can read it back with
    ``yaml.safe_load``): ``null``, ``true``/``false``, ints, floats with a point (``5.0e-07``), bare names,
    else a single-quoted string."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        s = repr(v)
        if "e" in s and "." not in s.split("e")[0]:
            m, e = s.split("e")
            s = f"{m}.0e{e}"
        return s
    s = str(v)
    if _BARE.fullmatch(s) and s.lower() not in ("null", "true", "false", "nan", "inf", "none", "yes", "no", "on", "off"):
        return s
    if "'" in s:
        raise VerlConfigError(f"value {s!r} contains a quote")
    return f"'{s}'"


def verl_overrides(recipe: str | Recipe, overlays: Iterable[str] = (), stage: str | None = None,
                   stages: str | None = None) -> list[str]:
    """:func:`verl_settings` as Hydra overrides ``key=value`` (one launch)."""
    return [f"{k}={hydra_value(v)}" for k, v in verl_settings(recipe, overlays, stage, stages).items()]


def apply_overrides(config: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """A copy of the nested ``config`` with dotted ``settings`` set (a missing intermediate mapping is
    created). Used to check a launch's config without Hydra."""
    import copy

    out = copy.deepcopy(config)
    for key, value in settings.items():
        node = out
        *path, leaf = key.split(".")
        for p in path:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise VerlConfigError(f"{key}: {p!r} is not a mapping in the config")
            node = nxt
        node[leaf] = value
    return out


def merged_config(recipe: str | Recipe, overlays: Iterable[str] = (), stage: str | None = None,
                  path: str | None = None, stages: str | None = None) -> dict[str, Any]:
    """``configs/verl/fa_gspo.yaml`` (or ``path``) with one launch's recipe settings applied (verl's own
    ``ppo_trainer`` defaults are not composed: that needs verl). The preflight builds it to prove the verl
    config of a paper recipe resolves; :func:`missing_values` lists what is still ``???``."""
    import yaml

    from kit.paths import PROJECT_ROOT

    p = path or str(PROJECT_ROOT / "configs" / "verl" / "fa_gspo.yaml")
    with open(p, encoding="utf-8") as f:
        base = yaml.safe_load(f)
    return apply_overrides(base, verl_settings(recipe, overlays, stage, stages))


def missing_values(config: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose value is still ``???`` (Hydra's mandatory marker)."""
    out = []
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out += missing_values(v, key + ".")
        elif v == "???":
            out.append(key)
    return out


__all__ = ["PROMPT_TOKENS", "VERL_LOSS", "VERL_LOSS_NAMES", "VerlConfigError", "VerlStage", "apply_overrides",
           "hydra_value", "merged_config", "missing_values", "verl_loss_name", "verl_mapping", "verl_overrides",
           "verl_settings", "verl_stages"]
