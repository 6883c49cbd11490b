"""Named tool sets: the tools one paper's agent is given, on top of the open tool registry.

A tool set is a list of :class:`~kit.harness.tool_spec.ToolSpec` under a name. Built in:
``"weagent_mmsearch"`` (the five native tools of WeAgent Table 4, :mod:`.weagent`) and
``"points_seeker"`` (POINTS-Seeker §4.1's web_search / image_search / visit, :mod:`.points_seeker`).
A set is offered to one harness as extra tools::

    from kit.harness.toolsets import tool_set
    from kit.harness.toolsets.points_seeker import points_seeker_config
    Harness(policy, backend, points_seeker_config(), tools=tool_set("points_seeker"))

(``points_seeker_config`` disables the native tools, whose names POINTS-Seeker's reuse, and selects its
10-turn / 32k protocol.) Add a set with :func:`register_tool_set`; docs/tools.md "Tool sets".
"""

from __future__ import annotations

from collections.abc import Iterable

from kit.harness.tool_spec import ToolSpec
from kit.harness.tools import _check_clashes

_SETS: dict[str, tuple[ToolSpec, ...]] = {}


def register_tool_set(name: str, specs: Iterable[ToolSpec], *, replace: bool = False) -> list[ToolSpec]:
    """Register ``specs`` as the tool set ``name``; returns them as a list.

    Raises:
        ValueError: ``name`` is not a non-empty string, is taken and ``replace`` is False, the set is
            empty, two of its tools share a name, or one tool's name or aliases clash with another's
            (argument repair could not tell them apart).
        TypeError: an item is not a :class:`ToolSpec`.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a tool set needs a non-empty name, got {name!r}")
    if name in _SETS and not replace:
        raise ValueError(f"a tool set named {name!r} is already registered (pass replace=True)")
    specs = list(specs)
    bad = [s for s in specs if not isinstance(s, ToolSpec)]
    if bad:
        raise TypeError(f"tool set {name!r}: {[type(b).__name__ for b in bad[:5]]} are not ToolSpec "
                        "(make one with kit.harness.tool_spec.tool or ToolSpec(...))")
    if not specs:
        raise ValueError(f"tool set {name!r} is empty")
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"tool set {name!r} names {twice} more than once")
    for i, s in enumerate(specs):
        _check_clashes(s, specs[i + 1:])
    _SETS[name] = tuple(specs)
    return list(specs)


def tool_set(name: str) -> list[ToolSpec]:
    """The tools of the set ``name`` (a new list each call), for ``Harness(..., tools=...)``.

    Raises:
        ValueError: an unknown name (the message lists the known sets).
    """
    try:
        return list(_SETS[name])
    except (KeyError, TypeError):
        raise ValueError(f"unknown tool set {name!r}; known tool sets: {tool_sets()}") from None


def tool_sets() -> list[str]:
    """The registered tool-set names, sorted."""
    return sorted(_SETS)


def config_tool_specs(config, extra: Iterable[ToolSpec] = ()) -> dict[str, ToolSpec]:
    """Every tool an episode under ``config`` (a :class:`~kit.harness.config.HarnessConfig`) is offered, by
    name: its enabled native tools, its ``tool_set``'s tools, then ``extra`` (the harness's own ``tools=``).
    The harness, the RL trainer, verl and the SFT encoders use it, so the schemas a model is trained on are
    the ones it is given.

    Raises:
        ValueError: an unknown tool set or native name, or two tools that clash (:func:`kit.harness.tools.tool_specs`).
    """
    from kit.harness.tools import tool_specs

    added = [*(tool_set(config.tool_set) if config.tool_set else []), *extra]
    return tool_specs(config.tools_enabled, extra=added)


def _register_builtin() -> None:
    from kit.harness.toolsets.points_seeker import points_seeker_tools
    from kit.harness.toolsets.weagent import weagent_tools

    register_tool_set("weagent_mmsearch", weagent_tools())
    register_tool_set("points_seeker", points_seeker_tools())


_register_builtin()

__all__ = ["config_tool_specs", "register_tool_set", "tool_set", "tool_sets"]
