"""``python -m kit.cli livevqa-open ROOT --out DIR [--fraction F] [--seed S]``: POINTS-Seeker's RL data step
(App. A.4, :mod:`kit.data.livevqa_open`) as a command. ``ROOT`` is a LiveVQA release folder (its JSON and
``images/``); ``DIR`` receives ``rl_prompts.jsonl`` (notebook 05's ``-p rl_prompts DIR``), the rejections and
the summary. Exit 0; 2 on a missing or malformed release or a bad fraction (one line on stderr).
"""

from __future__ import annotations

import json
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("livevqa-open", help="LiveVQA multiple choice -> open-ended RL prompts (POINTS-Seeker App. A.4)")
    p.add_argument("root", help="LiveVQA release folder (its benchmark JSON and images/)")
    p.add_argument("--out", required=True, help="output folder: rl_prompts.jsonl (notebook 05's rl_prompts), "
                   "livevqa_open_rejected.jsonl, livevqa_open_summary.json")
    p.add_argument("--fraction", type=float, default=1.0,
                   help="share of convertible items converted (the paper: 'a significant portion'; default all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fraction's selection")


def cmd(args) -> int:
    from kit.data.livevqa_open import open_livevqa_split
    from kit.eval.loaders.common import BenchmarkError
    from kit.eval.loaders.livevqa import load_livevqa

    try:
        split = load_livevqa(args.root)
        res = open_livevqa_split(split, args.out, fraction=args.fraction, seed=args.seed)
    except (BenchmarkError, ValueError, OSError) as e:
        print(f"livevqa-open: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(res.summary, indent=1))
    print(f"RL prompts: {args.out}/rl_prompts.jsonl (notebook 05: -p rl_prompts {args.out})")
    return 0
