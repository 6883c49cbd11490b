"""Download published checkpoints, datasets and cache snapshots by repository id and revision.

Files land in the standard Hugging Face cache (``HF_HUB_CACHE`` / ``HF_HOME``, default
``~/.cache/huggingface/hub``) through ``huggingface_hub.snapshot_download``, so every tool that reads
that cache (transformers, datasets, vLLM) finds them. Offline mode (``HF_HUB_OFFLINE=1``, read at
call time) serves a revision from the cache only and fails clearly when it is not there.

Notebooks start from a download by parameter: :func:`resolve_ref` turns ``"hub:owner/name@rev"``
into a local folder and passes anything else through.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_REF = re.compile(r"^hub:(?:(model|dataset)s?:)?([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)@([\w./-]+)$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class DownloadError(RuntimeError):
    """A revision could not be fetched (unknown repo or revision, offline without a cached copy)."""


@dataclass
class DownloadResult:
    """A downloaded snapshot: local folder, what was asked and the commit it resolved to."""

    path: Path
    repo_id: str
    repo_type: str
    revision: str
    commit: str
    files: list[str]


def offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set to a true value now (not only at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def download(repo_id: str, *, revision: str, repo_type: str = "model", cache_dir: str | Path | None = None,
             allow_patterns: list[str] | None = None, token: str | None = None) -> DownloadResult:
    """Fetch ``repo_id`` at ``revision`` (tag, branch or 40-hex commit) into the standard cache.

    Args:
        revision: required: results are reproducible only against a fixed revision (use a tag or commit).
        repo_type: ``"model"`` (checkpoints) or ``"dataset"`` (datasets, results, cache snapshots).
        cache_dir: override the standard cache (tests).
        allow_patterns: globs of the files to fetch (default all).
        token: explicit token (default: the standard locations, read by ``huggingface_hub``).

    Raises:
        ValueError: empty revision or unknown repo type.
        DownloadError: the repo or revision does not exist, or offline mode without a cached copy.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if not revision:
        raise ValueError("revision is required (a tag, branch or commit sha)")
    if repo_type not in ("model", "dataset"):
        raise ValueError(f"repo_type must be 'model' or 'dataset', got {repo_type!r}")
    try:
        path = Path(snapshot_download(repo_id, repo_type=repo_type, revision=revision, cache_dir=cache_dir,
                                      allow_patterns=allow_patterns, token=token, local_files_only=offline()))
    except LocalEntryNotFoundError as e:
        raise DownloadError(f"{repo_type} {repo_id}@{revision} is not in the local cache and "
                            f"{'HF_HUB_OFFLINE is set' if offline() else 'the Hub is unreachable'}: {e}") from e
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:
        raise DownloadError(f"{repo_type} {repo_id}@{revision}: {type(e).__name__}") from e
    except HfHubHTTPError as e:
        raise DownloadError(f"{repo_type} {repo_id}@{revision}: HTTP {e.response.status_code if e.response is not None else '?'}") from e
    # snapshot folders are named by the commit sha (the cache's own layout)
    commit = path.name if _COMMIT.match(path.name) else revision
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    return DownloadResult(path, repo_id, repo_type, revision, commit, files)


def resolve_ref(ref: str, *, repo_type: str = "model", **kw) -> str:
    """A notebook parameter to a local path: ``"hub:owner/name@rev"`` (or ``"hub:dataset:owner/name@rev"``)
    is downloaded and its folder returned; any other string (local path, served model name) is returned as is.

    Raises:
        ValueError: a ``hub:`` reference without ``@revision``.
        DownloadError: as :func:`download`.
    """
    if not ref.startswith("hub:"):
        return ref
    m = _REF.match(ref)
    if not m:
        raise ValueError(f"bad hub reference {ref!r}: expected hub:[model:|dataset:]owner/name@revision")
    return str(download(m.group(2), revision=m.group(3), repo_type=m.group(1) or repo_type, **kw).path)
