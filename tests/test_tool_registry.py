"""An open tool registry (issue 15 part 2): a sixth tool is added without editing the kit, its schema is its
typed signature, per-tool policy lives on its spec, and every recovery rule applies to it as to the five
native tools."""

from __future__ import annotations

import ast
import asyncio
import json
from typing import Annotated, Literal

import pytest
from pydantic import Field

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.harness.tool_spec import Observation, ToolContext, tool
from kit.harness.tools import NATIVE_TOOLS, register_tool, tool_specs, unregister_tool
from kit.policy.scripted import ScriptedPolicy


def call(name: str, args: dict | str) -> str:
    body = args if isinstance(args, str) else json.dumps(args)
    return f'<think>go</think><tool_call>{{"name": "{name}", "arguments": {body}}}</tool_call>'


@tool(aliases=("convert", "units"), param_aliases={"value": ("amount", "x")}, max_result_chars=400,
      refeed_limit=1)
async def unit_convert(ctx: ToolContext, value: float,
                       unit: Literal["km", "mi"] = "km",
                       digits: Annotated[int, Field(ge=0, le=6, description="decimal places")] = 2) -> str:
    """Convert a distance between kilometres and miles."""
    if value < 0:
        raise ValueError("negative distance")
    if value > 1e9:
        return "x" * 20_000  # an oversized result: the tool's own cap applies first
    if value == 999:
        await asyncio.sleep(5)
    out = value / 1.609344 if unit == "km" else value * 1.609344
    return f"{value} {unit} = {out:.{digits}f} {'mi' if unit == 'km' else 'km'}"


def test_the_schema_is_the_signature():
    p = unit_convert.parameters
    assert unit_convert.name == "unit_convert"
    assert unit_convert.description == "Convert a distance between kilometres and miles."
    assert p["required"] == ["value"] and p["properties"]["value"]["type"] == "number"
    assert p["properties"]["unit"] == {"default": "km", "enum": ["km", "mi"], "type": "string"}
    assert p["properties"]["digits"]["maximum"] == 6 and p["properties"]["digits"]["description"] == "decimal places"
    assert "title" not in json.dumps(p)  # no pydantic noise in the prompt's TOOL_LIST
    with pytest.raises(TypeError):
        tool(lambda query: query)  # no ctx
    with pytest.raises(TypeError):
        @tool
        def untyped(ctx, query):
            """x"""


def test_register_and_enable_without_editing_the_kit():
    spec = register_tool(unit_convert)
    try:
        with pytest.raises(ValueError):
            register_tool(unit_convert)  # a second registration under the same name
        assert list(tool_specs(["web_search", "unit_convert"])) == ["web_search", "unit_convert"]
        h = Harness(ScriptedPolicy([]), None, HarnessConfig.smoke(tools_enabled=["web_search", "unit_convert"]))
        assert [s["function"]["name"] for s in h.schemas] == ["web_search", "unit_convert"]
    finally:
        unregister_tool(spec.name)
    with pytest.raises(ValueError):
        tool_specs(["unit_convert"])  # gone again
    with pytest.raises(ValueError):
        register_tool(NATIVE_TOOLS["web_search"])  # natives are not replaced


async def test_a_sixth_tool_runs_through_every_recovery_rule(tmp_path, memory_backend):
    script = [
        call("convert", {"amount": 42, "unit": "km", "color": "red"}),  # alias tool + param alias + extra field
        call("unit_convert", {"value": 42, "unit": "km"}),  # duplicate of the executed call: not run
        call("unit_convert", {"unit": "km"}),  # missing required value
        call("unit_convert", {"unit": "km"}),  # the same invalid call again: loop guard
        call("unit_convert", {"value": 3, "digits": 9}),  # out of the declared range
        '<think>go</think><tool_call>{"name": "unit_convert", "arguments": {"value": 5, "unit": "m',  # cut: never run
        call("unit_convert", {"value": -1}),  # the function raises: a structured tool error
        call("unit_convert", {"value": 1e10}),  # over the tool's own result cap
        call("unit_convert", {"value": 999}),  # slower than the tool timeout
        "<think>done</think><response>26.10 mi</response>",
    ]
    cfg = HarnessConfig.smoke(max_turns=12, max_calls=12, tools_enabled=["web_search"], tool_timeout_s=0.5)
    policy = ScriptedPolicy(script)
    rec = await Harness(policy, memory_backend, cfg, tools=[unit_convert]).run(Task(id="t", question="42 km?"), tmp_path)
    assert rec.status == "answered" and rec.final_response == "26.10 mi"
    obs = [m.text() for m in rec.messages if m.role == "tool"]
    assert obs[0] == "42.0 km = 26.10 mi"
    ev = [(e.type, e.detail) for e in rec.events]
    types = [t for t, _ in ev]
    repairs = next(d for t, d in ev if t == "argument_repair")["repairs"]
    assert {"tool_name:convert->unit_convert", "param_alias:amount->value", "ignored_field:color"} <= set(repairs)
    assert types.count("duplicate_suppressed") == 1 and "Duplicate call not executed" in obs[1]
    codes = [d["code"] for t, d in ev if t == "invalid_call"]
    assert codes == ["missing_argument", "missing_argument", "bad_arguments", "truncated"]
    assert types.count("loop_guard") == 1 and obs[3].startswith("Loop guard")
    errors = [d for t, d in ev if t == "tool_error"]
    assert [e["code"] for e in errors] == ["tool_failure", "timeout"] and "negative distance" in errors[0]["message"]
    capped = next(d for t, d in ev if t == "result_capped")
    assert capped == {"tool": "unit_convert", "chars": 20_000, "cap": 400} and len(obs[7]) < 500
    assert rec.tool_calls == 4  # executed: the first, -1, 1e10, 999
    # the model was offered the sixth tool's schema on every tool turn
    assert all([s["function"]["name"] for s in c["tools"]] == ["web_search", "unit_convert"] for c in policy.calls)


async def test_persistence_and_refeed_limits_are_the_tools_policy(tmp_path, memory_backend):
    @tool(refeed_limit=1)
    def pictures(ctx: ToolContext, n: int) -> Observation:
        """Make n small pictures."""
        import io

        from PIL import Image

        names = []
        for i in range(n):
            buf = io.BytesIO()
            Image.new("RGB", (64, 48), (40 * i, 90, 200)).save(buf, "PNG")
            names.append(ctx.registry.register_bytes(buf.getvalue(), "search_image", tool="pictures", turn=ctx.turn).filename)
        return Observation(text="y" * 20_000, images=names)

    @tool(persist_exempt=True)
    def long_page(ctx: ToolContext) -> str:
        """A long page."""
        return "z" * 20_000

    cfg = HarnessConfig.smoke(tools_enabled=[])
    rec = await Harness(ScriptedPolicy([call("pictures", {"n": 3}), call("long_page", {}), "<response>ok</response>"]),
                        memory_backend, cfg, tools=[pictures, long_page]).run(Task(id="p", question="?"), tmp_path)
    tool_msgs = [m for m in rec.messages if m.role == "tool"]
    assert len(tool_msgs[0].image_refs()) == 1  # re-feed limit 1 of 3 registered
    shown = next(e for e in rec.events if e.type == "images_not_shown")
    assert shown.detail["shown"] == 1 and len(shown.detail["not_shown"]) == 2 and len(rec.images) == 3
    persisted = [e.detail["tool"] for e in rec.events if e.type == "result_persisted"]
    assert persisted == ["pictures"] and len(tool_msgs[1].text()) == 20_000  # exempt: kept whole
    assert (tmp_path / "tool_results" / "turn01_pictures.txt").read_text() == "y" * 20_000


def test_a_harness_tool_may_not_shadow_an_enabled_one():
    @tool(name="web_search")
    def web_search(ctx: ToolContext, query: str) -> str:
        """Another search."""
        return query

    with pytest.raises(ValueError):
        Harness(ScriptedPolicy([]), None, HarnessConfig.smoke(), tools=[web_search])


async def test_the_docs_sixth_tool_example_runs_as_written(tmp_path, memory_backend, monkeypatch):
    """docs/tools.md's example is executed verbatim (top-level await, as in a notebook cell), with a model
    that writes the alias and the aliased argument."""
    import pathlib
    import re

    page = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "tools.md").read_text()
    code = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    assert len([ln for ln in code.splitlines() if ln.strip()]) <= 20
    monkeypatch.chdir(tmp_path)
    ns = {"policy": ScriptedPolicy([call("convert", {"amount": 42.195, "unit": "km"}), "<response>26.22 miles</response>"]),
          "backend": memory_backend}
    await eval(compile(code, "docs/tools.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), ns)
    rec = ns["record"]
    assert rec.status == "answered" and [m.text() for m in rec.messages if m.role == "tool"] == ["42.195 km = 26.22 mi"]
    assert [s["function"]["name"] for s in ns["harness"].schemas][-1] == "unit_convert"


def test_bad_tool_definitions_are_refused_where_the_tool_is_defined():
    """Attack findings: every policy field, name and signature problem is an error at definition, not an
    episode ending in ``error`` after the tool ran."""
    import functools
    import math

    def ok(ctx: ToolContext, x: int) -> str:
        """A tool."""
        return str(x)

    for kw in [dict(refeed_limit="no_such_field"), dict(refeed_limit="timezone"), dict(refeed_limit=-1),
               dict(refeed_limit=1.5), dict(timeout_s=0), dict(timeout_s=-5), dict(timeout_s=math.nan),
               dict(max_result_chars=1.5), dict(max_result_chars=True), dict(aliases="conv"),
               dict(name="größe"), dict(name="1tool"), dict(name="x" * 65), dict(name="my tool")]:
        with pytest.raises((ValueError, TypeError)):
            tool(ok, **kw)
    with pytest.raises(ValueError):
        from kit.harness.tool_spec import ToolSpec
        ToolSpec("t", "d", {"type": "object", "properties": {}}, ok, persist_exempt="no")

    def bad_default(ctx: ToolContext, n: int = "three") -> str:
        """d"""
        return ""

    def private(ctx: ToolContext, _x: int) -> str:
        """d"""
        return ""

    def positional(ctx: ToolContext, x: int, /) -> str:
        """d"""
        return ""

    for f in (bad_default, private, positional):
        with pytest.raises(TypeError):
            tool(f)
    with pytest.raises(TypeError):
        tool(functools.partial(ok))  # no __name__: name=... is needed
    assert tool(functools.partial(ok), name="ok_partial").name == "ok_partial"
    assert tool(ok, name="My-Tool_2").name == "My-Tool_2"


def test_names_may_not_clash_with_another_tools_spellings():
    @tool
    def search(ctx: ToolContext, query: str) -> str:  # "search" is an alias of web_search
        """Another search."""
        return query

    with pytest.raises(ValueError, match="clashes with 'web_search'"):
        register_tool(search)
    with pytest.raises(ValueError, match="clashes"):
        Harness(ScriptedPolicy([]), None, HarnessConfig.smoke(), tools=[search])
    import dataclasses

    with pytest.raises(ValueError, match="clashes with 'web_search'"):
        register_tool(dataclasses.replace(unit_convert, name="Web_Search", aliases=()))  # case and separators


async def test_bad_observations_become_structured_tool_errors(tmp_path, memory_backend):
    """A tool returning None/bytes text, a non-Observation, unregistered image names, raising CancelledError, or a
    ToolError with non-JSON detail gets a tool_error observation; the episode goes on."""
    import numpy as np

    from kit.harness.errors import ToolError
    from kit.harness.tool_spec import ToolSpec

    @tool
    def none_text(ctx: ToolContext, x: int) -> Observation:
        """d"""
        return Observation(text=None)

    @tool
    def ghost_images(ctx: ToolContext, x: int) -> Observation:
        """d"""
        return Observation(text="see", images=["nope.png", "/etc/hostname"])

    @tool
    async def cancels(ctx: ToolContext, x: int) -> str:
        """d"""
        raise asyncio.CancelledError()

    @tool
    def numpy_detail(ctx: ToolContext, x: int) -> str:
        """d"""
        raise ToolError("not_found", "no row", rows=np.int64(0))

    async def raw(args, ctx):
        return "a str, not an Observation"

    raw_spec = ToolSpec("raw_tool", "d", {"type": "object", "properties": {"x": {"type": "integer"}}}, raw)
    tools = [none_text, ghost_images, cancels, numpy_detail, raw_spec]
    script = [call(t.name, {"x": 1}) for t in tools] + ["<response>done</response>"]
    rec = await Harness(ScriptedPolicy(script), memory_backend, HarnessConfig.smoke(max_turns=8, tools_enabled=[]),
                        tools=tools).run(Task(id="b", question="?"), tmp_path)
    assert rec.status == "answered", rec.error
    errors = [(e.detail["tool"], e.detail["code"]) for e in rec.events if e.type == "tool_error"]
    assert errors == [("none_text", "bad_observation"), ("ghost_images", "bad_observation"),
                      ("cancels", "tool_failure"), ("numpy_detail", "not_found"), ("raw_tool", "bad_observation")]
    tool_msgs = [m for m in rec.messages if m.role == "tool"]
    assert all(m.image_refs() == [] for m in tool_msgs) and '"rows": 0' in tool_msgs[3].text()
    assert rec.trainable
