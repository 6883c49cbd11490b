"""Latency of the execute_code sandbox (kit.harness.code_exec, WeAgent Table 4).

Prints, all measured in this run:
  * baseline: spawning a bare ``python -I -c pass`` (what a one-process-per-call design pays per call);
  * sandbox start-up: first ``run("pass")`` on a fresh CodeSandbox (interpreter start + limits + call);
  * per-call overhead: median of N trivial calls on a warm sandbox, with an empty workspace and with
    one holding 1,000 files (the before/after file scan is part of every call);
  * concurrent throughput: trivial calls/s across 8 sandboxes in one event loop.

No targets (figures only); ends with one ``BENCH {json}`` line.

Usage: python benchmarks/bench_code_exec.py [--calls 50] [--starts 10]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchlib import Summary

from kit.harness.code_exec import CodeSandbox


async def bare_spawn(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        p = await asyncio.create_subprocess_exec(sys.executable, "-I", "-c", "pass")
        await p.wait()
        out.append(time.perf_counter() - t0)
    return out


async def startups(root: Path, n: int) -> list[float]:
    out = []
    for i in range(n):
        async with CodeSandbox(root / f"start{i}") as sb:
            t0 = time.perf_counter()
            r = await sb.run("pass")
            out.append(time.perf_counter() - t0)
            assert r.ok, r.stderr
    return out


async def per_call(ws: Path, n: int) -> list[float]:
    async with CodeSandbox(ws) as sb:
        await sb.run("pass")
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = await sb.run("pass")
            out.append(time.perf_counter() - t0)
            assert r.ok
        return out


async def concurrent(root: Path, boxes: int, calls: int) -> float:
    sbs = [CodeSandbox(root / f"conc{i}") for i in range(boxes)]
    try:
        await asyncio.gather(*(sb.run("pass") for sb in sbs))

        async def loop(sb):
            for _ in range(calls):
                await sb.run("x = 1")

        t0 = time.perf_counter()
        await asyncio.gather(*(loop(sb) for sb in sbs))
        return boxes * calls / (time.perf_counter() - t0)
    finally:
        await asyncio.gather(*(sb.close() for sb in sbs))


def ms(xs: list[float]) -> str:
    return f"median {statistics.median(xs) * 1e3:7.2f} ms  (min {min(xs) * 1e3:6.2f}, max {max(xs) * 1e3:7.2f})"


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--starts", type=int, default=10)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        base = await bare_spawn(a.starts)
        start = await startups(root, a.starts)
        calls = await per_call(root / "empty", a.calls)
        many = root / "many"
        many.mkdir()
        for i in range(1000):
            (many / f"f{i:04d}.txt").write_text("x")
        calls_many = await per_call(many, a.calls)
        rate = await concurrent(root, 8, a.calls)
    print(f"bare python spawn (baseline)      {ms(base)}")
    print(f"sandbox start-up (first call)     {ms(start)}  = {statistics.median(start) / statistics.median(base):.2f}x bare spawn")
    print(f"per-call overhead, empty ws       {ms(calls)}  = "
          f"{statistics.median(base) / statistics.median(calls):.1f}x faster than a spawn per call")
    print(f"per-call overhead, 1,000 files    {ms(calls_many)}")
    print(f"8 sandboxes concurrently          {rate:7.0f} trivial calls/s in total")
    summary = Summary("bench_code_exec")
    summary.figure("bare_spawn_ms", statistics.median(base) * 1e3)
    summary.figure("startup_ms", statistics.median(start) * 1e3)
    summary.figure("per_call_ms", statistics.median(calls) * 1e3)
    summary.figure("per_call_1000_files_ms", statistics.median(calls_many) * 1e3)
    summary.figure("concurrent_calls_per_s", rate)
    return summary.finish()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
