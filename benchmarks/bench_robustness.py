"""Robustness of the harness under attack, faults and load (issue "Harness under attack").

Prints, all measured in this run, against the issue's targets:
  * faults:  episodes completed with a recorded status / started, with random 429/5xx/resets/slow
             bodies/malformed JSON injected into the policy, search, page and summarizer servers
             (target: 100%);
  * attacks: attacks contained / tried in the execute_code sandbox (target: 0 escapes), next to the
             same battery on the rlimits-only fallback as the baseline (fork bomb not tried there
             when running as root: nothing would cap it);
  * fuzz:    hypothesis cases run / crashes over parse_turn, repair_call and whole episodes
             (target: >= 10,000 cases, 0 exceptions out of the loop);
  * crashes: episodes lost / duplicated / invalid lines after SIGKILLing a batch runner at random
             points and resuming (target: 0), and a ToolCache written by several processes while
             one is SIGKILLed (integrity);
  * load:    descriptors, processes, threads, temporary entries and sandbox folders left after
             rounds of 256 concurrent episodes on the local ZIM web, and RSS growth between the
             last two rounds (target: 0 leaks).

The workloads are the ones the tests run in a bounded size (tests/test_faults.py, test_sandbox.py,
test_fuzz.py, test_crash_safety.py, test_load.py); here they run full size.

Usage: python benchmarks/bench_robustness.py [--quick] [--only faults,attacks,fuzz,crash,load]
Ends with one ``BENCH {json}`` line (one target per section run); exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the workloads live in the test modules

from benchlib import Summary  # noqa: E402

SECTIONS = ("faults", "attacks", "crash", "load", "fuzz")


def line(label: str, value: str, ok: bool | None = None) -> None:
    mark = "" if ok is None else ("  [target met]" if ok else "  [TARGET MISSED]")
    print(f"  {label:<44} {value}{mark}", flush=True)


def bench_faults(work: Path, n: int) -> bool:
    from tests.test_faults import FAULT_WEIGHTS, fault_batch

    t0 = time.monotonic()
    res = asyncio.run(fault_batch(work / "faults", n=n, seed=int(time.time()) % 10_000, concurrency=32))
    ok = res["recorded"] == res["unique"] == res["lines_valid"] == res["started"]
    line("episodes completed / started under faults", f"{res['recorded']} / {res['started']}", ok)
    line("statuses", ", ".join(f"{k} {v}" for k, v in sorted(res["statuses"].items())))
    line("faults injected (requests)", f"{res['faults_injected']} requests drawn from "
         + ", ".join(f"{k} {v:.0%}" for k, v in FAULT_WEIGHTS.items()))
    line("wall time", f"{time.monotonic() - t0:.1f} s")
    return ok


def bench_attacks(work: Path) -> bool:
    from kit.harness.code_exec import bwrap_probe
    from tests.test_sandbox import attack_battery

    probe = bwrap_probe()
    ok = True
    if probe.available:
        res = asyncio.run(attack_battery(work / "attacks-bwrap", isolation="bwrap"))
        tried = [r for r in res if r["contained"] is not None]
        contained = [r for r in tried if r["contained"]]
        ok = len(contained) == len(tried)
        line("attacks contained / tried (bubblewrap)", f"{len(contained)} / {len(tried)}", ok)
        for r in tried:
            if not r["contained"]:
                line(f"  ESCAPED: {r['attack']}", r["detail"])
    else:
        line("bubblewrap", f"unavailable ({probe.detail}): only the fallback is measured", False)
        ok = False
    as_root = os.geteuid() == 0
    res = asyncio.run(attack_battery(work / "attacks-rlimits", isolation="rlimits", fork_bomb=not as_root))
    tried = [r for r in res if r["contained"] is not None]
    contained = [r for r in tried if r["contained"]]
    line("baseline: rlimits-only fallback", f"{len(contained)} / {len(tried)} contained"
         + ("  (fork bomb not tried as root)" if as_root else ""))
    line("  escapes on the fallback", ", ".join(r["attack"] for r in tried if not r["contained"]) or "none")
    return ok


def bench_fuzz(n_parse: int, n_struct: int, n_repair: int, n_episodes: int, target: int = 10_000) -> bool:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    import tests.test_fuzz as tf

    totals = {"cases": 0, "crashes": 0}
    examples: list[str] = []

    def campaign(name: str, strategy, check, n: int) -> None:
        count = {"cases": 0, "crashes": 0}

        @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(strategy)
        def run(x):
            count["cases"] += 1
            try:
                check(x)
            except Exception:  # noqa: BLE001 - counted and shown, never fatal to the campaign
                count["crashes"] += 1
                if len(examples) < 3:
                    examples.append(f"{name}: {repr(x)[:200]}\n{traceback.format_exc()[-800:]}")

        t0 = time.monotonic()
        run()
        totals["cases"] += count["cases"]
        totals["crashes"] += count["crashes"]
        line(f"  {name}", f"{count['cases']:,} cases, {count['crashes']} crashes, {time.monotonic() - t0:.1f} s")

    campaign("parse_turn (text calls)", tf.turn_text(), tf.check_parse, n_parse)
    campaign("parse_turn (structured calls)", tf.structured_turn(), lambda t: tf.check_parse(t.text, t.tool_calls), n_struct)
    campaign("repair_call", tf.call_arguments(), lambda a: tf.check_repair(*a), n_repair)
    campaign("Harness.run episodes", st.lists(tf.turns, min_size=1, max_size=3), tf.check_episode, n_episodes)
    ok = totals["cases"] >= target and totals["crashes"] == 0
    line("fuzz cases run / crashes", f"{totals['cases']:,} / {totals['crashes']}", ok)
    for ex in examples:
        print("    " + ex.replace("\n", "\n    "))
    return ok


def bench_crash(work: Path, n: int, kills: int) -> bool:
    from tests.test_crash_safety import concurrent_cache_writers, kill_resume_run

    t0 = time.monotonic()
    res = kill_resume_run(work / "crash", n=n, kills=kills, seed=int(time.time()) % 10_000, window=(1.0, 3.0))
    ok = res["finished"] and res["lost"] == res["duplicated"] == res["missing"] == res["invalid_lines"] == 0
    line("resumed run: lost / duplicated episodes", f"{res['lost']} / {res['duplicated']}", ok)
    line("  SIGKILLs / runs / episodes", f"{res['kills']} / {res['runs']} / {res['episodes']}, "
         f"missing {res['missing']}, invalid lines {res['invalid_lines']}, "
         f"sandbox processes left {res['leftover_processes']}, {time.monotonic() - t0:.1f} s")
    ok = ok and res["leftover_processes"] == 0
    cache = concurrent_cache_writers(work / "cache.sqlite", writers=6, n=300)
    cache_ok = cache["integrity"] == "ok" and cache["missing"] == 0 and cache["bad_values"] == 0 \
        and cache["victim_committed"] == cache["victim_expected"]
    line("ToolCache, 6 writers + 1 SIGKILLed", f"integrity {cache['integrity']}, {cache['entries']} entries, "
         f"missing {cache['missing']}, victim's committed {cache['victim_committed']}/{cache['victim_expected']}", cache_ok)
    return ok and cache_ok


def bench_load(work: Path, episodes: int, rounds: int) -> bool:
    from kit.paths import zim_paths
    from kit.web.zim import LocalZimWeb
    from tests.test_load import load_run

    paths = zim_paths()
    if not paths:
        line("load", "skipped: no ZIM archives (set MMSEARCH_KIT_DATA)", False)
        return False
    res = asyncio.run(load_run(LocalZimWeb(paths), work / "load", episodes=episodes, rounds=rounds))
    leaks = {k: res[k] for k in ("fds", "processes", "threads", "temp_entries", "scratch_dirs")}
    ok = all(v <= 0 for v in leaks.values()) and res["statuses"] == {"answered": res["episodes"]} \
        and res["code_failed"] == 0
    line(f"leaked after {rounds} x {episodes} concurrent episodes",
         ", ".join(f"{k} {max(v, 0)}" for k, v in leaks.items()), ok)
    line("  statuses / sandboxed code calls", f"{res['statuses']} / {res['code_calls']} ({res['code_failed']} failed)")
    line("  RSS growth, first to last round", f"{res['rss_growth_mb']} MiB (RSS after each round: "
         f"{', '.join(map(str, res['rss_rounds_mb']))} MiB), {res['seconds']} s")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run of the benchmark itself)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    args = ap.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}")
    q = args.quick
    results: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="kit-bench-robust-") as tmp:
        work = Path(tmp)
        for section in only:
            print(f"== {section}", flush=True)
            t0 = time.monotonic()
            if section == "faults":
                results[section] = bench_faults(work, 40 if q else 200)
            elif section == "attacks":
                results[section] = bench_attacks(work)
            elif section == "fuzz":
                results[section] = bench_fuzz(*((300, 100, 300, 30, 730) if q else (4_000, 2_000, 4_000, 500)))
            elif section == "crash":
                results[section] = bench_crash(work, *((20, 3) if q else (60, 8)))
            elif section == "load":
                results[section] = bench_load(work, 32 if q else 256, 2 if q else 3)
            print(f"  ({section}: {time.monotonic() - t0:.0f} s)", flush=True)
    missed = [s for s, ok in results.items() if not ok]
    print("== summary:", "all targets met" if not missed else f"targets missed in {missed}")
    summary = Summary("bench_robustness")
    for section, ok in results.items():
        summary.check(section, ok, ok, f"every {section} target above met")
    summary.figure("quick", q)
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
