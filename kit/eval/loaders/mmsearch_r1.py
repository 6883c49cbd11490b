"""The MMSearch-R1 parquet schema (chat ``prompt``, image bytes, ``reward_model``): InfoSeek, and
FVQA's hub release. Reading parquet needs pyarrow (imported on use).
"""

from __future__ import annotations

import re as _re
from pathlib import Path
from typing import Any

from kit.eval.loaders.common import (
    BenchmarkError,
    LoadResult,
    _answers,
    _aslist,
    _file_info,
    check_limit,
    default_image_dir,
    image_to_bytes,
    row_id,
    save_image_bytes,
)
from kit.harness.episode import Task

__all__ = ["load_infoseek", "load_mmsearch_r1_parquet", "mmsearch_r1_task", "read_parquet_rows"]


def mmsearch_r1_task(row: dict[str, Any], index: int, *, prefix: str, image_dir: Path, source: str) -> Task:
    """One row of the MMSearch-R1 training/eval parquet schema (``prompt`` chat list, ``images``
    list of ``{"bytes": ...}``, ``reward_model`` with ``ground_truth`` and ``candidate_answers``
    as a list or JSON string, optional ``data_id`` / ``category``) -> :class:`Task`.

    Raises:
        BenchmarkError: no user question, no ground truth, or an undecodable image.
    """
    prompt = _aslist(row.get("prompt"))
    users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if isinstance(content, list):  # multimodal chat content: keep the text parts
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    question = _re.sub(r"<image>", "", str(content or "")).strip()
    if not question:
        raise BenchmarkError("no user question in prompt")
    rm = row.get("reward_model") or {}
    if not isinstance(rm, dict):
        raise BenchmarkError(f"reward_model is a {type(rm).__name__}, not an object")
    gt = rm.get("ground_truth")
    if isinstance(gt, dict):  # some releases nest {"target": [...]}
        gt = gt.get("target")
    if gt in (None, "", []):
        raise BenchmarkError("no reward_model.ground_truth")
    answers = _answers(_aslist(gt), _aslist(rm.get("candidate_answers")))
    images = []
    for im in _aslist(row.get("images")):
        data = image_to_bytes(im)
        if data is None:
            raise BenchmarkError("empty image cell")
        images.append(str(save_image_bytes(data, image_dir, prefix)))
    # rows of releases without ids (InfoSeek) are numbered; a data_id column with a null is a missing id
    tid = row_id(row, "data_id") if "data_id" in row else f"{prefix}_{index}"
    return Task(id=tid, question=question, input_images=images, answers=answers, source=source,
                metadata={"category": row.get("category"), "data_source": row.get("data_source"), "row": index})


def read_parquet_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a parquet file as Python dicts (pyarrow; installed with the ``train`` extra).

    Raises:
        BenchmarkError: pyarrow missing or the file is not readable parquet.
    """
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # the loader must say how to fix it, not fail obscurely
        raise BenchmarkError("reading parquet needs pyarrow: pip install 'mmsearch-kit[eval]'") from e
    try:
        return pq.read_table(str(path)).to_pylist()
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError subclasses for damaged files
        raise BenchmarkError(f"{path}: not readable parquet: {type(e).__name__}: {e}") from e


def load_mmsearch_r1_parquet(path: str | Path, limit: int | None = None, *, benchmark: str, prefix: str,
                             image_dir: str | Path | None = None, strict: bool = False) -> LoadResult:
    """Load a parquet file in the MMSearch-R1 schema (see :func:`mmsearch_r1_task`).

    Raises:
        BenchmarkError: unreadable file, or ``strict`` and a row is bad.
    """
    check_limit(limit)
    path = Path(path)
    img_dir = Path(image_dir) if image_dir else default_image_dir() / benchmark
    res = LoadResult(benchmark, info={"files": [_file_info(path)], "format": "MMSearch-R1 parquet"})
    for i, row in enumerate(read_parquet_rows(path)):
        try:
            res.add([mmsearch_r1_task(row, i, prefix=prefix, image_dir=img_dir, source=benchmark)], f"{path.name}:{i}")
        except (BenchmarkError, TypeError, AttributeError, ValueError) as e:
            if strict:
                raise BenchmarkError(f"{path.name} row {i}: {e}") from e
            res.problem(f"{path.name}:{i}", f"{type(e).__name__}: {e}",
                        row.get("data_id") if isinstance(row, dict) else None)
        if limit is not None and len(res.tasks) >= limit:
            break
    return res


def load_infoseek(path: str | Path, limit: int | None = None, *, image_dir: str | Path | None = None,
                  strict: bool = False) -> LoadResult:
    """InfoSeek in the MMSearch-R1 parquet form (e.g. ``infoseek_mini/mini_data.pq``). Rows carry
    no id: tasks are ``infoseek_<row>``."""
    return load_mmsearch_r1_parquet(path, limit, benchmark="infoseek", prefix="infoseek", image_dir=image_dir,
                                    strict=strict)
