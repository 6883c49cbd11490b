"""One verdict everywhere (issue 29 part 2): the viewer's index, episode pages and comparisons show the
correctness / answer match the run's summary shows, computed from the same fields, on real run folders
(results/smoke/01_harness_demo as committed, and a copy with one answer corrected; results/smoke/06_evaluation)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import lxml.html
import pytest

from kit.eval.judges import rule_match
from kit.harness.episode import EpisodeRecord
from kit.harness.runner import summarize_records
from kit.view import build_site, load_run

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "results" / "smoke" / "01_harness_demo"
EVAL = ROOT / "results" / "smoke" / "06_evaluation"
FIXED = "demo-10-band-city-2hop"  # the two-hop demo task the demonstrator misses; its answer is "Liverpool"


def _copy_run(dest: Path) -> Path:
    for sub in ("demonstrator", "model"):
        shutil.copytree(DEMO / sub, dest / sub, ignore=shutil.ignore_patterns("transcripts"))
    return dest


def _summary(run: Path) -> dict[str, dict[str, int]]:
    """Notebook 01's summary table (its cell: summarize_records + rule_match per policy), per policy."""
    out = {}
    for policy in ("model", "demonstrator"):
        recs = [EpisodeRecord.model_validate_json(x) for x in (run / policy / "episodes.jsonl").read_text().splitlines()
                if x.strip()]
        match = [rule_match(r.final_response, r.task.answers) for r in recs]
        out[policy] = {"episodes": summarize_records(recs)["episodes"],
                       "answer_match(contains)": sum(m["contains"] for m in match),
                       "answer_match(exact)": sum(m["exact"] for m in match)}
    return out


@pytest.fixture()
def two_runs(tmp_path: Path) -> tuple[Path, Path]:
    if not (DEMO / "demonstrator" / "episodes.jsonl").is_file():
        pytest.skip("results/smoke/01_harness_demo is not in this checkout")
    before = _copy_run(tmp_path / "before")
    after = _copy_run(tmp_path / "after")
    f = after / "demonstrator" / "episodes.jsonl"
    lines = []
    for line in f.read_text().splitlines():
        rec = json.loads(line)
        if rec["id"] == FIXED:  # the demonstrator now answers this one right
            rec["final_response"] = "Liverpool. <IMG: search_image_1.jpg>"
        lines.append(json.dumps(rec))
    f.write_text("\n".join(lines) + "\n")
    return before, after


def _doc(p: Path):
    return lxml.html.fromstring(p.read_text(encoding="utf-8"))


def test_comparison_lists_the_answer_match_the_summary_shows(two_runs, tmp_path: Path):
    before, after = two_runs
    sa, sb = _summary(before), _summary(after)
    n = sa["demonstrator"]["episodes"]
    assert sa["demonstrator"]["answer_match(contains)"] == n - 1 and sb["demonstrator"]["answer_match(contains)"] == n
    index = build_site([before, after], tmp_path / "site")
    doc = _doc(index)
    link = doc.xpath('//a[text()="before vs after"]')[0].get("href")
    cmp_doc = _doc(index.parent / link)
    rows = cmp_doc.xpath("//tr[@data-change]")
    changes = [(r.xpath("td[3]")[0].text_content(), r.get("data-change")) for r in rows]
    assert changes[0] == (FIXED, "improved"), changes  # was "3 same" for the demonstrator: status unchanged
    same = len(changes) - 1  # every other episode of both policies
    assert [c for _, c in changes].count("improved") == 1 and [c for _, c in changes[1:]] == ["same"] * same
    assert "answer match" in rows[0].text_content() and "no answer match" in rows[0].text_content()
    assert "1 improved" in cmp_doc.text_content() and f"{same} same" in cmp_doc.text_content()
    # the index's verdict table holds the summary's figures, per run and configuration
    table = {(r.get("data-vrun"), r.get("data-vconfig")): r for r in doc.xpath('//table[@id="verdicts"]//tr[@class="verdict"]')}
    for label, summ in (("before", sa), ("after", sb)):
        for policy, s in summ.items():
            r = table[(label, policy)]
            assert (int(r.get("data-items")), int(r.get("data-correct")), int(r.get("data-exact"))) == (
                s["episodes"], s["answer_match(contains)"], s["answer_match(exact)"]), (label, policy)
    # the episode rows, their filter value and the episode page say the same
    row = [r for r in doc.xpath('//tr[@class="item"]') if r.get("data-run") == "after" and FIXED in r.text_content()
           and r.get("data-config") == "demonstrator"][0]
    assert row.get("data-correct") == "answer match"
    page = _doc(index.parent / row.xpath(".//a")[0].get("href"))
    assert page.xpath('//span[@id="verdict"]')[0].get("data-verdict") == "answer match"
    counts = doc.text_content()
    hits = sum(s["answer_match(contains)"] for summ in (sa, sb) for s in summ.values())
    misses = sum(s["episodes"] for summ in (sa, sb) for s in summ.values()) - hits
    assert f"answer match {hits}" in counts and f"no answer match {misses}" in counts


def test_evaluation_verdicts_are_the_summary_accuracy():
    """results/smoke/06_evaluation: the viewer's accuracy per benchmark x configuration is summary.csv's
    accuracy_pct (kit.eval.runner.summary_rows: 100 * mean score), and its item counts are the episodes."""
    from kit.view.verdict import verdict_rows

    if not (EVAL / "summary.csv").is_file():
        pytest.skip("results/smoke/06_evaluation is not in this checkout")
    with (EVAL / "summary.csv").open() as f:
        summary = {(r["benchmark"], r["config"]): r for r in csv.DictReader(f)}
    rows = {(v.benchmark, v.configuration): v for v in verdict_rows(load_run(EVAL).items) if v.source == "judge"}
    assert set(rows) == {k for k, r in summary.items() if int(r["episodes"])}
    for k, v in rows.items():
        s = summary[k]
        assert v.items == int(s["episodes"]) and v.accuracy_pct == float(s["accuracy_pct"]), k
        assert v.judge_errors == int(s["judge_errors"]), k
