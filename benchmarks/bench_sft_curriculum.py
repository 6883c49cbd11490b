"""Short-to-long context curriculum vs plain SFT on the tiny smoke model (kit.train.curriculum).

    .venv/bin/python benchmarks/bench_sft_curriculum.py [--tasks 40] [--heldout 4] [--short-epochs 16] [--full-epochs 2]

Synthesizes demonstrator trajectories on FVQA tasks through the harness and the local ZIM web (as notebook
04's smoke profile does; needs the shared data), holds the last ``--heldout`` out, and trains three arms of
the tiny random ``qwen2_vl`` (local vocabulary) with TRL, one trajectory per step:

* ``full_only``: ``--full-epochs`` over the full records (the paper's recipe at smoke scale);
* ``short_only``: ``--short-epochs`` over compacted records (stage 1 alone);
* ``curriculum``: stage 1, then ``--full-epochs`` over the full records.

Each arm is evaluated on the held-out trajectories with greedy turns generated inside the full harness
context (``kit.train.sft_eval.evaluate_sft``: tool-call validity, format compliance, held-out loss);
``short_only`` is also evaluated in compacted contexts. Prints one row per arm with training seconds.
Takes ~12 minutes on 2 CPU cores. Tiny-model smoke figures: they compare recipes, not model quality.
No targets (figures only); ends with one ``BENCH {json}`` line, exit status 2 without the shared data.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import Summary  # noqa: E402


async def _trajectories(model_path: Path, n: int, out: Path):
    from kit.eval.loaders import load_fvqa
    from kit.harness.config import HarnessConfig
    from kit.harness.loop import Harness
    from kit.harness.runner import run_batch
    from kit.paths import shared_data_dir, zim_paths
    from kit.policy.demonstrator import DemonstratorPolicy
    from kit.policy.tokens import counter_for
    from kit.web.zim import LocalZimWeb

    root = shared_data_dir()
    if root is None:
        raise SystemExit("no shared data folder: set MMSEARCH_KIT_DATA")
    tasks, _ = load_fvqa(root / "benchmarks" / "fvqa_mmsearch_r1", limit=n)
    web = LocalZimWeb([Path(p) for p in zim_paths(root)])
    harness = Harness(DemonstratorPolicy(token_counter=counter_for(model_path)), web, HarnessConfig.smoke(),
                      labels=["smoke", "scripted-demonstrator"])
    return await run_batch(harness, tasks, out, concurrency=2, progress=False)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=40)
    ap.add_argument("--heldout", type=int, default=4)
    ap.add_argument("--short-epochs", type=float, default=16.0)
    ap.add_argument("--full-epochs", type=float, default=2.0)
    a = ap.parse_args()
    summary = Summary("bench_sft_curriculum")
    from kit.paths import shared_data_dir

    if shared_data_dir() is None:
        print("no shared data folder: set MMSEARCH_KIT_DATA")
        return summary.skip("no shared data folder")

    import pandas as pd

    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.curriculum import compact_record, train_sft_curriculum
    from kit.train.sft import SFTTrainConfig
    from kit.train.sft_data import SFTEncoder
    from kit.train.sft_eval import evaluate_sft

    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        records = asyncio.run(_trajectories(path, a.tasks, tmp / "episodes"))
        os.chdir(tmp / "episodes")  # record image paths are relative to the episodes folder's workspaces
        proc = load_image_only_processor(path)
        enc, short_enc = SFTEncoder(proc), SFTEncoder(proc, tools=[])
        examples, report = enc.encode_many(records)
        if not 0 < a.heldout < len(examples):
            raise SystemExit(f"--heldout must be between 1 and {len(examples) - 1}")
        held_ids = {e.id for e in examples[-a.heldout:]}
        train_ex = [e for e in examples if e.id not in held_ids]
        train_recs = [r for r in records if r.id in {e.id for e in train_ex}]
        held = [r for r in records if r.id in held_ids]
        cfg = SFTTrainConfig(lr_language=2e-3, lr_vision=2e-4, epochs=a.full_epochs, per_device_batch_size=1, grad_accum=1,
                        warmup_ratio=0.05, gradient_checkpointing=False, save_steps=10**6, logging_steps=10)
        short_cfg = cfg.model_copy(update={"lr_language": 5e-3, "lr_vision": 5e-4, "epochs": a.short_epochs})
        rows = []

        def row(arm, model, train_s, context="full", which=held, encoder=enc):
            r = evaluate_sft(model, encoder, which, max_new_tokens=96)
            rows.append({"arm": arm, "eval_context": context, "train_s": round(train_s, 1),
                         "tool_call_validity": round(r["tool_call_validity"], 3),
                         "format_compliance": round(r["format_compliance"], 3), "heldout_loss": round(r["loss"], 3),
                         "generations": r["generations"]})

        t = time.perf_counter()
        plain = train_sft_curriculum(path, train_recs, train_ex, tmp / "plain", cfg, short_context_epochs=0,
                                     backend="trl")
        row("full_only", plain["full"].model, time.perf_counter() - t)
        t = time.perf_counter()
        cur = train_sft_curriculum(path, train_recs, train_ex, tmp / "cur", cfg, short_context_epochs=a.short_epochs,
                                   short_cfg=short_cfg, backend="trl")
        total_s = time.perf_counter() - t
        from transformers import AutoModelForImageTextToText

        stage1 = AutoModelForImageTextToText.from_pretrained(str(cur["short"].output_dir / "final"))
        row("short_only", stage1, cur["short"].train_s)
        row("short_only", stage1, cur["short"].train_s, context="compacted",
            which=[compact_record(r) for r in held], encoder=short_enc)
        row("curriculum", cur["full"].model, total_s)
    print(f"{len(records)} trajectories, {len(train_ex)} trained, {len(held)} held out; encode {report.as_dict()}")
    print("Tiny-model smoke figures (0.35 M-parameter random Qwen2-VL): they compare recipes, not model quality.")
    print(pd.DataFrame(rows).to_markdown(index=False))
    for r in rows:
        summary.figure(f"{r['arm']}_{r['eval_context']}", {k: r[k] for k in ("tool_call_validity", "format_compliance",
                                                                           "heldout_loss", "train_s")})
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
