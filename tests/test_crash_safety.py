"""Crash safety of batch runs and of the tool cache (issue "Harness under attack", part 7).

A real runner process (``kit.harness.runner.run_batch``) is killed with SIGKILL at random points and
restarted until the batch completes; afterwards every episode is in ``episodes.jsonl`` exactly once,
every line is valid JSON, no episode finished before a kill was lost, and no sandbox process of the
killed runners survived. Several processes write one ``ToolCache`` at once, one of them killed
mid-way; the database stays consistent and holds every committed entry.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from kit.harness.code_exec import resolve_isolation
from kit.paths import PROJECT_ROOT
from kit.web.cache import ToolCache

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses SIGKILL and /proc")

RUNNER = textwrap.dedent("""
    import asyncio, sys
    from kit.harness.config import HarnessConfig
    from kit.harness.episode import Task
    from kit.harness.loop import Harness
    from kit.harness.runner import run_batch
    from kit.policy.scripted import ScriptedPolicy, tool_call_text
    from tests.conftest import MemoryBackend

    out, n, latency = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

    def script(messages, tools):
        done = sum(1 for m in messages if m.role == "tool")
        q = messages[1].text()
        if done == 0:
            return tool_call_text("web_search", {"query": q})
        if done == 1 and q.endswith(("0", "5")):  # some episodes start a sandbox, with a detached daemon
            code = ("import subprocess, time; subprocess.Popen(['sleep', '600'], start_new_session=True); "
                    "time.sleep(0.2); print(len('" + q + "'))")
            return tool_call_text("execute_code", {"code": code})
        return "<response>" + q.upper() + "</response>"

    def make(task, sample):
        return Harness(ScriptedPolicy(script, latency_s=latency), MemoryBackend(), HarnessConfig())

    tasks = [Task(id=f"ep{i:03d}", question=f"question {i}") for i in range(n)]
    asyncio.run(run_batch(make, tasks, out, concurrency=6, progress=False))
    print("COMPLETE", flush=True)
""")


def _complete_ids(path: Path) -> list[str]:
    """Ids of the complete (newline-terminated, valid) lines of an episodes file."""
    if not path.exists():
        return []
    ids = []
    for line in path.read_bytes().split(b"\n")[:-1]:
        if line.strip():
            ids.append(json.loads(line)["id"])
    return ids


def _sandboxes_under(root: Path) -> list[int]:
    """Live processes whose HOME (set by the sandbox to its workspace) lies under ``root``."""
    prefix = f"HOME={root}".encode()
    out = []
    for p in psutil.process_iter():
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                if any(v.startswith(prefix) for v in f.read().split(b"\0")) and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
        except (OSError, psutil.Error):
            pass
    return out


def kill_resume_run(out: Path, n: int = 30, kills: int = 5, seed: int = 0, window: tuple[float, float] = (1.0, 3.0),
                    max_runs: int = 40, latency_s: float = 0.15) -> dict:
    """Run a batch of ``n`` episodes in a subprocess (``latency_s`` per policy turn), SIGKILL it
    ``kills`` times at random moments (uniform in ``window`` seconds after each start), then let it
    finish. Returns counts: ``lost``
    (episodes complete on disk before a kill but missing afterwards), ``duplicated``, ``missing``,
    ``invalid_lines``, ``kills`` (actually delivered), ``runs``, ``leftover_processes``."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    seen_before: set[str] = set()
    lost: set[str] = set()
    delivered = runs = 0
    finished = False
    while runs < max_runs and not finished:
        runs += 1
        proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(out), str(n), str(latency_s)], cwd=PROJECT_ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if delivered < kills:
            try:
                proc.wait(timeout=rng.uniform(*window))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                delivered += proc.wait() == -signal.SIGKILL  # it may have finished just before
        stdout, stderr = proc.communicate(timeout=120)
        if proc.returncode == 0:
            assert "COMPLETE" in stdout, stderr[-2000:]
            finished = True
        elif proc.returncode != -signal.SIGKILL:
            raise AssertionError(f"runner failed (exit {proc.returncode}):\n{stderr[-3000:]}")
        now = set(_complete_ids(out / "episodes.jsonl"))
        lost |= seen_before - now
        seen_before |= now
    path = out / "episodes.jsonl"
    lines = path.read_bytes().split(b"\n") if path.exists() else []
    invalid = sum(1 for line in lines[:-1] if line.strip() and not _is_json(line)) + (1 if lines and lines[-1].strip() else 0)
    ids = _complete_ids(path)
    deadline = time.monotonic() + 5
    while _sandboxes_under(out) and time.monotonic() < deadline:
        time.sleep(0.1)
    leftover = _sandboxes_under(out)
    for pid in leftover:  # measured; now clean up what the fallback mode could not
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    return {"episodes": n, "finished": finished, "runs": runs, "kills": delivered, "lost": len(lost),
            "duplicated": len(ids) - len(set(ids)), "missing": n - len(set(ids)), "invalid_lines": invalid,
            "leftover_processes": len(leftover)}


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def test_sigkilled_runner_resumes_without_loss_or_duplicates(tmp_path):
    # episodes long enough (0.5 s a turn) that a kill 1-2.5 s after start lands mid-run, not after the batch ended
    res = kill_resume_run(tmp_path / "run", n=18, kills=3, seed=3, window=(1.0, 2.5), latency_s=0.5)
    assert res["finished"] and res["kills"] >= 2, res
    assert res["lost"] == res["duplicated"] == res["missing"] == res["invalid_lines"] == 0, res
    if resolve_isolation() == "bwrap":  # the fallback cannot catch a detached daemon of a SIGKILLed runner
        assert res["leftover_processes"] == 0, res


def test_torn_last_line_is_cut_and_its_episode_rerun_once(tmp_path):
    out = tmp_path / "run"
    res = kill_resume_run(out, n=6, kills=0, latency_s=0.0)
    assert res["finished"]
    path = out / "episodes.jsonl"
    lines = path.read_bytes().split(b"\n")
    victim = json.loads(lines[-2])["id"]
    path.write_bytes(b"\n".join(lines[:-2]) + b"\n" + lines[-2][: len(lines[-2]) // 2])  # killed mid-write
    res = kill_resume_run(out, n=6, kills=0, latency_s=0.0)
    ids = _complete_ids(path)
    assert res["finished"] and sorted(ids) == sorted(set(ids)) and len(ids) == 6 and ids[-1] == victim
    assert res["invalid_lines"] == 0


# ==================================================================================================
# ToolCache with several writer processes
# ==================================================================================================
WRITER = textwrap.dedent("""
    import json, sys, time
    from kit.web.cache import ToolCache
    path, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cache = ToolCache(path)
    for i in range(n):
        cache.put(f"{who}-{i}", "b", "search", {"i": i}, json.dumps({"who": who, "i": i}))
        cache.put(f"shared-{i % 50}", "b", "search", {"i": i % 50}, json.dumps({"who": who, "i": i % 50}))
        cache.get(f"shared-{(i * 7) % 50}")
        if who == "victim" and i == n // 2:
            print("HALF", flush=True)
            time.sleep(30)  # killed here, holding an open connection
    print("DONE", flush=True)
""")


def concurrent_cache_writers(path: Path, writers: int = 4, n: int = 200) -> dict:
    """``writers`` processes put ``n`` own keys and 50 shared keys each into one cache while a
    victim process is SIGKILLed half-way. Returns ``integrity``, ``entries``, ``expected``,
    ``bad_values`` and the writers' exit codes."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    victim = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "victim", str(n)], cwd=PROJECT_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{k}", str(n)], cwd=PROJECT_ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(writers)]
    assert victim.stdout.readline().strip() == "HALF"
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    codes = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        codes.append(p.returncode)
        assert p.returncode == 0 and "DONE" in out, err[-2000:]
    db = sqlite3.connect(path)
    integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    rows = db.execute("SELECT key, response FROM entries").fetchall()
    db.close()
    bad = sum(1 for _, v in rows if not _is_json(v.encode()))
    keys = {k for k, _ in rows}
    expected = {f"w{k}-{i}" for k in range(writers) for i in range(n)} | {f"shared-{i}" for i in range(50)}
    victim_keys = {k for k in keys if k.startswith("victim-")}
    return {"integrity": integrity, "entries": len(rows), "missing": len(expected - keys), "bad_values": bad,
            "victim_committed": len(victim_keys), "victim_expected": n // 2 + 1, "codes": codes}


def test_tool_cache_survives_concurrent_writer_processes(tmp_path):
    res = concurrent_cache_writers(tmp_path / "cache.sqlite", writers=4, n=150)
    assert res["integrity"] == "ok" and res["missing"] == 0 and res["bad_values"] == 0, res
    assert res["victim_committed"] == res["victim_expected"]  # everything it put before the kill is there
    ro = ToolCache(tmp_path / "cache.sqlite", mode="readonly")
    assert ro.get("w0-0") is not None and len(ro) == res["entries"]
    ro.close()
