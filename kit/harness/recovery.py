"""Recovery rules of WeAgent-Harness (§3.2, Table 5), each a small, separately tested unit.

* :func:`repair_call` — argument repair: only unambiguous tool-name and parameter aliases,
  scalar-to-list conversion, an integral float for an integer, ignored extra fields and schema defaults
  of absent optional parameters; never infers a missing value. Anything unclear raises
  :class:`ToolError`, which becomes a structured error observation. Serialization repairs happen
  before, in :mod:`kit.harness.parsing`; a truncated call never reaches this function (the full list
  of allowed repairs: docs/contracts.md "Turn grammar").
* :class:`DuplicateSuppressor` — a call with the same tool and canonical arguments as the immediately
  preceding executed call is not executed.
* :class:`LoopGuard` — after ``repeats`` consecutive identical invalid calls, a loop-guard observation.
* :func:`require_exact` — without self-recovery (``HarnessConfig.self_recovery=False``, the vanilla-GSPO
  rollout of WeAgent Table 3) a call that needed any serialization or argument repair is refused.

The guards are side-effect-free on the episode: they return a frozen :class:`GuardDecision` (``allow`` /
``block`` / ``warn``, with the event code and the message the model sees). The pre-call rules apply them as the
kit's built-in hooks (:class:`kit.harness.hooks.ArgumentRepairHook`, :class:`kit.harness.hooks.DuplicateHook`),
first in the order of every harness's hooks; the loop applies the loop guard to turns without an action.
The map of every rule to its config field and events: :data:`kit.harness.rules.RULES`.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import fastjsonschema

from kit.harness.errors import ToolError
from kit.harness.events import EventType


@dataclass(frozen=True)
class GuardDecision:
    """What a recovery guard decided about one call or turn.

    ``action``: ``allow`` (go on), ``block`` (do not execute; ``message`` is the corrective observation) or
    ``warn`` (the call/turn is already refused; prefix ``message`` to its error observation). ``code`` is
    the event the loop records (None for ``allow``)."""

    action: Literal["allow", "block", "warn"]
    code: EventType | None = None
    message: str = ""

    @property
    def allowed(self) -> bool:
        return self.action == "allow"

    @property
    def event(self) -> EventType:
        """The event a ``block`` / ``warn`` decision records.

        Raises:
            ValueError: an ``allow`` decision (it records nothing)."""
        if self.code is None:
            raise ValueError("an allow decision records no event")
        return self.code


ALLOW = GuardDecision("allow")

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator


@dataclass
class Repaired:
    """A call after repair: canonical tool name, validated arguments (defaults filled), repairs."""

    name: str
    arguments: dict[str, Any]
    repairs: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=4096)
def _norm_name(s: str) -> str:
    s = unicodedata.normalize("NFKC", s).strip().lower()
    s = re.sub(r"^(functions?|tools?)[\.:]", "", s)  # "functions.web_search" (OpenAI-style prefixes)
    return re.sub(r"[\s\-\.]+", "_", s)


def resolve_tool_name(name: str, specs: dict[str, Any]) -> tuple[str, list[str]]:
    """Map a model-written tool name to a registered tool.

    Exact names win; then case/separator normalization; then each tool's declared aliases. A name that
    matches no tool, or aliases of two tools, raises ``ToolError("unknown_tool")``.
    """
    if name in specs:
        return name, []
    n = _norm_name(name)
    hits = {t for t, spec in specs.items() if n == _norm_name(t) or n in _alias_set(spec)}
    if len(hits) == 1:
        (t,) = hits
        return t, [f"tool_name:{name}->{t}"]
    if len(hits) > 1:
        raise ToolError("unknown_tool", f"tool name {name[:100]!r} is ambiguous between {sorted(hits)}", available=sorted(specs))
    raise ToolError("unknown_tool", f"unknown tool {name[:100]!r}", available=sorted(specs))


def _alias_set(spec) -> frozenset[str]:
    cached = spec.__dict__.get("_alias_set")
    if cached is None:
        cached = spec.__dict__["_alias_set"] = frozenset(_norm_name(a) for a in spec.aliases)
    return cached


def _param_aliases(spec) -> dict[str, str]:
    cached = spec.__dict__.get("_param_alias_map")
    if cached is None:
        cached = {_norm_name(a): p for p, aliases in spec.param_aliases.items() for a in aliases}
        cached.update({_norm_name(p): p for p in spec.parameters["properties"]})
        spec.__dict__["_param_alias_map"] = cached
    return cached


def _validator(spec) -> Draft202012Validator:
    cached = spec.__dict__.get("_validator")
    if cached is None:
        # imported on the first invalid call only: jsonschema's format checkers cost seconds at import
        from jsonschema import Draft202012Validator

        cached = spec.__dict__["_validator"] = Draft202012Validator(spec.parameters)
    return cached


def _fast_check(spec):
    # fastjsonschema compiles the schema to Python: ~20x faster than jsonschema for the common valid
    # case; jsonschema then explains failures with readable messages.
    cached = spec.__dict__.get("_fast_check")
    if cached is None:
        cached = spec.__dict__["_fast_check"] = fastjsonschema.compile(spec.parameters)
    return cached


def _type_error_message(err) -> str:
    if err.context:  # anyOf (a string or a list): the error of the branch of the value's own type
        err = max((c for c in err.context if c.validator != "type"), default=err.context[0],
                  key=lambda c: len(c.absolute_path))
    path = ".".join(str(p) for p in err.absolute_path) or "arguments"
    # jsonschema's own messages repeat the whole value (a 400k-character query stays 400k long)
    if err.validator in ("maxLength", "minLength") and isinstance(err.instance, str):
        word = "over" if err.validator == "maxLength" else "under"
        return f"{path}: {len(err.instance)} characters is {word} the {err.validator_value}-character limit"
    if err.validator in ("maxItems", "minItems") and isinstance(err.instance, list):
        word = "over" if err.validator == "maxItems" else "under"
        return f"{path}: {len(err.instance)} items is {word} the {err.validator_value}-item limit"
    return f"{path}: {err.message[:300]}"


def repair_call(name: str, arguments: dict[str, Any], specs: dict[str, Any]) -> Repaired:
    """Repair and validate one decoded call against the tool's JSON schema (Table 4 limits).

    Raises:
        ToolError: ``unknown_tool``, ``ambiguous_arguments`` (an alias and its parameter both given),
            ``missing_argument`` (a required value absent), ``bad_arguments`` (wrong type or out of the
            Table 4 range).
    """
    tool, repairs = resolve_tool_name(name, specs)
    spec = specs[tool]
    props: dict[str, Any] = spec.parameters["properties"]
    args: dict[str, Any] = {}
    alias_to_param = _param_aliases(spec)
    for key, value in arguments.items():
        if key in props:
            target = key
        else:
            alias = alias_to_param.get(_norm_name(str(key)))
            if alias is None:
                repairs.append(f"ignored_field:{key}")
                continue
            target = alias
            repairs.append(f"param_alias:{key}->{target}")
        if target in args:
            raise ToolError("ambiguous_arguments", f"{target!r} was given more than once (as {key!r} too); give it once",
                            tool=tool)
        args[target] = value
    # scalar -> list where the schema only takes lists
    for param, schema in props.items():
        if param in args and schema.get("type") == "array" and isinstance(args[param], (str, int, float)) \
                and not isinstance(args[param], bool):
            args[param] = [args[param]]
            repairs.append(f"scalar_to_list:{param}")
    for param, schema in props.items():
        v = args.get(param)
        if schema.get("type") == "integer" and isinstance(v, float) and v.is_integer():
            args[param] = int(v)
            repairs.append(f"integral_float:{param}")
    missing = [p for p in spec.parameters.get("required", []) if p not in args]
    if missing:
        raise ToolError("missing_argument", f"{tool} needs {', '.join(repr(m) for m in missing)}", tool=tool,
                        schema=spec.parameters)
    try:
        _fast_check(spec)(dict(args))  # validate a copy: fastjsonschema fills defaults in place
        errors = []
    except fastjsonschema.JsonSchemaException:
        errors = sorted(_validator(spec).iter_errors(args), key=lambda e: list(e.absolute_path))
        if not errors:  # the two validators disagree only on exotic input: trust the stricter answer
            raise ToolError("bad_arguments", "arguments do not match the tool schema", tool=tool,
                            schema=spec.parameters) from None
    if errors:
        raise ToolError("bad_arguments", "; ".join(_type_error_message(e) for e in errors[:3]), tool=tool,
                        schema=spec.parameters)
    for param, schema in props.items():
        if param not in args and "default" in schema:
            args[param] = schema["default"]
    return Repaired(tool, args, repairs)


#: Repairs that are text hygiene, not a correction of what the model wrote: kept without self-recovery
#: (a lone surrogate is valid JSON escaping; the kit only makes it storable as UTF-8).
HYGIENE_REPAIRS = frozenset({"surrogates_replaced"})


def require_exact(repairs: list[str]) -> None:
    """Refuse a call that needed repairs (the vanilla rollout: no self-recovery, WeAgent Table 3).

    Args:
        repairs: serialization repairs (``RawCall.repairs``) plus argument repairs (``Repaired.repairs``).
    Raises:
        ToolError: ``repair_required``, naming the repairs, when any besides :data:`HYGIENE_REPAIRS` is listed.
    """
    needed = [r for r in repairs if r not in HYGIENE_REPAIRS]
    if needed:
        raise ToolError("repair_required", f"the call is not exact as written and self-recovery is off; it would "
                                           f"need: {', '.join(needed)}")


def canonical_arguments(args: dict[str, Any]) -> str:
    """Canonical JSON of arguments: sorted keys, scalar queries/images as one-element lists,
    whitespace-normalized strings. Two calls are duplicates iff tool and canonical form match."""

    def norm(v):
        if isinstance(v, str):
            return " ".join(v.split())
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v

    out = {}
    for k, v in args.items():
        v = norm(v)
        if k in ("query", "image", "urls") and not isinstance(v, list):
            v = [v]
        out[k] = v
    return json.dumps(out, sort_keys=True, ensure_ascii=False)


class DuplicateSuppressor:
    """Table 5 "Duplicate suppression": compares with the immediately preceding executed call only."""

    def __init__(self) -> None:
        self._last: tuple[str, str] | None = None

    def check(self, tool: str, args: dict[str, Any]) -> GuardDecision:
        """``block`` (:data:`DUPLICATE_MESSAGE`) when ``(tool, args)`` repeats the preceding executed call."""
        if self._last == (tool, canonical_arguments(args)):
            return GuardDecision("block", EventType.DUPLICATE_SUPPRESSED, DUPLICATE_MESSAGE.format(tool=tool))
        return ALLOW

    def executed(self, tool: str, args: dict[str, Any]) -> None:
        self._last = (tool, canonical_arguments(args))


class LoopGuard:
    """Table 5 "Repeated format errors": fires on the ``repeats``-th consecutive identical invalid call.

    An invalid call's identity is its raw name plus whitespace-normalized raw arguments; any valid
    call (or a different invalid one) resets the streak.
    """

    def __init__(self, repeats: int = 2) -> None:
        self.repeats = repeats
        self._key: str | None = None
        self._count = 0

    def invalid(self, name: str, raw_arguments: str, *, no_action: bool = False) -> GuardDecision:
        """Record an invalid call (or, with ``no_action``, a turn without an action); ``warn`` with the
        loop-guard message (:data:`LOOP_GUARD_MESSAGE` / :data:`NO_ACTION_LOOP_MESSAGE`) on the
        ``repeats``-th identical one in a row, else ``allow``."""
        key = name.strip() + "\x00" + " ".join((raw_arguments or "").split())
        if key == self._key:
            self._count += 1
        else:
            self._key, self._count = key, 1
        if self._count < self.repeats:
            return ALLOW
        return GuardDecision("warn", EventType.LOOP_GUARD,
                        (NO_ACTION_LOOP_MESSAGE if no_action else LOOP_GUARD_MESSAGE).format(n=self.repeats))

    def valid(self) -> None:
        self._key, self._count = None, 0


LOOP_GUARD_MESSAGE = (
    "Loop guard: you have sent the same invalid tool call {n} times in a row. Do not repeat it. "
    "Change the call (check the tool name and the argument schema) or answer now with the evidence you "
    "have, inside <response>...</response>."
)
NO_ACTION_LOOP_MESSAGE = (
    "Loop guard: your last {n} turns contained neither a tool call nor a final answer. Call one tool, or "
    "answer now with the evidence you have inside <response>...</response>."
)
DUPLICATE_MESSAGE = (
    "Duplicate call not executed: it repeats the immediately preceding call to {tool} with the same "
    "arguments, whose result is above. Use different arguments or a different tool, or answer."
)
