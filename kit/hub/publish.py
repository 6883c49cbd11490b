"""Publish a run to the Hugging Face Hub: evaluation results, the tool-response cache snapshot,
produced datasets (with their images) and checkpoints (LoRA adapters and merged models), each with
its card and a revision tag.

Publishing is two steps. :func:`plan_run` builds a :class:`PublishPlan` — every repository, every
file with its path in the repository, size and sha256, and the rendered card — and
:meth:`PublishPlan.listing` shows exactly what would be uploaded (the dry run). :func:`publish`
uploads a plan: one commit per repository (``create_commit``), then a tag on that commit, so a
published revision never moves.

Tokens come from the standard Hugging Face locations (``HF_TOKEN``, the token file written by
``hf auth login``) through ``huggingface_hub`` itself; the kit never reads them into outputs, and a
plan refuses to upload any file that contains the current token.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit.hub import cards
from kit.paths import file_sha256

# never published from a results folder: caches go in their own repo, the rest is transient
EXCLUDE_NAMES = {".ipynb_checkpoints", "__pycache__", ".DS_Store", ".git"}
EXCLUDE_SUFFIXES = (".tmp", ".lock", ".sqlite-wal", ".sqlite-shm", ".sqlite-journal")
CACHE_FILE = "cache.sqlite"
TOKEN_SCAN_LIMIT = 256 * 1024 * 1024  # bytes: larger files (weights) are not scanned for the token
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


class PublishError(ValueError):
    """A run cannot be published as asked (bad repo id or tag, nothing to publish, a file holding
    the token, a tag that already exists)."""


@dataclass
class PlannedFile:
    """One file to upload: local path, path in the repository, size (bytes), sha256."""

    local: str
    path_in_repo: str
    size: int
    sha256: str


@dataclass
class RepoUpload:
    """One repository's commit: kind is ``results`` | ``cache`` | ``dataset`` | ``lora`` | ``merged``."""

    repo_id: str
    repo_type: str
    kind: str
    tag: str
    files: list[PlannedFile] = field(default_factory=list)
    card: str = ""
    private: bool = False
    commit_message: str = ""

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files) + len(self.card.encode())


@dataclass
class PublishPlan:
    """Everything a publish would upload."""

    run: str
    uploads: list[RepoUpload] = field(default_factory=list)
    staging: str | None = None  # folder holding generated files (the cache snapshot copy)

    def discard(self) -> None:
        """Remove the generated files (the cache snapshot copy); call when done with the plan."""
        if self.staging:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None

    def listing(self) -> str:
        """Human-readable dry-run listing: per repository the tag, the card and every file with size and sha256."""
        lines = [f"publish plan for run {self.run!r}: {len(self.uploads)} repositor{'y' if len(self.uploads) == 1 else 'ies'}"]
        for u in self.uploads:
            lines.append(f"\n{u.repo_type} {u.repo_id}  [{u.kind}]  tag {u.tag}  {'private' if u.private else 'public'}  "
                         f"{len(u.files) + 1} files, {u.size / 1e6:.2f} MB")
            lines.append(f"  README.md  {len(u.card.encode())} B  (card)")
            for f in u.files:
                lines.append(f"  {f.path_in_repo}  {f.size} B  sha256:{f.sha256[:16]}  ← {f.local}")
        return "\n".join(lines)

    def to_json(self) -> str:
        """The plan as JSON (cards included)."""
        return json.dumps(asdict(self), indent=2)


def _check_repo(repo_id: str) -> str:
    if not _REPO.match(repo_id or ""):
        raise PublishError(f"bad repository id {repo_id!r}: expected 'owner/name'")
    return repo_id


def _files(folder: Path, prefix: str = "", *, exclude: tuple[str, ...] = ()) -> list[PlannedFile]:
    out = []
    for f in sorted(folder.rglob("*")):
        rel = f.relative_to(folder)
        # hidden files (.env, .netrc, editor state) are never published
        if (not f.is_file() or f.is_symlink() or any(p in EXCLUDE_NAMES or p.startswith(".") for p in rel.parts)
                or f.name.endswith(EXCLUDE_SUFFIXES) or rel.as_posix() in exclude):
            continue
        out.append(PlannedFile(str(f), f"{prefix}{rel.as_posix()}", f.stat().st_size, file_sha256(f)))
    return out


def _inside(run_dir: Path, rel: str) -> Path:
    """``run_dir / rel`` when it stays inside ``run_dir``; a published folder is always part of the run."""
    if Path(rel).is_absolute():
        raise PublishError(f"folder {rel!r} must be relative to the run folder {run_dir}")
    folder = (run_dir / rel).resolve()
    if not folder.is_relative_to(run_dir.resolve()):
        raise PublishError(f"folder {rel!r} is outside the run folder {run_dir}")
    return folder


def _manifest(run_dir: Path) -> dict[str, Any]:
    p = run_dir / "manifest.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}


def _find_eval_dir(run_dir: Path) -> Path | None:
    """The evaluation folder of a run: ``run_dir`` itself or its ``06_evaluation`` notebook folder."""
    for d in (run_dir, run_dir / "06_evaluation"):
        if (d / "predictions").is_dir():
            return d
    return None


def _plan_cache(plan: PublishPlan, src_dir: Path, cache_repo: str, manifest: dict[str, Any], *, tag: str,
                private: bool) -> None:
    """Stage a consistent snapshot of ``src_dir``'s tool cache and add its upload to ``plan``.

    Raises:
        PublishError: no cache file in ``src_dir`` or a bad repo id.
    """
    from kit.web.cache import ToolCache

    run = plan.run
    src = src_dir / CACHE_FILE
    if not src.is_file():
        raise PublishError(f"no tool-cache {src} to snapshot")
    plan.staging = tempfile.mkdtemp(prefix="kit_publish_")
    # a consistent copy through SQLite's backup API (the live file may have a WAL beside it)
    cache = ToolCache(src, mode="readwrite")
    try:
        snap = cache.snapshot(Path(plan.staging) / CACHE_FILE)
    finally:
        cache.close()
    sha = file_sha256(snap)
    card = cards.cache_card(snap, sha, _manifest(src_dir) or manifest, repo_id=cache_repo, tag=tag, run=run)
    plan.uploads.append(RepoUpload(_check_repo(cache_repo), "dataset", "cache", tag,
                                   [PlannedFile(str(snap), CACHE_FILE, snap.stat().st_size, sha)], card, private,
                                   f"Tool-response cache snapshot of run {run} ({tag})"))


def plan_run(run_dir: str | Path, *, tag: str, results_repo: str | None = None, cache_repo: str | None = None,
             dataset_repos: dict[str, str] | None = None, checkpoint_repos: dict[str, str] | None = None,
             private: bool = False) -> PublishPlan:
    """Plan the upload of a results folder.

    Args:
        run_dir: ``results/<notebook>`` or a sequence's ``results/<run>``.
        tag: revision tag created on every repository (``v0.1``, ``smoke-2026-11-30``).
        results_repo: dataset repo for the evaluation results (predictions, tables, figures,
            episodes of public benchmarks, manifest, executed notebook); the cache is left out.
        cache_repo: dataset repo for a consistent copy of the evaluation's ``cache.sqlite``.
        dataset_repos: ``{folder relative to run_dir: repo}`` for produced datasets (all files, images included).
        checkpoint_repos: ``{folder relative to run_dir: repo}`` for LoRA adapters or merged models.

    Raises:
        FileNotFoundError: ``run_dir`` or a named folder does not exist.
        PublishError: bad repo id or tag, nothing to publish, no evaluation / cache where one is asked
            for, or a file containing the current Hugging Face token.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"results folder {run_dir} does not exist")
    if not _TAG.match(tag or ""):
        raise PublishError(f"bad tag {tag!r}: letters, digits, '.', '_' and '-' only")
    dataset_repos, checkpoint_repos = dataset_repos or {}, checkpoint_repos or {}
    if not (results_repo or cache_repo or dataset_repos or checkpoint_repos):
        raise PublishError("nothing to publish: name at least one of results_repo, cache_repo, a dataset or a checkpoint")
    run = run_dir.resolve().name
    manifest = _manifest(run_dir)
    plan = PublishPlan(run=run)
    eval_dir = _find_eval_dir(run_dir)

    if results_repo:
        if eval_dir is None:
            raise PublishError(f"{run_dir} holds no evaluation (no predictions/ folder)")
        files = _files(eval_dir, exclude=(CACHE_FILE,))
        summary = (eval_dir / "summary.md").read_text(encoding="utf-8") if (eval_dir / "summary.md").is_file() else ""
        n_items = sum(1 for f in (eval_dir / "predictions").glob("*.jsonl") for _ in f.open(encoding="utf-8"))
        card = cards.evaluation_card(_manifest(eval_dir) or manifest, summary, repo_id=results_repo, tag=tag,
                                     cache_repo=cache_repo, n_items=n_items)
        plan.uploads.append(RepoUpload(_check_repo(results_repo), "dataset", "results", tag, files, card, private,
                                       f"Evaluation results of run {run} ({tag})"))
    try:  # whatever fails after the cache snapshot was staged must not leave it behind
        if cache_repo:
            _plan_cache(plan, eval_dir or run_dir, cache_repo, manifest, tag=tag, private=private)
        kind = cards.smoke_kind(manifest)  # datasets: any smoke-profile run; checkpoints: a tiny model's only
        for rel, repo in dataset_repos.items():
            folder = _inside(run_dir, rel)
            if not folder.is_dir():
                raise FileNotFoundError(f"dataset folder {folder} does not exist")
            files = _files(folder)
            if not files:
                raise PublishError(f"dataset folder {folder} is empty")
            card = cards.dataset_card(folder, _manifest(folder) or manifest, repo_id=repo, tag=tag, run=run,
                                      smoke=kind is not None)
            plan.uploads.append(RepoUpload(_check_repo(repo), "dataset", "dataset", tag, files, card, private,
                                           f"Dataset {rel} of run {run} ({tag})"))
        for rel, repo in checkpoint_repos.items():
            folder = _inside(run_dir, rel)
            if not folder.is_dir():
                raise FileNotFoundError(f"checkpoint folder {folder} does not exist")
            info = cards.checkpoint_info(folder)
            card = cards.checkpoint_card(folder, _manifest(folder) or manifest, repo_id=repo, tag=tag, run=run,
                                         smoke=kind == "smoke")
            plan.uploads.append(RepoUpload(_check_repo(repo), "model", "lora" if info["adapter"] else "merged", tag,
                                           _files(folder, exclude=("README.md",)), card, private,
                                           f"{'LoRA adapter' if info['adapter'] else 'Merged checkpoint'} {rel} of run {run} ({tag})"))
        check_no_token(plan)
    except BaseException:
        plan.discard()
        raise
    return plan


def check_no_token(plan: PublishPlan, token: str | None = None) -> None:
    """Refuse a plan in which any card or file (up to :data:`TOKEN_SCAN_LIMIT` bytes) holds the token.

    ``token`` defaults to the one ``huggingface_hub`` would send (standard locations).

    Raises:
        PublishError: the token was found; the message names the file, never the token.
    """
    if token is None:
        from huggingface_hub import get_token

        token = get_token()
    if not token or len(token) < 8:
        return
    needle = token.encode()
    for u in plan.uploads:
        if needle in u.card.encode():
            raise PublishError(f"the card of {u.repo_id} contains the Hugging Face token: refusing to publish")
        for f in u.files:
            if f.size <= TOKEN_SCAN_LIMIT and needle in Path(f.local).read_bytes():
                raise PublishError(f"{f.local} contains the Hugging Face token: refusing to publish it")


def publish(plan: PublishPlan, *, api=None, token: str | None = None) -> list[dict[str, Any]]:
    """Upload a plan: per repository create it if needed, one commit with every file and the card,
    then the tag on that commit.

    Args:
        api: a ``huggingface_hub.HfApi`` (default: one using the standard token locations).
        token: explicit token (default: ``huggingface_hub``'s lookup); never stored.

    Returns:
        ``[{"repo_id", "repo_type", "kind", "commit", "tag", "files"}]`` per repository.

    Raises:
        PublishError: a file changed since planning (sha256 differs), or the tag already exists.
        huggingface_hub.errors.HfHubHTTPError: the Hub refused a request (auth, permissions).
    """
    from huggingface_hub import CommitOperationAdd, HfApi

    api = api or HfApi(token=token)
    out = []
    for u in plan.uploads:
        for f in u.files:
            if file_sha256(f.local) != f.sha256:
                raise PublishError(f"{f.local} changed since the plan was made: plan again")
        api.create_repo(u.repo_id, repo_type=u.repo_type, private=u.private, exist_ok=True)
        refs = api.list_repo_refs(u.repo_id, repo_type=u.repo_type)
        if any(t.name == u.tag for t in refs.tags):
            raise PublishError(f"{u.repo_id} already has tag {u.tag!r}: published revisions never move; choose a new tag")
        ops = [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=u.card.encode())]
        ops += [CommitOperationAdd(path_in_repo=f.path_in_repo, path_or_fileobj=f.local) for f in u.files]
        info = api.create_commit(u.repo_id, ops, commit_message=u.commit_message or f"publish {plan.run}",
                                 repo_type=u.repo_type)
        api.create_tag(u.repo_id, tag=u.tag, revision=info.oid, repo_type=u.repo_type,
                       tag_message=f"{u.kind} of run {plan.run}")
        out.append({"repo_id": u.repo_id, "repo_type": u.repo_type, "kind": u.kind, "commit": info.oid, "tag": u.tag,
                    "files": len(u.files) + 1})
    return out


def plan_digest(plan: PublishPlan) -> str:
    """sha256 over (repo, path, sha256) of every planned file: identical plans have identical digests."""
    h = hashlib.sha256()
    for u in plan.uploads:
        for f in u.files:
            h.update(f"{u.repo_type}:{u.repo_id}:{f.path_in_repo}:{f.sha256}\n".encode())
    return h.hexdigest()
