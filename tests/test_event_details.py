"""Typed event details (kit/harness/event_details.py, issue 30 part 4): one model per event type; an event
written in code with a misspelt key fails there; records already on disk still load, byte for byte."""

from __future__ import annotations

import json
import pathlib
import subprocess
import types
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import TypeAdapter, ValidationError

from kit.harness.episode import EpisodeRecord, Event
from kit.harness.event_details import (
    DETAIL_MODELS,
    AnyDetail,
    OpenDetail,
    ToolErrorDetail,
    check_detail,
    detail_model,
    parse_detail,
)
from kit.harness.events import EventType
from kit.harness.runner import read_episodes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _committed(pattern: str) -> list[pathlib.Path]:
    try:
        out = subprocess.run(["git", "ls-files", "results"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        names = [n for n in out.split() if n.endswith(pattern)]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: what is on disk
        names = [str(p.relative_to(ROOT)) for p in (ROOT / "results").rglob(f"*{pattern}")]
    return [ROOT / n for n in sorted(names) if (ROOT / n).exists()]


EPISODE_FILES = _committed("episodes.jsonl")


def _sample(annotation: Any) -> Any:
    """A value of ``annotation`` (the field types the detail models use)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Any:
        return "v"
    if origin in (Union, types.UnionType):
        return _sample(next(a for a in args if a is not type(None)))
    if origin is list:
        return [_sample(args[0])]
    if origin is dict:
        return {"k": 1}
    return {str: "x", int: 2, bool: True}[annotation]


def _full_detail(type_: str) -> dict[str, Any]:
    model = DETAIL_MODELS[type_]
    return {k: _sample(f.annotation) for k, f in model.model_fields.items() if k != "type"}


def test_every_event_type_has_a_detail_model():
    """A type added to EventType needs its model in kit/harness/event_details.py (until then it falls back
    to the permissive OpenDetail)."""
    missing = sorted(t.value for t in EventType if t.value not in DETAIL_MODELS)
    assert not missing, f"event types without a detail model (add one to kit/harness/event_details.py): {missing}"
    assert set(DETAIL_MODELS) == {t.value for t in EventType}


def test_a_type_without_a_model_falls_back_to_the_open_model():
    assert detail_model("a_type_added_later") is OpenDetail
    check_detail("a_type_added_later", {"anything": 1})  # accepted
    d = parse_detail("a_type_added_later", {"anything": 1})
    assert d.to_detail() == {"anything": 1}


@pytest.mark.parametrize("type_", sorted(DETAIL_MODELS))
def test_each_model_round_trips(type_):
    """Written with every declared key: accepted, typed access gives each value back, the union picks the
    model by ``type``, and the JSON written is the detail as given (what was written before the models)."""
    detail = _full_detail(type_)
    e = Event(type=type_, turn=3, detail=detail)
    assert e.details.to_detail() == detail
    assert type(e.details) is DETAIL_MODELS[type_]
    for k, v in detail.items():
        assert getattr(e.details, k) == v
    parsed = TypeAdapter(AnyDetail).validate_python({"type": type_, **detail})
    assert type(parsed) is DETAIL_MODELS[type_] and parsed.to_detail() == detail
    assert e.model_dump_json() == json.dumps({"type": type_, "turn": 3, "detail": detail}, separators=(",", ":"))
    assert Event.model_validate_json(e.model_dump_json()) == e


def test_a_misspelt_key_fails_where_the_kit_writes_it():
    with pytest.raises(ValidationError, match="mesage"):
        Event(type=EventType.TOOL_ERROR, turn=1, detail={"tool": "web_search", "code": "timeout", "mesage": "slow"})
    with pytest.raises(ValidationError, match="'tool'"):  # a value of the wrong type
        Event(type=EventType.TOOL_ERROR, turn=1, detail={"tool": 3, "code": "timeout", "message": "slow"})
    Event(type=EventType.TOOL_ERROR, turn=1, detail={"tool": "web_search", "code": "timeout", "message": "slow"})


def test_a_tool_recording_a_misspelt_key_fails_in_ctx_event():
    from kit.harness.tool_spec import ToolContext

    ctx = ToolContext(registry=None, backend=None, config=None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="tol"):
        ctx.event(EventType.IMAGE_REJECTED, tol="web_search", reason="bad")
    ctx.event(EventType.TOOL_NOTE, name="mine", anything=[1, 2])  # a tool's own note takes any keys
    assert ctx.events[-1].details.name == "mine"


def test_old_records_load_leniently():
    """A record written with other keys (an older kit, another tool) loads, and typed access tolerates it."""
    line = json.dumps({"type": "tool_error", "turn": 2, "detail": {"tool": "x", "old_key": 1}})
    e = Event.model_validate_json(line)
    assert e.detail == {"tool": "x", "old_key": 1}
    assert isinstance(e.details, ToolErrorDetail) and e.details.tool == "x" and e.details.code is None
    rec = EpisodeRecord.model_validate({"id": "a", "task": {"id": "a", "question": "q"}, "config_hash": "h",
                                        "events": [json.loads(line), {"type": "loop_guard", "turn": 1}]})
    assert [ev.details.type for ev in rec.events] == ["tool_error", "loop_guard"]


def test_there_are_committed_episode_files():
    assert EPISODE_FILES, "no committed results/**/episodes.jsonl found"


@pytest.mark.parametrize("path", EPISODE_FILES, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_every_committed_episodes_file_loads(path):
    """Each record loads, each event's typed view works, each event re-serializes byte for byte, and every
    detail the kit wrote passes today's write check (the models accept what the kit writes)."""
    records = read_episodes(path)
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(records) == len(raw)
    for rec, stored in zip(records, raw, strict=True):
        assert len(rec.events) == len(stored["events"])
        for ev, sev in zip(rec.events, stored["events"], strict=True):
            assert ev.details.type == ev.type
            assert ev.details.to_detail() == sev["detail"]
            assert ev.model_dump_json() == json.dumps(sev, ensure_ascii=False, separators=(",", ":"))
            check_detail(ev.type, ev.detail)
