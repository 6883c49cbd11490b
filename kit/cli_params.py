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
``int``                an integer, or a text of one in decimal digits (``+7``, ``1_000``); ``two``, ``2.5``,
                       ``0x1F`` and ``007`` are refused (:func:`read_number`)
``float``              an integer or a float, or a text of one in decimal notation (``1e-4``, ``.5``)
``str``                text, exactly as typed (``-p tag 0x1F`` is ``"0x1F"``); an integer is taken as its
                       digits (``-p tag 2024``); a path as its text; ``None``/``True``/``False`` are refused
``list``               a list (elements checked against the default's element type); a single
                       value becomes a one-element list (``-p zim_paths a.zim`` → ``["a.zim"]``)
``dict``               a dict
``Literal["a", "b"]``  one of the listed values (``backend: Literal["zim", "serper"] = "zim"``)
``Count`` …            a bounded number: the aliases below, or ``Annotated[int, Ge(1)]`` with
                       :mod:`annotated_types` bounds (``Ge``, ``Gt``, ``Le``, ``Lt``)
=====================  ==========================================================================

Bounded aliases for parameters cells (``from kit.cli_params import Count, ...``): :data:`Count`
(int >= 1: episodes, repeats, concurrency, sizes), :data:`NonNegInt` (int >= 0), :data:`PositiveFloat`
(> 0: learning rates, seconds), :data:`NonNegFloat` (>= 0: temperatures, thresholds), :data:`Fraction`
(0 <= x <= 1). A float must be finite (``1e400`` is ``inf``: refused). List elements are checked the
same way (``list[Count]``, ``list[Literal[...]]``). A single text value given for a list parameter
becomes a one-element list, except text with a comma (``-p benchmarks fvqa,livevqa``), which is
refused: a comma may be part of a path, so write the list (``-p benchmarks "['fvqa', 'livevqa']"``).

Anything else raises :class:`ParameterError` naming the parameter, the expected type, the default
and the value given.

Values from the command line: ``-p NAME VALUE`` reaches :func:`coerce` as :func:`kit.cli._value` reads it: a
plain integer (``7``, ``-3``), a quoted string (``'abc'`` → ``abc``), ``None``/``True``/``False`` and a bracketed
literal (``[1, 2]``, ``{'a': 1}``; as JSON holds it, a tuple as a list) are those Python values; any other VALUE
is its text exactly as typed, and the declared type reads it (a float parameter reads ``1e-4``; a text parameter
keeps ``0x1F``, ``+7``, ``1_000``, ``007``, ``1e3``). A union tries its types in the declared order (``int | str``
given ``7`` is ``7``, given ``0x1F`` is ``"0x1F"``; ``str | int`` given ``7`` is ``"7"``). ``None`` means None:
refused for a parameter without ``None`` in its type (``-p name "'None'"`` is the text). Without an annotation or
a literal default (kind ``any``) the value is passed as read: ``-p x 7`` is ``7``, ``-p x 1e-4`` the text
``"1e-4"``.

=========  ===========  ========  ==========  ========  =============  ============  ============
VALUE      ``str``      ``int``   ``float``   ``bool``  ``list[int]``  ``int|None``  ``str|None``
=========  ===========  ========  ==========  ========  =============  ============  ============
``7``      ``"7"``      ``7``     ``7.0``     refused   ``[7]``        ``7``         ``"7"``
``+7``     ``"+7"``     ``7``     ``7.0``     refused   ``[7]``        ``7``         ``"+7"``
``1_000``  ``"1_000"``  ``1000``  ``1000.0``  refused   ``[1000]``     ``1000``      ``"1_000"``
``0x1F``   ``"0x1F"``   refused   refused     refused   refused        refused       ``"0x1F"``
``007``    ``"007"``    refused   refused     refused   refused        refused       ``"007"``
``1e3``    ``"1e3"``    refused   ``1000.0``  refused   refused        refused       ``"1e3"``
``None``   refused      refused   refused     refused   refused        ``None``      ``None``
``yes``    ``"yes"``    refused   refused     ``True``  refused        refused       ``"yes"``
``[1,2]``  refused      refused   refused     refused   ``[1, 2]``     refused       refused
``1,2``    ``"1,2"``    refused   refused     refused   refused        refused       ``"1,2"``
=========  ===========  ========  ==========  ========  =============  ============  ============

A Python caller's values (:func:`kit.cli.run_notebook` ``params``, :func:`kit.cli.run_sequence` ``common``) are
checked by the same rules; a text given for a number is read as above, so a recorded ``sequence.json`` (which
holds a ``-p`` value's text) types the same on resume.
"""

from __future__ import annotations

import ast
import functools
import math
import os
import typing
from pathlib import Path
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le
from pydantic import AfterValidator, BeforeValidator, Strict, TypeAdapter, ValidationError

# the endpoint checks, and the local paths and checkpoint references the checks read, in their own
# modules (re-exported: old import paths)
from kit.cli_endpoints import named_endpoints as named_endpoints
from kit.cli_endpoints import preflight_endpoints as preflight_endpoints
from kit.cli_endpoints import recipe_model
from kit.cli_mechanisms import mechanism_problems
from kit.cli_numbers import read_number as read_number  # re-exported: how a -p text is read as a number
from kit.cli_numbers import unread
from kit.cli_refs import CHECKPOINT_PARAMS as CHECKPOINT_PARAMS
from kit.cli_refs import PATH_PARAMS as PATH_PARAMS
from kit.cli_refs import Written, checkpoint_problems
from kit.cli_refs import absolute_paths as absolute_paths
from kit.cli_refs import local_ref_problems as local_ref_problems
from kit.cli_refs import plan_writes as plan_writes
from kit.cli_refs import written_by_plan as written_by_plan
from kit.cli_spec import ANY, Spec, _bounds_text  # noqa: F401 - re-exported (old import paths)
from kit.cli_spec import Param as Param
from kit.cli_spec import ParameterError as ParameterError
from kit.cli_stages import get_profile_value as get_profile_value  # re-exported: notebook 05 reads resolved_stages
from kit.cli_stages import resolved_stages
from kit.profiles import ResolvedRun, resolve_run

Count = Annotated[int, Ge(1)]
NonNegInt = Annotated[int, Ge(0)]
PositiveFloat = Annotated[float, Gt(0)]
NonNegFloat = Annotated[float, Ge(0)]
Fraction = Annotated[float, Ge(0), Le(1)]
_ALIASES = {"Count": Count, "NonNegInt": NonNegInt, "PositiveFloat": PositiveFloat, "NonNegFloat": NonNegFloat,
            "Fraction": Fraction}
_BOUND_OPS = {"Ge": ">=", "Gt": ">", "Le": "<=", "Lt": "<"}

_NAMES = {"None": "none", "NoneType": "none", "bool": "bool", "int": "int", "float": "float", "str": "str",
          "list": "list", "List": "list", "tuple": "list", "Sequence": "list", "dict": "dict", "Dict": "dict",
          "Mapping": "dict", "Path": "str", "Any": ANY}


def _within(value, bounds) -> bool:
    return all({">=": value >= b, ">": value > b, "<=": value <= b, "<": value < b}[op] for op, b in bounds)


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


def _runtime_spec(obj) -> Spec | None:
    """The Spec of a bounded alias (``Annotated[int, Ge(1)]`` as a typing object)."""
    base, *meta = typing.get_args(obj)
    kind = {int: "int", float: "float"}.get(base)
    if kind is None:
        return None
    bounds = []
    for m in meta:
        for cls, op in _BOUND_OPS.items():
            if type(m).__name__ == cls:
                bounds.append((op, getattr(m, cls.lower())))
    return Spec((kind,), bounds=tuple(bounds))


def _bound_of(node: ast.AST) -> tuple[str, float] | None:
    """``Ge(1)`` / ``Gt(gt=0)`` … as ``(op, number)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))):
        return None
    fname = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
    args = list(node.args) + [k.value for k in node.keywords]
    if fname not in _BOUND_OPS or len(args) != 1:
        return None
    try:
        v = ast.literal_eval(args[0])
    except ValueError:
        return None
    return (_BOUND_OPS[fname], v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _union(a: Spec, b: Spec) -> Spec:
    choices = None if a.choices is None and b.choices is None else (a.choices or ()) + (b.choices or ())
    return Spec(tuple(dict.fromkeys(a.kinds + b.kinds)), choices, a.bounds or b.bounds, a.item or b.item)


def _from_annotation(node: ast.AST) -> Spec | None:
    """What an annotation node allows; None when it is not understood."""
    if isinstance(node, ast.Constant) and node.value is None:
        return Spec(("none",))
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return _from_annotation(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        a, b = _from_annotation(node.left), _from_annotation(node.right)
        return None if a is None or b is None else _union(a, b)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    if name is not None:
        if name in _ALIASES:
            return _runtime_spec(_ALIASES[name])
        kind = _NAMES.get(name)
        return Spec((kind,)) if kind else None
    if isinstance(node, ast.Subscript):
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        head_name = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", None)
        if head_name == "Literal":
            try:
                values = tuple(ast.literal_eval(a) for a in args)
            except ValueError:
                return None
            kinds = tuple(dict.fromkeys(_kind_of(v) for v in values))
            return None if ANY in kinds else Spec(kinds, choices=tuple(v for v in values if v is not None))
        if head_name == "Annotated":
            base = _from_annotation(args[0])
            bounds = [_bound_of(a) for a in args[1:]]
            if base is None or any(b is None for b in bounds):
                return None
            return Spec(base.kinds, base.choices, base.bounds + tuple(bounds), base.item)
        head = _from_annotation(node.value)
        if head is None:
            return None
        if head.kinds == ("list",):
            inner = _from_annotation(args[0])
            return Spec(("list",), item=inner if inner is not None and len(inner.kinds) == 1 else None)
        if head_name in ("Optional", "Union"):
            parts = [_from_annotation(a) for a in args]
            if any(p is None for p in parts):
                return None
            spec = parts[0]
            for p in parts[1:]:
                spec = _union(spec, p)
            return _union(spec, Spec(("none",))) if head_name == "Optional" else spec
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
        if spec is not None and ANY not in spec.kinds:
            item, item_choices, item_bounds = ANY, None, ()
            if spec.item is not None:
                item, item_choices, item_bounds = spec.item.kinds[0], spec.item.choices, spec.item.bounds
            elif isinstance(default, (list, tuple)) and default:
                item = _item_kind(default)
            return Param(name, default, spec.kinds, item, spec.choices, spec.bounds, item_choices, item_bounds)
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


def _number_text(kind: str):
    def read(v: Any) -> Any:  # a text for an int or float: decimal notation only (kit.cli_numbers)
        if not isinstance(v, str):
            return v
        number = read_number(v, kind)
        if number is None:
            raise unread(v, kind)  # a TypeError: pydantic passes it through, with its reason
        return number
    return BeforeValidator(read)


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise TypeError("a finite number (1e400 is inf)")
    return v


def _bool_text(v: Any) -> Any:
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    if isinstance(v, int) and not isinstance(v, bool) and v in (0, 1):
        return bool(v)
    return v


def _text(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)  # -p tag 2024: its digits
    return os.fspath(v) if isinstance(v, os.PathLike) else v  # Python callers pass pathlib paths


#: each kind as a strict pydantic type (a bool is not an int, an int not a text) with the readings of a -p text
#: the module table lists as before-validators; ``list`` is handled by :func:`_to` (its items are kinds too)
_KIND_TYPES: dict[str, Any] = {
    "none": None,
    "bool": Annotated[bool, Strict(), BeforeValidator(_bool_text)],
    "int": Annotated[int, Strict(), _number_text("int")],
    "float": Annotated[float, Strict(), _number_text("float"), AfterValidator(_finite)],
    "str": Annotated[str, Strict(), BeforeValidator(_text)],
    "dict": Annotated[dict, Strict()],
}


@functools.cache
def _adapter(kind: str) -> TypeAdapter:
    return TypeAdapter(_KIND_TYPES[kind])


def _to(kind: str, v: Any, item: str = ANY) -> Any:
    """``v`` as ``kind`` (pydantic's :class:`~pydantic.TypeAdapter` of :data:`_KIND_TYPES`); raises TypeError
    when it is not one: ``TypeError(kind)``, or with a reason (a text a number type cannot read,
    :func:`read_number`; a non-finite float; a list written as one text with a comma)."""
    if kind == ANY:
        return v
    if kind == "list":
        if isinstance(v, str) and "," in v:
            # a comma may be part of a path: never guess a split
            raise TypeError(f"a list written as a list ({[x.strip() for x in v.split(',')]!r}), not one text with a comma")
        if isinstance(v, (list, tuple)):
            return [_to(item, x) for x in v]
        if isinstance(v, (dict, type(None))):
            raise TypeError(kind)
        return [_to(item, v)]  # a single value: a one-element list
    try:
        return _adapter(kind).validate_python(v)
    except ValidationError:
        raise TypeError(kind) from None


def _fits(value: Any, choices, bounds) -> bool:
    if choices is not None and value not in choices:
        return False
    return not (bounds and isinstance(value, (int, float)) and not isinstance(value, bool) and not _within(value, bounds))


def coerce(param: Param, value: Any, where: str = "") -> Any:
    """``value`` (a ``-p`` value as :func:`kit.cli._value` reads it, or a Python value) checked and converted
    to ``param``'s type, choices and bounds (module tables): the first of the declared types, in their order,
    that reads it. A text is kept by a text type and read by a number type (:func:`read_number`: decimal
    notation only, never a guess). Raises :class:`ParameterError` (one line) naming the parameter, what it
    expects, its default and the value given."""
    reasons = []
    for kind in param.kinds:
        try:
            got = _to(kind, value, param.item)
        except TypeError as e:
            if e.args and e.args[0] != kind:
                reasons.append(str(e.args[0]))
            continue
        if got is None:
            return got
        items = got if kind == "list" else [got]
        choices, bounds = (param.item_choices, param.item_bounds) if kind == "list" else (param.choices, param.bounds)
        if all(_fits(x, choices, bounds) for x in items):
            return got
    why = f" ({'; '.join(reasons)})" if reasons else ""
    raise ParameterError(f"parameter {param.name!r}{f' of {where}' if where else ''} expects {param.describe()}{why} "
                         f"(default {param.default!r}); got {value!r} ({type(value).__name__})")


def check_params(declared: dict[str, Param], params: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``params`` checked against ``declared``: every name declared, every value of its type (converted).
    A ``*endpoint`` string is stripped, so a blank one names no endpoint in every later check and in the
    notebook alike (:func:`kit.cli_refs.main_endpoint_set`).

    Raises:
        ParameterError: unknown names (all listed) or the first value of a wrong type.
    """
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ParameterError(f"{where + ' has ' if where else ''}no parameter(s) {unknown}; "
                             f"its parameters: {sorted(declared)}")
    typed = {k: coerce(declared[k], v, where) for k, v in params.items()}
    return {k: v.strip() if k.endswith("endpoint") and isinstance(v, str) else v for k, v in typed.items()}


# (switch parameter, value) -> parameters that must then be non-empty; an empty <role>_model is the
# recipe's served name (eval.<role>_model: kit.eval.judge_factory, kit.harness.summarize), so only a
# recipe without one needs it named (:func:`recipe_model`)
NEEDS = {("judge", "llm"): ("judge_endpoint", "judge_model"),
         ("image_judge", "vlm"): ("image_judge_endpoint", "image_judge_model"),
         ("summarizer", "llm"): ("summarizer_endpoint", "summarizer_model")}
# switch -> its labelled offline alternative (the paper value and its citation are the recipe's eval.<switch>)
PAPER_SWITCHES = {"judge": "rule", "image_judge": "phash", "summarizer": "extractive"}
# parameters a paper-profile run must name (the notebooks stop in their first cells otherwise)
PAPER_NEEDS = {"expert_endpoint": "an OpenAI-compatible expert", "expert_model": "the expert's served name",
               "base_model": "the checkpoint to train",
               # notebook 05 stops in its first cell without it (WeAgent §4.5: the RL mixture)
               "rl_prompts": "notebook 02's output folder, its splits/rl_prompts.jsonl, a saved RL mixture or "
                             "hub:dataset:owner/name@rev"}


def _recipe_switch(run: ResolvedRun, switch: str) -> str | None:
    """The value the profile's recipe gives a judge / summarizer switch (``eval.<switch>``)."""
    return run.value(f"eval.{switch}", None)


def _recipe_why(profile, switch: str) -> str:
    """The citation of the profile's ``eval.<switch>`` (``"POINTS-Seeker §3.2.4 (...)"``), so an error names
    the paper the profile runs, not WeAgent's section for every profile."""
    from kit.profiles import get_profile

    r = get_profile(profile).recipe_obj()
    e = r.entries.get(f"eval.{switch}")
    return f"{r.title} {e.source or e.kit}" if e is not None else f"recipe {r.label}"


def check_combinations(declared: dict[str, Param], params: dict[str, Any], profile: str | ResolvedRun = "smoke",
                       where: str = "", *, preflight: bool = False, local_refs: bool = False,
                       written: Written | None = None) -> None:
    """Rules across parameters, checked before a notebook starts (no network):

    * a ``<role>_model`` given while its ``<role>_endpoint`` is empty (a model nothing serves);
    * ``judge="llm"`` needs ``judge_endpoint`` and ``judge_model``; ``image_judge="vlm"`` and
      ``summarizer="llm"`` their endpoints and models; an empty model is the recipe's served name
      (:func:`recipe_model`), so it is needed only where the recipe names none; under a paper profile a
      switch left None is the recipe's (``eval.judge`` …), so it needs them too unless the labelled
      fallback of :data:`PAPER_SWITCHES` is passed;
    * ``policy_kind="demonstrator"`` while a model or endpoint is named (:func:`kit.policy.factory.eval_policy_kind`);
    * the paper profile needs the parameters of :data:`PAPER_NEEDS` that the notebook declares (notebook 05:
      ``rl_prompts``, unless a preflight, which builds local prompts);
    * ``backend="verl"`` (verl runs from ``scripts/launch_verl.sh``, not a notebook);
    * an endpoint its switch never calls: ``judge="rule"`` with ``judge_endpoint``, ``summarizer="extractive"``
      with ``summarizer_endpoint``, ``image_judge="phash"`` with ``image_judge_endpoint``;
    * notebook 05's ``stages`` must resolve (:func:`resolved_stages`: the notebook's own
      :func:`kit.rl.staging.resolve_schedule` with the profile's recipe), and a paper run whose resolved
      schedule has an OPD stage needs ``teacher_model``;
    * the web a notebook searches (:func:`web_backend_param`): left None it is the recipe's (``rl_run.web_backend``,
      ``eval.web_backend``, ``data.web_backend``: the live web for the paper recipes), which needs
      ``SERPER_API_KEY``, else ``-p web_backend zim`` / ``-p backend zim`` (the labelled local web;
      :func:`kit.data.synthesis_web.resolve_web_backend`);
    * with ``local_refs`` (a run about to start): each checkpoint reference of :data:`CHECKPOINT_PARAMS` must
      load (:func:`checkpoint_problems`: a missing ``base_model`` folder), before any endpoint probe; the one
      place they are checked. A sequence plan passes ``written``, the exact outputs its earlier unfinished
      notebooks write (:func:`kit.cli_refs.plan_writes`): a reference naming one is not refused (notebook 05's
      ``base_model`` may be notebook 04's ``run/full/final``); anything else in their folders is;
    * ``report_to`` (``tensorboard`` / ``trackio`` / ``wandb``) must be able to start here
      (:func:`kit.tracking.report_to_problem`: the package importable; W&B offline/disabled or a key), so a
      tracking problem stops the run before its kernel, not inside notebook 04/05/06 after its earlier cells.

    "Paper profile" is any profile but smoke (``paper``, ``points_seeker``); a ``preflight`` of one needs none
    of its endpoints or checkpoints (tiny stand-ins take their place, :mod:`kit.profiles`). ``profile``: a name,
    or the run resolved once (:class:`kit.profiles.ResolvedRun`); every rule reads that one object.

    Raises:
        ParameterError: every rule broken, collected (one line each; a single problem is its own line), so
            a paper command is fixed in one pass, not one missing parameter per run.
    """
    run = resolve_run(profile, preflight=preflight, overrides=params)  # once: every rule below reads it
    value = {k: params.get(k, p.default) for k, p in declared.items()}
    at = f" of {where}" if where else ""
    paper = not run.smoke and not preflight  # a paper recipe run for real: its endpoints must be named
    problems = _role_problems(declared, params, value, run, at, paper=paper)
    problems += _backend_problems(declared, value, run, at)
    problems += _stage_problems(declared, value, run, where, paper=paper)
    problems += mechanism_problems(declared, value, run, at, preflight=preflight)  # kit.cli_mechanisms
    if "report_to" in declared:  # the trainers' Tracker refuses with the same line, but only inside the kernel
        from kit.tracking import report_to_problem

        problem = report_to_problem(value.get("report_to"))
        if problem:
            problems.append(f"{problem}{at}")
    if local_refs:  # offline: a folder or reference check, before preflight_endpoints probes any server
        problems += checkpoint_problems(declared, params, where, written=written)
    if len(problems) == 1:
        raise ParameterError(problems[0])
    if problems:
        raise ParameterError(f"{len(problems)} problems with the parameters{at}:\n" +
                             "\n".join(f"  - {p}" for p in problems))


def _role_problems(declared: dict[str, Param], params: dict[str, Any], value: dict[str, Any], run: ResolvedRun,
                   at: str, *, paper: bool) -> list[str]:
    """Step of :func:`check_combinations`: a model without its endpoint, a paper profile's needs
    (:data:`PAPER_NEEDS`), a judge / summarizer switch without its endpoint and model (:data:`NEEDS`), and
    the evaluated policy's kind."""
    problems: list[str] = []
    profile = run.given
    for name in sorted(params):
        if name.endswith("_model") and value.get(name) and (name[: -len("model")] + "endpoint") in declared:
            ep = name[: -len("model")] + "endpoint"
            if not value.get(ep):
                problems.append(f"{name}={value[name]!r}{at} is set but {ep} is empty: name the endpoint that serves it")
    if paper:
        missing = [f"{n} ({why})" for n, why in PAPER_NEEDS.items() if n in declared and not value.get(n)]
        if missing:
            problems.append(f"the {profile} profile{at} needs " + ", ".join(missing))
    for (switch, on), needed in NEEDS.items():
        # None: the profile's recipe value (eval.judge / eval.image_judge / eval.summarizer; kit.eval.judge_factory)
        by_profile = paper and switch in declared and value.get(switch) is None and _recipe_switch(run, switch) == on
        if value.get(switch) == on or by_profile:
            missing = [n for n in needed if n in declared and not value.get(n)
                       and not (n.endswith("_model") and recipe_model(run, n[: -len("model")]))]
            if missing and by_profile:
                alt, why = PAPER_SWITCHES[switch], _recipe_why(run, switch)
                problems.append(f"the {profile} profile{at} uses {switch}={on!r} ({why}) and needs "
                                f"{' and '.join(missing)}; or pass {switch}={alt!r} for the labelled fallback")
            elif missing:
                problems.append(f"{switch}={on!r}{at} needs {' and '.join(missing)}")
    if "policy_kind" in declared:
        from kit.policy.factory import eval_policy_kind

        try:
            eval_policy_kind(value.get("policy_kind"), run, value.get("model") or "", value.get("endpoint") or "")
        except ValueError as e:
            problems.append(f"{e}{at}")
    return problems


def _backend_problems(declared: dict[str, Param], value: dict[str, Any], run: ResolvedRun, at: str) -> list[str]:
    """Step of :func:`check_combinations`: ``backend="verl"``, an endpoint its offline switch never calls, and
    the web a notebook searches (a live web needs its key)."""
    problems: list[str] = []
    if value.get("backend") == "verl":  # notebook 05 trains in process; verl has its own launcher
        problems.append(f"backend='verl'{at} is not run by a notebook: launch verl with scripts/launch_verl.sh "
                        "(SCHEDULE=NAME; `python -m kit.cli recipe NAME --verl` prints its overrides), or "
                        "leave backend 'inprocess'")
    for switch, offline in PAPER_SWITCHES.items():  # an endpoint the chosen offline judge would never call
        ep = f"{switch}_endpoint"
        if value.get(switch) == offline and ep in declared and str(value.get(ep) or "").strip():
            problems.append(f"{ep}={value[ep]!r}{at} is set but {switch}={offline!r} does not use it (it runs "
                            f"offline): drop {ep}, or pass {switch}={_ONLINE[switch]!r} to use the endpoint")
    web = web_backend_param(declared)
    if web is not None:  # a live web with no key stops here, not inside the kernel (kit.data.synthesis_web)
        from kit.data.synthesis_web import resolve_web_backend

        try:
            resolve_web_backend(run.run_profile, value.get(web[0]), parameter=web[0], key=web[1])
        except ParameterError as e:
            problems.append(f"{e}{at}")
    return problems


def _stage_problems(declared: dict[str, Param], value: dict[str, Any], run: ResolvedRun, where: str, *,
                    paper: bool) -> list[str]:
    """Step of :func:`check_combinations`: notebook 05's ``stages`` resolve, and a paper run's OPD stage has
    its ``teacher_model``."""
    if "stages" not in declared:
        return []
    at = f" of {where}" if where else ""
    problems: list[str] = []
    try:
        schedule = resolved_stages(value.get("stages"), run, preflight=run.preflight, where=where)
    except ParameterError as e:
        problems.append(str(e))
        schedule = []
    if paper and "teacher_model" in declared and not value.get("teacher_model") and \
            any(s.kind == "opd" for s in schedule):
        shown = value.get("stages") or run.value("rl_run.stages")
        problems.append(f"the {run.given} profile{at} runs an OPD warmup stage (stages={shown!r}), which needs "
                        "teacher_model (a stronger checkpoint); name it, or pass stages without 'opd'")
    return problems


def web_backend_param(declared: dict[str, Param]) -> tuple[str, str] | None:
    """``(parameter, recipe key)`` of the web a notebook searches, or None: notebook 05's ``web_backend``
    (``rl_run.web_backend``, it declares ``stages``), notebook 02's ``web_backend`` (``data.web_backend``),
    notebooks 01/06's ``backend`` when it offers ``"serper"`` (``eval.web_backend``)."""
    if "web_backend" in declared:
        return "web_backend", "rl_run.web_backend" if "stages" in declared else "data.web_backend"
    b = declared.get("backend")
    if b is not None and "serper" in (b.choices or ()):
        return "backend", "eval.web_backend"
    return None


_ONLINE = {"judge": "llm", "image_judge": "vlm", "summarizer": "llm"}  # the switch value that calls <switch>_endpoint


def resolved_run(declared: dict[str, Param], params: dict[str, Any], profile: str | ResolvedRun = "smoke", *,
                 preflight: bool = False) -> ResolvedRun:
    """The run of a notebook resolved once (:class:`kit.profiles.ResolvedRun`): its profile (alias resolved), the
    typed overrides ``params`` and the endpoints they name (:func:`named_endpoints`), for every later check.

    Raises:
        ValueError: an unknown profile.
    """
    import dataclasses

    run = resolve_run(profile, preflight=preflight, overrides=params)
    return dataclasses.replace(run, endpoints=tuple(named_endpoints(declared, params, profile=run)))
