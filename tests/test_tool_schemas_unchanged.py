"""The tool schemas the model sees did not change when the native tools moved to ``@tool`` (issue 30,
part 3): every tool set, every profile (plain and preflight) and the default registry give, byte for
byte, the schema list (``json.dumps`` as sent for function calling) and the system prompt's TOOL_LIST
block recorded in ``tests/fixtures/tool_schemas_before.json`` before the change."""

from __future__ import annotations

import asyncio
import json
import pathlib
from datetime import datetime
from typing import Annotated
from zoneinfo import ZoneInfo

import pytest
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from kit.harness.tool_spec import ToolContext, docstring_args, tool

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "tool_schemas_before.json"
_NOW = datetime(2025, 1, 2, 3, tzinfo=ZoneInfo("Asia/Shanghai"))


def _entry(schemas: list[dict], config=None) -> dict[str, str]:
    from kit.harness.prompts import _tool_list, system_prompt

    out = {"schemas": json.dumps(schemas, ensure_ascii=False)}
    block = _tool_list(json.dumps(schemas, sort_keys=True))
    if config is not None:  # the block as rendered into this profile's system prompt
        prompt = system_prompt(schemas, untrusted_notice=config.untrusted_notice, tz=config.timezone,
                               protocol=config.protocol, tz_label=config.timezone_label, now=_NOW)
        assert block in prompt
    out["tool_block"] = block
    return out


def current_schemas() -> dict[str, dict[str, str]]:
    """``{case: {"schemas": json, "tool_block": text}}`` for every tool set, every profile (plain and
    preflight), the default registry and a POINTS-Seeker set with non-default limits."""
    from kit.harness.tools import NATIVE_TOOLS, tool_specs
    from kit.harness.toolsets import config_tool_specs, tool_set, tool_sets
    from kit.harness.toolsets.points_seeker import points_seeker_tools
    from kit.profiles import PAPER_PROFILE_NAMES, PROFILES, get_profile

    out: dict[str, dict[str, str]] = {}
    for name in tool_sets():
        out[f"tool_set:{name}"] = _entry([s.schema() for s in tool_set(name)])
    for name in PROFILES:
        for preflight in (False, True) if name in PAPER_PROFILE_NAMES else (False,):
            cfg = get_profile(name, preflight=preflight).harness()
            out[f"profile:{name}{':preflight' if preflight else ''}"] = _entry(
                [s.schema() for s in config_tool_specs(cfg).values()], cfg)
    out["natives"] = _entry([s.schema() for s in NATIVE_TOOLS.values()])
    out["registry"] = _entry([s.schema() for n, s in tool_specs().items() if n in NATIVE_TOOLS])
    out["points_seeker:custom"] = _entry([s.schema() for s in points_seeker_tools(
        web_top_k=3, image_top_k=2, image_search_max_calls=2, visit_summary_chars=900)])
    return out


_BEFORE = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}


@pytest.mark.parametrize("case", sorted(_BEFORE))
def test_schemas_and_prompt_tool_block_are_byte_identical(case):
    now = current_schemas()
    assert now[case]["schemas"] == _BEFORE[case]["schemas"]
    assert now[case]["tool_block"] == _BEFORE[case]["tool_block"]


def test_every_tool_set_and_profile_is_covered():
    assert set(current_schemas()) == set(_BEFORE)


# ---------------------------------------------------------------------------------- @tool reads Args:
def test_tool_puts_docstring_args_into_the_schema():
    """Before: the Args: section was dropped; the description stays the docstring's first paragraph and a
    Field(description=...) still wins."""
    @tool
    def lookup(ctx: ToolContext, term: str, limit: Annotated[int, Field(ge=1, description="at most this many")] = 3,
               exact: bool = False) -> str:
        """Look a term up in the glossary.

        Matches are case-insensitive.

        Args:
            ctx: the tool context
            term (str): the word to look up, as
                written in the question.
            limit: ignored here: the Field description wins
            exact: only whole-word matches
        """
        return term

    props = lookup.parameters["properties"]
    assert lookup.description == "Look a term up in the glossary."
    assert props["term"]["description"] == "the word to look up, as written in the question."
    assert props["limit"]["description"] == "at most this many"
    assert props["exact"]["description"] == "only whole-word matches"
    assert list(lookup.parameters) == ["type", "properties", "required"]  # the kit's key order
    assert list(props["limit"]) == ["type", "minimum", "default", "description"]


def test_tool_refuses_args_naming_no_parameter():
    def f(ctx: ToolContext, query: str) -> str:
        """Search.

        Args:
            qeury: misspelt
        """
        return query

    with pytest.raises(TypeError, match="qeury"):
        tool(f)


def test_optional_parameter_without_default_in_schema():
    """``X | SkipJsonSchema[None] = None``: optional, shown without a default (POINTS-Seeker's ``image``);
    the function receives None when the model leaves it out."""
    @tool
    def pick(ctx: ToolContext, name: str | SkipJsonSchema[None] = None) -> str:
        """Pick one.

        Args:
            name: which one
        """
        return repr(name)

    assert pick.parameters == {"type": "object", "properties": {"name": {"type": "string", "description": "which one"}}}
    assert asyncio.run(pick.executor({}, None)).text == "None"  # type: ignore[arg-type]


def test_docstring_args_parser():
    doc = """Do it.

    Args:
        a: first
            continued
        b (list[str]): second

        c: after a blank line
    Returns:
        nothing: not an argument
    """
    assert docstring_args(doc) == {"a": "first continued", "b": "second", "c": "after a blank line"}
    assert docstring_args("No sections.") == {}
    assert docstring_args(None) == {}


@pytest.mark.parametrize("name", ["web_search", "web_search_for_image", "web_search_based_on_image", "web_extract",
                                  "execute_code"])
def test_native_tools_are_written_with_tool(name):
    """The natives' schemas come from their typed signatures (the check that replaced reading their
    executors' ``args[...]``): each signature parameter after ctx is a schema property and nothing else."""
    import inspect

    from kit.harness import tools

    spec = tools.NATIVE_TOOLS[name]
    fn = getattr(tools, f"_{name}")
    params = list(inspect.signature(fn).parameters)[1:]
    assert list(spec.parameters["properties"]) == params
    assert getattr(tools, name) is spec.executor  # the module attribute runs the tool with (args, ctx)


def test_points_seeker_tools_are_written_with_tool():
    from kit.harness.toolsets.points_seeker import points_seeker_tools

    for spec in points_seeker_tools():
        assert spec.executor.__qualname__.startswith("tool.<locals>.build.<locals>.executor")
