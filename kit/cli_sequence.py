"""The notebooks the command line knows and the ``sequence`` command: run notebooks 01 -> 07 in order into
``results/<run>/<notebook>/`` with a resumable state file (``sequence.json``). Split from :mod:`kit.cli`
(one concern per module); every name is re-exported there.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.cli_catalog import (  # noqa: F401 - re-exported (old import paths)
    NOTEBOOKS,
    PROFILES,
    RESERVED,
    _first_line,
    profile_problem,
    reserved_problem,
)
from kit.cli_params import (
    ParameterError,
    check_combinations,
    check_params,
    local_ref_problems,
    notebook_parameters,
    plan_writes,
    preflight_endpoints,
    resolved_run,
)
from kit.diffs import leaf_diff
from kit.paths import PROJECT_ROOT, read_json_file
from kit.profiles import ResolvedRun

SEQUENCE_FILE = "sequence.json"
STEP_STATUSES = ("pending", "running", "ok", "failed")


class SequenceError(RuntimeError):
    """A sequence cannot start or resume (missing notebook, unknown key, nothing to resume, conflicting plan)."""


class NotebookFailed(RuntimeError):
    """A notebook of a sequence failed; ``key`` names it and ``executed`` is the partially executed copy."""

    def __init__(self, key: str, executed: Path, cause: BaseException):
        self.key, self.executed, self.cause = key, executed, cause
        super().__init__(f"notebook {key} ({NOTEBOOKS.get(key, key)}) failed: {type(cause).__name__}: "
                         f"{_first_line(cause)}; executed copy with the failing cell: {executed}")


def plan_sequence(keys: list[str] | None, *, notebooks_dir: str | Path | None = None) -> list[str]:
    """Ordered notebook keys to run: ``keys`` (any order, deduplicated) or all of 01 → 07.

    Raises:
        SequenceError: an unknown key, or a selected notebook file that does not exist (nothing is
            skipped silently: the whole sequence refuses to start).
    """
    nb_dir = Path(notebooks_dir) if notebooks_dir else PROJECT_ROOT / "notebooks"
    chosen = list(dict.fromkeys(keys)) if keys else list(NOTEBOOKS)
    unknown = [k for k in chosen if k not in NOTEBOOKS]
    if unknown:
        raise SequenceError(f"unknown notebook key(s) {unknown}; known: {', '.join(NOTEBOOKS)}")
    chosen.sort()
    missing = [f"{k} ({nb_dir / (NOTEBOOKS[k] + '.ipynb')})" for k in chosen if not (nb_dir / f"{NOTEBOOKS[k]}.ipynb").exists()]
    if missing:
        raise SequenceError("missing notebook(s): " + ", ".join(missing) +
                            "; choose the notebooks to run with --only")
    return chosen


def _declared(notebook: Path) -> set[str]:
    """Names assigned at the top level of a notebook's ``parameters`` cell (see :func:`notebook_parameters`)."""
    return set(notebook_parameters(notebook))


def _given(plan: dict[str, Any], key: str, declared) -> dict[str, Any]:
    """The overrides a plan gives notebook ``key``: common ones it declares, then its own ``NN.name`` ones."""
    return {**{n: v for n, v in plan["common"].items() if n in declared}, **plan["per_notebook"].get(key, {})}


def _read_state(path: Path) -> dict[str, Any]:
    """A recorded ``sequence.json``. Raises :class:`SequenceError` when it is not one (damaged, edited: every
    field of the plan and of each step is checked for its type, so a resume never fails half-way on it)."""
    try:
        state: Any = read_json_file(path, max_bytes=16 << 20, what="a sequence state")
        why = _state_problem(state)
        if why:
            raise ValueError(why)
    except (OSError, ValueError) as e:  # kit.paths.JsonFileError is a ValueError
        raise SequenceError(f"{path} is not a readable sequence state ({e}); "
                            "start the run again without --resume") from e
    return state


def _state_problem(state: Any) -> str:
    if not isinstance(state, dict) or not isinstance(state.get("plan"), dict) or not isinstance(state.get("steps"), dict):
        return "missing plan or steps"
    plan, steps = state["plan"], state["steps"]
    if not (isinstance(plan.get("keys"), list) and plan["keys"] and all(k in NOTEBOOKS for k in plan["keys"])):
        return f"plan.keys is not a list of notebook keys: {plan.get('keys')!r}"[:200]
    if not isinstance(plan.get("profile"), str) or plan["profile"] not in PROFILES:
        return f"plan.profile is not a profile: {plan.get('profile')!r}"[:200]
    if not isinstance(plan.get("preflight", False), bool):
        return "plan.preflight is not true or false"
    if not isinstance(plan.get("common"), dict):
        return "plan.common is not an object"
    per = plan.get("per_notebook")
    if not isinstance(per, dict) or not all(isinstance(v, dict) for v in per.values()):
        return "plan.per_notebook is not an object of objects"
    if sorted(steps) != sorted(plan["keys"]):
        return f"steps {sorted(steps)} do not match plan.keys {plan['keys']}"
    for k, v in steps.items():
        if not isinstance(v, dict) or v.get("status") not in STEP_STATUSES:
            return f"steps.{k} has no status of {STEP_STATUSES}"
        if not isinstance(v.get("seconds", 0), (int, float)):
            return f"steps.{k}.seconds is not a number"
    return ""


def plan_identity(plan: dict[str, Any]) -> dict[str, Any]:
    """What makes a sequence plan one experiment: the resolved profile (``paper`` is ``weagent_mmsearch``), the
    preflight flag and every override (keys, the notebooks chosen, are not part of it: ``--only 06`` reruns a
    notebook of the same experiment)."""
    from kit.profiles import resolve_profile_name

    return {"profile": resolve_profile_name(plan["profile"]), "preflight": bool(plan.get("preflight", False)),
            "common": plan["common"], "per_notebook": {k: v for k, v in plan["per_notebook"].items() if v}}


def _write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True, default=str), encoding="utf-8")
    tmp.replace(path)


def run_sequence(run: str, keys: list[str] | None = None, *, profile: str | None = None, common: dict | None = None,
                 per_notebook: dict[str, dict] | None = None, resume: bool = False, results_dir: str | Path | None = None,
                 notebooks_dir: str | Path | None = None, progress: bool = True,
                 echo: Callable[[str], None] = print, runner: Callable[..., Path] | None = None,
                 preflight: bool = True, fail_on_error: float = 0.0, profile_preflight: bool | None = None) -> dict[str, Any]:
    """Run notebooks in order into ``<results_dir>/<run>/<notebook>/`` and return the sequence state.

    ``profile_preflight``: run each notebook as its paper profile's preflight (``--preflight``: the profile's
    settings, sizes shrunk, tiny stand-in models); recorded in the plan (None: the recorded one on resume, else
    off). ``fail_on_error``: the tolerated share of a model role's error episodes in each notebook (above it the
    notebook fails: :class:`kit.cli.ModelRoleFailed`). The state (``sequence.json``) holds the plan (keys,
    profile, overrides) and per step: status
    (``pending`` | ``running`` | ``ok`` | ``failed``), seconds, executed notebook, error. Before the
    first notebook runs, every override is checked (name declared by its notebook, value of the
    declared type: :mod:`kit.cli_params`) and, with ``preflight``, every local reference and named endpoint
    of an unfinished notebook is checked (a missing folder; reachable, serves the named model); a reference
    may name an exact output of an earlier unfinished step (:data:`kit.cli_refs.NOTEBOOK_OUTPUTS`), which is
    checked again right before the notebook starts (:func:`kit.cli_refs.local_ref_problems`). With ``resume`` the recorded
    plan is reused: finished steps are reported as done and the run continues from the first
    unfinished one (a notebook's own run folders resume inside it). Overrides given with ``resume``
    correct the recorded plan: they may change the profile or parameters of notebooks not yet
    finished (such a notebook then starts afresh), never those of a finished one. A notebook that
    starts afresh (any step without ``resume``, a never-started step with it) first has its folder
    ``<results_dir>/<run>/<notebook>/`` cleared (and its private episodes in the kit cache,
    :func:`kit.eval.runner.default_private_dir`), so no output of an earlier sequence is mixed in or resumed.

    Raises:
        SequenceError: bad plan, missing notebooks, an unknown or mistyped override, an unusable
            named endpoint, nothing to resume, or a resume whose keys differ from the recorded plan
            or whose overrides change a finished notebook.
        NotebookFailed: a notebook failed; the state records it and later steps stay ``pending``.
    """
    if profile is not None and profile not in PROFILES:
        raise SequenceError(f"unknown profile {profile!r}; choose one of {PROFILES}")
    if not 0.0 <= fail_on_error <= 1.0:  # NaN fails too
        raise SequenceError(f"--fail-on-error is the tolerated share of error episodes in [0, 1], got {fail_on_error!r}")
    from kit.runs import check_run_name

    try:
        check_run_name(run)
    except ValueError as e:
        raise SequenceError(str(e)) from e
    root = Path(results_dir).resolve() if results_dir else PROJECT_ROOT / "results"
    run_dir = root / run
    state_path = run_dir / SEQUENCE_FILE
    nb_dir = Path(notebooks_dir) if notebooks_dir else PROJECT_ROOT / "notebooks"
    request = {"keys": keys, "profile": profile, "common": common, "per_notebook": per_notebook,
               "notebooks_dir": notebooks_dir, "profile_preflight": profile_preflight}
    if resume:
        state, fresh = _resumed_state(state_path, run, request, nb_dir, echo)
    else:
        state, fresh = _fresh_state(state_path, run_dir, run, request, echo), set()
    plan = state["plan"]
    declared = {k: notebook_parameters(nb_dir / f"{NOTEBOOKS[k]}.ipynb") for k in plan["keys"]}
    typed = _checked_plan(plan, state, declared, run_dir, preflight)
    for key in fresh:
        if state["steps"][key]["status"] != "ok":
            state["steps"][key]["status"] = "pending"  # its folder is cleared below: nothing mixes with the old attempt
    run_dir.mkdir(parents=True, exist_ok=True)
    from kit.cli_notebook import run_notebook

    t_all = time.time()
    for i, key in enumerate(plan["keys"], 1):
        _run_step(i, key, state, typed[key], declared[key], run_dir, state_path, runner or run_notebook, echo=echo, resume=resume,
                  preflight=preflight, notebooks_dir=notebooks_dir, progress=progress, fail_on_error=fail_on_error)
    _finish(run, run_dir, state_path, state, time.time() - t_all, echo)
    return state


def _resumed_state(state_path: Path, run: str, request: dict[str, Any], nb_dir: Path,
                   echo: Callable[[str], None]) -> tuple[dict[str, Any], set[str]]:
    """Step of :func:`run_sequence` under ``resume``: the recorded state with its plan corrected by the overrides
    given now, and the keys whose parameters that changes (they start afresh).

    Raises:
        SequenceError: nothing to resume, other keys or preflight than recorded, or a change to a finished step.
    """
    from kit.profiles import resolve_profile_name

    keys, notebooks_dir, profile_preflight = request["keys"], request["notebooks_dir"], request["profile_preflight"]
    if not state_path.exists():
        raise SequenceError(f"nothing to resume: {state_path} does not exist")
    state = _read_state(state_path)
    old_plan = state["plan"]
    if keys and plan_sequence(keys, notebooks_dir=notebooks_dir) != old_plan["keys"]:
        raise SequenceError(f"--resume with a different plan than recorded in {state_path}: keys: recorded "
                            f"{old_plan['keys']!r}, given {plan_sequence(keys, notebooks_dir=notebooks_dir)!r}")
    given = json.loads(json.dumps({"common": request["common"] or {}, "per_notebook": request["per_notebook"] or {}},
                                  default=str))
    if profile_preflight is not None and profile_preflight != bool(old_plan.get("preflight", False)):
        raise SequenceError(f"--resume with a different plan than recorded in {state_path}: preflight: recorded "
                            f"{bool(old_plan.get('preflight', False))}, given {profile_preflight}")
    plan = {"keys": old_plan["keys"], "profile": resolve_profile_name(request["profile"] or old_plan["profile"]),
            "preflight": bool(old_plan.get("preflight", False)),
            "common": {**old_plan["common"], **given["common"]},
            "per_notebook": {k: {**old_plan["per_notebook"].get(k, {}), **given["per_notebook"].get(k, {})}
                             for k in sorted(set(old_plan["per_notebook"]) | set(given["per_notebook"]))}}
    plan_sequence(plan["keys"], notebooks_dir=notebooks_dir)  # the files must still be there
    declared = {k: notebook_parameters(nb_dir / f"{NOTEBOOKS[k]}.ipynb") for k in plan["keys"]}
    changed = [k for k in plan["keys"] if (resolve_profile_name(old_plan["profile"]), _given(old_plan, k, declared[k]))
               != (plan["profile"], _given(plan, k, declared[k]))]
    finished = [k for k in changed if state["steps"][k]["status"] == "ok"]
    if finished:
        raise SequenceError(
            f"--resume with a different plan than recorded in {state_path}: it changes the parameters of finished "
            "notebook(s) " + "; ".join(f"{k}: recorded profile {old_plan['profile']!r} params "
                                       f"{_given(old_plan, k, declared[k])!r}, given profile {plan['profile']!r} "
                                       f"params {_given(plan, k, declared[k])!r}" for k in finished)
            + " (start the run again without --resume to change them)")
    for k in changed:
        echo(f"{k} {NOTEBOOKS[k]}: corrected for this attempt (profile {plan['profile']}, params "
             f"{json.dumps(_given(plan, k, declared[k]), default=str)}); it starts afresh")
    if all(s["status"] == "ok" for s in state["steps"].values()):
        echo(f"sequence {run!r} already finished; every notebook is reported as done")
    state["plan"] = plan
    return state, set(changed)


def _fresh_state(state_path: Path, run_dir: Path, run: str, request: dict[str, Any],
                 echo: Callable[[str], None]) -> dict[str, Any]:
    """Step of :func:`run_sequence` without ``resume``: a new state, every step pending.

    Raises:
        SequenceError: ``state_path`` records another experiment, or a planned folder holds outputs no sequence
            of this run wrote (a fresh sequence clears its folders, so it never starts over them).
    """
    from kit.profiles import resolve_profile_name

    plan = {"keys": plan_sequence(request["keys"], notebooks_dir=request["notebooks_dir"]),
            "profile": resolve_profile_name(request["profile"] or "smoke"),
            "preflight": bool(request["profile_preflight"]),
            "common": json.loads(json.dumps(request["common"] or {}, default=str)),
            "per_notebook": json.loads(json.dumps(request["per_notebook"] or {}, default=str))}
    old: dict[str, Any] = {"steps": {}}
    if state_path.exists():
        try:
            old = _read_state(state_path)
        except SequenceError as e:
            echo(f"note: {e}; starting over")
            old = {"steps": {}}
        else:  # another experiment under this run name is never cleared: its name is what identifies it
            differ = leaf_diff(plan_identity(old["plan"]), plan_identity(plan))
            if differ:
                raise SequenceError(f"not started: {state_path} records another experiment under run {run!r}; it "
                                    f"differs in: {'; '.join(differ)}. A fresh sequence clears its folders, so "
                                    "choose another --run NAME, or move or delete that run folder")
        if any(s["status"] != "ok" for s in old["steps"].values()):
            echo(f"note: {state_path} records an unfinished sequence; starting over (use --resume to continue it)")
    # a folder this run's sequences never wrote (a standalone notebook run, another experiment) is not cleared
    foreign = [str(run_dir / NOTEBOOKS[k]) for k in plan["keys"] if k not in old["steps"]
               and (run_dir / NOTEBOOKS[k]).is_dir() and any((run_dir / NOTEBOOKS[k]).iterdir())]
    if foreign:
        raise SequenceError(f"not started: {', '.join(foreign)} hold(s) outputs that no sequence of run {run!r} "
                            "wrote (a notebook run on its own, or another experiment); a fresh sequence clears its "
                            "folders, so choose another --run NAME, or move or delete them")
    return {"run": run, "plan": plan, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "steps": {k: {"notebook": NOTEBOOKS[k], "status": "pending"} for k in plan["keys"]}}


def _checked_plan(plan: dict[str, Any], state: dict[str, Any], declared: dict[str, dict], run_dir: Path,
                  preflight: bool) -> dict[str, dict[str, Any]]:
    """Step of :func:`run_sequence`: every override checked before the first notebook runs (a common one must be
    declared by some planned notebook, an NN.name one by notebook NN, which must be planned, and every value
    typed), then with ``preflight`` every named endpoint of an unfinished step. Returns each step's typed
    parameters.

    Raises:
        SequenceError: the first problem (one line, or a notebook's collected problems).
    """
    if plan["preflight"] and plan["profile"] == "smoke":
        raise SequenceError("--preflight applies to a paper profile (weagent_mmsearch, points_seeker, long_mdr); "
                            "smoke is already small")
    problem = reserved_problem([*plan["common"], *(n for v in plan["per_notebook"].values() for n in v)])
    if problem:
        raise SequenceError(problem)
    stray = sorted(n for n in plan["common"] if not any(n in d for d in declared.values()))
    if stray:
        raise SequenceError(f"no planned notebook has parameter(s) {stray}")
    unplanned = sorted(set(plan["per_notebook"]) - set(plan["keys"]))
    if unplanned:
        raise SequenceError(f"override(s) for notebook(s) {unplanned} that the plan {plan['keys']} does not run: "
                            + ", ".join(f"{k}.{n}" for k in unplanned for n in plan["per_notebook"][k]))
    typed: dict[str, dict[str, Any]] = {}
    runs: dict[str, ResolvedRun] = {}  # each step's profile resolved once (kit.profiles.ResolvedRun)

    def written(i: int) -> dict[str, list[Path]]:
        # the exact outputs of the earlier steps still to run (kit.cli_refs.NOTEBOOK_OUTPUTS); a finished step's
        # outputs exist already (a resume), so a reference to them is checked like any other path
        return plan_writes(run_dir / NOTEBOOKS[k] for k in plan["keys"][:i] if state["steps"][k]["status"] != "ok")

    for i, key in enumerate(plan["keys"]):
        where = f"notebook {key} ({NOTEBOOKS[key]})"
        try:
            problem = profile_problem(declared[key], plan["profile"], where)
            if problem:
                raise ParameterError(problem)
            typed[key] = check_params(declared[key], _given(plan, key, declared[key]), where)
            runs[key] = resolved_run(declared[key], typed[key], plan["profile"], preflight=bool(plan.get("preflight")))
            # an output an earlier notebook of this run writes (05's base_model = 04's run/full/final) does not
            # exist before it runs: not refused now, re-checked right before this notebook starts
            check_combinations(declared[key], typed[key], runs[key], where, preflight=bool(plan.get("preflight")),
                               local_refs=preflight and state["steps"][key]["status"] != "ok", written=written(i))
        except ParameterError as e:
            raise SequenceError(str(e)) from e
    if preflight:
        from kit.policy.factory import ModelUnavailable

        for i, key in enumerate(plan["keys"]):
            if state["steps"][key]["status"] != "ok":
                try:
                    preflight_endpoints(declared[key], typed[key], f"notebook {key} ({NOTEBOOKS[key]})",
                                        profile=runs[key], written=written(i))
                except (ModelUnavailable, ParameterError) as e:
                    raise SequenceError(str(e)) from e
    return typed


def _run_step(i: int, key: str, state: dict[str, Any], params: dict[str, Any], declared: dict, run_dir: Path,
              state_path: Path, runner: Callable[..., Path], *, echo: Callable[[str], None], resume: bool,
              preflight: bool, notebooks_dir, progress: bool, fail_on_error: float) -> None:
    """Step of :func:`run_sequence`: notebook ``key`` (the ``i``-th of the plan) into ``run_dir/<notebook>``,
    its step recorded in ``state_path`` before and after (a finished step is reported, not rerun).

    Raises:
        SequenceError: its folder is a symbolic link, or a local reference it reads is missing.
        NotebookFailed: the notebook failed (recorded as ``failed``).
    """
    plan, step = state["plan"], state["steps"][key]
    label = f"[{i}/{len(plan['keys'])}] {key} {NOTEBOOKS[key]}"
    if step["status"] == "ok":
        echo(f"{label}: done in an earlier attempt ({step.get('seconds', 0):.1f} s), not rerun")
        return
    out = run_dir / NOTEBOOKS[key]
    if out.is_symlink():
        raise SequenceError(f"{out} is a symbolic link: the sequence writes (and clears) a real folder there")
    if not resume or step["status"] == "pending":
        # outputs of an earlier sequence, and the private (encrypted-benchmark) episodes kept for this
        # folder in the kit cache: a fresh notebook run must not resume or mix with them
        from kit.eval.runner import default_private_dir

        for stale in (out, default_private_dir(out)):
            if stale.is_dir():
                shutil.rmtree(stale)
                echo(f"{label}: cleared the earlier outputs in {stale}")
    problems = local_ref_problems(declared, params, f"notebook {key} ({NOTEBOOKS[key]})") if preflight else []
    if problems:  # the runner is called without its own checks (check_endpoints=False): they run here
        raise SequenceError(f"{label}: not started, a local reference it reads is missing now that the "
                            "notebooks before it ran:\n" + "\n".join(f"  - {p}" for p in problems))
    step.update(status="running", started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), params=params,
                out_dir=str(out), error=None)
    _write_state(state_path, state)
    echo(f"{label}: running (profile {plan['profile']}{' preflight' if plan.get('preflight') else ''}"
         f"{', params ' + json.dumps(params, default=str) if params else ''})")
    t0 = time.time()
    try:
        executed = runner(key, plan["profile"], params, out, notebooks_dir=notebooks_dir, progress=progress,
                          check_endpoints=False, fail_on_error=fail_on_error,  # checked above, before the first
                          **({"preflight": True} if plan.get("preflight") else {}))
    except BaseException as e:  # noqa: BLE001 - recorded, then re-raised with the notebook named
        executed = out / f"{NOTEBOOKS[key]}.ipynb"
        step.update(status="failed", seconds=round(time.time() - t0, 2), error=f"{type(e).__name__}: {_first_line(e)}",
                    executed=str(executed))
        _write_state(state_path, state)
        if isinstance(e, KeyboardInterrupt):
            raise
        raise NotebookFailed(key, executed, e) from e
    step.update(status="ok", seconds=round(time.time() - t0, 2), executed=str(executed))
    _write_state(state_path, state)
    echo(f"{label}: ok in {step['seconds']:.1f} s → {out}")


def _finish(run: str, run_dir: Path, state_path: Path, state: dict[str, Any], seconds: float,
            echo: Callable[[str], None]) -> None:
    """Last step of :func:`run_sequence`: the state marked finished, the run's manifest and its viewer site."""
    plan = state["plan"]
    state["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    state["seconds_this_attempt"] = round(seconds, 2)
    _write_state(state_path, state)
    from kit.manifest import write_manifest

    write_manifest(run_dir, config={"sequence": plan, "steps": {k: {kk: v for kk, v in s.items() if kk != "params"}
                                                                for k, s in state["steps"].items()}},
                   seed=plan["common"].get("seed"), extra={"kind": "sequence"})
    from kit.view.run_view import build_run_view

    build_run_view(run_dir, echo=echo)  # one viewer site over every episode of the run: <run_dir>/view
    echo(f"sequence {run!r}: {len(plan['keys'])} notebook(s) ok in {run_dir}")
