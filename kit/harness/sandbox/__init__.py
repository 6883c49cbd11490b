"""The ``execute_code`` sandbox (WeAgent Table 4): a persistent per-episode Python interpreter.

One interface, :class:`Sandbox` (``run(code) -> CodeResult``, ``close()``), implemented by
:class:`CodeSandbox`, in one of two isolation modes chosen by :func:`resolve_isolation`
(``HarnessConfig.code_isolation`` / ``$MMSEARCH_KIT_SANDBOX``: ``auto | bwrap | rlimits``).

Modules, one concern each: ``base`` (interface, result, errors, mode selection), ``interpreter``
(the child's lifecycle and one call), ``bwrap`` (bubblewrap isolation), ``rlimits`` (limits and the
fallback mode), ``capture`` (bounded stdout/stderr capture, framed channel), ``workspace`` (scratch
folders, environment, produced files), ``driver`` (the child-side script, standard library only).
The isolation model, and how to check which mode ran: ``docs/isolation.md``.
"""

from kit.harness.sandbox.base import (
                                      ISOLATION_ENV,
                                      ISOLATION_MODES,
                                      CodeResult,
                                      CodeSandboxClosed,
                                      CodeSandboxError,
                                      Sandbox,
                                      resolve_isolation,
)
from kit.harness.sandbox.bwrap import BwrapProbe, bwrap_probe
from kit.harness.sandbox.interpreter import CodeSandbox

__all__ = ["Sandbox", "CodeResult", "CodeSandbox", "CodeSandboxError", "CodeSandboxClosed", "BwrapProbe",
           "bwrap_probe", "resolve_isolation", "ISOLATION_MODES", "ISOLATION_ENV"]
