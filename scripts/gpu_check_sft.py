"""Short GPU check of agentic SFT (≤ 10 minutes): Unsloth vs TRL on the same model and data.

    python scripts/gpu_check_sft.py [--model PATH|tiny-qwen2_5_vl] [--steps 30] [--lora 16] [--budget-s 540]

Runs the same encoded trajectories (multi-turn, multi-image, tool schemas rendered) through both back
ends with the same collator and masks and prints, per back end, tokens/s and peak CUDA memory, then
the comparison against the targets: Unsloth ≥ 1.5× TRL's tokens/s, with lower peak memory. Exits 1
when a target is missed, 2 when no GPU or Unsloth is available (nothing to check). Each back end
gets half of ``--budget-s``; steps are cut to fit.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_backend(backend: str, model_path, examples, pad, steps: int, lora: int, out: Path) -> dict:
    import torch

    from kit.train.sft import SFTTrainConfig, train_sft

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    cfg = SFTTrainConfig(max_steps=steps, grad_accum=1, per_device_batch_size=1, lr_language=1e-5, lr_vision=1e-6,
                    warmup_ratio=0.0, lora_rank=lora, gradient_checkpointing=True, save_steps=10**6, logging_steps=1)
    t = time.perf_counter()
    res = train_sft(model_path, examples, out / backend, cfg, backend=backend, pad_token_id=pad, save_final=False)
    logs = [h for h in res.log_history if "loss" in h]
    return {"backend": backend, "steps": steps, "wall_s": round(time.perf_counter() - t, 1),
            "tokens_per_s": statistics.median(h["tokens_per_s"] for h in (logs[2:] or logs)),
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30,
            "loss_first": logs[0]["loss"], "loss_last": logs[-1]["loss"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-qwen2_5_vl", help="checkpoint folder or tiny-<arch>")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lora", type=int, default=16, help="LoRA rank (0: full fine-tuning)")
    ap.add_argument("--records", type=int, default=16)
    ap.add_argument("--budget-s", type=float, default=540.0)
    a = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing to check")
        return 2
    if importlib.util.find_spec("unsloth") is None:
        print("unsloth is not installed: nothing to check (bring it as a wheel)")
        return 2
    import unsloth  # noqa: F401  (must be imported before transformers/trl to patch them)

    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.sample_records import sample_record as make_record
    from kit.train.sft_data import SFTEncoder

    path = build_tiny_checkpoint(a.model[5:], vocab="qwen") if a.model.startswith("tiny-") else Path(a.model)
    enc = SFTEncoder(load_image_only_processor(path))
    print(f"GPU: {torch.cuda.get_device_name()}, model {path}")
    results = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ex, rep = enc.encode_many([make_record(Path(tmp) / f"w{i}", rid=f"e{i}") for i in range(a.records)])
        print("encode:", rep.as_dict())
        steps = a.steps
        for backend in ("trl", "unsloth"):
            r = run_backend(backend, path, ex, enc.pad_token_id, steps, a.lora, Path(tmp))
            results.append(r)
            print(json.dumps(r))
            per_step = r["wall_s"] / steps
            # keep the second back end inside its half of the budget
            steps = max(5, min(steps, int((a.budget_s - (time.perf_counter() - t0)) / max(per_step, 1e-3) * 0.8)))
    trl, uns = results
    speedup = uns["tokens_per_s"] / trl["tokens_per_s"]
    mem_ratio = uns["peak_mem_gib"] / trl["peak_mem_gib"]
    print(f"Unsloth / TRL tokens/s: {speedup:.2f}x (target >= 1.5x); peak memory {uns['peak_mem_gib']:.2f} vs "
          f"{trl['peak_mem_gib']:.2f} GiB ({mem_ratio:.2f}x, target < 1)")
    ok = speedup >= 1.5 and mem_ratio < 1.0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
