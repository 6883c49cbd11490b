"""Attack battery for the execute_code sandbox (kit.harness.sandbox; issue "Harness under attack").

Each attack runs real code in a real sandbox and checks, from the host side, that it was contained:
files outside the workspace unread and unchanged, no connection reached a server on the host, the
process count stayed capped, nothing survived the sandbox. The bubblewrap tests skip (with the
probe's reason) where bubblewrap cannot run; the fallback's guarantees are tested separately.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from kit.harness import sandbox
from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.loop import Harness
from kit.harness.sandbox import CodeSandbox, CodeSandboxError, bwrap, bwrap_probe, resolve_isolation
from kit.paths import PROJECT_ROOT
from kit.policy.scripted import ScriptedPolicy, tool_call_text
from tests.conftest import MemoryBackend

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

_PROBE = bwrap_probe()
needs_bwrap = pytest.mark.skipif(not _PROBE.available, reason=f"bubblewrap unavailable: {_PROBE.detail}")
ROOT = os.geteuid() == 0
SECRET = "s3cr3t-" + os.urandom(4).hex()


async def run_json(box: CodeSandbox, code: str):
    """Run ``code`` (which prints one JSON document last) and decode that document."""
    r = await box.run(textwrap.dedent(code))
    assert r.ok, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def marked_processes(token: str) -> list[int]:
    """Host PIDs whose environment carries this sandbox's marker (alive, not zombies)."""
    marker = f"KIT_SANDBOX_ID={token}".encode()
    out = []
    for p in psutil.process_iter():
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if marker in env and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (OSError, psutil.Error):
            pass
    return out


async def wait_until(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.05)
    return pred()


@pytest.fixture
def layout(tmp_path):
    """Two episode workspaces side by side, the other one holding a secret."""
    other = tmp_path / "episodes" / "other"
    other.mkdir(parents=True)
    (other / "notes.txt").write_text(SECRET)
    ws = tmp_path / "episodes" / "mine"
    return ws, other


@pytest.fixture
async def box(layout):
    sb = CodeSandbox(layout[0], timeout_s=20, isolation="bwrap")
    yield sb
    await sb.close()


# ------------------------------------------------------------------------------------ filesystem
@needs_bwrap
async def test_files_outside_the_workspace_cannot_be_read(box, layout):
    _, other = layout
    targets = ["/etc/passwd", "/etc/shadow", "/etc/hostname", "/root/.bashrc", str(other / "notes.txt"),
               str(PROJECT_ROOT / "kit" / "types.py"), str(PROJECT_ROOT / "README.md"),
               str(PROJECT_ROOT / "pyproject.toml"), str(Path(sandbox.__file__)),
               str(Path(bwrap.__file__).with_name("driver.py"))]
    got = await run_json(box, f"""
        import json
        out = {{}}
        for p in {targets!r}:
            try:
                out[p] = open(p).read()[:40]
            except OSError as e:
                out[p] = type(e).__name__
        try:
            import kit
            out["import kit"] = "imported"
        except ImportError as e:
            out["import kit"] = type(e).__name__
        out["listdir /"] = sorted(os.listdir("/")) if (os := __import__("os")) else None
        print(json.dumps(out))
    """)
    for p in targets:
        assert got[p] in ("FileNotFoundError", "PermissionError"), (p, got[p])
    assert got["import kit"] in ("ModuleNotFoundError", "ImportError")
    assert "home" not in got["listdir /"] and "mnt" not in got["listdir /"]


@needs_bwrap
async def test_writes_outside_the_workspace_fail_and_inside_succeed(box, layout):
    ws, other = layout
    targets = ["/etc/evil", "/usr/evil", "/evil", "/run/sandbox/driver.py", str(other / "notes.txt"),
               str(other / "new.txt"), str(PROJECT_ROOT / "evil.txt"), sys.prefix + "/evil.txt",
               "/proc/sys/kernel/hostname"]
    got = await run_json(box, f"""
        import json
        out = {{}}
        for p in {targets!r}:
            try:
                with open(p, "w") as f:
                    f.write("x")
                out[p] = "written"
            except OSError as e:
                out[p] = type(e).__name__
        open("inside.txt", "w").write("ok")
        print(json.dumps(out))
    """)
    assert all(v != "written" for v in got.values()), got
    assert (other / "notes.txt").read_text() == SECRET and not (other / "new.txt").exists()
    assert not (PROJECT_ROOT / "evil.txt").exists() and not Path(sys.prefix, "evil.txt").exists()
    assert (ws / "inside.txt").read_text() == "ok"


@needs_bwrap
async def test_symlinks_and_hardlinks_do_not_lead_out(box, layout):
    ws, other = layout
    got = await run_json(box, f"""
        import json, os
        out = {{}}
        os.symlink("/etc/passwd", "pw")
        os.symlink({str(other / "notes.txt")!r}, "theirs")
        os.symlink("../other", "up")
        for name in ("pw", "theirs", "up/notes.txt"):
            try:
                out[name] = open(name).read()[:40]
            except OSError as e:
                out[name] = type(e).__name__
        try:
            os.link("/usr/bin/env", "env_link")
            out["hardlink"] = "linked"
        except OSError as e:
            out["hardlink"] = type(e).__name__
        print(json.dumps(out))
    """)
    assert got == {"pw": "FileNotFoundError", "theirs": "FileNotFoundError", "up/notes.txt": "FileNotFoundError",
                   "hardlink": got["hardlink"]} and got["hardlink"] != "linked"
    assert (ws / "pw").is_symlink()  # the link exists, but only points at nothing inside the sandbox


# ------------------------------------------------------------------------------------ network
@needs_bwrap
async def test_no_network_reaches_the_host(box):
    accepted = []
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                accepted.append(1)
                conn.close()
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        got = await run_json(box, f"""
            import json, socket
            out = {{}}
            for name, addr in [("host_loopback", ("127.0.0.1", {port})), ("public", ("1.1.1.1", 443)),
                               ("metadata", ("169.254.169.254", 80))]:
                s = socket.socket()
                s.settimeout(2)
                try:
                    s.connect(addr)
                    out[name] = "connected"
                except OSError as e:
                    out[name] = type(e).__name__
                finally:
                    s.close()
            try:
                socket.getaddrinfo("example.com", 80)
                out["dns"] = "resolved"
            except OSError as e:
                out["dns"] = type(e).__name__
            out["interfaces"] = [n for _, n in socket.if_nameindex()]
            print(json.dumps(out))
        """)
    finally:
        stop.set()
        t.join()
        srv.close()
    assert got["host_loopback"] == "ConnectionRefusedError" and not accepted
    assert got["public"] != "connected" and got["metadata"] != "connected" and got["dns"] != "resolved"
    assert got["interfaces"] == ["lo"]


# ------------------------------------------------------------------------------------ processes
@needs_bwrap
async def test_only_own_processes_visible_and_no_privileges(box):
    got = await run_json(box, """
        import json, os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
        try:
            os.setuid(0)
            regained = True
        except OSError:
            regained = False
        print(json.dumps({"pids": [p for p in os.listdir("/proc") if p.isdigit()], "uid": os.getuid(),
                          "cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip(),
                          "regained": regained, "hostname": os.uname().nodename}))
    """)
    assert len(got["pids"]) <= 4  # bwrap's init, the interpreter, maybe a transient child
    assert int(got["cap_eff"], 16) == 0 and got["no_new_privs"] == "1" and not got["regained"]
    assert got["hostname"] == "sandbox"
    if ROOT:
        assert got["uid"] == box.sandbox_uid and got["uid"] != 0


@pytest.mark.skipif(ROOT and not _PROBE.available, reason="as root, only the bubblewrap mode caps processes")
async def test_fork_bomb_is_capped_and_killed(tmp_path):
    cap = 12
    async with CodeSandbox(tmp_path / "ws", timeout_s=3, max_procs=cap) as sb:
        got = await run_json(sb, """
            import json, os, time
            made, err = 0, None
            for _ in range(500):
                try:
                    pid = os.fork()
                except OSError as e:
                    err = type(e).__name__
                    break
                if pid == 0:
                    time.sleep(60)
                    os._exit(0)
                made += 1
            print(json.dumps({"made": made, "error": err}))
        """)
        assert got["error"] == "BlockingIOError" and got["made"] <= cap
        if sb.isolation == "bwrap" and ROOT:
            live = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == sb.sandbox_uid]
            assert 1 < len(live) <= cap + 1
        # A persistent bomb: the call hits the wall clock, everything in the sandbox is killed.
        t0 = time.monotonic()
        r = await sb.run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
        assert r.error == "timeout" and r.restarted and time.monotonic() - t0 < 10
        assert await wait_until(lambda: not marked_processes(sb._token), 5)
        r = await sb.run("print('alive')")
        assert r.ok and r.stdout == "alive\n"


@pytest.mark.parametrize("mode", ["bwrap", "rlimits"])
async def test_daemon_that_outlives_the_call_dies_with_the_sandbox(tmp_path, mode):
    if mode == "bwrap" and not _PROBE.available:
        pytest.skip(f"bubblewrap unavailable: {_PROBE.detail}")
    ws = tmp_path / "ws"
    sb = CodeSandbox(ws, timeout_s=10, isolation=mode)
    # Double fork + setsid: the daemon leaves the process group and is re-parented.
    r = await sb.run(textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    with open("heartbeat", "a") as f:
                        f.write(".")
                    time.sleep(0.05)
            os._exit(0)
        time.sleep(0.3)
        print("spawned")
    """))
    assert r.ok and r.stdout == "spawned\n"
    beat = ws / "heartbeat"
    assert await wait_until(lambda: beat.exists() and beat.stat().st_size > 2)
    assert marked_processes(sb._token)
    await sb.close()
    assert await wait_until(lambda: not marked_processes(sb._token), 5)
    size = beat.stat().st_size
    await asyncio.sleep(0.3)
    assert beat.stat().st_size == size  # no heartbeat after close


@needs_bwrap
def test_killing_the_harness_process_kills_its_sandboxes(tmp_path):
    script = textwrap.dedent(f"""
        import asyncio, sys
        from kit.harness.sandbox import CodeSandbox
        async def main():
            sb = CodeSandbox({str(tmp_path / "ws")!r}, isolation="bwrap")
            await sb.run("import subprocess; subprocess.Popen(['sleep', '600'], start_new_session=True)")
            print(sb._token, flush=True)
            await asyncio.sleep(600)
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=PROJECT_ROOT)
    try:
        token = proc.stdout.readline().strip()
        assert token and marked_processes(token)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 5
    while marked_processes(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not marked_processes(token)


# ------------------------------------------------------------------------------------ limits
async def test_memory_output_and_time_bombs_are_contained(tmp_path):
    async with CodeSandbox(tmp_path / "ws", timeout_s=2, memory_mb=512, max_output_chars=500,
                           max_output_bytes=4 * 2**20) as sb:
        await sb.run("keep = 1")
        r = await sb.run("x = bytearray(2 * 2**30)")
        assert r.error == "memory" and not r.restarted and "MemoryError" in r.stderr
        r = await sb.run("print('z' * 10**6)")
        assert r.ok and len(r.stdout) < 700 and "output truncated" in r.stdout
        r = await sb.run("while True:\n    print('flood' * 1000)")
        assert r.error in ("output_limit", "timeout") and r.restarted
        r = await sb.run("while True:\n    pass")
        assert r.error == "timeout" and r.restarted
        r = await sb.run("print('fine')")
        assert r.ok and r.stdout == "fine\n"


@needs_bwrap
async def test_a_hostile_sandbox_does_not_disturb_another(tmp_path):
    calm = CodeSandbox(tmp_path / "calm", timeout_s=20, isolation="bwrap")
    wild = CodeSandbox(tmp_path / "wild", timeout_s=2, max_procs=8, isolation="bwrap")
    try:
        await calm.run("state = 41")

        async def calm_calls():
            out = []
            for _ in range(5):
                out.append(await calm.run("state += 1\nstate"))
                await asyncio.sleep(0.1)
            return out

        bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
        calm_res, wild_res = await asyncio.gather(calm_calls(), wild.run(bomb))
        assert [r.stdout for r in calm_res] == [f"{n}\n" for n in range(42, 47)]
        assert wild_res.error == "timeout"
    finally:
        await asyncio.gather(calm.close(), wild.close())


# ------------------------------------------------------------------------------------ configuration
def test_isolation_modes_and_requirement(monkeypatch):
    with pytest.raises(ValueError, match="isolation"):
        CodeSandbox("/tmp/unused-ws", isolation="chroot")
    monkeypatch.setenv("MMSEARCH_KIT_SANDBOX", "rlimits")
    assert CodeSandbox("/tmp/unused-ws").isolation == "rlimits"
    monkeypatch.setenv("MMSEARCH_KIT_SANDBOX", "nonsense")
    with pytest.raises(ValueError):
        CodeSandbox("/tmp/unused-ws")
    monkeypatch.delenv("MMSEARCH_KIT_SANDBOX")
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        probe = bwrap_probe(refresh=True)
        assert not probe.available and "not installed" in probe.detail
        assert resolve_isolation("auto") == "rlimits"
        with pytest.raises(CodeSandboxError, match="required"):
            resolve_isolation("bwrap")
    finally:
        monkeypatch.undo()
        bwrap_probe(refresh=True)


async def test_required_bwrap_fails_the_first_call_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(bwrap, "_PROBE", bwrap.BwrapProbe(None, "bwrap is not installed (test)"))
    sb = CodeSandbox(tmp_path / "ws", isolation="bwrap")
    with pytest.raises(CodeSandboxError, match="not installed"):
        await sb.run("1")
    await sb.close()


# ------------------------------------------------------------------------------------ through the harness
def _absurd_png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_attack_battery_through_the_harness(tmp_path):
    """Every attack ends as an observation the model can read; the episode goes on and answers,
    and a concurrent honest episode is unaffected."""
    other = tmp_path / "run" / "other-episode"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text(SECRET)
    attacks = {
        "loop": "while True:\n    pass",
        "memory": "x = bytearray(8 * 2**30)",
        "stdout": "print('A' * 5 * 10**6)",
        "image": f"open('bomb.png', 'wb').write({_absurd_png()!r})",
    }
    isolated = resolve_isolation() == "bwrap"  # what the harness's default sandbox will use
    if isolated:  # the fallback cannot contain these (and as root the write would succeed)
        attacks.update({
            "read": f"print(open({str(other / 'secret.txt')!r}).read())",
            "passwd": "print(open('/etc/passwd').read())",
            "write": "open('/usr/lib/evil', 'w').write('x')",
            "net": "import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)",
        })
    script = [tool_call_text("execute_code", {"code": c}) for c in attacks.values()] + ["<response>done</response>"]
    cfg = HarnessConfig(code_timeout_s=3, max_turns=len(script) + 1, max_calls=len(script) + 1,
                        max_context_tokens=200_000)

    async def go():
        hostile = Harness(ScriptedPolicy(script, completion_tokens=10), MemoryBackend(), cfg)
        honest = Harness(ScriptedPolicy([tool_call_text("execute_code", {"code": "print(6 * 7)"}),
                                         "<response>42</response>"], completion_tokens=10), MemoryBackend(), cfg)
        return await asyncio.gather(hostile.run(Task(id="h", question="q"), tmp_path / "run" / "hostile"),
                                    honest.run(Task(id="o", question="q"), tmp_path / "run" / "honest"))

    rec, ok = asyncio.run(go())
    EpisodeRecord.model_validate_json(rec.model_dump_json())
    assert rec.status == "answered" and rec.final_response == "done", rec.error
    obs = {name: m.text() for name, m in zip(attacks, [m for m in rec.messages if m.role == "tool"])}
    assert SECRET not in json.dumps([m.text() for m in rec.messages])
    assert "status: failed (timeout)" in obs["loop"] and "restarted" in obs["loop"]
    assert "status: failed (memory)" in obs["memory"]
    assert "Result truncated" in obs["stdout"] and len(obs["stdout"]) < 5_000  # sandbox cap, then persistence
    saved = [e.detail["file"] for e in rec.events if e.type == "result_persisted"]
    persisted = (tmp_path / "run" / "hostile" / saved[0]).read_text()
    assert "output truncated" in persisted and len(persisted) < 50_000
    assert "not registered" in obs["image"] and not any(i.source_url == "bomb.png" for i in rec.images)
    if isolated:
        for name in ("read", "passwd", "write", "net"):
            assert "status: failed (exception)" in obs[name], (name, obs[name])
        assert "root:" not in obs["passwd"]
    assert ok.status == "answered" and "42" in [m for m in ok.messages if m.role == "tool"][0].text()
    assert not (tmp_path / "run" / "hostile" / ".kit" / "sandbox").exists()  # cleaned up


# ------------------------------------------------------------------------------------ the battery as a table
async def attack_battery(root: Path, isolation: str = "bwrap", fork_bomb: bool = True) -> list[dict]:
    """Every attack of the issue against one fresh sandbox each, judged from the host side. Returns
    ``[{"attack", "contained": bool | None, "detail"}]`` (None: not tried). Used by the test below
    and by ``benchmarks/bench_robustness.py`` (which also runs it on the fallback for comparison)."""
    root.mkdir(parents=True, exist_ok=True)
    other = root / "other-episode"
    other.mkdir(exist_ok=True)
    secret = "s3cr3t-" + os.urandom(6).hex()
    (other / "notes.txt").write_text(secret)
    tag = os.urandom(4).hex()
    outside = [PROJECT_ROOT / f"evil-{tag}.txt", Path(tempfile.gettempdir()) / f"evil-{tag}.txt"]
    results: list[dict] = []

    def add(name, contained, detail=""):
        results.append({"attack": name, "contained": contained, "detail": str(detail)[:200]})

    async def fresh(name, **kw):
        return CodeSandbox(root / name, isolation=isolation, **{"timeout_s": 10, **kw})

    shared = await fresh("episode")  # attacks that leave the interpreter alive share one sandbox

    async def one(name, code, judge, **kw):
        sb = await fresh(name, **kw) if kw else shared
        try:
            r = await sb.run(textwrap.dedent(code))
            add(name, bool(judge(r, sb)), (r.error or "") + " " + (r.stdout + r.stderr)[-150:])
        except Exception as e:  # noqa: BLE001 - the battery reports, the caller asserts
            add(name, False, f"{type(e).__name__}: {e}")
        finally:
            if sb is not shared:
                await sb.close()

    await one("read /etc/passwd", "print(open('/etc/passwd').read())", lambda r, sb: "root:" not in r.stdout)
    kit_file = PROJECT_ROOT / "kit" / "types.py"
    await one("read the kit's source", f"print(open({str(kit_file)!r}).read()[:100])",
              lambda r, sb: kit_file.read_text()[:60] not in r.stdout)
    await one("import the kit", "import kit.types; print('imported')", lambda r, sb: "imported" not in r.stdout)
    await one("read another episode's workspace", f"print(open({str(other / 'notes.txt')!r}).read())",
              lambda r, sb: secret not in r.stdout)
    await one("write outside the workspace", "".join(
        f"try:\n    open({str(p)!r}, 'w').write('x')\nexcept OSError as e:\n    print(e)\n" for p in outside),
        lambda r, sb: not any(p.exists() for p in outside))
    await one("symlink out of the workspace", "import os\nos.symlink('/etc/passwd', 'pw')\n"
              f"os.symlink({str(other / 'notes.txt')!r}, 'theirs')\nprint(open('pw').read(), open('theirs').read())",
              lambda r, sb: "root:" not in r.stdout and secret not in r.stdout)
    await one("see host processes", "import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]))",
              lambda r, sb: r.ok and int(r.stdout) < 10)
    await one("regain root", "import os\ntry:\n    os.setuid(0); print('uid0')\nexcept OSError:\n    pass\n"
              "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0])",
              lambda r, sb: "uid0" not in r.stdout and "0000000000000000" in r.stdout)

    # network: a listener on the host's loopback must see nothing
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.setblocking(False)
    await one("connect to the host", f"import socket\ns = socket.socket(); s.settimeout(2)\n"
              f"try:\n    s.connect(('127.0.0.1', {srv.getsockname()[1]})); print('connected')\n"
              "except OSError as e:\n    print(e)",
              lambda r, sb: "connected" not in r.stdout and not _accepted(srv))
    srv.close()
    await shared.close()

    await one("memory bomb", "x = bytearray(16 * 2**30)", lambda r, sb: r.error == "memory", memory_mb=1024)
    await one("infinite loop", "while True:\n    pass", lambda r, sb: r.error == "timeout" and r.duration_s < 6,
              timeout_s=2)
    await one("huge stdout", "import sys\nfor _ in range(50):\n    sys.stdout.write('A' * 10**6)",
              lambda r, sb: len(r.stdout) < 3000, max_output_chars=1000)

    # a daemon that outlives the call, then the sandbox is closed
    sb = await fresh("daemon")
    try:
        await sb.run("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                     "        while True:\n            open('beat', 'a').write('.')\n            time.sleep(0.05)\n"
                     "    os._exit(0)\ntime.sleep(0.3)")
        await sb.close()
        await asyncio.sleep(0.5)
        beat = root / "daemon" / "beat"
        size = beat.stat().st_size if beat.exists() else 0
        await asyncio.sleep(0.3)
        add("daemon outliving the sandbox", not marked_processes(sb._token) and
            (beat.stat().st_size if beat.exists() else 0) == size, f"heartbeat bytes {size}")
    finally:
        await sb.close()

    if fork_bomb:
        sb = await fresh("fork bomb", timeout_s=3, max_procs=32)
        peak = 0
        try:
            task = asyncio.ensure_future(sb.run("import os\nwhile True:\n    try:\n        os.fork()\n"
                                                "    except OSError:\n        pass"))
            while not task.done():
                peak = max(peak, len(marked_processes(sb._token)))
                await asyncio.sleep(0.2)
            r = task.result()
            await sb.close()
            gone = await wait_until(lambda: not marked_processes(sb._token), 5)
            # the cap: the interpreter + 32, plus bubblewrap's two processes (they carry the marker too)
            add("fork bomb", r.error == "timeout" and peak <= 32 + 3 and gone, f"peak {peak} processes")
        finally:
            await sb.close()
    else:
        add("fork bomb", None, "not tried: without a process cap it would hurt the machine")

    # an image with absurd dimensions, through the harness's registry
    cfg = HarnessConfig(code_timeout_s=10)
    write_bomb = tool_call_text("execute_code", {"code": f"open('bomb.png', 'wb').write({_absurd_png()!r})"})
    rec = await Harness(ScriptedPolicy([write_bomb, "<response>x</response>"], completion_tokens=5), MemoryBackend(), cfg
                        ).run(Task(id="img", question="q"), root / "image-episode")
    add("image with absurd dimensions", rec.status == "answered" and not rec.images
        and "not registered" in rec.messages[3].text(), rec.messages[3].text()[-120:])
    for p in outside:
        p.unlink(missing_ok=True)
    return results


def _accepted(srv: socket.socket) -> bool:
    try:
        conn, _ = srv.accept()
        conn.close()
        return True
    except BlockingIOError:
        return False


@needs_bwrap
async def test_attack_battery_is_fully_contained(tmp_path):
    results = await attack_battery(tmp_path / "battery")
    escaped = [r for r in results if r["contained"] is not True]
    assert len(results) >= 14 and not escaped, escaped


# ------------------------------------------------------------------------------------ the harness as a confused deputy
@needs_bwrap
async def test_planted_symlinks_never_redirect_the_harness(tmp_path):
    """The harness (maybe root) writes into the workspace; links the code plants there must never
    make it create, chown, write or delete anything outside."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    ws = tmp_path / "ws"
    sb = CodeSandbox(ws, timeout_s=10, isolation="bwrap")
    try:
        got = await run_json(sb, f"""
            import json, os, shutil
            out = {{}}
            for name, act in [("plant in tool_results", lambda: os.symlink({str(victim / 'x.txt')!r}, 'tool_results/turn02_x.txt')),
                              ("replace tool_results", lambda: os.rename('tool_results', 'elsewhere')),
                              ("remove tool_results", lambda: shutil.rmtree('tool_results'))]:
                try:
                    act()
                    out[name] = "done"
                except OSError as e:
                    out[name] = type(e).__name__
            shutil.rmtree('.kit')
            os.symlink({str(victim)!r}, '.kit')  # the scratch folder now points outside
            print(json.dumps(out))
        """)
        assert all(v != "done" for v in got.values()), got
        r = await sb.run("import os; os._exit(1)")  # the next call restarts and recreates the scratch folder
        assert r.error == "crashed" and r.restarted
        r = await sb.run("print('again')")
        assert r.ok and r.stdout == "again\n" and sb.starts == 2
        assert (ws / ".kit").is_dir() and not (ws / ".kit").is_symlink()
    finally:
        await sb.close()
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert (victim / "keep.txt").read_text() == "keep" and os.stat(victim).st_uid == os.getuid()


@needs_bwrap
def test_persisted_results_stay_readable_by_the_code(tmp_path):
    cfg = HarnessConfig(code_timeout_s=10)
    script = [tool_call_text("execute_code", {"code": "print('x' * 30000)"}),
              tool_call_text("execute_code", {"code": "import glob; f = glob.glob('tool_results/*')[0]; "
                                                      "print(f, len(open(f).read()))"}),
              "<response>ok</response>"]
    rec = asyncio.run(Harness(ScriptedPolicy(script, completion_tokens=5), MemoryBackend(), cfg)
                      .run(Task(id="p", question="q"), tmp_path / "ws"))
    assert rec.status == "answered" and "tool_results/turn01_execute_code.txt" in rec.messages[5].text()
    assert "status: failed" not in rec.messages[5].text()
