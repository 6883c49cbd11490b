"""Episode loop: every rule of WeAgent Table 5 with its exact value, the Table 6 grammar, and the
end-to-end image re-feed and citation path."""

from __future__ import annotations

import asyncio
import json

import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.policy.scripted import ScriptedPolicy, structured_call, tool_call_text
from kit.types import AssistantTurn, PolicyError, Usage
from tests.conftest import png_bytes

ANSWER = "<think>done</think><response>Paris</response>"


def run(policy, backend, tmp_path, config=None, task=None, **kw):
    h = Harness(policy, backend, config or HarnessConfig(), **kw)
    task = task or Task(id="t1", question="Where is this tower?")
    return asyncio.run(h.run(task, tmp_path / "ws", episode_id="ep"))


def test_paper_defaults_are_table5():
    c = HarnessConfig()
    assert (c.max_turns, c.max_calls, c.max_context_tokens, c.wall_clock_s) == (20, 32, 32_768, 900.0)
    assert c.synthesis_reserve_tokens == 4_096
    assert (c.persist_threshold_chars, c.persist_preview_chars) == (16_384, 1_500)
    assert (c.extract_max_chars, c.extract_refeed, c.image_search_refeed, c.reverse_search_refeed) == (5_000, 5, 4, 5)
    assert c.reverse_search_max_vision_tokens == 512 and c.code_refeed == 5
    assert c.loop_guard_repeats == 2 and c.overlong_regenerations == 1


def test_image_found_by_search_is_refed_and_cited(tmp_path, memory_backend):
    policy = ScriptedPolicy([
        tool_call_text("web_search_for_image", {"query": "eiffel tower", "num": 6}, think="look"),
        "<think>the second image shows it</think><response>Paris <IMG: search_image_2.png></response>",
    ])
    rec = run(policy, memory_backend, tmp_path)
    assert rec.status == "answered" and rec.trainable
    assert rec.final_response.startswith("Paris")
    assert rec.cited_images == ["search_image_2.png"]
    # six images registered, only four re-fed (Table 4)
    assert [i.filename for i in rec.images] == [f"search_image_{i}.png" for i in range(1, 7)]
    tool_msg = rec.messages[3]
    assert tool_msg.role == "tool" and tool_msg.image_refs() == [f"search_image_{i}.png" for i in range(1, 5)]
    # the second model call saw those images
    second_ctx = policy.calls[1]["messages"]
    assert [r for m in second_ctx for r in m.image_refs()] == [f"search_image_{i}.png" for i in range(1, 5)]
    assert (tmp_path / "ws" / "search_image_2.png").read_bytes()[:4] == b"\x89PNG"
    assert rec.images[1].sha256 and rec.images[1].tool == "web_search_for_image" and rec.images[1].turn == 1


def test_user_images_registered_and_in_prompt(tmp_path, memory_backend):
    img = tmp_path / "q.png"
    img.write_bytes(png_bytes())
    policy = ScriptedPolicy([ANSWER])
    rec = run(policy, memory_backend, tmp_path, task=Task(id="t", question="What?", input_images=[str(img)]))
    user = rec.messages[1]
    assert user.image_refs() == ["user_image_1.png"]
    assert "Registered image paths:\n- user_image_1: user_image_1.png" in user.text()
    assert rec.images[0].kind == "user_image"


def test_corrupt_user_image_ends_with_error_and_record(tmp_path, memory_backend):
    img = tmp_path / "q.png"
    img.write_bytes(b"not an image")
    rec = run(ScriptedPolicy([ANSWER]), memory_backend, tmp_path, task=Task(id="t", question="?", input_images=[str(img)]))
    assert rec.status == "error" and "cannot decode image" in rec.error and not rec.trainable


def test_turn_budget_then_synthesis_turn(tmp_path, memory_backend):
    cfg = HarnessConfig(max_turns=3)
    script = [tool_call_text("web_search", {"query": f"q{i}"}) for i in range(3)] + [ANSWER]
    policy = ScriptedPolicy(script)
    rec = run(policy, memory_backend, tmp_path, cfg)
    assert rec.status == "max_turns_synthesis" and rec.final_response == "Paris" and rec.trainable
    assert rec.tool_calls == 3 and rec.turns == 4
    assert policy.calls[-1]["tools"] == []  # tools disabled in the synthesis turn
    assert rec.messages[-2].intervention and "Tools are now disabled" in rec.messages[-2].text()
    assert any(e.type == "synthesis_requested" and e.detail["reason"] == "max_turns" for e in rec.events)


def test_paper_turn_budget_is_20_plus_one(tmp_path, memory_backend):
    script = [tool_call_text("web_search", {"query": f"q{i}"}) for i in range(20)] + [ANSWER]
    rec = run(ScriptedPolicy(script), memory_backend, tmp_path)
    assert rec.turns == 21 and rec.tool_calls == 20 and rec.status == "max_turns_synthesis"


def test_synthesis_without_complete_response_is_not_trainable(tmp_path, memory_backend):
    cfg = HarnessConfig(max_turns=1)
    rec = run(ScriptedPolicy([tool_call_text("web_search", {"query": "a"}), "<think>x</think><response>unfinished"]),
              memory_backend, tmp_path, cfg)
    assert rec.status == "max_turns_synthesis" and rec.final_response is None and not rec.trainable
    assert any(e.type == "synthesis_incomplete" for e in rec.events)


def test_call_budget_32(tmp_path, memory_backend):
    cfg = HarnessConfig(max_turns=40)
    script = [tool_call_text("web_search", {"query": f"q{i}"}) for i in range(32)] + [ANSWER]
    rec = run(ScriptedPolicy(script), memory_backend, tmp_path, cfg)
    assert rec.tool_calls == 32 and rec.status == "max_turns_synthesis"
    assert any(e.type == "synthesis_requested" and e.detail["reason"] == "max_calls" for e in rec.events)


def test_early_synthesis_when_4096_or_fewer_tokens_remain(tmp_path, memory_backend):
    # CharTokenCounter: 4 chars per token. Fill the context so that <= 4,096 tokens remain.
    long_q = "x " * 2 * (32_768 - 4_096 - 1_300)
    policy = ScriptedPolicy([ANSWER])
    rec = run(policy, memory_backend, tmp_path, task=Task(id="t", question=long_q))
    assert rec.status == "max_turns_synthesis" and rec.turns == 1
    assert any(e.type == "synthesis_requested" and e.detail["reason"] == "context" for e in rec.events)
    assert policy.calls[0]["tools"] == []


def test_prompt_over_context_ends_in_context_limit_and_is_saved(tmp_path, memory_backend):
    huge = "word " * 40_000  # ~50k tokens with the char counter
    rec = run(ScriptedPolicy([ANSWER]), memory_backend, tmp_path, task=Task(id="t", question=huge))
    assert rec.status == "context_limit" and not rec.trainable and rec.messages


def test_model_context_smaller_than_budget_is_respected(tmp_path, memory_backend):
    policy = ScriptedPolicy([ANSWER], max_context_tokens=500)
    rec = run(policy, memory_backend, tmp_path, task=Task(id="t", question="q " * 2000))
    assert rec.status == "context_limit"


def test_wall_clock_budget(tmp_path, memory_backend):
    cfg = HarnessConfig(wall_clock_s=0.3)
    policy = ScriptedPolicy([tool_call_text("web_search", {"query": f"q{i}"}) for i in range(20)], latency_s=0.1)
    rec = run(policy, memory_backend, tmp_path, cfg)
    assert rec.status == "wall_clock" and not rec.trainable
    assert rec.timings.wall_s < 1.0


def test_overlong_response_regenerated_once(tmp_path, memory_backend):
    long = AssistantTurn(text="blah " * 100, finish_reason="length", usage=Usage(completion_tokens=4097))
    policy = ScriptedPolicy([long, ANSWER])
    rec = run(policy, memory_backend, tmp_path)
    assert rec.status == "answered" and len(policy.calls) == 2 and rec.turns == 1
    ev = [e for e in rec.events if e.type == "overlong_regenerated"]
    assert len(ev) == 1 and ev[0].detail["completion_tokens"] == 4097
    assert all("blah" not in m.text() for m in rec.messages)  # the discarded response is not in the trajectory


def test_overlong_twice_is_kept_once_and_not_regenerated_again(tmp_path, memory_backend):
    long = AssistantTurn(text="blah", finish_reason="length", usage=Usage(completion_tokens=5000))
    policy = ScriptedPolicy([long, long, ANSWER])
    rec = run(policy, memory_backend, tmp_path)
    assert [e.type for e in rec.events].count("overlong_regenerated") == 1
    assert any(e.type == "overlong_kept" for e in rec.events)
    assert rec.status == "answered" and len(policy.calls) == 3


def test_max_tokens_is_the_response_limit(tmp_path, memory_backend):
    policy = ScriptedPolicy([ANSWER])
    run(policy, memory_backend, tmp_path)
    assert policy.calls[0]["sampling"].max_tokens == 4_096


def test_duplicate_of_previous_executed_call_is_suppressed(tmp_path, memory_backend):
    call = tool_call_text("web_search", {"query": "eiffel", "num": 3})
    same_canonical = tool_call_text("web_search", {"num": 3, "query": ["eiffel  "]})
    policy = ScriptedPolicy([call, same_canonical, tool_call_text("web_search", {"query": "other"}), call, ANSWER])
    rec = run(policy, memory_backend, tmp_path)
    assert [e.type for e in rec.events].count("duplicate_suppressed") == 1
    assert rec.tool_calls == 3  # the suppressed call is not executed
    assert len([c for c in memory_backend.calls if c[0] == "search"]) == 3
    dup_msg = rec.messages[5]
    assert dup_msg.intervention and "Duplicate call not executed" in dup_msg.text()


def test_loop_guard_after_two_identical_invalid_calls(tmp_path, memory_backend):
    bad = tool_call_text("web_search", {"num": 3})  # missing required query
    policy = ScriptedPolicy([bad, bad, ANSWER])
    rec = run(policy, memory_backend, tmp_path)
    types = [e.type for e in rec.events]
    assert types.count("invalid_call") == 2 and types.count("loop_guard") == 1
    first, second = rec.messages[3], rec.messages[5]
    assert json.loads(first.text())["error"] == "missing_argument" and "Loop guard" not in first.text()
    assert second.text().startswith("Loop guard") and second.intervention


def test_loop_guard_resets_after_a_valid_call(tmp_path, memory_backend):
    bad = tool_call_text("web_search", {"num": 3})
    policy = ScriptedPolicy([bad, tool_call_text("web_search", {"query": "a"}), bad, ANSWER])
    rec = run(policy, memory_backend, tmp_path)
    assert "loop_guard" not in [e.type for e in rec.events]


def test_tool_call_after_response_is_not_executed(tmp_path, memory_backend):
    text = "<think>x</think><response>Paris</response>" + tool_call_text("web_search", {"query": "a"})
    rec = run(ScriptedPolicy([text]), memory_backend, tmp_path)
    assert rec.status == "answered" and memory_backend.calls == []
    assert any(e.type == "tool_call_after_response" for e in rec.events)


def test_structured_call_with_response_is_not_executed(tmp_path, memory_backend):
    turn = structured_call("web_search", {"query": "a"}, text="<response>Paris</response>")
    rec = run(ScriptedPolicy([turn]), memory_backend, tmp_path)
    assert rec.status == "answered" and memory_backend.calls == []


def test_only_one_call_per_turn_is_executed(tmp_path, memory_backend):
    two = tool_call_text("web_search", {"query": "a"}) + tool_call_text("web_search", {"query": "b"})
    rec = run(ScriptedPolicy([two, ANSWER]), memory_backend, tmp_path)
    assert [c[1] for c in memory_backend.calls] == ["a"]
    assert any(e.type == "extra_actions_ignored" for e in rec.events)


def test_no_action_gets_format_error(tmp_path, memory_backend):
    rec = run(ScriptedPolicy(["I think it is Paris.", ANSWER]), memory_backend, tmp_path)
    assert rec.messages[3].role == "user" and rec.messages[3].intervention and "Format error" in rec.messages[3].text()
    assert rec.status == "answered"


@pytest.mark.parametrize("body,code", [
    ('{"name": "web_search", "arguments": {"query": "a"}} and more', "trailing_text"),
    ("search for eiffel tower", "non_json"),
    ('{"name": "teleport", "arguments": {}}', "unknown_tool"),
    ('{"name": "web_search", "arguments": {"query": 5}}', "bad_arguments"),
    ('{"name": "web_search", "arguments": {"query": "a", "num": 9}}', "bad_arguments"),
    ('{"name": "web_search", "arguments": {"query": ["a","b","c","d","e","f"]}}', "bad_arguments"),
    ('{"name": "web_extract", "arguments": {"goal": "x"}}', "missing_argument"),
    ('{"arguments": {"query": "a"}}', "missing_name"),
])
def test_structured_errors(tmp_path, memory_backend, body, code):
    rec = run(ScriptedPolicy([f"<tool_call>{body}</tool_call>", ANSWER]), memory_backend, tmp_path)
    obs = rec.messages[3]
    assert obs.role == "tool" and obs.intervention
    assert json.loads(obs.text())["error"] == code
    assert rec.status == "answered" and memory_backend.calls == []


def test_argument_repair_aliases_scalar_to_list_and_extra_fields(tmp_path, memory_backend):
    call = '<tool_call>{"name": "Fetch", "arguments": {"url": "https://example.org/eiffel", "verbose": true}}</tool_call>'
    rec = run(ScriptedPolicy([call, ANSWER]), memory_backend, tmp_path)
    assert memory_backend.calls == [("fetch", "https://example.org/eiffel")]
    rep = [e for e in rec.events if e.type == "argument_repair"][0].detail["repairs"]
    assert "tool_name:Fetch->web_extract" in rep and "param_alias:url->urls" in rep
    assert "scalar_to_list:urls" in rep and "ignored_field:verbose" in rep
    assert rec.messages[3].image_refs() == ["page_image_1.png"]


def test_serialization_repair(tmp_path, memory_backend):
    call = "<tool_call>{'name': 'web_search', 'arguments': {'query': 'eiffel',}}</tool_call>"
    rec = run(ScriptedPolicy([call, ANSWER]), memory_backend, tmp_path)
    assert memory_backend.calls == [("search", "eiffel", 3)]
    assert "json_serialization_repaired" in [e for e in rec.events if e.type == "argument_repair"][0].detail["repairs"]


def test_results_over_16384_chars_are_persisted_with_1500_char_preview(tmp_path, memory_backend):
    cfg = HarnessConfig()
    code = "print('a' * 20000)"
    policy = ScriptedPolicy([tool_call_text("execute_code", {"code": code}), ANSWER])
    rec = run(policy, memory_backend, tmp_path, cfg)
    obs = rec.messages[3].text()
    ev = [e for e in rec.events if e.type == "result_persisted"][0]
    assert obs[:1500] == ("stdout:\n" + "a" * 20000)[:1500]
    assert "saved as tool_results/turn01_execute_code.txt" in obs and len(obs) < 1700
    assert (tmp_path / "ws" / ev.detail["file"]).read_text().count("a") >= 20000


def test_reverse_search_thumbnails_limited_to_512_vision_tokens(tmp_path, memory_backend):
    img = tmp_path / "q.png"
    img.write_bytes(png_bytes())
    policy = ScriptedPolicy([tool_call_text("web_search_based_on_image", {"image": "user_image_1.png"}), ANSWER])
    rec = run(policy, memory_backend, tmp_path, task=Task(id="t", question="?", input_images=[str(img)]))
    thumb = rec.images[1]
    assert (thumb.width // 28) * (thumb.height // 28) <= 512 and thumb.width * thumb.height <= 512 * 28 * 28
    assert "Knowledge graph match: Eiffel Tower" in rec.messages[3].text()


@pytest.mark.parametrize("ref", ["/etc/passwd", "../user_image_1.png", "user_image_9.png", "C:\\x.png"])
def test_bad_image_refs_are_structured_errors(tmp_path, memory_backend, ref):
    img = tmp_path / "q.png"
    img.write_bytes(png_bytes())
    policy = ScriptedPolicy([tool_call_text("web_search_based_on_image", {"image": ref}), ANSWER])
    rec = run(policy, memory_backend, tmp_path, task=Task(id="t", question="?", input_images=[str(img)]))
    obs = json.loads(rec.messages[3].text())
    assert obs["error"] == "bad_image_ref" and obs["registered"] == ["user_image_1.png"]
    assert memory_backend.calls == []


def test_backend_failure_is_an_observation(tmp_path, memory_backend):
    rec = run(ScriptedPolicy([tool_call_text("web_search", {"query": "fail"}), ANSWER]), memory_backend, tmp_path)
    assert json.loads(rec.messages[3].text())["error"] == "backend_error"
    assert rec.status == "answered" and rec.tool_calls == 1


def test_corrupt_search_image_is_reported_not_registered(tmp_path, memory_backend):
    rec = run(ScriptedPolicy([tool_call_text("web_search_for_image", {"query": "corrupt", "num": 2}), ANSWER]),
              memory_backend, tmp_path)
    assert "[Image 1] (not saved: cannot decode image" in rec.messages[3].text()
    assert [i.filename for i in rec.images] == ["search_image_1.png"]
    assert any(e.type == "image_rejected" for e in rec.events)


def test_policy_failure_keeps_record(tmp_path, memory_backend):
    class Broken(ScriptedPolicy):
        async def generate(self, *a, **k):
            raise PolicyError("connection refused")

    rec = run(Broken([]), memory_backend, tmp_path)
    assert rec.status == "error" and "connection refused" in rec.error


def test_unknown_citation_is_recorded(tmp_path, memory_backend):
    rec = run(ScriptedPolicy(["<response>x <IMG: nothing.png></response>"]), memory_backend, tmp_path)
    assert rec.cited_images == [] and rec.uncited_refs == ["nothing.png"]


def test_no_refeed_ablation_hides_tool_images_from_later_turns(tmp_path, memory_backend):
    policy = ScriptedPolicy([tool_call_text("web_search_for_image", {"query": "x", "num": 2}), ANSWER])
    rec = run(policy, memory_backend, tmp_path, HarnessConfig(refeed_images=False))
    assert rec.messages[3].image_refs() == ["search_image_1.png", "search_image_2.png"]  # kept in the record
    assert [r for m in policy.calls[1]["messages"] for r in m.image_refs()] == []
    assert "images saved but not shown" in policy.calls[1]["messages"][3].text()


def test_system_prompt_is_table6(tmp_path, memory_backend):
    rec = run(ScriptedPolicy([ANSWER]), memory_backend, tmp_path)
    sp = rec.messages[0].text()
    assert "Current date and time (Beijing Time, UTC+8): " in sp and sp.split("UTC+8): ")[1][14:16] == "00"
    assert '"name": "web_search_based_on_image"' in sp and "Never emit a tool call" in sp


def test_every_message_and_record_roundtrips_json(tmp_path, memory_backend):
    from kit.harness.episode import EpisodeRecord

    rec = run(ScriptedPolicy([tool_call_text("web_search_for_image", {"query": "x"}), ANSWER]), memory_backend, tmp_path)
    again = EpisodeRecord.model_validate_json(rec.model_dump_json())
    assert again == rec


def test_a_persisted_preview_names_no_tool_the_run_lacks(tmp_path, memory_backend):
    """Issue 27: without execute_code (POINTS-Seeker's tool set, a user's tools_enabled) the preview does not tell
    the model to read the file with a tool it does not have."""
    cfg = HarnessConfig(tools_enabled=["web_search"], persist_threshold_chars=100, persist_preview_chars=50)
    policy = ScriptedPolicy([tool_call_text("web_search", {"query": "eiffel tower"}), ANSWER])
    rec = run(policy, memory_backend, tmp_path, cfg)
    obs = rec.messages[3].text()
    assert [e.type for e in rec.events].count("result_persisted") == 1
    assert "execute_code" not in obs and "only this preview is available" in obs
