"""VisTarget-style tasks (WeAgent §5) from a local JSONL file; the target image is held out (never
shown to the agent). Building such files: :mod:`kit.data.vistarget_build`.
"""

from __future__ import annotations

from pathlib import Path

from kit.eval.loaders.common import (
    BenchmarkError,
    LoadResult,
    _answers,
    _aslist,
    _file_info,
    check_limit,
    checked_image,
    json_line,
    row_id,
)
from kit.harness.episode import Task

__all__ = ["load_vistarget_jsonl"]


def load_vistarget_jsonl(path: str | Path, limit: int | None = None, *, strict: bool = False) -> LoadResult:
    """VisTarget-style tasks (WeAgent §5) from a JSONL file: one object per line with ``id``,
    ``question``, ``answers`` (list), ``target_image`` (held out: never shown to the agent) and
    optional ``input_images``; image paths are relative to the file's folder. Every image is decoded
    once here: a missing or undecodable one is the row's problem.

    Raises:
        BenchmarkError: unreadable file, or ``strict`` and a row is bad.
    """
    check_limit(limit)
    path = Path(path)
    if not path.is_file():
        raise BenchmarkError(f"{path} does not exist")
    res = LoadResult("vistarget", info={"files": [_file_info(path)], "format": "VisTarget JSONL"})
    base = path.parent
    for i, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json_line(line)
            target = (base / row["target_image"]).resolve()
            if not target.is_file():
                raise BenchmarkError(f"target image {row['target_image']!r} not found")
            target = checked_image(target).path  # decoded once: an undecodable image is this row's problem
            inputs = []
            for p in _aslist(row.get("input_images")):
                q = (base / p).resolve()
                if not q.is_file():
                    raise BenchmarkError(f"input image {p!r} not found")
                inputs.append(str(checked_image(q).path))
            answers = _answers(_aslist(row.get("answers")), [])
            if not isinstance(row.get("question"), str) or not row["question"].strip() or not answers:
                raise BenchmarkError("empty question or answers")
            res.add([Task(id=row_id(row, "id"), question=row["question"].strip(), input_images=inputs,
                                  answers=answers, target_image=str(target), source="vistarget",
                                  metadata={k: v for k, v in row.items()
                                            if k not in ("id", "question", "answers", "target_image", "input_images")})],
                    f"{path.name}:{i}")
        except (ValueError, KeyError, BenchmarkError, TypeError, AttributeError) as e:
            if strict:
                raise BenchmarkError(f"{path.name} line {i}: {e}") from e
            res.problem(f"{path.name}:{i}", f"{type(e).__name__}: {e}")
        if limit is not None and len(res.tasks) >= limit:
            break
    return res
