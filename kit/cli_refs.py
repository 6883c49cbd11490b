"""Local paths and checkpoint references of a notebook run, checked offline before it starts (split from
:mod:`kit.cli_params`, which re-exports every name): which parameters name a checkpoint
(:data:`CHECKPOINT_PARAMS`) or another local path (:data:`PATH_PARAMS`), relative paths made absolute for the
notebooks' working folder (:func:`absolute_paths`), one problem line per reference that cannot load
(:func:`checkpoint_problems`, the one place they are checked), and the folders an earlier notebook of a
``sequence`` plan writes, which may not exist yet (:func:`written_by_plan`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kit.cli_params import Param

# model-like parameters that are not served: which references each notebook can load
CHECKPOINT_PARAMS = {"base_model": {"tiny": True, "hub": True}, "sft_model": {"tiny": False, "hub": False},
                     "teacher_model": {"tiny": True, "hub": True}}  # notebook 05's OPD teacher (_checkpoint)
# parameters naming a local path (or a hub: reference) that a notebook reads
PATH_PARAMS = (*CHECKPOINT_PARAMS, "rl_prompts")


def absolute_paths(declared: dict[str, Param], params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every :data:`PATH_PARAMS` value that is a relative path existing from the caller's
    folder made absolute: the notebooks run inside ``notebooks/``, where ``results/02_data_synthesis``
    names nothing. Other values (``hub:`` references, ``tiny-<arch>``, missing paths) are kept for the checks."""
    out = dict(params)
    for name in PATH_PARAMS:
        v = out.get(name)
        if name in declared and isinstance(v, str) and v and not v.startswith(("hub:", "tiny-")):
            p = Path(v).expanduser()
            if not p.is_absolute() and p.exists():
                out[name] = str(p.resolve())
    return out


def written_by_plan(value: str, written: Iterable[str | Path]) -> bool:
    """True when ``value`` is a path inside one of ``written`` (folders an earlier notebook of a sequence plan
    writes, e.g. ``results/<run>/04_sft_unsloth``): it may not exist before that notebook runs. Both sides are
    resolved from the caller's working directory; ``hub:`` and ``tiny-`` references are never paths."""
    if not value or value.startswith(("hub:", "tiny-")):
        return False
    p = Path(value).expanduser().resolve()
    return any(p.is_relative_to(Path(w).expanduser().resolve()) for w in written)


def checkpoint_problems(declared: dict[str, Param], params: dict[str, Any], where: str = "", *,
                        written: Iterable[str | Path] = ()) -> list[str]:
    """One line per checkpoint reference of :data:`CHECKPOINT_PARAMS` (override, else default) that names no
    loadable checkpoint (:func:`kit.policy.factory.checkpoint_ref_problem`: a missing folder, an unknown
    ``tiny-<arch>``, a malformed ``hub:`` reference), starting ``"<where>: "`` when ``where`` is given; ``[]``
    when all load. Offline (no download). A path inside ``written`` (:func:`written_by_plan`) is not checked:
    an earlier notebook of the plan writes it."""
    from kit.policy.factory import checkpoint_ref_problem

    written = list(written)
    out = []
    for name, kw in CHECKPOINT_PARAMS.items():
        ref = params.get(name, declared[name].default) if name in declared else ""
        if isinstance(ref, str) and ref and not written_by_plan(ref, written):
            problem = checkpoint_ref_problem(name, ref, **kw)
            if problem:
                out.append(f"{where}: {problem}" if where else problem)
    return out
