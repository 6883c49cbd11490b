"""LiveVQA in its GitHub release format: a JSON list of news images with ``level1_qa`` (multiple
choice) and ``level2_qa`` (multi-hop) each, loaded as separate tasks.
"""

from __future__ import annotations

import re as _re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kit.eval.loaders.common import (
    BenchmarkError,
    LoadResult,
    _answers,
    _aslist,
    _file_info,
    check_limit,
    json_line,
    resolve_by_name,
    row_id,
)
from kit.harness.episode import Task

__all__ = ["livevqa_tasks", "load_livevqa", "parse_options"]

_OPTION = _re.compile(r"^\s*\(?([A-Z])[\.\):]\s*(.*)$", _re.S)


def parse_options(options: Iterable[str]) -> dict[str, str]:
    """``["A. foo", "B. bar"]`` -> ``{"A": "foo", "B": "bar"}``.

    Raises:
        BenchmarkError: an option without a letter label.
    """
    out = {}
    for o in options:
        m = _OPTION.match(str(o))
        if not m:
            raise BenchmarkError(f"option without a letter label: {str(o)[:60]!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def livevqa_tasks(row: dict[str, Any], image: Path, *, levels: Iterable[int] = (1, 2), source: str) -> list[Task]:
    """One LiveVQA row -> its level-1 task (multiple choice: the options are shown, scored by the
    chosen letter or the option text) and/or its level-2 task (multi-hop, open answer, scored
    against ``Ground_Truth_List``). Ids: ``livevqa_<id>_l1`` / ``_l2``.

    Raises:
        BenchmarkError: a requested level is missing or malformed.
    """
    out = []
    for level in levels:
        qa = row.get(f"level{level}_qa")
        if not isinstance(qa, dict) or not str(qa.get("question") or "").strip():
            raise BenchmarkError(f"no level-{level} question")
        gt_list = _aslist(qa.get("Ground_Truth_List"))
        meta = {"level": level, "question_type": qa.get("question_type"), "news_source": row.get("source"),
                "time": row.get("time"), "livevqa_id": row.get("id")}
        question = str(qa["question"]).strip()
        if level == 1:
            options = parse_options(qa.get("options") or [])
            letter = str(qa.get("Ground_Truth") or "").strip().upper()
            if letter not in options:
                raise BenchmarkError(f"level-1 Ground_Truth {letter!r} is not one of the options {sorted(options)}")
            question += "\n\nOptions:\n" + "\n".join(f"{k}. {v}" for k, v in options.items()) + \
                "\n\nAnswer with the letter of the correct option."
            answers = _answers([options[letter]], gt_list)
            meta.update({"choices": options, "correct_choice": letter, "rule_mode": "choice"})
        else:
            answers = _answers(gt_list, [])
            if not answers:
                raise BenchmarkError("level-2 question without Ground_Truth_List")
        out.append(Task(id=f"livevqa_{row_id(row, 'id')}_l{level}", question=question, input_images=[str(image)],
                        answers=answers, source=f"{source}_l{level}", metadata=meta))
    return out


def load_livevqa(root: str | Path, limit: int | None = None, *, levels: Iterable[int] = (1, 2),
                 strict: bool = False) -> LoadResult:
    """Load LiveVQA items (the GitHub release format: a JSON list with ``level1_qa`` /
    ``level2_qa`` per news image) from the ``*.json`` file in ``root``, images from ``root/images``.
    Level 1 (multiple choice) and level 2 (multi-hop) become separate tasks; ``limit`` counts rows.

    Raises:
        BenchmarkError: no JSON file, the file is not a list, or ``strict`` and a row is bad.
    """
    root = Path(root)
    files = sorted(root.glob("*.json"))
    if not files:
        raise BenchmarkError(f"{root} has no .json file (expected LiveVQA's benchmark JSON)")
    check_limit(limit)
    res = LoadResult("livevqa", info={"files": [_file_info(f) for f in files], "levels": list(levels)})
    img_dir = root / "images"
    rows_done = 0
    for f in files:
        try:  # one unreadable file is one problem (the other files load)
            data = json_line(f.read_bytes())
            if not isinstance(data, list):
                raise BenchmarkError(f"holds a JSON {type(data).__name__}, expected a list of items")
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, too deep, not a list
            if strict:
                raise BenchmarkError(f"{f}: {e}") from e
            res.problem(f.name, f"{type(e).__name__}: {e}")
            continue
        for i, row in enumerate(data):
            try:
                if not isinstance(row, dict):
                    raise BenchmarkError(f"row is a {type(row).__name__}, not an object")
                row_id(row, "id")
                image = resolve_by_name(str(row.get("img_path") or ""), img_dir)
                res.add(livevqa_tasks(row, image, levels=levels, source="livevqa_news"), f"{f.name}:{i}")
            except (BenchmarkError, TypeError, AttributeError, ValueError) as e:
                if strict:
                    raise BenchmarkError(f"{f.name} row {i}: {e}") from e
                res.problem(f"{f.name}:{i}", f"{type(e).__name__}: {e}",
                            row.get("id") if isinstance(row, dict) else None)
            rows_done += 1
            if limit is not None and rows_done >= limit:
                return res
    return res
