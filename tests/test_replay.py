"""Replay end to end on the local web: an evaluation records its tool cache, the cache is snapshotted, and
the replay — whose backend raises on any call and whose process cannot open a socket — reproduces every
tool observation and every score. A tampered or incomplete snapshot is detected."""

from __future__ import annotations

import json
import socket
import sqlite3

import pytest

from kit.eval.configs import make_configs
from kit.eval.judges import RuleJudge
from kit.eval.replay import OfflineBackend, ReplayError, compare_evaluations, replay_evaluation, snapshot_backends
from kit.eval.runner import load_benchmarks, run_evaluation
from kit.paths import zim_paths
from kit.policy.demonstrator import DemonstratorPolicy
from kit.web.cache import CachedBackend, ToolCache


@pytest.fixture(scope="module")
def web(data_dir):
    from kit.web.zim import LocalZimWeb

    return LocalZimWeb(zim_paths(data_dir))


@pytest.fixture
def no_network(monkeypatch):
    """Any socket connection attempt fails the test (replay must not need one)."""
    def refuse(*a, **k):
        raise AssertionError("replay tried to open a network connection")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


async def _original(tmp_path, web, data_dir):
    loaded = await load_benchmarks(["fvqa", "livevqa"], source="local", limit=2, data_dir=data_dir,
                                   image_dir=tmp_path / "images")
    configs = make_configs("smoke", ["harness", "text_only"])
    cache = ToolCache(tmp_path / "orig" / "cache.sqlite")
    kw = dict(repeats=2, seed=7, temperature=0.6, judge=RuleJudge("contains"), concurrency=2)
    await run_evaluation(loaded, configs, policy=DemonstratorPolicy(), backend=CachedBackend(web, cache),
                         out_dir=tmp_path / "orig", private_dir=tmp_path / "priv", **kw)
    snap = cache.snapshot(tmp_path / "snapshot.sqlite")
    cache.close()
    return loaded, configs, snap, kw


async def test_replay_reproduces_observations_and_scores_offline(tmp_path, web, data_dir, no_network):
    loaded, configs, snap, kw = await _original(tmp_path, web, data_dir)
    assert snapshot_backends(snap) == {web.name: len(ToolCache(snap, mode="readonly"))} and len(ToolCache(snap, mode="readonly")) > 5
    outcome, offline, cache = await replay_evaluation(loaded, configs, policy=DemonstratorPolicy(), snapshot=snap,
                                                      out_dir=tmp_path / "replay", private_dir=tmp_path / "priv2", **kw)
    assert offline.misses == [] and cache.stats["hits"] > 0 and cache.stats["misses"] == 0
    rep = compare_evaluations(tmp_path / "orig", tmp_path / "replay")
    assert rep.identical, rep.summary()
    n_tasks = sum(len(lr.tasks) for lr in loaded.values())
    assert n_tasks >= 4 and rep.items_compared == len(outcome.items) == n_tasks * 2 * 2  # tasks × configs × repeats
    assert rep.episodes_compared == rep.items_compared
    assert any(it.tool_calls > 0 for it in outcome.items)  # the tools really ran (from the snapshot)


async def test_replay_detects_incomplete_and_tampered_snapshots(tmp_path, web, data_dir, no_network):
    loaded, configs, snap, kw = await _original(tmp_path, web, data_dir)
    # one cached page fetch removed: strict replay refuses, non-strict reports the miss and the difference
    partial = tmp_path / "partial.sqlite"
    partial.write_bytes(snap.read_bytes())
    db = sqlite3.connect(partial)
    db.execute("DELETE FROM entries WHERE key = (SELECT key FROM entries WHERE op='fetch' ORDER BY key LIMIT 1)")
    db.commit()
    db.close()
    with pytest.raises(ReplayError, match="missed the snapshot"):
        await replay_evaluation(loaded, configs, policy=DemonstratorPolicy(), snapshot=partial,
                                out_dir=tmp_path / "r1", private_dir=tmp_path / "p1", **kw)
    # one search response altered: the comparison names the episodes whose observations changed
    tampered = tmp_path / "tampered.sqlite"
    tampered.write_bytes(snap.read_bytes())
    db = sqlite3.connect(tampered)
    key, resp = db.execute("SELECT key, response FROM entries WHERE op='search' ORDER BY key LIMIT 1").fetchone()
    hits = json.loads(resp)
    assert hits
    hits[0]["title"] = "A different page title"
    db.execute("UPDATE entries SET response=? WHERE key=?", (json.dumps(hits), key))
    db.commit()
    db.close()
    # non-strict: a policy whose next call depends on the altered title (the demonstrator searches images for the
    # page's subject) misses the snapshot, which is reported, not raised
    await replay_evaluation(loaded, configs, policy=DemonstratorPolicy(), snapshot=tampered, out_dir=tmp_path / "r2",
                            private_dir=tmp_path / "p2", strict=False, **kw)
    rep = compare_evaluations(tmp_path / "orig", tmp_path / "r2")
    assert not rep.identical and rep.observation_mismatches


async def test_offline_backend_raises_and_records():
    from kit.types import BackendError

    off = OfflineBackend("zim")
    with pytest.raises(BackendError, match="not in the cache snapshot"):
        await off.search("x", 3)
    with pytest.raises(BackendError):
        await off.reverse_image_search(b"img", 3)
    assert [op for op, _ in off.misses] == ["search", "reverse_image_search"]
    with pytest.raises(FileNotFoundError):
        snapshot_backends("/nonexistent/cache.sqlite")


def test_cached_backend_name_is_part_of_the_key(tmp_path):
    """A replay backend must carry the recorded backend's name, or nothing would hit."""
    c = ToolCache(tmp_path / "c.sqlite")
    c.put("k", "zim", "search", {}, "[]")
    c.close()
    assert snapshot_backends(tmp_path / "c.sqlite") == {"zim": 1}
    assert CachedBackend(OfflineBackend("zim"), ToolCache(tmp_path / "c.sqlite", mode="readonly")).name == "zim"


async def test_replay_run_refuses_bad_folders(tmp_path):
    """Not an evaluation, a damaged manifest, no predictions, or an output folder that already holds
    results (a replay there would resume them and compare nothing new): clear ReplayErrors."""
    from kit.eval.replay import ReplayError, replay_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("[]")
    with pytest.raises(ReplayError, match="not an evaluation run"):
        await replay_run(run)
    (run / "manifest.json").write_text("{oops")
    with pytest.raises(ReplayError, match="not readable JSON"):
        await replay_run(run)
    (run / "manifest.json").write_text('{"config": {"notebook": "06_evaluation"}}')
    with pytest.raises(ReplayError, match="no predictions"):
        await replay_run(run)
    (run / "predictions").mkdir()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x.jsonl").write_text("{}")
    for out in (tmp_path / "busy", run):
        with pytest.raises(ReplayError, match="not empty"):
            await replay_run(run, out_dir=out)
