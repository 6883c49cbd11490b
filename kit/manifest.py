"""Run manifests (docs/contracts.md "Run"): everything needed to rerun a notebook or CLI run.

``results/<run>/manifest.json`` records the git commit (and whether the tree was dirty), the config,
the seed(s), the Python and platform, the versions of the packages that shape results plus every
installed distribution, the sha256 of the data files and folders used, and the model identity
(with a content hash of a local checkpoint folder). Benchmarks loaded from a hub record the commit
they were read at (``LoadResult.info["resolved_commit"]``, also for an unpinned default branch;
notebook 06 writes it under ``config.benchmark_sources``), so a rerun can pin it.
:func:`compare_manifests` lists what differs between two runs that should be reruns of each other.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from kit.diffs import leaf_diff
from kit.paths import PROJECT_ROOT, file_sha256

PACKAGES = ("mmsearch-kit", "torch", "transformers", "tokenizers", "libzim", "tantivy", "imagehash", "pillow",
            "httpx", "pydantic", "papermill", "trl", "peft", "datasets", "huggingface_hub", "accelerate", "numpy",
            "pandas", "vllm", "unsloth", "verl")
# environment variables that change what a run reads or does (values recorded; never secrets)
ENV_VARS = ("MMSEARCH_KIT_DATA", "MMSEARCH_KIT_CACHE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT",
            "HF_HOME", "HF_HUB_CACHE", "CUDA_VISIBLE_DEVICES", "PYTHONHASHSEED", "OMP_NUM_THREADS")
# fields compared by compare_manifests (the ones that decide whether two runs should agree)
RERUN_FIELDS = ("git", "python", "packages", "seed", "seeds", "config", "model", "data")


def git_state(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the checkout at ``root`` (dirty: uncommitted
    changes outside ``results/``)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        # run outputs under results/ do not make the code dirty
        dirty = subprocess.run(["git", "status", "--porcelain", "--", ".", ":(exclude)results"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout
        return {"commit": sha or None, "dirty": bool(dirty.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def package_versions(names=PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that shape results (absent ones omitted)."""
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    return out


def all_package_versions() -> dict[str, str]:
    """``{distribution name (lower case): version}`` of every installed distribution (a full freeze)."""
    out = {}
    for d in metadata.distributions():
        name = (d.metadata.get("Name") or "").lower()
        if name:
            out[name] = d.version
    return dict(sorted(out.items()))


def tree_sha256(path: str | os.PathLike) -> dict[str, Any]:
    """Content hash of a file or folder: ``{"sha256", "files", "bytes"}``.

    A folder hashes the sorted lines ``relative/path<TAB>sha256`` of its regular files (symlinks
    and ``.git`` skipped), so renaming or changing any file changes the hash.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    p = Path(path)
    if p.is_file():
        return {"sha256": file_sha256(p), "files": 1, "bytes": p.stat().st_size}
    if not p.is_dir():
        raise FileNotFoundError(f"{p} does not exist")
    h = hashlib.sha256()
    n = size = 0
    for f in sorted(q for q in p.rglob("*") if q.is_file() and not q.is_symlink() and ".git" not in q.relative_to(p).parts):
        h.update(f"{f.relative_to(p).as_posix()}\t{file_sha256(f)}\n".encode())
        n += 1
        size += f.stat().st_size
    return {"sha256": h.hexdigest(), "files": n, "bytes": size}


def model_identity(model: dict[str, Any] | None) -> dict[str, Any]:
    """``model`` plus a content hash of its local checkpoint folder or file (key ``path``), when it exists
    and no ``sha256`` was given. Hub ids and endpoints are kept as given."""
    info = dict(model or {})
    path = info.get("path")
    if path and "sha256" not in info and Path(path).exists():
        info["checkpoint"] = tree_sha256(path)
    return info


def env_snapshot(names=ENV_VARS) -> dict[str, str]:
    """Values of the environment variables in ``names`` that are set (none of them holds a secret)."""
    return {n: os.environ[n] for n in names if n in os.environ}


def write_manifest(run_dir: str | Path, *, config: dict[str, Any], seed: int | None, data_files: list[str | Path] = (),
                   model: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
                   seeds: dict[str, int] | None = None, stand_ins: dict[str, str | None] | None = None) -> Path:
    """Write ``run_dir/manifest.json`` and return its path.

    Args:
        config: the run's full configuration (JSON-able; other values are written with ``str``).
        seed: the run's base seed; ``seeds`` names any derived seeds (per repeat, per data split).
        data_files: files or folders whose content the run read; each is hashed (:func:`tree_sha256`).
        model: policy identity (name, path or endpoint, smoke flag); a local ``path`` is hashed.
        extra: further top-level keys (labels, cache statistics).
        The folder's run identity (:mod:`kit.runs`, when the command line wrote one) is copied in as
        ``run_identity``, and ``profile_resolved`` names the profile with an alias resolved.
        stand_ins: for a preflight (``config["preflight"]`` true): ``{role: what ran}`` overriding the default
            of :func:`kit.profiles.preflight_stand_ins` (e.g. a warm-started stand-in policy; ``None``: the
            role did not run and is not listed).
        A listed path that does not exist is recorded as ``"missing"``. A preflight manifest always gets a
        top-level ``stand_ins`` (every paper role: the model it stands in for and what really ran), so no
        preflight output passes for a run of the paper's judge, summarizer, expert or teacher.

    Raises:
        ValueError: ``stand_ins`` for a run that is not a preflight, or an unknown role or profile.
    """
    run_dir = Path(run_dir)
    if stand_ins and not config.get("preflight"):
        raise ValueError("stand_ins are recorded for a preflight (config['preflight'] true) only")
    if config.get("preflight"):  # what really ran for every paper role (a tiny stand-in), not the recipe's model
        from kit.profiles import preflight_stand_ins

        extra = {**(extra or {}), "stand_ins": preflight_stand_ins(config.get("profile", "paper"), stand_ins)}
    run_dir.mkdir(parents=True, exist_ok=True)
    data = {}
    for p in data_files:
        if not Path(p).exists():
            data[str(p)] = "missing"  # recorded, not dropped: a rerun must know the file was absent
            continue
        t = tree_sha256(p)
        data[str(p)] = t["sha256"] if Path(p).is_file() else t
    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_state(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "all_packages": all_package_versions(),
        "env": env_snapshot(),
        "seed": seed,
        "seeds": seeds or {},
        "config": config,
        "model": model_identity(model),
        "data": data,
        **(extra or {}),
    }
    from kit.runs import read_identity

    identity = read_identity(run_dir)  # written by the command line before the kernel started (kit.runs)
    if identity is not None:
        manifest["run_identity"] = identity
    if config.get("profile"):  # the profile and recipe that ran, an alias resolved (kit.profiles)
        from kit.profiles import PROFILE_ALIASES

        manifest.setdefault("profile_resolved", PROFILE_ALIASES.get(config["profile"], config["profile"]))
    path = run_dir / "manifest.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str), encoding="utf-8")
    tmp.replace(path)
    return path


def read_manifest(run_dir_or_file: str | Path) -> dict[str, Any]:
    """Load a manifest from a run folder or a ``manifest.json`` path.

    Raises:
        FileNotFoundError: no manifest there.
    """
    p = Path(run_dir_or_file)
    p = p / "manifest.json" if p.is_dir() else p
    if not p.is_file():
        raise FileNotFoundError(f"no manifest at {p}")
    return json.loads(p.read_text(encoding="utf-8"))


def _diff(a: Any, b: Any, where: str, out: list[str]) -> None:
    """Append ``where.key: a != b`` for every leaf that differs between two JSON-like values (:func:`kit.diffs.leaf_diff`)."""
    out.extend(leaf_diff(a, b, where, absent="<absent>", arrow="!=", width=None))


def compare_manifests(a: dict[str, Any], b: dict[str, Any], fields=RERUN_FIELDS, *, ignore: tuple[str, ...] = ()) -> list[str]:
    """Differences (``"path: a != b"``) between two manifests in the fields that decide a rerun;
    paths starting with any of ``ignore`` (e.g. ``"git.dirty"``) are left out. Empty: same run setup."""
    out: list[str] = []
    for f in fields:
        _diff(a.get(f), b.get(f), f, out)
    return [d for d in out if not any(d.startswith(i) for i in ignore)]
