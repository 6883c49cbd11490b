"""The notebooks the command line knows, the profiles it offers and the parameters it sets itself: what both
:mod:`kit.cli_notebook` (one notebook) and :mod:`kit.cli_sequence` (01 -> 07) read, in a module below both
(every name is re-exported by :mod:`kit.cli` and :mod:`kit.cli_sequence`).
"""

from __future__ import annotations

from kit.profiles import PROFILE_NAMES as PROFILES  # every --profile name (each selects a recipe: kit/recipes)

NOTEBOOKS = {
    "01": "01_harness_demo",
    "02": "02_data_synthesis",
    "03": "03_vfold_rendering",
    "04": "04_sft_unsloth",
    "05": "05_rl_long_mdr",
    "06": "06_evaluation",
    "07": "07_publish",
}
# parameters the command line sets itself: a -p for them would silently contradict the run's record
RESERVED = {"profile": "--profile", "out_dir": "--out (a sequence: --run and --results-dir)",
            "preflight": "--preflight (python -m kit.cli notebook NN --profile P --preflight)"}


def reserved_problem(names, where: str = "") -> str | None:
    """One line when ``names`` include a parameter the command line sets itself (:data:`RESERVED`)."""
    hit = [n for n in names if n in RESERVED]
    if not hit:
        return None
    return (f"{where + ': ' if where else ''}" + "; ".join(f"-p {n} is not accepted: set it with {RESERVED[n]}" for n in hit))


def profile_problem(declared, profile: str, where: str) -> str | None:
    """One line when the notebook's parameters cell (``declared``) does not list ``profile`` among its
    ``profile: Literal[...]`` values (notebook 02 is WeAgent's data pipeline only: no ``points_seeker``)."""
    p = declared.get("profile")
    if p is None or p.choices is None or profile in p.choices:
        return None
    return (f"{where} does not support profile {profile!r}: its parameters cell declares "
            f"profile {' | '.join(map(repr, p.choices))}")


def _first_line(e: BaseException) -> str:
    """One line (at most 500 characters) of an exception: a failing cell's ``ename: evalue``, else the first
    lines of its message without Papermill's banner."""
    if getattr(e, "ename", None):  # papermill.PapermillExecutionError: the failing cell's exception
        return f"cell {getattr(e, 'exec_count', '?')}: {e.ename}: {e.evalue}"[:500]
    text = str(e).strip().splitlines()
    # Papermill's message starts with a banner line; the exception name and value follow it
    useful = [t for t in text if t.strip() and not set(t.strip()) <= set("-=")]
    return " | ".join(useful[:3])[:500] if useful else type(e).__name__


__all__ = ["NOTEBOOKS", "PROFILES", "RESERVED", "profile_problem", "reserved_problem"]
