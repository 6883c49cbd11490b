"""Run one notebook headless with Papermill (``python -m kit.cli notebook NN``): the checks before its kernel
starts, the execution, and each model role's health after it. Split from :mod:`kit.cli` so the sequence
(:mod:`kit.cli_sequence`) runs notebooks without importing the command line; every name is re-exported there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kit.cli_catalog import NOTEBOOKS, PROFILES, profile_problem, reserved_problem
from kit.cli_params import (
    ParameterError,
    absolute_paths,
    check_combinations,
    check_params,
    notebook_parameters,
    preflight_endpoints,
    resolved_run,
)
from kit.kernel import KERNEL_NAME, ensure_kernel, local_kernel_manager_class
from kit.paths import PROJECT_ROOT
from kit.profiles import ResolvedRun

#: exceptions a notebook's cells raise when its folder or checkpoint belongs to another run (kit.runs): exit 2
MISMATCH_ERRORS = ("RunMismatch", "ResumeMismatch", "FolderError")


def notebook_name(key: str) -> str:
    """``"06"`` → ``"06_evaluation"``; a full name passes through when it is a plain file name (a path such as
    ``../../x`` would put the results outside ``results/``).

    Raises:
        FileNotFoundError: ``key`` is a path, not a notebook's name.
    """
    if key in NOTEBOOKS:
        return NOTEBOOKS[key]
    from kit.runs import check_run_name

    try:
        return check_run_name(key.removesuffix(".ipynb"), what="notebook name")
    except ValueError as e:
        raise FileNotFoundError(f"no notebook {key!r}: {e}; give its number (01..07) or its name") from e


class ModelRoleFailed(RuntimeError):
    """A notebook ran to its end but a model role's episodes failed (status ``error``: the policy or its endpoint)
    or a judge's verdicts did (no decision: its endpoint failed; :mod:`kit.run_health`) above the tolerated share;
    ``lines`` has one line a role, ``executed`` the notebook."""

    def __init__(self, executed: Path, lines: list[str]):
        self.executed, self.lines = executed, lines
        super().__init__("model role(s) or judge(s) failed: " + "; ".join(lines))


def run_notebook(key: str, profile: str = "smoke", params: dict | None = None, out_dir: str | Path | None = None,
                 kernel: str = KERNEL_NAME, *, notebooks_dir: str | Path | None = None, progress: bool = False,
                 check_endpoints: bool = True, preflight: bool = False, run: str | None = None,
                 fail_on_error: float = 0.0, echo=print) -> Path:
    """Execute notebook ``key`` (``"01"`` or its name) headless and return the executed notebook path.

    ``out_dir`` (default ``results/<run>/<name>``, ``run`` default the profile's run name: ``smoke``,
    ``weagent_mmsearch`` for ``paper``, ``points_seeker_preflight``; :mod:`kit.runs`) receives the executed
    notebook and ``run_identity.json``: a folder holding another experiment (profile, recipe, parameters) is
    refused before the kernel starts (:class:`kit.runs.RunMismatch`, naming what differs); the same experiment
    resumes. After the notebook, one line per model role is echoed (:mod:`kit.run_health`) and a role whose
    share of error episodes is above ``fail_on_error`` raises :class:`ModelRoleFailed`. The notebook gets
    ``profile`` and ``out_dir`` as parameters, plus ``params``. ``notebooks_dir`` defaults to
    ``notebooks/`` (its cells run with that folder as working directory); ``progress`` shows a
    per-cell progress bar. ``params`` are checked against the parameters cell's declared types
    (:mod:`kit.cli_params`) and, with ``check_endpoints``, every named endpoint is checked (reachable,
    serves the named model) before the kernel starts. ``preflight``: run a paper profile at its settings
    with sizes shrunk and tiny stand-in models (:mod:`kit.profiles`; the notebook's ``preflight``
    parameter), labelled ``preflight``; refused for the smoke profile and for notebooks without it.

    Raises:
        FileNotFoundError: no such notebook.
        kit.cli_params.ParameterError (a ValueError): ``params`` names a parameter the notebook's
            parameters cell does not declare, or gives a value of the wrong type.
        kit.policy.factory.ModelUnavailable: a named endpoint is down or does not serve the named model.
        kit.runs.RunMismatch (a ValueError): ``out_dir`` holds another run.
        papermill.PapermillExecutionError: a cell failed (the executed notebook is still written).
        ModelRoleFailed: the notebook ended but a model role's episodes failed (its outputs are kept).
    """
    nb_dir = Path(notebooks_dir) if notebooks_dir else PROJECT_ROOT / "notebooks"
    name, src, out = _locate(key, profile, out_dir, run, nb_dir, preflight=preflight)
    declared, run = _checked_params(name, src, profile, params or {}, preflight=preflight,
                                    check_endpoints=check_endpoints, fail_on_error=fail_on_error)
    params = dict(run.overrides)
    from kit.runs import claim_folder, run_identity

    # RunMismatch: another experiment; FolderError: a file in the way, no permission. Every parameter the run
    # uses is recorded (defaults too), and what its input files hold
    claim_folder(out, run_identity(name, run, params, preflight=preflight, declared=declared, base=nb_dir))
    parameters = {"profile": profile, "out_dir": str(out), **params, **({"preflight": True} if preflight else {})}
    dest = out / f"{name}.ipynb"
    _execute(src, dest, parameters, kernel, nb_dir, progress=progress)
    _check_health(out, dest, fail_on_error, echo)
    return dest


def _locate(key: str, profile: str, out_dir, run: str | None, nb_dir: Path, *, preflight: bool) -> tuple[str, Path, Path]:
    """Step 1 of :func:`run_notebook`: the notebook's name, its file and its results folder (a relative
    ``out_dir`` is taken from the caller's working directory: cells run inside ``notebooks/``)."""
    name = notebook_name(key)
    if out_dir is not None and run is not None:
        raise ParameterError("give the run name (--run) or the results folder (--out), not both")
    if out_dir is not None and not str(out_dir).strip():
        raise ParameterError("--out is empty: give a folder, or leave it out for results/<run>/<notebook>")
    src = nb_dir / f"{name}.ipynb"
    if not src.exists():
        raise FileNotFoundError(f"no notebook {src}; available: {sorted(p.stem for p in nb_dir.glob('*.ipynb'))}")
    if profile not in PROFILES:
        raise ParameterError(f"unknown profile {profile!r}; choose one of {PROFILES}")
    from kit.runs import default_out_dir

    out = Path(out_dir).resolve() if out_dir else default_out_dir(name, profile, preflight=preflight, run=run)
    return name, src, out


def _checked_params(name: str, src: Path, profile: str, params: dict, *, preflight: bool, check_endpoints: bool,
                    fail_on_error: float) -> tuple[dict, ResolvedRun]:
    """Step 2 of :func:`run_notebook`: ``(declared, the run)`` after every check that runs before the kernel
    (reserved names, the profile, types, combinations, preflight, the named endpoints), in that order; the run
    (:class:`kit.profiles.ResolvedRun`) holds the profile resolved once and the typed parameters.

    Raises:
        ParameterError: the first rule broken; kit.policy.factory.ModelUnavailable: an endpoint.
    """
    problem = reserved_problem(params)
    if problem:
        raise ParameterError(problem)
    declared = notebook_parameters(src)
    problem = profile_problem(declared, profile, f"notebook {name}")
    if problem:  # before any other rule: a paper profile's needs would hide it
        raise ParameterError(problem)
    params = absolute_paths(declared, check_params(declared, params, f"notebook {name}"))  # cells run in notebooks/
    run = resolved_run(declared, params, profile, preflight=preflight)  # the profile resolved once, for every check
    check_combinations(declared, params, run, f"notebook {name}", preflight=preflight,
                       local_refs=check_endpoints)  # a missing base_model folder before any endpoint probe
    if preflight:
        if profile == "smoke":
            raise ParameterError("--preflight applies to a paper profile (paper, points_seeker); smoke is already small")
        if "preflight" not in declared:
            raise ParameterError(f"notebook {name} has no preflight mode (no 'preflight' parameter)")
        if "preflight" in params:
            raise ParameterError("-p preflight is not accepted: use --preflight")
    if not 0.0 <= fail_on_error <= 1.0:
        raise ParameterError(f"--fail-on-error is the tolerated share of error episodes in [0, 1], got {fail_on_error!r}")
    if check_endpoints:
        preflight_endpoints(declared, params, profile=run)  # the caller names the notebook
    return declared, run


def _execute(src: Path, dest: Path, parameters: dict[str, Any], kernel: str, nb_dir: Path, *, progress: bool) -> None:
    """Step 3 of :func:`run_notebook`: Papermill runs ``src`` into ``dest`` with the kit's kernel, cells in
    ``nb_dir``."""
    from kit.extras import require

    require("notebooks", "papermill", "nbformat", "ipykernel", feature="kit notebook / sequence")
    import papermill as pm

    _quiet_papermill_name_check()
    ensure_kernel(kernel)  # the kit's own kernel (kit.kernel), installed here when make setup did not
    os.environ.setdefault("KIT_HEADLESS", "1")  # the kernel inherits it: sparse progress bars (kit.progress)
    pm.execute_notebook(str(src), str(dest), parameters=parameters, kernel_name=kernel, cwd=str(nb_dir),
                        progress_bar=progress, kernel_manager_class=local_kernel_manager_class())  # IPC, not TCP


def _check_health(out: Path, dest: Path, fail_on_error: float, echo) -> None:
    """Step 4 of :func:`run_notebook`: one line per model role; :class:`ModelRoleFailed` above the tolerated
    share of error episodes."""
    from kit.eval.runner import default_private_dir
    from kit.run_health import failed_roles, health_lines, role_health

    health = role_health(out, default_private_dir(out))  # encrypted benchmarks' episodes are kept out of out
    for line in health_lines(health):
        echo(f"  {line}")
    failed = failed_roles(health, fail_on_error)
    if failed:
        raise ModelRoleFailed(dest, health_lines(failed))


class _KnownParameters:
    """Drops Papermill's "Passed unknown parameter" warning: its regex inspector cannot read annotations
    such as ``Literal["zim", "serper"]`` or ``Count | None``, while every name was already checked
    against the parameters cell's AST (:func:`kit.cli_params.check_params`)."""

    def filter(self, record) -> bool:
        return not str(record.msg).startswith("Passed unknown parameter")


def _quiet_papermill_name_check() -> None:
    import logging

    log = logging.getLogger("papermill")
    if not any(isinstance(f, _KnownParameters) for f in log.filters):
        log.addFilter(_KnownParameters())


__all__ = ["MISMATCH_ERRORS", "ModelRoleFailed", "notebook_name", "run_notebook"]
