"""Hostile and broken input found by attacking the harness: each case ends in a structured
observation or a clear error, and the episode record is always returned and serializable."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.loop import Harness
from kit.harness.runner import read_episodes, run_batch
from kit.policy.scripted import ScriptedPolicy, structured_call, tool_call_text
from tests.conftest import MemoryBackend, png_bytes

ANSWER = "<response>done</response>"


def run(script, tmp_path, task=None, config=None, backend=None):
    h = Harness(ScriptedPolicy(script, completion_tokens=10), backend or MemoryBackend(), config or HarnessConfig())
    rec = asyncio.run(h.run(task or Task(id="t", question="q"), tmp_path / "ws"))
    EpisodeRecord.model_validate_json(rec.model_dump_json())  # always serializable
    return rec


def with_image(tmp_path, size=(64, 48)):
    img = tmp_path / "q.png"
    img.write_bytes(png_bytes(size=size))
    return Task(id="t", question="q", input_images=[str(img)])


def test_task_ids_cannot_escape_the_run_folder(tmp_path):
    (tmp_path / "keep.txt").write_text("precious")
    h = Harness(ScriptedPolicy(lambda m, t: ANSWER), MemoryBackend())
    tasks = [Task(id=i, question="q") for i in ["a", "..", ".", "a/../../b", "x#1"]]
    recs = asyncio.run(run_batch(h, tasks, tmp_path, progress=False))
    assert len(recs) == 5 and (tmp_path / "keep.txt").read_text() == "precious"
    assert len(read_episodes(tmp_path / "episodes.jsonl")) == 5
    for r in recs:
        assert os.path.realpath(r.workspace).startswith(os.path.realpath(tmp_path / "workspaces") + os.sep)
    with pytest.raises(ValueError, match="empty id"):
        asyncio.run(run_batch(h, [Task(id=" ", question="q")], tmp_path / "z", progress=False))


def test_symlinks_planted_by_code_are_not_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    code = f"import os\nfor i in range(1, 4): os.symlink({str(victim)!r}, f'search_image_{{i}}.png')"
    rec = run([tool_call_text("execute_code", {"code": code}),
               tool_call_text("web_search_for_image", {"query": "x", "num": 3}), ANSWER], tmp_path)
    assert victim.read_text() == "do not touch"
    assert not (tmp_path / "ws" / "search_image_1.png").is_symlink()
    assert [i.filename for i in rec.images] == ["search_image_1.png", "search_image_2.png", "search_image_3.png"]


def test_evidence_replaced_by_a_symlink_is_refused_and_hidden(tmp_path):
    code = "import os\nos.remove('user_image_1.png')\nos.symlink('/etc/hostname', 'user_image_1.png')"
    rec = run([tool_call_text("execute_code", {"code": code}),
               tool_call_text("web_search_based_on_image", {"image": "user_image_1.png"}), ANSWER],
              tmp_path, task=with_image(tmp_path))
    obs = json.loads(rec.messages[5].text())
    assert obs["error"] == "evidence_modified"
    assert any(e.type == "evidence_modified" and e.detail["image"] == "user_image_1.png" for e in rec.events)


def test_extreme_aspect_ratio_images(tmp_path):
    code = "from PIL import Image\nImage.new('RGB', (6000, 20)).save('strip.png')"
    rec = run([tool_call_text("execute_code", {"code": code}), ANSWER], tmp_path)
    assert "aspect ratio" in rec.messages[3].text() and rec.status == "answered"
    rec = run([ANSWER], tmp_path, task=with_image(tmp_path, size=(6000, 20)))
    assert rec.status == "error" and "aspect ratio" in rec.error


def test_lone_surrogates_never_make_records_unserializable(tmp_path):
    rec = run(["<think>\ud800</think>" + tool_call_text("web_search", {"query": "a\udfff"}),
               structured_call("web\ud800", {"query": "x"}), ANSWER], tmp_path,
              task=Task(id="t", question="what \ud83d?"))
    assert rec.status == "answered" and "\ufffd" in rec.task.question


def test_deeply_nested_arguments_are_a_structured_error(tmp_path):
    body = '{"name": "web_search", "arguments": {"query": ' + "[" * 5000 + "]" * 5000 + "}}"
    rec = run([f"<tool_call>{body}</tool_call>", structured_call("web_search", "[" * 100000), ANSWER], tmp_path)
    assert json.loads(rec.messages[3].text())["error"] == "non_json"
    assert json.loads(rec.messages[5].text())["error"] in ("non_json", "bad_arguments")
    assert rec.final_response == "done"  # (the 100k-character call itself fills the context: early synthesis)


@pytest.mark.parametrize("path", ["/dev/zero", "", "fifo"])
def test_input_images_must_be_regular_files(tmp_path, path):
    if path == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    rec = run([ANSWER], tmp_path, task=Task(id="t", question="q", input_images=[path]), config=HarnessConfig(wall_clock_s=5))
    assert rec.status == "error" and rec.timings.wall_s < 5


def test_workspace_that_cannot_be_created_still_returns_a_record(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    h = Harness(ScriptedPolicy([ANSWER]), MemoryBackend())
    rec = asyncio.run(h.run(Task(id="t", question="q"), f))
    assert rec.status == "error" and "FileExistsError" in rec.error


def test_tags_inside_think_are_not_actions(tmp_path):
    rec = run(["<think>format: <response>...</response></think>" + tool_call_text("web_search", {"query": "a"}),
               "<think>I will call <tool_call>{\"name\": \"web_search\", \"arguments\": {\"query\": \"b\"}}</tool_call>"
               "</think><response>final</response>"], tmp_path)
    assert rec.tool_calls == 1 and rec.final_response == "final"


def test_unclosed_think_is_no_action(tmp_path):
    rec = run(["<think>still thinking <response>x</response>", ANSWER], tmp_path)
    assert any(e.type == "no_action" for e in rec.events) and rec.final_response == "done"


class _Weird(ScriptedPolicy):
    def __init__(self, exc=None, value=None):
        super().__init__([])
        self.exc, self.value = exc, value

    async def generate(self, *a, **k):
        if self.exc:
            raise self.exc
        return self.value


@pytest.mark.parametrize("policy,needle", [(_Weird(value=None), "NoneType"), (_Weird(exc=asyncio.CancelledError()), "CancelledError"),
                                           (_Weird(exc=RuntimeError("boom")), "boom")])
def test_misbehaving_policies_end_with_error_status(tmp_path, policy, needle):
    rec = asyncio.run(Harness(policy, MemoryBackend()).run(Task(id="t", question="q"), tmp_path / "ws"))
    assert rec.status == "error" and needle in rec.error


def test_real_cancellation_propagates(tmp_path):
    async def go():
        h = Harness(ScriptedPolicy([ANSWER], latency_s=5), MemoryBackend())
        task = asyncio.create_task(h.run(Task(id="t", question="q"), tmp_path / "ws"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def test_integral_floats_and_blank_strings(tmp_path):
    b = MemoryBackend()
    rec = run([tool_call_text("web_search", {"query": "a", "num": 2.0}), tool_call_text("web_search", {"query": "   "}), ANSWER],
              tmp_path, backend=b)
    assert b.calls == [("search", "a", 2)]
    assert json.loads(rec.messages[5].text())["error"] == "bad_arguments"


def test_error_observations_are_bounded(tmp_path):
    rec = run([tool_call_text("x" * 1_000_000, {}), ANSWER], tmp_path)
    assert len(rec.messages[3].text()) < 5000


def test_no_action_loop_guard_wording(tmp_path):
    rec = run(["hmm", "hmm", ANSWER], tmp_path)
    assert "contained neither a tool call nor a final answer" in rec.messages[5].text()


def test_config_rejects_negative_budgets():
    for bad in [dict(max_turns=-1), dict(wall_clock_s=0), dict(code_refeed=-1), dict(synthesis_reserve_tokens=40000)]:
        with pytest.raises(ValueError):
            HarnessConfig(**bad)


def test_code_cwd_is_reset_and_image_count_capped(tmp_path):
    code1 = "import os\nos.chdir('/tmp')"
    code2 = ("from PIL import Image\nfor i in range(25): Image.new('RGB', (40, 40), (i, 0, 0)).save(f'im{i:02d}.png')")
    rec = run([tool_call_text("execute_code", {"code": code1}), tool_call_text("execute_code", {"code": code2}), ANSWER],
              tmp_path)
    assert len([i for i in rec.images if i.kind == "code_image"]) == 20
    assert rec.messages[5].image_refs() == [f"code_image_{i}.png" for i in range(1, 6)]
    assert any(e.type == "images_not_registered" and e.detail["count"] == 5 for e in rec.events)


def test_persisted_results_are_not_written_through_planted_symlinks(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    plant = ("import os\nos.makedirs('tool_results', exist_ok=True)\n"
             f"os.symlink({str(victim)!r}, 'tool_results/turn02_execute_code.txt')")
    cfg = HarnessConfig(code_isolation="rlimits")  # the unsandboxed fallback: the harness itself must refuse
    rec = run([tool_call_text("execute_code", {"code": plant}), tool_call_text("execute_code", {"code": "print('a' * 20000)"}),
               ANSWER], tmp_path, config=cfg)
    assert victim.read_text() == "do not touch"
    obs = json.loads(rec.messages[5].text())
    assert obs["error"] == "persist_failed" and obs["preview"].startswith("stdout:\naaa")  # ELOOP, reported
    assert any(e.type == "persist_failed" for e in rec.events)
    assert rec.status == "answered"
