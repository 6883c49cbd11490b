"""Run manifests (docs/contracts.md "Run"): everything needed to rerun a notebook or CLI run.

``results/<run>/manifest.json`` records the git commit (and whether the tree was dirty), the config,
the seed, package versions, sha256 of the data files used and the model identity.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from kit.paths import PROJECT_ROOT, file_sha256

PACKAGES = ("mmsearch-kit", "torch", "transformers", "tokenizers", "libzim", "tantivy", "bm25s", "imagehash", "pillow",
            "httpx", "pydantic", "papermill", "trl", "peft", "datasets", "vllm", "unsloth", "verl")


def git_state(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the checkout at ``root``."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=10).stdout
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


def write_manifest(run_dir: str | Path, *, config: dict[str, Any], seed: int | None, data_files: list[str | Path] = (),
                   model: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> Path:
    """Write ``run_dir/manifest.json`` and return its path.

    ``data_files`` are hashed (sha256); ``model`` should identify the policy (name, path or endpoint,
    checkpoint hash, whether it is a tiny random smoke model).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_state(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "seed": seed,
        "config": config,
        "model": model or {},
        "data": {str(p): file_sha256(p) for p in data_files if Path(p).is_file()},
        **(extra or {}),
    }
    path = run_dir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str), encoding="utf-8")
    return path
