"""Notebook parameters for the command line: declared names, their types, and checks before a run.

A notebook's ``parameters`` cell declares each parameter with a literal default, optionally with an
annotation (``zim_paths: list[str] | None = None``). :func:`notebook_parameters` reads them with
:mod:`ast` (Papermill's own inspector skips lines whose comments it cannot parse); :func:`coerce`
checks a ``-p`` value against the declared type *before* the notebook starts:

=====================  ==========================================================================
declared               accepted
=====================  ==========================================================================
annotation             its types (``int | None``, ``list[str]``, ``dict``, ``Optional[float]`` …)
default ``None``       anything (no annotation: the notebook's own code decides)
``bool``               ``True``/``False``, ``true``/``false``, ``yes``/``no``, ``1``/``0``
``int``                an integer (``two`` or ``2.5`` is refused)
``float``              an integer or a float
``str``                text; an integer is taken as its digits (``-p tag 2024``); a path as its text
``list``               a list (elements checked against the default's element type); a single
                       value becomes a one-element list (``-p zim_paths a.zim`` → ``["a.zim"]``)
``dict``               a dict
=====================  ==========================================================================

Anything else raises :class:`ParameterError` naming the parameter, the expected type, the default
and the value given.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ANY = "any"
_NAMES = {"None": "none", "NoneType": "none", "bool": "bool", "int": "int", "float": "float", "str": "str",
          "list": "list", "List": "list", "tuple": "list", "Sequence": "list", "dict": "dict", "Dict": "dict",
          "Mapping": "dict", "Path": "str", "Any": ANY}


class ParameterError(ValueError):
    """A notebook parameter override is unknown or of the wrong type (message: one line)."""


@dataclass(frozen=True)
class Param:
    """One declared notebook parameter: ``kinds`` (allowed kinds: ``none``/``bool``/``int``/``float``/
    ``str``/``list``/``dict``, or ``("any",)``), ``item`` (the element kind of a list, or ``any``)."""

    name: str
    default: Any
    kinds: tuple[str, ...]
    item: str = ANY

    def describe(self) -> str:
        if self.kinds == (ANY,):
            return "any value"
        parts = [f"list of {self.item}" if k == "list" and self.item != ANY else k for k in self.kinds]
        return " or ".join(parts)


def _kind_of(value: Any) -> str:
    if value is None:
        return "none"
    for t, k in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), ((list, tuple), "list"), (dict, "dict")):
        if isinstance(value, t):
            return k
    return ANY


def _item_kind(values) -> str:
    kinds = {_kind_of(v) for v in values}
    if kinds == {"int", "float"}:
        return "float"
    return kinds.pop() if len(kinds) == 1 else ANY


def _from_annotation(node: ast.AST) -> tuple[tuple[str, ...], str] | None:
    """Allowed kinds and list element kind of an annotation node; None when it is not understood."""
    if isinstance(node, ast.Constant) and node.value is None:
        return ("none",), ANY
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return _from_annotation(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        a, b = _from_annotation(node.left), _from_annotation(node.right)
        if a is None or b is None:
            return None
        return tuple(dict.fromkeys(a[0] + b[0])), a[1] if a[1] != ANY else b[1]
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    if name is not None:
        kind = _NAMES.get(name)
        return ((kind,), ANY) if kind else None
    if isinstance(node, ast.Subscript):
        head = _from_annotation(node.value)
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head is None:
            return None
        if head[0] == ("list",):
            inner = _from_annotation(args[0])
            return ("list",), (inner[0][0] if inner and len(inner[0]) == 1 else ANY)
        if isinstance(node.value, ast.Name) and node.value.id in ("Optional", "Union"):
            parts = [_from_annotation(a) for a in args]
            if any(p is None for p in parts):
                return None
            kinds = tuple(dict.fromkeys(k for p in parts for k in p[0]))
            return (kinds + ("none",) if node.value.id == "Optional" else kinds), next((p[1] for p in parts if p[1] != ANY), ANY)
        return head
    return None


def _param(name: str, value: ast.AST | None, annotation: ast.AST | None) -> Param:
    try:
        default = ast.literal_eval(value) if value is not None else None
        literal = value is not None
    except (ValueError, SyntaxError, TypeError):
        default, literal = None, False
    if annotation is not None:
        spec = _from_annotation(annotation)
        if spec is not None and ANY not in spec[0]:
            kinds, item = spec
            if item == ANY and isinstance(default, (list, tuple)) and default:
                item = _item_kind(default)
            return Param(name, default, kinds, item)
    if not literal or default is None:
        return Param(name, default, (ANY,))
    kind = _kind_of(default)
    item = _item_kind(default) if kind == "list" and default else ANY
    return Param(name, default, (kind,), item)


def notebook_parameters(notebook: str | Path) -> dict[str, Param]:
    """The parameters declared at the top level of a notebook's ``parameters`` cell(s), by name."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    out: dict[str, Param] = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            out[t.id] = _param(t.id, node.value, None)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    out[node.target.id] = _param(node.target.id, node.value, node.annotation)
                elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                    out.setdefault(node.target.id, Param(node.target.id, None, (ANY,)))
    return out


_TRUE, _FALSE = {"true", "yes", "1"}, {"false", "no", "0"}


def _to(kind: str, v: Any, item: str = ANY) -> Any:
    """``v`` as ``kind``; raises TypeError when it is not one."""
    if kind == ANY:
        return v
    if kind == "none" and v is None:
        return None
    if kind == "bool":
        if isinstance(v, bool):
            return v
        if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
            return v.strip().lower() in _TRUE
        if isinstance(v, int) and v in (0, 1):
            return bool(v)
    if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if kind == "float" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if kind == "str":
        if isinstance(v, str):
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        if isinstance(v, os.PathLike):  # Python callers pass pathlib paths
            return os.fspath(v)
    if kind == "list":
        if isinstance(v, (list, tuple)):
            return [_to(item, x) for x in v]
        if not isinstance(v, (dict, type(None))):
            return [_to(item, v)]  # a single value: a one-element list
    if kind == "dict" and isinstance(v, dict):
        return v
    raise TypeError(kind)


def coerce(param: Param, value: Any, where: str = "") -> Any:
    """``value`` (a ``-p`` value as parsed by the CLI, or a Python value) checked and converted to
    ``param``'s type (module table). Raises :class:`ParameterError` (one line)."""
    for kind in param.kinds:
        try:
            return _to(kind, value, param.item)
        except TypeError:
            continue
    raise ParameterError(f"parameter {param.name!r}{f' of {where}' if where else ''} expects {param.describe()} "
                         f"(default {param.default!r}); got {value!r} ({type(value).__name__})")


def check_params(declared: dict[str, Param], params: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``params`` checked against ``declared``: every name declared, every value of its type (converted).

    Raises:
        ParameterError: unknown names (all listed) or the first value of a wrong type.
    """
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ParameterError(f"{where + ' has ' if where else ''}no parameter(s) {unknown}; "
                             f"its parameters: {sorted(declared)}")
    return {k: coerce(declared[k], v, where) for k, v in params.items()}


def named_endpoints(declared: dict[str, Param], params: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(parameter, endpoint, model, api-key variable)`` for every ``*endpoint`` parameter whose value
    (override, else default) is a non-empty string; the model is the matching ``*model`` parameter
    and the key variable the matching ``*api_key_env`` (else ``api_key_env``, else ``OPENAI_API_KEY``)."""
    value = {k: params.get(k, p.default) for k, p in declared.items()}
    out = []
    for name in sorted(declared):
        if not name.endswith("endpoint") or not isinstance(value[name], str) or not value[name].strip():
            continue
        prefix = name[: -len("endpoint")]
        model = value.get(prefix + "model") or ""
        key_env = value.get(prefix + "api_key_env") or value.get("api_key_env") or "OPENAI_API_KEY"
        out.append((name, value[name].strip(), str(model), str(key_env)))
    return out


def preflight_endpoints(declared: dict[str, Param], params: dict[str, Any], where: str = "",
                        timeout_s: float = 5.0) -> list[str]:
    """Check every named endpoint of a notebook run (reachable, serves the named model), and a ``model``
    named without an endpoint (a local checkpoint folder, :func:`kit.policy.factory.local_model_problem`),
    before it starts.

    Returns one line per endpoint checked. Raises :class:`kit.policy.factory.ModelUnavailable` (one
    line naming the parameter) at the first one that cannot be used. The main ``endpoint`` may omit
    its model when the server serves exactly one; any other (``judge_endpoint`` …) needs its model.
    """
    import os

    from kit.policy.factory import ModelUnavailable, check_endpoint

    from kit.policy.factory import local_model_problem

    lines = []
    prefix = f"{where}: " if where else ""
    endpoints = named_endpoints(declared, params)
    for name, endpoint, model, key_env in endpoints:
        if not model and name != "endpoint":
            raise ModelUnavailable(f"{prefix}{name}={endpoint} is set but {name[:-len('endpoint')]}model is empty")
        try:
            served, _ = check_endpoint(endpoint, model, os.environ.get(key_env), timeout_s)
        except ModelUnavailable as e:  # its message names the endpoint already
            raise ModelUnavailable(f"{prefix}{e}" if name == "endpoint" else f"{prefix}{name}: {e}") from e
        lines.append(f"{prefix}{name} {endpoint} serves {served!r}")
    # the main model named without an endpoint is loaded in process: it must be a checkpoint folder
    model = params.get("model", declared["model"].default) if "model" in declared else ""
    if isinstance(model, str) and not any(n == "endpoint" for n, *_ in endpoints):
        problem = local_model_problem(model)
        if problem:
            raise ModelUnavailable(f"{prefix}{problem}")
        if model:
            lines.append(f"{prefix}model {model!r} loads in process")
    return lines
