"""GPU acceptance: one command, one JSON report proving the kit's CUDA paths at paper size.

    python scripts/gpu_acceptance.py --mode gpu --out results/gpu/report.json   # one H200, <= 8 minutes
    python scripts/gpu_acceptance.py --mode cpu --out /tmp/report.json          # tiny configs, float32, seconds

Phases (each wrapped: a failure records the error's type, message and last traceback lines, and the
other phases still run; docs/gpu.md says how to read the report):

* ``sft``: one optimizer step of the kit's SFT path (:func:`kit.train.sft.load_model` and
  :func:`kit.train.sft.make_trainer`, TRL back end, full fine-tuning, WeAgent App. A rates) on one
  trajectory at WeAgent's SFT settings (32k-token context, 20 images); checks that the loss mask the
  trainer received equals the one :class:`kit.train.sft_data.SFTCollator` computes on CPU.
* ``rl``: one FA-GSPO update of :class:`kit.rl.trainer.RLTrainer` (``rl_update``) on a group of 8
  trajectories of 4k-32k tokens; checks the policy loss (and token NLL) on a small batch against a CPU
  float32 computation with the same weights, within bf16 tolerance.
* ``generation``: one harness episode of :class:`kit.policy.transformers_policy.TransformersPolicy`
  against the local web (a ZIM archive); tokens/s and time to first token.
* ``vfold``: pages rendered by :mod:`kit.vfold` through the vision tower; pages/s, vision tokens per page.
* ``unsloth``: Unsloth's vision SFT step beside TRL's on the same batch (``scripts/gpu_check_sft.py``);
  skipped with the reason where unsloth does not import.

GPU mode builds a Qwen2.5-VL-7B-architecture model from its config with random weights (nothing can
be downloaded there; random weights are exact for memory and speed) and falls back to the 3B config
for a phase that runs out of memory. MFU = 6 · N · tokens / step time / 790 TFLOP/s (the H200's bf16
peak as measured; N counts every parameter; the 6N "model FLOPs" estimate leaves out attention and
activation recomputation). This script absorbs the older Unsloth-vs-TRL check, which stays runnable
on its own as ``scripts/gpu_check_sft.py``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import resource
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_check_sft (the Unsloth-vs-TRL step)

from gpu_check_sft import ARCH_CONFIGS, build_checkpoint, filler, long_record, sized_record  # noqa: E402

PEAK_BF16_FLOPS = 790e12  # H200 bf16 dense peak, as measured (issue text); MFU denominator in both modes
PHASES = ("sft", "rl", "generation", "vfold", "unsloth")

@dataclass
class Settings:
    """Sizes of one mode. Tokens are model tokens (text + vision); pixels are per image side."""

    device: str
    dtype: str
    sizes: tuple[str, ...]
    sft_tokens: int
    sft_images: int
    sft_image_px: int
    rl_lengths: tuple[int, ...]
    check_tokens: int
    gen_tokens: int
    vfold_pages: int
    unsloth_tokens: int
    vocab: str
    max_pixels: int
    phase_min_s: dict[str, float] = field(default_factory=dict)
    tools: tuple[str, ...] | None = None  # tool schemas in the system turn (None: the five of Table 4)

    def harness_config(self, **kw: Any):
        """The smoke harness config with this mode's tools (the RL trainer renders their schemas)."""
        from kit.harness.config import HarnessConfig

        opts: dict[str, Any] = dict(kw)
        if self.tools:
            opts["tools_enabled"] = list(self.tools)
        return HarnessConfig.smoke(**opts)

    def encoder(self, processor):
        """An :class:`~kit.train.sft_data.SFTEncoder` rendering this mode's tool schemas."""
        from kit.train.sft_data import SFTEncoder, default_tool_schemas

        schemas = default_tool_schemas()
        return SFTEncoder(processor, tools=[t for t in schemas if self.tools is None or
                                            t.get("function", t).get("name") in self.tools])


MODES = {
    # WeAgent App. A: SFT on 32k-token trajectories with up to 20 images; RL groups of 8 (4k-32k tokens)
    "gpu": Settings("cuda", "bfloat16", ("7b", "3b"), 32000, 20, 448, tuple(4000 * k for k in range(1, 9)), 256,
                    64, 16, 8192, "qwen", 1024 * 28 * 28,
                    {"sft": 60, "rl": 120, "generation": 45, "vfold": 15, "unsloth": 90}),
    # the tiny local vocabulary spends ~2k tokens on the five tool schemas: one tool keeps CPU rows short
    "cpu": Settings("cpu", "float32", ("tiny",), 1536, 3, 56, tuple(640 + 128 * k for k in range(8)), 256,
                    8, 2, 512, "local", 256 * 28 * 28, {}, ("web_search",)),
}


class PhaseSkipped(Exception):
    """A phase cannot run here (package missing, no data, no budget left); recorded as ``skipped``."""


# ------------------------------------------------------------------------------------------ report
def error_record(e: BaseException, lines: int = 12) -> dict[str, Any]:
    """``{"type", "message", "traceback"}`` of ``e``: its class, message and the last ``lines`` traceback lines."""
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip().splitlines()
    return {"type": type(e).__name__, "message": str(e)[:2000], "traceback": tb[-lines:]}


def is_oom(e: BaseException) -> bool:
    """True for a CUDA (or host) out-of-memory error, the only error that triggers the 3B fallback."""
    return type(e).__name__ in ("OutOfMemoryError", "MemoryError") or "out of memory" in str(e).lower()


def free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    except ImportError:
        pass


def run_phases(phases: list[tuple[str, Callable[[Any], dict[str, Any]]]], ctx: Any, *, budget_s: float = math.inf,
               min_s: dict[str, float] | None = None, t0: float | None = None) -> dict[str, dict[str, Any]]:
    """Run each ``(name, fn)``; ``fn(ctx)`` returns the phase's numbers. Never raises (but on Ctrl-C).

    Each entry has ``status`` (``ok`` | ``error`` | ``skipped``), ``wall_s`` and the numbers, ``error``
    (:func:`error_record`) or ``reason``. A phase is skipped when less than its ``min_s`` of ``budget_s``
    (seconds since ``t0``) is left.
    """
    t0 = time.perf_counter() if t0 is None else t0
    out: dict[str, dict[str, Any]] = {}
    for name, fn in phases:
        start = time.perf_counter()
        left = budget_s - (start - t0)
        need = (min_s or {}).get(name, 0.0)
        try:
            if left < need:
                raise PhaseSkipped(f"budget: {left:.0f} s left of --budget-s {budget_s:.0f}, phase needs ~{need:.0f} s")
            entry = {"status": "ok", **fn(ctx)}
        except PhaseSkipped as e:
            entry = {"status": "skipped", "reason": str(e)}
        except Exception as e:  # recorded, and the next phase runs
            entry = {"status": "error", "error": error_record(e)}
        free_memory()
        entry["wall_s"] = round(time.perf_counter() - start, 2)
        out[name] = entry
        print(f"[{name}] {entry['status']} in {entry['wall_s']} s", file=sys.stderr, flush=True)
    return out


def environment(mode: str) -> dict[str, Any]:
    """Machine, versions and date of the run."""
    import importlib.metadata as md
    import subprocess

    import torch

    vers: dict[str, str | None] = {"python": platform.python_version()}
    for d in ("torch", "transformers", "trl", "peft", "accelerate", "unsloth", "unsloth_zoo", "libzim", "tantivy"):
        try:
            vers[d] = md.version(d)
        except md.PackageNotFoundError:
            vers[d] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    machine: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count(), "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        machine.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1), gpu_count=torch.cuda.device_count())
    return {"mode": mode, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine,
            "versions": vers, "kit_commit": commit}


# ------------------------------------------------------------------------------------------ context
class Context:
    """What the phases share: settings, a work folder, the checkpoints built so far, the timers."""

    def __init__(self, mode: str, work: Path, zim: list[Path]):
        self.mode, self.s, self.work = mode, MODES[mode], work
        self.zim = zim
        self._ckpt: dict[str, Path] = {}
        self.params: dict[str, int] = {}
        self.built: dict[str, dict[str, Any]] = {}  # size -> params, build seconds (init + save)
        self.policy: tuple[str, Any] | None = None  # (size, TransformersPolicy) kept from generation for V-Fold

    def torch_dtype(self):
        import torch

        return getattr(torch, self.s.dtype)

    def checkpoint(self, size: str) -> Path:
        """A Qwen2.5-VL checkpoint folder of ``size`` with random weights (built once, see :func:`build_checkpoint`)."""
        if size not in self._ckpt:
            self._ckpt[size] = build_checkpoint(size, self.work / f"qwen2_5_vl-{size}", vocab=self.s.vocab,
                                                max_pixels=self.s.max_pixels, device=self.s.device, dtype=self.s.dtype)
            self.built[size] = json.loads((self._ckpt[size] / "acceptance.json").read_text())
            self.params[size] = self.built[size]["params"]
        return self._ckpt[size]

    def sync(self) -> None:
        import torch

        if self.s.device.startswith("cuda"):
            torch.cuda.synchronize()

    def reset_peak(self) -> None:
        import torch

        if self.s.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()

    def peak_gib(self) -> dict[str, float]:
        """Peak CUDA memory allocated since :meth:`reset_peak` (GPU), else the process's peak RSS."""
        import torch

        if self.s.device.startswith("cuda"):
            return {"peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
        return {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}

    def mfu(self, size: str, tokens: int, seconds: float) -> float:
        """Model-FLOPs utilisation 6·N·tokens / seconds / peak (N: all parameters)."""
        return float(f"{6 * self.params[size] * tokens / max(seconds, 1e-9) / PEAK_BF16_FLOPS:.4g}")

    def with_fallback(self, fn: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        """``fn(size)`` for the first size that fits; an out-of-memory error moves on to the next size
        (7B, then 3B) and is kept in ``fallback_from``. Other errors propagate at once."""
        tried: list[dict[str, Any]] = []
        for i, size in enumerate(self.s.sizes):
            try:
                out = fn(size)
                return {"model": size, "params": self.params.get(size), **out, **({"fallback_from": tried} if tried else {})}
            except Exception as e:
                if not is_oom(e) or i == len(self.s.sizes) - 1:
                    raise
                tried.append({"model": size, **error_record(e, 4)})
            # outside the except block: the traceback (and the failed attempt's tensors) is released by now
            self.policy = None
            free_memory()
        raise RuntimeError("no model size configured")


# ------------------------------------------------------------------------------------------ phases
def phase_sft(ctx: Context) -> dict[str, Any]:
    """One SFT optimizer step (kit TRL path, full fine-tuning) on one WeAgent-size trajectory."""

    def run(size: str) -> dict[str, Any]:
        import torch

        from kit.models.processor import load_image_only_processor
        from kit.train.sft import SFTTrainConfig, load_model, make_trainer
        from kit.train.sft_data import SFTCollator

        path = ctx.checkpoint(size)
        enc = ctx.s.encoder(load_image_only_processor(path))
        _, ex = sized_record(enc, ctx.work / "sft_ws", "sft-0", ctx.s.sft_tokens, ctx.s.sft_images, ctx.s.sft_image_px)
        cfg = SFTTrainConfig(max_steps=1, grad_accum=1, per_device_batch_size=1, warmup_ratio=0.0, lora_rank=0,
                             gradient_checkpointing=True, save_steps=10**6, logging_steps=1)  # paper rates
        model = load_model(path, "trl", cfg, dtype=ctx.torch_dtype())
        trainer = make_trainer(model, [ex], enc.pad_token_id, ctx.work / f"sft_{size}", cfg)
        # the Trainer saves a checkpoint when training ends: for a 7B with AdamW that is ~45 GB written to disk,
        # minutes of I/O and most of the GPU machine's 64 GiB; the step is what is measured here
        from transformers.trainer_utils import SaveStrategy

        trainer.args.save_strategy = SaveStrategy.NO
        seen: list[Any] = []
        inner = trainer.compute_loss

        def capture(model, inputs, *a, **kw):  # the mask the trainer really trains on, on its device
            seen.append((str(inputs["labels"].device), inputs["labels"].detach().ne(-100).cpu()))
            return inner(model, inputs, *a, **kw)

        trainer.compute_loss = capture
        ctx.reset_peak()
        t0 = time.perf_counter()
        trainer.train()
        ctx.sync()
        dt = time.perf_counter() - t0
        cpu_mask = SFTCollator(enc.pad_token_id)([ex])["labels"].ne(-100)
        logs = [h for h in trainer.state.log_history if "loss" in h]
        del trainer, model
        if not seen:
            raise RuntimeError("the trainer ran no training step")
        equal = bool(torch.equal(seen[0][1], cpu_mask) and torch.equal(cpu_mask[0], ex.loss_mask))
        return {"tokens": ex.num_tokens, "loss_tokens": ex.num_loss_tokens, "images": ctx.s.sft_images,
                "loss": logs[-1]["loss"] if logs else None, "step_s": round(dt, 3),
                "tokens_per_s": round(ex.num_tokens / dt, 1), "mfu": ctx.mfu(size, ex.num_tokens, dt),
                "mask_device": seen[0][0], "mask_equal_cpu": equal, **ctx.peak_gib()}

    return ctx.with_fallback(run)


def rl_loss_check(tr, path: Path, ctx: Context) -> dict[str, Any]:
    """Policy loss and token NLL of a 2-trajectory batch on the trainer's device and dtype against the
    same weights in float32 on CPU (old log-probs: the CPU ones, advantages +1 / -0.5)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from kit.models.tiny import quiet_hf_progress
    from kit.rl.logprobs import token_logprobs
    from kit.rl.objective import policy_loss, token_nll_loss
    from kit.train.sft_data import SFTEncoder

    # no tool block in the system turn: short rows keep the float32 CPU forward of a 7B to seconds
    enc = SFTEncoder(tr.policy.processor, tools=[])
    exs = [sized_record(enc, ctx.work / f"chk{i}", f"chk{i}", ctx.s.check_tokens, 1, 56, seed=i)[1] for i in range(2)]
    b = tr.collate(exs)
    tr.model.eval()
    with torch.no_grad():
        dev = token_logprobs(tr.model, b)
    with quiet_hf_progress():
        ref_model = AutoModelForImageTextToText.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        ref = token_logprobs(ref_model, b)
    del ref_model
    old, adv, w = ref.logp.detach(), [1.0, -0.5], [0.5, 0.5]
    loss_ref = float(policy_loss(tr.spec, ref.logp, old, ref.mask, adv, w)[0])
    loss_dev = float(policy_loss(tr.spec, dev.logp.float(), old.to(dev.logp.device), dev.mask, adv, w)[0])
    nll_ref, nll_dev = float(token_nll_loss(ref.logp, ref.mask)), float(token_nll_loss(dev.logp.float(), dev.mask))
    mask_eq = bool(torch.equal(dev.mask.cpu(), ref.mask))
    diff = (dev.logp.float().cpu() - ref.logp)[ref.mask].abs()
    # bf16 keeps 8 mantissa bits: ~0.4% per value; through a deep random model token NLLs agree to ~1-3%
    tol = {"loss_atol": 1e-2, "nll_rtol": 3e-2}
    ok = mask_eq and abs(loss_dev - loss_ref) <= tol["loss_atol"] and abs(nll_dev - nll_ref) <= tol["nll_rtol"] * abs(nll_ref)
    return {"check_tokens": [int(e.num_tokens) for e in exs], "loss_device": loss_dev, "loss_cpu_fp32": loss_ref,
            "nll_device": nll_dev, "nll_cpu_fp32": nll_ref, "logp_max_abs_diff": float(diff.max()) if diff.numel() else 0.0,
            "mask_equal": mask_eq, "tolerance": tol, "loss_equal_cpu": bool(ok)}


def phase_rl(ctx: Context) -> dict[str, Any]:
    """One FA-GSPO update of the kit's RL trainer on a group of 8 trajectories (hand-made rollouts)."""

    def run(size: str) -> dict[str, Any]:
        from kit.harness.episode import Task
        from kit.rl.eligibility import check
        from kit.rl.rewards import RewardBreakdown
        from kit.rl.rollout import RolloutBatch, Trajectory
        from kit.rl.trainer import RLConfig, RLTrainer

        path = ctx.checkpoint(size)
        cfg = RLConfig(algorithm="fa_gspo", group_size=len(ctx.s.rl_lengths), prompts_per_step=1, micro_batch=1,
                       device=ctx.s.device, dtype=ctx.s.dtype)
        task = Task(id="acceptance", question="Which year did the bridge open?", answers=["1937"])
        # rl_update trains on the given group and never searches: no backend is needed
        tr = RLTrainer(path, None, [task], ctx.work / f"rl_{size}", cfg, labels=["acceptance"],  # type: ignore[arg-type]
                       harness_config=ctx.s.harness_config())
        gc_on = ctx.s.device.startswith("cuda")
        if gc_on:  # RLConfig has no switch: without recomputation a 32k-token backward does not fit
            tr.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        check_out = rl_loss_check(tr, path, ctx)
        row, lengths = [], []
        for i, n in enumerate(ctx.s.rl_lengths):
            rec, ex = sized_record(tr.encoder, ctx.work / f"rl_ws{i}", f"rl{i}", n, 1, 56, seed=100 + i,
                                   answer="1937" if i % 2 == 0 else "1936")
            lengths.append(ex.num_tokens)
            r = 1.0 if i % 2 == 0 else 0.1 * i / len(ctx.s.rl_lengths)
            row.append(Trajectory(rec, 0, RewardBreakdown(r, r, 1.0, 0.0), check(rec, r)))
        batch = RolloutBatch(tasks=[task], groups=[row], wall_s=0.0)
        ctx.reset_peak()
        t0 = time.perf_counter()
        m = tr.rl_update(batch, tr.schedule.knobs)
        ctx.sync()
        dt = time.perf_counter() - t0
        peak = ctx.peak_gib()
        del tr
        if m.get("skipped"):
            raise RuntimeError(f"the update was skipped: {m['skipped']} (exclusions {m.get('exclusions')})")
        upd, tokens = float(m["update_s"]), sum(lengths)
        return {"group": len(row), "lengths": lengths, "tokens": tokens, "loss": m["loss"], "grad_norm": m["grad_norm"],
                "trained_tokens": m["trained_tokens"], "step_s": round(dt, 3), "update_s": upd,
                "tokens_per_s": round(tokens / upd, 1), "mfu": ctx.mfu(size, tokens, upd),
                "gradient_checkpointing": gc_on, "loss_check": check_out,
                "loss_equal_cpu": check_out["loss_equal_cpu"], **peak}

    return ctx.with_fallback(run)


def _policy(ctx: Context, size: str):
    from kit.policy.transformers_policy import TransformersPolicy

    if ctx.policy is None or ctx.policy[0] != size:
        ctx.policy = None
        free_memory()
        ctx.policy = (size, TransformersPolicy(ctx.checkpoint(size), device=ctx.s.device, dtype=ctx.s.dtype,
                                               max_new_tokens=ctx.s.gen_tokens))
    return ctx.policy[1]


def phase_generation(ctx: Context) -> dict[str, Any]:
    """One harness episode of TransformersPolicy against the local web: tokens/s and time to first token."""
    import asyncio

    if not ctx.zim:
        raise PhaseSkipped("no ZIM archive: pass --zim or set MMSEARCH_KIT_DATA (docs/gpu.md)")

    def run(size: str) -> dict[str, Any]:
        from kit.harness.episode import Task
        from kit.harness.loop import Harness
        from kit.types import SamplingParams
        from kit.web.zim import LocalZimWeb

        policy = _policy(ctx, size)
        turns: list[dict[str, Any]] = []
        inner = policy._generate_blocking

        def timed(*a):  # every generation of the episode, with the policy's own timings
            t = inner(*a)
            turns.append({"completion": t.usage.completion_tokens, "prompt": t.usage.prompt_tokens, **t.raw})
            return t

        policy._generate_blocking = timed
        try:
            img = ctx.work / "gen_input.png"
            long_record(ctx.work / "gen_img", "img", 8, 1, 224)
            img.write_bytes((ctx.work / "gen_img" / "user_image_1.png").read_bytes())
            cfg = ctx.s.harness_config(max_turns=2, max_response_tokens=ctx.s.gen_tokens)
            harness = Harness(policy, LocalZimWeb(ctx.zim), cfg, sampling=SamplingParams(temperature=1.0, seed=0),
                              labels=["acceptance"])
            ws = ctx.work / f"gen_ws_{size}"
            rec = asyncio.run(harness.run(Task(id="acceptance", question="Who recorded the album shown here?",
                                               input_images=[str(img)]), ws))
            first = next(i for i, m in enumerate(rec.messages) if m.role == "assistant")
            ctx.sync()
            t0 = time.perf_counter()  # time to first token: prefill of the first turn's prompt, one new token
            asyncio.run(policy.generate(rec.messages[:first], harness.schemas, SamplingParams(temperature=0, max_tokens=1),
                                        str(ws)))
            ttft = time.perf_counter() - t0
        finally:
            policy._generate_blocking = inner
        gen = turns[:-1] or turns  # the last one is the time-to-first-token probe
        n, s = sum(t["completion"] for t in gen), sum(t["generate_s"] for t in gen)
        return {"episode_status": rec.status, "turns": rec.turns, "generations": len(gen), "completion_tokens": n,
                "prompt_tokens_max": max(t["prompt"] for t in gen), "tokens_per_s": round(n / max(s, 1e-9), 2),
                "ttft_s": round(ttft, 4), "ttft_prompt_tokens": turns[-1]["prompt"], **ctx.peak_gib()}

    return ctx.with_fallback(run)


def phase_vfold(ctx: Context) -> dict[str, Any]:
    """V-Fold pages (kit.vfold renderer, Table 8 layout) through the vision tower: pages/s, vision tokens per page."""

    def run(size: str) -> dict[str, Any]:
        import torch

        from kit.vfold.render import default_renderer

        t0 = time.perf_counter()
        pages = []
        for k in range(ctx.s.vfold_pages):  # distinct text per page, like stale observations of one history
            pages += default_renderer().render(filler(1500, 500 + k)).pages[:1]
        render_s = time.perf_counter() - t0
        policy = _policy(ctx, size)
        vis = policy.processor.image_processor(images=[p.convert("RGB") for p in pages], return_tensors="pt")
        pv = vis["pixel_values"].to(ctx.s.device, policy.model.dtype)
        grid = vis["image_grid_thw"].to(ctx.s.device)
        merge = int(policy.spatial_merge_size)
        with torch.inference_mode():
            policy.model.get_image_features(pv[: int(grid[0].prod())], grid[:1])  # warm-up (kernels, allocator)
            ctx.sync()
            ctx.reset_peak()
            t1 = time.perf_counter()
            feats = policy.model.get_image_features(pv, grid)
            ctx.sync()
            dt = time.perf_counter() - t1
        emb = feats.pooler_output if hasattr(feats, "pooler_output") else feats
        n_out = sum(int(x.shape[0]) for x in emb) if isinstance(emb, (list, tuple)) else int(emb.shape[0])
        per_page = (grid.prod(-1) // merge**2).tolist()
        if n_out != sum(per_page):
            raise RuntimeError(f"vision tower returned {n_out} features for {sum(per_page)} page tokens")
        return {"pages": len(pages), "page_px": list(pages[0].size), "render_s": round(render_s, 3),
                "vision_s": round(dt, 4), "pages_per_s": round(len(pages) / dt, 2),
                "vision_tokens_per_page": round(sum(per_page) / len(per_page), 1), **ctx.peak_gib()}

    try:
        return ctx.with_fallback(run)
    finally:
        ctx.policy = None  # the last phase that shares the policy


def phase_unsloth(ctx: Context) -> dict[str, Any]:
    """Unsloth's vision SFT step beside TRL's on the same batch (scripts/gpu_check_sft.py)."""
    import importlib.util

    import torch

    if importlib.util.find_spec("unsloth") is None:
        raise PhaseSkipped("unsloth not importable: the package is not installed (docs/gpu.md)")
    if not torch.cuda.is_available():
        raise PhaseSkipped("unsloth not importable: it needs a CUDA GPU")
    try:
        import unsloth  # noqa: F401
    except Exception as e:
        raise PhaseSkipped(f"unsloth not importable: {type(e).__name__}: {e}") from e
    from gpu_check_sft import compare_backends

    from kit.models.processor import load_image_only_processor

    ctx.policy = None  # the generation policy, when V-Fold did not run to release it
    free_memory()

    def run(size: str) -> dict[str, Any]:
        path = ctx.checkpoint(size)
        enc = ctx.s.encoder(load_image_only_processor(path))
        _, ex = sized_record(enc, ctx.work / "uns_ws", "uns-0", ctx.s.unsloth_tokens, 4, 448)
        return compare_backends(path, [ex], enc.pad_token_id, steps=3, lora=16, out=ctx.work / f"uns_{size}")

    return ctx.with_fallback(run)


PHASE_FNS = {"sft": phase_sft, "rl": phase_rl, "generation": phase_generation, "vfold": phase_vfold,
             "unsloth": phase_unsloth}


def acceptance(mode: str, *, budget_s: float, phases=PHASES, zim: list[Path] | None = None,
               work: Path | None = None) -> dict[str, Any]:
    """Run the phases of ``mode`` and return the report (see module doc)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    t0 = time.perf_counter()
    report: dict[str, Any] = {"schema": 1, **environment(mode), "budget_s": budget_s,
                              "peak_bf16_tflops": PEAK_BF16_FLOPS / 1e12,
                              "flops_note": "MFU = 6*N*tokens/step_s/peak; N = all parameters (embeddings and vision "
                                            "tower included); attention FLOPs and activation recomputation left out"}
    if zim is None:
        from kit.paths import zim_paths

        found = zim_paths()
        zim = [min(found, key=lambda p: p.stat().st_size)] if found else []
    with tempfile.TemporaryDirectory(prefix="gpu_acceptance_", dir=work) as tmp:
        ctx = Context(mode, Path(tmp), zim)
        report["phases"] = run_phases([(p, PHASE_FNS[p]) for p in phases], ctx, budget_s=budget_s,
                                      min_s=ctx.s.phase_min_s, t0=t0)
        report["models"] = {k: {"params": v["params"], "build_s": v["build_s"], "config": ARCH_CONFIGS[k]}
                            for k, v in ctx.built.items()}
    report["zim"] = [str(p) for p in zim]
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["ok"] = all(p["status"] == "ok" or (n == "unsloth" and p["status"] == "skipped")
                       for n, p in report["phases"].items())
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=sorted(MODES), default="gpu")
    ap.add_argument("--out", default=str(ROOT / "results" / "gpu" / "report.json"))
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for all phases (gpu 480, cpu 120)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    ap.add_argument("--zim", action="append", default=None, help="ZIM archive for the generation phase (repeatable)")
    ap.add_argument("--workdir", default=None, help="folder for the random-weight checkpoints (default: temp)")
    a = ap.parse_args(argv)
    phases = [p for p in a.phases.split(",") if p]
    bad = [p for p in phases if p not in PHASES]
    if bad:
        ap.error(f"unknown phase(s) {bad}; expected {PHASES}")
    if a.mode == "gpu" and "unsloth" in phases:
        try:  # Unsloth patches transformers and TRL: it must be imported before them
            import unsloth  # noqa: F401
        except Exception:
            pass  # the unsloth phase records why
    if a.workdir:
        Path(a.workdir).mkdir(parents=True, exist_ok=True)
    budget = a.budget_s if a.budget_s is not None else (480.0 if a.mode == "gpu" else 120.0)
    report = acceptance(a.mode, budget_s=budget, phases=phases, zim=[Path(z) for z in a.zim] if a.zim else None,
                        work=Path(a.workdir) if a.workdir else None)
    text = json.dumps(report, indent=1, default=str)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
