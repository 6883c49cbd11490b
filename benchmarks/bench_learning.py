"""Learning you can see on a CPU: SFT and RL against a learning-rate-0 control on the local web (issue 33).

    .venv/bin/python benchmarks/bench_learning.py [--quick] [--workers 2] [--out results/learning]

From one warm start (the tiny random-weight Qwen2-VL the kit builds offline, imitating the rule-based
demonstrator as :mod:`kit.rl.warmstart` does for the smoke profile, but shortened so that RL has headroom), for
each of 3 seeds:

* **SFT** on demonstrator trajectories of the train tasks (:func:`kit.rl.warmstart.sft_warm_start`, the kit's
  masked token loss) against the same steps at learning rate 0: held-out format compliance, tool-call validity and
  masked loss (:func:`kit.train.sft_eval.evaluate_sft`, greedy generations on the held-out tasks' demonstrations);
* **FA-GSPO** (WeAgent §6.2, reward 0.9 C + 0.1 F) and **GRPO** (POINTS-Seeker §3.2.4, reward 0.7 / 0.2 / 0.1)
  through the kit's trainer (:class:`kit.rl.trainer.RLTrainer`, rollouts through the harness on the local ZIM web)
  against a control at learning rate 0 on the same rollout seeds: reward mean, format rate, eligible fraction and
  tool calls per episode per step;
* **FA-GSPO vs vanilla GSPO** (self-recovery off, no runtime filter) on the same seeds: eligible fraction, dropped
  trajectories and reward (the direction of WeAgent Table 3, measured, whatever it shows).

Tasks: the train claim checks of :mod:`kit.data.learning_tasks` (yes/no: a barely trained policy gets mixed group
rewards); the SFT held-out set is the held-out claim and title tasks. The learning-rate-0 control: ``RLConfig``
refuses ``lr <= 0`` (its validator), so the control trainer is built with the trained run's learning rate and its
optimizer's learning rate is then set to 0 (every other part of the step runs: rollouts, scoring, old log-probs,
loss, backward, clipping, ``AdamW.step`` with lr 0 leaves the weights as they are). SFT's control passes
``lr=0.0`` to the warm-start loop (AdamW accepts it).

Runs are independent processes (``--workers``, one torch thread each: :data:`THREADS`); each run prints its
rollout, scoring (+ encoding and old log-probs) and update time per step. Writes ``results/learning/``:
``learning.json`` (every step of every run, the settings, the verdicts), ``learning.md`` (the tables) and
``reward_curves.png`` (train reward vs step, each method beside its control, mean ± seed range). Exit status 1
when a trained run is not better than its control by :data:`MARGINS` (mean over seeds), 2 without the shared data.
**Tiny-model CPU results**: they show the training paths learn in the right direction, not model quality.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import Summary  # noqa: E402

ARCHIVES = ("wikipedia_en_100_mini_2022-10", "wikipedia_en_ray_charles_2015-06", "wikipedia_en_ray_charles_maxi_2023-09")
#: the rollouts' harness (the smoke RL's: one regular turn with web_search, then the verdict)
HARNESS = {"max_turns": 1, "tools_enabled": ["web_search"]}
#: torch intra-op threads per run (tiny model: more threads only oversubscribe; kit.rl.warmstart.WARM_START_THREADS)
THREADS = 1
#: the RL algorithms and the controls they are compared with (method -> (algorithm, learning rate 0?))
RL_METHODS = {"fa_gspo": ("fa_gspo", False), "fa_gspo_lr0": ("fa_gspo", True), "grpo": ("grpo", False),
              "grpo_lr0": ("grpo", True), "gspo": ("gspo", False)}
#: how much better than its control a trained run must be (mean over seeds of trained - control), picked from the
#: seed spread measured on 2 cores (docs/benchmarks.md, 2026-12-04): RL: train reward over the last third of the steps
#: (per-seed gaps FA-GSPO -0.08..+0.19, mean +0.09; GRPO +0.06..+0.19, mean +0.13: the margin is about half the
#: mean gap, the noise of 16 samples a step); SFT: held-out masked loss (nats per token) lower by (gaps 0.70..0.81)
MARGINS = {"rl_reward": 0.05, "sft_loss": 0.2}


@dataclass(frozen=True)
class Sizes:
    """Budgets: warm start (compacted steps, batch 4; full-context steps, batch 1), SFT (the same two stages), RL
    (steps of ``prompts`` prompts x ``group`` samples), seeds."""

    warm_steps: int
    warm_full_steps: int
    sft_steps: int
    sft_full_steps: int
    rl_steps: int
    group: int
    prompts: int
    seeds: int
    rl_lr: float
    sft_lr: float = 5e-3
    temperature: float = 1.0
    sft_from: int = 60  # the SFT arm starts from this checkpoint of the warm start (see warm_start)
    rl_tasks: int = 4  # the first N train claim checks are the RL prompts (0: all 19): a fixed set, so the
    # train reward of step k and k+1 is measured on the same prompts


#: the full run: the warm start is shorter than the smoke profile's 300 + 300 (the RL student there is at 300 + 150):
#: sampled at temperature 1 it writes a complete verdict in about 60% of the rollouts, so format and correctness
#: both have headroom. RL learning rate 5e-4 (measured on seed 0: 2e-3 collapses the format to 0 within 6 steps,
#: 1e-4 moves nothing visible in 12)
FULL = Sizes(warm_steps=300, warm_full_steps=100, sft_steps=40, sft_full_steps=20, rl_steps=12, group=4, prompts=4,
             seeds=3, rl_lr=5e-4)
#: development: one seed, few steps (the same warm start, reused from --work when it is there)
QUICK = replace(FULL, sft_steps=10, sft_full_steps=5, rl_steps=4, prompts=2, seeds=1)

_WEB = None


def _web():
    """The local web over :data:`ARCHIVES` (one per process)."""
    global _WEB
    if _WEB is None:
        from kit.web import local_zim_paths, open_local_web

        _WEB = open_local_web(local_zim_paths(names=list(ARCHIVES)))
        _WEB.ensure_ready()
    return _WEB


def _harness_config():
    from kit.harness.config import HarnessConfig

    return HarnessConfig.smoke(**HARNESS)


def _tools():
    from kit.harness.toolsets import config_tool_specs

    return [s.schema() for s in config_tool_specs(_harness_config()).values()]


def _threads():
    import torch

    torch.set_num_threads(THREADS)
    os.environ["OMP_NUM_THREADS"] = str(THREADS)


# ------------------------------------------------------------------------------------------ preparation
def demonstrations(model_path: Path, out: Path) -> dict[str, list]:
    """The demonstrator's trajectories (smoke harness, local web) on the train tasks (claims and titles) and the
    held-out ones; only records the SFT encoder can train on are kept (answered, trainable)."""
    from kit.data.learning_tasks import load_learning_tasks
    from kit.harness.loop import Harness
    from kit.harness.runner import run_batch
    from kit.policy.demonstrator import DemonstratorPolicy
    from kit.policy.tokens import counter_for

    pol = DemonstratorPolicy(token_counter=counter_for(model_path))
    out_recs = {}
    for split in ("train", "heldout"):
        tasks = load_learning_tasks(split, kinds=["claim", "title"])
        recs = asyncio.run(run_batch(Harness(pol, _web(), _harness_config(), labels=["smoke", "scripted-demonstrator"]),
                                     tasks, out / f"demos_{split}", progress=False))
        out_recs[split] = [r for r in recs if r.trainable]
    return out_recs


def warm_start(model_path: Path, demos: list, out: Path, sizes: Sizes) -> tuple[Path, Path]:
    """The shared warm start (:func:`kit.rl.warmstart.sft_warm_start`, shortened: :class:`Sizes`). Returns
    ``(rl_start, sft_start)``: its last checkpoint (every RL run starts there) and its checkpoint at step
    ``sft_from`` of the compacted stage (the SFT arm starts there: from the last one, further SFT on the 38 train
    demonstrations only over-fits them, measured on seed 0: held-out loss 1.58 -> 1.62 at lr 5e-4, 1.85 at 5e-3,
    tool-call validity 0.92 -> 0.21 at 5e-3, so the SFT arm would show nothing but over-fitting)."""
    from kit.rl.warmstart import sft_warm_start

    total = sizes.warm_steps + sizes.warm_full_steps
    last, early = out / f"step_{total:04d}", out / f"step_{sizes.sft_from:04d}"
    if (last / "config.json").exists() and (early / "config.json").exists():  # an earlier run's --work folder
        print(f"warm start: reusing {last} and {early}", flush=True)
        return last, early
    w = sft_warm_start(model_path, demos, out, steps=sizes.warm_steps, full_steps=sizes.warm_full_steps, lr=5e-3,
                       tools=_tools(), seed=0, threads=THREADS, save_at=(sizes.sft_from,))
    print(f"warm start: {sizes.warm_steps}+{sizes.warm_full_steps} steps on {len(demos)} demonstrations, "
          f"{w['tokens']['total']:,} tokens, {w['train_s']:.0f} s, loss {w['losses'][0]:.2f} -> {w['losses'][-1]:.2f}",
          flush=True)
    return w["checkpoints"][total], w["checkpoints"][sizes.sft_from]


# ------------------------------------------------------------------------------------------ one run (a worker)
def _evaluate(path: Path, records: list) -> dict:
    import torch
    from transformers import AutoModelForImageTextToText

    from kit.models.processor import load_image_only_processor
    from kit.train.sft_data import SFTEncoder
    from kit.train.sft_eval import evaluate_sft

    model = AutoModelForImageTextToText.from_pretrained(str(path), dtype=torch.float32)
    enc = SFTEncoder(load_image_only_processor(path), tools=_tools())
    r = evaluate_sft(model, enc, records, max_new_tokens=96, max_turns_per_record=2)
    return {k: r[k] for k in ("loss", "format_compliance", "tool_call_validity", "generations", "calls")}


def run_sft(job: dict) -> dict:
    """SFT from the warm start on the train demonstrations (order shuffled by seed) at ``lr`` (0: the control),
    then the held-out evaluation."""
    import random

    from kit.harness.runner import read_episodes
    from kit.rl.warmstart import sft_warm_start

    _threads()
    t0 = time.process_time()
    demos = list(read_episodes(Path(job["train_demos"])))
    demos = [r for r in demos if r.trainable]
    random.Random(job["seed"]).shuffle(demos)
    held = [r for r in read_episodes(Path(job["heldout_demos"])) if r.trainable]
    s = job["sizes"]
    w = sft_warm_start(job["start"], demos, job["out"], steps=s["sft_steps"], full_steps=s["sft_full_steps"],
                       lr=job["lr"], full_lr=job["lr"] / 2, tools=_tools(), seed=job["seed"], threads=THREADS)
    after = _evaluate(w["checkpoints"][s["sft_steps"] + s["sft_full_steps"]], held)
    return {**job, "after": after, "train_s": w["train_s"], "cpu_s": time.process_time() - t0,
            "losses": w["losses"]}


def _tool_calls(run: Path, step: int) -> float:
    from kit.harness.runner import read_episodes

    recs = list(read_episodes(run / "rollouts" / f"step_{step:05d}" / "episodes.jsonl"))
    return sum(sum(m.role == "tool" for m in r.messages) for r in recs) / max(len(recs), 1)


def run_rl(job: dict) -> dict:
    """``rl_steps`` steps of the trainer (:class:`kit.rl.trainer.RLTrainer`) from the warm start; a control sets
    its optimizer's learning rate to 0 after construction (``RLConfig`` refuses ``lr <= 0``)."""
    from kit.data.learning_tasks import load_learning_tasks
    from kit.rl.trainer import RLConfig, RLTrainer

    _threads()
    t0 = time.process_time()
    s = job["sizes"]
    algo, control = RL_METHODS[job["method"]]
    cfg = RLConfig(algorithm=algo, group_size=s["group"], prompts_per_step=s["prompts"], lr=s["rl_lr"],
                   temperature=s["temperature"], micro_batch=s["group"], seed=job["seed"], save_every=10**6)
    tasks = load_learning_tasks("train", kinds=["claim"])
    tasks = tasks[:s["rl_tasks"]] if s["rl_tasks"] else tasks
    run = Path(job["out"])
    tr = RLTrainer(job["start"], _web(), tasks, run, cfg, harness_config=_harness_config(), labels=["smoke"])
    if control:
        for g in tr.opt.param_groups:
            g["lr"] = 0.0
    rows = []
    for _ in range(s["rl_steps"]):
        m = asyncio.run(tr.train_step())
        n = m["rollout_trajectories"]
        upd = float(m.get("update_s") or 0.0)
        rows.append({"step": m["step"], "reward_mean": m["rollout_reward_mean"], "correct_rate": m["rollout_correct_rate"],
                     "format_rate": m["rollout_format_rate"], "eligible_frac": m["rollout_eligible"] / max(n, 1),
                     "dropped_trajectories": n - m["rollout_eligible"],
                     "dropped_groups": (m.get("groups") or {}).get("dropped_groups"),
                     "tool_calls_per_episode": _tool_calls(run, m["step"]), "skipped": m.get("skipped"),
                     "rollout_s": m["rollout_rollout_s"], "update_s": upd,
                     "scoring_s": max(0.0, m["step_s"] - m["rollout_rollout_s"] - upd), "step_s": m["step_s"]})
        print(f"  {job['method']} seed {job['seed']} step {m['step']}: reward {rows[-1]['reward_mean']:.3f} "
              f"format {rows[-1]['format_rate']:.2f} eligible {rows[-1]['eligible_frac']:.2f} | rollout "
              f"{rows[-1]['rollout_s']:.1f} s, scoring+old log-probs {rows[-1]['scoring_s']:.1f} s, update "
              f"{upd:.1f} s{' (' + m['skipped'] + ')' if m.get('skipped') else ''}", flush=True)
    return {**job, "steps": rows, "cpu_s": time.process_time() - t0}


def _run(job: dict) -> dict:
    t = time.perf_counter()
    out = run_sft(job) if job["kind"] == "sft" else run_rl(job)
    out["wall_s"] = time.perf_counter() - t
    return out


# ------------------------------------------------------------------------------------------ aggregation
def _tail(rows: list[dict], key: str) -> float:
    """Mean of ``key`` over the last third of the steps (at least one)."""
    k = max(1, len(rows) // 3)
    return statistics.fmean(r[key] for r in rows[-k:])


def _spread(xs: list[float]) -> dict:
    return {"mean": statistics.fmean(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def aggregate(results: list[dict], before: dict) -> dict:
    """Per method: the metrics before/after (mean and seed range), the control beside it, CPU seconds, verdicts."""
    by = {}
    for r in results:
        by.setdefault(r["method"], []).append(r)
    for v in by.values():
        v.sort(key=lambda r: r["seed"])
    out: dict = {"sft": {}, "rl": {}, "verdicts": {}}
    for m in ("sft", "sft_lr0"):
        if m in by:
            out["sft"][m] = {k: _spread([r["after"][k] for r in by[m]]) for k in
                             ("loss", "format_compliance", "tool_call_validity")}
            out["sft"][m]["cpu_s"] = sum(r["cpu_s"] for r in by[m])
    out["sft"]["before"] = before
    if "sft" in by and "sft_lr0" in by:
        gaps = [c["after"]["loss"] - t["after"]["loss"] for t, c in zip(by["sft"], by["sft_lr0"])]
        out["verdicts"]["sft_vs_lr0_loss"] = {"gap": _spread(gaps), "margin": MARGINS["sft_loss"],
                                              "met": statistics.fmean(gaps) >= MARGINS["sft_loss"]}
    keys = ("reward_mean", "format_rate", "correct_rate", "eligible_frac", "tool_calls_per_episode")
    for m, runs in by.items():
        if m.startswith("sft"):
            continue
        out["rl"][m] = {"first": {k: _spread([r["steps"][0][k] for r in runs]) for k in keys},
                        "last_third": {k: _spread([_tail(r["steps"], k) for r in runs]) for k in keys},
                        "dropped_trajectories": _spread([sum(s["dropped_trajectories"] for s in r["steps"]) for r in runs]),
                        "skipped_steps": _spread([sum(bool(s["skipped"]) for s in r["steps"]) for r in runs]),
                        "cpu_s": sum(r["cpu_s"] for r in runs),
                        "time_per_step_s": {k: statistics.fmean(s[k] for r in runs for s in r["steps"])
                                            for k in ("rollout_s", "scoring_s", "update_s", "step_s")}}
    for m in ("fa_gspo", "grpo"):
        if m in by and f"{m}_lr0" in by:
            gaps = [_tail(t["steps"], "reward_mean") - _tail(c["steps"], "reward_mean")
                    for t, c in zip(by[m], by[f"{m}_lr0"])]
            out["verdicts"][f"{m}_vs_lr0_reward"] = {"gap": _spread(gaps), "margin": MARGINS["rl_reward"],
                                                     "met": statistics.fmean(gaps) >= MARGINS["rl_reward"]}
    if "fa_gspo" in by and "gspo" in by:  # Table 3's direction: reported, never a pass/fail
        out["table3"] = {k: {"fa_gspo": out["rl"]["fa_gspo"]["last_third"][k]["mean"],
                             "gspo": out["rl"]["gspo"]["last_third"][k]["mean"]}
                         for k in ("eligible_frac", "reward_mean", "correct_rate")}
        out["table3"]["dropped_trajectories"] = {m: out["rl"][m]["dropped_trajectories"]["mean"] for m in ("fa_gspo", "gspo")}
    return out


def _fmt(s: dict) -> str:
    return f"{s['mean']:.3f} [{s['min']:.3f}, {s['max']:.3f}]" if s["n"] > 1 else f"{s['mean']:.3f}"


def markdown(agg: dict, sizes: Sizes, wall_s: float, workers: int) -> str:
    lines = ["# bench_learning (tiny-model CPU results: training direction, not model quality)", "",
             f"Sizes: {asdict(sizes)}; {workers} worker process(es), {THREADS} torch thread each; wall {wall_s:.0f} s.",
             "Values: mean over seeds [min, max].", "", "## SFT (held-out demonstrations)", "",
             "| metric | before (warm start) | SFT after | lr 0 after |", "|---|---|---|---|"]
    sft = agg["sft"]
    for k in ("loss", "format_compliance", "tool_call_validity"):
        if "sft" in sft and "sft_lr0" in sft:
            lines.append(f"| {k} | {sft['before'][k]:.3f} | {_fmt(sft['sft'][k])} | {_fmt(sft['sft_lr0'][k])} |")
    lines += ["", "## RL (train reward; first step -> mean over the last third of the steps)", "",
              "| method | reward | format rate | correct rate | eligible fraction | tool calls / episode | dropped traj. | "
              "skipped steps | CPU s | rollout / scoring / update s per step |", "|---|---|---|---|---|---|---|---|---|---|"]
    for m, v in agg["rl"].items():
        f, t = v["first"], v["last_third"]
        ts = v["time_per_step_s"]
        lines.append(f"| {m} | {f['reward_mean']['mean']:.3f} -> {_fmt(t['reward_mean'])} | "
                     f"{f['format_rate']['mean']:.2f} -> {_fmt(t['format_rate'])} | {_fmt(t['correct_rate'])} | "
                     f"{_fmt(t['eligible_frac'])} | {_fmt(t['tool_calls_per_episode'])} | "
                     f"{_fmt(v['dropped_trajectories'])} | {_fmt(v['skipped_steps'])} | {v['cpu_s']:.0f} | "
                     f"{ts['rollout_s']:.1f} / {ts['scoring_s']:.1f} / {ts['update_s']:.1f} |")
    lines += ["", "## Verdicts (trained - control, mean over seeds; margins in benchmarks/bench_learning.py MARGINS)", ""]
    for k, v in agg["verdicts"].items():
        lines.append(f"* {k}: {_fmt(v['gap'])} (margin {v['margin']}) -> {'met' if v['met'] else 'MISSED'}")
    if "table3" in agg:
        lines += ["", "## FA-GSPO vs vanilla GSPO (WeAgent Table 3's direction, measured)", ""]
        lines += [f"* {k}: FA-GSPO {v['fa_gspo']:.3f}, GSPO {v['gspo']:.3f}" for k, v in agg["table3"].items()]
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path) -> None:
    """Train reward vs step per RL method (mean line, seed range band) with its lr-0 control dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("fa_gspo", ["fa_gspo", "fa_gspo_lr0", "gspo"]), ("grpo", ["grpo", "grpo_lr0"])]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (title, methods) in zip(axes, panels):
        for m in methods:
            runs = [r for r in results if r["method"] == m]
            if not runs:
                continue
            steps = [s["step"] for s in runs[0]["steps"]]
            ys = [[r["steps"][i]["reward_mean"] for r in runs] for i in range(len(steps))]
            mean = [statistics.fmean(y) for y in ys]
            (line,) = ax.plot(steps, mean, "--" if m.endswith("lr0") else "-", marker="o", ms=3,
                              label=m.replace("_lr0", " (lr 0 control)"))
            ax.fill_between(steps, [min(y) for y in ys], [max(y) for y in ys], color=line.get_color(), alpha=0.15)
        ax.set_title(f"{title}: train reward (tiny model, CPU)")
        ax.set_xlabel("RL step")
        ax.set_ylabel("reward mean")
        ax.legend(fontsize=8)
    fig.suptitle("bench_learning: tiny-model CPU results (mean over seeds, band = seed range)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, few steps (development)")
    ap.add_argument("--workers", type=int, default=2, help="runs in parallel (one torch thread each)")
    ap.add_argument("--out", default="results/learning")
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--methods", nargs="*", default=None,
                    help=f"only these runs (development; default all: {sorted(RL_METHODS)} sft sft_lr0)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override one of the sizes (e.g. --set rl_steps=20; fields of Sizes)")
    a = ap.parse_args()
    summary = Summary("bench_learning")
    from kit.paths import shared_data_dir

    if shared_data_dir() is None:
        return summary.skip("no shared data (the local ZIM web)")
    import tempfile

    from kit.models.tiny import build_tiny_checkpoint

    _threads()
    sizes = QUICK if a.quick else FULL
    for kv in a.set:
        k, _, v = kv.partition("=")
        if k not in Sizes.__dataclass_fields__:
            ap.error(f"--set: unknown size {k!r}; one of {sorted(Sizes.__dataclass_fields__)}")
        sizes = replace(sizes, **{k: type(getattr(sizes, k))(v)})
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.work) if a.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        tiny = build_tiny_checkpoint("qwen2_vl", vocab="local")
        t = time.perf_counter()
        demos = demonstrations(tiny, work)
        print(f"demonstrations: {len(demos['train'])} train, {len(demos['heldout'])} held-out "
              f"({time.perf_counter() - t:.0f} s)", flush=True)
        t, c = time.perf_counter(), time.process_time()
        start, sft_start = warm_start(tiny, demos["train"], work / "warm", sizes)
        before = _evaluate(sft_start, demos["heldout"])
        print(f"held-out at the RL start: {_evaluate(start, demos['heldout'])}", flush=True)
        prep_cpu = time.process_time() - c
        print(f"held-out before SFT (warm start step {sizes.sft_from}): {before} "
              f"({time.perf_counter() - t:.0f} s with the warm start)", flush=True)
        jobs = []
        base = {"sizes": asdict(sizes), "start": str(start), "train_demos": str(work / "demos_train" / "episodes.jsonl"),
                "heldout_demos": str(work / "demos_heldout" / "episodes.jsonl")}
        for seed in range(sizes.seeds):
            for m in (x for x in RL_METHODS if not a.methods or x in a.methods):
                jobs.append({**base, "kind": "rl", "method": m, "seed": seed, "out": str(work / f"{m}_s{seed}")})
            for m, lr in ((x, lr) for x, lr in (("sft", sizes.sft_lr), ("sft_lr0", 0.0))
                          if not a.methods or x in a.methods):
                jobs.append({**base, "kind": "sft", "method": m, "seed": seed, "lr": lr, "start": str(sft_start),
                             "out": str(work / f"{m}_s{seed}")})
        t = time.perf_counter()
        if a.workers > 1:
            import multiprocessing as mp

            with ProcessPoolExecutor(a.workers, mp_context=mp.get_context("spawn")) as ex:
                results = list(ex.map(_run, jobs))
        else:
            results = [_run(j) for j in jobs]
        runs_wall = time.perf_counter() - t
    wall = time.perf_counter() - t_all
    agg = aggregate(results, before)
    agg["prep_cpu_s"] = prep_cpu
    (out / "learning.json").write_text(json.dumps({"sizes": asdict(sizes), "margins": MARGINS, "threads": THREADS,
                                                   "workers": a.workers, "wall_s": wall, "runs_wall_s": runs_wall,
                                                   "summary": agg, "runs": results}, indent=1, default=str))
    md = markdown(agg, sizes, wall, a.workers)
    (out / "learning.md").write_text(md)
    plot(results, out / "reward_curves.png")
    print(md)
    print(f"wall {wall:.0f} s ({runs_wall:.0f} s for the runs), CPU {prep_cpu + sum(r['cpu_s'] for r in results):.0f} s; "
          f"wrote {out}/learning.json, learning.md, reward_curves.png")
    for k, v in agg["verdicts"].items():
        summary.check(k, v["gap"]["mean"], v["met"], f">= {v['margin']}")
    summary.figure("wall_s", wall)
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
