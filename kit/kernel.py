"""The kit's Jupyter kernel (issue 18 part 4): its own name, so it never shadows the default ``python3``.

``make setup`` installs it into the virtual environment (``--sys-prefix``: ``.venv/share/jupyter/kernels/
mmsearch-kit``); every notebook's ``metadata.kernelspec`` names it, and headless runs (``kit.cli notebook``,
``sequence``, the notebook tests) execute with it. An environment made by ``pip install -e .`` without
``make setup`` gets it installed on the first headless run (:func:`ensure_kernel`).
"""

from __future__ import annotations

import sys

KERNEL_NAME = "mmsearch-kit"
KERNEL_DISPLAY_NAME = "Python 3 (mmsearch-kit)"
INSTALL_COMMAND = f'python -m ipykernel install --sys-prefix --name {KERNEL_NAME} --display-name "{KERNEL_DISPLAY_NAME}"'


def kernelspec() -> dict[str, str]:
    """The ``metadata.kernelspec`` every notebook carries: ``{"name", "display_name", "language"}``."""
    return {"name": KERNEL_NAME, "display_name": KERNEL_DISPLAY_NAME, "language": "python"}


def ensure_kernel(name: str = KERNEL_NAME, echo=print) -> str:
    """Return the resource folder of kernel ``name``; install the kit's kernel into ``sys.prefix`` first when
    it is missing (announced through ``echo``), so a headless run never fails with ``NoSuchKernel``.

    Raises:
        RuntimeError: ``name`` is not installed and is not the kit's kernel, or installing it failed
            (e.g. a read-only environment); the message gives the install command.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        return KernelSpecManager().get_kernel_spec(name).resource_dir
    except NoSuchKernel:
        if name != KERNEL_NAME:
            raise RuntimeError(f"Jupyter kernel {name!r} is not installed (jupyter kernelspec list); the kit's "
                               f"kernel is {KERNEL_NAME!r}") from None
    from ipykernel.kernelspec import install

    try:
        path = install(kernel_name=KERNEL_NAME, display_name=KERNEL_DISPLAY_NAME, prefix=sys.prefix)
    except OSError as e:
        raise RuntimeError(f"the kit's Jupyter kernel {KERNEL_NAME!r} is not installed and installing it into "
                           f"{sys.prefix} failed ({e}): run `make setup` or `{INSTALL_COMMAND}`") from e
    echo(f"note: installed the kit's Jupyter kernel {KERNEL_NAME!r} into {path} (make setup does this)")
    return path


def local_kernel_manager_class():
    """The kernel manager of headless runs: nbclient's ``AsyncKernelManager`` over IPC (Unix sockets beside the
    connection file) instead of TCP. The kernel runs on this machine for this process only, so nothing needs a
    port, and ipykernel's "running over TCP without encryption" warning (printed by every TCP kernel without
    CurveZMQ keys, about nothing a user can act on) does not arise."""
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class LocalKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

    return LocalKernelManager


__all__ = ["INSTALL_COMMAND", "KERNEL_DISPLAY_NAME", "KERNEL_NAME", "ensure_kernel", "kernelspec",
           "local_kernel_manager_class"]
