"""Peak memory of the demo (notebook 01, smoke profile) — target <= 2 GB.

Runs the notebook headless in a child process and samples the resident memory (RSS) of the whole
process tree (CLI + Jupyter kernel + code sandboxes) every 50 ms; prints the peak and the wall time.

Run: .venv/bin/python benchmarks/bench_demo_memory.py [--episodes N]
Ends with one ``BENCH {json}`` line; exits 1 when the target is missed or the demo fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from benchlib import Summary

ROOT = Path(__file__).resolve().parent.parent


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=3)
    a = ap.parse_args()
    summary = Summary("bench_demo_memory")
    out = Path(tempfile.mkdtemp()) / "nb01"
    cmd = [sys.executable, "-m", "kit.cli", "notebook", "01", "--profile", "smoke", "-p", "n_episodes", str(a.episodes),
           "--out", str(out)]
    t = time.time()
    child = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc = psutil.Process(child.pid)
    peak = 0
    while child.poll() is None:
        peak = max(peak, tree_rss(proc))
        time.sleep(0.05)
    wall = time.time() - t
    log = child.stdout.read().decode(errors="replace")
    if child.returncode != 0:
        print(log[-3000:])
        print(f"demo failed with exit code {child.returncode}")
        summary.check("demo_exit_code", child.returncode, False, "== 0")
        return summary.finish()
    gb = peak / 2**30
    print(f"[demo memory] notebook 01 smoke, {a.episodes} episodes: peak RSS of the process tree {gb:.2f} GiB, "
          f"wall {wall:.0f} s (target <= 2 GB) -> {'PASS' if peak <= 2e9 else 'MISS'}")
    summary.target("peak_rss_bytes", peak, "<=", 2e9)
    summary.figure("wall_s", wall)
    summary.figure("episodes", a.episodes)
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
