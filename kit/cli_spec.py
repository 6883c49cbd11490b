"""What a notebook's parameters cell declares, as the command line checks it (:mod:`kit.cli_params`): one
:class:`Param` per name, the :class:`Spec` an annotation allows, and :class:`ParameterError`, the one-line refusal.

Its own module because the checks that read a declaration (:mod:`kit.cli_endpoints`, :mod:`kit.cli_refs`,
:mod:`kit.data.synthesis_web`) sit below :mod:`kit.cli_params`, which imports them (re-exported there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANY = "any"  # a kind: no annotation or literal default, the notebook's own code decides


class ParameterError(ValueError):
    """A notebook parameter override is unknown or of the wrong type (message: one line)."""


@dataclass(frozen=True)
class Spec:
    """What an annotation allows: ``kinds`` (``none``/``bool``/``int``/``float``/``str``/``list``/``dict``,
    or ``("any",)``), ``choices`` (a Literal's values, or None), ``bounds`` (``(op, number)`` pairs,
    op one of ``>=``/``>``/``<=``/``<``) and ``item`` (the Spec of a list's elements, or None)."""

    kinds: tuple[str, ...]
    choices: tuple | None = None
    bounds: tuple[tuple[str, float], ...] = ()
    item: Spec | None = None


@dataclass(frozen=True)
class Param:
    """One declared notebook parameter: ``kinds`` (allowed kinds: ``none``/``bool``/``int``/``float``/
    ``str``/``list``/``dict``, or ``("any",)``), ``item`` (the element kind of a list, or ``any``),
    ``choices`` (allowed values, from ``Literal``), ``bounds`` (``(op, number)`` pairs), and the same
    for list elements (``item_choices``, ``item_bounds``)."""

    name: str
    default: Any
    kinds: tuple[str, ...]
    item: str = ANY
    choices: tuple | None = None
    bounds: tuple[tuple[str, float], ...] = ()
    item_choices: tuple | None = None
    item_bounds: tuple[tuple[str, float], ...] = ()

    def describe(self) -> str:
        if self.kinds == (ANY,):
            return "any value"
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices) + (" or None" if "none" in self.kinds else "")
        parts = []
        for k in self.kinds:
            if k == "list" and self.item != ANY:
                inner = (("one of " + "/".join(repr(c) for c in self.item_choices)) if self.item_choices is not None
                         else self.item + _bounds_text(self.item_bounds))
                parts.append(f"list of {inner}")
            else:
                parts.append(k + (_bounds_text(self.bounds) if k in ("int", "float") else ""))
        return " or ".join(parts)


def _bounds_text(bounds) -> str:
    return "".join(f" {op} {v:g}" for op, v in bounds)



__all__ = ["ANY", "Param", "ParameterError", "Spec"]
