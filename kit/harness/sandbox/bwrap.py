"""bubblewrap isolation of the ``execute_code`` interpreter: probe, command line, exit statuses.

Under bubblewrap the interpreter gets new network/PID/IPC/UTS/cgroup namespaces and a read-only root
holding only ``/usr``, a few ``/etc`` entries, the interpreter's installation and the driver; the
episode workspace is the only writable place. What this does and does not isolate:
``docs/isolation.md``. Everything here is pure command-line building except :func:`bwrap_probe`.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

DRIVER_IN_SANDBOX = "/run/sandbox/driver.py"  # neutral path: no kit path exists inside the sandbox
# /etc entries Python and common libraries read; nothing with accounts, hosts or secrets.
_ETC_KEEP = ("ssl", "ca-certificates", "pki", "localtime", "timezone", "fonts", "ld.so.cache", "ld.so.conf",
             "ld.so.conf.d", "alternatives", "mime.types", "matplotlibrc", "python3*")
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SHM_BYTES = 64 * 2**20
_UID_RANGE = (1_500_000_000, 2_000_000_000)  # far above real accounts and the usual subuid ranges


@dataclass(frozen=True)
class BwrapProbe:
    """Result of testing bubblewrap on this machine: ``path`` of a working ``bwrap`` or None, and
    ``detail`` (its version, or why it cannot be used)."""

    path: str | None
    detail: str

    @property
    def available(self) -> bool:
        return self.path is not None


_PROBE: BwrapProbe | None = None  # the cached probe; tests replace it to simulate a missing bwrap
_PROBE_LOCK = threading.Lock()


def namespace_flags(as_root: bool, drop_uid: bool) -> list[str]:
    """The namespace and session options; as root, drop every capability except, when the driver
    must switch to the sandbox user (``drop_uid``), the two it needs for that."""
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
    argv = [path, *namespace_flags(root, root), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
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


def interpreter_binds(python: str) -> list[str] | None:
    """The outermost directories of ``python``'s installation not already under ``/usr``, to bind
    read-only (blocking: may ask another interpreter for its prefixes). None when the installation
    lives directly under ``/`` (binding it would expose the whole filesystem)."""
    dirs = [d for d in _interpreter_dirs(python) if not _covered(d, ["/usr"])]
    if "/" in dirs:
        return None
    dirs.sort(key=len)
    return [d for i, d in enumerate(dirs) if not _covered(d, dirs[:i])]


def pick_sandbox_uid() -> tuple[int, int]:
    """A random unprivileged (uid, gid) for the code when the harness runs as root."""
    uid = _UID_RANGE[0] + secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0])
    return uid, uid


def bwrap_argv(bwrap: str, inner: list[str], *, workspace: Path, ro_dirs: list[str], readonly_dirs: tuple[str, ...],
               driver: Path, drop_uid: bool) -> list[str]:
    """``bwrap OPTIONS -- inner``: namespaces, a read-only root with only what Python needs, the
    workspace read-write with ``readonly_dirs`` (top-level names) bound read-only over it, and
    ``driver`` at :data:`DRIVER_IN_SANDBOX`. ``ro_dirs``: from :func:`interpreter_binds`."""
    args = namespace_flags(os.geteuid() == 0, drop_uid)
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
    for d in ro_dirs:
        parents(d)
        args += ["--ro-bind", d, d]
        bound.append(d)
    ws = str(workspace)
    parents(ws)
    args += ["--bind", ws, ws]
    for d in readonly_dirs:  # mount points: the code can neither write in them nor replace them
        args += ["--ro-bind", f"{ws}/{d}", f"{ws}/{d}"]
    args += ["--perms", "0755", "--dir", "/run", "--perms", "0755", "--dir", "/run/sandbox",
             "--ro-bind", str(driver), DRIVER_IN_SANDBOX,
             "--remount-ro", "/", "--chdir", "/"]  # the driver enters the workspace itself
    return [bwrap, *args, "--", *inner]


def exit_code(rc: int | None) -> int | None:
    """bubblewrap reports a child killed by signal N as exit status 128 + N; map it back to ``-N``
    (``Popen.returncode`` style)."""
    if rc is not None and 128 < rc < 128 + 65:
        return -(rc - 128)
    return rc
