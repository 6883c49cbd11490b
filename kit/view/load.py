"""Read a run folder for the viewer: every ``episodes.jsonl`` under it, joined with the evaluation's
per-item predictions (``predictions/*.jsonl``, :class:`kit.eval.metrics.ItemResult`) when the run is an
evaluation (docs/viewer.md).

A run folder is any folder holding one or more ``episodes.jsonl`` files (``kit.harness.runner.run_batch``
writes one per run; an evaluation writes ``runs/<benchmark>/<config>/r<k>/episodes.jsonl``). Nothing is
dropped silently: a line that is not JSON or not an :class:`~kit.harness.episode.EpisodeRecord` becomes a
:class:`Skipped` entry with its file, line number and reason, and a prediction without its episode record
(a sensitive benchmark's episodes live in a private folder, kit.eval.runner) stays an item without a page.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from kit.eval.metrics import ItemResult
from kit.harness.episode import EpisodeRecord
from kit.harness.errors import ImageError
from kit.harness.portable import WorkspacePathError, resolve_workspace
from kit.images import MAX_FILE_BYTES, read_regular_file
from kit.view.verdict import Verdict, verdict_of

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a registered image file name (kit.harness.registry)
_EVAL_RUN = re.compile(r"(?:^|/)runs/(?P<bench>[^/]+)/(?P<config>[^/]+)/r(?P<repeat>\d+)$")


class ViewError(Exception):
    """A run folder the viewer cannot read at all (missing, not a folder, no ``episodes.jsonl``)."""


@dataclass
class Skipped:
    """A line (or file) the viewer could not read: ``file`` relative to the run folder, 1-based ``line``
    (0 for the whole file) and the reason."""

    file: str
    line: int
    reason: str


@dataclass
class Item:
    """One episode of a run (or one prediction whose record was not kept), with what the index shows.

    ``key`` identifies the item across runs: (benchmark, configuration, episode id, repeat); the episode
    id is the task id in an evaluation and ``<task id>#<k>`` for the k-th rollout of a group. ``record`` is
    None for a prediction without an episode record; ``prediction`` None outside an evaluation.
    """

    run: str  # the run's label (its folder name, made unique by the caller)
    source: str  # episodes.jsonl's folder relative to the run folder ("." for the folder itself)
    benchmark: str
    configuration: str
    repeat: int
    task_id: str
    episode_id: str
    record: EpisodeRecord | None
    prediction: ItemResult | None = None
    episode_dir: Path | None = None  # the folder of the episodes.jsonl (workspaces are found from it)
    run_root: Path | None = None  # the run folder: no workspace file outside it is read
    page: str = ""  # relative path of the episode page in the site, set by the builder

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.benchmark, self.configuration, self.episode_id, self.repeat)

    @property
    def status(self) -> str:
        if self.record is not None:
            return self.record.status
        return self.prediction.status if self.prediction else "unknown"

    @property
    def verdict(self) -> Verdict:
        """The item's verdict as the run's summary counts it (:mod:`kit.view.verdict`)."""
        return verdict_of(self)

    @property
    def correct(self) -> bool | None:
        """The judged correctness, else the rule answer match of notebook 01's summary, else None."""
        return self.verdict.correct

    @property
    def match(self) -> bool | None:
        return self.prediction.match if self.prediction else None

    @property
    def event_types(self) -> list[str]:
        return sorted(self.record.event_counts()) if self.record else []


@dataclass
class Run:
    """Everything the viewer read from one run folder."""

    label: str
    root: Path
    items: list[Item] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # the episodes.jsonl files read, relative to root

    def configurations(self) -> list[str]:
        return sorted({i.configuration for i in self.items})


def _labels(rec: EpisodeRecord, prefix: str) -> str | None:
    for lab in rec.labels:
        if lab.startswith(prefix):
            return lab[len(prefix):]
    return None


def _read_predictions(root: Path, prefix: str, skipped: list[Skipped]) -> dict[tuple[str, str, str, int, str], ItemResult]:
    """Prediction lines of the evaluation folder ``root/prefix``, keyed by (prefix, benchmark, config,
    repeat, episode id)."""
    out: dict[tuple[str, str, str, int, str], ItemResult] = {}
    real_root = root.resolve()
    for f in sorted((root / prefix / "predictions").glob("*.jsonl")):
        rel = f.relative_to(root).as_posix()
        if not _resolves_inside(f, real_root):  # a planted symlink must not make the viewer read elsewhere
            skipped.append(Skipped(rel, 0, OUTSIDE_SYMLINK))
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                it = ItemResult.model_validate_json(line)
            except ValidationError as e:
                skipped.append(Skipped(rel, n, f"not a prediction line: {_short(e)}"))
                continue
            out[(prefix, it.benchmark, it.config, it.repeat, it.episode_id)] = it
    return out


def _short(e: Exception) -> str:
    if isinstance(e, ValidationError):
        errs = e.errors()
        if not errs:
            return str(e)
        first = errs[0]
        where = ".".join(str(x) for x in first["loc"]) or "record"
        more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
        return f"{first['type']} at {where}: {first['msg']}{more}"
    return str(e)


OUTSIDE_RUN = "image not available (outside the run)"  # a path refused: it resolves outside the run folder
# the run folder lacks it (a clone: results/**/workspaces/ are gitignored); the site may still hold the image
NOT_IN_COPY = "image not in this copy of the run (workspaces/ are not committed)"
OUTSIDE_SYMLINK = "outside the run (symlink)"


def _inside(path: Path, root: Path) -> bool:
    """``path`` (already resolved) is ``root`` (resolved) or below it."""
    return path == root or root in path.parents


def _resolves_inside(path: Path, real_root: Path) -> bool:
    """``path`` with every symlink followed lies inside ``real_root`` (False for a loop or an error)."""
    try:
        return _inside(path.resolve(strict=True), real_root)
    except (OSError, RuntimeError, ValueError):
        return False


def _episode_files(root: Path, skipped: list[Skipped]) -> list[Path]:
    """Every ``episodes.jsonl`` under ``root`` (sorted) that resolves inside it. A file or folder that is a
    symlink resolving outside the run is listed in ``skipped`` (:data:`OUTSIDE_SYMLINK`), never read; a
    symlinked folder resolving inside is not walked (its files are read at their real place)."""
    real_root = root.resolve()
    found: list[Path] = []
    def unreadable(e: OSError) -> None:  # a folder without permission: listed, not silently left out
        where = os.path.relpath(e.filename, root) if e.filename else "."
        skipped.append(Skipped(where, 0, f"folder not readable: {e.strerror or e}"))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable, followlinks=False):
        here = Path(dirpath)
        dirnames.sort()
        for d in dirnames:
            sub = here / d
            if sub.is_symlink() and not _resolves_inside(sub, real_root):
                skipped.append(Skipped(sub.relative_to(root).as_posix(), 0, f"{OUTSIDE_SYMLINK}: folder not read"))
        if "episodes.jsonl" in filenames:
            f = here / "episodes.jsonl"
            if not _resolves_inside(f, real_root):
                skipped.append(Skipped(f.relative_to(root).as_posix(), 0, OUTSIDE_SYMLINK))
            elif f.is_file():
                found.append(f)
    return sorted(found)


def find_workspace(it: Item) -> tuple[Path | None, str]:
    """The episode's workspace, resolved (symlinks followed), and why there is none.

    Only a folder that resolves inside the run folder (``it.run_root``) is used: the recorded path
    (relative ones from the episodes.jsonl's folder), else ``workspaces/<name>`` beside the
    episodes.jsonl (a results folder copied to another machine keeps its workspaces, not their absolute
    paths). Returns ``(folder, "")`` or ``(None, reason)``: :data:`OUTSIDE_RUN` when a candidate inside the
    run (by its path) resolves outside it, a symlink (an ``episodes.jsonl`` line must never make the viewer
    read ``/etc``); else :data:`NOT_IN_COPY` (no candidate inside the run exists: a clone lacks the
    gitignored ``workspaces/``; a recorded path of another checkout that exists is not read and named).
    """
    rec = it.record
    if rec is None or not rec.workspace:
        return None, "no workspace recorded"
    ws = Path(rec.workspace)
    cands = [ws] if ws.is_absolute() else []
    if it.episode_dir is not None:
        try:  # the readers' shared resolution (kit.harness.portable): refuses ../../ out of the run
            cands = [Path(resolve_workspace(rec.workspace, it.episode_dir) or rec.workspace)]
        except WorkspacePathError as e:
            return None, f"workspace refused: {e}"
        cands.append(it.episode_dir / "workspaces" / ws.name)
    base = it.run_root or it.episode_dir
    if base is None:  # an item built by hand, not by load_run: nothing to check against
        return None, "workspace not found (run folder unknown)"
    root = base.resolve()
    outside = elsewhere = False
    for cand in cands:
        try:
            if not cand.is_dir():
                continue
            real = cand.resolve(strict=True)
        except (OSError, RuntimeError):  # a symlink loop, a permission error
            continue
        if _inside(real, root):
            return real, ""
        # by its own path outside the run: a recorded absolute path of another copy, not a planted link
        if _inside(Path(os.path.abspath(cand)), Path(os.path.abspath(base))):
            outside = True
        else:
            elsewhere = True
    if outside:
        return None, OUTSIDE_RUN
    return None, f"{NOT_IN_COPY}; the recorded workspace outside the run is not read" if elsewhere else NOT_IN_COPY


def workspace_of(it: Item) -> Path | None:
    """:func:`find_workspace`'s folder (None when there is none inside the run)."""
    return find_workspace(it)[0]


def read_workspace_image(it: Item, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of image file ``name`` of the episode's workspace (:func:`find_workspace`).

    Raises:
        ImageError: ``bad_image`` with the reason: no workspace inside the run, a name that is not a
            plain file name, a file that resolves outside the run, a symlink or not a regular file
            (:func:`kit.images.read_regular_file`); ``image_too_large`` over ``max_bytes``.
    """
    if not _SAFE_NAME.match(name):
        raise ImageError("bad_image", "not a workspace file name")
    ws, why = find_workspace(it)
    if ws is None:
        raise ImageError("bad_image", why)
    path = ws / name
    root = (it.run_root or it.episode_dir or ws).resolve()  # find_workspace needed one of the first two
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as e:
        raise ImageError("bad_image", f"cannot resolve {name!r}: {e}") from e
    if not _inside(real, root):
        raise ImageError("bad_image", OUTSIDE_RUN)
    return read_regular_file(path, max_bytes=max_bytes)  # O_NOFOLLOW: a symlinked file is refused


def unique_labels(dirs: list[Path]) -> list[str]:
    """Run labels: each folder's name, made unique with `` (2)``, `` (3)``."""
    labels: list[str] = []
    for d in dirs:
        base = d.resolve().name or "run"
        lab, n = base, 2
        while lab in labels:
            lab, n = f"{base} ({n})", n + 1
        labels.append(lab)
    return labels


def load_run(root: str | Path, label: str | None = None) -> Run:
    """Read every ``episodes.jsonl`` under ``root`` (recursively, sorted) and its evaluation's predictions.

    Benchmark / configuration / repeat of an episode come from its prediction line, else the evaluation
    layout of its folder (``runs/<benchmark>/<config>/r<k>``), else its labels (``config:<name>``,
    ``repeat:<k>``) and ``task.source``; outside an evaluation the configuration is the episodes file's
    folder relative to ``root`` (e.g. ``demonstrator`` and ``model`` in notebook 01's run).

    Raises:
        ViewError: ``root`` is missing or not a folder, or holds no ``episodes.jsonl`` and no predictions.
    """
    root = Path(root)
    if not root.exists():
        raise ViewError(f"run folder {str(root)!r} does not exist")
    if not root.is_dir():
        raise ViewError(f"run folder {str(root)!r} is not a folder")
    run = Run(label=label or root.resolve().name, root=root)
    files = _episode_files(root, run.skipped)
    layout = {f: _EVAL_RUN.search(f.parent.relative_to(root).as_posix()) for f in files}
    # every evaluation folder in the run (root itself, or e.g. 06_evaluation/ when root is results/smoke)
    prefixes = dict.fromkeys(["."] + [f.parent.relative_to(root).as_posix()[: m.start()] or "." for f, m in layout.items() if m])
    preds: dict[tuple[str, str, str, int, str], ItemResult] = {}
    for prefix in prefixes:
        preds.update(_read_predictions(root, prefix, run.skipped))
    if not files and not preds:
        raise ViewError(f"no episodes.jsonl under {str(root)!r} (a run folder holds one per run: "
                        f"kit.harness.runner.run_batch, or runs/<benchmark>/<config>/r<k>/ of an evaluation)")
    used: set[tuple[str, str, str, int, str]] = set()
    for f in files:
        rel_dir = f.parent.relative_to(root).as_posix()
        rel = f.relative_to(root).as_posix()
        run.files.append(rel)
        m = layout[f]
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = EpisodeRecord.model_validate(json.loads(line))
            except json.JSONDecodeError as e:
                run.skipped.append(Skipped(rel, n, f"not JSON: {e.msg} at column {e.colno}"))
                continue
            except RecursionError:
                run.skipped.append(Skipped(rel, n, "not JSON: nested too deeply to read"))
                continue
            except ValidationError as e:
                run.skipped.append(Skipped(rel, n, f"not an episode record: {_short(e)}"))
                continue
            except ValueError as e:  # e.g. an integer over Python's 4300-digit conversion limit
                run.skipped.append(Skipped(rel, n, f"not JSON: {e}"[:300]))
                continue
            bench = m["bench"] if m else None
            config = m["config"] if m else _labels(rec, "config:")
            rep_s = m["repeat"] if m else _labels(rec, "repeat:")
            repeat = int(rep_s) if rep_s and rep_s.isdigit() else 0
            pred = None
            if m and bench and config is not None:
                key = (rel_dir[: m.start()] or ".", bench, config, repeat, rec.id)
                pred = preds.get(key)
                if pred is not None:
                    used.add(key)
            run.items.append(Item(run=run.label, source=rel_dir, benchmark=bench or rec.task.source or "",
                                  configuration=config if config is not None else rel_dir,
                                  repeat=repeat, task_id=rec.task.id, episode_id=rec.id, record=rec,
                                  prediction=pred, episode_dir=f.parent, run_root=root))
    for k, pred in preds.items():
        if k not in used:  # kept visible: a sensitive benchmark's records are private (kit.eval.runner)
            run.items.append(Item(run=run.label, source=f"{k[0]}/predictions".removeprefix("./"),
                                  benchmark=pred.benchmark, configuration=pred.config, repeat=pred.repeat,
                                  task_id=pred.task_id, episode_id=pred.episode_id, record=None, prediction=pred))
    return run


__all__ = ["NOT_IN_COPY", "OUTSIDE_RUN", "OUTSIDE_SYMLINK",
           "Item", "Run", "Skipped", "ViewError", "find_workspace", "load_run", "read_workspace_image",
           "unique_labels", "workspace_of"]
