"""Fuzzing of the tool-call path with hypothesis (issue "Harness under attack", part 5).

Random and mutated tool names, argument JSON (truncated, trailing data, wrong types, deep nesting,
huge strings, lone surrogates and other unicode), image references and whole turns go through
``parse_turn``, ``repair_call`` and complete ``Harness.run`` episodes (ScriptedPolicy +
MemoryBackend, real code sandbox). Every input must end as an executed call, a repaired call or a
structured error, never as an exception out of the loop.

Sizes: ``MMSEARCH_KIT_FUZZ_SCALE`` multiplies the default example counts (CI default 1);
``benchmarks/bench_robustness.py`` runs the full-size campaign (>= 10,000 cases). Example generation
is derandomized here so CI is reproducible; the benchmark draws fresh examples.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.errors import ToolError
from kit.harness.loop import Harness
from kit.harness.parsing import ParsedTurn, RawCall, parse_turn
from kit.harness.recovery import Repaired, repair_call
from kit.harness.tools import TOOL_SPECS, tool_specs
from kit.policy.scripted import ScriptedPolicy
from kit.types import AssistantTurn, ToolCall, Usage
from tests.conftest import MemoryBackend

SCALE = float(os.environ.get("MMSEARCH_KIT_FUZZ_SCALE", "1"))
SPECS = tool_specs()
TOOLS = list(TOOL_SPECS)
ALIASES = sorted({a for s in TOOL_SPECS.values() for a in s.aliases})
PARAMS = sorted({p for s in TOOL_SPECS.values() for p in s.parameters["properties"]}
                | {a for s in TOOL_SPECS.values() for al in s.param_aliases.values() for a in al})
RAW_ERRORS = {"non_json", "trailing_text", "missing_name", "bad_arguments", "truncated", "duplicate_key"}
TOOL_ERRORS = {"unknown_tool", "ambiguous_arguments", "missing_argument", "bad_arguments"}
OK_STATUSES = {"answered", "max_turns_synthesis", "context_limit"}
ANSWER = "<think>done</think><response>final answer</response>"


def fuzz_settings(examples: int, **kw):
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much], **kw)


# ==================================================================================================
# Strategies
# ==================================================================================================
any_char = st.characters(codec=None, exclude_categories=()) | st.sampled_from(["\ud800", "\udfff", "\x00", "\u202e", "\ufeff"])
weird_text = st.text(alphabet=any_char, max_size=40)
# Long strings (cheap to build), including just over parsing.MAX_CALL_CHARS (200,000).
huge_text = st.builds(lambda c, n: c * n, st.sampled_from(["a", "é", "\U0001f600", "[", "{", "\"", "\\"]),
                      st.one_of(st.integers(1_000, 40_000), st.just(200_001)))


@st.composite
def mutated_name(draw) -> str:
    base = draw(st.sampled_from(TOOLS + ALIASES))
    op = draw(st.sampled_from(["upper", "title", "sep", "prefix", "truncate", "space", "unicode", "same"]))
    if op == "upper":
        return base.upper()
    if op == "title":
        return base.title()
    if op == "sep":
        return base.replace("_", draw(st.sampled_from(["-", ".", " ", "__", ""])))
    if op == "prefix":
        return draw(st.sampled_from(["functions.", "tools:", "function.", "fn."])) + base
    if op == "truncate":
        return base[: draw(st.integers(0, len(base)))]
    if op == "space":
        return f"  {base}\n"
    if op == "unicode":
        return base.replace("e", "\u0435")  # Cyrillic e: looks the same, is not
    return base


# Exact names half the time, so that many calls get as far as execution.
tool_names = st.one_of(st.sampled_from(TOOLS), st.sampled_from(TOOLS), mutated_name(),
                       st.one_of(weird_text, huge_text, st.just("")))
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), weird_text)
json_value = st.recursive(json_leaf, lambda ch: st.lists(ch, max_size=4) | st.dictionaries(weird_text, ch, max_size=4),
                          max_leaves=12)
image_refs = st.one_of(
    st.sampled_from(["user_image_1.png", "user_image_1", "<user_image_1>", "search_image_1.jpg", "search_image_99.jpg",
                     "code_image_1.png", "../user_image_1.png", "/etc/passwd", "~/x.png", "C:\\x.png", "\x00.png",
                     "user_image_1.png/../../etc/passwd", "a" * 300, "ws/user_image_1.png", "file:///etc/passwd"]),
    weird_text)


@st.composite
def plausible_args(draw, tool: str) -> dict:
    """Arguments close to valid for ``tool``: the right or aliased keys, values of mixed types."""
    out: dict = {}
    for param in SPECS[tool].parameters["properties"]:
        if draw(st.booleans()) or param in SPECS[tool].parameters.get("required", []):
            key = draw(st.sampled_from([param, *SPECS[tool].param_aliases.get(param, ())]))
            if param == "image":
                value = draw(st.one_of(st.just("user_image_1.png"), image_refs, st.lists(image_refs, max_size=7)))
            elif param in ("query", "urls"):
                valid = ["eiffel tower", "tower", ["a", "b"]] if param == "query" else [
                    ["https://example.org/eiffel"], "https://example.org/eiffel", ["https://example.org/missing"]]
                value = draw(st.one_of(st.sampled_from(valid), st.sampled_from(valid), weird_text,
                                       st.lists(weird_text, max_size=7)))
            elif param == "num":
                value = draw(st.one_of(st.integers(1, 5), st.integers(-3, 12), st.floats(allow_nan=True), weird_text,
                                       st.just(2.0)))
            elif param == "code":
                value = draw(st.one_of(st.sampled_from(
                    ["print(1)", "x = 1", "1/0", "import os; print(sorted(os.listdir('.')))",
                     "from PIL import Image; Image.new('RGB', (8, 8)).save('a.png')", "   ", "print('é' * 3)"]),
                    weird_text))
            else:
                value = draw(json_value)
            out[key] = value
    if draw(st.booleans()):
        out.update(draw(st.dictionaries(st.sampled_from(PARAMS) | weird_text, json_value, max_size=2)))
    return out


@st.composite
def call_arguments(draw) -> tuple[str, dict]:
    name = draw(tool_names)
    target = name if name in SPECS else draw(st.sampled_from(TOOLS))
    args = draw(st.one_of(plausible_args(target), st.dictionaries(st.sampled_from(PARAMS) | weird_text, json_value,
                                                                   max_size=4)))
    return name, args


def _deep(depth: int, opener: str) -> str:
    closer = {"[": "]", "{": "}"}[opener]
    inner = '{"a": ' * depth + "1" + "}" * depth if opener == "{" else "[" * depth + "]" * depth
    return inner if opener == "{" else inner.replace(closer * depth, closer * depth)


@st.composite
def call_body(draw) -> str:
    """The JSON inside ``<tool_call>...</tool_call>``, mutated the ways models and attackers do."""
    name, args = draw(call_arguments())
    obj = {"name": name, "arguments": args}
    if draw(st.integers(0, 5)) == 0:
        obj = {"name": name, "arguments": json.dumps(args)}  # double-encoded arguments
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    op = draw(st.sampled_from(["none"] * 8 + ["truncate", "trailing", "single_quotes", "trailing_comma", "fence", "bom",
                                              "deep", "nan", "dup_keys", "garbage", "empty"]))
    if op == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif op == "trailing":
        text += draw(st.sampled_from([" extra", "}", '{"name": "web_search"}', "\n```", ", 1"]))
    elif op == "single_quotes":
        text = text.replace('"', "'")
    elif op == "trailing_comma":
        text = text[:-1] + ",}"
    elif op == "fence":
        text = f"```json\n{text}\n```"
    elif op == "bom":
        text = "\ufeff" + text
    elif op == "deep":
        text = json.dumps({"name": name, "arguments": {"query": "x"}})[:-2] + ', "x": ' + _deep(
            draw(st.integers(10, 3000)), draw(st.sampled_from("[{"))) + "}}"
    elif op == "nan":
        text = text.replace("1", "NaN", 1)
    elif op == "dup_keys":
        text = text[:-1] + ', "name": "execute_code"}'
    elif op == "garbage":
        text = draw(weird_text)
    elif op == "empty":
        text = ""
    return text


@st.composite
def turn_text(draw) -> str:
    parts: list[str] = []
    for _ in range(draw(st.integers(0, 3))):
        body = draw(call_body())
        parts.append(f"<tool_call>{body}" + ("" if draw(st.integers(0, 6)) == 0 else "</tool_call>"))
    if draw(st.booleans()):
        parts.insert(0, "<think>" + draw(weird_text) + ("</think>" if draw(st.integers(0, 5)) else ""))
    if draw(st.integers(0, 3)) == 0:
        parts.insert(draw(st.integers(0, len(parts))),
                     "<response>" + draw(weird_text) + ("</response>" if draw(st.booleans()) else ""))
    if draw(st.integers(0, 4)) == 0:
        parts.insert(draw(st.integers(0, len(parts))), draw(weird_text))
    return "".join(parts)


@st.composite
def structured_turn(draw) -> AssistantTurn:
    calls = []
    for i in range(draw(st.integers(1, 3))):
        name, args = draw(call_arguments())
        raw = json.dumps(args)
        op = draw(st.sampled_from(["none"] * 4 + ["truncate", "trailing", "empty", "garbage", "list"]))
        if op == "truncate":
            raw = raw[: draw(st.integers(0, len(raw)))]
        elif op == "trailing":
            raw += " {}"
        elif op == "empty":
            raw = ""
        elif op == "garbage":
            raw = draw(weird_text)
        elif op == "list":
            raw = json.dumps([args])
        calls.append(ToolCall(id=draw(st.sampled_from([f"call_{i}", "", "\ud800", "x" * 500])), name=name, arguments=raw))
    text = draw(st.one_of(st.just(""), weird_text, turn_text()))
    return AssistantTurn(text=text, tool_calls=calls, finish_reason=draw(st.sampled_from(["tool_calls", "stop", "length"])),
                         usage=Usage(completion_tokens=draw(st.integers(0, 5000))))


turns = st.one_of(turn_text(), structured_turn())


# ==================================================================================================
# Properties (also used by benchmarks/bench_robustness.py)
# ==================================================================================================
def check_parse(text: str, structured: list[ToolCall] | None = None) -> ParsedTurn:
    """``parse_turn`` returns a well-formed ParsedTurn: each call decoded to a dict or carrying a
    known error code."""
    parsed = parse_turn(text, structured)
    assert isinstance(parsed, ParsedTurn)
    for call in parsed.calls + parsed.calls_after_response:
        assert isinstance(call, RawCall)
        if call.error is None:
            assert isinstance(call.arguments, dict) and isinstance(call.name, str)
        else:
            assert call.error in RAW_ERRORS and call.arguments is None, call.error
    return parsed


def check_repair(name: str, arguments: dict) -> Repaired | ToolError:
    """``repair_call`` either returns arguments that satisfy the tool's schema or raises a ToolError
    with a known code and a bounded, JSON-serializable observation."""
    try:
        fixed = repair_call(name, arguments, SPECS)
    except ToolError as e:
        assert e.code in TOOL_ERRORS, e.code
        obs = json.dumps(e.observation(), ensure_ascii=False, default=str)
        assert len(e.message) < ToolError.MAX_MESSAGE + 100 and obs
        return e
    from jsonschema import Draft202012Validator

    assert fixed.name in SPECS
    assert not list(Draft202012Validator(SPECS[fixed.name].parameters).iter_errors(fixed.arguments))
    return fixed


def _input_image(folder: Path) -> Path:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (20, 90, 200)).save(buf, format="PNG")
    (folder / "q.png").write_bytes(buf.getvalue())
    return folder / "q.png"


FUZZ_CONFIG = HarnessConfig(code_timeout_s=5, wall_clock_s=120, max_turns=8, max_calls=8)


def check_episode(script: list) -> EpisodeRecord:
    """A whole episode of fuzzed turns followed by an answer: the record comes back with a normal
    status (an exception inside the loop would show as status ``error``), serializes, and every
    action-bearing turn is answered by an observation (executed, repaired or structured error)."""
    ws = Path(tempfile.mkdtemp(prefix="kit-fuzz-ws-"))
    try:
        h = Harness(ScriptedPolicy(list(script) + [ANSWER] * 2, completion_tokens=10), MemoryBackend(), FUZZ_CONFIG)
        task = Task(id="fuzz", question="What is shown?", input_images=[str(_input_image(ws))])
        rec = asyncio.run(h.run(task, ws / "ep"))
    finally:
        shutil.rmtree(ws, ignore_errors=True)
    assert rec.status in OK_STATUSES, (rec.status, rec.error)
    EpisodeRecord.model_validate_json(rec.model_dump_json())
    msgs = rec.messages
    for i, m in enumerate(msgs[:-1]):
        if m.role != "assistant":
            continue
        parsed = parse_turn(m.text(), m.tool_calls)
        nxt = msgs[i + 1]
        if parsed.calls:
            assert nxt.role == "tool", (m.text()[:200], nxt.role)
            if nxt.intervention and nxt.text().lstrip().startswith("{"):
                obs = json.loads(nxt.text().split("\n", 1)[-1] if nxt.text().startswith("Loop") else nxt.text())
                assert obs["error"] in RAW_ERRORS | TOOL_ERRORS | {"unknown_tool"}
        elif parsed.response is None:
            assert nxt.role == "user" and nxt.intervention
    return rec


# ==================================================================================================
# Tests
# ==================================================================================================
@fuzz_settings(200)
@given(turn_text())
def test_parse_turn_text_calls(text):
    check_parse(text)


@fuzz_settings(100)
@given(structured_turn())
def test_parse_turn_structured_calls(turn):
    check_parse(turn.text, turn.tool_calls)


@fuzz_settings(250)
@given(call_arguments())
def test_repair_call(name_args):
    check_repair(*name_args)


@fuzz_settings(40)
@given(st.lists(turns, min_size=1, max_size=3))
def test_whole_episodes(script):
    check_episode(script)


@pytest.mark.parametrize("body", [
    '{"name": "web_search", "arguments": {"query": "' + "x" * 250_000 + '"}}',
    '{"name": "web_search", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"name": "web_search", "arguments": {"query": "a"}} {"name": "execute_code"}',
    '{"name": "web_search", "arguments": {"query": "a"',
    '{"name": "\ud800", "arguments": {"\udfff": "\ud83d"}}',
    # found by this fuzzer: escaped lone surrogates decode into names and keys that no record could hold
    "{'name': '\\ud800\\udc00', 'arguments': '{\\'query\\': \\'\\'}'}",
    '{"name": "web_search\\udfff", "arguments": {"q\\ud800": "\\udc00"}}',
    '{"name": "web_search", "arguments": {"query": 1e999999}}',
    '{"name": "web_search", "arguments": {"query": "a", "num": 99999999999999999999999999}}',
])
def test_known_nasty_calls(body):
    parsed = check_parse(f"<tool_call>{body}</tool_call>")
    for c in parsed.calls:
        if c.error is None:
            check_repair(c.name, c.arguments)
    check_episode([f"<tool_call>{body}</tool_call>"])
