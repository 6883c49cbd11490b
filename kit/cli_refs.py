"""Local paths and checkpoint references of a notebook run, checked offline before it starts (split from
:mod:`kit.cli_params`, which re-exports every name): which parameters name a checkpoint
(:data:`CHECKPOINT_PARAMS`) or another local path (:data:`PATH_PARAMS`), relative paths made absolute for the
notebooks' working folder (:func:`absolute_paths`), one problem line per reference that cannot load
(:func:`checkpoint_problems`, the one place they are checked), and the folders an earlier notebook of a
``sequence`` plan writes, which may not exist yet: the exact outputs of :data:`NOTEBOOK_OUTPUTS`
(:func:`plan_writes`, :func:`written_by_plan`), and every local reference re-checked right before a
notebook of a plan starts (:func:`local_ref_problems`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kit.cli_spec import Param

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


# what each notebook writes that a later notebook of a sequence plan may name, relative to its output folder
# <run>/<notebook>/, by kind; read from the notebooks' cells (a reference is accepted only if it is one of these)
NOTEBOOK_OUTPUTS: dict[str, dict[str, tuple[str, ...]]] = {
    # rl_prompts: the folder itself (kit.rl.prompts._locate: its final RL mixture), its RL split, the mixture
    "02_data_synthesis": {"rl_prompts": ("", "splits", "splits/rl_prompts.jsonl", "datasets/rl_mixture")},
    # train_sft_curriculum(..., out / "run"): stage 2 ("full", always run) saves the trained model in final/
    "04_sft_unsloth": {"checkpoint": ("run/full/final",)},
    # RLTrainer.save_final(out / "run" / "final"): the trained policy (run/checkpoints/step_<k>/ is trainer
    # state, trainable.pt + optimizer, not a model folder)
    "05_rl_long_mdr": {"checkpoint": ("run/final",)},
}
# parameter -> the kind of output of NOTEBOOK_OUTPUTS it may name
OUTPUT_KIND = {"base_model": "checkpoint", "sft_model": "checkpoint", "teacher_model": "checkpoint",
               "model": "checkpoint", "rl_prompts": "rl_prompts"}

#: parameter name -> the exact paths earlier, unfinished notebooks of a sequence plan write for it
Written = Mapping[str, Iterable[str | Path]]


def plan_writes(folders: Iterable[str | Path]) -> dict[str, list[Path]]:
    """The exact outputs (:data:`NOTEBOOK_OUTPUTS`) that notebooks writing into ``folders``
    (``<results>/<run>/<notebook>``, named by the notebook) will write, per parameter of :data:`OUTPUT_KIND`:
    ``{"base_model": [<run>/04_sft_unsloth/run/full/final], "rl_prompts": [<run>/02_data_synthesis, ...]}``.
    A folder of a notebook that writes nothing a later one names adds nothing."""
    out: dict[str, list[Path]] = {}
    for folder in map(Path, folders):
        for kind, rels in NOTEBOOK_OUTPUTS.get(folder.name, {}).items():
            for name, k in OUTPUT_KIND.items():
                if k == kind:
                    out.setdefault(name, []).extend(folder / r if r else folder for r in rels)
    return out


def written_by_plan(value: str, written: Iterable[str | Path]) -> bool:
    """True when ``value`` names exactly one of ``written`` (outputs an earlier notebook of a sequence plan
    writes, :func:`plan_writes`): it may not exist before that notebook runs. Both sides are resolved from the
    caller's working directory (symbolic links followed, ``..`` folded, a trailing ``/`` ignored); a path
    merely inside such a folder (a typo, the folder itself, its ``manifest.json``) is not written output.
    ``hub:`` and ``tiny-`` references are never paths."""
    if not value or value.startswith(("hub:", "tiny-")):
        return False
    p = Path(value).expanduser().resolve()
    return any(p == Path(w).expanduser().resolve() for w in written)


def _written_for(written: Written | None, name: str) -> list[str | Path]:
    return list((written or {}).get(name, ()))


def checkpoint_problems(declared: dict[str, Param], params: dict[str, Any], where: str = "", *,
                        written: Written | None = None) -> list[str]:
    """One line per checkpoint reference of :data:`CHECKPOINT_PARAMS` (override, else default) that names no
    loadable checkpoint (:func:`kit.policy.factory.checkpoint_ref_problem`: a missing folder, an unknown
    ``tiny-<arch>``, a malformed ``hub:`` reference), starting ``"<where>: "`` when ``where`` is given; ``[]``
    when all load. Offline (no download). A path of ``written[name]`` (:func:`plan_writes`,
    :func:`written_by_plan`) is not checked: an earlier notebook of the plan writes it."""
    from kit.policy.factory import checkpoint_ref_problem

    out = []
    for name, kw in CHECKPOINT_PARAMS.items():
        ref = params.get(name, declared[name].default) if name in declared else ""
        if isinstance(ref, str) and ref and not written_by_plan(ref, _written_for(written, name)):
            problem = checkpoint_ref_problem(name, ref, **kw)
            if problem:
                out.append(f"{where}: {problem}" if where else problem)
    return out


def model_and_prompt_refs(declared: dict[str, Param], params: dict[str, Any], *, served: bool,
                          written: Written | None = None) -> list[tuple[str, str, str | None]]:
    """``(parameter, value, problem or None)`` for the main ``model`` when no endpoint serves it
    (``served`` False; :func:`kit.policy.factory.local_model_problem`) and for ``rl_prompts``
    (:func:`kit.rl.prompts.rl_prompts_problem`), each when set and not an output ``written`` by an
    earlier notebook of a sequence plan (:func:`written_by_plan`). Offline. The one check behind
    :func:`kit.cli_endpoints.preflight_endpoints` and :func:`local_ref_problems`."""
    written = written or {}
    value = {k: params.get(k, p.default) for k, p in declared.items()}
    out: list[tuple[str, str, str | None]] = []
    model = value.get("model")
    if isinstance(model, str) and model and not served and not written_by_plan(model, written.get("model", ())):
        from kit.policy.factory import local_model_problem

        out.append(("model", model, local_model_problem(model)))
    source = value.get("rl_prompts")
    if isinstance(source, str) and source and not written_by_plan(source, written.get("rl_prompts", ())):
        from kit.rl.prompts import rl_prompts_problem

        out.append(("rl_prompts", source, rl_prompts_problem(source)))
    return out


def endpoint_named(value: Any) -> bool:
    """Whether an ``*endpoint`` value names an endpoint: a non-blank string (a blank one names none,
    here, in :func:`kit.cli_endpoints.named_endpoints` and in :func:`kit.policy.factory.make_policy`)."""
    return isinstance(value, str) and bool(value.strip())


def main_endpoint_set(declared: dict[str, Param], params: dict[str, Any]) -> bool:
    """Whether the notebook declares ``endpoint`` and its value (override, else default) names one
    (:func:`endpoint_named`): the main model is then served, not loaded in process. Behind
    :func:`kit.cli_endpoints.preflight_endpoints` and :func:`local_ref_problems` alike."""
    return "endpoint" in declared and endpoint_named(params.get("endpoint", declared["endpoint"].default))


def local_ref_problems(declared: dict[str, Param], params: dict[str, Any], where: str = "") -> list[str]:
    """Every local reference of a notebook about to start, offline: :func:`checkpoint_problems`, the main
    ``model`` when no ``endpoint`` serves it and ``rl_prompts`` (:func:`model_and_prompt_refs`); one line
    each (``"<where>: ..."``), ``[]`` when all load. A sequence runs it right before each notebook starts,
    when the earlier notebooks' outputs must exist."""
    problems = checkpoint_problems(declared, params, where)
    prefix = f"{where}: " if where else ""
    problems += [prefix + problem for _, _, problem in model_and_prompt_refs(
        declared, params, served=main_endpoint_set(declared, params)) if problem]
    return problems
