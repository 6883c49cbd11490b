"""WeAgent equation (2) and the run aggregation, pinned on hand-worked examples; report files."""

from __future__ import annotations

import math

import pytest

from kit.eval.metrics import ItemResult, eq2_rates, mean_std, run_scores, table1, tool_use, vistarget_table
from kit.eval.report import figure6, fmt_cell, tool_use_figure, tool_use_frame, write_figure, write_table1


def it(score=0.0, cited=False, match=None, *, bench="vistarget", config="harness", repeat=0, target=True, **kw):
    return ItemResult(benchmark=bench, config=config, repeat=repeat, task_id=kw.pop("task_id", "t"), episode_id="e",
                      status=kw.pop("status", "answered"), score=score, correct=score >= 0.5, cited=cited,
                      match=match, has_target=target, **kw)


def test_eq2_hand_worked():
    items = [it(1, True, True),    # A=1 I=1 M=1
             it(0, True, True),    # A=0 I=1 M=1
             it(1, True, False),   # A=1 I=1 M=0
             it(1, False, False),  # A=1 I=0 M=0
             it(0, False, False)]  # A=0 I=0 M=0
    r = eq2_rates(items)
    assert r["accuracy"] == pytest.approx(3 / 5)
    assert r["image_cite"] == pytest.approx(3 / 5)
    assert r["target_match"] == pytest.approx(2 / 3)      # Σ M / Σ I
    assert r["match_acc"] == pytest.approx(1 / 2)         # Σ A·M / Σ M
    assert (r["n"], r["n_cited"], r["n_match"]) == (5, 3, 2)


def test_eq2_empty_conditioning_sets_are_zero():
    none_cited = eq2_rates([it(1, False, False), it(0, False, False)])
    assert none_cited["accuracy"] == 0.5 and none_cited["image_cite"] == 0.0
    assert none_cited["target_match"] == 0.0 and none_cited["match_acc"] == 0.0
    cited_no_match = eq2_rates([it(1, True, False), it(1, True, False)])
    assert cited_no_match["image_cite"] == 1.0 and cited_no_match["target_match"] == 0.0
    assert cited_no_match["match_acc"] == 0.0
    empty = eq2_rates([])
    assert all(empty[k] == 0.0 for k in ("accuracy", "image_cite", "target_match", "match_acc")) and empty["n"] == 0


def test_eq2_match_requires_a_citation_and_undecided_is_no_match():
    r = eq2_rates([it(1, False, True), it(1, True, None), it(0, True, True)])
    # item 1: a match without a valid citation cannot count (M_i = 0 when nothing valid is cited)
    # item 2: undecided image verdict counts as no match
    assert r["n_match"] == 1 and r["target_match"] == pytest.approx(1 / 2) and r["match_acc"] == 0.0


def test_eq2_with_fractional_scores():
    r = eq2_rates([it(0.5, True, True), it(1.0, True, True)])  # token-F1 judge: A_i in [0, 1]
    assert r["accuracy"] == pytest.approx(0.75) and r["match_acc"] == pytest.approx(0.75)


def test_mean_std():
    assert mean_std([10, 20, 30]) == (20.0, 10.0, 3)  # sample standard deviation (ddof = 1)
    assert mean_std([42.0]) == (42.0, 0.0, 1)
    mu, sd, k = mean_std([])
    assert math.isnan(mu) and math.isnan(sd) and k == 0


def _table_items():
    items = []
    # config c1: b1 run0 = 1/2, run1 = 0/2; b2 run0 = run1 = 2/2
    for r, b1 in ((0, [1, 0]), (1, [0, 0])):
        items += [it(s, bench="b1", config="c1", repeat=r, target=False) for s in b1]
        items += [it(1, bench="b2", config="c1", repeat=r, target=False) for _ in range(2)]
    # config c2 has only b1
    items += [it(1, bench="b1", config="c2", repeat=0, target=False)]
    return items


def test_table1_mean_std_and_avg():
    rows = {r["config"]: r for r in table1(_table_items(), ["b1", "b2"], ["c1", "c2"])}
    c1 = rows["c1"]
    assert c1["b1"]["mean"] == pytest.approx(25.0) and c1["b1"]["std"] == pytest.approx(math.sqrt(2 * 25 ** 2))
    assert c1["b2"] == {"mean": 100.0, "std": 0.0, "runs": 2}
    # Avg: per-run mean over benchmarks (75, 50), then mean ± std over runs
    assert c1["avg"]["mean"] == pytest.approx(62.5) and c1["avg"]["std"] == pytest.approx(math.sqrt(2 * 12.5 ** 2))
    assert math.isnan(rows["c2"]["avg"]["mean"]) and rows["c2"]["b2"]["runs"] == 0  # missing column: no Avg.
    scores = run_scores(_table_items())
    assert scores[("c1", "b1", 0)] == {"tasks": 2, "accuracy": 0.5, "judge_errors": 0, "episode_errors": 0}


def test_vistarget_table_per_run_then_mean():
    items = [it(1, True, True, repeat=0), it(0, False, False, repeat=0),
             it(1, True, False, repeat=1), it(1, True, True, repeat=1),
             it(1, bench="fvqa", target=False)]  # tasks without a target image do not count
    (row,) = vistarget_table(items)
    assert row["n"] == 2
    assert row["accuracy"]["mean"] == pytest.approx(75.0)       # runs: 50, 100
    assert row["image_cite"]["mean"] == pytest.approx(75.0)     # runs: 50, 100
    assert row["target_match"]["mean"] == pytest.approx(75.0)  # runs: 100, 50
    assert row["match_acc"]["mean"] == pytest.approx(100.0) and row["match_acc"]["std"] == 0.0


def test_tool_use():
    items = [it(bench="b", target=False, turns=3, tool_calls=2, tool_counts={"web_search": 2}),
             it(bench="b", target=False, turns=5, tool_calls=4, tool_counts={"web_search": 1, "web_extract": 3})]
    (row,) = tool_use(items)
    assert row["mean_turns"] == 4 and row["mean_tool_calls"] == 3
    assert row["tool_share"] == {"web_extract": pytest.approx(50.0), "web_search": pytest.approx(50.0)}


def test_report_files(tmp_path):
    rows = table1(_table_items(), ["b1", "b2"], ["c1", "c2"])
    assert fmt_cell(rows[0]["b1"]) == "25.00 ± 35.36" and fmt_cell(rows[1]["b2"]) == "–"
    assert fmt_cell({"mean": 3.14159, "std": 0.0, "runs": 1}) == "3.14"
    paths = write_table1(rows, ["b1", "b2"], tmp_path, config_labels={"c1": "Config one"}, note="smoke")
    md = paths["md"].read_text()
    assert "| Config one" in md and "25.00 ± 35.36" in md and "62.50 ± 17.68" in md and md.startswith("smoke")
    csv = paths["csv"].read_text().splitlines()
    assert csv[0].startswith("Configuration,config,b1 mean,b1 std,b1 runs") and len(csv) == 3
    assert "<table" in paths["html"].read_text()
    vt = vistarget_table([it(1, True, True), it(0, True, False)])
    fig = figure6(vt)
    assert list(fig.data[0].x) == ["Accuracy", "Image Cite", "Target Match", "Match+Acc"]
    assert list(fig.data[0].y) == pytest.approx([50.0, 100.0, 50.0, 100.0])
    html = write_figure(fig, tmp_path / "f6.html").read_text()
    assert "Target Match" in html and "plotly" in html
    tu = tool_use([it(bench="b", target=False, turns=2, tool_calls=1, tool_counts={"web_search": 1})])
    assert len(tool_use_figure(tu).data) == 2 and tool_use_frame(tu).loc[0, "web_search %"] == 100.0
