"""Notebook 04 (agentic SFT) runs headless under the smoke profile: the held-out loss goes down and
tool-call validity and format compliance rise versus the untrained tiny model (short-to-long context
curriculum, ~4-5 min on 2 cores)."""

from __future__ import annotations

import json

import pandas as pd
import pytest


@pytest.mark.slow
def test_notebook_04_smoke_runs_headless(tmp_path, data_dir):
    pytest.importorskip("trl", reason="trl is in the 'train' extra")
    from kit.cli import run_notebook

    out = tmp_path / "nb04"
    executed = run_notebook("04", "smoke", {"backend": "trl"}, out)
    assert executed.exists()
    for f in ["examples.csv", "train_log.csv", "before_after.csv", "before_after.md", "manifest.json",
              "episodes/episodes.jsonl"]:
        assert (out / f).exists(), f
    log = pd.read_csv(out / "train_log.csv")
    assert set(log.stage) == {"short", "full"} and log.step.is_monotonic_increasing
    for _, stage in log.groupby("stage"):  # each curriculum stage lowers its training loss
        assert stage.loss.iloc[-1] < stage.loss.iloc[0]
    assert ((log.masked_token_share > 0) & (log.masked_token_share < 1)).all()
    ba = pd.read_csv(out / "before_after.csv").set_index("metric")
    assert ba.loc["loss", "after"] < ba.loc["loss", "before"]
    assert ba.loc["generations", "after"] == 12  # 4 held-out trajectories x 3 turns
    # The untrained model writes no call; the trained one writes grammatical turns with calls in the full
    # harness context. Validity measured 0.42-0.58 (5-7 of 12 calls) across runs since calls cut inside a
    # string are 'truncated' instead of completed by json-repair (that counted them valid: 1.0 before);
    # the invalid ones are the third turn's web_extract URLs, which the tiny model cannot copy.
    assert ba.loc["tool_call_validity", "before"] == 0
    assert ba.loc["calls", "after"] >= 6 and ba.loc["tool_call_validity", "after"] >= 0.25
    assert ba.loc["format_compliance", "after"] >= 0.5 > ba.loc["format_compliance", "before"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["labels"] == ["smoke"] and manifest["config"]["backend"] == "trl"
    assert "Smoke profile" in (out / "before_after.md").read_text()
