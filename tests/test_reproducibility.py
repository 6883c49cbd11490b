"""Two smoke evaluations with the same seed, each with its own fresh tool cache, produce identical metric
tables and predictions; their manifests agree on everything that decides a rerun, and a changed seed or
data file shows up as a manifest difference."""

from __future__ import annotations

import json

import pytest

from kit.eval.configs import make_configs
from kit.eval.judges import RuleJudge
from kit.eval.metrics import table1, tool_use
from kit.eval.replay import compare_evaluations
from kit.eval.runner import load_benchmarks, run_evaluation
from kit.manifest import compare_manifests, read_manifest, tree_sha256, write_manifest
from kit.paths import zim_paths
from kit.policy.demonstrator import DemonstratorPolicy
from kit.web.cache import CachedBackend, ToolCache


async def _smoke_eval(out, data_dir, seed):
    from kit.web.zim import LocalZimWeb

    zims = zim_paths(data_dir)
    web = CachedBackend(LocalZimWeb(zims), ToolCache(out / "cache.sqlite"))
    loaded = await load_benchmarks(["fvqa", "infoseek"], source="local", limit=2, data_dir=data_dir, image_dir=out / "images")
    configs = make_configs("smoke", ["direct", "harness"])
    outcome = await run_evaluation(loaded, configs, policy=DemonstratorPolicy(), backend=web, out_dir=out, repeats=2,
                                   seed=seed, temperature=0.6, judge=RuleJudge("contains"), private_dir=out / "private")
    web.cache.close()
    files = sorted({f["path"] for lr in loaded.values() for f in lr.info.get("files", [])})
    write_manifest(out, config={"notebook": "06_evaluation", "benchmarks": ["fvqa", "infoseek"], "repeats": 2,
                                "configs": {k: c.harness.model_dump() for k, c in configs.items()}},
                   seed=seed, seeds={f"repeat_{r}": seed + 1000 * r for r in range(2)}, data_files=files + zims,
                   model={"kind": "scripted-demonstrator", "smoke": True})
    return outcome


async def test_same_seed_same_tables(tmp_path, data_dir):
    a = await _smoke_eval(tmp_path / "a", data_dir, seed=11)
    b = await _smoke_eval(tmp_path / "b", data_dir, seed=11)
    benches = ["fvqa", "infoseek"]
    ta, tb = table1(a.items, benches, ["direct", "harness"]), table1(b.items, benches, ["direct", "harness"])
    assert json.dumps(ta, sort_keys=True, default=str) == json.dumps(tb, sort_keys=True, default=str)
    assert json.dumps(tool_use(a.items), sort_keys=True) == json.dumps(tool_use(b.items), sort_keys=True)
    rep = compare_evaluations(tmp_path / "a", tmp_path / "b")
    assert rep.identical, rep.summary()
    assert rep.items_compared == len(a.items) >= 8
    ma, mb = read_manifest(tmp_path / "a"), read_manifest(tmp_path / "b")
    # data paths differ only where the run put its own images; shared files hash the same
    shared = {k: v for k, v in ma["data"].items() if str(tmp_path) not in k}
    assert shared and shared == {k: v for k, v in mb["data"].items() if str(tmp_path) not in k}
    assert compare_manifests(ma, mb, ignore=("data.",)) == []
    for key in ("commit", "dirty"):
        assert key in ma["git"]
    assert ma["seeds"] == {"repeat_0": 11, "repeat_1": 1011} and ma["all_packages"]["torch"] == ma["packages"]["torch"]


def test_manifest_differences_are_reported(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    (d / "x.txt").write_text("one")
    m1 = read_manifest(write_manifest(tmp_path / "r1", config={"a": 1}, seed=1, data_files=[d / "x.txt", d],
                                      model={"path": str(d)}))
    assert m1["data"][str(d)]["files"] == 1 and m1["model"]["checkpoint"] == tree_sha256(d)
    (d / "x.txt").write_text("two")
    m2 = read_manifest(write_manifest(tmp_path / "r2", config={"a": 2}, seed=2, data_files=[d / "x.txt", d / "gone.txt"],
                                      model={"path": str(d)}))
    diffs = compare_manifests(m1, m2)
    assert any(x.startswith("seed:") for x in diffs) and any(x.startswith("config.a:") for x in diffs)
    assert any(x.startswith(f"data.{d / 'x.txt'}") for x in diffs) and any(x.startswith("model.checkpoint.sha256") for x in diffs)
    assert m2["data"][str(d / "gone.txt")] == "missing"  # recorded, not dropped
    with pytest.raises(FileNotFoundError):
        read_manifest(tmp_path / "nowhere")
    assert "HF_TOKEN" not in json.dumps(m2)
