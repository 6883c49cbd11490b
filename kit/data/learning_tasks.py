"""A learnable task set on the local web, split into train and held-out (issue 33 part 1).

``learning_tasks.json`` (next to this module) holds 60 tasks whose answers and supporting pages are in the
default archives (``wikipedia_en_ray_charles_2015-06``, ``wikipedia_en_ray_charles_maxi_2023-09``,
``wikipedia_en_100_mini_2022-10``; shared data, ``zim/``), sized so a tiny model can improve on them within
minutes of CPU (``benchmarks/bench_learning.py``). Three kinds:

* ``claim`` (25): a yes/no claim check in the form of :data:`kit.eval.vistarget.VERIFY_QUESTION` ("Is the picture
  with the caption ... shown on the Wikipedia page ...?"), scored with the ``exact`` rule. The claim pairs an
  image caption with its own page's title (``yes``) or another task's (``no``), as
  :func:`kit.eval.vistarget.verification_tasks` builds them; a binary answer gives a barely trained policy
  mixed group rewards, so these are the RL prompts of the learning benchmark.
* ``title`` (25): which page shows the picture with this caption (:data:`kit.eval.vistarget.QUESTION`), the
  page title as answer (``contains`` rule).
* ``demo`` (10): the first-run demo tasks (:mod:`kit.data.demo_tasks`), loaded through
  :func:`kit.data.demo_tasks.load_demo_tasks` (a visual one's input image is read from its archive).

Each row names its ``page`` (``archive`` stem + entry ``path``: the supporting page), ``evidence`` (a phrase of
that page: the caption, or the demo task's evidence sentence), ``image`` (the captioned picture's entry) and
``split`` (``train`` / ``heldout``; every fourth caption and demo task is held out, a claim check in the split
of the title question about the same picture). The caption tasks were drawn once from the archives with
:func:`kit.eval.vistarget.build_zim_vistarget` (seed queries as there, 20 hits per query) and frozen here, so
the task set does not change with the index. ``tests/test_learning_tasks.py`` checks every task against the
archives (the supporting page states the evidence and the answer; a claim's answer is ``yes`` exactly when the
claimed title is the page's title).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.harness.episode import Task

__all__ = ["KINDS", "LEARNING_SOURCE", "LEARNING_TASKS_PATH", "SPLITS", "LearningTaskError", "learning_archives",
           "load_learning_tasks", "read_learning_rows"]

#: The task file (a JSON list, one object per task).
LEARNING_TASKS_PATH = Path(__file__).with_name("learning_tasks.json")
#: ``Task.source`` of the claim and title tasks (demo tasks keep :data:`kit.data.demo_tasks.DEMO_SOURCE`).
LEARNING_SOURCE = "kit-learning-tasks"
KINDS = ("claim", "title", "demo")
SPLITS = ("train", "heldout")
_REQUIRED = ("id", "kind", "split", "question", "answers", "rule_mode", "page", "evidence", "image")


class LearningTaskError(ValueError):
    """A malformed task file, an unknown kind / split / id, or an archive a task needs that is missing."""


def read_learning_rows(path: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """The rows of the task file (default :data:`LEARNING_TASKS_PATH`), checked: required fields, known kind,
    split and rule mode, non-empty answers, distinct ids, ``page`` / ``image`` with ``archive`` and ``path``.

    Raises:
        LearningTaskError: a malformed file or row (the message names the row and field).
    """
    p = Path(path) if path is not None else LEARNING_TASKS_PATH
    try:
        rows = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise LearningTaskError(f"cannot read learning tasks {p}: {e}") from e
    if not isinstance(rows, list):
        raise LearningTaskError(f"{p}: expected a JSON list of tasks")
    seen: set[str] = set()
    for row in rows:
        if not isinstance(row, dict):
            raise LearningTaskError(f"{p}: every task must be an object, got {row!r}")
        rid = str(row.get("id"))
        missing = [k for k in _REQUIRED if k not in row]
        if missing:
            raise LearningTaskError(f"learning task {rid!r}: missing {', '.join(missing)}")
        if rid in seen:
            raise LearningTaskError(f"learning task id {rid!r} appears twice")
        seen.add(rid)
        if row["kind"] not in KINDS or row["split"] not in SPLITS or row["rule_mode"] not in ("exact", "contains"):
            raise LearningTaskError(f"learning task {rid!r}: kind must be one of {KINDS}, split one of {SPLITS}, "
                                    f"rule_mode exact or contains; got {row['kind']!r}, {row['split']!r}, "
                                    f"{row['rule_mode']!r}")
        if not (isinstance(row["answers"], list) and row["answers"]
                and all(isinstance(a, str) and a.strip() for a in row["answers"])):
            raise LearningTaskError(f"learning task {rid!r}: answers must be a non-empty list of strings")
        for field in ("page", "image"):
            ref = row[field]
            if not isinstance(ref, dict) or not all(isinstance(ref.get(k), str) and ref[k] for k in ("archive", "path")):
                raise LearningTaskError(f"learning task {rid!r}: {field} must be an object with archive, path")
    return rows


def learning_archives(rows: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """The archive stems the tasks' supporting pages and images live in, sorted."""
    rows = read_learning_rows() if rows is None else rows
    return sorted({r[f]["archive"] for r in rows for f in ("page", "image")})


def load_learning_tasks(split: str | None = None, *, kinds: Sequence[str] | None = None,
                        zim_paths: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
                        image_dir: str | os.PathLike | None = None,
                        path: str | os.PathLike | None = None) -> list[Task]:
    """The tasks of ``split`` (``"train"`` | ``"heldout"``; None: both) and ``kinds`` (None: all), in file order,
    as :class:`~kit.harness.episode.Task` objects. ``Task.metadata``: ``kind``, ``split``, ``rule_mode``,
    ``page`` (with its ``zim://`` ``url``), ``archive``, ``page_path``, ``evidence``, ``image`` and, for a
    claim, ``claimed_title`` / ``page_title``. Demo tasks come from :func:`kit.data.demo_tasks.load_demo_tasks`
    (``zim_paths`` and ``image_dir`` as there; their metadata gains ``kind`` and ``split``); claim and title tasks
    need no archive to load (they carry no input image).

    Raises:
        LearningTaskError: a malformed file, an unknown split or kind.
        kit.data.demo_tasks.DemoTaskError: a demo task's archive or input image is missing.
    """
    from kit.web.urls import zim_url

    if split is not None and split not in SPLITS:
        raise LearningTaskError(f"unknown split {split!r}; expected one of {SPLITS}")
    bad = sorted(set(kinds or ()) - set(KINDS))
    if bad:
        raise LearningTaskError(f"unknown kinds {bad}; expected some of {KINDS}")
    rows = [r for r in read_learning_rows(path)
            if (split is None or r["split"] == split) and (kinds is None or r["kind"] in kinds)]
    demo_ids = [r.get("demo_id", r["id"]) for r in rows if r["kind"] == "demo"]
    demos = {}
    if demo_ids:
        from kit.data.demo_tasks import load_demo_tasks

        demos = {t.id: t for t in load_demo_tasks(zim_paths, ids=demo_ids, image_dir=image_dir)}
    out = []
    for r in rows:
        extra = {"kind": r["kind"], "split": r["split"]}
        if r["kind"] == "demo":
            t = demos[r.get("demo_id", r["id"])]
            out.append(t.model_copy(update={"metadata": {**t.metadata, **extra}}))
            continue
        md = {**extra, "rule_mode": r["rule_mode"], "page": {**r["page"], "url": zim_url(r["page"]["archive"],
                                                                                          r["page"]["path"])},
              "archive": r["page"]["archive"], "page_path": r["page"]["path"], "evidence": r["evidence"],
              "image": dict(r["image"]), "page_title": r.get("page_title")}
        if r["kind"] == "claim":
            md["claimed_title"] = r.get("claimed_title")
        out.append(Task(id=r["id"], question=r["question"], answers=list(r["answers"]), source=LEARNING_SOURCE,
                        metadata=md))
    return out
