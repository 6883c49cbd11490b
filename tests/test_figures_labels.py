"""Figures say what they show (issue 29 part 7): benchmark, split and n (episodes) in the caption of every
figure the kit draws (Figure 6, the tool-use figure, the RL run plot); the run plot's markers and labels stay
inside its plot area (skipped steps are spans over both panels, not a reward of 0); table1.html carries its own
stylesheet and fits a 1,280-px and a 1,920-px window (headless Chromium; that part skips without it)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from kit.eval.metrics import ItemResult, tool_use, vistarget_table
from kit.eval.report import figure6, figure6_from_items, tool_use_figure, write_table1
from kit.figures import chromium_path, data_caption, matplotlib_from_plotly
from kit.rl.staging import RunLog, plot_run_log


def _items() -> list[ItemResult]:
    def it(i, score, cited, match, config, bench, rep=0):
        return ItemResult(benchmark=bench, config=config, repeat=rep, task_id=f"t{i}", episode_id=f"t{i}",
                          status="answered", score=score, correct=score >= 0.5, cited=cited, match=match,
                          has_target=bench == "vistarget_zim", turns=2, tool_calls=1, tool_counts={"web_search": 1})
    return [it(i, i % 2, True, i % 3 == 0, cfg, bench, rep) for i, (cfg, bench, rep) in enumerate(
        (c, b, r) for c in ("direct", "harness") for b in ("vistarget_zim", "fvqa") for r in (0, 1))]


def test_figure6_and_tool_use_captions_name_benchmark_split_and_n():
    items = _items()  # 8 items, 4 with a target image (vistarget_zim: 2 configurations x 2 runs)
    fig = figure6_from_items(items, split="test")
    cap = fig.layout.title.subtitle.text
    assert cap == data_caption(["vistarget_zim"], "test", 4, unit="episodes with a target image",
                               detail="direct: 1 per run × 2 runs; harness: 1 per run × 2 runs")
    assert "benchmark vistarget_zim" in cap and "split test" in cap and "n = 4 episodes" in cap
    # the notebook's call (rows only) still says how many episodes and that split / benchmark were not given
    cap_rows = figure6(vistarget_table(items)).layout.title.subtitle.text
    assert "n = 4 episodes" in cap_rows and "split not given" in cap_rows and "target image" in cap_rows
    tu = tool_use_figure(tool_use(items), split="test").layout.title.subtitle.text
    assert "benchmarks VisTarget-style (ZIM), FVQA" in tu and "split test" in tu and "n = 8 episodes" in tu
    assert "direct: 4; harness: 4" in tu
    # the static fallback draws the caption too
    mfig = matplotlib_from_plotly(fig)
    assert "n = 4 episodes" in mfig._suptitle.get_text()
    assert fig.layout.margin.t >= 110  # room for title and caption


def _log(tmp_path: Path) -> list[dict]:
    log = RunLog(tmp_path / "run_log.jsonl")
    log.write("stage_start", 0, stage="opd", kind="opd")
    for step, r in enumerate([0.2, 0.25, 0.3, 0.5]):
        log.write("step", step, rollout_reward_mean=r, entropy_mean=0.8 - 0.1 * step, rollout_trajectories=16)
    log.write("transition", 0, **{"from": "opd", "to": "h1_long_stage_name", "reason": "steps"})
    log.write("skip", 1, reason="no_advantage_signal", groups={"trajectories": 16})
    log.write("rescue", 2, entropy=0.6, action="raise_temperature")
    log.write("transition", 3, **{"from": "h1_long_stage_name", "to": "h2_last_stage", "reason": "plateau"})
    log.write("skip", 4, reason="no_training_group", groups={"trajectories": 16})  # no step row
    return RunLog(tmp_path / "run_log.jsonl").events


def test_run_plot_marks_skipped_steps_as_spans_and_keeps_labels_inside(tmp_path: Path):
    fig = plot_run_log(_log(tmp_path), tmp_path / "p.png", title="fa_gspo", benchmark="fvqa", split="train")
    fig.canvas.draw()
    top, bottom = fig.axes[0], fig.axes[1]
    reward = top.lines[0]
    assert list(reward.get_ydata()) == [0.2, 0.25, 0.3, 0.5]
    # nothing drawn at reward 0 for a skipped step: every other line in the reward panel is a stage divider
    assert all(len(set(ln.get_xdata())) == 1 for ln in top.lines[1:]), [ln.get_ydata() for ln in top.lines[1:]]
    for ax in (top, bottom):  # a span over each skipped step, in both panels
        spans = [p for p in ax.patches if p.get_label() == "skipped step (no update)"]
        assert len(spans) == 2
        xs = sorted(round(p.get_x() + p.get_width() / 2, 3) for p in spans)
        assert xs == [1.0, 4.0]
    renderer = fig.canvas.get_renderer()
    for ax in (top, bottom):
        box = ax.get_window_extent(renderer)
        texts = [t for t in ax.texts if t.get_visible()]
        for t in texts:
            tb = t.get_window_extent(renderer)
            assert box.x0 - 0.5 <= tb.x0 and tb.x1 <= box.x1 + 0.5 and box.y0 - 0.5 <= tb.y0 and tb.y1 <= box.y1 + 0.5, \
                (t.get_text(), tb, box)
        for line in ax.lines:  # every marker inside the plot area (stage dividers are lines without markers)
            if line.get_marker() in (None, "None", "", " "):
                continue
            for xy in line.get_xydata():
                px, py = ax.transData.transform(xy)
                assert box.x0 - 1 <= px <= box.x1 + 1 and (py != py or box.y0 - 1 <= py <= box.y1 + 1), (line, xy)
    names = sorted(t.get_text() for t in top.texts)
    assert names == ["h1_long_stage_name", "h2_last_stage", "opd"]  # the first stage is named too
    title = fig._suptitle.get_text()
    assert "fa_gspo" in title and "benchmark fvqa" in title and "split train" in title
    assert "n = 80 rollout episodes (4 steps)" in title  # 4 step rows x 16 + the skipped step 4's 16


def _table1_rows() -> tuple[list[dict], list[str]]:
    benches = ["mmbrowsecomp", "mmsearch", "mmsearch_plus", "vistarget", "browsecomp_vl", "simplevqa", "vdr_bench",
               "livevqa", "fvqa", "infoseek"]
    cell = {"mean": 12.345, "std": 1.234, "runs": 3}
    rows = [{"config": c, **{b: cell for b in benches}, "avg": cell}
            for c in ("direct", "harness", "harness without image re-feeding and with a long configuration label")]
    return rows, benches


def test_table1_html_is_a_styled_page(tmp_path: Path):
    rows, benches = _table1_rows()
    html = write_table1(rows, benches, tmp_path, note="Smoke profile <not model quality>")["html"].read_text()
    assert html.startswith("<!doctype html>") and "<style>" in html and 'name="viewport"' in html
    assert re.search(r"table\.table1 td\{overflow-wrap:normal", html)  # a number never breaks (only at " ± ")
    assert "&lt;not model quality&gt;" in html and "12.35 ± 1.23" in html
    assert not re.search(r"(src|href)=\"?(https?:)?//", html)  # no external resource


@pytest.mark.browser
@pytest.mark.skipif(chromium_path() is None or importlib.util.find_spec("playwright") is None,
                    reason="needs chromium (apt-get install -y chromium) and playwright (dev extra)")
def test_table1_html_fits_1280_and_1920_px(tmp_path: Path):
    from playwright.sync_api import sync_playwright

    from tests.test_viewer_widths import OVERFLOW_JS

    rows, benches = _table1_rows()
    page_path = write_table1(rows, benches, tmp_path, note="A note " * 40)["html"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), headless=True, args=["--no-sandbox"])
        try:
            for width in (1280, 1920):
                page = browser.new_page(viewport={"width": width, "height": 800})
                page.goto(page_path.as_uri())
                assert page.evaluate(OVERFLOW_JS) == [], width
                page.close()
        finally:
            browser.close()
