"""Notebook 04 (agentic SFT) runs headless under the smoke profile and the held-out loss goes down
versus the untrained tiny model."""

from __future__ import annotations

import json

import pandas as pd
import pytest


@pytest.mark.slow
def test_notebook_04_smoke_runs_headless(tmp_path, data_dir):
    pytest.importorskip("trl", reason="trl is in the 'train' extra")
    from kit.cli import run_notebook

    out = tmp_path / "nb04"
    executed = run_notebook("04", "smoke", {"n_tasks": 4, "n_heldout": 1, "epochs": 10.0, "backend": "trl"}, out)
    assert executed.exists()
    for f in ["examples.csv", "train_log.csv", "before_after.csv", "before_after.md", "manifest.json",
              "episodes/episodes.jsonl"]:
        assert (out / f).exists(), f
    log = pd.read_csv(out / "train_log.csv")
    assert log.loss.iloc[-1] < log.loss.iloc[0]  # training lowers the loss (held-out check below)
    assert ((log.masked_token_share > 0) & (log.masked_token_share < 1)).all()
    ba = pd.read_csv(out / "before_after.csv").set_index("metric")
    assert ba.loc["loss", "after"] < ba.loc["loss", "before"]
    # Tool-call validity rising above the untrained model's is NOT yet reached in this smoke budget (0 -> 0
    # with 40 CPU steps); see the SFT report. Only the metric's range is checked here.
    assert 0 <= ba.loc["tool_call_validity", "after"] <= 1
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["labels"] == ["smoke"] and manifest["config"]["backend"] == "trl"
    assert "Smoke profile" in (out / "before_after.md").read_text()
