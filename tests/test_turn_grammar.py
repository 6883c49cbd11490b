"""Tool-call structure and the whole Table 6 turn grammar (issue 14, parts 1-2): parse level, loop level
(events on the record, nothing executed that should not be) and reward level (Eq. 5 F, GRPO S_format).

``TRUNCATION_CASES`` and ``GRAMMAR_CASES`` are the cases counted in the issue's "Measure" table.
"""

from __future__ import annotations

import asyncio

import pytest

from kit.eval.judges import RuleJudge
from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.loop import Harness
from kit.harness.parsing import decode_json_object, parse_turn
from kit.policy.scripted import ScriptedPolicy, structured_call
from kit.rl.rewards import format_ok, score_record
from kit.types import AssistantTurn, ContentPart, Message, ToolCall

CALL = '<tool_call>{"name": "web_search", "arguments": %s}</tool_call>'
ANSWER = "<think>done</think><response>Paris</response>"


# ----------------------------------------------------------------------------- part 1: tool-call structure
# (text, finish_reason == "length", expected): expected is ("ok", arguments) or ("error", code)
TRUNCATION_CASES = {
    "close_tag_inside_string": (CALL % '{"query": "what does </tool_call> mean"}', False,
                                ("ok", {"query": "what does </tool_call> mean"})),
    "response_tag_inside_string": (CALL % '{"query": "the <response>x</response> tag"}', False,
                                   ("ok", {"query": "the <response>x</response> tag"})),
    "open_tag_inside_string": (CALL % '{"query": "nested <tool_call> tag"}', False,
                               ("ok", {"query": "nested <tool_call> tag"})),
    "escaped_quote_then_tag": (CALL % r'{"query": "say \"</tool_call>\" twice"}', False,
                               ("ok", {"query": 'say "</tool_call>" twice'})),
    "cut_inside_value": ('<tool_call>{"name": "web_search", "arguments": {"query": "Eiffel Tow', False,
                         ("error", "truncated")),
    "cut_inside_key": ('<tool_call>{"name": "web_search", "argum', False, ("error", "truncated")),
    "cut_after_colon": ('<tool_call>{"name": "web_search", "arguments": {"query":', False, ("error", "truncated")),
    "cut_after_comma": ('<tool_call>{"name": "web_search", "arguments": {"query": "a",', False,
                        ("error", "truncated")),
    "cut_inside_number": ('<tool_call>{"name": "web_search", "arguments": {"query": "a", "num": 3', False,
                          ("error", "truncated")),
    "length_cut_after_complete_value": ('<tool_call>{"name": "web_search", "arguments": {"query": "Eiffel Tower"',
                                        True, ("error", "truncated")),
    "close_tag_in_unclosed_string": ('<tool_call>{"name": "web_search", "arguments": {"query": "abc</tool_call>',
                                     False, ("error", "truncated")),
    "double_encoded_cut": ('<tool_call>{"name": "web_search", "arguments": "{\\"query\\": \\"Eiffel Tow"}</tool_call>',
                           False, ("error", "truncated")),
    "unescaped_quotes_two_readings": (CALL % '{"query": "what "quoted" means"}', False, ("error", "non_json")),
    "missing_value_repair_refused": (CALL % '{"query"}', False, ("error", "non_json")),
    # repairs with one reading stay allowed
    "stop_after_complete_value": ('<tool_call>{"name": "web_search", "arguments": {"query": "Eiffel Tower"', False,
                                  ("ok", {"query": "Eiffel Tower"})),
    "missing_brace_before_close_tag": ('<tool_call>{"name": "web_search", "arguments": {"query": "x", "num": 2}'
                                       '</tool_call>', False, ("ok", {"query": "x", "num": 2})),
    "single_quotes_trailing_comma": ("<tool_call>{'name': 'web_search', 'arguments': {'query': 'x',},}</tool_call>",
                                     False, ("ok", {"query": "x"})),
    "code_fence": ('<tool_call>\n```json\n{"name": "web_search", "arguments": {"query": "x"}}\n```\n</tool_call>',
                   False, ("ok", {"query": "x"})),
}


@pytest.mark.parametrize("case", sorted(TRUNCATION_CASES))
def test_tool_call_structure(case):
    text, length, (kind, want) = TRUNCATION_CASES[case]
    p = parse_turn(text, truncated=length)
    assert len(p.calls) == 1 and p.response is None, [c.raw for c in p.calls]
    c = p.calls[0]
    if kind == "ok":
        assert c.error is None and c.name == "web_search" and c.arguments == want, (c.error, c.message)
    else:
        assert c.error == want and c.arguments is None, (c.error, c.arguments)


def test_truncated_structured_call():
    p = parse_turn("", [ToolCall(id="c", name="web_search", arguments='{"query": "Eiffel Tow')], truncated=True)
    assert p.calls[0].error == "truncated"
    # a structurally complete structured call is not truncated even when the turn hit the length limit
    p = parse_turn("", [ToolCall(id="c", name="web_search", arguments='{"query": "x"}')], truncated=True)
    assert p.calls[0].error is None and p.calls[0].arguments == {"query": "x"}


def test_decode_names_every_repair():
    obj, err, _, repairs = decode_json_object('{"a": {"b": "c"}', at_eof=True)
    assert obj == {"a": {"b": "c"}} and err is None and repairs == ["closing_brackets_added:}"]
    obj, err, msg, _ = decode_json_object('{"a": "b" // note\n}')  # json_repair would drop the comment
    assert obj is None and err == "non_json" and "change" in msg


# ----------------------------------------------------------------------------- part 2: turn grammar
# text -> (think, response, n calls executed-position, n calls after response, departure codes)
GRAMMAR_CASES = {
    "two_tool_calls": ("<think>t</think>" + CALL % '{"query": "a"}' + CALL % '{"query": "b"}', "t", None, 2, 0,
                       {"extra_actions_ignored"}),
    "call_then_response": ("<think>t</think>" + CALL % '{"query": "a"}' + "<response>Paris</response>",
                           "t", "Paris", 1, 0, {"extra_actions_ignored"}),
    "two_responses_last_wins": ("<think>t</think><response>Lyon</response><response>Paris</response>", "t", "Paris",
                                0, 0, {"multiple_responses"}),
    "complete_then_unclosed_response": ("<think>t</think><response>Paris</response><response>Ly", "t", "Paris", 0, 0,
                                        {"multiple_responses"}),
    "prose_before_think": ("Sure! <think>t</think><response>Paris</response>", "t", "Paris", 0, 0,
                           {"text_outside_grammar"}),
    "prose_after_response": ("<think>t</think><response>Paris</response> Hope this helps.", "t", "Paris", 0, 0,
                             {"text_outside_grammar"}),
    "prose_between_think_and_call": ("<think>t</think>Let me search." + CALL % '{"query": "a"}', "t", None, 1, 0,
                                     {"text_outside_grammar"}),
    "stray_closing_tag": ("<think>t</think></tool_call><response>Paris</response>", "t", "Paris", 0, 0,
                          {"text_outside_grammar"}),
    "call_after_response": ("<think>t</think><response>Paris</response>" + CALL % '{"query": "a"}', "t", "Paris", 0, 1,
                            {"tool_call_after_response"}),
    "call_inside_response": ("<think>t</think><response>Paris " + CALL % '{"query": "a"}' + "</response>", "t",
                             "Paris", 0, 1, {"tool_call_after_response"}),
    "template_opened_think_answer": ("I recall the tower.\n</think>\n<response>Paris</response>", "I recall the tower.",
                                     "Paris", 0, 0, set()),
    "template_opened_think_call": ("Search first.</think>" + CALL % '{"query": "a"}', "Search first.", None, 1, 0, set()),
    "unclosed_think": ("<think>still thinking " + CALL % '{"query": "a"}', "still thinking " + CALL % '{"query": "a"}',
                       None, 0, 0, {"think_unclosed"}),
    "second_think_block": ("<think>a</think><think>b</think><response>Paris</response>", "a", "Paris", 0, 0,
                           {"multiple_think"}),
    "no_think": ("<response>Paris</response>", None, "Paris", 0, 0, {"think_missing"}),
    "canonical_answer": (ANSWER, "done", "Paris", 0, 0, set()),
    "canonical_call": ("<think>t</think>\n" + CALL % '{"query": "a"}', "t", None, 1, 0, set()),
}


@pytest.mark.parametrize("case", sorted(GRAMMAR_CASES))
def test_turn_grammar_departures(case):
    check_grammar(*GRAMMAR_CASES[case])


def check_grammar(text, think, response, n_calls, n_after, codes):
    p = parse_turn(text)
    assert p.think == think
    assert p.response == response
    assert (len(p.calls), len(p.calls_after_response)) == (n_calls, n_after)
    assert {d.code for d in p.departures} == codes


def test_structured_call_with_response_text_is_after_response():
    p = parse_turn("<think>t</think><response>Paris</response>",
                   [ToolCall(id="c", name="web_search", arguments='{"query": "a"}')])
    assert p.response == "Paris" and not p.calls and len(p.calls_after_response) == 1
    assert {d.code for d in p.departures} == {"tool_call_after_response"}


# ----------------------------------------------------------------------------- loop level
def run(policy, backend, tmp_path, config=None):
    h = Harness(policy, backend, config or HarnessConfig())
    return asyncio.run(h.run(Task(id="t1", question="Where is this tower?"), tmp_path / "ws", episode_id="ep"))


def _types(rec):
    return [e.type for e in rec.events]


def test_loop_tag_inside_string_runs_the_written_call(tmp_path, memory_backend):
    text = CALL % '{"query": "what does </tool_call> mean"}'
    rec = run(ScriptedPolicy([text, ANSWER]), memory_backend, tmp_path)
    assert [c[1] for c in memory_backend.calls] == ["what does </tool_call> mean"]
    assert "extra_actions_ignored" not in _types(rec) and "invalid_call" not in _types(rec)


@pytest.mark.parametrize("turn", [
    AssistantTurn(text='<tool_call>{"name": "web_search", "arguments": {"query": "Eiffel Tow'),
    AssistantTurn(text='<tool_call>{"name": "web_search", "arguments": {"query": "Eiffel Tower"',
                  finish_reason="length"),
])
def test_loop_truncated_call_is_not_executed(tmp_path, memory_backend, turn):
    cfg = HarnessConfig(overlong_regenerations=0)
    rec = run(ScriptedPolicy([turn, ANSWER]), memory_backend, tmp_path, cfg)
    assert memory_backend.calls == []
    inv = [e for e in rec.events if e.type == "invalid_call"]
    assert len(inv) == 1 and inv[0].detail["code"] == "truncated" and inv[0].detail["truncated"] is True
    obs = rec.messages[3]
    assert obs.role == "tool" and '"truncated"' in obs.text() and "not executed" in obs.text()
    assert rec.status == "answered"


def test_loop_two_responses_last_wins_with_event(tmp_path, memory_backend):
    rec = run(ScriptedPolicy(["<think>t</think><response>Lyon</response><response>Paris</response>"]),
              memory_backend, tmp_path)
    assert rec.final_response == "Paris"
    ev = [e for e in rec.events if e.type == "multiple_responses"]
    assert len(ev) == 1 and ev[0].detail["count"] == 2 and ev[0].detail["discarded"] == ["Lyon"]


@pytest.mark.parametrize("text,event", [
    ("Sure! <think>t</think><response>Paris</response>", "text_outside_grammar"),
    ("<think>t</think><response>Paris</response>" + CALL % '{"query": "a"}', "tool_call_after_response"),
    ("<think>a</think><think>b</think><response>Paris</response>", "multiple_think"),
    ("<response>Paris</response>", "think_missing"),
])
def test_loop_departure_events(tmp_path, memory_backend, text, event):
    rec = run(ScriptedPolicy([text]), memory_backend, tmp_path)
    assert rec.final_response == "Paris" and memory_backend.calls == []
    assert _types(rec).count(event) == 1 and rec.events[[e.type for e in rec.events].index(event)].turn == 1


def test_loop_template_opened_think_is_reasoning_not_action(tmp_path, memory_backend):
    text = "Maybe <response>Lyon</response>? No.\n</think>\n<response>Paris</response>"
    rec = run(ScriptedPolicy([text]), memory_backend, tmp_path)
    assert rec.final_response == "Paris"
    assert "think_opened_by_template" in _types(rec) and "multiple_responses" not in _types(rec)


def test_loop_two_calls_first_executed(tmp_path, memory_backend):
    text = CALL % '{"query": "a"}' + CALL % '{"query": "b"}'
    rec = run(ScriptedPolicy([text, ANSWER]), memory_backend, tmp_path)
    assert [c[1] for c in memory_backend.calls] == ["a"]
    assert _types(rec).count("extra_actions_ignored") == 1


def test_loop_structured_truncated_call(tmp_path, memory_backend):
    turn = structured_call("web_search", '{"query": "Eiffel Tow')
    turn = turn.model_copy(update={"finish_reason": "length"})
    rec = run(ScriptedPolicy([turn, ANSWER]), memory_backend, tmp_path, HarnessConfig(overlong_regenerations=0))
    assert memory_backend.calls == []
    assert [e.detail["code"] for e in rec.events if e.type == "invalid_call"] == ["truncated"]


# ----------------------------------------------------------------------------- reward level
TASK = Task(id="t1", question="Which tower is in Paris?", answers=["Eiffel Tower"])


def rec(*assistant: str, final="Eiffel Tower"):
    msgs = [Message(role="system", content=[ContentPart(type="text", text="sys")]),
            Message(role="user", content=[ContentPart(type="text", text=TASK.question)])]
    for a in assistant:
        msgs.append(Message(role="assistant", content=[ContentPart(type="text", text=a)]))
    return EpisodeRecord(id="r", task=TASK, config_hash="x", messages=msgs, status="answered", trainable=True,
                         final_response=final, tool_calls=1)


GOOD = "<think>ok</think><response>Eiffel Tower</response>"


@pytest.mark.parametrize("case", sorted(c for c in GRAMMAR_CASES if GRAMMAR_CASES[c][1] is not None
                                        or GRAMMAR_CASES[c][2] is not None))
def test_final_turn_departure_costs_eq5_format(case):
    text = GRAMMAR_CASES[case][0]
    p = parse_turn(text)
    terminal_ok = p.response is not None and not p.calls and not p.departures
    assert format_ok(rec(text)) == terminal_ok


@pytest.mark.parametrize("last", [
    "<think>t</think><response>Big Ben</response><response>Eiffel Tower</response>",
    "Sure! <think>t</think><response>Eiffel Tower</response>",
    "<think>t</think><response>Eiffel Tower</response> Done.",
    "<response>Eiffel Tower</response>",
])
async def test_reward_terms_read_departures(last):
    j = RuleJudge("contains")
    good = await score_record(rec(GOOD), j)
    bad = await score_record(rec(last), j)
    assert (good.format, good.reward) == (1.0, pytest.approx(1.0))
    assert (bad.format, bad.reward) == (0.0, pytest.approx(0.9))
    g = await score_record(rec(last), j, kind="points_seeker")
    assert g.format == 0.0 and g.reward == pytest.approx(0.7 + 0.1)


async def test_template_opened_think_keeps_format():
    j = RuleJudge("contains")
    r = await score_record(rec("reasoning</think><response>Eiffel Tower</response>"), j, kind="points_seeker")
    assert r.format == 1.0 and r.reward == pytest.approx(1.0)


async def test_grpo_format_reads_every_turn_eq5_only_the_last():
    j = RuleJudge("contains")
    mid = "I will search." + CALL % '{"query": "a"}'  # prose outside the grammar, no <think>
    w = await score_record(rec(mid, GOOD), j)
    g = await score_record(rec(mid, GOOD), j, kind="points_seeker")
    assert w.format == 1.0 and g.format == 0.0
    ok = await score_record(rec("<think>s</think>" + CALL % '{"query": "a"}', GOOD), j, kind="points_seeker")
    assert ok.format == 1.0


def test_structured_call_on_final_turn_costs_format():
    r = rec(GOOD)
    r.messages[-1] = r.messages[-1].model_copy(update={"tool_calls": [ToolCall(id="c", name="web_search",
                                                                               arguments='{"query": "a"}')]})
    assert not format_ok(r)


# ----------------------------------------------------------------------------- review findings (H1-H3, M1-M2, L1-L5)
T = "<think>x</think>"
# text -> (finish_reason == "length", expected) as in TRUNCATION_CASES; a call is needed, an answer is not
FINDING_CASES = {
    # H1: an unquoted value, or a prefix of true/false/null, has two readings: never read as a string
    "H1_literal_prefix_before_tag": (T + '<tool_call>{"name":"web_search","arguments":{"query":"q","safe": tru'
                                     '</tool_call>', False, ("error", "non_json")),
    "H1_literal_prefix_before_tag_length": (T + '<tool_call>{"name":"web_search","arguments":{"query": nul'
                                            '</tool_call>', True, ("error", "non_json")),
    "H1_null_prefix_before_tag": (T + '<tool_call>{"name":"web_search","arguments":{"query": nul</tool_call>', False,
                                  ("error", "non_json")),
    "H1_unquoted_value": (T + CALL % '{"query": hello}', False, ("error", "non_json")),
    "H1_nan_is_not_json": (T + CALL % '{"query": "q", "num": NaN}', False, ("error", "non_json")),
    "H1_literal_prefix_at_end": (T + '<tool_call>{"name":"web_search","arguments":{"query": nul', False,
                                 ("error", "truncated")),
    "H1_python_literal_still_repaired": (T + CALL % '{"query": "q", "safe": True}', False,
                                         ("ok", {"query": "q", "safe": True})),
    # M1: a key written twice has two readings
    "M1_duplicate_name": (T + '<tool_call>{"name":"web_extract","name":"web_search","arguments":{"query":"x"}}'
                          '</tool_call>', False, ("error", "duplicate_key")),
    "M1_duplicate_argument": (T + CALL % '{"query":"rm -rf","query":"eiffel"}', False, ("error", "duplicate_key")),
    "M1_duplicate_escaped_key": (T + CALL % '{"query":"a","\\u0071uery":"b"}', False, ("error", "duplicate_key")),
    "M1_same_key_in_sibling_objects_ok": (T + CALL % '{"query":"a","opt":{"query":"b"}}', False,
                                          ("ok", {"query": "a", "opt": {"query": "b"}})),
    # M2: nesting is capped before any decoder runs
    "M2_deep_braces": (T + "<tool_call>" + "{" * 5000 + "}" * 5000 + "</tool_call>", False, ("error", "non_json")),
    # L2: a complete but malformed call is non_json; only the end-of-output cut is truncation
    "L2_unescaped_apostrophe": (T + "<tool_call>{'name':'web_search','arguments':{'query': 'don't'}}</tool_call>",
                                False, ("error", "non_json")),
    "L2_quote_inside_single_quotes": (T + "<tool_call>{\"name\":\"web_search\",\"arguments\":{\"q\": 'x'y'}}"
                                      "</tool_call>", False, ("error", "non_json")),
    # L1: a lone surrogate is replaced, and the repair is named
    "L1_lone_surrogate": (T + CALL % '{"query":"\\ud800"}', False, ("ok", {"query": "\ufffd"})),
    # L3: an empty arguments string means no arguments, in text as for structured calls
    "L3_text_empty_arguments_string": (T + '<tool_call>{"name":"web_search","arguments":""}</tool_call>', False,
                                       ("ok", {})),
}


@pytest.mark.parametrize("case", sorted(FINDING_CASES))
def test_finding_call_structure(case):
    text, length, (kind, want) = FINDING_CASES[case]
    p = parse_turn(text, truncated=length)
    assert len(p.calls) == 1 and p.response is None and not p.departures, (p.departure_codes(), [c.raw for c in p.calls])
    c = p.calls[0]
    if kind == "ok":
        assert c.error is None and c.name == "web_search" and c.arguments == want, (c.error, c.message)
    else:
        assert c.error == want and c.arguments is None, (c.error, c.arguments, c.message)


@pytest.mark.parametrize("word,value", [("+5", 5), (".5", 0.5), ("5.", 5.0), ("-1e3", -1000.0), ("true", True),
                                        ("None", None), ("010", "non_json"), ("0x10", "non_json"),
                                        ("1_000", "non_json"), ("Infinity", "non_json"), ("-", "non_json")])
def test_finding_bare_numbers(word, value):
    """H1: a bare value is read only when it is a decimal number or a literal with one reading."""
    obj, err, _, _ = decode_json_object(f'{{"query": "q", "num": {word}}}')
    assert (err if err else obj["num"]) == value


def test_finding_messages_and_repair_names():
    p = parse_turn(FINDING_CASES["M2_deep_braces"][0])
    assert "nested" in p.calls[0].message and "64" in p.calls[0].message
    p = parse_turn(FINDING_CASES["M1_duplicate_name"][0])
    assert "'name'" in p.calls[0].message
    p = parse_turn(FINDING_CASES["H1_unquoted_value"][0])
    assert "unquoted" in p.calls[0].message and "hello" in p.calls[0].message
    p = parse_turn(FINDING_CASES["L1_lone_surrogate"][0])
    assert "surrogates_replaced" in p.calls[0].repairs
    p = parse_turn(T + CALL % '{"query":"\\ud83d\\ude00"}')  # a valid pair is no repair
    assert p.calls[0].arguments == {"query": "\U0001F600"} and p.calls[0].repairs == []
    p = parse_turn(FINDING_CASES["L3_text_empty_arguments_string"][0])
    assert "empty_arguments" in p.calls[0].repairs


def test_finding_structured_calls_follow_one_rule():
    def one(args, name="web_search", truncated=False):
        return parse_turn("", [ToolCall(id="c", name=name, arguments=args)], truncated=truncated).calls[0]
    # L3: an arguments string the server ended before its JSON was complete is never completed
    c = one('{"query":"eif","num":1')
    assert c.error == "truncated" and c.arguments is None
    c = one('{"query":"eif"')
    assert c.error == "truncated" and c.arguments is None
    # "" means no arguments (unless the turn hit the length limit), as `"arguments": ""` in text
    c = one("")
    assert c.error is None and c.arguments == {} and c.repairs == ["empty_arguments"]
    assert one("", truncated=True).error == "truncated"
    assert one("", name="").error == "missing_name" and one('{"query":"x"}', name="  ").error == "missing_name"
    assert one('{"query":"a","query":"b"}').error == "duplicate_key"
    assert one('{"query": hello}').error == "non_json"


# text -> (think, response, n calls, n calls after response, departure codes), as GRAMMAR_CASES
FINDING_GRAMMAR_CASES = {
    # H2: a <tool_call> that opens no JSON object inside an answer is answer text
    "H2_tag_mentioned_in_answer": (T + "<response>Use the <tool_call> tag</response>", "x", "Use the <tool_call> tag",
                                   0, 0, set()),
    "H2_unclosed_call_never_eats_response_end": (T + '<response>Paris <tool_call>{"name": "web_search", "arguments": '
                                                 '{"query": "x</response>', "x", "Paris", 0, 1,
                                                 {"tool_call_after_response"}),
    # H3: a lone </think> inside an answer is answer text, not the end of template-opened reasoning
    "H3_think_close_in_answer": ("<response>Close with </think></response>", None, "Close with </think>", 0, 0,
                                 {"think_missing"}),
    "H3_think_close_in_answer_after_text": ("reason <response>the tag </think> is</response>", None,
                                            "the tag </think> is", 0, 0, {"think_missing", "text_outside_grammar"}),
    # L4: a <response> opened inside a response starts a second one
    "L4_nested_response": (T + "<response>A<response>B</response>", "x", "B", 0, 0, {"multiple_responses"}),
}


@pytest.mark.parametrize("case", sorted(FINDING_GRAMMAR_CASES))
def test_finding_turn_grammar(case):
    text, think, response, n_calls, n_after, codes = FINDING_GRAMMAR_CASES[case]
    check_grammar(text, think, response, n_calls, n_after, codes)
    p = parse_turn(text)
    assert format_ok(rec(text)) == (p.response is not None and not p.calls and not p.departures) == (not codes)


def test_finding_nested_response_detail():
    p = parse_turn(FINDING_GRAMMAR_CASES["L4_nested_response"][0])
    d = p.departures[0]
    assert d.detail["count"] == 2 and d.detail["discarded"] == ["A"] and p.response_complete


def test_loop_h1_unquoted_value_is_not_executed(tmp_path, memory_backend):
    text = T + '<tool_call>{"name":"web_search","arguments":{"query": nul</tool_call>'
    rec = run(ScriptedPolicy([text, ANSWER]), memory_backend, tmp_path)
    assert memory_backend.calls == []
    inv = [e for e in rec.events if e.type == "invalid_call"]
    assert [e.detail["code"] for e in inv] == ["non_json"] and "argument_repair" not in _types(rec)
    assert rec.final_response == "Paris"


def test_loop_m1_duplicate_key_is_not_executed(tmp_path, memory_backend):
    text = T + '<tool_call>{"name":"web_extract","name":"web_search","arguments":{"query":"x"}}</tool_call>'
    rec = run(ScriptedPolicy([text, ANSWER]), memory_backend, tmp_path)
    assert memory_backend.calls == []
    assert [e.detail["code"] for e in rec.events if e.type == "invalid_call"] == ["duplicate_key"]


@pytest.mark.parametrize("text,answer,events", [
    (T + "<response>Use the <tool_call> tag</response>", "Use the <tool_call> tag", set()),  # H2
    ("<response>Close with </think></response>", "Close with </think>", {"think_missing"}),  # H3
    ("reason <response>the tag </think> is</response>", "the tag </think> is",
     {"think_missing", "text_outside_grammar"}),  # H3
])
def test_loop_h2_h3_answer_is_kept(tmp_path, memory_backend, text, answer, events):
    rec = run(ScriptedPolicy([text]), memory_backend, tmp_path)
    assert rec.status == "answered" and rec.final_response == answer and memory_backend.calls == []
    assert set(_types(rec)) & {"no_action", "response_unclosed", "tool_call_after_response",
                               "think_opened_by_template", "think_missing", "text_outside_grammar"} == events
    assert format_ok(rec) == (not events)


def adversarial_turns(n: int = 200_000) -> tuple[dict[str, str], str]:
    """``(inputs, ordinary)``: adversarial assistant turns of about ``n`` characters (deep braces or lists,
    thousands of calls inside a response, unclosed calls, nested responses, a large repair) and an
    ordinary turn of as many well-formed calls. Timed against each other in benchmarks/bench_parse.py
    (before the fix deep braces took ~35 s in json-repair, 8k calls inside a response ~0.7 s)."""
    c = '<tool_call>{"name":"web_search","arguments":{"query":"q"}}</tool_call>'
    inputs = {
        "deep_braces": T + "<tool_call>" + "{" * (n // 2) + "}" * (n // 2) + "</tool_call>",
        "deep_lists": T + '<tool_call>{"a":' + "[{" * (n // 4) + "}]" * (n // 4) + "}</tool_call>",
        "calls_in_response": T + "<response>" + "<tool_call>x</tool_call>" * (n // 24),
        "json_calls_in_response": T + "<response>" + c * (n // len(c)),
        "unclosed_calls_in_responses": '<response><tool_call>{"a": "x</response>' * (n // 40),
        "nested_responses": "<response>a" * (n // 11),
        "single_quote_repair": T + "<tool_call>{'name': 'web_search', 'arguments': {'query': '" + "x" * n + "',}}"
                               "</tool_call>",
    }
    return inputs, T + c * (n // len(c))


def test_parse_turn_on_adversarial_input():
    """M2/L5: 200k-character adversarial turns parse to the right structure; deep nesting is refused by
    the scanner before any decoder sees it. Their speed (a ratio against an ordinary turn) is a
    benchmark target: benchmarks/bench_parse.py."""
    n = 200_000
    inputs, ordinary = adversarial_turns(n)
    assert len(parse_turn(ordinary).calls) == len(ordinary) // 70
    for name, text in inputs.items():
        assert len(text) >= n * 0.95
        p = parse_turn(text)
        if name.startswith("deep_") or name == "single_quote_repair":  # refused, never decoded
            assert len(p.calls) == 1 and p.calls[0].arguments is None and p.calls[0].error in ("non_json", "bad_arguments")
        if name == "deep_braces":
            assert "nested more than 64 levels" in p.calls[0].message
        if "in_response" in name or name == "nested_responses":
            assert p.response is not None and p.departures, name


def test_deep_nesting_and_large_repairs_are_refused_below_the_size_limit():
    """The nesting cap and the strict-JSON rule for large calls act on their own, not only through the
    200,000-character size limit."""
    deep = T + '<tool_call>{"a":' + "[" * 100 + "]" * 100 + "}</tool_call>"
    p = parse_turn(deep)
    assert p.calls[0].error == "non_json" and "nested more than 64 levels" in p.calls[0].message
    big = T + "<tool_call>{'name': 'web_search', 'arguments': {'query': '" + "x" * 60_000 + "'}}</tool_call>"
    p = parse_turn(big)
    assert p.calls[0].error == "non_json" and "strict JSON" in p.calls[0].message
