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
from pathlib import Path
from typing import Any

from kit.paths import PROJECT_ROOT

__all__ = ["IDENTITY_FILE", "ResumeMismatch", "RunMismatch", "check_resume", "claim_folder", "config_fingerprint",
           "default_out_dir", "identity_diff", "read_identity", "resolve_out_dir", "run_identity"]

IDENTITY_FILE = "run_identity.json"
#: parameters that say where a run writes, not what it is: left out of the fingerprint
_PLACE_PARAMS = ("out_dir",)


class RunMismatch(ValueError):
    """A results folder holds another experiment (its identity differs); ``keys`` lists what differs."""

    def __init__(self, folder: Path, keys: list[str], hint: str = ""):
        self.folder, self.keys = folder, keys
        super().__init__(f"{folder} holds another run; it differs in: {'; '.join(keys)}. "
                         + (hint or "Choose another run name (--run NAME) or folder (--out DIR), or delete that folder."))


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


def _leaf_diff(a: Any, b: Any, where: str, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            _leaf_diff(a.get(k, "<unset>"), b.get(k, "<unset>"), f"{where}.{k}" if where else str(k), out)
    elif a != b:
        out.append(f"{where}: {a!r} -> {b!r}"[:300])


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
    out: list[str] = []
    _leaf_diff(recorded.get("config"), current["config"], "", out)
    raise ResumeMismatch(Path(where), out or ["fingerprint"])


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str, ensure_ascii=False).encode()).hexdigest()


def default_out_dir(notebook: str, profile: str = "smoke", *, preflight: bool = False, run: str | None = None,
                    root: str | Path | None = None) -> Path:
    """``<root>/<run>/<notebook>`` (``root`` default ``results/``; ``run`` default the profile's run name).

    Raises:
        ValueError: an unknown profile, or a run name that is not a plain folder name.
    """
    from kit.profiles import get_profile

    name = run or get_profile(profile, preflight=preflight).run_name
    if not isinstance(name, str) or not name.strip() or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"run name must be a plain folder name, got {name!r}")
    return (Path(root) if root else PROJECT_ROOT / "results").resolve() / name / notebook


def resolve_out_dir(out_dir: str | Path | None, notebook: str, profile: str = "smoke", *, preflight: bool = False) -> Path:
    """A notebook's results folder: ``out_dir`` when given (the command line always gives one), else
    :func:`default_out_dir` (a notebook opened in JupyterLab: ``results/<profile run name>/<notebook>``)."""
    return Path(out_dir).resolve() if out_dir else default_out_dir(notebook, profile, preflight=preflight)


def run_identity(notebook: str, profile: str, params: dict[str, Any] | None = None, *,
                 preflight: bool = False) -> dict[str, Any]:
    """What makes a notebook run this experiment: ``{"notebook", "profile" (resolved), "profile_given",
    "recipe" (label with overlays), "recipe_sha256" (every resolved value), "preflight", "params",
    "fingerprint"}``; the fingerprint (16 hex) covers every key but ``profile_given`` (``paper`` and
    ``weagent_mmsearch`` are one experiment).

    Raises:
        ValueError: an unknown profile.
    """
    from kit.profiles import get_profile

    prof = get_profile(profile, preflight=preflight)
    recipe = prof.recipe_obj()
    ident = {"notebook": notebook, "profile": prof.name, "recipe": recipe.label,
             "recipe_sha256": _sha({k: e.value for k, e in recipe.entries.items()}),
             "preflight": bool(preflight),
             "params": json.loads(json.dumps({k: v for k, v in (params or {}).items() if k not in _PLACE_PARAMS},
                                             sort_keys=True, default=str))}
    return {**ident, "profile_given": profile, "fingerprint": _sha(ident)[:16]}


def read_identity(folder: str | Path) -> dict[str, Any] | None:
    """The identity recorded in ``folder`` (None when there is none or it cannot be read)."""
    p = Path(folder) / IDENTITY_FILE
    try:
        got = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) and "fingerprint" in got else None


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The keys two identities differ in, each ``key: old -> new`` (parameters as ``params.NAME``)."""
    out = []
    for k in ("notebook", "profile", "recipe", "recipe_sha256", "preflight"):
        if old.get(k) != new.get(k):
            out.append(f"{k}: {old.get(k)!r} -> {new.get(k)!r}")
    po, pn = old.get("params") or {}, new.get("params") or {}
    for k in sorted(set(po) | set(pn)):
        if po.get(k, "<unset>") != pn.get(k, "<unset>"):
            out.append(f"params.{k}: {po.get(k, '<unset>')!r} -> {pn.get(k, '<unset>')!r}")
    return out or ["fingerprint"]


def claim_folder(folder: str | Path, identity: dict[str, Any]) -> str:
    """Make ``folder`` this run's: returns ``"new"`` (empty or absent: the identity is written) or ``"resume"``
    (the same identity is recorded). A folder without a readable identity that already holds files is refused
    too: its outputs would be mixed with this run's.

    Raises:
        RunMismatch: the recorded identity differs (the differing keys are named), or the folder holds files of
            an unidentified run.
    """
    folder = Path(folder)
    old = read_identity(folder)
    if old is not None:
        if old.get("fingerprint") != identity["fingerprint"]:
            raise RunMismatch(folder, identity_diff(old, identity))
        return "resume"
    if folder.is_dir() and any(folder.iterdir()):
        raise RunMismatch(folder, [f"{IDENTITY_FILE}: none (outputs of an unidentified run)"])
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (IDENTITY_FILE + ".tmp")
    tmp.write_text(json.dumps(identity, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(folder / IDENTITY_FILE)
    return "new"
