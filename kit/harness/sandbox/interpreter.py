""":class:`CodeSandbox`: the persistent per-episode Python interpreter behind ``execute_code``.

WeAgent Table 4: "Runs Python in a persistent episode sandbox. Stdout/stderr are returned; newly
generated raster images are registered and the first five are re-fed." One child interpreter per
sandbox runs ``driver.py`` with cwd = the workspace; every block is ``exec``-ed in one persistent
``__main__`` (a final expression is shown like a REPL). Plain inherited pipes, not a Jupyter kernel
(ZMQ sockets), keep the child networkless. A wall-clock timeout, a crash or an output flood kills the
child's whole tree; the next call starts a fresh one. Isolation modes: ``docs/isolation.md``.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

import psutil

from kit.harness.sandbox import bwrap, driver, rlimits
from kit.harness.sandbox.base import CodeResult, CodeSandboxClosed, CodeSandboxError, requested_mode, resolve_isolation
from kit.harness.sandbox.capture import (
    MAX_RESPONSE_BYTES,
    _Capture,
    _OutputOverflow,
    _pump,
    encode_frame,
    finish_pumps,
    read_frame,
)
from kit.harness.sandbox.workspace import (
    KIT_DIR,
    child_env,
    give_tree,
    new_files,
    prepare_workspace,
    remove_scratch,
    snapshot,
)

log = logging.getLogger(__name__)

_WORKER = Path(driver.__file__).resolve()
_STREAM_LIMIT = 1 << 20  # asyncio buffer per output pipe; reading pauses (backpressure) above 2x this


async def _wait_exit(proc: asyncio.subprocess.Process, timeout: float) -> bool:
    """Wait until ``proc`` has exited. Not ``proc.wait()``: that also waits for its stdio pipes to
    close, which a surviving grandchild (or a paused, full pipe) can delay indefinitely."""
    deadline = time.monotonic() + timeout
    while proc.returncode is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.005)
    return True


_LIVE: weakref.WeakSet[CodeSandbox] = weakref.WeakSet()


@atexit.register
def _kill_all_at_exit() -> None:
    for box in list(_LIVE):
        box._kill_tree()


class CodeSandbox:
    """A persistent Python interpreter for one episode (WeAgent Table 4 ``execute_code``); implements
    :class:`kit.harness.sandbox.Sandbox`.

    ``workspace``: the episode directory, used as cwd and ``HOME`` (created on first run; must not be
    a file). ``timeout_s``: wall-clock limit per call in seconds. ``memory_mb``: address-space limit
    of the interpreter and each process it starts. ``cpu_s``: CPU seconds over the interpreter's
    lifetime. ``max_output_chars``: characters kept per stream per call. ``max_procs``: extra tasks
    (processes and threads) the code may create (None: no limit; exact under bubblewrap as root,
    headroom above the user's running tasks otherwise, no effect for root without bubblewrap).
    ``python``: interpreter to run (a path or a name on PATH; under bubblewrap its installation is
    bound read-only). ``max_file_mb``: largest file the code may write. ``max_output_bytes``:
    bytes per call and stream after which the call is killed. ``max_code_chars``: longest accepted
    code. ``env``: extra environment variables for the child, merged over the scrubbed defaults.
    ``start_timeout_s``: seconds allowed for interpreter start-up. ``scan_limit``: files scanned for
    ``new_files``. ``isolation``: ``"auto"``, ``"bwrap"`` (required) or ``"rlimits"``; None reads
    ``$MMSEARCH_KIT_SANDBOX`` (default ``"auto"``). ``readonly_dirs``: top-level workspace folders
    the harness itself writes into (the loop persists long results in ``tool_results/``); under
    bubblewrap they are bound read-only, so the code can read them but can neither plant a symlink
    in them nor replace them (which would make the harness write through it). See
    ``docs/isolation.md`` for what each mode does and does not isolate.

    Raises ``ValueError`` for bad arguments (an unknown isolation mode included),
    ``NotADirectoryError`` when ``workspace`` is a file.
    Use ``async with CodeSandbox(ws) as box: result = await box.run("print(1)")`` or call
    :meth:`close` explicitly. Calls to one sandbox are serialized by a lock; many sandboxes can run in
    one asyncio loop, each used from a single loop.
    """

    def __init__(self, workspace: Path | str, *, timeout_s: float = 30, memory_mb: int = 2048, cpu_s: int = 60,
                 max_output_chars: int = 20000, max_procs: int | None = 64, python: str = sys.executable,
                 max_file_mb: int = 512, max_output_bytes: int = 256 * 2**20, max_code_chars: int = 1_000_000,
                 env: Mapping[str, str] | None = None, start_timeout_s: float = 30, scan_limit: int = 10_000,
                 isolation: str | None = None, readonly_dirs: tuple[str, ...] = ("tool_results",)):
        ws = Path(workspace).expanduser().resolve()
        if ws.exists() and not ws.is_dir():
            raise NotADirectoryError(f"workspace {ws} exists and is not a directory")
        for name, value, lo in (("timeout_s", timeout_s, 0), ("start_timeout_s", start_timeout_s, 0)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > lo:
                raise ValueError(f"{name} must be a number > {lo}, got {value!r}")
        for name, value, lo in (("memory_mb", memory_mb, 32), ("cpu_s", cpu_s, 1),
                                ("max_output_chars", max_output_chars, 100), ("max_file_mb", max_file_mb, 1),
                                ("max_output_bytes", max_output_bytes, 1024), ("max_code_chars", max_code_chars, 1),
                                ("scan_limit", scan_limit, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
        if max_procs is not None and (not isinstance(max_procs, int) or isinstance(max_procs, bool) or max_procs < 1):
            raise ValueError(f"max_procs must be None or an integer >= 1, got {max_procs!r}")
        exe = python if os.sep in python else shutil.which(python)
        if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            raise ValueError(f"python interpreter {python!r} not found or not executable")
        if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise ValueError("env must map str to str")
        self.isolation_requested = requested_mode(isolation)
        bad = [d for d in readonly_dirs if not isinstance(d, str) or not d or "/" in d or d in (".", "..", KIT_DIR)]
        if bad:
            raise ValueError(f"readonly_dirs must be plain top-level folder names, got {bad!r}")
        self.readonly_dirs = tuple(readonly_dirs)
        self.workspace = ws
        self.timeout_s = float(timeout_s)
        self.memory_mb = memory_mb
        self.cpu_s = cpu_s
        self.max_output_chars = max_output_chars
        self.max_procs = max_procs
        self.python = os.path.abspath(exe)  # not resolved: a venv's python is a symlink that must stay
        self.max_file_mb = max_file_mb
        self.max_output_bytes = max_output_bytes
        self.max_code_chars = max_code_chars
        self.extra_env = dict(env or {})
        self.start_timeout_s = float(start_timeout_s)
        self.scan_limit = scan_limit

        self._lock = asyncio.Lock()
        self._closed = False
        self._proc: asyncio.subprocess.Process | None = None
        self._pgid: int | None = None
        self._res_transport: asyncio.ReadTransport | None = None
        self._res_reader: asyncio.StreamReader | None = None
        self._carry: dict[int, bytes] = {1: b"", 2: b""}
        self._calls = 0
        self._lost_note: str | None = None  # why the previous interpreter was lost between calls
        self.starts = 0  # interpreters started so far (1 + restarts)
        self.last_start_s: float | None = None  # seconds the latest start-up took
        self._mode: str | None = None  # resolved isolation, fixed at the first start
        self._bwrap: str | None = None
        self._ro_dirs: list[str] = []
        self._owner: tuple[int, int] | None = None  # (uid, gid) of the sandbox user (root + bwrap only)
        self._token = secrets.token_hex(8)  # marks the child's environment (fallback clean-up)
        _LIVE.add(self)

    # ------------------------------------------------------------------ public API
    @property
    def pid(self) -> int | None:
        """PID (= process group id) of the live interpreter, or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def isolation(self) -> str:
        """The isolation in use (``"bwrap"`` or ``"rlimits"``); before the first start, the one that
        will be used. Raises :class:`CodeSandboxError` when bubblewrap is required but unavailable."""
        return self._mode or resolve_isolation(self.isolation_requested)

    @property
    def sandbox_uid(self) -> int | None:
        """The unprivileged uid the code runs as when the harness is root under bubblewrap, else None."""
        return self._owner[0] if self._owner else None

    async def run(self, code: str) -> CodeResult:
        """Execute ``code`` in the persistent interpreter and return a :class:`CodeResult`.

        Raises ``TypeError`` if ``code`` is not a ``str``, ``ValueError`` if it is longer than
        ``max_code_chars``, :class:`CodeSandboxClosed` after :meth:`close`, and
        :class:`CodeSandboxError` if an interpreter cannot be started. Anything the code itself does
        (exceptions, timeouts, crashes, floods of output) comes back as a result, never raised.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be str, got {type(code).__name__}")
        if len(code) > self.max_code_chars:
            raise ValueError(f"code is {len(code):,} characters; the limit is {self.max_code_chars:,}")
        async with self._lock:
            if self._closed:
                raise CodeSandboxClosed("run() called on a closed CodeSandbox")
            t0 = time.monotonic()
            if self._mode is None:  # first call: CodeSandboxError when bwrap is required but missing
                await asyncio.to_thread(self._prepare_isolation)
            if self._owner is not None:
                await asyncio.to_thread(give_tree, self.workspace, self._owner,
                                        frozenset({KIT_DIR, *self.readonly_dirs}), self.scan_limit)
            before = await asyncio.to_thread(snapshot, self.workspace, self.scan_limit)
            restarted = False
            notes: list[str] = []
            if self._proc is not None and self._proc.returncode is not None:
                self._lost_note = self._lost_note or f"it exited on its own ({self._describe_exit()})"
                await self._discard()
            if self._lost_note:
                restarted = True
                notes.append(f"[sandbox] The previous Python interpreter was lost ({self._lost_note}); "
                             "this call ran in a fresh one, so earlier variables and imports are gone.")
                self._lost_note = None
            if self._proc is None:
                await self._start()
            result = await self._execute(code)
            after = await asyncio.to_thread(snapshot, self.workspace, self.scan_limit)
            result.new_files = new_files(before, after)
            if notes:
                result.stderr = "\n".join(notes) + ("\n" + result.stderr if result.stderr else "")
            result.restarted = result.restarted or restarted
            result.duration_s = time.monotonic() - t0
            return result

    async def close(self) -> None:
        """Kill the interpreter and all its descendants (its process group plus any descendant found)
        and release the pipes; remove the scratch folder ``.kit/sandbox``. Idempotent; an in-flight
        :meth:`run` returns ``error="closed"``."""
        if self._closed and self._proc is None:
            return
        self._closed = True
        self._kill_tree()  # at once, without waiting for a running call to finish
        async with self._lock:
            await self._discard()
            if self._mode == "rlimits":
                await asyncio.to_thread(rlimits.kill_escaped, self._token)
            remove_scratch(self.workspace)
        _LIVE.discard(self)

    async def __aenter__(self) -> CodeSandbox:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def __del__(self):  # safety net: never leave an interpreter behind
        try:
            self._kill_tree()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn down modules
            pass

    # ------------------------------------------------------------------ launching
    def _launch_argv(self, res_fd: int, config: dict) -> list[str]:
        """The command line of the child: the driver under ``python -I -B``, wrapped in bubblewrap in
        ``"bwrap"`` mode."""
        if self._mode != "bwrap":
            return rlimits.plain_argv(self.python, str(_WORKER), res_fd, json.dumps(config))
        assert self._bwrap is not None
        inner = rlimits.plain_argv(self.python, bwrap.DRIVER_IN_SANDBOX, res_fd, json.dumps(config))
        return bwrap.bwrap_argv(self._bwrap, inner, workspace=self.workspace, ro_dirs=self._ro_dirs,
                                readonly_dirs=self.readonly_dirs, driver=_WORKER, drop_uid=self._owner is not None)

    def _prepare_isolation(self) -> None:
        """Resolve the isolation mode once (blocking: runs the cached bwrap probe and, for another
        interpreter, asks it for its prefixes) and pick the sandbox user when running as root."""
        mode = resolve_isolation(self.isolation_requested)
        if mode == "bwrap":
            self._bwrap = bwrap.bwrap_probe().path
            ro_dirs = bwrap.interpreter_binds(self.python)
            if ro_dirs is None:
                raise CodeSandboxError(f"the interpreter {self.python} lives directly under / ; "
                                       "binding its installation would expose the whole filesystem")
            self._ro_dirs = ro_dirs
            if os.geteuid() == 0:
                self._owner = bwrap.pick_sandbox_uid()
        self._mode = mode

    async def _start(self) -> None:
        t0 = time.monotonic()
        if self._mode is None:
            await asyncio.to_thread(self._prepare_isolation)  # CodeSandboxError when bwrap is required
        mount_dirs = self.readonly_dirs if self._mode == "bwrap" else ()
        await asyncio.to_thread(prepare_workspace, self.workspace, mount_dirs, self._owner)
        loop = asyncio.get_running_loop()
        limits = rlimits.rlimits_config(memory_mb=self.memory_mb, cpu_s=self.cpu_s, max_procs=self.max_procs,
                                        max_file_mb=self.max_file_mb, own_user=self._owner is not None)
        config: dict = {"limits": limits, "cwd": str(self.workspace)}
        if self._owner is not None:
            config["drop_to"] = {"uid": self._owner[0], "gid": self._owner[1]}
        res_r, res_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._launch_argv(res_w, config),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                cwd=self.workspace, env=child_env(self.workspace, self.python, self._token, self.extra_env),
                pass_fds=(res_w,), start_new_session=True, limit=_STREAM_LIMIT,
            )
        except OSError as e:
            os.close(res_r)
            raise CodeSandboxError(f"cannot start the interpreter {self.python}: {e}") from e
        finally:
            os.close(res_w)
        self._proc, self._pgid = proc, proc.pid
        self._carry = {1: b"", 2: b""}
        reader = asyncio.StreamReader(limit=MAX_RESPONSE_BYTES)
        try:
            self._res_transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(res_r, "rb", buffering=0))
        except BaseException:
            os.close(res_r)
            self._kill_tree()
            await self._discard()
            raise
        self._res_reader = reader
        try:
            ready = await asyncio.wait_for(self._recv(), self.start_timeout_s)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
            detail = await self._startup_stderr()
            self._kill_tree()
            await self._discard()
            if self._closed:
                raise CodeSandboxClosed("the CodeSandbox was closed while its interpreter was starting") from e
            raise CodeSandboxError(f"the interpreter {self.python} failed to start ({type(e).__name__}): "
                                   f"{detail or 'no output'}") from e
        if ready.get("op") != "ready" or ready.get("errors"):
            self._kill_tree()
            await self._discard()
            raise CodeSandboxError(f"the sandbox could not apply its limits: {ready.get('errors') or ready}")
        self.starts += 1
        self.last_start_s = time.monotonic() - t0

    async def _startup_stderr(self) -> str:
        proc = self._proc
        if proc is None or proc.stderr is None:
            return ""
        try:
            data = await asyncio.wait_for(proc.stderr.read(4000), 1.0)
        except (TimeoutError, OSError):
            return ""
        return data.decode("utf-8", "replace").strip()

    # ------------------------------------------------------------------ protocol
    async def _recv(self) -> dict:
        assert self._res_reader is not None
        return await read_frame(self._res_reader)

    async def _send(self, obj: dict) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        proc.stdin.write(encode_frame(obj))
        await proc.stdin.drain()

    # ------------------------------------------------------------------ one call
    async def _execute(self, code: str) -> CodeResult:
        proc = self._proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        self._calls += 1
        sentinel = f"\x00\x1ekit-sandbox-end-{secrets.token_hex(16)}\x1e\x00"
        caps = {1: _Capture(self.max_output_chars), 2: _Capture(self.max_output_chars)}
        spills: dict[int, list[bytes]] = {1: [], 2: []}
        pumps = {
            fd: asyncio.ensure_future(_pump(stream, caps[fd], sentinel.encode("ascii"), self._carry[fd],
                                            self.max_output_bytes, spills[fd]))
            for fd, stream in ((1, proc.stdout), (2, proc.stderr))
        }
        self._carry = {1: b"", 2: b""}

        async def exchange() -> dict:
            await self._send({"op": "run", "id": self._calls, "code": code, "sentinel": sentinel})
            return await self._recv()

        call = asyncio.ensure_future(exchange())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        failure: str | None = None  # timeout / output_limit / lost
        response: dict | None = None
        try:
            while True:
                waiting = {call} | {t for t in pumps.values() if not t.done()}
                remaining = deadline - loop.time()
                if remaining <= 0:
                    failure = "timeout"
                    break
                done, _ = await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                if any(t in done and not t.cancelled() and isinstance(t.exception(), _OutputOverflow)
                       for t in pumps.values()):
                    failure = "output_limit"
                    break
                if call.done():
                    try:
                        response = call.result()
                    except (asyncio.IncompleteReadError, ConnectionError, ValueError, OSError):
                        failure = "lost"
                    else:
                        if response.get("op") != "done" or response.get("id") != self._calls:
                            failure, response = "lost", None  # out of step: the channel cannot be trusted
                    break
        finally:
            if not call.done():
                call.cancel()
                await asyncio.gather(call, return_exceptions=True)

        if failure is None and response is not None:
            # The sentinels were written before the response; a short grace lets the reads catch up.
            if response.get("sentinel_written", True):
                await asyncio.wait(list(pumps.values()), timeout=5.0)
            await finish_pumps(pumps)
            for fd in (1, 2):
                self._carry[fd] = b"".join(spills[fd])
            error = response.get("error")
            stderr = caps[2].text()
            if error == "memory":
                stderr += (f"\n[sandbox] The interpreter's memory limit is {self.memory_mb} MB of address "
                           "space; variables are kept.")
            return CodeResult(caps[1].text(), stderr, bool(response.get("ok")), None if response.get("ok") else error)

        return await self._report_lost(proc, failure, pumps, caps)

    async def _report_lost(self, proc: asyncio.subprocess.Process, failure: str | None,
                           pumps: Mapping[int, asyncio.Future[bool]],
                           caps: dict[int, _Capture]) -> CodeResult:
        """Kill the interpreter after a timeout, an output overflow or a lost channel, and report the call as failed."""
        # The interpreter is gone or must go: kill everything, report, restart lazily next call.
        if failure == "lost":
            await _wait_exit(proc, 2.0)
        rc = self._exit_code()
        self._kill_tree()
        if not await _wait_exit(proc, 5.0):
            log.warning("sandbox interpreter %s did not exit after SIGKILL", proc.pid)
        await asyncio.wait(list(pumps.values()), timeout=0.5)  # drain what was written before death
        await finish_pumps(pumps)
        error, note = rlimits.lost_call_report(failure, rc, closed=self._closed, timeout_s=self.timeout_s,
                                               max_output_bytes=self.max_output_bytes, cpu_s=self.cpu_s,
                                               memory_mb=self.memory_mb)
        restart = "" if self._closed else (" The Python interpreter will be restarted on the next call: "
                                           "variables and imports from earlier calls are lost (files saved in "
                                           "the workspace remain).")
        stderr = caps[2].text()
        stderr = (stderr + ("\n" if stderr and not stderr.endswith("\n") else "")
                  + f"[sandbox] {note}{restart}")
        await self._discard()
        return CodeResult(caps[1].text(), stderr, False, error, restarted=True)

    def _exit_code(self) -> int | None:
        """The interpreter's exit status like ``Popen.returncode`` (negative: killed by that signal)."""
        proc = self._proc
        rc = proc.returncode if proc is not None else None
        return bwrap.exit_code(rc) if self._mode == "bwrap" else rc

    def _describe_exit(self) -> str:
        return rlimits.describe_exit(self._exit_code())

    # ------------------------------------------------------------------ teardown
    def _kill_tree(self) -> None:
        """SIGKILL the interpreter's process group and every descendant still attached to it.
        Synchronous and safe to call repeatedly (used by close, timeouts, __del__ and atexit)."""
        pgid = self._pgid
        if pgid is None:
            return
        proc = self._proc
        descendants: list[psutil.Process] = []
        if proc is not None and proc.returncode is None:
            try:
                descendants = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                pass
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in descendants:  # those that left the group with setsid()
            try:
                p.kill()  # psutil checks the PID still names the same process
            except psutil.Error:
                pass

    async def _discard(self) -> None:
        """Forget the current interpreter after it is dead (or kill it first)."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            self._kill_tree()
            if not await _wait_exit(proc, 5.0):
                log.warning("sandbox interpreter %s did not exit after SIGKILL", proc.pid)
        else:
            self._kill_tree()  # a crashed interpreter may leave children in its group
        if self._res_transport is not None:
            self._res_transport.close()
        transport = getattr(proc, "_transport", None)  # closes the stdio pipes even if a stray
        if transport is not None:                      # process outside our reach still holds them
            transport.close()
        self._proc = self._pgid = None
        self._res_transport = self._res_reader = None
        self._carry = {1: b"", 2: b""}
