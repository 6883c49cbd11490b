"""Notebook 03 (V-Fold rendering) runs headless under the smoke profile and writes its outputs."""

from __future__ import annotations

import json

import pandas as pd
import pytest


@pytest.mark.slow
def test_notebook_03_smoke_runs_headless(tmp_path, data_dir):
    from kit.cli import run_notebook

    out = tmp_path / "nb03"
    # 9 reads: boilerplate-free pages pass τ = 12,288 (7 no longer do)
    executed = run_notebook("03", "smoke", {"n_episodes": 1, "n_reads": 9, "processors": ["qwen2_vl", "qwen3_vl"]}, out)
    assert executed.exists()
    for f in ["tau_k_sweep.csv", "tau_k_sweep.md", "tau_k_sweep.html", "strategies.csv", "strategies.md",
              "strategies_per_turn.html", "bad_input.csv", "manifest.json", "episodes/episodes.jsonl",
              "rendered_sft/episodes.jsonl"]:
        assert (out / f).exists(), f
    sweep = pd.read_csv(out / "tau_k_sweep.csv")
    assert len(sweep) == 2 * 3 * 3 and set(sweep.tau) == {4096, 8192, 12288} and set(sweep.k) == {0, 2, 4}
    # a smaller τ folds earlier and saves more; a larger k keeps more text and saves less
    q = sweep[sweep.processor == "qwen2_vl"].set_index(["tau", "k"])["total_saving_%"]
    assert q[(4096, 2)] > q[(12288, 2)] > 0 and q[(8192, 0)] > q[(8192, 4)]
    assert (sweep["saving_per_folded_obs_%"] > 30).all()
    strategies = pd.read_csv(out / "strategies.csv", index_col=0)
    assert list(strategies.index) == ["no compression", "discard history", "summary (extractive, offline)",
                                      "render everything", "V-Fold (paper mode)", "V-Fold (kit mode)"]
    assert strategies.loc["no compression", "tokens saved, all turns (%)"] == 0
    assert strategies.loc["V-Fold (kit mode)", "tokens saved, all turns (%)"] > 0
    assert strategies.loc["V-Fold (paper mode)", "tokens saved, all turns (%)"] > 0
    # paper mode folds every stale observation; kit mode only those whose pages are smaller and lossless
    assert strategies.loc["V-Fold (paper mode)", "folded observations"] >= strategies.loc["V-Fold (kit mode)",
                                                                                          "folded observations"]
    bad = pd.read_csv(out / "bad_input.csv").set_index("case")
    assert bool(bad.loc["enormous (200k chars)", "truncated"]) and bad.loc["empty", "pages"] == 0
    assert "Smoke profile" in (out / "tau_k_sweep.md").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["labels"] == ["smoke"] and manifest["config"]["render_config"]["page_width"] == 595
    assert manifest["config"]["vfold_mode"] == "kit" and manifest["config"]["vfold"]["layout"] == "flowed"
    rendered = [json.loads(line) for line in (out / "rendered_sft" / "episodes.jsonl").read_text().splitlines()]
    assert rendered and "vfold_rendered" in rendered[0]["labels"]
    assert any(i["kind"] == "rendered_obs" for i in rendered[0]["images"])
