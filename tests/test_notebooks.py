"""Notebooks execute headless with Papermill under the smoke profile (the README's demo path)."""

from __future__ import annotations

import json

import nbformat
import pytest

from kit.paths import PROJECT_ROOT

NOTEBOOKS = sorted((PROJECT_ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stripped_and_parameterized(path):
    nb = nbformat.read(path, as_version=4)
    assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), "no cell tagged 'parameters'"
    for c in nb.cells:
        if c.cell_type == "code":
            assert not c.outputs and c.execution_count is None, f"{path.name}: outputs not stripped"


@pytest.mark.slow
def test_notebook_01_smoke_runs_headless(tmp_path, data_dir):
    from kit.cli import run_notebook

    out = tmp_path / "nb01"
    executed = run_notebook("01", "smoke", {"n_episodes": 2}, out)
    assert executed.exists()
    for f in ["summary.csv", "summary.md", "manifest.json", "model/episodes.jsonl", "demonstrator/episodes.jsonl"]:
        assert (out / f).exists(), f
    assert len(list((out / "demonstrator" / "transcripts").glob("*.html"))) == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["smoke"] is True and manifest["labels"] == ["smoke"]
    assert "Smoke-profile results" in (out / "summary.md").read_text()
    recs = [json.loads(line) for line in (out / "demonstrator" / "episodes.jsonl").read_text().splitlines()]
    assert all(r["status"] == "answered" and r["cited_images"] for r in recs)
