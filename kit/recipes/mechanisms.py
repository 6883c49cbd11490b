"""The mechanisms a recipe switches on, and whether its paper has each (issue "each paper profile is exactly its
paper"). A paper profile (:data:`PAPER_RECIPES`) runs only what its paper describes: every mechanism it has on is
decided by a recipe entry with a ``source`` (``tests/test_mechanisms.py`` holds every paper recipe to it). The
kit's own mechanisms stay available as labelled ablation switches (:data:`SWITCHES`: ``-p self_recovery true``
under ``points_seeker``; :func:`kit.profiles.get_profile` ``switches=``).

``python -m kit.cli recipe NAME`` prints :func:`mechanisms_text` under the values table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["MECHANISMS", "PAPER_RECIPES", "SWITCHES", "Mechanism", "mechanisms", "mechanisms_text",
           "stages_labels", "switch_labels", "switch_problem"]

#: recipes that are a paper as written (smoke is the kit's CPU check; preflight an overlay of sizes)
PAPER_RECIPES = ("weagent_mmsearch", "long_mdr", "points_seeker")
# (a paper describes a mechanism: Mechanism.papers below, with where; whether it is on is the recipe's)


def _schedule(recipe) -> list:
    from kit.recipes.sections import recipe_part

    if not recipe.has("rl_run.stages"):
        return []
    return recipe_part("resolve_schedule")(recipe, recipe.harness(**recipe.section("rl_rollout")))


@dataclass(frozen=True)
class Mechanism:
    """One switchable mechanism. ``key``: the recipe entry that decides it; ``on``: whether a resolved recipe runs
    it; ``papers``: the paper recipes whose paper describes it, each with where (the specification, written
    once here: a recipe that switches it on without its paper having it fails ``tests/test_mechanisms.py``);
    ``switch``: the notebook parameter that turns it on or off for an ablation (None: change the recipe value
    or ``-p`` the key's own parameter)."""

    name: str
    title: str
    key: str
    on: Callable[[Any], bool]
    papers: dict[str, str]
    switch: str | None = None


MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism("self_recovery", "recovery rules and the tool-free synthesis turn (WeAgent Table 5)",
              "harness.self_recovery", lambda r: bool(r.get("harness.self_recovery", False)),
              {"weagent_mmsearch": "Table 5, §6.2", "long_mdr": "WeAgent's harness (Table 5), which it stages"},
              "-p self_recovery true|false (notebooks 01, 05, 06)"),
    Mechanism("context_folding", "context folding of stale observations (POINTS-Seeker §3.3 V-Fold)",
              "harness.context_strategy", lambda r: r.get("harness.context_strategy", "full") != "full",
              {"points_seeker": "§3.3, §4.1 (tau 8k, k 2)"}),
    Mechanism("opd_warmup", "on-policy distillation warmup before reward RL (Long-MDR abstract)",
              "rl_run.stages", lambda r: any(s.kind == "opd" for s in _schedule(r)), {"long_mdr": "abstract"},
              "-p stages (notebook 05: e.g. opd:50,h10:200)"),
    Mechanism("progressive_horizons", "RL stages with growing turn and context budgets (Long-MDR abstract)",
              "rl_run.stages", lambda r: sum(s.kind == "rl" for s in _schedule(r)) > 1, {"long_mdr": "abstract"},
              "-p stages (notebook 05: e.g. h10:200,h20)"),
    Mechanism("entropy_rescue", "entropy-triggered rescue of the sampling temperature (Long-MDR abstract)",
              "rescue.action", lambda r: r.has("rescue.action"), {"long_mdr": "abstract"},
              "-p rescue true|false (notebook 05)"),
    Mechanism("model_label_audit", "RL query filter: a model audits the reference labels (WeAgent §4.5, Kimi K2.6)",
              "data.rl_label_audit", lambda r: r.get("data.rl_label_audit", "rule") == "llm",
              {"weagent_mmsearch": "§4.5", "long_mdr": "WeAgent §4.5 (its data pipeline)"}),
)

#: ablation switches a profile takes (:func:`kit.profiles.get_profile` ``switches``) -> the mechanism each sets
SWITCHES: dict[str, str] = {"self_recovery": "self_recovery", "rescue": "entropy_rescue"}


def _recipe(recipe):
    from kit.recipes import load_recipe

    return load_recipe(recipe) if isinstance(recipe, str) else recipe


def mechanisms(recipe) -> list[dict[str, Any]]:
    """One row per :data:`MECHANISMS` entry for ``recipe`` (a name or a resolved :class:`~kit.recipes.Recipe`):
    ``name``, ``title``, ``on`` (bool), ``paper`` (True: the recipe's paper describes it, :attr:`Mechanism.papers`;
    None: not a paper recipe), ``where`` (the paper's section, else None), ``key``, ``why`` (the deciding entry's
    source and kit reason, or ``"not in the recipe"``) and ``switch``."""
    r = _recipe(recipe)
    out = []
    for m in MECHANISMS:
        on = bool(m.on(r))
        e = r.entries.get(m.key)
        why = "not in the recipe" if e is None else "; ".join(
            ([e.source] if e.source else []) + ([f"kit: {e.kit}"] if e.kit else []))
        paper = None if r.name not in PAPER_RECIPES else r.name in m.papers
        out.append({"name": m.name, "title": m.title, "on": on, "paper": paper, "where": m.papers.get(r.name),
                    "key": m.key, "why": why, "switch": m.switch})
    return out


def mechanisms_text(recipe) -> str:
    """The plain-text mechanism table of ``kit.cli recipe NAME``: ``name  on|off  paper: yes|no|—  title``."""
    rows = mechanisms(recipe)
    w = max(len(x["name"]) for x in rows)
    lines = ["mechanisms (on/off; paper: whether the recipe's paper has it; an ablation switch where one exists):"]
    for x in rows:
        paper = "—" if x["paper"] is None else ("yes" if x["paper"] else "no")
        sw = f"  [switch: {x['switch']}]" if x["switch"] else ""
        lines.append(f"  {x['name']:<{w}}  {'on ' if x['on'] else 'off'}  paper: {paper:<3}  {x['title']}{sw}")
    return "\n".join(lines)


def switch_problem(recipe: str, switches: dict[str, bool]) -> str | None:
    """One line when ``switches`` name a switch that is not in :data:`SWITCHES` (listing the supported ones),
    else None."""
    bad = sorted(k for k in switches if k not in SWITCHES)
    if bad:
        return (f"profile recipe {recipe!r} has no mechanism switch {', '.join(map(repr, bad))}; "
                f"supported: {', '.join(sorted(SWITCHES))}")
    return None


def switch_labels(recipe: str, switches: dict[str, bool]) -> list[str]:
    """``ablation:<switch>=on|off`` for each switch that changes what ``recipe`` runs (a switch equal to the
    recipe's own value changes nothing and adds no label)."""
    rows = {x["name"]: x for x in mechanisms(recipe)}
    return [f"ablation:{k}={'on' if v else 'off'}" for k, v in sorted(switches.items())
            if k in SWITCHES and rows[SWITCHES[k]]["on"] != bool(v)]


def stages_labels(recipe, stages: str | None) -> list[str]:
    """``["ablation:stages=<spec>"]`` when notebook 05's ``stages`` names another schedule than ``recipe``'s own
    ``rl_run.stages`` (a name or a resolved :class:`~kit.recipes.Recipe`; the progressive-horizons and OPD
    mechanisms then differ from the recipe's), else ``[]`` (None or the recipe's own: nothing changes)."""
    r = _recipe(recipe)
    return [] if stages is None or stages == r.get("rl_run.stages", None) else [f"ablation:stages={stages}"]
