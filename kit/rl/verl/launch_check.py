"""Early refusal of a verl launch (``scripts/launch_verl.sh``) whose recipe needs an endpoint nobody named.

A paper recipe scores rewards with an LLM judge (``eval.judge: llm``: WeAgent §7.1, POINTS-Seeker §3.2.4) and
summarizes pages with an LLM (``eval.summarizer: llm``, WeAgent Table 4); without ``kit.judge_endpoint`` /
``kit.summarizer_endpoint`` the launch used to fail only inside a Ray worker after the model had loaded.
:func:`launch_problems` checks the launch's Hydra overrides first (no network, no Ray, no torch)::

    python -m kit.rl.verl.launch_check RECIPE [--preflight] [--stages S] -- kit.judge_endpoint=http://judge:8000/v1 ...

exits 2 with one line per missing endpoint (stderr), 0 when the launch may start.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence

# the kit.<switch> value that calls kit.<switch>_endpoint (kit.rl.verl.settings)
ONLINE = {"judge": "llm", "summarizer": "llm"}


def endpoint_keys(recipe) -> dict[str, str]:
    """``{override key: why}`` for the endpoints the resolved :class:`~kit.recipes.Recipe` ``recipe`` needs on
    verl by default (``kit.judge_endpoint`` when ``eval.judge`` is ``llm`` …), the reason naming the recipe value."""
    out = {}
    for switch, on in ONLINE.items():
        if str(recipe.get(f"eval.{switch}", "")) == on:
            e = recipe.entries.get(f"eval.{switch}")
            out[f"kit.{switch}_endpoint"] = f"eval.{switch}={on} ({e.source or e.kit})" if e else f"eval.{switch}={on}"
    return out


def launch_problems(recipe, overrides: Iterable[str]) -> list[str]:
    """Why a verl launch of ``recipe`` with the Hydra ``overrides`` (``key=value`` strings, later ones win)
    would fail in its workers for a missing endpoint; ``[]`` when none. ``kit.judge=rule`` (the labelled rule
    fallback) or ``kit.summarizer=extractive`` lifts the need."""
    given: dict[str, str] = {}
    for o in overrides:
        key, sep, value = str(o).lstrip("+").partition("=")
        if sep:
            given[key] = value.strip().strip("'\"")
    problems = []
    for switch, on in ONLINE.items():
        chosen = given.get(f"kit.{switch}", "null")
        if chosen in ("", "null"):  # null: the recipe's eval.<switch> (kit.rl.verl.settings)
            chosen = str(recipe.get(f"eval.{switch}", ""))
        key = f"kit.{switch}_endpoint"
        if chosen == on and not given.get(key):
            why = endpoint_keys(recipe).get(key, f"kit.{switch}={on}")
            problems.append(f"recipe {recipe.label} uses {why} and needs {key}=URL (an OpenAI-compatible "
                            f"server); pass it after the data files, or kit.{switch}="
                            f"{'rule' if switch == 'judge' else 'extractive'} for the labelled fallback")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (module docstring). Returns the exit status: 2 with problems printed, else 0."""
    from kit.recipes import load_recipe

    p = argparse.ArgumentParser(prog="python -m kit.rl.verl.launch_check")
    p.add_argument("recipe")
    p.add_argument("--preflight", action="store_true")
    p.add_argument("--stages", default=None, help="accepted as the launcher passes it (the schedule needs no endpoint)")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args(argv)
    r = load_recipe(a.recipe, ("preflight",) if a.preflight else ())
    problems = launch_problems(r, a.overrides)
    for line in problems:
        print(f"[launch_verl] refused: {line}", file=sys.stderr)
    return 2 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
