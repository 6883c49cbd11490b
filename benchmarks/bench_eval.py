"""Evaluation performance targets (issue: evaluation), printed as figures and a final ``BENCH {json}``
line; exits 1 when a target is missed, 2 without the shared data.

1. Rule judge throughput: predictions judged per second, per mode, on answers of the real local
   benchmark samples (FVQA, LiveVQA, InfoSeek). Every prediction string is distinct, so the
   normalization cache only helps with references, as in a real evaluation. Target: >= 10,000/s.
2. Resume cost: a finished evaluation (scripted demonstrator on the local ZIM web, local benchmark
   files, 2 configurations x 2 repeats) is run again in the same folder; the second call only reads
   the episodes back, re-judges and rewrites predictions. Target: < 5 % of the first run.
   The demonstrator's episodes are far cheaper than a model's, so this ratio is an upper bound for
   model runs.

    python benchmarks/bench_eval.py [--n 60000] [--limit 4]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import Summary  # noqa: E402

from kit.eval.configs import make_configs  # noqa: E402
from kit.eval.judges import PerceptualImageJudge, RuleJudge  # noqa: E402
from kit.eval.runner import load_benchmarks, run_evaluation  # noqa: E402
from kit.paths import shared_data_dir, zim_paths  # noqa: E402


def judge_throughput(n: int, seed: int = 0) -> dict[str, float]:
    loaded = asyncio.run(load_benchmarks(["fvqa", "livevqa", "infoseek"], image_dir=tempfile.mkdtemp(prefix="bench_img_")))
    tasks = [t for lr in loaded.values() for t in lr.tasks]
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        t = rng.choice(tasks)
        other = rng.choice(tasks)
        ans = rng.choice(t.answers)
        tail = "".join("!?.,;:-()/"[int(d)] for d in str(i))  # distinct string, same normalized answer
        pred = rng.choice([f"The answer is {ans} (#{i}).", f"{other.answers[0]} #{i}", f"{ans}{tail}",
                           f"<think>checking</think>I believe it is {ans}, see <IMG: search_image_{i % 7}.jpg> [{i}]"])
        cases.append((pred, t.answers))
    out = {}
    for mode in ("exact", "contains", "f1"):
        judge = RuleJudge(mode)
        t0 = time.perf_counter()
        hits = sum(judge.score(p, refs).correct for p, refs in cases)
        dt = time.perf_counter() - t0
        out[mode] = n / dt
        print(f"rule judge [{mode:8s}]: {n:,} predictions in {dt:.3f} s = {n / dt:,.0f} predictions/s "
              f"({hits:,} judged correct)")
    l1 = [t for t in tasks if t.metadata.get("rule_mode") == "choice"]
    ch_cases = [(f"{rng.choice('ABCDE')}. option text {i}", t) for i, t in enumerate(rng.choice(l1) for _ in range(n))]
    judge = RuleJudge()
    t0 = time.perf_counter()
    for p, t in ch_cases:
        judge.judge_task(t, p)
    dt = time.perf_counter() - t0
    out["choice"] = n / dt
    print(f"rule judge [choice  ]: {n:,} predictions in {dt:.3f} s = {n / dt:,.0f} predictions/s")
    return out


async def resume_cost(limit: int) -> tuple[float, float, int]:
    from kit.policy.demonstrator import DemonstratorPolicy
    from kit.web.cache import CachedBackend, ToolCache
    from kit.web.zim import LocalZimWeb

    web = LocalZimWeb(zim_paths())
    with tempfile.TemporaryDirectory(prefix="bench_eval_") as tmp:
        tmp = Path(tmp)
        loaded = await load_benchmarks(["fvqa", "livevqa", "infoseek", "vistarget_zim", "mmbrowsecomp"], limit=limit,
                                       web=web, image_dir=tmp / "img")
        configs = make_configs("smoke", ["direct", "harness"])

        async def once():
            t0 = time.perf_counter()
            oc = await run_evaluation(loaded, configs, policy=DemonstratorPolicy(),
                                      backend=CachedBackend(web, ToolCache(tmp / "cache.sqlite")),
                                      private_backend=CachedBackend(web, ToolCache(tmp / "private" / "cache.sqlite")),
                                      out_dir=tmp / "out", private_dir=tmp / "private", repeats=2,
                                      image_judge=PerceptualImageJudge())
            return time.perf_counter() - t0, oc

        first, oc1 = await once()
        second, oc2 = await once()
        assert oc2.new_episodes == 0 and len(oc2.items) == len(oc1.items)
        return first, second, len(oc1.items)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=60_000, help="predictions per judge mode")
    ap.add_argument("--limit", type=int, default=4, help="tasks per benchmark in the resume measurement")
    args = ap.parse_args()
    summary = Summary("bench_eval")
    if shared_data_dir() is None:
        print("no shared data folder (set MMSEARCH_KIT_DATA): cannot run on the real benchmark files")
        return summary.skip("no shared data folder")
    rates = judge_throughput(args.n)
    worst = min(rates.values())
    summary.target("judge_slowest_mode_per_s", worst, ">=", 10_000)
    summary.figure("judge_per_s", rates)
    print(f"target >= 10,000 predictions/s: slowest mode {worst:,.0f}/s -> {'PASS' if worst >= 10_000 else 'FAIL'}")
    first, second, n_items = asyncio.run(resume_cost(args.limit))
    ratio = second / first
    print(f"full evaluation: {n_items} episodes in {first:.2f} s; resuming the finished run: {second:.3f} s "
          f"= {100 * ratio:.2f} % of the run -> {'PASS' if ratio < 0.05 else 'FAIL'} (target < 5 %)")
    summary.target("resume_fraction_of_run", ratio, "<", 0.05)
    summary.figure("episodes", n_items)
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
