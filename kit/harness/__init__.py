"""WeAgent-Harness (WeAgent §3): tools, evidence registry, recovery rules, budgets and the episode loop.

Entry points: :class:`Harness` (one episode), :func:`run_batch` (resumable concurrent batches),
:func:`write_transcript` (HTML transcripts); :func:`tool` / :func:`register_tool` add a tool
(docs/tools.md); :class:`Hook` / :class:`Decision` guard calls (docs/harness.md "Hooks"); :data:`RULES` maps
each rule to its config field and events (docs/rules.md).
Names are imported on first use, so ``import kit.harness`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit._lazy import lazy_exports

_EXPORTS = {
    "Harness": "kit.harness.loop", "HarnessConfig": "kit.harness.config", "Task": "kit.harness.episode",
    "EpisodeRecord": "kit.harness.episode", "Event": "kit.harness.episode", "EventType": "kit.harness.events",
    "RULES": "kit.harness.rules", "Rule": "kit.harness.rules", "run_batch": "kit.harness.runner",
    "summarize_records": "kit.harness.runner", "write_transcript": "kit.harness.transcript",
    "Observation": "kit.harness.tool_spec", "ToolContext": "kit.harness.tool_spec", "ToolSpec": "kit.harness.tool_spec",
    "tool": "kit.harness.tool_spec", "register_tool": "kit.harness.tools", "unregister_tool": "kit.harness.tools",
    "tool_specs": "kit.harness.tools", "ToolError": "kit.harness.errors",
    "Hook": "kit.harness.hooks", "Decision": "kit.harness.hooks", "Call": "kit.harness.hooks",
    "EpisodeView": "kit.harness.hooks",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from kit.harness.config import HarnessConfig
    from kit.harness.episode import EpisodeRecord, Event, Task
    from kit.harness.errors import ToolError
    from kit.harness.events import EventType
    from kit.harness.hooks import Call, Decision, EpisodeView, Hook
    from kit.harness.loop import Harness
    from kit.harness.rules import RULES, Rule
    from kit.harness.runner import run_batch, summarize_records
    from kit.harness.tool_spec import Observation, ToolContext, ToolSpec, tool
    from kit.harness.tools import register_tool, tool_specs, unregister_tool
    from kit.harness.transcript import write_transcript

