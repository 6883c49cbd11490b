"""Benchmarks end with one machine-readable ``BENCH {json}`` line and exit non-zero when a target is
missed (issue 15 part 7), through the one helper ``benchmarks/benchlib.py``.

The benchmarks themselves are too long for the test suite: the helper is tested directly and in a
real subprocess, and every script is checked (by ``ast``) to end through it.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import benchlib  # noqa: E402
from benchlib import Summary, parse_line  # noqa: E402

SCRIPTS = sorted(BENCH.glob("bench_*.py"))


def test_targets_met_and_missed(capsys):
    s = Summary("bench_x")
    assert s.target("ratio", np.float64(12.5), ">=", 10) is True
    assert s.target("empty", 0, "==", 0) is True
    s.figure("qps", np.int64(1716))
    assert s.finish() == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("BENCH ")
    body = parse_line(out[0])
    assert body == {"name": "bench_x", "met": True, "figures": {"qps": 1716},
                    "targets": {"ratio": {"value": 12.5, "target": ">= 10", "met": True},
                                "empty": {"value": 0, "target": "== 0", "met": True}}}

    s = Summary("bench_x")
    s.target("ratio", 7.6, ">=", 10)
    s.target("agreement", 0.9, ">=", 0.85)
    assert s.finish() == 1
    body = parse_line(capsys.readouterr().out)
    assert body["met"] is False and body["targets"]["ratio"]["met"] is False


def test_non_finite_value_is_null_and_misses(capsys):
    s = Summary("bench_x")
    assert s.target("p99_ms", float("nan"), "<=", 10) is False
    assert s.finish() == 1
    line = capsys.readouterr().out.strip()
    assert "NaN" not in line and parse_line(line)["targets"]["p99_ms"]["value"] is None


def test_skip_and_figures_only(capsys):
    assert Summary("bench_x").skip("no shared data") == 2
    body = parse_line(capsys.readouterr().out)
    assert body["met"] is None and body["skipped"] == "no shared data"
    s = Summary("bench_y")
    s.figure("per_call_ms", 1.2)
    assert s.finish() == 0


def test_bad_records_are_refused():
    s = Summary("bench_x")
    s.target("a", 1, "<=", 2)
    with pytest.raises(ValueError, match="twice"):
        s.figure("a", 3)
    with pytest.raises(ValueError, match="comparison"):
        s.target("b", 1, "=<", 2)
    with pytest.raises(TypeError):
        s.figure("c", object())
    with pytest.raises(ValueError):
        parse_line("bench_parse: ok\n")


def test_a_missed_target_fails_the_process(tmp_path):
    script = tmp_path / "bench_fake.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(BENCH)!r})\n"
        "from benchlib import Summary\n"
        "s = Summary('bench_fake')\n"
        "s.target('ratio', float(sys.argv[1]), '>=', 10)\n"
        "print('targets NOT met' if not s.met else 'met')\n"
        "sys.exit(s.finish())\n")
    for value, rc in (("12", 0), ("7.6", 1)):
        out = subprocess.run([sys.executable, str(script), value], capture_output=True, text=True, timeout=60)
        assert out.returncode == rc, out.stderr
        last = out.stdout.strip().splitlines()[-1]
        assert json.loads(last.removeprefix("BENCH "))["met"] is (rc == 0)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_every_benchmark_ends_through_the_helper(script):
    tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "benchlib"]
    assert imports, f"{script.name} does not use benchmarks/benchlib.py"
    names = [n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Summary"
             and n.args and isinstance(n.args[0], ast.Constant)]
    assert names == [script.stem], f"{script.name}: Summary(...) should be named {script.stem!r}, got {names}"
    ends = {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
    assert "finish" in ends, f"{script.name} never calls summary.finish()"
    main_guard = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    assert main_guard and "sys.exit(" in ast.unparse(main_guard[0]), \
        f"{script.name}: the exit status of main() must reach the shell (sys.exit(main()))"


def test_helper_is_the_only_summary_writer():
    # one place: no script prints its own BENCH line
    for script in SCRIPTS:
        assert not re.search(r"""print\(\s*f?["']BENCH""", script.read_text(encoding="utf-8")), script.name
    assert benchlib.PREFIX == "BENCH "
