"""Functions split into named steps stay within 80 lines (def line to last line, nested functions included)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPLIT = [("kit/harness/sandbox/interpreter.py", "_execute"), ("kit/hub/publish.py", "plan_run"),
         ("kit/harness/parsing.py", "decode_json_object"), ("kit/eval/runner.py", "run_evaluation"),
         ("kit/data/rl_filter.py", "resolve_filter_setup")]


@pytest.mark.parametrize(("path", "name"), SPLIT)
def test_function_at_most_80_lines(path, name):
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    fns = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    assert fns, f"{name} not in {path}"
    for fn in fns:
        assert fn.end_lineno - fn.lineno + 1 <= 80, f"{path}:{name} is {fn.end_lineno - fn.lineno + 1} lines"
