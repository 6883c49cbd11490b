"""The five hub benchmarks without a pinned revision (issue 16 part 5): MMSearch, MMSearch-Plus,
SimpleVQA, BrowseComp-VL and VDR-Bench load their default branch with a warning, and record the
commit it resolved to, so the run can be repeated at that commit. The Hub is the kit's in-process
stand-in (``kit.hub.localhub``: huggingface_hub's own client, the Hub's HTTP API), repositories
published through ``HfApi`` in the releases' layouts; pinned benchmarks stay pinned."""

from __future__ import annotations

import dataclasses
import inspect
import json
import warnings
from pathlib import Path
from urllib.parse import urlparse

import pytest

from kit.eval import hub_loaders
from kit.eval.benchmarks import load_benchmark
from kit.eval.hub_loaders import (
    HUB_SOURCES,
    UnpinnedRevisionWarning,
    load_hub_benchmark,
)
from kit.eval.hub_standin import standin_release_files
from kit.eval.loaders import BenchmarkError
from kit.eval.runner import load_benchmarks
from kit.hub.localhub import LocalHub

datasets = pytest.importorskip("datasets", reason="hub loaders need the optional `datasets` package")
FIVE = ("mmsearch", "mmsearch_plus", "simplevqa", "browsecomp_vl", "vdr_bench")
ROOT = Path(__file__).resolve().parents[1]


def release_files(name: str, n: int) -> dict[str, bytes]:
    """``{path in repo: bytes}`` of a release of ``n`` rows in the layout the registry reads."""
    return standin_release_files(name, n)


def publish(hub: LocalHub, repo: str, files: dict[str, bytes], message: str) -> str:
    """One commit of ``files`` to dataset ``repo`` on the local Hub (created if needed); its sha."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token="hf_unpinnedTestToken0123")
    api.create_repo(repo, repo_type="dataset", exist_ok=True)
    return api.create_commit(repo, repo_type="dataset", commit_message=message,
                             operations=[CommitOperationAdd(p, b) for p, b in files.items()]).oid


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as hf_constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    # synthetic releases under real repository ids: never in the user's Hugging Face cache
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    h = LocalHub(tmp_path / "hub")
    with h.installed():
        yield h


@pytest.mark.parametrize("name", FIVE)
def test_unpinned_benchmark_loads_the_default_branch_warns_and_records_the_commit(name, hub, tmp_path):
    src = HUB_SOURCES[name]
    assert src.revision is None  # the registry still has no verified pin for these five
    first = publish(hub, src.repo, release_files(name, 2), "v1")
    with pytest.warns(UnpinnedRevisionWarning, match=first):
        lr = load_hub_benchmark(name, image_dir=tmp_path / "img", cache_dir=tmp_path / "hf")
    n_files = len(src.data_files)
    assert len(lr.tasks) == 2 * n_files and not lr.problems
    assert lr.info["resolved_commit"] == first and lr.info["unpinned"] is True and lr.info["revision"] is None
    assert first in lr.info["warnings"][0] and len(lr.info["files"]) == n_files
    assert all(len(f["sha256"]) == 64 and first in f["path"] for f in lr.info["files"])  # read from that snapshot

    # the branch moves on: an unpinned load follows it, the recorded commit still gives the first release
    second = publish(hub, src.repo, release_files(name, 3), "v2")
    with pytest.warns(UnpinnedRevisionWarning, match=second):
        assert len(load_hub_benchmark(name, image_dir=tmp_path / "img", cache_dir=tmp_path / "hf").tasks) == 3 * n_files
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnpinnedRevisionWarning)  # a given revision is not unpinned
        again = load_hub_benchmark(name, revision=first, image_dir=tmp_path / "img", cache_dir=tmp_path / "hf")
    assert [t.id for t in again.tasks] == [t.id for t in lr.tasks]
    assert again.info["resolved_commit"] == first and again.info["unpinned"] is False and "warnings" not in again.info


def test_the_run_manifest_records_the_resolved_commit_and_flags_a_moved_branch(hub, tmp_path):
    from kit.manifest import compare_manifests, read_manifest, write_manifest

    runs = []
    for k, n in enumerate((2, 3)):
        sha = publish(hub, "Cie1/MMSearch-Plus", release_files("mmsearch_plus", n), f"v{k}")
        with pytest.warns(UnpinnedRevisionWarning):
            lr = load_hub_benchmark("mmsearch_plus", image_dir=tmp_path / "img", cache_dir=tmp_path / "hf")
        # notebook 06's manifest cell: the loader's info without the file list (hashed under "data")
        write_manifest(tmp_path / f"run{k}", seed=0, config={"benchmark_sources": {
            "mmsearch_plus": {kk: vv for kk, vv in lr.info.items() if kk != "files"}}})
        m = read_manifest(tmp_path / f"run{k}")
        assert m["config"]["benchmark_sources"]["mmsearch_plus"]["resolved_commit"] == sha
        runs.append((m, sha))
    diff = compare_manifests(runs[0][0], runs[1][0], fields=("config",))
    assert f"config.benchmark_sources.mmsearch_plus.resolved_commit: {runs[0][1]!r} != {runs[1][1]!r}" in diff


def test_a_branch_name_is_recorded_with_its_commit_and_offline_serves_the_cached_default(hub, tmp_path, monkeypatch):
    sha = publish(hub, "CaraJ/MMSearch", release_files("mmsearch", 2), "v1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnpinnedRevisionWarning)
        lr = load_benchmark("hub:mmsearch", revision="main", image_dir=tmp_path / "img", cache_dir=tmp_path / "hf")
    assert lr.info["revision"] == "main" and lr.info["resolved_commit"] == sha
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n = len(hub.requests)
    with pytest.warns(UnpinnedRevisionWarning, match=sha):
        off = load_hub_benchmark("mmsearch", image_dir=tmp_path / "img", cache_dir=tmp_path / "hf")
    # no Hub request at all (``datasets`` itself still probes its parquet builder script, read at its import)
    assert off.info["resolved_commit"] == sha and not [r for r in hub.requests[n:] if urlparse(r.url).hostname == "huggingface.co"]
    with pytest.raises(BenchmarkError, match="mmsearch_plus: .*HF_HUB_OFFLINE is set"):
        load_hub_benchmark("mmsearch_plus", cache_dir=tmp_path / "hf")  # never fetched: a clear error


def test_runner_reports_an_unreachable_hub_as_the_benchmarks_problem(tmp_path, monkeypatch, data_dir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the Hub unreachable, nothing cached
    out = __import__("asyncio").run(load_benchmarks(["fvqa", "hub:vdr_bench"], limit=1, data_dir=data_dir,
                                                    cache_dir=tmp_path / "empty_cache"))
    assert len(out["fvqa"].tasks) == 1 and out["vdr_bench"].tasks == []
    assert out["vdr_bench"].problems[0]["reason"].startswith("BenchmarkError: vdr_bench: dataset Osilly/Vision-DeepResearch-Eval")


def test_pinned_benchmarks_stay_pinned_and_load_their_pin_not_the_branch(hub, tmp_path, monkeypatch):
    pins = {k: s.revision for k, s in HUB_SOURCES.items() if s.revision}
    assert pins == {"livevqa": "a7c88d18560cd01ed1709962743f6c0e5244d145",
                    "fvqa": "bb4a4ff4c9c3fd0382d11f5d7fccd66d0b8428b5",
                    "mmbrowsecomp": "5f5298cd0e84ac511ad1cda3840cef73773661cc"}
    pinned = publish(hub, "CaraJ/MMSearch", release_files("mmsearch", 2), "pinned")
    publish(hub, "CaraJ/MMSearch", release_files("mmsearch", 4), "later")
    # the stand-in Hub cannot mint the real pins' shas: pin this entry to its first commit
    monkeypatch.setitem(HUB_SOURCES, "mmsearch", dataclasses.replace(HUB_SOURCES["mmsearch"], revision=pinned))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnpinnedRevisionWarning)
        lr = load_hub_benchmark("mmsearch", image_dir=tmp_path / "img", cache_dir=tmp_path / "hf")
    assert len(lr.tasks) == 2 and lr.info["resolved_commit"] == pinned == lr.info["pinned_revision"]
    assert any(f"/resolve/{pinned}/end2end.parquet" in r.path for r in hub.requests)


def test_unpinned_github_release_resolves_head_to_a_commit_before_reading(monkeypatch, tmp_path):
    src = dataclasses.replace(hub_loaders.get_source("livevqa"), revision=None)
    monkeypatch.setitem(hub_loaders.HUB_SOURCES, "livevqa", src)
    head = "0123456789abcdef0123456789abcdef01234567"
    urls: list[tuple[str, dict | None]] = []

    def fake_download(url: str, timeout_s: float = 60.0, headers: dict | None = None) -> bytes:
        urls.append((url, headers))
        if url.startswith("https://api.github.com/"):
            return head.encode()
        return b"[]"  # an empty benchmark file: nothing else to fetch

    monkeypatch.setattr(hub_loaders, "_download", fake_download)
    with pytest.warns(UnpinnedRevisionWarning, match=head):
        lr = load_hub_benchmark("livevqa", image_dir=tmp_path)
    assert urls == [("https://api.github.com/repos/fumingyang2004/LIVEVQA/commits/HEAD", {"Accept": "application/vnd.github.sha"}),
                    (f"https://raw.githubusercontent.com/fumingyang2004/LIVEVQA/{head}/liveVQA_benchmarks/News/benchmark.json", None)]
    assert lr.info["resolved_commit"] == head and lr.info["unpinned"]
    monkeypatch.setattr(hub_loaders, "_download", lambda url, timeout_s=60.0, headers=None: b"<html>rate limited</html>")
    with pytest.raises(BenchmarkError, match="did not resolve 'HEAD' to a commit"):
        load_hub_benchmark("livevqa", image_dir=tmp_path)


def test_allow_unpinned_is_gone_everywhere():
    from kit.eval.runner import load_benchmarks as lb

    for fn in (load_hub_benchmark, load_benchmark, lb):
        assert "allow_unpinned" not in inspect.signature(fn).parameters, fn
    assert not hasattr(hub_loaders, "UnpinnedRevisionError")
    nb = json.loads((ROOT / "notebooks" / "06_evaluation.ipynb").read_text())
    assert "allow_unpinned" not in "".join("".join(c["source"]) for c in nb["cells"])
    assert "allow_unpinned" not in (ROOT / "docs" / "evaluation.md").read_text()
