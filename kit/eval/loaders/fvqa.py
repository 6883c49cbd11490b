"""FVQA in the MMSearch-R1 evaluation format (local folders).

One ``metadata/*.json`` per item (question, ``reward_model.ground_truth``, ``candidate_answers``,
category) and its query image. The ``image`` field holds an absolute path from the machine that made
the file, so the image is resolved by file name in the sibling ``images/`` folder. (FVQA's hub
release uses the parquet schema: :mod:`kit.eval.loaders.mmsearch_r1`.)
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.eval.loaders.common import BenchmarkError, check_limit, checked_image, row_id
from kit.harness.episode import Task

__all__ = ["load_fvqa"]


def _answer_list(value, field: str) -> list[str]:
    """Reference answers as strings: a string or number, or a list of them.

    Raises:
        BenchmarkError: any other shape (objects, nested lists, booleans, null).
    """
    if isinstance(value, bool) or value is None:
        raise BenchmarkError(f"{field} must be a string, a number or a list of them, got {value!r}")
    if isinstance(value, (str, int, float)):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in value):
        raise BenchmarkError(f"{field} must be a string, a number or a list of them")
    return [str(a).strip() for a in value if str(a).strip()]


def load_fvqa(root: str | Path, limit: int | None = None, *, strict: bool = False) -> tuple[list[Task], list[dict]]:
    """Load FVQA items in MMSearch-R1 format from ``root`` (with ``metadata/`` and ``images/``).

    Returns ``(tasks, problems)``: rows that cannot be loaded (bad JSON, missing question, a missing
    or undecodable image: every query image is decoded once here) are reported in ``problems`` as
    ``{"file": ..., "reason": ...}`` instead of being dropped silently.

    Raises:
        BenchmarkError: ``root`` has no ``metadata/`` folder, or ``strict`` and a row is bad.
    """
    root = Path(root)
    meta_dir, img_dir = root / "metadata", root / "images"
    if not meta_dir.is_dir():
        raise BenchmarkError(f"{root} has no metadata/ folder (expected the MMSearch-R1 FVQA layout)")
    check_limit(limit)
    tasks: list[Task] = []
    problems: list[dict] = []
    seen: set[str] = set()
    for f in sorted(meta_dir.glob("*.json")):
        if limit is not None and len(tasks) >= limit:
            break
        try:
            row = json.loads(f.read_text(encoding="utf-8-sig"))  # utf-8-sig: a byte-order mark is not content
            if not isinstance(row, dict):
                raise BenchmarkError(f"row is a JSON {type(row).__name__}, not an object")
            q = row.get("question")
            rm = row.get("reward_model")
            if not isinstance(rm, dict):
                raise BenchmarkError("reward_model must be an object")
            if not isinstance(q, str) or not q.strip():
                raise BenchmarkError("missing or empty question")
            answers = _answer_list(rm.get("ground_truth"), "reward_model.ground_truth")
            if not answers:
                raise BenchmarkError("empty reward_model.ground_truth")
            extra = rm.get("candidate_answers")
            answers += [a for a in (_answer_list(extra, "candidate_answers") if extra is not None else [])
                        if a not in answers]
            name = Path(str(row.get("image", ""))).name
            img = img_dir / name
            if not name or not img.is_file():
                raise BenchmarkError(f"query image {name!r} not found in {img_dir}")
            used = checked_image(img)  # decoded once: an undecodable image is this row's problem
            tid = row_id(row, "data_id") if "data_id" in row else f.stem  # the file name only when there is no field
            if tid in seen:
                raise BenchmarkError(f"duplicate data_id {tid!r}")
            seen.add(tid)
            # image_sha256: the file used (the row's source_image_sha256 is of the picture it was made from)
            tasks.append(Task(id=tid, question=q.strip(), input_images=[str(used.path)], answers=answers,
                              source="fvqa_mmsearch_r1",
                              metadata={"category": row.get("category"), "file": f.name, "image_sha256": used.sha256,
                                        "source_image_sha256": row.get("source_image_sha256")}))
        except (ValueError, KeyError, TypeError, OSError, RecursionError) as e:  # JSON/Unicode errors are ValueErrors
            problem = {"file": f.name, "reason": f"{type(e).__name__}: {str(e)[:300]}"}
            if strict:
                raise BenchmarkError(f"{f}: {problem['reason']}") from e
            problems.append(problem)
    return tasks, problems
