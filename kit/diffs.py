"""Leaf-by-leaf differences between two JSON-like values: what a refused resume or a replay's drift names.

Written here (not a library) because the output is a one-line-per-leaf text for error messages
(``rl.lr: 5e-07 -> 1e-06``), not a patch: deepdiff's report would need the same formatting layer.
"""

from __future__ import annotations

from typing import Any

__all__ = ["leaf_diff"]


def leaf_diff(a: Any, b: Any, where: str = "", *, absent: str = "<unset>", arrow: str = "->",
              width: int | None = 300) -> list[str]:
    """``["path: a -> b", ...]`` for every leaf that differs; dicts are walked key by key (a key missing on one
    side reads ``absent``), anything else is compared whole. Each line is cut to ``width`` characters (None: whole)."""
    out: list[str] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=str):
                walk(x.get(k, absent), y.get(k, absent), f"{path}.{k}" if path else str(k))
        elif x != y:
            out.append(f"{path}: {x!r} {arrow} {y!r}"[:width])

    walk(a, b, where)
    return out
