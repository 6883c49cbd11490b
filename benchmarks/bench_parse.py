"""Turn parsing stays linear on adversarial input (issue "Never silently wrong", part 1).

Times :func:`kit.harness.parsing.parse_turn` on 200k-character adversarial turns (deep braces or lists,
thousands of calls inside a response, unclosed calls, nested responses, a large json-repair case; the
inputs of tests/test_turn_grammar.py) against an ordinary 200k-character turn of well-formed calls,
interleaved in the same run so a busy neighbour slows both alike. Target: each adversarial turn at most
3x the ordinary one (+5 ms). Before the fix, deep braces took ~35 s (~300x) and 8k calls inside a
response ~0.7 s (~6x).

Usage: python benchmarks/bench_parse.py [--repeats N]
Prints one line per input, a ``bench_parse: ok|MISSED`` line and the final ``BENCH {json}`` line;
exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the inputs live in the test module

from benchlib import Summary  # noqa: E402

RATIO, SLACK_S = 3.0, 0.005


def best_times(texts: list[str], repeats: int) -> list[float]:
    from kit.harness.parsing import parse_turn

    best = [float("inf")] * len(texts)
    for _ in range(repeats):
        for i, text in enumerate(texts):
            t0 = time.perf_counter()
            parse_turn(text)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from tests.test_turn_grammar import adversarial_turns

    inputs, ordinary = adversarial_turns(200_000)
    summary = Summary("bench_parse")
    missed = []
    for name, text in inputs.items():
        took, base = best_times([text, ordinary], args.repeats)
        ok = summary.check(f"{name}_ms", 1000 * took, took <= RATIO * base + SLACK_S,
                           f"<= {RATIO:g} x ordinary ({1000 * base:.1f} ms) + {1000 * SLACK_S:g} ms")
        missed += [] if ok else [name]
        print(f"  {name:<30} {1000 * took:8.1f} ms  ordinary {1000 * base:7.1f} ms  ratio {took / base:5.2f}"
              f"  [{'target met' if ok else 'TARGET MISSED'}]", flush=True)
    print(f"bench_parse: {'ok' if not missed else 'MISSED ' + ','.join(missed)} (target <= {RATIO:g}x + {1000 * SLACK_S:g} ms)")
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
