"""Notebook 07 runs headless under the smoke profile: plans, publishes the committed evaluation run to an
in-process Hub, downloads the cache snapshot by tag and replays the evaluation offline with identical scores."""

from __future__ import annotations

import json

import pytest

from kit.paths import PROJECT_ROOT


@pytest.mark.slow
def test_notebook_07_smoke(tmp_path, data_dir, monkeypatch):
    from kit.cli import run_notebook

    src = PROJECT_ROOT / "results" / "smoke" / "06_evaluation"
    if not (src / "predictions").is_dir():
        pytest.skip("results/smoke/06_evaluation is not committed in this checkout")
    monkeypatch.setenv("HF_TOKEN", "hf_notebookSevenToken123456")
    out = tmp_path / "nb"
    run_notebook("07", "smoke", {"source_run": str(src), "tag": "smoke-test"}, out)
    for f in ("publish_plan.txt", "published.json", "replay.md", "manifest.json", "07_publish.ipynb"):
        assert (out / f).exists(), f
    published = json.loads((out / "published.json").read_text())
    assert {p["kind"] for p in published} == {"results", "cache"} and all(p["tag"] == "smoke-test" for p in published)
    manifest = json.loads((out / "manifest.json").read_text())
    rep = manifest["replay"]
    assert rep["identical"] and rep["items"] > 0 and rep["cache_misses"] == 0
    assert "predictions/" in (out / "publish_plan.txt").read_text()
    for f in out.rglob("*"):
        if f.is_file():
            assert b"hf_notebookSevenToken123456" not in f.read_bytes(), f
