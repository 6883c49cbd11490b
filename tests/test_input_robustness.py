"""Records always serialize, run tables refuse impossible counts, back-off never overflows, the web
helpers read a single path and refuse an empty list (issue 15, attack report)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from kit.harness.episode import EpisodeRecord, Event, Task, json_safe
from kit.harness.tool_spec import ToolContext  # noqa: F401  (the test tool's annotation is resolved here)


class _Thing:
    def __str__(self) -> str:
        return "a thing"


# ---------------------------------------------------------------------------------- event details
def test_event_detail_is_coerced_to_json_values():
    """Before: a numpy count or an object in a detail made the record unserializable."""
    e = Event(type="tool_note", turn=1, detail={"name": "x", "count": np.int64(3), "ratio": np.float32(0.5),
                                                      "obj": _Thing(), "path": Path("/x"), "rows": np.arange(2),
                                                      "flag": np.bool_(True), 5: [np.int8(1)]})
    assert e.detail == {"name": "x", "count": 3, "ratio": 0.5, "obj": "a thing", "path": "/x", "rows": [0, 1], "flag": True,
                        "5": [1]}
    assert type(e.detail["count"]) is int
    json.loads(e.model_dump_json())
    assert Event(type="tool_note", turn=0, detail={"a": [1, "b"], "c": {"d": None}}).detail == {"a": [1, "b"], "c": {"d": None}}
    assert json_safe({"b": b"\xff"}) == {"b": "_w=="}  # bytes that are not UTF-8: base64, never an exception
    with pytest.raises(ValueError):
        Event(type="invalid_call", turn=0, detail="not a dict")


def test_episode_writer_converts_values_it_cannot_serialize(tmp_path):
    """Before: a numpy value anywhere in a record raised PydanticSerializationError (the scrub
    caught ValueError only after re-dumping the same value) and run_batch died."""
    from kit.harness.config import HarnessConfig
    from kit.harness.runner import EpisodeWriter, read_episodes

    task = Task(id="t", question="q", metadata={"n": np.int64(4), "o": _Thing(), "x": math.nan})
    rec = EpisodeRecord(id="t", task=task, config_hash=HarnessConfig().config_hash(), status="answered")
    with pytest.raises(ValueError):
        rec.model_dump_json()  # what the writer meets
    w = EpisodeWriter(tmp_path / "episodes.jsonl")
    asyncio.run(w.write(rec))
    (back,) = read_episodes(tmp_path / "episodes.jsonl")
    assert back.task.metadata["n"] == 4 and back.task.metadata["o"] == "a thing"


def test_run_batch_records_an_episode_whose_tool_event_holds_numpy(tmp_path):
    from conftest import MemoryBackend

    from kit.harness import Harness, HarnessConfig
    from kit.harness.events import EventType
    from kit.harness.runner import run_batch
    from kit.harness.tool_spec import tool
    from kit.policy.scripted import ScriptedPolicy

    def g(ctx: ToolContext, x: int) -> str:
        """Count something."""
        ctx.event(EventType.TOOL_NOTE, name="x", count=np.int64(3))
        return "ok"

    g = tool(g)
    call = '<think>go</think><tool_call>{"name": "g", "arguments": {"x": 1}}</tool_call>'
    h = Harness(ScriptedPolicy([call, "<think>done</think><response>ok</response>"]), MemoryBackend(),
                HarnessConfig(max_turns=3), tools=[g])
    (rec,) = asyncio.run(run_batch(h, [Task(id="t1", question="q")], tmp_path, progress=False))
    ev = [e for e in rec.events if e.type == "tool_note"]
    assert ev and ev[0].detail["count"] == 3
    assert json.loads((tmp_path / "episodes.jsonl").read_text())["id"] == rec.id


# ---------------------------------------------------------------------------------- recovery table
def _step(n, **mech):
    from kit.rl.rollout import EXCLUDED_MECHANISMS, MECHANISMS

    return {"rollout_trajectories": n, "recovery": [
        {"mechanism": k, "triggered": mech.get(k, (0, 0))[0],
         "retained": None if k in EXCLUDED_MECHANISMS else mech.get(k, (0, 0))[1]} for k in MECHANISMS]}


@pytest.mark.parametrize("step, words", [
    ({"rollout_trajectories": 4, "recovery": [{"mechanism": "overlong_retry", "triggered": 1, "retained": 5}]},
     r"retained \(5\) exceeds triggered \(1\)"),
    ({"rollout_trajectories": 0, "recovery": [{"mechanism": "overlong_retry", "triggered": 3, "retained": 1}]},
     r"triggered \(3\) exceeds the step's trajectories \(0\)"),
    ({"rollout_trajectories": -4, "recovery": []}, "non-negative integer"),
    ({"rollout_trajectories": 4, "recovery": [{"mechanism": "overlong_retry", "triggered": -2, "retained": 0}]},
     "non-negative integer"),
    ({"rollout_trajectories": "4", "recovery": []}, "non-negative integer"),
    ({"rollout_trajectories": 4.0, "recovery": []}, "non-negative integer"),
    ({"rollout_trajectories": 4, "recovery": [{"mechanism": "overlong_retry", "triggered": 1, "retained": None}]},
     "retained must be"),
    ({"rollout_trajectories": 4, "recovery": {"overlong_retry": {"triggered": 1}}}, "must be a list"),
])
def test_recovery_table_refuses_impossible_counts(step, words):
    from kit.rl.rollout import recovery_table

    with pytest.raises(ValueError, match=words):
        recovery_table([step])


def test_recovery_table_rates_without_denominator_are_none():
    from kit.rl.rollout import recovery_table

    rows = {r["mechanism"]: r for r in recovery_table([_step(0)])}
    assert rows["overlong_retry"] == {"mechanism": "overlong_retry", "triggered": 0, "trigger_rate": None,
                                      "retention_rate": None}
    rows = {r["mechanism"]: r for r in recovery_table([_step(np.int64(4), overlong_retry=(np.int64(2), 1))])}
    assert rows["overlong_retry"]["trigger_rate"] == 0.5 and rows["overlong_retry"]["retention_rate"] == 0.5


# ------------------------------------------------------------------------------------------- retry
def test_backoff_never_overflows():
    """Before: base * 2 ** (retry - 1) overflowed a float after 1025 retries (OverflowError)."""
    from kit.types import BackendError
    from kit.web.retry import RetryableHTTPStatus, RetryConfig

    p = RetryConfig()
    assert p.wait_s(10_000) == p.wait_s(10**6) == p.backoff_max_s
    assert RetryConfig(backoff_initial_s=0, backoff_max_s=math.inf).wait_s(2000) == 0.0
    n = {"k": 0}

    async def nosleep(s):
        pass

    async def busy():
        n["k"] += 1
        raise RetryableHTTPStatus("https://x", 503, "busy", None)

    with pytest.raises(BackendError, match="1201 attempt"):
        asyncio.run(RetryConfig(max_retries=1200, sleep=nosleep).run("GET x", busy))
    assert n["k"] == 1201


# --------------------------------------------------------------------------------------- web helpers
def test_local_zim_paths_takes_one_path_and_refuses_empty_lists(tmp_path):
    from kit.web import local_zim_paths

    assert local_zim_paths("/a/one.zim") == [Path("/a/one.zim")]  # before: ['/', 'a', '/', 'o', ...]
    assert local_zim_paths(Path("one.zim")) == [Path("one.zim")]
    with pytest.raises(ValueError, match="an empty list of ZIM paths"):
        local_zim_paths([])  # before: every archive of the data folder
    with pytest.raises(ValueError, match="empty list of ZIM archive names"):
        local_zim_paths(names=[], data_dir=tmp_path)


def test_open_local_web_takes_one_path(tmp_path):
    from kit.web import open_local_web
    from kit.web.zim import ZimError

    with pytest.raises(ZimError, match="does not exist"):  # one archive, not its characters as paths
        asyncio.run(open_local_web(str(tmp_path / "one.zim")).search("x", 1))


def test_open_tool_cache_names_a_bad_path(tmp_path):
    from kit.web import open_tool_cache

    with pytest.raises(IsADirectoryError, match=str(tmp_path)):
        open_tool_cache(tmp_path, mode="readwrite")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    for mode in ("readwrite", "readonly"):
        with pytest.raises(ValueError, match="junk.sqlite.*not a usable SQLite database"):
            open_tool_cache(junk, mode=mode)
    good = open_tool_cache(tmp_path / "c.sqlite", mode="readwrite")
    assert good.mode == "readwrite"
    assert open_tool_cache(tmp_path / "c.sqlite", mode="readonly").mode == "readonly"
