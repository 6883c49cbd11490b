"""MM-BrowseComp in its published, encrypted JSONL format, decrypted in memory (the decrypted text
stays in the returned tasks only).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.eval.crypto import DecryptionError, decrypt_text
from kit.eval.loaders.common import (
    TEXT_ONLY_LABEL,
    BadImage,
    BenchmarkError,
    LoadResult,
    _aslist,
    _file_info,
    check_limit,
    check_missing_images,
    json_line,
    resolve_by_name,
    row_id,
    sha256_text,
)
from kit.harness.episode import Task

__all__ = ["MMBC_QUESTION_MARKER", "load_mm_browsecomp", "mmbrowsecomp_task"]

MMBC_QUESTION_MARKER = "Question: "


def mmbrowsecomp_task(row: dict[str, Any], resolve_image: Callable[[str], Path], *, source: str,
                      missing_images: str = "problem") -> Task:
    """One MM-BrowseComp row (still encrypted, as published) -> :class:`Task`, decrypting in memory.

    ``question``, ``answer`` and every ``checklist`` item are decrypted with the row's ``canary``
    (the authors' scheme, :mod:`kit.eval.crypto`). The task is marked ``metadata["sensitive"]``:
    its question, answers, checklist and any model response must never be written to outputs; the
    metadata carries their sha256 instead. ``resolve_image`` maps each image URL to a local file.

    ``missing_images="text_only"``: a row whose image file is absent is loaded without its images
    and labelled (``metadata["text_only"]``, ``metadata["missing_images"]`` with the file names, and
    :data:`TEXT_ONLY_LABEL` in ``metadata["labels"]``, which the evaluation copies onto each item).
    An image file that exists but does not decode (:class:`~kit.eval.loaders.common.BadImage`) is a
    row problem in both modes.

    Raises:
        BenchmarkError: missing fields, failed decryption, an image that does not decode
            (``BadImage``), or (default ``missing_images="problem"``) an image that cannot be resolved;
            ``ValueError`` for an unknown ``missing_images``.
    """
    check_missing_images(missing_images)
    if not isinstance(row, dict):
        raise BenchmarkError(f"row is a JSON {type(row).__name__}, not an object")
    row_id(row, "id")
    for key in ("id", "question", "answer", "canary"):
        if row.get(key) in (None, ""):
            raise BenchmarkError(f"missing field {key!r}")
    canary = str(row["canary"])
    try:
        question = decrypt_text(row["question"], canary).strip()
        answer = decrypt_text(row["answer"], canary).strip()
        checklist = [decrypt_text(c, canary) for c in _aslist(row.get("checklist"))]
    except DecryptionError as e:
        raise BenchmarkError(f"decryption failed: {e}") from e
    if not question or not answer:
        raise BenchmarkError("empty question or answer after decryption")
    images, missing = [], []
    for u in _aslist(row.get("images")):
        try:
            images.append(str(resolve_image(u)))
        except BenchmarkError as e:
            if missing_images != "text_only" or isinstance(e, BadImage):  # a damaged image is never "missing"
                raise
            missing.append({"ref": str(u)[:200], "reason": str(e)[:200]})
    extra: dict[str, Any] = {}
    if missing:  # text-only on request: no partial image set, the question is asked without images
        images = []
        extra = {"text_only": True, "missing_images": missing, "labels": [TEXT_ONLY_LABEL]}
    return Task(id=f"mmbc_{row_id(row, 'id')}", question=question, input_images=images, answers=[answer], source=source,
                metadata={**extra, "sensitive": True, "mmbc_id": row["id"], "category": row.get("category"),
                          "subtask": row.get("subtask"), "level": row.get("level"),
                          "checklist": checklist, "checklist_property": row.get("checklist_property"),
                          "judge_question": question.split(MMBC_QUESTION_MARKER)[-1].strip(),
                          "question_sha256": sha256_text(question), "answer_sha256": sha256_text(answer)})


def load_mm_browsecomp(root: str | Path, limit: int | None = None, *, strict: bool = False,
                       missing_images: str = "problem") -> LoadResult:
    """Load MM-BrowseComp rows from the ``*.jsonl`` files in ``root`` (published, encrypted format)
    with their images from ``root/images`` (image fields are URLs: resolved by file name).

    Per-row problems (reported, the rest loads): a line that is not JSON or not UTF-8, a missing or
    duplicate id, failed decryption, an image file that does not decode (each image is decoded once
    here), an absent image file (``missing_images="problem"``, the default); ``missing_images="text_only"``
    loads such a row without images, labelled (see
    :func:`mmbrowsecomp_task`).

    Decrypted text stays in the returned tasks only (see :func:`mmbrowsecomp_task`).

    Raises:
        BenchmarkError: no ``.jsonl`` file in ``root``, or ``strict`` and a row is bad.
    """
    root = Path(root)
    files = sorted(root.glob("*.jsonl"))
    if not files:
        raise BenchmarkError(f"{root} has no .jsonl file (expected MM-BrowseComp's published JSONL)")
    check_missing_images(missing_images)
    check_limit(limit)
    res = LoadResult("mmbrowsecomp", info={"files": [_file_info(f) for f in files], "format": "MM-BrowseComp JSONL",
                                           "missing_images": missing_images})
    img_dir = root / "images"
    for f in files:
        for i, raw in enumerate(f.read_bytes().splitlines(), 1):
            if not raw.strip():
                continue
            rid = None
            try:
                row = json_line(raw)  # per line: one badly encoded or too deeply nested line is one problem
                try:  # the problem line names the id only when it is one
                    rid = row_id(row, "id") if isinstance(row, dict) else None
                except BenchmarkError:
                    rid = None
                res.add([mmbrowsecomp_task(row, lambda u: resolve_by_name(u, img_dir), source="mm_browsecomp",
                                           missing_images=missing_images)], f"{f.name}:{i}")
            except (ValueError, BenchmarkError, AttributeError, TypeError) as e:  # JSON/Unicode errors are ValueErrors
                reason = f"{type(e).__name__}: {e}"
                if strict:
                    raise BenchmarkError(f"{f.name} line {i}: {reason}") from e
                res.problem(f"{f.name}:{i}", reason, None if rid is None else f"mmbc_{rid}")
            if limit is not None and len(res.tasks) >= limit:
                return res
    return res
