"""Parse one assistant turn into its single action (WeAgent Table 6 grammar).

Grammar: a short ``<think>...</think>``, then EXACTLY ONE of a single tool call (function calling, or
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in text for in-process Qwen models) or a
final answer ``<response>...</response>``. A tool call written after ``<response>`` is never executed.
``<IMG: filename>`` inside the response cites a registered image.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import json_repair

from kit.types import ToolCall

_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_RESPONSE_OPEN = "<response>"
_RESPONSE_RE = re.compile(r"<response>(.*?)(</response>|$)", re.S)
_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.S)
_CITE_RE = re.compile(r"<IMG:\s*([^>\s][^>]*?)\s*>")
MAX_CALL_CHARS = 200_000  # a tool call longer than this is refused before decoding
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


@dataclass
class RawCall:
    """A tool call before repair: ``arguments`` is a dict when decoded, else ``None`` with ``error``.

    ``error`` is a structured-error code (``non_json``, ``trailing_text``, ``missing_name``) when the
    call's serialization cannot be trusted; ``repairs`` lists serialization repairs that were applied.
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
class ParsedTurn:
    """The action of one assistant turn.

    ``response`` is the text inside ``<response>`` (``response_complete`` False when the closing tag
    is missing); ``calls`` are the tool calls in order; ``calls_after_response`` were written after
    ``<response>`` and must not be executed.
    """

    think: str | None = None
    response: str | None = None
    response_complete: bool = False
    response_position: int = -1
    calls: list[RawCall] = field(default_factory=list)
    calls_after_response: list[RawCall] = field(default_factory=list)

    @property
    def has_action(self) -> bool:
        return self.response is not None or bool(self.calls)


def decode_json_object(text: str) -> tuple[dict | None, str | None, str, list[str]]:
    """Decode a JSON object written by a model.

    Returns ``(obj, error_code, message, repairs)``. Strict JSON is accepted as is. Text with a valid
    object followed by more text is ``trailing_text`` (intent unclear). Otherwise ``json_repair`` may
    fix serialization slips (single quotes, trailing commas, code fences, Python literals); a result
    that is not a non-empty object is ``non_json``.
    """
    s = text.strip()
    repairs: list[str] = []
    if len(s) > MAX_CALL_CHARS:
        return None, "bad_arguments", f"tool call of {len(s)} characters exceeds the {MAX_CALL_CHARS}-character limit", repairs
    m = _FENCE_RE.match(s)
    if m:
        s = m.group(1).strip()
        repairs.append("code_fence_removed")
    if not s:
        return None, "non_json", "empty tool call body", repairs
    try:
        obj = json.loads(s)
        if isinstance(obj, dict):
            try:
                return _no_surrogates(obj, s), None, "", repairs
            except RecursionError:
                return None, "non_json", "JSON nested too deeply", repairs
        return None, "non_json", f"expected a JSON object, got {type(obj).__name__}", repairs
    except json.JSONDecodeError:
        pass
    except RecursionError:
        return None, "non_json", "JSON nested too deeply", repairs
    if s.startswith("{"):
        try:
            obj, end = json.JSONDecoder().raw_decode(s)
            rest = s[end:].strip()
            if rest:
                return None, "trailing_text", f"unexpected text after the JSON object: {rest[:80]!r}", repairs
        except json.JSONDecodeError:
            pass
        except RecursionError:
            return None, "non_json", "JSON nested too deeply", repairs
    if not s.startswith("{"):
        return None, "non_json", f"tool call is not a JSON object: {s[:80]!r}", repairs
    try:
        obj = json_repair.loads(s)
    except (Exception, RecursionError) as e:  # json_repair is defensive, but never let it escape
        return None, "non_json", f"cannot decode JSON: {type(e).__name__}", repairs
    if isinstance(obj, dict) and obj:
        try:
            return _no_surrogates(obj, s), None, "", repairs + ["json_serialization_repaired"]
        except RecursionError:
            return None, "non_json", "JSON nested too deeply", repairs
    return None, "non_json", f"cannot decode JSON object from {s[:80]!r}", repairs


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


def _no_surrogates(obj, source: str):
    """Decoded JSON with lone UTF-16 surrogates (raw, or from ``"\\ud800"`` escapes) replaced by
    U+FFFD in every key and string, so names, arguments and the events that quote them can always be
    recorded as UTF-8. ``source`` is the JSON text: without a surrogate in it, nothing is walked."""
    return scrub(obj) if _SURROGATE.search(source) else obj


def _decode_text_call(body: str, idx: int, position: int) -> RawCall:
    obj, err, msg, repairs = decode_json_object(body)
    call_id = f"call_text_{idx}"
    if err:
        return RawCall(call_id, "", None, body, "text", position, err, msg, repairs)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return RawCall(call_id, "", None, body, "text", position, "missing_name",
                       'tool call needs a "name" string', repairs)
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models double-encode the arguments
        a, err, msg, r2 = decode_json_object(args)
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


def decode_structured_call(call: ToolCall) -> RawCall:
    """Decode a function-calling tool call (arguments as a JSON string)."""
    raw = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    if raw.strip() == "":
        return RawCall(call.id, call.name, {}, raw, "structured", -1)
    obj, err, msg, repairs = decode_json_object(raw)
    if err:
        return RawCall(call.id, call.name, None, raw, "structured", -1, err, msg, repairs)
    return RawCall(call.id, call.name, obj, raw, "structured", -1, None, "", repairs)


def parse_turn(text: str, structured: list[ToolCall] | None = None) -> ParsedTurn:
    """Split assistant ``text`` (and structured ``tool_calls``) into think / calls / response.

    Structured calls come after the text content in the function-calling protocol, so when a
    ``<response>`` is present they count as written after it.
    """
    text = text or ""
    out = ParsedTurn()
    m = _THINK_RE.search(text)
    if m:
        out.think = m.group(1).strip()
    # Tags inside the reasoning are not actions: mask the think span (keeping offsets). Without an
    # opening tag (some templates open it in the prompt) everything up to "</think>" is reasoning.
    close = text.find("</think>")
    open_ = text.find("<think>")
    if close >= 0 and (open_ < 0 or open_ < close):
        end = close + len("</think>")
        text = " " * end + text[end:]
    elif open_ >= 0:
        text = text[:open_] + " " * (len(text) - open_)  # unclosed reasoning: no action in it
    resp_pos = text.find(_RESPONSE_OPEN)
    if resp_pos >= 0:
        rm = _RESPONSE_RE.search(text, resp_pos)
        out.response = rm.group(1).strip()
        out.response_complete = bool(rm.group(2))
        out.response_position = resp_pos
    calls: list[RawCall] = []
    for i, tm in enumerate(_TOOL_CALL_RE.finditer(text)):
        calls.append(_decode_text_call(tm.group(1), i, tm.start()))
    for c in structured or []:
        calls.append(decode_structured_call(c))
    for c in calls:
        after = resp_pos >= 0 and (c.position < 0 or c.position > resp_pos)
        (out.calls_after_response if after else out.calls).append(c)
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
