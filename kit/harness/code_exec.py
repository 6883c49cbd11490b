"""Former home of the ``execute_code`` sandbox, kept so ``from kit.harness.code_exec import ...``
keeps working. The code lives in :mod:`kit.harness.sandbox` (one module per concern); the tool
executor that registers produced images is ``kit.harness.tools.execute_code``."""

from kit.harness.sandbox import (
                                 ISOLATION_ENV,
                                 ISOLATION_MODES,
                                 BwrapProbe,
                                 CodeResult,
                                 CodeSandbox,
                                 CodeSandboxClosed,
                                 CodeSandboxError,
                                 Sandbox,
                                 bwrap_probe,
                                 resolve_isolation,
)

__all__ = ["CodeResult", "CodeSandbox", "CodeSandboxError", "CodeSandboxClosed", "BwrapProbe", "bwrap_probe",
           "resolve_isolation", "ISOLATION_MODES", "ISOLATION_ENV", "Sandbox"]
