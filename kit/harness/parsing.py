"""Parse one assistant turn into its single action (WeAgent Table 6 grammar, §3.2, Table 5).

Grammar: a short ``<think>...</think>`` (or reasoning ending in a lone ``</think>`` when the chat
template of a thinking model opened the block), then EXACTLY ONE of a single tool call (function
calling, or ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in text for in-process Qwen
models) or a final answer ``<response>...</response>``. ``<IMG: filename>`` inside the response cites
a registered image. Every departure is a :class:`Departure` on the :class:`ParsedTurn` (the loop
records each as an event of the same name; the format terms of :mod:`kit.rl.rewards` read them):

=============================  =====================================================================
departure                      decision
=============================  =====================================================================
``extra_actions_ignored``      more than one action: the first tool call is the action, the rest
                               (more calls, a response after a call) is not executed
``multiple_responses``         the LAST complete ``<response>`` is the answer (else the last one); a
                               ``<response>`` inside an open one ends it unclosed (a second response)
``response_unclosed``          ``<response>`` without ``</response>``: kept as the answer, untrainable
``tool_call_after_response``   a call (text, inside the response, or structured) after ``<response>``:
                               never executed; inside an answer only a ``<tool_call>`` opening a JSON
                               object is a call (else answer text), read no further than ``</response>``
``text_outside_grammar``       non-blank text outside the blocks, or a stray closing tag
``think_missing``              no reasoning block
``think_unclosed``             ``<think>`` never closed: everything after it is reasoning, no action
``multiple_think``             more than one reasoning block (the first is ``think``)
=============================  =====================================================================

``think_opened_by_template`` is a note, not a departure: the opening tag is in the prompt. A lone
``</think>`` inside a ``<response>`` or ``<tool_call>`` is text of that block, not the end of reasoning.

Tool calls are parsed by JSON structure (:mod:`kit.harness.grammar`): a tag inside a JSON string is
text. Allowed serialization repairs (each named in ``RawCall.repairs``), all with a single reading:
``code_fence_removed``; ``closing_brackets_added:<brackets>`` (final ``}``/``]`` missing after a
complete value, in a text call only); ``json_serialization_repaired`` (json-repair for single quotes,
trailing commas, Python literals, unquoted keys, a missing comma) only when the repaired object holds
exactly the keys and values written, in order, and the text is at most :data:`MAX_REPAIR_CHARS`;
``arguments_string_decoded`` (double-encoded arguments); ``empty_arguments`` (an arguments string
``""`` read as no arguments); ``surrogates_replaced`` (a lone UTF-16 surrogate became U+FFFD);
``ignored_call_fields:<fields>``.

Errors (never executed): ``truncated`` — cut at the end of the output inside a string, key or number,
after a key, colon or comma, or at the length limit before its end; an arguments string (structured
call, or double-encoded) that is not a complete JSON object. ``non_json`` — an unquoted value (a bare
word that is neither a JSON number nor ``true``/``false``/``null`` or their Python spellings; ``tru``
or ``NaN`` included), a key without its colon (e.g. an unescaped quote), nesting deeper than
:data:`kit.harness.grammar.MAX_DEPTH` levels, a repair that would change what was written.
``duplicate_key`` — a key written twice in one object. ``trailing_text``, ``missing_name``,
``bad_arguments`` as named.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import json_repair

from kit.harness.events import EventType
from kit.harness.grammar import LITERALS, MAX_DEPTH, Block, TurnTags, cut_reason, scan_json, segment, turn_tags
from kit.types import ToolCall

_CITE_RE = re.compile(r"<IMG:\s*([^>\s][^>]*?)\s*>")
MAX_CALL_CHARS = 200_000  # a tool call longer than this is refused before decoding
MAX_REPAIR_CHARS = 50_000  # json-repair is superlinear on some inputs: longer text must be strict JSON
# A decimal number as JSON writes it, or with a sign "+", a bare leading or trailing point (one reading
# each); leading zeros (octal?), "_" separators, hex, NaN and Infinity are refused.
_NUMBER = re.compile(r"[-+]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*(?:```)?$", re.S | re.I)
DEPARTURES = (EventType.EXTRA_ACTIONS_IGNORED, EventType.MULTIPLE_RESPONSES, EventType.RESPONSE_UNCLOSED,
              EventType.TOOL_CALL_AFTER_RESPONSE, EventType.TEXT_OUTSIDE_GRAMMAR, EventType.THINK_MISSING,
              EventType.THINK_UNCLOSED, EventType.MULTIPLE_THINK)


@dataclass
class RawCall:
    """A tool call before repair: ``arguments`` is a dict when decoded, else ``None`` with ``error``.

    ``error`` is a structured-error code (``non_json``, ``trailing_text``, ``missing_name``,
    ``bad_arguments``, ``truncated``, ``duplicate_key``) when the call's serialization cannot be trusted; ``repairs``
    lists serialization repairs that were applied.
    """

    id: str
    name: str
    arguments: dict | None
    raw: str
    source: str  # "text" or "structured"
    position: int  # character offset in the assistant text (-1 for structured calls)
    error: str | None = None
    message: str = ""
    repairs: list[str] = field(default_factory=list)


@dataclass
class Departure:
    """One departure from the Table 6 turn grammar: ``code`` (one of :data:`DEPARTURES`), ``detail``."""

    code: EventType
    detail: dict = field(default_factory=dict)


@dataclass
class ParsedTurn:
    """The action of one assistant turn.

    ``response`` is the text inside the chosen ``<response>`` (``response_complete`` False when its
    closing tag is missing); ``calls`` are the tool calls in order before any ``<response>``;
    ``calls_after_response`` were written after ``<response>`` and must not be executed; ``think`` is
    the first reasoning block (``think_implicit`` when the chat template opened it); ``departures``
    and ``notes`` as in the module table.
    """

    think: str | None = None
    think_implicit: bool = False
    response: str | None = None
    response_complete: bool = False
    response_position: int = -1
    calls: list[RawCall] = field(default_factory=list)
    calls_after_response: list[RawCall] = field(default_factory=list)
    departures: list[Departure] = field(default_factory=list)
    notes: list[EventType] = field(default_factory=list)

    @property
    def has_action(self) -> bool:
        return self.response is not None or bool(self.calls)

    def departure_codes(self) -> list[str]:
        return [d.code for d in self.departures]


def decode_json_object(text: str, *, at_eof: bool = False, length_cut: bool = False,
                       complete: bool = False, tags: TurnTags | None = None) -> tuple[dict | None, str | None, str, list[str]]:
    """Decode a JSON object written by a model, by structure.

    Args:
        at_eof: the text ran to the end of the model's output without a closing tag (a stop sequence
            or the length limit may have cut it).
        length_cut: the output hit the length limit (``finish_reason == "length"``).
        complete: the text is a whole arguments string (a structured call's, or double-encoded), ended
            by the server or by its quotes: an object that is not complete is ``truncated``, never
            completed.
        tags: the turn grammar's tags (:func:`kit.harness.grammar.turn_tags`; default Table 6's).

    Returns ``(obj, error_code, message, repairs)``. Strict JSON is accepted as is. An incomplete
    object is ``truncated`` (see :func:`kit.harness.grammar.cut_reason`) unless its only missing part
    is the final closing brackets. A complete object followed by more text is ``trailing_text``; an
    unquoted value or a key without its colon is ``non_json``; a key written twice in one object is
    ``duplicate_key``. Serialization slips go to json-repair, whose result is kept only when it holds
    exactly the keys and values written (else ``non_json``).
    """
    s = text.strip()
    repairs: list[str] = []
    if len(s) > MAX_CALL_CHARS:
        return None, "bad_arguments", f"tool call of {len(s)} characters exceeds the {MAX_CALL_CHARS}-character limit", repairs
    if s.startswith("```"):
        m = _FENCE_RE.match(s)
        assert m is not None  # any text starting with ``` matches
        s = m.group(1).strip()
        repairs.append("code_fence_removed")
    if not s:
        return None, "non_json", "empty tool call body", repairs
    if s[0] != "{":
        if s[0] == "[":
            return None, "non_json", "expected a JSON object, got a list", repairs
        try:
            obj = json.loads(s)
            return None, "non_json", f"expected a JSON object, got {type(obj).__name__}", repairs
        except (ValueError, RecursionError):
            return None, "non_json", f"tool call is not a JSON object: {s[:80]!r}", repairs
    scan = scan_json(s, 0, tags=tags)
    if scan.error:
        return None, "non_json", _SCAN_ERRORS[scan.error].format(at=scan.end), repairs
    if scan.complete:
        rest = s[scan.end:].strip()
        if rest:
            return None, "trailing_text", f"unexpected text after the JSON object: {rest[:80]!r}", repairs
    else:
        if complete:
            return None, "truncated", ("the arguments string ends before its JSON object is complete (cut off); "
                                       "it is not completed"), repairs
        why = cut_reason(scan, at_eof=at_eof, length_cut=length_cut)
        if why is not None:
            return None, why[0], why[1], repairs
    bad = _token_problem(scan.scalars)
    if bad is not None:
        return None, bad[0], bad[1], repairs
    if not scan.complete:
        s = s[:scan.end].rstrip() + "".join(reversed(scan.closers))
        repairs.append("closing_brackets_added:" + "".join(reversed(scan.closers)))
    try:
        obj = json.loads(s)
        if isinstance(obj, dict):
            return _no_surrogates(obj, s, repairs), None, "", repairs
        return None, "non_json", f"expected a JSON object, got {type(obj).__name__}", repairs
    except json.JSONDecodeError:
        pass
    except RecursionError:
        return None, "non_json", "JSON nested too deeply", repairs
    return _repaired_object(s, tags, repairs)


def _repaired_object(s: str, tags: TurnTags | None,
                     repairs: list[str]) -> tuple[dict | None, str | None, str, list[str]]:
    """Decode ``s`` (not strict JSON) with json-repair, kept only if it holds exactly the keys and values written."""
    if len(s) > MAX_REPAIR_CHARS:
        return None, "non_json", (f"not strict JSON, and a {len(s)}-character call is too long to repair (limit "
                                  f"{MAX_REPAIR_CHARS}): write strict JSON"), repairs
    try:
        obj = json_repair.loads(s)
    except (Exception, RecursionError) as e:  # json_repair is defensive, but never let it escape
        return None, "non_json", f"cannot decode JSON: {type(e).__name__}", repairs
    if not isinstance(obj, dict) or not obj:
        return None, "non_json", f"cannot decode JSON object from {s[:80]!r}", repairs
    try:
        same = _scalars_of(obj) == _scalars_written(scan_json(s, 0, tags=tags).scalars)
    except RecursionError:
        return None, "non_json", "JSON nested too deeply", repairs
    if not same:
        return None, "non_json", ("cannot decode JSON: repairing it would change the keys or values written "
                                  f"(e.g. an unescaped quote or a comment) in {s[:80]!r}"), repairs
    repairs.append("json_serialization_repaired")
    try:
        return _no_surrogates(obj, s, repairs), None, "", repairs
    except RecursionError:
        return None, "non_json", "JSON nested too deeply", repairs[:-1]


_SCAN_ERRORS = {
    "mismatched_bracket": "cannot decode JSON: mismatched bracket at offset {at}",
    "missing_colon": ("cannot decode JSON: a key is not followed by ':' at offset {at} (an unescaped quote, a "
                      "comment or a missing value?); repairing it would change what was written"),
    "too_deep": f"cannot decode JSON: nested more than {MAX_DEPTH} levels deep (at offset {{at}})",
}


def _token_problem(tokens: list[tuple[str, str]]) -> tuple[str, str] | None:
    """``(code, message)`` for the first token with two readings: an unquoted value that is no JSON
    number or literal (``non_json``), or a key written twice in one object (``duplicate_key``); None
    when there is none."""
    keys: list[set | None] = []  # per open bracket: the keys seen (None for a list)
    for kind, raw in tokens:
        if kind == "o":
            if raw in "{[":
                keys.append(set() if raw == "{" else None)
            elif keys:
                keys.pop()
        elif kind == "w":
            if raw.lower() not in LITERALS and not _NUMBER.fullmatch(raw):
                return "non_json", (f"unquoted value {raw[:40]!r}: a string must be quoted, a number or "
                                    "true/false/null written in full")
        elif kind in ("k", "kw") and keys and keys[-1] is not None:
            k = _unescape(raw) if kind == "k" else raw
            if k in keys[-1]:
                return "duplicate_key", f"key {k[:40]!r} is written twice in one object (two readings)"
            keys[-1].add(k)
    return None


def _scalars_of(obj) -> list[tuple[str, object]]:
    """Brackets, keys and scalar values of decoded JSON, in order, canonical (see
    :func:`_scalars_written`)."""
    out: list[tuple[str, object]] = []
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.append(("o", "}"))
            for k, x in reversed(list(v.items())):
                stack.append(x)
                stack.append(("key", k))
            out.append(("o", "{"))
        elif isinstance(v, list):
            stack.append(("o", "]"))
            stack.extend(reversed(v))
            out.append(("o", "["))
        elif isinstance(v, tuple) and len(v) == 2 and v[0] == "key":
            out.append(("s", v[1]))
        elif isinstance(v, tuple) and len(v) == 2 and v[0] == "o":
            out.append(v)
        else:
            out.append(_canon(v))
    return out


def _canon(v) -> tuple[str, object]:
    if isinstance(v, bool) or v is None:
        return ("l", v)
    if isinstance(v, (int, float)):
        return ("n", float(v))
    return ("s", str(v))


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.S)
_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(raw: str) -> str:
    """A quoted string's inner text with JSON escapes (and ``\\'``) decoded; unknown escapes kept."""
    def one(m: re.Match) -> str:
        e = m.group(1)
        if len(e) == 5:
            return chr(int(e[1:], 16))
        return _SIMPLE.get(e, e if e in "\"\\/'" else "\\" + e)
    return _ESCAPE.sub(one, raw)


def _scalars_written(tokens: list[tuple[str, str]]) -> list[tuple[str, object]]:
    """The scanner's tokens as decoded scalars: brackets as written, strings and quoted keys unescaped,
    unquoted keys as strings, literals and numbers by value (:func:`_token_problem` has refused any
    other bare value)."""
    out: list[tuple[str, object]] = []
    for kind, raw in tokens:
        if kind == "o":
            out.append(("o", raw))
        elif kind in ("s", "k"):
            out.append(("s", _unescape(raw)))
        elif kind == "kw":
            out.append(("s", raw))
        elif raw.lower() in LITERALS:
            out.append(("l", LITERALS[raw.lower()]))
        else:
            try:
                out.append(("n", float(raw)))
            except ValueError:
                out.append(("s", raw))
    return out


_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")


def clean_text(s: str) -> str:
    """Replace lone UTF-16 surrogates (which cannot be encoded as UTF-8, so would make the record
    unserializable) with U+FFFD; a valid surrogate pair is joined into its character."""
    if not isinstance(s, str):
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8", "replace").decode("utf-8")


def scrub(obj):
    """:func:`clean_text` applied to every key and string of nested dicts, lists and tuples."""
    if isinstance(obj, str):
        return clean_text(obj)
    if isinstance(obj, dict):
        return {scrub(k): scrub(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v) for v in obj]
    return obj


def _no_surrogates(obj, source: str, repairs: list[str]):
    """Decoded JSON with lone UTF-16 surrogates (raw, or from ``"\\ud800"`` escapes) replaced by
    U+FFFD in every key and string, so names, arguments and the events that quote them can always be
    recorded as UTF-8; ``surrogates_replaced`` is appended to ``repairs`` when one was. ``source`` is
    the JSON text: without a surrogate in it, nothing is walked (a valid pair decodes to its character
    and is no repair)."""
    if not _SURROGATE.search(source):
        return obj
    clean = scrub(obj)
    if clean != obj:
        repairs.append("surrogates_replaced")
    return clean


def _decode_text_call(block: Block, idx: int, length_cut: bool, tags: TurnTags | None = None) -> RawCall:
    body, position = block.body, block.start
    obj, err, msg, repairs = decode_json_object(body, at_eof=block.at_eof, length_cut=length_cut, tags=tags)
    call_id = f"call_text_{idx}"
    if err:
        return RawCall(call_id, "", None, body, "text", position, err, msg, repairs)
    assert obj is not None  # decode_json_object returns an object whenever err is None
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return RawCall(call_id, "", None, body, "text", position, "missing_name",
                       'tool call needs a "name" string', repairs)
    if "arguments" in obj and "parameters" in obj and obj["arguments"] != obj["parameters"]:
        # two argument objects that disagree: running either would be a guess (both readings named)
        a_text, p_text = (json.dumps(obj[k], ensure_ascii=False, default=str)[:200] for k in ("arguments", "parameters"))
        return RawCall(call_id, name, None, body, "text", position, "bad_arguments",
                       f'the call has two different argument objects: "arguments" {a_text} and "parameters" {p_text}; '
                       "give one", repairs)
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str) and not args.strip():  # "" : no arguments, as for a structured call
        args, repairs = {}, repairs + ["empty_arguments"]
    if isinstance(args, str):  # some models double-encode the arguments
        a, err, msg, r2 = decode_json_object(args, complete=True)
        if err:
            return RawCall(call_id, name, None, body, "text", position, err, f"arguments: {msg}", repairs + r2)
        args, repairs = a, repairs + r2 + ["arguments_string_decoded"]
    if not isinstance(args, dict):
        return RawCall(call_id, name, None, body, "text", position, "bad_arguments",
                       f'"arguments" must be a JSON object, got {type(args).__name__}', repairs)
    extra = sorted(set(obj) - {"name", "arguments", "parameters"})
    if extra:
        repairs.append("ignored_call_fields:" + ",".join(extra))
    return RawCall(call_id, name, args, body, "text", position, None, "", repairs)


def decode_structured_call(call: ToolCall, truncated: bool = False) -> RawCall:
    """Decode a function-calling tool call (arguments as a JSON string).

    The server's parser ended the arguments string, so one that is not a complete JSON object is
    ``truncated`` and never completed (with or without the length limit); ``""`` is no arguments
    (``empty_arguments``) unless ``truncated`` (the turn hit the length limit); a blank name is
    ``missing_name``. Otherwise the same rules as a text call (:func:`decode_json_object`).
    """
    raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    if not isinstance(call.name, str) or not call.name.strip():
        return RawCall(call.id, "", None, raw, "structured", -1, "missing_name", "tool call needs a non-empty name")
    if raw.strip() == "":
        if truncated:
            return RawCall(call.id, call.name, None, raw, "structured", -1, "truncated",
                           "the tool call's arguments were cut off by the response length limit")
        return RawCall(call.id, call.name, {}, raw, "structured", -1, repairs=["empty_arguments"])
    obj, err, msg, repairs = decode_json_object(raw, at_eof=True, length_cut=truncated, complete=True)
    if err:
        return RawCall(call.id, call.name, None, raw, "structured", -1, err, msg, repairs)
    return RawCall(call.id, call.name, obj, raw, "structured", -1, None, "", repairs)


def _label(c: RawCall) -> str:
    return c.name or c.raw[:80]


def parse_turn(text: str, structured: list[ToolCall] | None = None, *, truncated: bool = False,
               answer_tag: str = "response") -> ParsedTurn:
    """Split assistant ``text`` (and structured ``tool_calls``) into think / calls / response and list
    every departure from the Table 6 grammar (module table).

    Args:
        truncated: the turn ended at the length limit (``finish_reason == "length"``): a tool call that
            runs to the end of the text without being structurally complete is ``truncated``.
        answer_tag: the final-answer tag: ``"response"`` (WeAgent Table 6) or ``"answer"``
            (POINTS-Seeker §3.2.2, :data:`kit.harness.prompts.PROTOCOLS`); ``ParsedTurn.response`` holds
            that block's text and the departures keep their names (``response_unclosed`` for ``<answer>``).

    Structured calls come after the text content in the function-calling protocol, so when a
    ``<response>`` is present they count as written after it. Never raises on any input (a bad
    ``answer_tag`` is a ValueError: a caller's error, not the model's).
    """
    out = ParsedTurn()
    tags = turn_tags(answer_tag)
    blocks = segment(text or "", answer_tag)
    dep = out.departures
    thinks = [b for b in blocks if b.kind == "think"]
    if thinks:
        out.think, out.think_implicit = thinks[0].body.strip(), thinks[0].implicit
        if thinks[0].implicit:
            out.notes.append(EventType.THINK_OPENED_BY_TEMPLATE)
        if not thinks[-1].closed:
            dep.append(Departure(EventType.THINK_UNCLOSED, {"chars": len(thinks[-1].body)}))
        if len(thinks) > 1:
            dep.append(Departure(EventType.MULTIPLE_THINK, {"count": len(thinks)}))
    else:
        dep.append(Departure(EventType.THINK_MISSING))
    outside = [b.body for b in blocks if b.kind == "text"]
    if outside:
        joined = " … ".join(o.strip() for o in outside)
        dep.append(Departure(EventType.TEXT_OUTSIDE_GRAMMAR, {"chars": sum(len(o.strip()) for o in outside),
                                                      "preview": joined[:200]}))
    responses = [b for b in blocks if b.kind == "response"]
    first_resp = responses[0].start if responses else -1
    if responses:
        complete = [r for r in responses if r.closed]
        chosen = complete[-1] if complete else responses[-1]
        out.response, out.response_complete = chosen.body.strip(), chosen.closed
        out.response_position = first_resp
        if len(responses) > 1:
            dep.append(Departure(EventType.MULTIPLE_RESPONSES, {
                "count": len(responses), "used": responses.index(chosen),
                "discarded": [r.body.strip()[:200] for r in responses if r is not chosen]}))
        if not chosen.closed:
            dep.append(Departure(EventType.RESPONSE_UNCLOSED))
    call_blocks = sorted([b for b in blocks if b.kind == "tool_call"] + [c for r in responses for c in r.inner],
                         key=lambda b: b.start)
    calls = [_decode_text_call(b, i, truncated, tags) for i, b in enumerate(call_blocks)]
    calls += [decode_structured_call(c, truncated) for c in structured or []]
    for c in calls:
        after = first_resp >= 0 and (c.position < 0 or c.position > first_resp)
        (out.calls_after_response if after else out.calls).append(c)
    if out.calls_after_response:
        dep.append(Departure(EventType.TOOL_CALL_AFTER_RESPONSE, {"not_executed": [_label(c) for c in out.calls_after_response]}))
    ignored = [_label(c) for c in out.calls[1:]] + ([tags.open] if out.calls and responses else [])
    if ignored:
        dep.append(Departure(EventType.EXTRA_ACTIONS_IGNORED, {"ignored": ignored}))
    return out


def cited_images(response: str | None) -> list[str]:
    """Names cited with ``<IMG: filename>`` in a final response, in order, without duplicates."""
    if not response:
        return []
    seen: list[str] = []
    for m in _CITE_RE.finditer(response):
        name = m.group(1).strip()
        if name not in seen:
            seen.append(name)
    return seen
