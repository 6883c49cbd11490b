"""Import budget of the harness (issue 15 part 6): ``import kit.harness.loop`` in a fresh interpreter
stays under 1.5 s and pulls in none of the heavy optional stacks. The wall-clock check takes the best
of three runs so a loaded machine does not fail it; the ``sys.modules`` check is machine-independent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

BUDGET_S = 1.5
# Heavy stacks the hot path must not import: jsonschema (through its format checkers, rfc3987_syntax
# alone took 6.4 s), bm25s -> scipy, and the model stacks.
HEAVY = ("jsonschema", "rfc3987_syntax", "scipy", "bm25s", "torch", "transformers")

_PROBE = (
    "import importlib, json, sys\n"
    "for m in sys.argv[1:]:\n"
    "    importlib.import_module(m)\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {heavy})))\n"
)


def _probe(*modules: str) -> tuple[float, list[str]]:
    """Import ``modules`` in a fresh interpreter; returns (wall seconds, heavy top-level modules loaded)."""
    code = _PROBE.replace("{heavy}", repr(set(HEAVY)))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    return wall, json.loads(out.stdout.strip().splitlines()[-1])


# ``kit.models`` is left out on purpose: importing it registers the image-only processor with
# ``transformers.AutoProcessor`` (its documented side effect), so it must import transformers.
@pytest.mark.parametrize("module", [
    "kit", "kit.types",
    "kit.harness", "kit.harness.loop", "kit.harness.runner",
    "kit.web", "kit.vfold", "kit.policy", "kit.data", "kit.eval", "kit.hub", "kit.rl", "kit.train",
])
def test_public_imports_stay_light(module):
    _, heavy = _probe(module)
    assert heavy == [], f"`import {module}` loads heavy modules: {heavy}"


def test_harness_loop_import_budget():
    best = float("inf")
    for _ in range(3):
        wall, heavy = _probe("kit.harness.loop")
        assert heavy == [], f"`import kit.harness.loop` loads heavy modules: {heavy}"
        best = min(best, wall)
        if best <= BUDGET_S:
            break
    assert best <= BUDGET_S, f"`import kit.harness.loop` took {best:.2f} s (best of 3), budget {BUDGET_S} s"
