"""Benchmark loaders into :class:`kit.harness.episode.Task`.

FVQA in the MMSearch-R1 evaluation format: one ``metadata/*.json`` per item (question,
``reward_model.ground_truth``, ``candidate_answers``, category) and its query image. The ``image``
field holds an absolute path from the machine that made the file, so the image is resolved by file
name in the sibling ``images/`` folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.harness.episode import Task


class BenchmarkError(ValueError):
    """A benchmark file or row that cannot be turned into a task (the message names the file)."""


def load_fvqa(root: str | Path, limit: int | None = None, *, strict: bool = False) -> tuple[list[Task], list[dict]]:
    """Load FVQA items in MMSearch-R1 format from ``root`` (with ``metadata/`` and ``images/``).

    Returns ``(tasks, problems)``: rows that cannot be loaded (bad JSON, missing question or image)
    are reported in ``problems`` as ``{"file": ..., "reason": ...}`` instead of being dropped silently.

    Raises:
        BenchmarkError: ``root`` has no ``metadata/`` folder, or ``strict`` and a row is bad.
    """
    root = Path(root)
    meta_dir, img_dir = root / "metadata", root / "images"
    if not meta_dir.is_dir():
        raise BenchmarkError(f"{root} has no metadata/ folder (expected the MMSearch-R1 FVQA layout)")
    tasks, problems = [], []
    for f in sorted(meta_dir.glob("*.json")):
        try:
            row = json.loads(f.read_text(encoding="utf-8"))
            q = row["question"]
            rm = row.get("reward_model") or {}
            gt = rm.get("ground_truth")
            if not isinstance(q, str) or not q.strip():
                raise BenchmarkError("empty question")
            if gt is None:
                raise BenchmarkError("no reward_model.ground_truth")
            answers = [gt] if isinstance(gt, str) else list(gt)
            answers += [a for a in rm.get("candidate_answers") or [] if a not in answers]
            name = Path(str(row.get("image", ""))).name
            img = img_dir / name
            if not name or not img.is_file():
                raise BenchmarkError(f"query image {name!r} not found in {img_dir}")
            tasks.append(Task(id=str(row.get("data_id") or f.stem), question=q.strip(), input_images=[str(img.resolve())],
                              answers=[str(a) for a in answers], source="fvqa_mmsearch_r1",
                              metadata={"category": row.get("category"), "file": f.name,
                                        "image_sha256": row.get("source_image_sha256")}))
        except (json.JSONDecodeError, KeyError, BenchmarkError, TypeError) as e:
            problem = {"file": f.name, "reason": f"{type(e).__name__}: {e}"}
            if strict:
                raise BenchmarkError(f"{f}: {problem['reason']}") from e
            problems.append(problem)
        if limit is not None and len(tasks) >= limit:
            break
    return tasks, problems
