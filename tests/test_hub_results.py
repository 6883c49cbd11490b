"""scripts/render_results.py: the README results section between markers and CITATION.cff from results/."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from kit.paths import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
import render_results as rr  # noqa: E402


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "proj"
    run = r / "results" / "06_evaluation"
    (run / "runs" / "x").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"created": "2026-11-30T08:00:00Z", "git": {"commit": "a" * 40, "dirty": False},
                                                   "seed": 3, "labels": ["smoke"],
                                                   "config": {"notebook": "06_evaluation", "profile": "smoke"}}))
    (run / "runs" / "x" / "manifest.json").write_text("{}")  # nested: not a run of its own
    (run / "table1.md").write_text("| Configuration | FVQA |\n|---|---|\n| Full harness | 50.00 ± 0.00 |\n")
    (run / "06_evaluation.ipynb").write_text("{}")
    seq = r / "results" / "smoke"
    seq.mkdir()
    (seq / "manifest.json").write_text(json.dumps({"kind": "sequence", "created": "2026-12-01T00:00:00Z"}))
    (r / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "0.2.0"\n')
    (r / "README.md").write_text(f"# X\n\nintro\n\n{rr.START}\nold\n{rr.END}\n\n## After\n")
    (r / "CITATION.cff").write_text("cff-version: 1.2.0\ntitle: x\nversion: 0.1.0\nauthors:\n  - name: someone\n")
    return r


def test_render_write_and_check(root):
    section = rr.render_section(root / "results")
    assert "### [06_evaluation](" in section and "| Full harness | 50.00 ± 0.00 |" in section
    assert "seed 3" in section and "not model quality" in section and "06_evaluation.ipynb" in section
    assert section.count("### ") == 1  # the sequence manifest and nested manifests are not runs
    script = PROJECT_ROOT / "scripts" / "render_results.py"
    assert subprocess.run([sys.executable, str(script), "--root", str(root), "--check"]).returncode == 1
    assert subprocess.run([sys.executable, str(script), "--root", str(root), "--write"], capture_output=True).returncode == 0
    readme = (root / "README.md").read_text()
    assert readme.startswith("# X\n\nintro\n\n" + rr.START) and readme.endswith(rr.END + "\n\n## After\n") and "old" not in readme
    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    assert cff["version"] == "0.2.0" and cff["commit"] == "a" * 40 and str(cff["date-released"]) == "2026-11-30"
    assert cff["authors"] == [{"name": "someone"}]
    assert subprocess.run([sys.executable, str(script), "--root", str(root), "--check"]).returncode == 0


def test_malformed_markers():
    with pytest.raises(ValueError, match="malformed"):
        rr.replace_section(f"{rr.END}\n{rr.START}", "x")
    assert rr.replace_section("# T\n", "S").endswith("## Results\n\nS\n")
