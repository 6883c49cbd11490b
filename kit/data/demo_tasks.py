"""Demo tasks the local web can answer (issue 29 part 1): notebook 01's default tasks.

``demo_tasks.json`` (next to this module) holds ten curated questions whose answer and a supporting
image are in the default archives: the two Ray Charles archives and the 100-article mini Wikipedia
(``wikipedia_en_ray_charles_2015-06``, ``wikipedia_en_ray_charles_maxi_2023-09``,
``wikipedia_en_100_mini_2022-10``; shared data, ``zim/``). Each row names:

* ``question`` and ``answers`` (the reference first, then accepted alternatives; judged by
  :class:`kit.eval.judges.RuleJudge`, mode ``contains``);
* ``page``: the page that answers it (``archive`` stem + entry ``path``) and ``evidence``, a phrase of
  that page stating the answer; a two-hop task also names the ``via`` page that leads there;
* ``image``: an image of the archives (``archive``, entry ``path`` and the ``page`` showing it). With
  ``input_image`` true the question is visual and the image is the user's input, read from the archive
  at load time (the file stores the archive path, never image bytes); otherwise it is the picture that
  supports the answer (one a cited answer can point to);
* ``query``: a search that finds the answering page once the image is identified (text questions:
  the question itself), ``hops``: pages needed (1, or 2 for the one task that needs two).

:func:`load_demo_tasks` returns them as :class:`kit.harness.episode.Task` objects. Every task is
checked against the archives with the kit's own local web in ``tests/test_demo_tasks.py`` (search
finds the page, the page states the answer, the image exists and reverse image search finds its page).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.harness.episode import Task

__all__ = ["DEMO_SOURCE", "DEMO_TASKS_PATH", "DemoTaskError", "demo_archives", "load_demo_tasks", "read_demo_rows"]

#: The curated task file (a JSON list, one object per task).
DEMO_TASKS_PATH = Path(__file__).with_name("demo_tasks.json")
#: ``Task.source`` of every demo task.
DEMO_SOURCE = "kit-demo-tasks"

_REQUIRED = ("id", "question", "answers", "page", "evidence", "image", "input_image", "hops")


class DemoTaskError(ValueError):
    """A malformed demo task file, or a task that cannot be loaded (its archive or image is missing)."""


def _check_ref(row_id: str, field: str, ref: Any, keys: Sequence[str]) -> None:
    if not isinstance(ref, dict) or not all(isinstance(ref.get(k), str) and ref[k] for k in keys):
        raise DemoTaskError(f"demo task {row_id!r}: {field} must be an object with {', '.join(keys)}")


def read_demo_rows(path: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """The rows of the task file (default :data:`DEMO_TASKS_PATH`), checked: every required field,
    non-empty answers, distinct ids, archive references with ``archive`` and ``path``.

    Raises:
        DemoTaskError: a malformed file or row (the message names the row and field).
    """
    p = Path(path) if path is not None else DEMO_TASKS_PATH
    try:
        rows = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DemoTaskError(f"cannot read demo tasks {p}: {e}") from e
    if not isinstance(rows, list):
        raise DemoTaskError(f"{p}: expected a JSON list of tasks")
    seen: set[str] = set()
    for row in rows:
        if not isinstance(row, dict):
            raise DemoTaskError(f"{p}: every task must be an object, got {row!r}")
        missing = [k for k in _REQUIRED if k not in row]
        rid = str(row.get("id"))
        if missing:
            raise DemoTaskError(f"demo task {rid!r}: missing {', '.join(missing)}")
        if rid in seen:
            raise DemoTaskError(f"demo task id {rid!r} appears twice")
        seen.add(rid)
        if not (isinstance(row["answers"], list) and row["answers"] and all(isinstance(a, str) and a.strip()
                                                                            for a in row["answers"])):
            raise DemoTaskError(f"demo task {rid!r}: answers must be a non-empty list of strings")
        _check_ref(rid, "page", row["page"], ("archive", "path"))
        _check_ref(rid, "image", row["image"], ("archive", "path", "page"))
        if "via" in row:
            _check_ref(rid, "via", row["via"], ("archive", "path"))
    return rows


def demo_archives(rows: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """The archive stems the demo tasks need (pages, ``via`` pages and images), sorted."""
    rows = read_demo_rows() if rows is None else rows
    return sorted({ref["archive"] for r in rows for ref in (r["page"], r["image"], r.get("via")) if ref})


def _archive_files(zim_paths: str | os.PathLike | Sequence[str | os.PathLike] | None) -> dict[str, Path]:
    from kit.web import local_zim_paths

    return {p.stem: p for p in local_zim_paths(zim_paths)}


def _read_image(zim: Path, entry_path: str) -> bytes:
    """The bytes of image ``entry_path`` in archive ``zim`` (redirects followed)."""
    import libzim.reader

    try:
        archive = libzim.reader.Archive(str(zim))
        entry = archive.get_entry_by_path(entry_path)
        for _ in range(16):
            if not entry.is_redirect:
                break
            entry = entry.get_redirect_entry()
        item = entry.get_item()
    except (KeyError, RuntimeError) as e:
        raise DemoTaskError(f"no image {entry_path!r} in {zim.name}: {e}") from e
    if not item.mimetype.startswith("image/"):
        raise DemoTaskError(f"{entry_path!r} in {zim.name} is {item.mimetype}, not an image")
    return bytes(item.content)


def load_demo_tasks(zim_paths: str | os.PathLike | Sequence[str | os.PathLike] | None = None, *,
                    limit: int | None = None, ids: Sequence[str] | None = None,
                    image_dir: str | os.PathLike | None = None,
                    path: str | os.PathLike | None = None) -> list[Task]:
    """The demo tasks as :class:`~kit.harness.episode.Task` objects, in file order.

    A visual task's input image is read from its archive now and written once (by content hash) under
    ``image_dir`` (default: the kit cache, ``<cache>/demo_task_images``); ``Task.input_images`` holds that
    file. ``Task.answers``: the reference answers. ``Task.metadata``: ``page`` / ``image`` / ``via`` (each
    with ``archive``, ``path`` and its ``zim://`` ``url``), ``archive`` and ``page_path`` (the answering
    page), ``image_path`` (the image's entry path), ``input_image``, ``evidence``, ``query``, ``hops``,
    ``category`` (``"visual"`` or ``"text"``) and ``rule_mode`` (``"contains"``).

    Args:
        zim_paths: the run's archives (as :func:`kit.web.local_zim_paths` takes them); None: every archive
            of the shared data folder. Each archive a task names must be among them.
        limit: the first ``limit`` tasks (None: all).
        ids: only these task ids (in file order).
        image_dir: where input images are written.
        path: another task file in the same format (default :data:`DEMO_TASKS_PATH`).

    Raises:
        DemoTaskError: a malformed task file, an unknown id, an archive a task needs that is not among
            ``zim_paths`` (the message names it), or an input image missing from its archive.
        FileNotFoundError: ``zim_paths`` is None and there is no shared data folder or downloaded archive.
    """
    from kit.eval.loaders.common import BenchmarkError, save_image_bytes
    from kit.paths import cache_dir
    from kit.web.urls import zim_url

    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise DemoTaskError(f"limit must be None or an integer >= 0, got {limit!r}")
    rows = read_demo_rows(path)
    if ids is not None:
        unknown = sorted(set(ids) - {r["id"] for r in rows})
        if unknown:
            raise DemoTaskError(f"unknown demo task ids {unknown}; have {[r['id'] for r in rows]}")
        rows = [r for r in rows if r["id"] in set(ids)]
    rows = rows[:limit] if limit is not None else rows
    files = _archive_files(zim_paths)
    missing = [a for a in demo_archives(rows) if a not in files] if rows else []
    if missing:
        raise DemoTaskError(f"the demo tasks need the archives {missing}, not among {sorted(files)}: add them "
                            "to the ZIM paths (shared data zim/, or python -m kit.cli fetch-zim NAME)")
    out_dir = Path(image_dir) if image_dir is not None else cache_dir() / "demo_task_images"

    def ref(r: dict[str, Any]) -> dict[str, Any]:
        return {**r, "url": zim_url(r["archive"], r["path"])}

    tasks = []
    for r in rows:
        inputs = []
        if r["input_image"]:
            data = _read_image(files[r["image"]["archive"]], r["image"]["path"])
            try:
                inputs = [str(save_image_bytes(data, out_dir, r["id"]))]
            except BenchmarkError as e:
                raise DemoTaskError(f"demo task {r['id']!r}: {e}") from e
        md: dict[str, Any] = {
            "page": ref(r["page"]), "image": ref(r["image"]), "archive": r["page"]["archive"],
            "page_path": r["page"]["path"], "image_path": r["image"]["path"], "input_image": bool(r["input_image"]),
            "evidence": r["evidence"], "query": r.get("query") or r["question"], "hops": int(r["hops"]),
            "category": "visual" if r["input_image"] else "text", "rule_mode": "contains",
        }
        if r.get("via"):
            md["via"] = ref(r["via"])
        tasks.append(Task(id=r["id"], question=r["question"], input_images=inputs, answers=list(r["answers"]),
                          source=DEMO_SOURCE, metadata=md))
    return tasks
