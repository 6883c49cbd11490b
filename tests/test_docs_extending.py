"""docs/extending.md: every extension point is listed with its function, and every example runs as written.

Each ```python block of the page is executed in its own interpreter, in a fresh folder (a block may write files
there), with at most 15 non-blank lines; the examples end in ``assert`` lines, so an example whose claim stops
being true fails here, not in a reader's hands.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"
MAX_LINES = 15
#: the extension points issue 30 names, each a "## " heading of the page
POINTS = ("tool", "tool set", "context strategy", "hook", "policy", "search backend", "judge", "benchmark loader",
          "policy loss", "advantage estimator", "reward", "recipe")


def _blocks() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    out = []
    heading = ""
    for part in re.split(r"(^## .*$)", text, flags=re.M):
        if part.startswith("## "):
            heading = part[3:].strip()
            continue
        out += [(heading, b) for b in re.findall(r"^```python\n(.*?)^```", part, flags=re.S | re.M)]
    return out


def test_every_extension_point_has_a_section_with_an_example():
    blocks = _blocks()
    headings = {h.lower() for h, _ in blocks}
    missing = [p for p in POINTS if not any(h.startswith(p) for h in headings)]
    assert not missing, f"docs/extending.md has no example section for {missing}"


def test_examples_are_short():
    long = {h: n for h, b in _blocks() if (n := sum(1 for line in b.splitlines() if line.strip())) > MAX_LINES}
    assert not long, f"examples over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize("heading,code", _blocks(), ids=[h for h, _ in _blocks()])
def test_example_runs(heading, code, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"example {heading!r} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
