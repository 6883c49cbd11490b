"""Publishing and downloading without the network: a run folder is planned (dry run lists every file),
published to an in-process Hub (huggingface_hub's client-factory hook) that stores repositories in a local
folder and records every request, then downloaded by tag into a Hugging Face cache, online and offline."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import png_bytes

from kit.hub.cards import CardError, checkpoint_info
from kit.hub.download import DownloadError, download, resolve_ref
from kit.hub.localhub import LocalHub
from kit.hub.publish import PublishError, check_no_token, plan_run, publish
from kit.web.cache import ToolCache

TOKEN = "hf_kitTestToken0123456789abcdef"


@pytest.fixture
def run_dir(tmp_path):
    """A results folder shaped like notebook 06's, plus a dataset and two checkpoints."""
    d = tmp_path / "results" / "06_evaluation"
    (d / "predictions").mkdir(parents=True)
    (d / "predictions" / "fvqa__harness__r0.jsonl").write_text('{"task_id": "a", "score": 1.0}\n{"task_id": "b", "score": 0.0}\n')
    (d / "runs" / "fvqa" / "harness" / "r0").mkdir(parents=True)
    (d / "runs" / "fvqa" / "harness" / "r0" / "episodes.jsonl").write_text('{"id": "a"}\n')
    (d / "summary.md").write_text("| benchmark | accuracy |\n|---|---|\n| fvqa | 50.0 |\n")
    (d / "table1.csv").write_text("config,fvqa\nharness,50.0\n")
    (d / "manifest.json").write_text(json.dumps({"git": {"commit": "abc123", "dirty": False}, "seed": 0, "labels": ["smoke"],
                                                 "config": {"notebook": "06_evaluation", "profile": "smoke", "repeats": 1,
                                                            "judge": "rule", "benchmarks": ["fvqa"]},
                                                 "model": {"kind": "scripted-demonstrator", "smoke": True}}))
    (d / "stale.tmp").write_text("x")  # transient: never published
    cache = ToolCache(d / "cache.sqlite")
    cache.put("k1", "zim", "search", {"query": "ray charles", "num": 5}, "[]")
    cache.put("k2", "zim", "fetch", {"url": "https://en.wikipedia.org/wiki/Ray_Charles"}, "{}")
    cache.close()
    ds = d / "sft_mixture"
    (ds / "images").mkdir(parents=True)
    (ds / "train.jsonl").write_text('{"messages": [], "images": ["images/0.png"]}\n')
    (ds / "images" / "0.png").write_bytes(png_bytes())
    lora = d / "checkpoints" / "lora"
    lora.mkdir(parents=True)
    (lora / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "Qwen/Qwen2.5-VL-3B-Instruct", "r": 8}))
    (lora / "adapter_model.safetensors").write_bytes(b"\x00" * 1000)
    merged = d / "checkpoints" / "merged"
    merged.mkdir()
    (merged / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))
    (merged / "model.safetensors").write_bytes(b"\x01" * 2000)
    return d


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path


def _plan(run_dir, tag="v0.1"):
    return plan_run(run_dir, tag=tag, results_repo="kit-org/eval-smoke", cache_repo="kit-org/cache-smoke",
                    dataset_repos={"sft_mixture": "kit-org/sft-mixture"},
                    checkpoint_repos={"checkpoints/lora": "kit-org/agent-lora", "checkpoints/merged": "kit-org/agent"})


def test_dry_run_lists_exactly_what_would_be_uploaded(run_dir, env):
    hub = LocalHub(env / "hub")
    with hub.installed():
        plan = _plan(run_dir)
    listing = plan.listing()
    kinds = {u.repo_id: u.kind for u in plan.uploads}
    assert kinds == {"kit-org/eval-smoke": "results", "kit-org/cache-smoke": "cache", "kit-org/sft-mixture": "dataset",
                     "kit-org/agent-lora": "lora", "kit-org/agent": "merged"}
    results = next(u for u in plan.uploads if u.kind == "results")
    paths = {f.path_in_repo for f in results.files}
    assert {"predictions/fvqa__harness__r0.jsonl", "runs/fvqa/harness/r0/episodes.jsonl", "summary.md", "manifest.json",
            "sft_mixture/images/0.png"} <= paths
    assert "cache.sqlite" not in paths and "stale.tmp" not in paths  # the cache has its own repo; transient files never
    for u in plan.uploads:
        assert f"{u.repo_type} {u.repo_id}" in listing and f"tag {u.tag}" in listing
        for f in u.files:
            assert f"{f.path_in_repo}  {f.size} B  sha256:{f.sha256[:16]}" in listing
    assert hub.requests == []  # planning never talks to the Hub
    assert TOKEN not in listing and TOKEN not in plan.to_json()
    # cards: YAML metadata the Hub can parse, content from data_cards/
    meta = yaml.safe_load(results.card.split("---")[1])
    assert meta["license"] == "apache-2.0" and "smoke" in meta["tags"] and "| fvqa | 50.0 |" in results.card
    lora = next(u for u in plan.uploads if u.kind == "lora")
    lmeta = yaml.safe_load(lora.card.split("---")[1])
    assert lmeta["library_name"] == "peft" and lmeta["base_model"] == "Qwen/Qwen2.5-VL-3B-Instruct" and "LoRA adapter" in lora.card
    cache = next(u for u in plan.uploads if u.kind == "cache")
    assert "| zim | fetch | 1 |" in cache.card and "| zim | search | 1 |" in cache.card


def test_publish_then_download_by_tag_online_and_offline(run_dir, env, monkeypatch):
    hub = LocalHub(env / "hub")
    hf_cache = env / "hf_cache"
    with hub.installed():
        plan = _plan(run_dir)
        res = publish(plan)
    assert [r["repo_id"] for r in res] == [u.repo_id for u in plan.uploads]
    writes = [r for r in hub.requests if r.method == "POST"]
    assert writes and all(r.authorization == f"Bearer {TOKEN}" for r in writes)  # the standard token location was used
    assert {r.path for r in writes} >= {"/api/repos/create", "/api/datasets/kit-org/eval-smoke/commit/main",
                                        "/api/models/kit-org/agent-lora/tag/" + res[3]["commit"]}
    for r, u in zip(res, plan.uploads):
        refs = hub.refs(u.repo_type, u.repo_id)
        assert refs["tags"]["v0.1"] == r["commit"] == refs["branches"]["main"]
        stored = hub.files(u.repo_type, u.repo_id, "v0.1")
        for f in u.files:
            assert stored[f.path_in_repo] == open(f.local, "rb").read()
        assert stored["README.md"].decode() == u.card

    # published revisions never move: the same tag again is refused
    with hub.installed(), pytest.raises(PublishError, match="already has tag"):
        publish(_plan(run_dir))

    with hub.installed():
        n0 = len(hub.requests)
        got = download("kit-org/cache-smoke", revision="v0.1", repo_type="dataset", cache_dir=hf_cache)
        ckpt = download("kit-org/agent-lora", revision="v0.1", cache_dir=hf_cache)
    assert got.commit == res[1]["commit"] and got.path.parent.name == "snapshots"  # the standard cache layout
    assert (got.path / "cache.sqlite").read_bytes() == open(plan.uploads[1].files[0].local, "rb").read()
    assert len(ToolCache(got.path / "cache.sqlite", mode="readonly")) == 2
    assert (ckpt.path / "adapter_model.safetensors").read_bytes() == b"\x00" * 1000
    assert all(r.method in ("GET", "HEAD") for r in hub.requests[n0:])

    # offline: served from the cache with no request at all; a revision never fetched fails clearly
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with hub.installed():
        n1 = len(hub.requests)
        again = download("kit-org/cache-smoke", revision="v0.1", repo_type="dataset", cache_dir=hf_cache)
        assert again.path == got.path and len(hub.requests) == n1
        with pytest.raises(DownloadError, match="HF_HUB_OFFLINE is set"):
            download("kit-org/agent", revision="v0.1", cache_dir=hf_cache)
        assert resolve_ref("hub:kit-org/agent-lora@v0.1", cache_dir=hf_cache) == str(ckpt.path)
        assert resolve_ref("/some/local/path") == "/some/local/path"
    monkeypatch.delenv("HF_HUB_OFFLINE")

    # the token reached the Hub but no file this test wrote
    for f in env.rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f


def test_unknown_repo_or_revision(env):
    hub = LocalHub(env / "hub")
    with hub.installed():
        with pytest.raises(DownloadError):
            download("kit-org/nothing", revision="v1", cache_dir=env / "c")
    with pytest.raises(ValueError, match="revision is required"):
        download("kit-org/x", revision="")
    with pytest.raises(ValueError, match="bad hub reference"):
        resolve_ref("hub:kit-org/x")


def test_refuses_a_file_holding_the_token(run_dir, env):
    (run_dir / "notes.txt").write_text(f"token={TOKEN}\n")
    with pytest.raises(PublishError, match="notes.txt contains the Hugging Face token"):
        plan_run(run_dir, tag="v1", results_repo="kit-org/eval")
    plan = plan_run(run_dir, tag="v1", cache_repo="kit-org/cache")  # the results folder is not part of this plan
    with pytest.raises(PublishError):
        check_no_token(plan, token=plan.uploads[0].card[40:80])


def test_bad_requests(run_dir, env, tmp_path):
    with pytest.raises(PublishError, match="nothing to publish"):
        plan_run(run_dir, tag="v1")
    with pytest.raises(PublishError, match="bad tag"):
        plan_run(run_dir, tag="v 1", results_repo="kit-org/eval")
    with pytest.raises(PublishError, match="bad repository id"):
        plan_run(run_dir, tag="v1", results_repo="no-owner")
    with pytest.raises(FileNotFoundError):
        plan_run(tmp_path / "missing", tag="v1", results_repo="kit-org/eval")
    with pytest.raises(FileNotFoundError):
        plan_run(run_dir, tag="v1", checkpoint_repos={"nope": "kit-org/x"})
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PublishError, match="no evaluation"):
        plan_run(empty, tag="v1", results_repo="kit-org/eval")
    with pytest.raises(CardError, match="neither a LoRA adapter"):
        checkpoint_info(empty)
    # a write without a token is refused by the Hub (and by the local one)
    hub = LocalHub(tmp_path / "hub")
    with hub.installed():
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        with pytest.raises(HfHubHTTPError):
            HfApi(token=False).create_repo("kit-org/x", repo_type="dataset")


def test_cli_publish_dry_run(run_dir, env, capsys):
    from kit.cli import main

    hub = LocalHub(env / "hub")
    with hub.installed():
        rc = main(["publish", str(run_dir), "--results-repo", "kit-org/eval", "--cache-repo", "kit-org/cache", "--tag", "v2",
                   "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "dry run: nothing uploaded" in out and "predictions/fvqa__harness__r0.jsonl" in out
    assert hub.requests == []


def test_cards_tell_a_real_model_under_smoke_budgets_from_a_tiny_model_run():
    from kit.hub.cards import evaluation_card, smoke_kind

    base = {"git": {"commit": "abc123", "dirty": False}, "seed": 0,
            "config": {"notebook": "06_evaluation", "profile": "smoke", "repeats": 1, "judge": "rule"}}
    tiny = {**base, "labels": ["smoke"], "model": {"kind": "transformers", "smoke": True}}
    real = {**base, "labels": ["smoke-budgets"], "model": {"kind": "openai", "model": "Qwen/Qwen2.5-VL-7B", "smoke": False}}
    old = {**base, "labels": []}
    full = {**base, "config": {**base["config"], "profile": "paper"}, "labels": [], "model": {"smoke": False}}
    assert [smoke_kind(m) for m in (tiny, real, old, full)] == ["smoke", "smoke-budgets", "smoke", None]
    card_real = evaluation_card(real, "| a |", repo_id="o/r", tag="v1", cache_repo=None, n_items=4)
    card_tiny = evaluation_card(tiny, "| a |", repo_id="o/r", tag="v1", cache_repo=None, n_items=4)
    assert "not model quality" not in card_real and "Smoke-profile budgets" in card_real and "smoke-budgets" in card_real
    assert "not model quality" in card_tiny and "Smoke-profile budgets" not in card_tiny
