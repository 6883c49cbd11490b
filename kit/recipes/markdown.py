"""``docs/recipes.md``, generated from the recipe files: every value with its paper value and source, and each
recipe's mechanisms (:mod:`kit.recipes.mechanisms`). ``kit.recipes.recipes_markdown`` is this module's function
(a test keeps the committed page equal to it)."""

from __future__ import annotations

import json
from typing import Any

from kit.recipes import load_recipe, recipe_names
from kit.recipes.mechanisms import mechanisms

__all__ = ["recipes_markdown"]


def _md_value(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:g}"
    text = str(v) if not isinstance(v, (list, dict)) else json.dumps(v)
    return text.replace("|", "\\|")


def recipes_markdown() -> str:
    """``docs/recipes.md``: for every recipe, key | paper value | kit value | source (generated; a test keeps
    the committed page equal to this)."""
    lines = ["# Recipes", "",
             "Generated from `kit/recipes/*.yaml` by `kit.recipes.recipes_markdown()` (do not edit by hand; "
             "`python -m kit.cli recipe NAME [--json] [--preflight]` prints one recipe: key, kit value, paper "
             "value, source; under `--preflight` a value the overlay replaces reads `preflight 3 <- recipe 20`). "
             "*paper*: the value the paper states "
             "(— where it states none); *kit*: the value the kit runs; *source*: the paper's section, table or "
             "equation, or *kit choice* with the reason.", "",
             "A notebook's `profile` selects the recipe of the same name: `weagent_mmsearch` (WeAgent-MMSearch as "
             "written; `paper` is another name for it, and a run under it says `weagent_mmsearch` in its folder and "
             "manifest), `long_mdr` (WeAgent's harness and FA-GSPO inside Long-MDR's staging), `points_seeker` "
             "(POINTS-Seeker as written) and `smoke` (the CPU check: `long_mdr` with CPU budgets). A paper recipe "
             "runs only the mechanisms its paper describes: each recipe below ends with its mechanisms, on or off, "
             "and whether the paper has each (`kit.recipes.mechanisms`; the kit's own are ablation switches, "
             "labelled on every output). "
             "`--preflight` (`python -m kit.cli notebook NN --profile paper --preflight`) applies the `preflight` "
             "overlay on top: the recipe's settings with sizes shrunk and tiny stand-in models, so every object of "
             "the paper run is built and stepped on a CPU (`tests/test_preflight.py` runs it for every notebook "
             "under every recipe that applies). The config classes (`HarnessConfig`, `RLConfig`, `SFTTrainConfig`, "
             "`RescueConfig`, the clip ranges, reward weights and evaluation protocols) take their defaults from "
             "these files. `schedules.NAME` rows are named RL stage schedules (`-p stages NAME` in notebook 05, "
             "`SCHEDULE=NAME` for `scripts/launch_verl.sh`); `verl.*` rows are the verl launch's constants; "
             "`paper_only.*` rows are values the paper states that the kit records but does not run. "
             "Every key is checked at load (`kit.recipes.sections`): a config section's keys are its class's "
             "fields, the other sections' keys are declared with strict types (a bool is not a number; step "
             "counts and sizes are >= 1), and an unknown section or key, in a recipe or an overlay, fails "
             "naming the nearest known one.", "",
             "**Runs.** A run is one experiment (`kit.runs`): outputs go to `results/<run>/<NN_name>/`, the run named "
             "after the profile with an alias resolved (`results/weagent_mmsearch/`, `results/points_seeker_preflight/`; "
             "`--run NAME` chooses another), and each folder records its run identity (`run_identity.json`: profile, "
             "recipe, a hash of every resolved value, every parameter's value (defaults included: `-p seed 0` is the "
             "default run), what its input files hold (size and a hash of their ends), a fingerprint; copied into the "
             "manifest). A run into a folder of another experiment stops before the kernel (exit 2) naming what "
             "differs, and so does a notebook run by hand in JupyterLab (it claims its folder in its first cell); the "
             "RL and SFT trainers refuse another run's checkpoints the same way (exit 2), and a fresh sequence never "
             "clears a folder no sequence of its run wrote, nor a run whose recorded plan is another experiment. "
             "`sequence --profile P --preflight` runs every notebook's preflight one after another into "
             "`results/P_preflight/`. A notebook whose model role failed (its episodes ended in `error`: an HTTP "
             "error, a refused connection) or whose judge gave no verdict (a dead judge endpoint; RL's reward judge "
             "too) exits 1 with one line per role, although it ran to its end (`--fail-on-error 0.1` tolerates a "
             "share; `kit.run_health`); a resume retries those episodes.", ""]
    for name in recipe_names():
        r = load_recipe(name)
        lines += [f"## `{name}`: {r.title}", ""]
        if r.paper:
            lines += [f"Paper: {r.paper}", ""]
        if r.description:
            lines += [r.description.strip(), ""]
        lines += ["| key | paper | kit | source | from |", "|---|---|---|---|---|"]
        for row in r.rows():
            src = "; ".join(([row["source"]] if row["source"] else []) + ([f"*kit choice*: {row['kit']}"] if row["kit"] else []))
            lines.append(f"| `{row['key']}` | {_md_value(row['paper'])} | {_md_value(row['value'])} | "
                         f"{src.replace('|', '/')} | {row['origin']} |")
        if not r.has("harness.protocol"):  # an overlay of sizes (preflight): no mechanism of its own
            lines.append("")
            continue
        lines += ["", f"Mechanisms of `{name}`:", "", "| mechanism | on | paper has it | decided by | ablation switch |",
                  "|---|---|---|---|---|"]
        for m in mechanisms(r):
            has = "—" if m["paper"] is None else ("yes" if m["paper"] else "no")
            lines.append(f"| {m['title']} | {'on' if m['on'] else 'off'} | {has} | `{m['key']}` | "
                         f"{(m['switch'] or '—').replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)
