"""Typed events and one rule map (issue 15 part 1): every event the kit writes is an ``EventType``; no event
is built from a bare string; every event type is emitted by a tested path and appears in ``RULES``; every
config field and function the map names exists; docs/rules.md is rendered from the map."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest
from pydantic import ValidationError

from kit.harness.config import HarnessConfig
from kit.harness.episode import Event, Task
from kit.harness.events import EventType
from kit.harness.loop import Harness
from kit.harness.rules import RULES, rules_for, rules_markdown
from kit.harness.tool_spec import ToolContext, tool
from kit.policy.scripted import ScriptedPolicy
from kit.types import PolicyError

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_a_run_log_line_type_outside_the_closed_set_is_refused(tmp_path):
    from kit.harness.events import RunEventType
    from kit.rl.staging import RunLog

    log = RunLog(tmp_path / "run_log.jsonl")
    assert log.write(RunEventType.STEP, 1)["type"] == "step" and log.of_type("step")
    with pytest.raises(ValueError):
        log.write("stepp", 2)
    assert len((tmp_path / "run_log.jsonl").read_text().splitlines()) == 1


def test_an_event_type_outside_the_closed_set_is_refused_where_it_is_written():
    with pytest.raises(ValidationError):
        Event(type="invalid_cal", turn=0)
    e = Event(type=EventType.INVALID_CALL, turn=1)
    assert e.type == "invalid_call" and type(e.type) is str and e.model_dump_json().startswith('{"type":"invalid_call"')


def test_no_event_is_built_from_a_bare_string_in_the_kit():
    bare = []
    for p in (ROOT / "kit").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            run_log = name == "write" and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) \
                and f.value.attr == "log"  # RunLog.write(type_, ...)
            vals = [k.value for k in node.keywords if k.arg == "type"] if name == "Event" else \
                node.args[:1] if name == "event" or run_log else []
            bare += [f"{p.relative_to(ROOT)}:{node.lineno}" for v in vals if isinstance(v, ast.Constant)]
    assert bare == []


def test_every_event_type_is_in_the_rule_map_and_emitted_by_a_tested_path():
    mapped = {e for r in RULES for e in r.events}
    assert set(EventType) - mapped == set()
    tests = {p: p.read_text() for p in (ROOT / "tests").glob("test_*.py")}
    untested = [e.value for e in EventType
                if not any(f'"{e.value}"' in t or f"EventType.{e.name}" in t for t in tests.values())]
    assert untested == []


def test_the_map_names_real_config_fields_and_functions():
    fields = set(HarnessConfig.model_fields)
    assert [c for r in RULES for c in r.config if c not in fields] == []
    assert fields - {c for r in RULES for c in r.config} == set()  # every budget and switch is on the map
    for r in RULES:
        parts = r.implementation.split(".")
        for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:i]))
                break
            except ModuleNotFoundError:
                continue
        for a in parts[i:]:
            obj = getattr(obj, a)
        assert callable(obj) or isinstance(obj, type(importlib)), r.implementation
    assert [r.name for r in rules_for("loop_guard")] == ["Repeated format errors"]


def test_docs_rules_page_is_rendered_from_the_map():
    page = ROOT / "docs" / "rules.md"
    assert page.read_text() == rules_markdown(), "regenerate docs/rules.md (see rules_markdown's docstring)"
    assert page.read_text().count("\n| ") == len(RULES) + 1  # header + one row per rule


# ------------------------------------------------------------------ paths that emit the rarer events
async def test_episode_error_and_unknown_citation_and_tool_call_in_synthesis(tmp_path, memory_backend):
    class Failing(ScriptedPolicy):
        async def generate(self, *a, **k):
            raise PolicyError("endpoint went away")

    rec = await Harness(Failing([]), memory_backend, HarnessConfig.smoke()).run(Task(id="a", question="?"), tmp_path / "a")
    assert rec.status == "error" and [e.type for e in rec.events][-1] == "episode_error"
    assert "endpoint went away" in rec.events[-1].detail["reason"]

    rec = await Harness(ScriptedPolicy(["<think>x</think><response>See <IMG: nope.png></response>"]), memory_backend,
                        HarnessConfig.smoke()).run(Task(id="b", question="?"), tmp_path / "b")
    assert [e.detail for e in rec.events if e.type == "unknown_citation"] == [{"ref": "nope.png"}]

    call = '<think>x</think><tool_call>{"name": "web_search", "arguments": {"query": "q"}}</tool_call>'
    rec = await Harness(ScriptedPolicy([call, "<think>x</think><response>Paris</response>" + call]), memory_backend,
                        HarnessConfig.smoke(max_turns=1)).run(Task(id="c", question="?"), tmp_path / "c")
    assert rec.status == "max_turns_synthesis" and rec.final_response == "Paris"
    assert [e.detail for e in rec.events if e.type == "tool_call_in_synthesis"] == [{"not_executed": 1}]


async def test_a_sandbox_that_fails_to_close_keeps_the_record(tmp_path, memory_backend):
    class Broken:
        async def close(self):
            raise OSError("bwrap already gone")

    @tool
    def opens_sandbox(ctx: ToolContext) -> str:
        """Starts a sandbox."""
        ctx.sandbox = Broken()
        return "started"

    call = '<think>x</think><tool_call>{"name": "opens_sandbox", "arguments": {}}</tool_call>'
    rec = await Harness(ScriptedPolicy([call, "<response>done</response>"]), memory_backend,
                        HarnessConfig.smoke(tools_enabled=[]), tools=[opens_sandbox]).run(Task(id="s", question="?"), tmp_path)
    assert rec.status == "answered"
    assert [e.detail for e in rec.events if e.type == EventType.SANDBOX_CLOSE_ERROR] == [{"error": "bwrap already gone"}]


def test_context_strategies_are_a_registry_and_the_harness_does_not_import_vfold():
    """The harness ↔ V-Fold import cycle is gone: kit.harness imports no kit.vfold module; the built-in
    V-Fold strategies load on first use, and a researcher's own strategy plugs in by name."""
    import subprocess
    import sys

    from kit.harness.context import ContextBuilder, make_context_builder, register_context_strategy
    from kit.policy.scripted import CharTokenCounter

    code = ("import sys, kit.harness.loop, kit.harness.runner, kit.harness.tools; "
            "print(sorted(m for m in sys.modules if m.startswith('kit.vfold')))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    for hard in (ast.parse((ROOT / "kit" / "harness" / p).read_text()) for p in ("loop.py", "context.py", "config.py")):
        mods = [n.module for n in ast.walk(hard) if isinstance(n, ast.ImportFrom) and n.col_offset == 0]
        assert not [m for m in mods if m and m.startswith("kit.vfold")]
    assert type(make_context_builder(HarnessConfig(context_strategy="vfold"), CharTokenCounter())).__name__ == "VFoldContext"

    class LastTwo(ContextBuilder):
        def build(self, messages, registry):
            return super().build(messages[:2] + messages[-2:] if len(messages) > 4 else messages, registry)

    register_context_strategy("last_two", lambda config, counter, **_: LastTwo(), needs_counter=False, replace=True)
    assert isinstance(make_context_builder(HarnessConfig(context_strategy="last_two")), LastTwo)
    with pytest.raises(ValidationError):
        HarnessConfig(context_strategy="nope")
    with pytest.raises(ValueError):
        make_context_builder(HarnessConfig(context_strategy="discard"))  # needs a token counter


def test_bad_context_strategy_registrations_are_refused():
    from kit.harness.context import ContextBuilder, make_context_builder, register_context_strategy

    for name, factory in [(None, lambda *a, **k: ContextBuilder()), ("", lambda *a, **k: ContextBuilder()),
                          ("no_factory", None)]:
        with pytest.raises(ValueError):
            register_context_strategy(name, factory)
    with pytest.raises(ValueError, match="built in"):
        register_context_strategy("vfold", lambda *a, **k: ContextBuilder())  # a built-in needs replace=True
    register_context_strategy("returns_none", lambda *a, **k: None, needs_counter=False, replace=True)
    with pytest.raises(ValueError, match="not a ContextBuilder"):
        make_context_builder(HarnessConfig(context_strategy="returns_none"))
    HarnessConfig()  # the registry is still usable


def test_a_tool_records_its_own_findings_as_a_tool_note(tmp_path, memory_backend):
    import asyncio

    @tool
    def counts(ctx: ToolContext, x: int) -> str:
        """Counts."""
        ctx.event(EventType.TOOL_NOTE, name="rows_seen", rows=x)
        with pytest.raises(ValueError, match="TOOL_NOTE"):
            ctx.event("my_metric", rows=x)
        return "ok"

    call = '<think>x</think><tool_call>{"name": "counts", "arguments": {"x": 3}}</tool_call>'
    rec = asyncio.run(Harness(ScriptedPolicy([call, "<response>done</response>"]), memory_backend,
                              HarnessConfig.smoke(tools_enabled=[]), tools=[counts]).run(Task(id="n", question="?"), tmp_path))
    assert [e.detail for e in rec.events if e.type == "tool_note"] == [{"name": "rows_seen", "rows": 3}]
