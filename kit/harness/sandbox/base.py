"""The one interface of the ``execute_code`` sandbox and the choice of its isolation.

:class:`Sandbox` is what the tool executor (``kit.harness.tools.execute_code``) relies on: ``run(code)``
returns a :class:`CodeResult`, ``close()`` ends everything the code started. :func:`resolve_isolation`
turns ``auto | bwrap | rlimits`` (``HarnessConfig.code_isolation``, ``$MMSEARCH_KIT_SANDBOX``) into the
mode a sandbox will use. The isolation model is explained in ``docs/isolation.md``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from kit.harness.sandbox.bwrap import bwrap_probe

ISOLATION_MODES = ("auto", "bwrap", "rlimits")
ISOLATION_ENV = "MMSEARCH_KIT_SANDBOX"  # default isolation mode when the constructor is not told


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


@runtime_checkable
class Sandbox(Protocol):
    """What ``execute_code`` needs from a sandbox (``Harness(sandbox_factory=...)`` may supply any).

    ``run(code)``: execute one block in the episode's persistent interpreter; whatever the code does
    comes back as a :class:`CodeResult`, only a failure of the sandbox itself raises
    (:class:`CodeSandboxError`). ``close()``: kill everything the code started; idempotent.
    ``isolation``: the mode in use, ``"bwrap"`` or ``"rlimits"``.
    """

    @property
    def isolation(self) -> str: ...

    async def run(self, code: str) -> CodeResult: ...

    async def close(self) -> None: ...


def requested_mode(mode: str | None) -> str:
    """``mode``, or ``$MMSEARCH_KIT_SANDBOX``, or ``"auto"``; ValueError for an unknown mode."""
    if mode is None:
        mode = os.environ.get(ISOLATION_ENV, "").strip() or "auto"
    if mode not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {ISOLATION_MODES}, got {mode!r}")
    return mode


def resolve_isolation(mode: str | None = None) -> str:
    """The isolation a sandbox will use: ``"bwrap"`` or ``"rlimits"``.

    ``mode``: ``"auto"`` (bwrap when it works, else rlimits), ``"bwrap"`` (required), ``"rlimits"``
    or None (``$MMSEARCH_KIT_SANDBOX``, else ``"auto"``). Runs :func:`bwrap_probe` (cached).

    Raises:
        ValueError: unknown mode.
        CodeSandboxError: ``"bwrap"`` was required and bubblewrap is unavailable (the reason is given).
    """
    mode = requested_mode(mode)
    if mode == "rlimits":
        return "rlimits"
    probe = bwrap_probe()
    if probe.available:
        return "bwrap"
    if mode == "bwrap":
        raise CodeSandboxError(f"isolation='bwrap' was required but {probe.detail}")
    return "rlimits"
