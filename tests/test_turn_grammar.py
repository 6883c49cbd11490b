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
    text, think, response, n_calls, n_after, codes = GRAMMAR_CASES[case]
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
