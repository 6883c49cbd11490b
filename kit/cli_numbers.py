"""How a ``-p`` value's text is read as a number (:mod:`kit.cli_params`): Python's decimal notation only, never a
guess (``0x1F`` and ``007`` are refused for a number parameter; a text parameter keeps them as typed)."""

from __future__ import annotations

import ast

__all__ = ["read_number", "unread"]

_NUMBER_CHARS = frozenset("0123456789._eE+-")


def read_number(text: str, kind: str) -> int | float | None:
    """The number ``text`` writes in Python's decimal notation, as ``kind`` (``"int"`` or ``"float"``), or None.

    An optional sign, then a decimal literal as Python reads it (:func:`ast.literal_eval`), spaces around
    ignored: ``7``, ``+7``, ``-3``, ``1_000`` for an int; those and ``2.5``, ``.5``, ``1e-4``, ``007.5`` for a
    float. None for ``0x1F``/``0o7``/``0b1`` (not decimal), ``007`` (Python refuses it: octal or seven?),
    ``2.5`` or ``1e3`` for an int, ``nan``, ``inf``, ``1j``, ``1,2``, words: never a guess.
    """
    body = text.strip()
    sign = -1 if body[:1] == "-" else 1
    body = body[1:] if body[:1] in ("+", "-") else body
    if not body or body[0] not in "0123456789." or not set(body) <= _NUMBER_CHARS:
        return None
    try:
        value = ast.literal_eval(body)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if type(value) is int:
        return sign * value if kind == "int" else sign * float(value)
    return sign * value if kind == "float" and type(value) is float else None


def unread(text: str, kind: str) -> TypeError:
    """The TypeError for a text ``kind`` cannot read: a reason when it looks like a number (``0x1F``,
    ``2.5`` for an int), the bare kind (no reason: ``two``) otherwise."""
    if text.strip().lstrip("+-").lstrip()[:1] not in tuple("0123456789."):
        return TypeError(kind)
    what = "a whole number in decimal digits" if kind == "int" else "a number in decimal notation"
    return TypeError(f"{what}, which {text!r} is not")
