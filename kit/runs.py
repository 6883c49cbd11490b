"""A run is one identifiable experiment (issue 26, part 5): where a notebook's outputs go and whether a folder
may be resumed.

Outputs go to ``results/<run>/<NN_name>/``; the run name defaults to the profile with an alias resolved
(``paper`` → ``weagent_mmsearch``) and ``_preflight`` added for a preflight (:attr:`kit.profiles.Profile.run_name`),
so two profiles never share a folder unless the user gives both one run name. Each folder holds
``run_identity.json``: the notebook, the resolved profile and recipe, a sha256 of every resolved recipe value,
the preflight flag, every parameter and a fingerprint of them (:func:`run_identity`). A run into a folder whose
identity differs stops before the kernel starts (:class:`RunMismatch`, exit 2) naming the keys that differ
(:func:`claim_folder`); the same identity resumes (finished episodes are never redone). ``kit.manifest``
copies the identity into every manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kit.diffs import leaf_diff
from kit.paths import PROJECT_ROOT, JsonFileError, read_json_file

__all__ = ["IDENTITY_FILE", "INPUT_PARAMS", "RUN_NAME_MAX", "FolderError", "ResumeMismatch", "RunMismatch", "check_resume",
           "check_run_name", "claim_folder", "config_fingerprint", "default_out_dir", "effective_params",
           "identity_diff", "input_fingerprints", "read_identity", "resolve_out_dir", "run_identity"]

IDENTITY_FILE = "run_identity.json"
#: parameters the command line sets itself (where a run writes, its profile and preflight flag: recorded apart)
_NOT_PARAMS = ("out_dir", "profile", "preflight")
#: the longest run name: results/<run>/<notebook>/<file> stays far below the file system's 255-byte name limit
RUN_NAME_MAX = 100
#: an identity file larger than this is not one (a link to /dev/zero, a log written over it)
_IDENTITY_MAX_BYTES = 1 << 20
#: parameters that name input data (files whose contents, not only paths, make the run): the checkpoints and
#: RL prompts of kit.cli_refs.PATH_PARAMS, the local web, task and benchmark files. Other parameters are settings
INPUT_PARAMS = ("base_model", "sft_model", "teacher_model", "model", "rl_prompts", "zim_paths", "task_dir",
                "vistarget_path", "local_paths", "data", "mmsearch_r1")
#: bytes read from each end of an input file for its fingerprint (a ZIM is GBs: the whole file is not hashed)
_INPUT_SAMPLE = 1 << 20


class RunMismatch(ValueError):
    """A results folder holds another experiment (its identity differs); ``keys`` lists what differs."""

    def __init__(self, folder: Path, keys: list[str], hint: str = ""):
        self.folder, self.keys = folder, keys
        super().__init__(f"{folder} holds another run; it differs in: {'; '.join(keys)}. "
                         + (hint or "Choose another run name (--run NAME) or folder (--out DIR), or delete that folder."))


class FolderError(ValueError):
    """A results folder cannot be used (a file is in the way, no permission, a name the file system refuses)."""

    def __init__(self, folder: Path, why: str):
        self.folder = folder
        super().__init__(f"cannot use {folder} as a results folder: {why}")


class ResumeMismatch(ValueError):
    """A trainer's checkpoint belongs to another configuration (``keys``: what differs); it is not resumed."""

    def __init__(self, where: Path, keys: list[str]):
        self.where, self.keys = where, keys
        super().__init__(f"{where} holds a checkpoint of another run; it differs in: {'; '.join(keys[:12])}"
                         + (f" (+{len(keys) - 12} more)" if len(keys) > 12 else "")
                         + ". Train into another folder, or delete that one to start afresh.")


def config_fingerprint(config: dict[str, Any]) -> dict[str, Any]:
    """``{"config": config as JSON, "fingerprint": 16 hex}``: what a trainer records beside its checkpoints."""
    canon = json.loads(json.dumps(config, sort_keys=True, default=str))
    return {"config": canon, "fingerprint": _sha(canon)[:16]}


def check_resume(recorded: dict[str, Any] | None, current: dict[str, Any], where: str | Path) -> None:
    """Refuse to resume ``where`` when its recorded :func:`config_fingerprint` differs from ``current``'s (or
    none was recorded: a checkpoint of an unidentified run).

    Raises:
        ResumeMismatch: naming every differing key (``rl.lr: 5e-07 -> 1e-06``).
    """
    if recorded is None or "fingerprint" not in recorded:
        raise ResumeMismatch(Path(where), ["no run identity recorded with the checkpoint"])
    if recorded["fingerprint"] == current["fingerprint"]:
        return
    raise ResumeMismatch(Path(where), leaf_diff(recorded.get("config"), current["config"]) or ["fingerprint"])


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str, ensure_ascii=False).encode()).hexdigest()


def default_out_dir(notebook: str, profile: str = "smoke", *, preflight: bool = False, run: str | None = None,
                    root: str | Path | None = None) -> Path:
    """``<root>/<run>/<notebook>`` (``root`` default ``results/``; ``run`` default the profile's run name).

    Raises:
        ValueError: an unknown profile, or a run name that is not a plain folder name.
    """
    from kit.profiles import get_profile

    name = check_run_name(run) if run is not None else get_profile(profile, preflight=preflight).run_name
    check_run_name(notebook, what="notebook name")
    return (Path(root) if root else PROJECT_ROOT / "results").resolve() / name / notebook


def check_run_name(name: Any, what: str = "run name") -> str:
    """``name`` when it is a plain folder name: text of 1 to :data:`RUN_NAME_MAX` characters, no path separator,
    no control or format character, no leading or trailing space, not ``.`` or ``..`` and not starting with ``-``
    (a command-line option). The notebook command and the sequence command share this rule.

    Raises:
        ValueError: naming what is wrong.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} must be a non-empty folder name, got {name!r}")
    bad = [c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    why = (f"it is longer than {RUN_NAME_MAX} characters" if len(name) > RUN_NAME_MAX
           else "it holds a path separator" if "/" in name or "\\" in name or os.sep in name
           else f"it holds the control character(s) {sorted(set(map(repr, bad)))}" if bad
           else "it starts or ends with a space" if name != name.strip()
           else "it is a relative folder" if name in (".", "..")
           else "it starts with '-'" if name.startswith("-") else "")
    if why:
        raise ValueError(f"{what} must be a plain folder name; {name[:RUN_NAME_MAX]!r}: {why}")
    return name


def resolve_out_dir(out_dir: str | Path | None, notebook: str, profile: str = "smoke", *, preflight: bool = False,
                    params: Mapping[str, Any] | None = None) -> Path:
    """A notebook's results folder: ``out_dir`` when given (the command line always gives one), else
    :func:`default_out_dir` (a notebook opened in JupyterLab: ``results/<profile run name>/<notebook>``).

    ``params``: the notebook's namespace (``globals()``). When given, the folder is claimed for this run as the
    command line claims it (:func:`claim_folder`; the parameter values are those of the parameters cell, read
    from the namespace): a notebook run by hand into a folder of another experiment stops here, and a folder
    the command line claimed for this same run resumes.

    Raises:
        RunMismatch: the folder holds another experiment. FolderError: it cannot be written.
    """
    out = Path(out_dir).resolve() if out_dir else default_out_dir(notebook, profile, preflight=preflight)
    if params is not None:
        from kit.cli_params import notebook_parameters

        src = next((p for p in (Path.cwd() / f"{notebook}.ipynb", PROJECT_ROOT / "notebooks" / f"{notebook}.ipynb")
                    if p.is_file()), None)
        if src is None:
            raise FileNotFoundError(f"notebook {notebook}.ipynb is neither in {Path.cwd()} nor in notebooks/")
        declared = notebook_parameters(src)
        values = {n: params[n] for n in declared if n in params and n not in _NOT_PARAMS}
        claim_folder(out, run_identity(notebook, profile, values, preflight=preflight, declared=declared,
                                       base=Path.cwd()))
    return out


def effective_params(declared: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter a run uses: each declared one's default (``declared``: :func:`kit.cli_params.notebook_parameters`,
    whose ``.default`` is the parameters cell's literal) overlaid with ``given``; the command line's own
    (``out_dir``, ``profile``, ``preflight``) left out. ``-p seed 0`` and no ``-p`` then name one run when the
    cell says ``seed = 0``. JSON-normalized (a tuple is a list)."""
    merged = {**{n: getattr(p, "default", None) for n, p in declared.items()}, **given}
    return json.loads(json.dumps({k: v for k, v in merged.items() if k not in _NOT_PARAMS},
                                 sort_keys=True, default=str))


def input_fingerprints(params: Mapping[str, Any], base: str | Path | None = None) -> dict[str, Any]:
    """What the input files a run names hold, so the same path with other contents is another run.

    For each input parameter (:data:`INPUT_PARAMS`) whose value (a list item, a dict value) names an existing
    regular file (relative to ``base``, the folder the notebook runs in): ``{"bytes": size, "sha256": of its first
    and last MiB}`` (a ZIM of GBs is not read whole; a change in its middle that keeps its size is not seen).
    Folders (model checkpoints, run folders) are recorded by path only. Keys: ``NAME``, ``NAME[i]``, ``NAME[key]``."""
    root = Path(base) if base else PROJECT_ROOT / "notebooks"
    out: dict[str, Any] = {}
    for name, value in sorted(params.items()):
        if name not in INPUT_PARAMS:
            continue
        items = [(name, value)] if isinstance(value, str) else (
            [(f"{name}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else
            [(f"{name}[{k}]", v) for k, v in sorted(value.items()) if isinstance(k, str)] if isinstance(value, dict)
            else [])
        for key, v in items:
            if not isinstance(v, str) or not v or len(v) > 4096 or "\0" in v or v.startswith(("hub:", "tiny-")):
                continue
            p = Path(v).expanduser()
            p = p if p.is_absolute() else root / p
            try:
                st = p.stat()
                if not stat.S_ISREG(st.st_mode):
                    continue
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    h.update(f.read(_INPUT_SAMPLE))
                    if st.st_size > 2 * _INPUT_SAMPLE:
                        f.seek(st.st_size - _INPUT_SAMPLE)
                    h.update(f.read(_INPUT_SAMPLE))
            except (OSError, ValueError):
                continue
            out[key] = {"bytes": st.st_size, "sha256": h.hexdigest()[:16]}
    return out


def run_identity(notebook: str, profile: Any, params: Mapping[str, Any] | None = None, *,
                 preflight: bool = False, declared: Mapping[str, Any] | None = None,
                 base: str | Path | None = None) -> dict[str, Any]:
    """What makes a notebook run this experiment: ``{"notebook", "profile" (resolved), "profile_given",
    "recipe" (label with overlays), "recipe_sha256" (every resolved value), "preflight", "params", "inputs",
    "fingerprint"}``; the fingerprint (16 hex) covers every key but ``profile_given`` (``paper`` and
    ``weagent_mmsearch`` are one experiment). ``params``: with ``declared`` (the notebook's parameters cell),
    every parameter the run uses (:func:`effective_params`); without, the given ones. ``inputs``: what the files
    they name hold (:func:`input_fingerprints`, relative paths from ``base``). ``profile``: a name or the run
    resolved once (:class:`kit.profiles.ResolvedRun`; ``profile_given`` is its name as given).

    Raises:
        ValueError: an unknown profile.
    """
    from kit.profiles import ResolvedRun, get_profile

    prof = get_profile(profile, preflight=preflight)
    recipe = prof.recipe_obj()
    values = effective_params(declared or {}, params or {})
    ident = {"notebook": notebook, "profile": prof.name, "recipe": recipe.label,
             "recipe_sha256": _sha({k: e.value for k, e in recipe.entries.items()}),
             "preflight": bool(preflight), "params": values, "inputs": input_fingerprints(values, base)}
    given = profile.given if isinstance(profile, ResolvedRun) else profile
    return {**ident, "profile_given": given, "fingerprint": _sha(ident)[:16]}


def read_identity(folder: str | Path, *, strict: bool = False) -> dict[str, Any] | None:
    """The identity recorded in ``folder``; None when there is none. A file that is not one (not a regular
    file, a FIFO or a link to a device: never opened; over 1 MiB; not JSON; keys of the wrong type) is None
    too, or with ``strict`` a :class:`RunMismatch` saying what is wrong with it."""
    try:
        got = read_json_file(Path(folder) / IDENTITY_FILE, max_bytes=_IDENTITY_MAX_BYTES, what="an identity")
    except FileNotFoundError:
        return None
    except JsonFileError as e:
        why = e.why
    else:
        why = _identity_shape(got)
        if not why:
            return got  # type: ignore[return-value]
    if strict:
        raise RunMismatch(Path(folder), [f"{IDENTITY_FILE}: damaged ({why})"],
                          "Move or delete that folder (or that file, if you know which run wrote it).")
    return None


def _identity_shape(got: Any) -> str:
    if not isinstance(got, dict):
        return f"a JSON {type(got).__name__}, not an object"
    want = {"fingerprint": str, "notebook": str, "profile": str, "params": dict, "preflight": bool}
    bad = [f"{k} is {type(got.get(k)).__name__}" for k, t in want.items() if not isinstance(got.get(k), t)]
    return "; ".join(bad)


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys two identities differ in, each ``key: old -> new`` (parameters as ``params.NAME``, input files
    as ``inputs.NAME``); ``profile_given`` and the fingerprint itself are not compared."""
    skip = ("profile_given", "fingerprint")
    return leaf_diff({k: v for k, v in old.items() if k not in skip},
                     {k: v for k, v in new.items() if k not in skip}) or ["fingerprint"]


def claim_folder(folder: str | Path, identity: dict[str, Any]) -> str:
    """Make ``folder`` this run's: returns ``"new"`` (empty or absent: the identity is written) or ``"resume"``
    (the same identity is recorded). A folder without a readable identity that already holds files is refused
    too: its outputs would be mixed with this run's.

    Raises:
        RunMismatch: the recorded identity differs (the differing keys are named) or is damaged, or the folder
            holds files of an unidentified run.
        FolderError: the folder cannot be made or written (a file in the way, no permission, a name too long).
    """
    folder = Path(folder)
    try:
        old = read_identity(folder, strict=True)
        if old is not None:
            if old.get("fingerprint") != identity["fingerprint"]:
                raise RunMismatch(folder, identity_diff(old, identity))
            if not os.access(folder, os.W_OK | os.X_OK):
                raise FolderError(folder, "it is not writable")
            return "resume"
        if folder.exists() and not folder.is_dir():
            raise FolderError(folder, "a file (not a folder) is in the way")
        if folder.is_dir() and any(folder.iterdir()):
            raise RunMismatch(folder, [f"{IDENTITY_FILE}: none (outputs of an unidentified run)"])
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (IDENTITY_FILE + ".tmp")
        tmp.write_text(json.dumps(identity, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(folder / IDENTITY_FILE)
    except OSError as e:
        raise FolderError(folder, f"{type(e).__name__}: {e.strerror or e}") from e
    return "new"
