"""Persistent per-episode Python process behind the ``execute_code`` tool.

WeAgent Table 4: "Runs Python in a persistent episode sandbox. Stdout/stderr are returned; newly
generated raster images are registered and the first five are re-fed." This module runs the code and
reports stdout, stderr and the workspace files each call created or modified; registering images and
choosing the five to re-feed is the tool executor's job (``kit.harness.tools.execute_code``).

How it works. One child interpreter per :class:`CodeSandbox`, started lazily on the first
:meth:`CodeSandbox.run` with ``cwd`` = the episode workspace, running ``_code_worker.py``. Every
block is ``exec``-ed in one persistent ``__main__`` namespace, so variables and imports persist across
calls; a final expression is shown like a REPL. Commands and results travel as length-prefixed JSON
over dedicated pipes, and the child's fds 1 and 2 are pipes read by the parent, so output of
``print``, subprocesses and C extensions is captured alike without touching the protocol channel.
Why not a Jupyter kernel: kernels talk ZMQ over TCP or IPC sockets, which conflicts with running the
child without any network later; plain inherited pipes keep the child networkless.

Limits (set by the child on itself before any user code runs, inherited by what it starts):

* ``RLIMIT_AS`` = ``memory_mb`` (address space, not resident memory: large ``mmap`` reservations count
  too, so libraries that reserve big arenas, e.g. torch, may need a higher value);
* ``RLIMIT_CPU`` = ``cpu_s``, cumulative over the interpreter's whole lifetime, not per call: when it
  runs out the interpreter is killed (``error="cpu_limit"``) and the next call starts a fresh one;
* ``RLIMIT_NPROC`` when ``max_procs`` is set. Linux counts every task (process or thread) of the real
  user id system-wide, so the limit is set to the user's current task count plus ``max_procs``; it is
  weak: root (and anyone with CAP_SYS_RESOURCE/CAP_SYS_ADMIN) is not subject to it at all, and other
  programs of the same user share the headroom;
* ``RLIMIT_FSIZE`` = ``max_file_mb`` (a bigger write raises ``OSError`` in the code), ``RLIMIT_CORE`` = 0.

The limits are applied by the child driver at start-up rather than in a ``preexec_fn``: Python
documents ``preexec_fn`` as unsafe when the parent has threads, and the parent here hosts torch and
tokenizer thread pools. Nothing user-controlled runs before they are in place.

Each call has a wall-clock limit (``timeout_s``): on expiry the child's whole process group is killed
and the result says ``error="timeout"``, ``restarted=True``; the next call starts a fresh interpreter.
A crash (segfault, ``os._exit``, the kernel's OOM killer) is reported the same way. Output is read
with a bound: the parent keeps the head and tail of each stream (``max_output_chars``) and counts the
rest; a call that writes more than ``max_output_bytes`` in total is killed (``error="output_limit"``).
Between calls the parent stops reading, so a background process that keeps printing blocks on a full
pipe instead of growing memory anywhere.

Isolation — honestly stated: in this version the child is NOT isolated from the filesystem or the
network. It runs as the parent's user with the workspace as its working directory and ``HOME``, a
scrubbed environment (no proxies, API keys or tokens from the parent) and the rlimits above; it can
read and write anything that user can and open network connections. Real isolation (a bubblewrap
mount namespace with only the workspace writable, no network) is meant to be added by prepending a
wrapper command in :meth:`CodeSandbox._launch_argv`. Processes are started in a new session; closing
kills that process group plus every descendant still found under the child, but a process that both
leaves the group (``setsid``) and is orphaned before the kill escapes until a PID namespace is used.

Concurrency: many sandboxes (one per episode) can run in one asyncio loop; calls to one sandbox are
serialized by a lock. A sandbox must be used from a single event loop.
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import json
import logging
import os
import secrets
import shutil
import signal
import struct
import sys
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import psutil

from kit.harness import _code_worker

__all__ = ["CodeResult", "CodeSandbox", "CodeSandboxError", "CodeSandboxClosed"]

log = logging.getLogger(__name__)

_WORKER = Path(_code_worker.__file__).resolve()
_FRAME = struct.Struct(">I")
_MAX_RESPONSE_BYTES = 1 << 20  # responses are a few hundred bytes; more means a corrupt channel
_READ_CHUNK = 1 << 18
_STREAM_LIMIT = 1 << 20  # asyncio buffer per output pipe; reading pauses (backpressure) above 2x this
_KIT_DIR = ".kit"  # internal folder inside the workspace, never reported in new_files
_SCRATCH = ("sandbox",)  # .kit/sandbox: TMPDIR and caches of the child, removed on close
_UTF8_CONTINUATION = bytes(range(0x80, 0xC0))
_SIGNAL_NAMES = {int(s): s.name for s in signal.Signals}


class CodeSandboxError(RuntimeError):
    """The sandbox itself failed (the interpreter could not be started or configured). Raised by
    :meth:`CodeSandbox.run`; errors in the executed code are reported in :class:`CodeResult` instead."""


class CodeSandboxClosed(CodeSandboxError):
    """:meth:`CodeSandbox.run` was called after :meth:`CodeSandbox.close`."""


@dataclass
class CodeResult:
    """Outcome of one :meth:`CodeSandbox.run` call (WeAgent Table 4 ``execute_code``).

    ``stdout``/``stderr``: the call's output, each cut to ``max_output_chars`` (head and tail kept,
    with a marker saying how many characters were omitted); ``stderr`` carries the traceback of an
    exception raised by the code and a ``[sandbox]`` note when the interpreter was lost.
    ``ok``: False on exception, syntax error, timeout, memory error, crash. ``error``: None when ok,
    else one of ``exception``, ``syntax``, ``memory``, ``system_exit``, ``timeout``, ``cpu_limit``,
    ``output_limit``, ``crashed``, ``closed``. ``new_files``: workspace-relative POSIX paths of
    regular files created or modified during the call, sorted. ``duration_s``: wall seconds of the
    whole call, start-up of a fresh interpreter included. ``restarted``: the interpreter was lost
    during or before this call, so variables from earlier calls are gone.
    """

    stdout: str
    stderr: str
    ok: bool
    error: str | None
    new_files: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    restarted: bool = False


# --------------------------------------------------------------------------------------- helpers
class _Capture:
    """Bounded capture of one output stream for one call: keeps the first and last bytes (enough for
    ``max_chars`` characters each side) and counts everything, so memory stays O(max_chars)."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self.side_bytes = 4 * max_chars  # UTF-8 needs at most 4 bytes per character
        self.head = bytearray()
        self.tail = bytearray()
        self.total_bytes = 0
        self.total_chars = 0  # counted as UTF-8 lead bytes; exact for valid UTF-8
        self.trimmed = False  # bytes were dropped between head and tail

    def feed(self, data: bytes) -> None:
        if not data:
            return
        self.total_bytes += len(data)
        # isascii() is a fast scan; only non-ASCII chunks pay for counting UTF-8 lead bytes.
        self.total_chars += len(data) if data.isascii() else len(data.translate(None, _UTF8_CONTINUATION))
        room = self.side_bytes - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self.side_bytes:  # the whole old tail falls out: keep only the newest bytes
            self.trimmed = self.trimmed or bool(self.tail) or len(data) > self.side_bytes
            self.tail = bytearray(data[-self.side_bytes:])
            return
        self.tail += data
        extra = len(self.tail) - self.side_bytes
        if extra > 0:
            del self.tail[:extra]
            self.trimmed = True

    def text(self) -> str:
        if not self.trimmed:
            full = bytes(self.head + self.tail).decode("utf-8", errors="replace")
            if len(full) <= self.max_chars:
                return full
            head_text, tail_text = full, full
        else:
            head_text = codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(self.head), final=False)
            tail = bytes(self.tail)
            start = 0
            while start < min(len(tail), 3) and 0x80 <= tail[start] < 0xC0:  # skip a split character
                start += 1
            tail_text = tail[start:].decode("utf-8", errors="replace")
        keep_head = self.max_chars // 2
        keep_tail = self.max_chars - keep_head
        shown_head = head_text[:keep_head]
        shown_tail = tail_text[-keep_tail:] if keep_tail else ""
        omitted = max(self.total_chars - len(shown_head) - len(shown_tail), 0)
        return (f"{shown_head}\n[... output truncated: {omitted:,} characters omitted "
                f"({self.total_bytes:,} bytes in total; limit {self.max_chars:,} characters) ...]\n{shown_tail}")


class _OutputOverflow(Exception):
    pass


async def _pump(stream: asyncio.StreamReader, cap: _Capture, sentinel: bytes, carry: bytes,
                hard_limit: int, spill: list[bytes]) -> bool:
    """Read ``stream`` into ``cap`` until this call's ``sentinel``; bytes after it are left in
    ``spill`` for the next call. Returns False at EOF without the sentinel; raises
    :class:`_OutputOverflow` past ``hard_limit`` bytes."""
    keep = len(sentinel) - 1  # a sentinel may straddle two reads
    pending = carry
    try:
        while True:
            i = pending.find(sentinel)
            if i >= 0:
                cap.feed(pending[:i])
                spill.append(pending[i + len(sentinel):])
                return True
            if len(pending) > keep:
                cap.feed(pending[: len(pending) - keep])
                pending = pending[len(pending) - keep:]
            if cap.total_bytes > hard_limit:
                raise _OutputOverflow
            data = await stream.read(_READ_CHUNK)
            if not data:
                cap.feed(pending)
                pending = b""
                return False
            pending += data
    except asyncio.CancelledError:
        cap.feed(pending)
        raise


async def _wait_exit(proc: asyncio.subprocess.Process, timeout: float) -> bool:
    """Wait until ``proc`` has exited. Not ``proc.wait()``: that also waits for its stdio pipes to
    close, which a surviving grandchild (or a paused, full pipe) can delay indefinitely."""
    deadline = time.monotonic() + timeout
    while proc.returncode is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def _snapshot(root: Path, limit: int) -> dict[str, tuple[int, int, int]]:
    """Regular files under ``root`` (symlinks not followed, ``.kit/`` skipped) mapped to
    (inode, mtime_ns, size); stops after ``limit`` files."""
    out: dict[str, tuple[int, int, int]] = {}
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            it = os.scandir(root / rel_dir if rel_dir else root)
        except OSError:
            continue
        with it:
            for entry in it:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if rel != _KIT_DIR:
                            stack.append(rel)
                        continue
                    if not entry.is_file(follow_symlinks=False):
                        continue  # symlinks could point outside the workspace: never report them
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                out[rel] = (st.st_ino, st.st_mtime_ns, st.st_size)
                if len(out) >= limit:
                    log.warning("workspace %s has over %d files; new_files scan truncated", root, limit)
                    return out
    return out


def _user_task_count() -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) owned by this real uid."""
    uid = os.getuid()
    n = 0
    for p in psutil.process_iter(["uids", "num_threads"]):
        uids, threads = p.info.get("uids"), p.info.get("num_threads")
        if uids is not None and uids.real == uid:
            n += threads or 1
    return n


_LIVE: "weakref.WeakSet[CodeSandbox]" = weakref.WeakSet()


@atexit.register
def _kill_all_at_exit() -> None:
    for box in list(_LIVE):
        box._kill_tree()


# --------------------------------------------------------------------------------------- sandbox
class CodeSandbox:
    """A persistent Python interpreter for one episode (WeAgent Table 4 ``execute_code``).

    ``workspace``: the episode directory, used as cwd and ``HOME`` (created on first run; must not be
    a file). ``timeout_s``: wall-clock limit per call in seconds. ``memory_mb``: address-space limit
    of the interpreter and each process it starts. ``cpu_s``: CPU seconds over the interpreter's
    lifetime. ``max_output_chars``: characters kept per stream per call. ``max_procs``: extra tasks
    the user may create (None: no limit; no effect for root). ``python``: interpreter to run (a
    path or a name on PATH). ``max_file_mb``: largest file the code may write. ``max_output_bytes``:
    bytes per call and stream after which the call is killed. ``max_code_chars``: longest accepted
    code. ``env``: extra environment variables for the child, merged over the scrubbed defaults.
    ``start_timeout_s``: seconds allowed for interpreter start-up. ``scan_limit``: files scanned for
    ``new_files``. See the module docstring for what is and is not isolated.

    Raises ``ValueError`` for bad arguments, ``NotADirectoryError`` when ``workspace`` is a file.
    Use ``async with CodeSandbox(ws) as box: result = await box.run("print(1)")`` or call
    :meth:`close` explicitly.
    """

    def __init__(self, workspace: Path | str, *, timeout_s: float = 30, memory_mb: int = 2048, cpu_s: int = 60,
                 max_output_chars: int = 20000, max_procs: int | None = 64, python: str = sys.executable,
                 max_file_mb: int = 512, max_output_bytes: int = 256 * 2**20, max_code_chars: int = 1_000_000,
                 env: Mapping[str, str] | None = None, start_timeout_s: float = 30, scan_limit: int = 10_000):
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
            before = await asyncio.to_thread(_snapshot, self.workspace, self.scan_limit)
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
            after = await asyncio.to_thread(_snapshot, self.workspace, self.scan_limit)
            result.new_files = sorted(p for p, sig in after.items() if before.get(p) != sig)
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
            shutil.rmtree(self.workspace.joinpath(_KIT_DIR, *_SCRATCH), ignore_errors=True)
        _LIVE.discard(self)

    async def __aenter__(self) -> "CodeSandbox":
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
        """The command line of the child. The single place to prepend an isolation wrapper
        (e.g. ``bwrap --unshare-net ... --``) later. ``-I``: ignore PYTHON* variables and user site;
        ``-B``: no ``.pyc`` files in the workspace."""
        return [self.python, "-I", "-B", str(_WORKER), str(res_fd), json.dumps(config)]

    def _child_env(self) -> dict[str, str]:
        """A fresh environment: nothing is inherited from the parent (no proxies, keys, tokens)."""
        scratch = self.workspace.joinpath(_KIT_DIR, *_SCRATCH)
        path = [os.path.dirname(self.python), "/usr/local/bin", "/usr/bin", "/bin"]
        env = {
            "PATH": os.pathsep.join(dict.fromkeys(path)),
            "HOME": str(self.workspace),
            "TMPDIR": str(scratch / "tmp"),
            "XDG_CACHE_HOME": str(scratch / "cache"),
            "XDG_CONFIG_HOME": str(scratch / "config"),
            "MPLCONFIGDIR": str(scratch / "matplotlib"),
            "MPLBACKEND": "Agg",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",  # for Python subprocesses; the driver runs with -I
            "PYTHONDONTWRITEBYTECODE": "1",
            # One BLAS/OpenMP thread: many episodes share few cores, and per-thread arenas eat
            # into the address-space limit.
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        env.update(self.extra_env)
        return env

    def _limits(self) -> dict:
        nproc = None
        if self.max_procs is not None:
            # RLIMIT_NPROC is per real user, system-wide: give headroom above what already runs.
            # Root is exempt anyway, so skip the process scan there.
            nproc = self.max_procs if os.geteuid() == 0 else _user_task_count() + self.max_procs
        return {
            "as_bytes": self.memory_mb * 2**20,
            "cpu_s": [self.cpu_s, self.cpu_s + 5],  # SIGXCPU at the soft limit, SIGKILL 5 s later
            "nproc": nproc,
            "fsize_bytes": self.max_file_mb * 2**20,
            "core_bytes": 0,
        }

    async def _start(self) -> None:
        t0 = time.monotonic()
        scratch = self.workspace.joinpath(_KIT_DIR, *_SCRATCH)
        (scratch / "tmp").mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        res_r, res_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._launch_argv(res_w, {"limits": self._limits()}),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                cwd=self.workspace, env=self._child_env(), pass_fds=(res_w,), start_new_session=True,
                limit=_STREAM_LIMIT,
            )
        except OSError as e:
            os.close(res_r)
            raise CodeSandboxError(f"cannot start the interpreter {self.python}: {e}") from e
        finally:
            os.close(res_w)
        self._proc, self._pgid = proc, proc.pid
        self._carry = {1: b"", 2: b""}
        reader = asyncio.StreamReader(limit=_MAX_RESPONSE_BYTES)
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
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
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
        except (asyncio.TimeoutError, OSError):
            return ""
        return data.decode("utf-8", "replace").strip()

    # ------------------------------------------------------------------ protocol
    async def _recv(self) -> dict:
        assert self._res_reader is not None
        (n,) = _FRAME.unpack(await self._res_reader.readexactly(_FRAME.size))
        if n > _MAX_RESPONSE_BYTES:
            raise ValueError(f"response frame of {n} bytes")
        msg = json.loads((await self._res_reader.readexactly(n)).decode("utf-8"))
        if not isinstance(msg, dict):
            raise ValueError("response is not a JSON object")
        return msg

    async def _send(self, obj: dict) -> None:
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        proc.stdin.write(_FRAME.pack(len(data)) + data)
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
            await self._finish_pumps(pumps)
            for fd in (1, 2):
                self._carry[fd] = b"".join(spills[fd])
            error = response.get("error")
            stderr = caps[2].text()
            if error == "memory":
                stderr += (f"\n[sandbox] The interpreter's memory limit is {self.memory_mb} MB of address "
                           "space; variables are kept.")
            return CodeResult(caps[1].text(), stderr, bool(response.get("ok")), None if response.get("ok") else error)

        # The interpreter is gone or must go: kill everything, report, restart lazily next call.
        if failure == "lost":
            await _wait_exit(proc, 2.0)
        exit_desc = self._describe_exit() if failure == "lost" else ""
        rc = proc.returncode
        self._kill_tree()
        if not await _wait_exit(proc, 5.0):
            log.warning("sandbox interpreter %s did not exit after SIGKILL", proc.pid)
        await asyncio.wait(list(pumps.values()), timeout=0.5)  # drain what was written before death
        await self._finish_pumps(pumps)
        if self._closed:
            error, note = "closed", "The sandbox was closed while this code was running."
        elif failure == "timeout":
            error = "timeout"
            note = f"Execution stopped: it exceeded the {self.timeout_s:g} s wall-clock limit per call."
        elif failure == "output_limit":
            error = "output_limit"
            note = (f"Execution stopped: it wrote more than {self.max_output_bytes / 2**20:g} MB of output "
                    "in one call.")
        elif rc == -signal.SIGXCPU:
            error = "cpu_limit"
            note = (f"The interpreter used up its CPU-time budget of {self.cpu_s} s (counted over its whole "
                    "lifetime, across calls) and was killed.")
        elif rc == _code_worker.EXIT_MEMORY:
            error, note = "memory", f"The interpreter ran out of memory (limit {self.memory_mb} MB) and exited."
        elif rc == -signal.SIGKILL:
            error = "crashed"
            note = ("The interpreter was killed by SIGKILL: most likely the system's out-of-memory killer, "
                    f"or the hard CPU-time limit ({self.cpu_s} s + 5 s) after SIGXCPU was ignored.")
        else:
            error, note = "crashed", f"The interpreter died ({exit_desc})."
        restart = "" if self._closed else (" The Python interpreter will be restarted on the next call: "
                                           "variables and imports from earlier calls are lost (files saved in "
                                           "the workspace remain).")
        stderr = caps[2].text()
        stderr = (stderr + ("\n" if stderr and not stderr.endswith("\n") else "")
                  + f"[sandbox] {note}{restart}")
        await self._discard()
        return CodeResult(caps[1].text(), stderr, False, error, restarted=True)

    @staticmethod
    async def _finish_pumps(pumps: dict[int, asyncio.Future]) -> None:
        for t in pumps.values():
            if not t.done():
                t.cancel()
        await asyncio.gather(*pumps.values(), return_exceptions=True)

    def _describe_exit(self) -> str:
        proc = self._proc
        rc = proc.returncode if proc is not None else None
        if rc is None:
            return "status unknown"
        if rc < 0:
            name = _SIGNAL_NAMES.get(-rc, f"signal {-rc}")
            return f"killed by {name}" + (" — a segmentation fault" if -rc == signal.SIGSEGV else "")
        if rc == _code_worker.EXIT_PROTOCOL:
            return "its command channel was corrupted"
        return f"it exited with status {rc}"

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
