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

Isolation. Two modes, chosen by ``isolation`` (default ``"auto"``, or ``$MMSEARCH_KIT_SANDBOX``):

* ``"bwrap"`` — the interpreter runs under bubblewrap (Debian package ``bubblewrap``), found and tested
  once per process (:func:`bwrap_probe`). New network, PID, IPC, UTS and cgroup namespaces: no network
  at all (only an empty loopback), and the sandbox sees only its own processes. The filesystem is a
  fresh read-only root holding read-only binds of ``/usr`` (plus the ``/bin``, ``/lib*`` links), a few
  ``/etc`` entries Python and common libraries read (certificates, time zone, fonts, loader cache),
  the interpreter's installation and virtual environment (``sys.prefix``/``sys.base_prefix``), and the
  driver script at a neutral path; ``/proc`` and a minimal ``/dev`` of its own; and the episode
  workspace read-write at its own path, the only writable place on disk (``TMPDIR``, caches and
  ``HOME`` point into it). ``/tmp`` and ``/dev/shm`` are private in-memory filesystems of 64 MiB
  each that vanish with the sandbox. Not visible: ``/etc/passwd`` and the rest of ``/etc``,
  home directories, the kit's source tree, other episodes' workspaces, host processes. ``--new-session``
  detaches it from any terminal and ``--die-with-parent`` kills it when the harness process dies.
  When the harness runs as root, bubblewrap drops every capability except the two needed for the
  driver to switch to a random unprivileged uid/gid of its own (then those go too, and
  no-new-privileges is set), the workspace is handed to that uid, and ``RLIMIT_NPROC`` caps the
  sandbox's processes exactly (root itself is exempt from that limit). Closing kills the PID
  namespace's init, so the kernel kills every process inside, including daemons that left the
  process group. The harness writes into the workspace too, so whatever the code could plant
  there is never followed: folders the harness writes files into (``readonly_dirs``, by default
  ``tool_results``) are bound read-only inside, the scratch folder is recreated without following
  links, and handing files to the sandbox user walks directories through ``O_NOFOLLOW`` descriptors.
* ``"rlimits"`` — the weaker fallback used by ``"auto"`` when bubblewrap is missing or cannot create
  namespaces (some containers). The child runs as the harness's user with the same environment
  scrubbing and rlimits, but it can read and write whatever that user can and open network
  connections; a process that leaves the group and re-executes with a new environment can outlive
  the sandbox; as root, ``RLIMIT_NPROC`` does not apply (no fork-bomb cap). Use
  ``isolation="bwrap"`` (or ``MMSEARCH_KIT_SANDBOX=bwrap``) to require the real sandbox: the first
  :meth:`CodeSandbox.run` then raises :class:`CodeSandboxError` when it is unavailable.

In both modes ``RLIMIT_AS`` and ``RLIMIT_CPU`` are per process, so a program that starts many
processes can use up to ``max_procs`` times those amounts; the per-call wall clock still ends it.
Disk use inside the workspace is bounded only per file (``max_file_mb``).

Concurrency: many sandboxes (one per episode) can run in one asyncio loop; calls to one sandbox are
serialized by a lock. A sandbox must be used from a single event loop.
"""

from __future__ import annotations

import asyncio
import atexit
import codecs
import glob
import json
import logging
import os
import secrets
import shutil
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import psutil

from kit.harness import _code_worker

__all__ = ["CodeResult", "CodeSandbox", "CodeSandboxError", "CodeSandboxClosed", "BwrapProbe", "bwrap_probe",
           "resolve_isolation", "ISOLATION_MODES", "ISOLATION_ENV"]

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

ISOLATION_MODES = ("auto", "bwrap", "rlimits")
ISOLATION_ENV = "MMSEARCH_KIT_SANDBOX"  # default isolation mode when the constructor is not told
_DRIVER_IN_SANDBOX = "/run/sandbox/driver.py"  # neutral path: no kit path exists inside the sandbox
# /etc entries Python and common libraries read; nothing with accounts, hosts or secrets.
_ETC_KEEP = ("ssl", "ca-certificates", "pki", "localtime", "timezone", "fonts", "ld.so.cache", "ld.so.conf",
             "ld.so.conf.d", "alternatives", "mime.types", "matplotlibrc", "python3*")
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SHM_BYTES = 64 * 2**20
_UID_RANGE = (1_500_000_000, 2_000_000_000)  # far above real accounts and the usual subuid ranges


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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _give_tree(root: Path, owner: tuple[int, int], skip: frozenset[str], limit: int) -> None:
    """Give ``owner`` (uid, gid) every directory and regular file under ``root`` it does not own
    yet (files the harness wrote since the last call: registered images, for instance), except the
    top-level names in ``skip``. Symlinks are never followed or changed, and the walk goes through
    directory descriptors opened with ``O_NOFOLLOW``, so a process of the sandbox that swaps a
    directory for a symlink meanwhile cannot redirect a chown outside the workspace."""
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return
    stack, seen = [(top, True)], 0
    while stack:
        dfd, is_top = stack.pop()
        try:
            st = os.fstat(dfd)
            if (st.st_uid, st.st_gid) != owner:
                os.fchown(dfd, *owner)
            with os.scandir(dfd) as it:
                entries = list(it)
            for entry in entries:
                if (is_top and entry.name in skip) or seen >= limit:
                    continue
                seen += 1
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((os.open(entry.name, _DIR_FLAGS, dir_fd=dfd), False))
                    elif entry.is_file(follow_symlinks=False):
                        est = os.stat(entry.name, dir_fd=dfd, follow_symlinks=False)
                        if (est.st_uid, est.st_gid) != owner:
                            os.chown(entry.name, *owner, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    continue
        except OSError:
            pass
        finally:
            os.close(dfd)


def _real_dir(path: Path) -> None:
    """Make ``path`` a real directory: a symlink or file planted there is removed first (never
    followed). Called only while no process of the sandbox runs."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        path.mkdir()
        return
    if not stat.S_ISDIR(st.st_mode):
        path.unlink()
        path.mkdir()


def _user_task_count() -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) owned by this real uid."""
    uid = os.getuid()
    n = 0
    for p in psutil.process_iter(["uids", "num_threads"]):
        uids, threads = p.info.get("uids"), p.info.get("num_threads")
        if uids is not None and uids.real == uid:
            n += threads or 1
    return n


# --------------------------------------------------------------------------------------- isolation
@dataclass(frozen=True)
class BwrapProbe:
    """Result of testing bubblewrap on this machine: ``path`` of a working ``bwrap`` or None, and
    ``detail`` (its version, or why it cannot be used)."""

    path: str | None
    detail: str

    @property
    def available(self) -> bool:
        return self.path is not None


_PROBE: BwrapProbe | None = None
_PROBE_LOCK = threading.Lock()


def _namespace_flags(as_root: bool, drop_uid: bool) -> list[str]:
    flags = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if as_root:  # a privileged bwrap keeps capabilities unless told otherwise
        flags += ["--cap-drop", "ALL"]
        if drop_uid:
            flags += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    return flags


def bwrap_probe(refresh: bool = False) -> BwrapProbe:
    """Find ``bwrap`` on PATH and check, once per process, that it can create the namespaces the
    sandbox uses (it cannot in some containers). Thread-safe; ``refresh`` re-tests."""
    global _PROBE
    with _PROBE_LOCK:
        if _PROBE is None or refresh:
            _PROBE = _probe_bwrap()
        return _PROBE


def _probe_bwrap() -> BwrapProbe:
    path = shutil.which("bwrap")
    if path is None:
        return BwrapProbe(None, "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    true = shutil.which("true") or "/bin/true"
    root = os.geteuid() == 0
    # The same features the sandbox uses (--perms/--size need bubblewrap >= 0.6).
    argv = [path, *_namespace_flags(root, root), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(2**20), "--tmpfs", "/tmp", "--remount-ro", "/", "--", true]
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False)
        version = subprocess.run([path, "--version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return BwrapProbe(None, f"bwrap cannot run: {e}")
    if r.returncode != 0:
        err = r.stderr.decode("utf-8", "replace").strip()[:300]
        return BwrapProbe(None, f"bwrap cannot create the sandbox namespaces here: {err or f'exit {r.returncode}'}")
    return BwrapProbe(path, version.stdout.decode("utf-8", "replace").strip() or "bwrap")


def resolve_isolation(mode: str | None = None) -> str:
    """The isolation a sandbox will use: ``"bwrap"`` or ``"rlimits"``.

    ``mode``: ``"auto"`` (bwrap when it works, else rlimits), ``"bwrap"`` (required), ``"rlimits"``
    or None (``$MMSEARCH_KIT_SANDBOX``, else ``"auto"``). Runs :func:`bwrap_probe` (cached).

    Raises:
        ValueError: unknown mode.
        CodeSandboxError: ``"bwrap"`` was required and bubblewrap is unavailable (the reason is given).
    """
    mode = _requested_mode(mode)
    if mode == "rlimits":
        return "rlimits"
    probe = bwrap_probe()
    if probe.available:
        return "bwrap"
    if mode == "bwrap":
        raise CodeSandboxError(f"isolation='bwrap' was required but {probe.detail}")
    return "rlimits"


def _requested_mode(mode: str | None) -> str:
    if mode is None:
        mode = os.environ.get(ISOLATION_ENV, "").strip() or "auto"
    if mode not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {mode!r}")
    return mode


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b"]``."""
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _interpreter_dirs(python: str) -> list[str]:
    """Directories a Python installation needs, as absolute paths (both literal and resolved forms).
    The current interpreter: its prefixes (installation and virtual environment). Another one: the
    prefixes it reports, else the folders of its executable."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        dirs = [os.path.dirname(os.path.abspath(python)), os.path.dirname(os.path.realpath(python))]
        try:
            r = subprocess.run([python, "-I", "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False)
            if r.returncode == 0:
                dirs += [line for line in r.stdout.decode("utf-8", "replace").splitlines() if line.startswith("/")]
        except (OSError, subprocess.TimeoutExpired):
            pass
    out: list[str] = []
    for d in dirs:
        for form in (os.path.abspath(d), os.path.realpath(d)):
            if os.path.isdir(form) and form not in out:
                out.append(form)
    return out


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


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
    in them nor replace them (which would make the harness write through it). See the module
    docstring for what each mode does and does not isolate.

    Raises ``ValueError`` for bad arguments (an unknown isolation mode included),
    ``NotADirectoryError`` when ``workspace`` is a file.
    Use ``async with CodeSandbox(ws) as box: result = await box.run("print(1)")`` or call
    :meth:`close` explicitly.
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
        self.isolation_requested = _requested_mode(isolation)
        bad = [d for d in readonly_dirs if not isinstance(d, str) or not d or "/" in d or d in (".", "..", _KIT_DIR)]
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
                await asyncio.to_thread(_give_tree, self.workspace, self._owner,
                                        frozenset({_KIT_DIR, *self.readonly_dirs}), self.scan_limit)
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
            if self._mode == "rlimits":
                await asyncio.to_thread(self._kill_escaped)
            kit_dir = self.workspace / _KIT_DIR
            if kit_dir.is_symlink():  # planted by the code: remove the link, never what it points to
                kit_dir.unlink()
            else:  # rmtree itself refuses a symlinked top and never follows links inside
                shutil.rmtree(kit_dir.joinpath(*_SCRATCH), ignore_errors=True)
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
        """The command line of the child: the driver under ``python -I -B`` (``-I``: ignore PYTHON*
        variables and user site; ``-B``: no ``.pyc`` files in the workspace), wrapped in bubblewrap
        in ``"bwrap"`` mode."""
        if self._mode != "bwrap":
            return [self.python, "-I", "-B", str(_WORKER), str(res_fd), json.dumps(config)]
        assert self._bwrap is not None
        return [self._bwrap, *self._bwrap_args(), "--",
                self.python, "-I", "-B", _DRIVER_IN_SANDBOX, str(res_fd), json.dumps(config)]

    def _bwrap_args(self) -> list[str]:
        """bubblewrap options: namespaces, a read-only root with only what Python needs, the
        workspace read-write (see the module docstring)."""
        args = _namespace_flags(os.geteuid() == 0, self._owner is not None)
        made: set[str] = set()

        def parents(dest: str) -> None:
            for d in _ancestors(dest):
                if d not in made and not _covered(d, bound):
                    args.extend(["--perms", "0755", "--dir", d])
                    made.add(d)

        # Kernel filesystems and the private tmpfs first: later binds may lie below /tmp.
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--perms", "1777", "--size", str(_SHM_BYTES), "--tmpfs", "/dev/shm",
                 "--perms", "1777", "--size", str(_SHM_BYTES), "--tmpfs", "/tmp"]
        bound: list[str] = ["/usr"]
        args += ["--ro-bind", "/usr", "/usr"]
        for name in _ROOT_LINKS:
            path = "/" + name
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
                bound.append(path)
        args += ["--perms", "0755", "--dir", "/etc"]
        made.add("/etc")
        for pattern in _ETC_KEEP:
            for path in sorted(glob.glob("/etc/" + pattern)):
                if os.path.exists(path):
                    args += ["--ro-bind", path, path]
        for d in self._ro_dirs:
            parents(d)
            args += ["--ro-bind", d, d]
            bound.append(d)
        ws = str(self.workspace)
        parents(ws)
        args += ["--bind", ws, ws]
        for d in self.readonly_dirs:  # mount points: the code can neither write in them nor replace them
            args += ["--ro-bind", f"{ws}/{d}", f"{ws}/{d}"]
        args += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/run/sandbox",
                 "--ro-bind", str(_WORKER), _DRIVER_IN_SANDBOX,
                 "--remount-ro", "/", "--chdir", "/"]  # the driver enters the workspace itself
        return args

    def _prepare_isolation(self) -> None:
        """Resolve the isolation mode once (blocking: runs the cached bwrap probe and, for another
        interpreter, asks it for its prefixes) and pick the sandbox user when running as root."""
        mode = resolve_isolation(self.isolation_requested)
        if mode == "bwrap":
            self._bwrap = bwrap_probe().path
            dirs = [d for d in _interpreter_dirs(self.python) if not _covered(d, ["/usr"])]
            if "/" in dirs:
                raise CodeSandboxError(f"the interpreter {self.python} lives directly under / ; "
                                       "binding its installation would expose the whole filesystem")
            dirs.sort(key=len)
            self._ro_dirs = [d for i, d in enumerate(dirs) if not _covered(d, dirs[:i])]
            if os.geteuid() == 0:
                uid = _UID_RANGE[0] + secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0])
                self._owner = (uid, uid)
        self._mode = mode

    def _prepare_workspace(self, scratch: Path) -> None:
        """Create the scratch folder (and, under bubblewrap, the read-only harness folders) without
        following anything the code may have planted; under a sandbox user, hand the workspace and
        scratch to it. Runs only while no process of the sandbox is alive."""
        self.workspace.mkdir(parents=True, exist_ok=True)
        dirs = [self.workspace / _KIT_DIR, scratch, scratch / "tmp"]
        if self._mode == "bwrap":
            dirs += [self.workspace / d for d in self.readonly_dirs]
        for d in dirs:
            _real_dir(d)
        if self._owner is None:
            return
        for d in (self.workspace, self.workspace / _KIT_DIR, scratch, scratch / "tmp"):
            os.chown(d, *self._owner, follow_symlinks=False)

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
            "USER": "sandbox",
            "LOGNAME": "sandbox",
            "KIT_SANDBOX_ID": self._token,
        }
        env.update(self.extra_env)
        return env

    def _limits(self) -> dict:
        nproc = None
        if self.max_procs is not None:
            # RLIMIT_NPROC is per real user, system-wide: give headroom above what already runs.
            # Root is exempt anyway, so skip the process scan there; a sandbox user of its own
            # starts from zero (+1: the interpreter itself).
            if self._owner is not None:
                nproc = self.max_procs + 1
            else:
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
        if self._mode is None:
            await asyncio.to_thread(self._prepare_isolation)  # CodeSandboxError when bwrap is required
        scratch = self.workspace.joinpath(_KIT_DIR, *_SCRATCH)
        await asyncio.to_thread(self._prepare_workspace, scratch)
        loop = asyncio.get_running_loop()
        config: dict = {"limits": self._limits(), "cwd": str(self.workspace)}
        if self._owner is not None:
            config["drop_to"] = {"uid": self._owner[0], "gid": self._owner[1]}
        res_r, res_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._launch_argv(res_w, config),
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
        rc = self._exit_code()
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

    def _exit_code(self) -> int | None:
        """The interpreter's exit status like ``Popen.returncode`` (negative: killed by that signal).
        bubblewrap reports a child killed by signal N as exit status 128 + N; map it back."""
        proc = self._proc
        rc = proc.returncode if proc is not None else None
        if rc is not None and self._mode == "bwrap" and 128 < rc < 128 + 65:
            return -(rc - 128)
        return rc

    def _describe_exit(self) -> str:
        rc = self._exit_code()
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

    def _kill_escaped(self) -> None:
        """Fallback mode only: kill processes that left the process group and were orphaned before
        the group was killed, found by the sandbox's marker in their environment. (Under bubblewrap
        the PID namespace makes this unnecessary.) A process that re-executed itself with a new
        environment is not found: see the module docstring."""
        marker = f"KIT_SANDBOX_ID={self._token}".encode()
        me = os.getpid()
        for p in psutil.process_iter():
            if p.pid == me:
                continue
            try:
                with open(f"/proc/{p.pid}/environ", "rb") as f:
                    env = f.read()
            except OSError:
                continue
            if marker in env.split(b"\0"):
                try:
                    p.kill()
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
