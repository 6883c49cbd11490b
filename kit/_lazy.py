"""Lazy re-exports for the kit's subpackages (PEP 562): ``from kit.policy import OpenAIChatPolicy`` works, and
``import kit.policy`` stays cheap because each name's module is imported on first use. One helper instead of a
``__getattr__`` copy per package."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package``; ``exports`` maps a public name to its module.

    Use in a package ``__init__``: ``__all__, __getattr__, __dir__ = lazy_exports(__name__, {...})``.
    """
    def __getattr__(name: str) -> Any:
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(mod), name)
        setattr(importlib.import_module(package), name, value)  # cache: later lookups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(importlib.import_module(package))) | set(exports))

    return sorted(exports), __getattr__, __dir__
