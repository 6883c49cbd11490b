"""The learning curves of issue 33 (kit.learning_plots) and the learning benchmark's tables
(benchmarks/bench_learning.py aggregate / markdown) on synthetic runs: no model, no web, well under a second each."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from kit.learning_plots import (  # noqa: E402
    load_learning_results,
    notebook_rl_runs,
    plot_reward_curves,
    plot_rl_vs_control,
    plot_sft_before_after,
    sft_table,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _steps(rewards, status="max_turns_synthesis", answered=1.0):
    return [{"step": i, "reward_mean": r, "format_rate": 0.5, "correct_rate": r, "eligible_frac": 1.0,
             "tool_calls_per_episode": 1.0, "dropped_trajectories": 0, "skipped": None if r else "no_advantage_signal",
             "statuses": {status: 16}, "answered_frac": answered, "rollout_s": 1.0, "scoring_s": 0.5, "update_s": 1.0,
             "step_s": 2.5} for i, r in enumerate(rewards)]


def _results():
    out = []
    for seed in range(2):
        up = [0.2, 0.3, 0.4, 0.5 + 0.1 * seed, 0.6, 0.6]
        flat = [0.2, 0.25, 0.2, 0.2, 0.25 - 0.1 * seed, 0.2]
        for m, rw, kw in (("fa_gspo", up, {}), ("grpo", up, {}), ("fa_gspo_lr0", flat, {"cpu_shared": True}),
                          ("grpo_lr0", flat, {"cpu_shared": True}),
                          ("gspo", [0.0] * 6, {"status": "budget_exhausted", "answered": 0.0})):
            st = {k: v for k, v in kw.items() if k in ("status", "answered")}
            out.append({"method": m, "seed": seed, "steps": _steps(rw, **st), "cpu_s": 10.0, "pid": seed,
                        **{k: v for k, v in kw.items() if k == "cpu_shared"}})
    sft = {"loss": 1.5, "format_compliance": 0.25, "tool_call_validity": 0.0}
    for seed in range(2):
        out.append({"method": "sft", "seed": seed, "after": sft, "cpu_s": 1.0, "pid": seed})
        out.append({"method": "sft_lr0", "seed": seed, "after": {**sft, "loss": 2.3, "format_compliance": 0.0},
                    "cpu_s": 1.0, "pid": seed})
    return out


def test_reward_curves_and_notebook_figures_are_written(tmp_path):
    res = _results()
    plot_reward_curves(res, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    committed = {"runs": res, "summary": {"sft": {"before": {"loss": 2.3, "format_compliance": 0.0,
                                                             "tool_call_validity": 0.0},
                                                  "sft": {k: {"mean": 1.5} for k in ("loss", "format_compliance",
                                                                                     "tool_call_validity")},
                                                  "sft_lr0": {k: {"mean": 2.3} for k in ("loss", "format_compliance",
                                                                                         "tool_call_validity")}}}}
    history = [{"step": 0, "kind": "opd", "rollout_reward_mean": 0.1},
               {"step": 1, "kind": "rl", "rollout_reward_mean": 0.2},
               {"step": 2, "kind": "rl", "rollout_reward_mean": float("nan")},
               {"step": 3, "kind": "rl", "rollout_reward_mean": 0.4}]
    assert [s["step"] for s in notebook_rl_runs(history)[0]["steps"]] == [1, 3]  # no OPD, no NaN step
    assert notebook_rl_runs([]) == []
    for c in (committed, None):
        plot_rl_vs_control(history, c, tmp_path / "rl.png")
        assert (tmp_path / "rl.png").exists()
        plot_sft_before_after({"loss": 2.0, "format_compliance": 0.0}, {"loss": 1.0, "format_compliance": 0.5}, c,
                              tmp_path / "sft.png")
        assert (tmp_path / "sft.png").exists()
    rows = sft_table({"loss": 2.0}, {"loss": 1.0}, committed)
    assert rows[0] == {"metric": "loss", "before": 2.0, "after": 1.0, "bench before": 2.3, "bench SFT after": 1.5,
                       "bench lr 0 after": 2.3}
    assert set(sft_table(None, None)[0]) == {"metric", "before", "after"}


def test_load_learning_results_reads_the_committed_file_or_gives_none(tmp_path):
    assert load_learning_results(tmp_path / "missing.json") is None
    committed = load_learning_results()
    if committed is not None:
        assert {"runs", "summary", "sizes"} <= set(committed)


def test_bench_tables_report_per_seed_gaps_episode_ends_and_the_gspo_reason():
    pytest.importorskip("benchlib")
    import bench_learning as B

    agg = B.aggregate(_results(), {"loss": 2.3, "format_compliance": 0.0, "tool_call_validity": 0.0})
    v = agg["verdicts"]["fa_gspo_vs_lr0_reward"]
    assert v["met"] and v["seeds_above"] == 2 and len(v["per_seed"]) == 2
    assert agg["rl"]["gspo"]["ends"] == {"statuses": {"budget_exhausted": 192}, "answered_frac": 0.0}
    assert agg["rl"]["fa_gspo_lr0"]["cpu_shared"] and not agg["rl"]["fa_gspo"]["cpu_shared"]
    agg["time"] = {"prep_cpu_s": 1.0, "cpu_s": 100.0, "worker_cpu_s": [50.0, 49.0], "idle_estimate_s": 51.0}
    md = B.markdown(agg, B.QUICK, 60.0, 2)
    assert "## How the episodes end" in md and "budget_exhausted 192" in md
    assert "2/2 seeds above the control" in md and "(shared)" in md
    assert "no episode answers" in md.lower() or "No episode answers" in md


def test_idle_estimate_deals_the_jobs_cpu_to_two_cores_whatever_the_workers():
    pytest.importorskip("benchlib")
    import bench_learning as B

    rows = [{"pid": 1, "cpu_s": 5.0, "job": "lr0_s0", "job_cpu_s": 10.0, "method": "fa_gspo_lr0", "seed": 0},
            {"pid": 1, "cpu_s": 5.0, "job": "lr0_s0", "job_cpu_s": 10.0, "method": "grpo_lr0", "seed": 0},
            {"pid": 2, "cpu_s": 4.0, "job": "gspo_s0", "job_cpu_s": 4.0, "method": "gspo", "seed": 0},
            {"pid": 3, "cpu_s": 3.0, "job": "sft_s0", "job_cpu_s": 3.0, "method": "sft", "seed": 0},
            {"pid": 4, "cpu_s": 3.0, "job": "sft_lr0_s0", "job_cpu_s": 3.0, "method": "sft_lr0", "seed": 0}]
    t = B._timing(rows, 1.0)
    assert t["cpu_s"] == 21.0 and t["worker_cpu_s"] == [10.0, 4.0, 3.0, 3.0]
    assert t["idle_estimate_s"] == 1.0 + 10.0  # core 1: lr0 (10); core 2: gspo, sft, sft_lr0 (10)
