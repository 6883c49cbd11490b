"""``python -m kit.cli livevqa-open ROOT --out DIR [--fraction F] [--seed S]``: POINTS-Seeker's RL data step
(App. A.4, :mod:`kit.data.livevqa_open`) as a command. ``ROOT`` is a LiveVQA release folder (its JSON and
``images/``); ``DIR`` receives ``rl_prompts.jsonl`` (notebook 05's ``-p rl_prompts DIR``), the rejections and
the summary.

Exit 0 when at least one prompt is written; rows the loader could not use (a missing image file, a bad row)
and rejected items are listed in ``DIR/livevqa_open_rejected.jsonl`` with their reasons and counted on
stderr. Exit 2, with one line on stderr naming the folder or file and what is wrong and nothing written, when
``ROOT`` is not a folder or has no ``images/`` folder, a release JSON file is unreadable or not a list of
items (an object, null ...), no row gives a usable prompt, or the fraction is outside [0, 1].
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def add_parser(sub) -> None:
    p = sub.add_parser("livevqa-open", help="LiveVQA multiple choice -> open-ended RL prompts (POINTS-Seeker App. A.4)")
    p.add_argument("root", help="LiveVQA release folder (its benchmark JSON and images/)")
    p.add_argument("--out", required=True, help="output folder: rl_prompts.jsonl (notebook 05's rl_prompts), "
                   "livevqa_open_rejected.jsonl, livevqa_open_summary.json")
    p.add_argument("--fraction", type=float, default=1.0,
                   help="share of convertible items converted (the paper: 'a significant portion'; default all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fraction's selection")


def _one_line(text: Any) -> str:
    return " ".join(str(text).split()).replace("JSON NoneType", "JSON null")


def release_error(root: Path, split: Any) -> str | None:
    """What makes the loaded release unusable as a whole, as one line, or None: a JSON file the loader
    could not read as a list of items (its problem's ``row`` is the file name), or no task at all."""
    files = {Path(f["path"]).name: f["path"] for f in split.info.get("files", [])}
    for p in split.problems:
        if isinstance(p.get("row"), str) and p["row"] in files:
            return f"{files[p['row']]}: {_one_line(p.get('reason'))}"
    if not split.tasks:
        names = ", ".join(sorted(files)) or str(root)
        if not split.problems:
            return f"{root}: no usable rows ({names} lists no items)"
        first = split.problems[0]
        return (f"{root}: no usable rows: {len(split.problems)} rows not loaded from {names} "
                f"(first, row {first.get('row')}: {_one_line(first.get('reason'))[:200]})")
    return None


def cmd(args) -> int:
    from kit.data.livevqa_open import open_livevqa_split, write_open_split
    from kit.eval.loaders.common import BenchmarkError
    from kit.eval.loaders.livevqa import load_livevqa

    root, out = Path(args.root), Path(args.out)

    def fail(message: str) -> int:
        print(f"livevqa-open: {_one_line(message)}", file=sys.stderr)
        return 2

    if not root.is_dir():
        return fail(f"{root}: not a folder (expected a LiveVQA release: its benchmark JSON and images/)")
    if not (root / "images").is_dir():
        return fail(f"{root / 'images'}: no such folder (a LiveVQA release keeps its news images there)")
    try:
        split = load_livevqa(root)
        if (problem := release_error(root, split)) is not None:
            return fail(problem)
        res = open_livevqa_split(split, fraction=args.fraction, seed=args.seed)
        s = res.summary
        if not res.tasks:
            return fail(f"{root}: no usable rows: all {s['input']} tasks rejected ({s['rejected']}); "
                        f"{s['loader_problems']} rows not loaded")
        write_open_split(res, out)
    except (BenchmarkError, ValueError, OSError) as e:
        return fail(f"{type(e).__name__}: {e}")
    print(json.dumps(s, indent=1))
    if res.rejections:
        rows, tasks = s["loader_problems"], sum(s["rejected"].values())
        print(f"livevqa-open: {rows} row{'s' * (rows != 1)} not loaded, {tasks} task{'s' * (tasks != 1)} rejected "
              f"{s['rejected']}: reasons in {out / 'livevqa_open_rejected.jsonl'}", file=sys.stderr)
    print(f"RL prompts: {out}/rl_prompts.jsonl (notebook 05: -p rl_prompts {out})")
    return 0
