"""Resource limits of the ``execute_code`` interpreter, and the ``rlimits`` fallback mode.

The limits (address space, lifetime CPU, process count, file size, no core dumps) apply in both modes;
the driver sets them on itself before any user code runs (not in a ``preexec_fn``, which Python calls
unsafe in a threaded parent). In the fallback mode they are the only isolation: the child runs as the
harness's user, can read what it can and open connections (``docs/isolation.md``).
"""

from __future__ import annotations

import os
import signal

import psutil

from kit.harness.sandbox.driver import EXIT_MEMORY, EXIT_PROTOCOL


def rlimits_config(*, memory_mb: int, cpu_s: int, max_procs: int | None, max_file_mb: int,
                   own_user: bool) -> dict:
    """The ``limits`` the driver applies (``_apply_limits`` in the driver): bytes, CPU seconds as
    ``[soft, hard]``, tasks. ``own_user``: the code runs under a sandbox uid of its own (root +
    bubblewrap), so ``RLIMIT_NPROC`` counts only its tasks."""
    nproc = None
    if max_procs is not None:
        # RLIMIT_NPROC is per real user, system-wide: give headroom above what already runs.
        # Root is exempt anyway, so skip the process scan there; a sandbox user of its own
        # starts from zero (+1: the interpreter itself).
        if own_user:
            nproc = max_procs + 1
        else:
            nproc = max_procs if os.geteuid() == 0 else _user_task_count() + max_procs
    return {
        "as_bytes": memory_mb * 2**20,
        "cpu_s": [cpu_s, cpu_s + 5],  # SIGXCPU at the soft limit, SIGKILL 5 s later
        "nproc": nproc,
        "fsize_bytes": max_file_mb * 2**20,
        "core_bytes": 0,
    }


def _user_task_count() -> int:
    """Tasks (threads included, as RLIMIT_NPROC counts them) owned by this real uid."""
    uid = os.getuid()
    n = 0
    for p in psutil.process_iter(["uids", "num_threads"]):
        uids, threads = p.info.get("uids"), p.info.get("num_threads")
        if uids is not None and uids.real == uid:
            n += threads or 1
    return n


def plain_argv(python: str, driver: str, res_fd: int, config_json: str) -> list[str]:
    """The fallback's command line: the driver under ``python -I -B`` (``-I``: ignore PYTHON*
    variables and user site; ``-B``: no ``.pyc`` files in the workspace), nothing around it."""
    return [python, "-I", "-B", driver, str(res_fd), config_json]


def kill_escaped(token: str) -> None:
    """Fallback mode only: kill processes that left the process group and were orphaned before
    the group was killed, found by the sandbox's marker ``KIT_SANDBOX_ID=token`` in their
    environment. (Under bubblewrap the PID namespace makes this unnecessary.) A process that
    re-executed itself with a new environment is not found (``docs/isolation.md``)."""
    marker = f"KIT_SANDBOX_ID={token}".encode()
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


_SIGNAL_NAMES = {int(s): s.name for s in signal.Signals}


def describe_exit(rc: int | None) -> str:
    """An interpreter's exit status (``Popen.returncode`` style, negative: killed by that signal) in
    words, for the ``[sandbox]`` notes."""
    if rc is None:
        return "status unknown"
    if rc < 0:
        name = _SIGNAL_NAMES.get(-rc, f"signal {-rc}")
        return f"killed by {name}" + (" — a segmentation fault" if -rc == signal.SIGSEGV else "")
    if rc == EXIT_PROTOCOL:
        return "its command channel was corrupted"
    return f"it exited with status {rc}"


def lost_call_report(failure: str | None, rc: int | None, *, closed: bool, timeout_s: float, max_output_bytes: int,
                     cpu_s: int, memory_mb: int) -> tuple[str, str]:
    """``(error, note)`` for a call whose interpreter was killed or died: which limit ended it
    (``failure``: ``"timeout"``, ``"output_limit"``, ``"lost"``; ``rc``: its exit status)."""
    if closed:
        return "closed", "The sandbox was closed while this code was running."
    if failure == "timeout":
        return "timeout", f"Execution stopped: it exceeded the {timeout_s:g} s wall-clock limit per call."
    if failure == "output_limit":
        return "output_limit", (f"Execution stopped: it wrote more than {max_output_bytes / 2**20:g} MB of output "
                                "in one call.")
    if rc == -signal.SIGXCPU:
        return "cpu_limit", (f"The interpreter used up its CPU-time budget of {cpu_s} s (counted over its whole "
                             "lifetime, across calls) and was killed.")
    if rc == EXIT_MEMORY:
        return "memory", f"The interpreter ran out of memory (limit {memory_mb} MB) and exited."
    if rc == -signal.SIGKILL:
        return "crashed", ("The interpreter was killed by SIGKILL: most likely the system's out-of-memory killer, "
                           f"or the hard CPU-time limit ({cpu_s} s + 5 s) after SIGXCPU was ignored.")
    exit_desc = describe_exit(rc) if failure == "lost" else ""
    return "crashed", f"The interpreter died ({exit_desc})."
