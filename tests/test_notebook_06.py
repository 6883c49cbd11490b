"""Notebook 06 runs headless under the smoke profile, writes Table-1 / Figure-6 style outputs,
resumes, and never writes decrypted MM-BrowseComp text into its outputs folder."""

from __future__ import annotations

import json

import nbformat
import pytest

from kit.eval.loaders import load_mm_browsecomp


def _secrets(data_dir) -> list[str]:
    """Substrings of every decrypted MM-BrowseComp question (24-character windows of the question
    proper, without the shared instruction prefix) and its answers of 6+ characters."""
    res = load_mm_browsecomp(data_dir / "benchmarks" / "mm_browsecomp_sample")
    out = []
    for t in res.tasks:
        q = t.metadata["judge_question"]
        out += [q[i:i + 24] for i in range(0, max(1, len(q) - 24), 8)]
        out += [a for a in t.answers if len(a) >= 6]
        out += [c for c in t.metadata["checklist"] if len(c) >= 24]
    return out


def _stream_text(nb_path) -> str:
    nb = nbformat.read(nb_path, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


@pytest.mark.slow
def test_notebook_06_smoke(tmp_path, data_dir):
    from kit.cli import run_notebook

    out, private = tmp_path / "nb", tmp_path / "private"
    params = {"n_per_benchmark": 2, "private_dir": str(private)}
    executed = run_notebook("06", "smoke", params, out)
    for f in ["table1.md", "table1.csv", "table1.html", "figure6.html", "fig7_tool_use.html", "tool_use.csv",
              "summary.csv", "summary.md", "manifest.json", "problems.jsonl"]:
        assert (out / f).exists(), f
    md = (out / "table1.md").read_text()
    assert "| Direct answer" in md and "| Full harness" in md and "Not model quality" in md
    for col in ("MMBrowseComp", "VisTarget-style (ZIM)", "LiveVQA", "FVQA", "InfoSeek", "Avg. (5)"):
        assert col in md
    assert "Target Match" in (out / "figure6.html").read_text()
    preds = sorted((out / "predictions").glob("*.jsonl"))
    assert len(preds) == 5 * 2 * 2
    items = [json.loads(line) for p in preds for line in p.read_text().splitlines()]
    assert all(i["judge"].startswith("rule:") for i in items)
    assert all(i["response"] is None and i["answers"] is None for i in items if i["benchmark"] == "mmbrowsecomp")
    assert any(i["has_target"] for i in items)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["labels"] == ["smoke"] and manifest["config"]["repeats"] == 2
    assert (private / "mmbrowsecomp" / "harness" / "r1" / "episodes.jsonl").exists()
    assert not (out / "runs" / "mmbrowsecomp").exists()

    # the outputs folder holds no decrypted question, answer or checklist text, in any file
    secrets = _secrets(data_dir)
    assert len(secrets) > 100
    for f in out.rglob("*"):
        if f.is_file():
            blob = f.read_bytes().decode("utf-8", errors="ignore")
            leaked = [s for s in secrets if s in blob]
            assert not leaked, f"decrypted MM-BrowseComp text found in {f.relative_to(out)}"
    # ... while the private folder does hold it (so the scan above can fail)
    private_blob = "".join(p.read_text(errors="ignore") for p in private.rglob("episodes.jsonl"))
    assert any(s in private_blob for s in secrets)

    # a second run resumes everything: no new episode
    run_notebook("06", "smoke", params, out)
    assert "(0 new)" in _stream_text(executed)
