"""The committed results are those of the committed code, and the README says which commit that is
(issue 14 part 8): every run manifest under results/ records one clean commit, the README's results
section names it, and the code that shapes results (kit/, notebooks/, configs/, requirements/,
pyproject.toml) is the same at that commit and at HEAD."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kit.paths import PROJECT_ROOT

sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
import render_results as rr  # noqa: E402

CODE_PATHS = ("kit", "notebooks", "configs", "requirements", "pyproject.toml")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=30)


def test_readme_names_the_commit_of_the_committed_results():
    runs = rr.find_runs(PROJECT_ROOT / "results")
    assert runs, "no committed results under results/"
    manifests = {r.relative_to(PROJECT_ROOT).as_posix(): json.loads((r / "manifest.json").read_text()) for r in runs}
    commits = {k: (m.get("git") or {}).get("commit") for k, m in manifests.items()}
    assert len(set(commits.values())) == 1 and None not in commits.values(), f"results from several commits: {commits}"
    commit = next(iter(commits.values()))
    dirty = sorted(k for k, m in manifests.items() if (m.get("git") or {}).get("dirty"))
    assert not dirty, f"results generated from a dirty tree (uncommitted code): {dirty}"
    readme = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index(rr.START): readme.index(rr.END) + len(rr.END)]
    assert section == rr.render_section(PROJECT_ROOT / "results"), "README results section is stale: " \
                                                                   "python scripts/render_results.py --write"
    for run in manifests:
        part = section[section.index(f"]({run}/)"):]
        assert f"commit `{commit[:12]}`;" in part.split("### ")[0], f"README does not name commit {commit[:12]} for {run}"
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("shallow clone: the results' commit cannot be compared with HEAD")
    assert _git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, f"commit {commit} is not in this repository"
    assert _git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0, f"{commit} is not an ancestor of HEAD"
    changed = _git("diff", "--name-only", commit, "HEAD", "--", *CODE_PATHS).stdout.split()
    assert not changed, (f"the code changed since the committed results were generated at {commit[:12]}: "
                         f"{changed[:10]}{' …' if len(changed) > 10 else ''}; regenerate them (make sequence)")


def test_a_real_model_under_smoke_budgets_is_not_rendered_as_a_tiny_model_run(tmp_path):
    run = tmp_path / "results" / "01_harness_demo"
    run.mkdir(parents=True)
    base = {"created": "2026-12-01T00:00:00Z", "git": {"commit": "b" * 40, "dirty": False}, "seed": 0,
            "config": {"notebook": "01_harness_demo", "profile": "smoke"}}
    (run / "manifest.json").write_text(json.dumps({**base, "labels": ["smoke-budgets"], "model": {"model": "Qwen/X"}}))
    text = rr.render_section(tmp_path / "results")
    assert "smoke budgets with the real model `Qwen/X`" in text and "not model quality" not in text
    (run / "manifest.json").write_text(json.dumps({**base, "labels": ["smoke"]}))
    assert "not model quality" in rr.render_section(tmp_path / "results")
