"""Child-side driver of :class:`kit.harness.sandbox.CodeSandbox` (WeAgent Table 4, ``execute_code``).

Run as a script (``python -I -B driver.py RES_FD CONFIG_JSON``) with the standard library only,
so it works under any Python 3.10+ interpreter and inside the bubblewrap sandbox, where this file is
bound read-only at a neutral path and the kit itself is not visible. It never imports from ``kit``.

Start-up order, before any user code: die-with-parent, no-new-privileges, rlimits, then (only when the
parent asks for it, i.e. root running bubblewrap) switching to the sandbox's own unprivileged uid/gid,
which also clears every capability. A process forked by user code (``os.fork``, ``multiprocessing``)
loses the protocol channel at once and exits when its code returns, so it can never answer for the
driver.

File descriptors (set up by the parent):

* fd 0 — the parent's command pipe. Moved at once to a private, non-inheritable fd; fd 0 is then
  pointed at ``/dev/null`` so code calling ``input()`` gets ``EOFError`` instead of protocol bytes.
* fd 1 / fd 2 — pipes the parent reads as the call's stdout / stderr. User code, ``print``,
  ``os.system`` children and C libraries all write here directly; nothing is re-routed per call.
* ``RES_FD`` — the response pipe (passed with ``pass_fds``), moved to a private non-inheritable fd.

Protocol: frames of a 4-byte big-endian length followed by UTF-8 JSON.

* child → parent once at start-up: ``{"op": "ready", "pid", "python", "limits", "errors"}``
  (``errors`` lists limits that could not be applied; the parent refuses to run code then).
* parent → child: ``{"op": "run", "id": int, "code": str, "sentinel": str}``.
* child → parent: ``{"op": "done", "id", "ok": bool, "error": str | None, "exc_type": str | None,
  "sentinel_written": bool}``. Before sending it the child flushes and writes the call's sentinel
  bytes to fds 1 and 2, so the parent knows where this call's output ends in each stream.

Exit statuses the parent interprets: 0 (command pipe closed), ``EXIT_PROTOCOL`` (malformed frame),
``EXIT_MEMORY`` (the driver itself ran out of memory after a block).
"""

from __future__ import annotations

import ast
import builtins
import json
import linecache
import os
import signal
import struct
import sys
import traceback
import types

EXIT_PROTOCOL = 112
EXIT_MEMORY = 113

_FRAME = struct.Struct(">I")
_MAX_COMMAND_BYTES = 64 * 2**20  # the parent caps code far below this; a larger length is corruption


def _apply_limits(limits: dict) -> list[str]:
    """Lower this process's rlimits (inherited by every process it starts). Returns error strings."""
    import resource

    table = {
        "as_bytes": resource.RLIMIT_AS,
        "cpu_s": resource.RLIMIT_CPU,
        "nproc": resource.RLIMIT_NPROC,
        "fsize_bytes": resource.RLIMIT_FSIZE,
        "core_bytes": resource.RLIMIT_CORE,
    }
    errors = []
    for key, value in limits.items():
        if value is None:
            continue
        res = table.get(key)
        if res is None:
            errors.append(f"unknown limit {key!r}")
            continue
        soft, hard = (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))
        _, cur_hard = resource.getrlimit(res)
        if cur_hard != resource.RLIM_INFINITY:  # an unprivileged process cannot raise its hard limit
            hard = min(hard, cur_hard)
            soft = min(soft, hard)
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError) as e:
            errors.append(f"setrlimit({key}={value}): {e}")
    return errors


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL us when the parent dies (best effort; a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - optional hardening only
        pass


def _no_new_privs() -> None:
    """PR_SET_NO_NEW_PRIVS: setuid/file-capability programs (``su``, ``ping``) cannot gain privileges."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)  # 38 = PR_SET_NO_NEW_PRIVS
    except Exception:  # noqa: BLE001 - optional hardening only
        pass


def _drop_privileges(ids: dict) -> list[str]:
    """Become ``ids["uid"]``/``ids["gid"]`` with no supplementary groups (only when asked to, as
    root). Changing all three uids from 0 clears the permitted and effective capabilities; the result
    is checked, and any failure is returned as an error (the parent then refuses to run code)."""
    uid, gid = int(ids["uid"]), int(ids["gid"])
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as e:
        return [f"cannot switch to uid {uid}: {e}"]
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        return [f"uid switch incomplete: {os.getresuid()} {os.getresgid()} {os.getgroups()}"]
    try:
        os.setuid(0)
    except OSError:
        return []
    return ["privileges could be regained after the uid switch"]


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _Driver:
    def __init__(self, res_fd: int, config: dict):
        # Private, non-inheritable copies of the protocol fds so processes started by user code
        # never hold them (a held pipe would hide the child's death from the parent).
        self.pid = os.getpid()
        self.res_fd = os.dup(res_fd)
        os.close(res_fd)
        self.cmd_fd = os.dup(0)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        # Bigger capture pipes: ~10x fewer parent/child context switches when output is large.
        for fd in (1, 2):
            try:
                import fcntl

                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
            except (ImportError, AttributeError, OSError):  # not a pipe, not Linux, or over pipe-max-size
                pass
        # Originals of the capture pipes, to repair fds 1/2 if user code closes or redirects them.
        self.out_fd = os.dup(1)
        self.err_fd = os.dup(2)
        self.config = config
        self.cell = 0
        self.home = os.getcwd()  # the workspace (the parent starts us there)
        self.stdout = self._make_stream(1)
        self.stderr = self._make_stream(2)
        sys.stdout, sys.stderr = self.stdout, self.stderr
        sys.__stdout__, sys.__stderr__ = self.stdout, self.stderr  # type: ignore[misc]
        # User code runs in a real ``__main__`` module so pickling classes defined in a block and
        # ``multiprocessing`` work as in a script or notebook.
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        self.globals = main.__dict__
        sys.argv = [""]
        sys.path.insert(0, "")  # like a REPL/notebook: modules written into the workspace import
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        # A child of user code must never read commands or write responses: close the channel.
        for fd in (self.res_fd, self.cmd_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    @staticmethod
    def _make_stream(fd: int):
        # Line-buffered so Python prints interleave correctly with output of subprocesses that
        # write to the same fd; backslashreplace so odd characters never raise.
        return open(fd, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)

    # ---------------------------------------------------------------- protocol
    def send(self, obj: dict) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        _write_all(self.res_fd, _FRAME.pack(len(data)) + data)

    def recv(self) -> dict | None:
        head = _read_exact(self.cmd_fd, _FRAME.size)
        if head is None:
            return None
        (n,) = _FRAME.unpack(head)
        if n > _MAX_COMMAND_BYTES:
            os._exit(EXIT_PROTOCOL)
        body = _read_exact(self.cmd_fd, n)
        if body is None:
            return None
        try:
            msg = json.loads(body.decode("utf-8"))
        except ValueError:
            os._exit(EXIT_PROTOCOL)
        if not isinstance(msg, dict):
            os._exit(EXIT_PROTOCOL)
        return msg

    # ---------------------------------------------------------------- streams
    def _repair_streams(self) -> None:
        """Undo what a block may have done to the output channels (closed/redirected fds 1/2,
        replaced or closed ``sys.stdout``/``sys.stderr``) so the next block's output is captured."""
        for fd, saved in ((1, self.out_fd), (2, self.err_fd)):
            try:
                same = os.path.samestat(os.fstat(fd), os.fstat(saved))
            except OSError:
                same = False
            if not same:
                os.dup2(saved, fd)
        for name in ("stdout", "stderr"):
            current = getattr(sys, name)
            if current is not getattr(self, name):
                try:
                    current.flush()
                except Exception:  # noqa: BLE001 - the user's object may be anything
                    pass
            mine = getattr(self, name)
            if mine.closed:
                mine = self._make_stream(1 if name == "stdout" else 2)
                setattr(self, name, mine)
            setattr(sys, name, mine)
        for stream in (self.stdout, self.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - e.g. an unencodable partial write already reported
                pass

    def _write_sentinel(self, sentinel: bytes) -> bool:
        try:
            _write_all(1, sentinel)
            _write_all(2, sentinel)
            return True
        except OSError:
            return False

    # ---------------------------------------------------------------- execution
    def _print_exception(self, exc: BaseException, skip_frames: int) -> None:
        tb = exc.__traceback__
        for _ in range(skip_frames):  # hide the driver's own frames
            if tb is not None:
                tb = tb.tb_next
        try:
            traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - e.g. MemoryError while formatting
            try:
                _write_all(2, f"{type(exc).__name__}: (traceback unavailable)\n".encode())
            except OSError:
                pass

    def run_block(self, code: str) -> tuple[bool, str | None, str | None]:
        """Execute one block in the persistent globals. Returns (ok, error kind, exception type)."""
        self.cell += 1
        try:  # every call starts in the workspace, whatever an earlier call did with os.chdir
            os.chdir(self.home)
        except OSError:
            pass
        filename = f"<cell-{self.cell}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            tree = ast.parse(code, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                # REPL behaviour: the value of a final expression is shown if it is not None.
                last = ast.Interactive(body=[tree.body.pop()])
            body = compile(tree, filename, "exec")
            tail = compile(last, filename, "single") if last is not None else None
        except MemoryError as e:
            self._print_exception(e, 1)
            return False, "memory", "MemoryError"
        except (SyntaxError, ValueError, RecursionError) as e:  # ValueError: NUL bytes in 3.11
            try:
                sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
            except Exception:  # noqa: BLE001
                pass
            return False, "syntax", type(e).__name__
        try:
            exec(body, self.globals)  # noqa: S102 - executing model code is this tool's purpose
            if tail is not None:
                exec(tail, self.globals)  # noqa: S102
        except SystemExit as e:
            # Keep the interpreter (and the episode's state) alive; report like a script exit.
            code_ = e.code
            if os.getpid() != self.pid:  # a process forked by the block: exit, never act as driver
                self._exit_forked_child(0 if code_ in (None, 0) else code_ if isinstance(code_, int) else 1)
            if code_ in (None, 0):
                return True, None, None
            self._repair_streams()
            sys.stderr.write(f"SystemExit: {code_!r}\n")
            return False, "system_exit", "SystemExit"
        except BaseException as e:  # noqa: BLE001 - everything user code raises is reported
            if os.getpid() != self.pid:
                self._print_exception(e, 1)
                self._exit_forked_child(1)
            self._repair_streams()
            self._print_exception(e, 1)
            kind = "memory" if isinstance(e, MemoryError) else "exception"
            return False, kind, type(e).__name__
        if os.getpid() != self.pid:
            self._exit_forked_child(0)
        return True, None, None

    @staticmethod
    def _exit_forked_child(status: int) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(status & 0xFF)

    def serve(self) -> None:
        self.send(
            {
                "op": "ready",
                "pid": os.getpid(),
                "python": sys.version.split()[0],
                "limits": self.config.get("limits", {}),
                "errors": self.config.get("limit_errors", []),
            }
        )
        while True:
            msg = self.recv()
            if msg is None:
                return
            if msg.get("op") != "run" or not isinstance(msg.get("code"), str):
                os._exit(EXIT_PROTOCOL)
            ok, kind, exc_type = self.run_block(msg["code"])
            try:
                self._repair_streams()
                written = self._write_sentinel(msg["sentinel"].encode("ascii"))
                self.send(
                    {"op": "done", "id": msg.get("id"), "ok": ok, "error": kind, "exc_type": exc_type,
                     "sentinel_written": written}
                )
            except MemoryError:
                os._exit(EXIT_MEMORY)


def main(argv: list[str]) -> None:
    if len(argv) != 3:
        sys.stderr.write("usage: driver.py RES_FD CONFIG_JSON\n")
        os._exit(2)
    config = json.loads(argv[2])
    _die_with_parent()
    _no_new_privs()
    # A write over RLIMIT_FSIZE should raise OSError(EFBIG) in user code instead of killing the
    # interpreter with SIGXFSZ (subprocess restores the default in programs it starts).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    config["limit_errors"] = _apply_limits(config.get("limits", {}))
    if config.get("drop_to"):
        config["limit_errors"] += _drop_privileges(config["drop_to"])
    if config.get("cwd"):  # entered after the uid switch: the workspace belongs to the sandbox user
        try:
            os.chdir(config["cwd"])
        except OSError as e:
            config["limit_errors"].append(f"cannot enter the workspace: {e}")
    driver = _Driver(int(argv[1]), config)
    try:
        driver.serve()
    except MemoryError:
        os._exit(EXIT_MEMORY)
    except OSError:  # the parent went away mid-frame
        os._exit(0)
    os._exit(0)  # skip interpreter teardown: user threads or atexit hooks must not delay exit


if __name__ == "__main__":
    main(sys.argv)
