"""Load: many concurrent episodes against the local ZIM web with scripted policies (issue "Harness
under attack", part 8). After the run nothing may be left behind: file descriptors, child processes,
threads, temporary files and directories, sandbox scratch folders; and memory must not keep growing
from one round to the next.

The CI size is bounded (``MMSEARCH_KIT_LOAD_EPISODES``, default 32 concurrent episodes, marked slow);
``benchmarks/bench_robustness.py`` runs 256.
"""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.harness.runner import run_batch
from kit.policy.scripted import ScriptedPolicy, tool_call_text

TOPICS = ["Ray Charles", "piano", "jazz", "Hit the Road Jack", "Paris", "London", "Albert Einstein", "soul music",
          "Georgia on My Mind", "Atlantic Records", "saxophone", "gospel", "blues", "World War II", "the Moon"]


def load_script(messages, tools) -> str:
    """A scripted agent: search, read the first result, search images, sometimes run code on a
    found image, then answer citing it."""
    question = messages[1].text()
    topic = question.split(": ", 1)[-1]
    obs = [m for m in messages if m.role == "tool"]
    if len(obs) == 0:
        return tool_call_text("web_search", {"query": topic, "num": 3})
    if len(obs) == 1:
        urls = [line.split("URL: ", 1)[1].strip() for line in obs[0].text().splitlines() if "URL: " in line]
        return tool_call_text("web_extract", {"urls": urls[:1] or ["zim://missing/A/None"], "goal": topic})
    if len(obs) == 2:
        return tool_call_text("web_search_for_image", {"query": topic, "num": 3})
    images = [r for m in obs for r in m.image_refs()]
    if len(obs) == 3 and images and question.startswith("code"):
        code = (f"from PIL import Image\nim = Image.open('{images[0]}')\n"
                "im.crop((0, 0, max(1, im.width // 2), max(1, im.height // 2))).save('crop.png')\nprint(im.size)")
        return tool_call_text("execute_code", {"code": code})
    cite = f" <IMG: {images[0]}>" if images else ""
    return f"<think>enough</think><response>About {topic}.{cite}</response>"


def _snapshot() -> dict:
    gc.collect()
    me = psutil.Process()
    return {"fds": len(os.listdir("/proc/self/fd")), "children": len(me.children(recursive=True)),
            "threads": threading.active_count(), "rss": me.memory_info().rss}


async def _wait_quiet(baseline: dict, timeout: float = 10.0) -> dict:
    """Let pools and dying processes settle, then measure."""
    deadline = time.monotonic() + timeout
    snap = _snapshot()
    while time.monotonic() < deadline and (snap["children"] > baseline["children"] or snap["fds"] > baseline["fds"]):
        await asyncio.sleep(0.1)
        snap = _snapshot()
    return snap


async def load_run(web, out: Path, episodes: int, rounds: int = 2, code_every: int = 4) -> dict:
    """Run ``rounds`` batches of ``episodes`` concurrent episodes (every ``code_every``-th one also
    runs code in a sandbox) and report leaks relative to the state after a warm-up batch: ``fds``,
    ``processes``, ``threads``, ``temp_entries`` (in a private TMPDIR), ``scratch_dirs`` (sandbox
    scratch folders left in workspaces), ``rss_growth_mb`` (last round minus first), statuses."""
    tmp = Path(tempfile.mkdtemp(prefix="kit-load-tmp-"))
    old_tempdir = tempfile.tempdir
    tempfile.tempdir = str(tmp)  # everything this process puts in "the" temp dir lands here
    try:
        cfg = HarnessConfig(max_turns=8, code_timeout_s=60, tool_timeout_s=300, wall_clock_s=900)

        def harness(task: Task, sample: int) -> Harness:
            # A policy per episode: ScriptedPolicy records every context it sees, which would
            # otherwise show up as growth here.
            return Harness(ScriptedPolicy(load_script, completion_tokens=20), web, cfg)

        def tasks(tag: str, n: int) -> list[Task]:
            kinds = ["code" if i % code_every == 0 else "text" for i in range(n)]
            return [Task(id=f"{tag}{i:04d}", question=f"{kinds[i]} task: {TOPICS[i % len(TOPICS)]}") for i in range(n)]

        await run_batch(harness, tasks("warm", 8), out / "warm", concurrency=8, progress=False)
        base = await _wait_quiet(_snapshot(), 2.0)
        base_tmp = len(os.listdir(tmp))
        statuses: dict[str, int] = {}
        code_calls = code_failed = 0
        rss: list[int] = []
        t0 = time.monotonic()
        for r in range(rounds):
            recs = await run_batch(harness, tasks(f"r{r}-", episodes), out / f"round{r}", concurrency=episodes,
                                   progress=False)
            for rec in recs:
                statuses[rec.status] = statuses.get(rec.status, 0) + 1
                for m in rec.messages:
                    if m.role == "tool" and m.name == "execute_code":
                        code_calls += 1
                        code_failed += "status: failed" in m.text()
            rss.append((await _wait_quiet(base))["rss"])
        elapsed = time.monotonic() - t0
        end = await _wait_quiet(base)
        scratch = [p for p in out.rglob(".kit/sandbox")]
        code_ok = sum(1 for p in out.glob("round*/workspaces/*/crop.png"))
        return {"episodes": episodes * rounds, "concurrency": episodes, "statuses": statuses, "seconds": round(elapsed, 1),
                "fds": end["fds"] - base["fds"], "processes": end["children"] - base["children"],
                "threads": end["threads"] - base["threads"], "temp_entries": len(os.listdir(tmp)) - base_tmp,
                "scratch_dirs": len(scratch), "code_calls": code_calls, "code_failed": code_failed,
                "code_outputs": code_ok,
                "rss_growth_mb": round((rss[-1] - rss[0]) / 2**20, 1), "rss_mb": round(rss[-1] / 2**20, 1),
                "rss_rounds_mb": [round(r / 2**20, 1) for r in rss]}
    finally:
        tempfile.tempdir = old_tempdir
        if not os.listdir(tmp):
            tmp.rmdir()


@pytest.mark.slow
def test_concurrent_episodes_leak_nothing(tmp_path, data_dir):
    from kit.paths import zim_paths
    from kit.web.zim import LocalZimWeb

    n = int(os.environ.get("MMSEARCH_KIT_LOAD_EPISODES", "32"))
    web = LocalZimWeb(zim_paths(data_dir))
    res = asyncio.run(load_run(web, tmp_path / "load", episodes=n, rounds=2))
    assert res["statuses"] == {"answered": 2 * n}, res
    assert res["code_calls"] > 0 and res["code_failed"] == 0 and res["code_outputs"] == res["code_calls"], res
    assert res["fds"] <= 0 and res["processes"] <= 0 and res["threads"] <= 0, res
    assert res["temp_entries"] == 0 and res["scratch_dirs"] == 0, res
    assert res["rss_growth_mb"] < 64, res
