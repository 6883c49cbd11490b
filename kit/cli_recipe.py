"""``python -m kit.cli recipe NAME [--json] [--preflight] [--verl [--stage S] | --verl-stages] [--stages SPEC]``.

Plain text: one line per value, then the mechanisms (on/off, whether the paper has each:
:mod:`kit.recipes.mechanisms`), ``key  kit value  paper value  [origin] source; kit choice: reason``; the
paper column is ``—`` where the paper states none. With ``--preflight`` a value the overlay replaces also shows
the recipe's own value (``preflight 3 <- recipe 20 [weagent_mmsearch]``). ``--json``: :meth:`Recipe.as_dict`,
every row with value, paper, source, kit, origin and ``replaced`` (the recipe's own entry under an overlay).
``--verl`` / ``--verl-stages``: :mod:`kit.rl.verl.recipe_config` (``--stages``, refused without them: a named schedule such as
``weagent`` or a stage list, default the recipe's ``rl_run.stages``).

A command-line view of the recipes, beside the other ``kit.cli_*`` modules (it was ``kit/recipes/show.py``): the
recipes package stays data and imports nothing from the RL code this view reads.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from kit.recipes import Recipe, RecipeError, load_recipe


def _v(v: Any) -> str:
    return "—" if v is None else json.dumps(v, default=str, ensure_ascii=False)


def recipe_text(r: Recipe) -> str:
    """The plain-text table of ``r`` (module docstring): key, kit value, paper value, origin and source; a
    replaced value under an overlay as ``<overlay value> <- recipe <its value> [origin]``."""
    rows = r.rows()
    lines = [f"{r.label}: {r.title}" + (f" ({r.paper})" if r.paper else "")]
    if not rows:
        return lines[0]
    width = max(len(x["key"]) for x in rows)
    kit_w = min(40, max(len(_kit(x)) for x in rows))
    paper_w = min(30, max(len(_v(_paper(x))) for x in rows))
    lines.append(f"  {'key':<{width}}  {'kit':<{kit_w}}  {'paper':<{paper_w}}  [from] source")
    for x in rows:
        src = "; ".join(([x["source"]] if x["source"] else []) + ([f"kit choice: {x['kit']}"] if x["kit"] else []))
        lines.append(f"  {x['key']:<{width}}  {_kit(x):<{kit_w}}  {_v(_paper(x)):<{paper_w}}  [{x['origin']}] {src}")
    return "\n".join(lines)


def _paper(row: dict[str, Any]) -> Any:
    """The paper column: the recipe's own paper value when an overlay replaced the value (a size)."""
    rep = row.get("replaced")
    return row["paper"] if rep is None else rep["paper"]


def _kit(row: dict[str, Any]) -> str:
    rep = row.get("replaced")
    if rep is None:
        return _v(row["value"])
    return f"{row['origin']} {_v(row['value'])} <- recipe {_v(rep['value'])} [{rep['origin']}]"


def cmd_recipe(args) -> int:
    """The ``recipe`` subcommand (exit 0; 2 on a bad recipe, stage or schedule, message on stderr; 2 when
    ``--stage`` is given without ``--verl`` or ``--stages`` without ``--verl``/``--verl-stages``: the plain
    table has no stage to apply them to)."""
    stage, stages = getattr(args, "stage", None), getattr(args, "stages", None)
    if stage is not None and not args.verl:
        print(f"recipe: --stage {stage} selects the RL stage of a verl launch: add --verl "
              "(the plain table lists the recipe's values, not one stage's)", file=sys.stderr)
        return 2
    if stages is not None and not (args.verl or args.verl_stages):
        print(f"recipe: --stages {stages} sets the schedule of a verl launch: add --verl or --verl-stages "
              "(the plain table shows the recipe's rl_run.stages)", file=sys.stderr)
        return 2
    from kit.profiles import PROFILE_ALIASES

    name = PROFILE_ALIASES.get(args.name, args.name)  # paper -> weagent_mmsearch, as --profile paper resolves
    if name != args.name:
        print(f"# {args.name} is the profile name of recipe {name}", file=sys.stderr)
    overlay = name == "preflight"  # an overlay of sizes, applied with --preflight: no mechanism of its own
    if overlay and (args.preflight or args.verl or args.verl_stages):
        print("recipe: preflight is an overlay, not a recipe: give a recipe with --preflight "
              "(e.g. recipe weagent_mmsearch --preflight)", file=sys.stderr)
        return 2
    try:
        r = load_recipe(name, ("preflight",) if args.preflight else ())
    except RecipeError as e:
        print(f"recipe: {e}", file=sys.stderr)
        return 2
    if args.verl or args.verl_stages:  # the verl launch's Hydra overrides (kit.rl.verl.recipe_config)
        from kit.rl.verl.recipe_config import VerlConfigError, verl_overrides, verl_stages

        spec = getattr(args, "stages", None) or None
        try:
            lines = ([v.name for v in verl_stages(r, stages=spec)] if args.verl_stages
                     else verl_overrides(r, stage=args.stage, stages=spec))
        except (VerlConfigError, RecipeError, ValueError) as e:
            print(f"recipe: {e}", file=sys.stderr)
            return 2
        print("\n".join(lines))
        if args.verl:  # stderr: the launcher reads stdout as overrides; an endpoint is the user's, not the recipe's
            from kit.rl.verl.launch_check import endpoint_keys

            for key, why in endpoint_keys(r).items():
                print(f"# {key}=URL required ({why}): pass it to scripts/launch_verl.sh", file=sys.stderr)
            if r.has("rescue.action"):  # said, not silently dropped: the in-process trainer runs it, verl does not
                print("# entropy-triggered rescue (rescue.*) is not run by the verl launch: notebook 05 (in process) "
                      "runs it; on verl the stages run without it", file=sys.stderr)
        return 0
    from kit.recipes.mechanisms import mechanisms, mechanisms_text

    if args.json:
        print(json.dumps({**r.as_dict(), **({} if overlay else {"mechanisms": mechanisms(r)})}, indent=2, default=str))
        return 0
    print(recipe_text(r) + "\n\n" + ("an overlay of sizes and stand-in models, applied to a recipe with --preflight "
                                      "(recipe weagent_mmsearch --preflight); it switches no mechanism"
                                      if overlay else mechanisms_text(r)))
    return 0


__all__ = ["cmd_recipe", "recipe_text"]
