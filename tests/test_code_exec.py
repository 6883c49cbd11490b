"""Tests of the persistent execute_code sandbox (WeAgent Table 4) in kit.harness.sandbox."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import tracemalloc

import psutil
import pytest

from kit.harness.sandbox import CodeSandbox, CodeSandboxClosed, CodeSandboxError
from kit.harness.sandbox.capture import _Capture, _pump

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox uses Linux rlimits/pipes")


@pytest.fixture
async def box(tmp_path):
    sb = CodeSandbox(tmp_path / "ws", timeout_s=10)
    yield sb
    await sb.close()


def _alive(pids):
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


# ------------------------------------------------------------------------------------ basics
async def test_variables_persist_and_last_expression_is_shown(box):
    r1 = await box.run("x = 41\nimport math")
    assert r1.ok and r1.error is None and r1.stdout == "" and not r1.restarted
    r2 = await box.run("x += 1\nx")
    assert r2.ok and r2.stdout == "42\n"
    r3 = await box.run("math.sqrt(x * x)\nNone")  # only the final expression is shown, and not None
    assert r3.stdout == ""
    r4 = await box.run("def f(n):\n    return n * 2\nf(x)")
    assert r4.stdout == "84\n"
    assert box.starts == 1


async def test_stdout_stderr_and_exception_traceback(box):
    r = await box.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\ny = 1\n1 / 0")
    assert not r.ok and r.error == "exception" and not r.restarted
    assert r.stdout == "out\n"
    assert r.stderr.startswith("err\n")
    assert "Traceback (most recent call last)" in r.stderr and "ZeroDivisionError: division by zero" in r.stderr
    assert '<cell-1>", line 5' in r.stderr and "1 / 0" in r.stderr  # user source shown, driver frames hidden
    assert "driver.py" not in r.stderr and "kit/harness" not in r.stderr
    r2 = await box.run("y")  # state from before the exception survives
    assert r2.ok and r2.stdout == "1\n"


async def test_syntax_error_and_system_exit(box):
    r = await box.run("def f(:\n  pass")
    assert not r.ok and r.error == "syntax" and "SyntaxError" in r.stderr
    r = await box.run("import sys; z = 5; sys.exit(3)")
    assert not r.ok and r.error == "system_exit" and "SystemExit: 3" in r.stderr
    r = await box.run("import sys; sys.exit(0)")
    assert r.ok
    assert (await box.run("z")).stdout == "5\n"  # exit() does not end the episode's interpreter


async def test_subprocess_output_is_captured_in_order(box):
    r = await box.run("import os, subprocess\nprint('a')\nos.system('echo hi; echo oops >&2')\n"
                      "subprocess.run(['printf', 'sub'])\nprint()\nprint('c')")
    assert r.ok
    assert r.stdout == "a\nhi\nsub\nc\n"
    assert r.stderr == "oops\n"


async def test_stdin_is_closed_and_broken_streams_are_repaired(box):
    r = await box.run("input()")
    assert not r.ok and "EOFError" in r.stderr
    r = await box.run("import io, sys, os\nsys.stdout = io.StringIO()\nos.close(2)\nprint('hidden')")
    assert r.ok and r.stdout == ""
    r = await box.run("import sys\nprint('visible'); print('e', file=sys.stderr)")
    assert r.stdout == "visible\n" and r.stderr == "e\n"
    r = await box.run("import sys\nsys.stdout.close()")
    assert (await box.run("print('back')")).stdout == "back\n"


async def test_output_of_background_thread_goes_to_next_call(box):
    r = await box.run("import threading\n"
                      "def later():\n    print('late')\n    open('printed', 'w').close()\n"
                      "threading.Timer(0.3, later).start()\nprint('now')")
    assert r.stdout == "now\n"
    deadline = time.monotonic() + 10
    while not (box.workspace / "printed").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    r = await box.run("print('next')")
    assert r.stdout == "late\nnext\n"


# ------------------------------------------------------------------------------------ files
async def test_new_files_lists_created_and_modified_files(box):
    ws = box.workspace
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "old.txt").write_text("same")
    (ws / "edit.txt").write_text("before")
    code = ("from PIL import Image\nimport os\nos.makedirs('out/deep', exist_ok=True)\n"
            "Image.new('RGB', (32, 24), (255, 0, 0)).save('plot.png')\n"
            "Image.new('L', (8, 8)).save('out/deep/crop.jpg')\n"
            "open('edit.txt', 'w').write('after!')\n"
            "os.makedirs('.kit/internal', exist_ok=True); open('.kit/internal/x', 'w').write('1')\n"
            "os.symlink('/etc/hostname', 'link.txt')\n"
            "import tempfile; tempfile.NamedTemporaryFile(delete=False).write(b'tmp')")
    r = await box.run(code)
    assert r.ok, r.stderr
    assert r.new_files == ["edit.txt", "out/deep/crop.jpg", "plot.png"]
    r2 = await box.run("open('plot.png', 'ab').write(b'\\0')")
    assert r2.new_files == ["plot.png"]
    r3 = await box.run("x = 1")
    assert r3.new_files == []


# ------------------------------------------------------------------------------------ limits and failures
async def test_infinite_loop_times_out_and_next_call_is_fresh(tmp_path):
    async with CodeSandbox(tmp_path, timeout_s=1.0) as sb:
        await sb.run("state = 'kept'\nprint('started')")
        t0 = time.monotonic()
        r = await sb.run("print('before loop', flush=True)\nwhile True:\n    pass")
        took = time.monotonic() - t0
        assert not r.ok and r.error == "timeout" and r.restarted
        assert 1.0 <= took < 2.0
        assert r.stdout == "before loop\n"  # output written before the kill is kept
        assert "wall-clock limit" in r.stderr and "restarted" in r.stderr
        assert sb.pid is None
        r2 = await sb.run("print('alive')\nstate")
        assert r2.stdout == "alive\n" and r2.error == "exception" and "NameError" in r2.stderr
        assert sb.starts == 2


async def test_memory_bomb_reports_memory_and_keeps_sandbox(box):
    await box.run("keep = 'yes'")
    r = await box.run("x = bytearray(10**10)")
    assert not r.ok and r.error in ("memory", "exception")
    assert "MemoryError" in r.stderr
    r2 = await box.run("keep")
    assert r2.ok and r2.stdout == "'yes'\n" and not r2.restarted


async def test_rlimits_are_applied_in_child(tmp_path):
    async with CodeSandbox(tmp_path, memory_mb=1024, cpu_s=30, max_file_mb=1, max_procs=16) as sb:
        r = await sb.run("import resource as R\n"
                         "print([R.getrlimit(k) for k in (R.RLIMIT_AS, R.RLIMIT_CPU, R.RLIMIT_FSIZE, R.RLIMIT_CORE)])\n"
                         "print(R.getrlimit(R.RLIMIT_NPROC)[0])")
        as_, cpu, fsize, core = eval(r.stdout.splitlines()[0])
        assert as_ == (1024 * 2**20,) * 2 and cpu == (30, 35) and fsize == (2**20,) * 2 and core == (0, 0)
        nproc = int(r.stdout.splitlines()[1])
        assert nproc >= 16  # headroom above the user's existing tasks (exactly 16 for root, who is exempt)
        r = await sb.run("try:\n    open('big.bin', 'wb').write(b'0' * (2 * 2**20))\nexcept OSError as e:\n    print(e.errno)")
        assert r.ok and r.stdout.strip() == "27"  # EFBIG, and the interpreter survived SIGXFSZ


async def test_cpu_limit_kills_and_restarts(tmp_path):
    async with CodeSandbox(tmp_path, cpu_s=1, timeout_s=20) as sb:
        t0 = time.monotonic()
        r = await sb.run("while True:\n    pass")
        assert time.monotonic() - t0 < 8
        assert not r.ok and r.error == "cpu_limit" and r.restarted and "CPU-time" in r.stderr
        assert (await sb.run("print(1)")).stdout == "1\n"


async def test_huge_output_is_capped_without_buffering_in_parent(tmp_path):
    async with CodeSandbox(tmp_path, max_output_chars=1000, timeout_s=30) as sb:
        await sb.run("pass")  # start-up outside the measured window
        tracemalloc.start()
        try:
            r = await sb.run("print('head' + 'x' * 3 * 10**7 + 'tail')")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert r.ok and r.error is None
        assert peak < 8 * 2**20, f"parent peak {peak / 2**20:.1f} MiB"
        assert r.stdout.startswith("headxxx") and r.stdout.endswith("xxxtail\n")
        assert "output truncated" in r.stdout
        n = 3 * 10**7 + 9
        assert f"{n - 1000:,} characters omitted" in r.stdout
        assert len(r.stdout) < 1200


async def test_output_flood_beyond_hard_limit_is_killed(tmp_path):
    async with CodeSandbox(tmp_path, max_output_bytes=2 * 2**20, timeout_s=20) as sb:
        t0 = time.monotonic()
        r = await sb.run("while True:\n    print('y' * 1000)")
        assert time.monotonic() - t0 < 10
        assert not r.ok and r.error == "output_limit" and r.restarted
        assert (await sb.run("print(2)")).stdout == "2\n"


async def test_os_exit_and_segfault_are_crashes_that_recover(box):
    await box.run("v = 1")
    r = await box.run("import os; print('bye', flush=True); os._exit(3)")
    assert not r.ok and r.error == "crashed" and r.restarted
    assert r.stdout == "bye\n" and "status 3" in r.stderr
    r = await box.run("import ctypes; ctypes.string_at(0)")
    assert not r.ok and r.error == "crashed" and "SIGSEGV" in r.stderr
    r = await box.run("print('ok')\n'v' in globals()")
    assert r.ok and r.stdout == "ok\nFalse\n"


async def test_interpreter_lost_between_calls_is_reported(box):
    await box.run("import threading, os\nthreading.Timer(0.2, os._exit, [0]).start()\nv = 1")
    deadline = time.monotonic() + 10
    while box.pid is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert box.pid is None
    r = await box.run("print('fresh')")
    assert r.ok and r.restarted and r.stdout == "fresh\n"
    assert "was lost" in r.stderr


async def test_environment_is_scrubbed(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    async with CodeSandbox(tmp_path / "ws", env={"EXTRA_FLAG": "1"}) as sb:
        r = await sb.run("import os, sys\nprint(sorted(os.environ))\nprint(os.getcwd())\n"
                         "print(os.environ['HOME'], os.environ['MPLBACKEND'], os.environ['EXTRA_FLAG'])\n"
                         "print(sys.executable)\nos.system('env')")
    names = eval(r.stdout.splitlines()[0])
    assert not {"OPENAI_API_KEY", "HTTPS_PROXY", "HF_TOKEN"} & set(names)
    ws = str((tmp_path / "ws").resolve())
    assert r.stdout.splitlines()[1] == ws
    assert r.stdout.splitlines()[2] == f"{ws} Agg 1"
    assert "sk-secret" not in r.stdout and "hf_secret" not in r.stdout


# ------------------------------------------------------------------------------------ lifecycle
async def test_close_kills_daemons_of_the_whole_tree(tmp_path):
    # The fallback mode: the PIDs printed inside are host PIDs only without a PID namespace (the
    # bubblewrap mode is covered by tests/test_sandbox.py).
    sb = CodeSandbox(tmp_path, isolation="rlimits")
    r = await sb.run("import subprocess\n"
                     "a = subprocess.Popen(['sleep', '1000'])\n"
                     "b = subprocess.Popen(['sleep', '1001'], start_new_session=True)\n"
                     "c = subprocess.Popen(['sh', '-c', 'sleep 1002 & wait'])\n"
                     "print(a.pid, b.pid, c.pid)")
    pgid = sb.pid
    pids = [pgid, *map(int, r.stdout.split())]
    time.sleep(0.1)
    pids += [c.pid for c in psutil.Process(pids[3]).children()]
    assert len(pids) == 5 and len(_alive(pids)) == 5
    await sb.close()
    deadline = time.monotonic() + 3
    while _alive(pids) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert _alive(pids) == []
    in_group = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                in_group.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    assert in_group == []
    assert not (tmp_path / ".kit" / "sandbox").exists()


async def test_close_is_idempotent_and_run_after_close_raises(tmp_path):
    sb = CodeSandbox(tmp_path)
    await sb.close()  # never started
    sb2 = CodeSandbox(tmp_path)
    await sb2.run("1")
    await sb2.close()
    await sb2.close()
    assert sb2.closed and sb2.pid is None
    with pytest.raises(CodeSandboxClosed):
        await sb2.run("1")


async def test_close_during_a_running_call(tmp_path):
    sb = CodeSandbox(tmp_path, timeout_s=30)
    await sb.run("pass")
    task = asyncio.ensure_future(sb.run("import time; time.sleep(100)"))
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    await sb.close()
    r = await task
    assert time.monotonic() - t0 < 5
    assert not r.ok and r.error == "closed"


async def test_calls_to_one_sandbox_are_serialized(box):
    await box.run("log = []")
    code = "import time\nlog.append(('start', {i}))\ntime.sleep(0.1)\nlog.append(('end', {i}))"
    await asyncio.gather(*(box.run(code.format(i=i)) for i in range(3)))
    r = await box.run("log")
    log = eval(r.stdout)
    assert [e[0] for e in log] == ["start", "end"] * 3
    assert all(log[k][1] == log[k + 1][1] for k in range(0, 6, 2))


async def test_eight_sandboxes_run_concurrently(tmp_path):
    boxes = [CodeSandbox(tmp_path / f"ep{i}", timeout_s=20) for i in range(8)]
    try:
        async def episode(i, sb):
            await sb.run(f"n = {i}")
            r = await sb.run("import time; time.sleep(0.2); print(n * n)")
            return r

        t0 = time.monotonic()
        results = await asyncio.gather(*(episode(i, sb) for i, sb in enumerate(boxes)))
        assert time.monotonic() - t0 < 1.6 + 8 * 0.5  # sleeps overlap; start-ups may contend on 2 cores
        assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(8)]
        assert len({sb.pid for sb in boxes}) == 8
    finally:
        await asyncio.gather(*(sb.close() for sb in boxes))
    assert all(sb.pid is None for sb in boxes)


# ------------------------------------------------------------------------------------ bad input
async def test_bad_arguments_raise_clear_errors(tmp_path):
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(NotADirectoryError):
        CodeSandbox(f)
    with pytest.raises(ValueError, match="timeout_s"):
        CodeSandbox(tmp_path, timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        CodeSandbox(tmp_path, memory_mb=1)
    with pytest.raises(ValueError, match="max_procs"):
        CodeSandbox(tmp_path, max_procs=0)
    with pytest.raises(ValueError, match="not found"):
        CodeSandbox(tmp_path, python="/nonexistent/python3")
    async with CodeSandbox(tmp_path, max_code_chars=10) as sb:
        with pytest.raises(TypeError):
            await sb.run(b"print(1)")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="limit"):
            await sb.run("x" * 11)


async def test_interpreter_that_cannot_start_raises(tmp_path):
    fake = tmp_path / "fakepython"
    fake.write_text("#!/bin/sh\necho 'no python here' >&2\nexit 7\n")
    fake.chmod(0o755)
    sb = CodeSandbox(tmp_path / "ws", python=str(fake), start_timeout_s=5)
    with pytest.raises(CodeSandboxError, match="no python here"):
        await sb.run("1")
    await sb.close()


# ------------------------------------------------------------------------------------ internals
def test_capture_keeps_head_and_tail_and_counts_characters():
    cap = _Capture(100)
    cap.feed(("é" * 30 + "\n").encode())
    assert cap.text() == "é" * 30 + "\n" and cap.total_chars == 31
    cap = _Capture(100)
    for _ in range(1000):
        cap.feed(("ab€" * 10).encode())
    text = cap.text()
    assert text.startswith("ab€ab€") and text.endswith("ab€")
    shown = text.split("\n[...")[0] + text.split("...]\n")[1]
    assert len(shown) == 100
    assert f"{30000 - 100:,} characters omitted" in text
    cap = _Capture(100)
    cap.feed(b"z" * 150)  # over the character cap but nothing dropped in the middle
    assert "50 characters omitted" in cap.text()


async def test_pump_finds_sentinel_split_across_reads():
    sentinel = b"\x00END-abc\x00"
    reader = asyncio.StreamReader()
    payload = b"hello " * 10 + sentinel + b"next-call"
    for i in range(0, len(payload), 3):
        reader.feed_data(payload[i:i + 3])
    cap, spill = _Capture(1000), []
    assert await _pump(reader, cap, sentinel, b"pre:", 10**6, spill) is True
    assert cap.text() == "pre:" + "hello " * 10
    assert b"".join(spill) == b"next-call"[: len(b"".join(spill))]
    reader2 = asyncio.StreamReader()
    reader2.feed_data(b"no sentinel")
    reader2.feed_eof()
    cap2 = _Capture(1000)
    assert await _pump(reader2, cap2, sentinel, b"", 10**6, []) is False
    assert cap2.text() == "no sentinel"
