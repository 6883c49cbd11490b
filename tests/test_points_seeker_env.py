"""POINTS-Seeker's environment (POINTS-Seeker §4.1 "Tools", §3.2.2 grammar, §5 / App. A.4 budgets,
App. C.2 once-per-sample image search) and the tool-set registry; the WeAgent default path unchanged."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.harness.parsing import parse_turn
from kit.harness.prompts import SYSTEM_PROMPT, system_prompt
from kit.harness.summarize import ExtractiveSummarizer
from kit.harness.tool_spec import ToolSpec, tool
from kit.harness.toolsets import register_tool_set, tool_set, tool_sets
from kit.harness.toolsets.points_seeker import points_seeker_config, points_seeker_tools
from kit.paths import zim_paths
from kit.policy.scripted import ScriptedPolicy, tool_call_text
from kit.rl.rewards import format_ok, tool_ok
from tests.conftest import MemoryBackend, png_bytes

COVER = "I/m/RaysCharle_Live_albumcover_.jpg"  # shown on six pages of the two Ray Charles archives


@pytest.fixture(scope="module")
def local_web(data_dir):
    from kit.web.zim import LocalZimWeb

    return LocalZimWeb(zim_paths(data_dir))


class CountingSummarizer(ExtractiveSummarizer):
    """The offline summarizer, recording each call's goal and cap (the tools must use the harness's)."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str | None, int]] = []

    async def summarize(self, markdown, *, goal, max_chars, title=""):
        self.calls.append((goal, max_chars))
        return await super().summarize(markdown, goal=goal, max_chars=max_chars, title=title)


def _cover(local_web, tmp_path):
    arch = next(a for a in local_web.archives if a.file.name.startswith("wikipedia_en_ray_charles_2015"))
    _, data = arch.read(arch.entry(COVER))
    path = tmp_path / "cover.jpg"
    path.write_bytes(data)
    return path


def _script(messages, tools):
    """web_search, image_search, image_search again, visit (a page the image search found), answer."""
    n = sum(m.role == "assistant" for m in messages)
    if n == 0:
        return tool_call_text("web_search", {"query": "Ray Charles live album"}, think="Search the web first.")
    if n == 1:
        return tool_call_text("image_search", {"goal": "which album cover is this"}, think="Search by the image.")
    if n == 2:
        return tool_call_text("image_search", {"goal": "recording date"}, think="Once more.")
    if n == 3:
        found = next(m.text() for m in messages if "## Image search" in m.text())
        url = re.search(r"URL: (zim://\S+)", found).group(1)
        return tool_call_text("visit", {"url": url, "goal": "when the album was recorded"}, think="Read the page.")
    return "<think>The pages name the album.</think>\n<answer>Ray Charles Live</answer>"


def test_points_seeker_episode_on_the_local_web(tmp_path, local_web):
    summarizer = CountingSummarizer()
    policy = ScriptedPolicy(_script)
    h = Harness(policy, local_web, points_seeker_config(prompt_time="2026-01-01T12:00:00+08:00"),
                summarizer=summarizer, tools=tool_set("points_seeker"))
    task = Task(id="ps", question="Which album is on this cover?", input_images=[str(_cover(local_web, tmp_path))])
    rec = asyncio.run(h.run(task, tmp_path / "ws"))
    assert rec.status == "answered" and rec.trainable, rec.error
    assert rec.final_response == "Ray Charles Live"
    # the model was offered exactly the three tools, under POINTS-Seeker's prompt and grammar
    assert [t["function"]["name"] for t in policy.calls[0]["tools"]] == ["web_search", "image_search", "visit"]
    prompt = rec.messages[0].text()
    assert "<answer>...</answer>" in prompt and "<tool_response>" in prompt and "<response>" not in prompt
    obs = [m for m in rec.messages if m.role == "tool"]
    assert [m.name for m in obs] == ["web_search", "image_search", "image_search", "visit"]
    # web_search: the top 10 (title, URL, snippet)
    assert len(re.findall(r"^\d+\. ", obs[0].text(), re.M)) == 10 and obs[0].text().count("URL: zim://") == 10
    # image_search: five pages, each fetched and summarized for the goal by the harness's summarizer
    first = obs[1].text()
    assert first.count("URL: zim://") == 5 and first.count("Summary:") == 5 and "Error" not in first
    assert summarizer.calls[:5] == [("which album cover is this", 2_000)] * 5
    # ... at most once per sample: the second call is a structured observation, not a search
    refusal = json.loads(obs[2].text())
    assert refusal["error"] == "tool_limit" and refusal["limit"] == 1 and refusal["used_at_turns"] == [2]
    assert [e.detail["code"] for e in rec.events if e.type == "tool_error"] == ["tool_limit"]
    # visit: one page, summarized for its goal
    assert "URL: zim://" in obs[3].text() and summarizer.calls[5] == ("when the album was recorded", 5_000)
    assert len(summarizer.calls) == 6
    # the format term reads <answer> under this protocol (and not under WeAgent's)
    assert format_ok(rec, all_turns=True, protocol="points_seeker") and tool_ok(rec)
    assert not format_ok(rec, all_turns=True)


def test_points_seeker_budgets_and_harness_messages(tmp_path):
    cfg = points_seeker_config()
    assert (cfg.max_turns, cfg.max_context_tokens, cfg.tools_enabled, cfg.protocol) == (10, 32_768, [], "points_seeker")
    # turns without an action get corrections and the loop guard in the <answer> grammar; the no-tool
    # synthesis turn after the last turn is kept with a complete <answer>
    script = ["no action", "still none", "<think>x</think><answer>Paris</answer> trailing"]
    cfg = points_seeker_config(max_turns=2, self_recovery=True)  # WeAgent's rules: the labelled ablation
    rec = asyncio.run(Harness(ScriptedPolicy(script), MemoryBackend(), cfg, tools=tool_set("points_seeker"))
                      .run(Task(id="t", question="q"), tmp_path / "ws"))
    notes = [m.text() for m in rec.messages if m.role == "user" and m.intervention]
    assert len(notes) == 3 and all("<answer>...</answer>" in n and "<response>" not in n for n in notes)
    assert "Loop guard" in notes[1]
    assert rec.status == "max_turns_synthesis" and rec.final_response == "Paris"


def test_the_paper_environment_stops_at_ten_turns_with_no_weagent_rule(tmp_path):
    """POINTS-Seeker §3.2.4: the rollout "halts upon generating an answer or reaching a turn limit (e.g., 10)". No
    WeAgent recovery rule and no tool-free synthesis turn (both raised long-horizon scores, issue 26)."""
    from kit.vfold import points_seeker_config as vfold_env

    cfg = points_seeker_config()
    assert cfg.self_recovery is False and vfold_env() == cfg  # kit.vfold's is POINTS-Seeker's, not WeAgent's
    assert (cfg.max_turns, cfg.tool_set, cfg.context_strategy) == (10, "points_seeker", "vfold")

    def always_search(messages, tools):
        return tool_call_text("web_search", {"query": f"q{len(messages)}"})

    rec = asyncio.run(Harness(ScriptedPolicy(always_search), MemoryBackend(), cfg, tools=tool_set("points_seeker"))
                      .run(Task(id="t", question="q"), tmp_path / "a"))
    assert (rec.status, rec.turns, rec.final_response) == ("budget_exhausted", 10, None)
    assert not any(m.intervention for m in rec.messages)  # no synthesis prompt, no correction
    rec = asyncio.run(Harness(ScriptedPolicy(["no action"]), MemoryBackend(), cfg, tools=tool_set("points_seeker"))
                      .run(Task(id="t", question="q"), tmp_path / "b"))
    assert rec.turns == 1 and not any(m.intervention for m in rec.messages)  # no format prompt: the rollout ends


def test_image_search_without_a_question_image_and_with_a_non_question_image(tmp_path):
    script = [tool_call_text("image_search", {"goal": "who"}), "<think>x</think><answer>none</answer>"]
    rec = asyncio.run(Harness(ScriptedPolicy(script), MemoryBackend(), points_seeker_config(),
                              tools=tool_set("points_seeker")).run(Task(id="t", question="q"), tmp_path / "a"))
    assert json.loads(rec.messages[3].text())["error"] == "no_query_image"
    img = tmp_path / "q.png"
    img.write_bytes(png_bytes(size=(300, 200)))
    backend = MemoryBackend()
    script = [tool_call_text("image_search", {"goal": "who", "image": "search_image_1.png"}),
              tool_call_text("image_search", {"goal": "who"}), "<think>x</think><answer>Eiffel Tower</answer>"]
    rec = asyncio.run(Harness(ScriptedPolicy(script), backend, points_seeker_config(), tools=tool_set("points_seeker"))
                      .run(Task(id="t", question="q", input_images=[str(img)]), tmp_path / "b"))
    assert json.loads(rec.messages[3].text())["error"] == "bad_image_ref"  # not registered: no call used up
    text = rec.messages[5].text()  # the real search: the memory backend's one page, fetched and summarized
    assert "Image search: user_image_1.png" in text and "Eiffel Tower" in text and "Summary:" in text
    assert ("reverse_image_search", len(img.read_bytes()), 5) in backend.calls


def test_tool_set_registry_and_its_errors():
    assert {"weagent_mmsearch", "points_seeker"} <= set(tool_sets())
    assert [t.name for t in tool_set("weagent_mmsearch")] == list(HarnessConfig().tools_enabled)
    with pytest.raises(ValueError, match=r"unknown tool set 'nope'; known tool sets: \[.*'points_seeker'"):
        tool_set("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_tool_set("points_seeker", points_seeker_tools())
    with pytest.raises(ValueError, match="is empty"):
        register_tool_set("empty_set", [])
    with pytest.raises(TypeError, match="not ToolSpec"):
        register_tool_set("bad_set", ["web_search"])
    ps = points_seeker_tools()
    with pytest.raises(ValueError, match="more than once"):
        register_tool_set("twice_set", [ps[0], ps[0]])

    @tool(aliases=("visit_page",))
    def reader(ctx, url: str) -> str:
        """Reads a page."""
        return url

    with pytest.raises(ValueError, match="'visit' clashes with 'reader'"):  # argument repair could not tell them apart
        register_tool_set("clash_set", [ps[2], reader])
    with pytest.raises(ValueError, match="integers >= 1"):
        points_seeker_tools(web_top_k=0)
    # a set is a fresh list, and the tools are ToolSpecs with the paper's top-k in their descriptions
    assert tool_set("points_seeker") is not tool_set("points_seeker")
    assert all(isinstance(t, ToolSpec) for t in ps) and "top 10" in ps[0].description and "top 5" in ps[1].description
    # POINTS-Seeker's web_search reuses a native name: offered only with the natives left out of tools_enabled
    with pytest.raises(ValueError, match="leave 'web_search' out of tools_enabled"):
        Harness(ScriptedPolicy([]), MemoryBackend(), HarnessConfig(), tools=tool_set("points_seeker"))


def test_weagent_default_path_unchanged(tmp_path):
    cfg = HarnessConfig()
    assert cfg.protocol == "weagent_mmsearch"
    schemas = [{"type": "function", "function": {"name": "x", "description": "d", "parameters": {}}}]
    assert system_prompt(schemas, now=None).startswith(SYSTEM_PROMPT.split("{")[0])
    assert "<response>...</response>" in system_prompt(schemas) and "<answer>" not in system_prompt(schemas)
    # <answer> is no answer in the WeAgent grammar, and <response> none in POINTS-Seeker's
    assert parse_turn("<think>a</think><answer>x</answer>").response is None
    assert parse_turn("<think>a</think><response>x</response>").response == "x"
    ps = parse_turn("<think>a</think><answer>x</answer>", answer_tag="answer")
    assert ps.response == "x" and ps.response_complete and not ps.departures
    assert parse_turn("<think>a</think><response>x</response>", answer_tag="answer").response is None
    # a tool call inside an unclosed <answer> is read no further than the turn's end, as for <response>
    cut = parse_turn('<think>a</think><answer>x <tool_call>{"name": "visit"', answer_tag="answer")
    assert cut.response is not None and not cut.response_complete
    with pytest.raises(ValueError, match="unknown turn protocol"):
        system_prompt(schemas, protocol="nope")
    with pytest.raises(ValueError):
        HarnessConfig(protocol="nope")
    rec = asyncio.run(Harness(ScriptedPolicy(["<think>a</think><response>Paris</response>"]), MemoryBackend(), cfg)
                      .run(Task(id="t", question="q"), tmp_path / "ws"))
    assert rec.status == "answered" and rec.final_response == "Paris" and format_ok(rec)
    assert [t["function"]["name"] for t in [s.schema() for s in Harness(ScriptedPolicy([]), MemoryBackend()).specs.values()]] \
        == cfg.tools_enabled
