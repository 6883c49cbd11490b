"""Per-turn view model of one episode: messages grouped by turn, tool calls decoded, events placed on
their turn (docs/viewer.md).

Tool calls are decoded with the harness's own parser (:func:`kit.harness.parsing.parse_turn`), so a
call the model wrote as ``<tool_call>`` JSON in its text (in-process Qwen models, WeAgent Table 6) shows
as the same structured call (name, arguments, repairs, error) as one that came by function calling.
An :class:`~kit.harness.episode.Event` is shown on the turn of its ``turn`` field; a turn that has
events but no message still gets a block, so no event is lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kit.harness.episode import EpisodeRecord, Event
from kit.harness.parsing import RawCall, parse_turn
from kit.types import Message


@dataclass
class CallView:
    """One decoded tool call: ``source`` is ``"function calling"`` or ``"parsed from text"``;
    ``arguments`` the decoded argument dict (None when it could not be decoded, then ``error``)."""

    name: str
    source: str
    arguments: dict[str, Any] | None
    raw: str
    error: str | None = None
    message: str = ""
    repairs: list[str] = field(default_factory=list)
    executed: bool = True  # False for calls after the response or past the first (not run, Table 6)

    def argument_rows(self) -> list[tuple[str, str]]:
        """(name, value) rows; a non-string value is shown as indented JSON."""
        return [(k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, indent=1))
                for k, v in (self.arguments or {}).items()]


@dataclass
class MessageView:
    message: Message
    think: str | None = None
    response: str | None = None
    calls: list[CallView] = field(default_factory=list)


@dataclass
class TurnView:
    turn: int
    messages: list[MessageView] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


def _call_view(c: RawCall, executed: bool) -> CallView:
    return CallView(name=c.name or "(no name)", source="function calling" if c.source == "structured" else "parsed from text",
                    arguments=c.arguments, raw=c.raw, error=c.error, message=c.message, repairs=list(c.repairs),
                    executed=executed)


def message_view(m: Message) -> MessageView:
    """Decode an assistant message's think / calls / response; other roles pass through."""
    if m.role != "assistant":
        return MessageView(m)
    text = m.text()
    # POINTS-Seeker's protocol answers in <answer> (kit.harness.prompts.PROTOCOLS)
    tag = "answer" if "<answer>" in text and "<response>" not in text else "response"
    p = parse_turn(text, m.tool_calls, answer_tag=tag)
    calls = [_call_view(c, i == 0) for i, c in enumerate(p.calls)]
    calls += [_call_view(c, False) for c in p.calls_after_response]
    return MessageView(m, think=p.think, response=p.response, calls=calls)


def turn_views(rec: EpisodeRecord) -> list[TurnView]:
    """The episode's turns in order: each with its messages (decoded) and the events recorded on it."""
    turns: dict[int, TurnView] = {}
    for m in rec.messages:
        turns.setdefault(m.turn, TurnView(m.turn)).messages.append(message_view(m))
    for e in rec.events:
        turns.setdefault(e.turn, TurnView(e.turn)).events.append(e)
    return [turns[k] for k in sorted(turns)]


__all__ = ["CallView", "MessageView", "TurnView", "message_view", "turn_views"]
