"""Short GPU check of agentic SFT (≤ 10 minutes): Unsloth vs TRL on the same model and data.

    python scripts/gpu_check_sft.py [--model PATH|tiny-qwen2_5_vl|random-7b|random-3b] [--steps 30] [--lora 16]
                                    [--budget-s 540]

Runs the same encoded trajectories (multi-turn, multi-image, tool schemas rendered) through both back
ends with the same collator and masks and prints, per back end, tokens/s and peak CUDA memory, then
the comparison against the targets: Unsloth ≥ 1.5× TRL's tokens/s, with lower peak memory. Exits 1
when a target is missed, 2 when no GPU or Unsloth is available (nothing to check). Each back end
gets half of ``--budget-s``; steps are cut to fit.

:func:`compare_backends` is also the ``unsloth`` phase of ``scripts/gpu_acceptance.py`` (one report with
the other CUDA paths); this script stays the longer, standalone comparison. Both scripts build their
paper-size models here (:func:`build_checkpoint`: Qwen2.5-VL-7B / 3B architecture, random weights, offline)
and their long trajectories (:func:`long_record`, :func:`sized_record`).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


# Architecture configs. 7B and 3B: the values of config.json of Qwen/Qwen2.5-VL-7B-Instruct and
# Qwen/Qwen2.5-VL-3B-Instruct on the Hugging Face Hub (https://huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct/
# blob/main/config.json, .../Qwen2.5-VL-3B-Instruct/blob/main/config.json), written out here because
# nothing can be downloaded on the GPU machine. "tiny" (CPU mode) keeps the same shape rules at width 64.
_VISION_PAPER = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14,
                     spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
                     tokens_per_second=2, in_channels=3, hidden_act="silu")
ARCH_CONFIGS: dict[str, dict[str, Any]] = {
    "7b": dict(text=dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                         num_key_value_heads=4, vocab_size=152064, max_position_embeddings=128000, rope_theta=1e6,
                         mrope_section=[16, 24, 24], rms_norm_eps=1e-6), tie=False,
               vision=dict(_VISION_PAPER, out_hidden_size=3584)),
    "3b": dict(text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=128000, rope_theta=1e6,
                         mrope_section=[16, 24, 24], rms_norm_eps=1e-6), tie=True,
               vision=dict(_VISION_PAPER, out_hidden_size=2048)),
    "tiny": dict(text=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, vocab_size=None, max_position_embeddings=32768, rope_theta=1e6,
                           mrope_section=[4, 6, 6], rms_norm_eps=1e-6), tie=True,
                 vision=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=14,
                             spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1],
                             tokens_per_second=2, out_hidden_size=64)),
}


def arch_config(size: str, base: dict[str, Any] | None = None):
    """The ``transformers.Qwen2_5_VLConfig`` of ``size`` (:data:`ARCH_CONFIGS`); special-token ids (and the
    vocabulary size where the size leaves it open) from ``base``, a tokenizer-matching ``config.json`` dict."""
    from transformers import Qwen2_5_VLConfig

    base = base or {}
    spec = ARCH_CONFIGS[size]
    t = dict(spec["text"])
    rope = {"rope_type": "default", "rope_theta": t.pop("rope_theta"), "mrope_section": t.pop("mrope_section")}
    btext = base.get("text_config", base)
    text = dict(t, vocab_size=t["vocab_size"] or btext.get("vocab_size"), rope_parameters=rope,
                **{k: btext[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in btext})
    ids = {k: base[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
           if k in base}
    return Qwen2_5_VLConfig(text_config=text, vision_config=dict(spec["vision"]), tie_word_embeddings=spec["tie"], **ids)


def build_checkpoint(size: str, out: Path, *, vocab: str, max_pixels: int, device: str, dtype: str) -> Path:
    """Write a random-weight Qwen2.5-VL checkpoint of ``size`` (:func:`arch_config`) into ``out``.

    Tokenizer, chat template and processor come from the kit's offline tiny checkpoint of the same
    vocabulary (``vocab="qwen"``: the real Qwen BPE and special-token ids); the weights are initialised
    on ``device`` in ``dtype`` (a 7B initialises in seconds on a GPU) and saved as safetensors.
    """
    import shutil

    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from kit.models.tiny import build_tiny_checkpoint, quiet_hf_progress

    base = build_tiny_checkpoint("qwen2_5_vl", vocab=vocab, max_pixels=max_pixels)  # type: ignore[arg-type]
    config = arch_config(size, json.loads((base / "config.json").read_text()))
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):  # initialise where it runs: a 7B init on CPU alone takes minutes
        model = AutoModelForImageTextToText.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig.from_pretrained(str(base))
    if out.exists():
        shutil.rmtree(out)
    with quiet_hf_progress():
        model.save_pretrained(str(out))
    n = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    for f in base.iterdir():  # tokenizer, chat template, processor
        if f.is_file() and f.name not in ("config.json", "model.safetensors", "generation_config.json", "kit_tiny.json"):
            shutil.copy2(f, out / f.name)
    (out / "acceptance.json").write_text(json.dumps({"size": size, "params": n, "base": str(base),
                                                     "build_s": round(time.perf_counter() - t0, 1)}))
    return out


_WORDS = ("the", "river", "bridge", "museum", "painting", "built", "year", "city", "tower", "north", "station",
          "history", "opened", "architect", "record", "image", "search", "result", "page", "island", "league",
          "album", "singer", "church", "century", "population", "mountain", "festival", "award", "novel")


def filler(n_words: int, seed: int) -> str:
    """``n_words`` English words (deterministic), the body of a long tool observation."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(max(1, n_words)))


def long_record(ws: Path, rid: str, n_words: int, n_images: int, px: int, seed: int = 0, answer: str = "1937"):
    """An answered, trainable episode record with ``n_images`` noise images of ``px``² pixels (one in the
    user turn, the rest spread over tool observations) and tool observations of ``n_words`` words in all."""
    import numpy as np
    from PIL import Image

    from kit.harness.episode import EpisodeRecord, RegisteredImage, Task
    from kit.types import ContentPart, Message

    ws.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    names = ["user_image_1.png"] + [f"search_image_{i}.png" for i in range(1, n_images)]
    for name in names[:n_images]:
        Image.fromarray(rng.integers(0, 256, (px, px, 3), dtype=np.uint8)).save(ws / name)
    turns = 4
    tool_imgs = [names[1:n_images][i::turns] for i in range(turns)]

    def txt(t: str) -> ContentPart:
        return ContentPart(type="text", text=t)

    user = ([ContentPart(type="image", image=names[0])] if n_images else []) + [txt("Which year did the bridge open?")]
    msgs = [Message(role="system", content=[txt("You are a search agent.")]), Message(role="user", content=user)]
    for k in range(turns):
        call = ('<think>I need more evidence.</think>\n<tool_call>\n{"name": "web_search", "arguments": '
                f'{{"query": "bridge opening year {k}"}}}}\n</tool_call>')
        msgs.append(Message(role="assistant", content=[txt(call)], turn=k + 1))
        obs = [txt(filler(n_words // turns, seed * 31 + k))] + [ContentPart(type="image", image=n) for n in tool_imgs[k]]
        msgs.append(Message(role="tool", name="web_search", tool_call_id=f"c{k}", turn=k + 1, content=obs))
    msgs.append(Message(role="assistant", content=[txt(f"<think>Found it.</think>\n<response>{answer}</response>")],
                        turn=turns + 1))
    images = [RegisteredImage(ref=n[:-4], filename=n, kind="user_image" if n.startswith("user") else "search_image",
                              sha256="0" * 64, width=px, height=px, mime="image/png") for n in names[:n_images]]
    return EpisodeRecord(id=rid, task=Task(id="acceptance", question="Which year did the bridge open?", answers=["1937"]),
                         config_hash="acceptance", messages=msgs, images=images, status="answered", trainable=True,
                         final_response=answer, workspace=str(ws))


def sized_record(enc, ws: Path, rid: str, tokens: int, n_images: int, px: int, seed: int = 0, **kw):
    """:func:`long_record` whose encoding (``enc``, an :class:`~kit.train.sft_data.SFTEncoder`) has about
    ``tokens`` tokens: two probe encodings fit tokens per word, then the record is written at that size.
    Returns ``(record, example)``."""
    probe = [(w, enc.encode(long_record(ws, rid, w, n_images, px, seed, **kw)).num_tokens) for w in (40, 240)]
    per_word = (probe[1][1] - probe[0][1]) / 200
    words = max(8, int(probe[0][0] + (tokens - probe[0][1]) / per_word))
    rec = long_record(ws, rid, words, n_images, px, seed, **kw)
    ex = enc.encode(rec)
    return rec, ex


def run_backend(backend: Literal["trl", "unsloth"], model_path, examples, pad, steps: int, lora: int, out: Path) -> dict:
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


def compare_backends(model_path, examples, pad: int, *, steps: int, lora: int, out: Path) -> dict:
    """TRL then Unsloth, ``steps`` steps each on the same encoded ``examples``: per back end tokens/s and
    peak CUDA memory (:func:`run_backend`), and ``unsloth_over_trl_tokens_per_s`` / ``unsloth_over_trl_peak_mem``
    (Unsloth claims about 2x the tokens/s)."""
    res = {b: run_backend(b, model_path, examples, pad, steps, lora, out) for b in ("trl", "unsloth")}
    return {**res, "unsloth_over_trl_tokens_per_s": res["unsloth"]["tokens_per_s"] / res["trl"]["tokens_per_s"],
            "unsloth_over_trl_peak_mem": res["unsloth"]["peak_mem_gib"] / res["trl"]["peak_mem_gib"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny-qwen2_5_vl", help="checkpoint folder, tiny-<arch> or random-7b|3b")
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

    if a.model.startswith("tiny-"):
        path = build_tiny_checkpoint(a.model[5:], vocab="qwen")
    elif a.model.startswith("random-"):  # paper architecture, random weights (in the temp folder below)
        path = build_checkpoint(a.model[7:], Path(tempfile.mkdtemp(prefix="gpu_check_sft_")) / a.model, vocab="qwen",
                                max_pixels=1024 * 28 * 28, device="cuda", dtype="bfloat16")
    else:
        path = Path(a.model)
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
