"""Agentic SFT on CPU: TRL path tokens/s, peak memory, and the collator's share of step time.

    .venv/bin/python benchmarks/bench_sft.py [--arch qwen2_vl] [--vocab local] [--steps 20] [--batch 2]

Builds a tiny random Qwen-VL, encodes multi-turn multi-image records (kit.train.sample_records.sample_record
layout, tool schemas rendered), trains ``--steps`` steps with TRL ``SFTTrainer`` and prints:

* tokens/s (non-padding tokens per second of training) and peak RSS (MiB);
* collator time per batch vs training step time (target: collator ≤ 5% of the step);
* one-off encoding time per record (rendering, image processing, tokenization with offsets).

Ends with one ``BENCH {json}`` line; exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import Summary  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="qwen2_vl")
    ap.add_argument("--vocab", default="local")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--records", type=int, default=8)
    a = ap.parse_args()

    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.sample_records import sample_record as make_record
    from kit.train.sft import SFTTrainConfig, train_sft
    from kit.train.sft_data import SFTCollator, SFTEncoder

    path = build_tiny_checkpoint(a.arch, vocab=a.vocab)
    enc = SFTEncoder(load_image_only_processor(path))
    with tempfile.TemporaryDirectory() as tmp:
        recs = [make_record(Path(tmp) / f"w{i}", rid=f"e{i}") for i in range(a.records)]
        t = time.perf_counter()
        ex, rep = enc.encode_many(recs)
        enc_s = (time.perf_counter() - t) / len(recs)
        collate = SFTCollator(enc.pad_token_id)
        batches = [ex[i:i + a.batch] for i in range(0, len(ex), a.batch)]
        ct = []
        for _ in range(5):
            for b in batches:
                t = time.perf_counter()
                collate(b)
                ct.append(time.perf_counter() - t)
        cfg = SFTTrainConfig(max_steps=a.steps, grad_accum=1, per_device_batch_size=a.batch, lr_language=1e-3,
                        lr_vision=1e-4, warmup_ratio=0.0, gradient_checkpointing=False, save_steps=10**6, logging_steps=1)
        res = train_sft(path, ex, Path(tmp) / "run", cfg, backend="trl", save_final=False)
    logs = [h for h in res.log_history if "loss" in h]
    tok_s = statistics.median(h["tokens_per_s"] for h in logs[1:] or logs)
    step_s = res.train_s / a.steps
    coll_s = statistics.median(ct)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tokens = statistics.mean(e.num_tokens for e in ex)
    print(f"model {a.arch}/{a.vocab}, {len(ex)} records, {tokens:.0f} tokens/record, batch {a.batch}, {a.steps} steps")
    print(f"TRL CPU: {tok_s:.0f} tokens/s (median of logged steps), step {step_s * 1000:.1f} ms, peak RSS {peak_mib:.0f} MiB")
    print(f"collator: {coll_s * 1000:.2f} ms/batch = {100 * coll_s / step_s:.2f}% of step time (target <= 5%)")
    print(f"encoding (one-off, before training): {enc_s * 1000:.1f} ms/record")
    print(f"loss {logs[0]['loss']:.3f} -> {logs[-1]['loss']:.3f}")
    summary = Summary("bench_sft")
    summary.target("collator_share_of_step", coll_s / step_s, "<=", 0.05)
    summary.figure("tokens_per_s", tok_s)
    summary.figure("step_ms", step_s * 1000)
    summary.figure("peak_rss_mib", peak_mib)
    summary.figure("encoding_ms_per_record", enc_s * 1000)
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
