"""Adapter for chat-format agent trajectories (Metis, OpenSearch-VL, REDSearcher releases).

These sources publish trajectories as chat messages: ``messages`` (a list, or a JSON string of
one) of ``{"role", "content"}``, where content is a string or a list of ``{"type": "text"|"image"}``
parts, and images in a parallel ``images`` column (base64 strings, raw bytes, ``{"bytes": ...}``
dicts or file paths) consumed in order by ``<image>`` placeholders or image parts. Assistant turns
carry structured ``tool_calls`` or Qwen-style ``<tool_call>{json}</tool_call>`` text, reasoning in
``<think>`` (or a ``reasoning_content`` field) and the final answer in ``<answer>``/``<response>``
tags or as plain text (several ``<answer>`` blocks in a turn: the last complete one, event
``multiple_responses``). Observations come as ``tool`` messages or as user turns wrapped in
``<tool_response>``. Every assistant turn is rewritten to a canonical form; each tool name gets the
source prefix. The row's reference is the first of :data:`REFERENCE_KEYS` present (``answer``,
``ground_truth``, ``label``, ``solution``; ``metadata["reference_field"]`` names it); the record's
correctness is the rule judge's verdict on the trajectory's own final answer
(``metadata["correct"]``, labels ``correct`` / ``incorrect`` / ``unjudged``). Only a judged-correct
trajectory is trainable: an unjudged one (no reference) never is. Long observations are persisted
as the harness does (WeAgent Table 5). An observation no call asked for is kept as a tool message
and marked (event ``observation_without_call``); a call with no observation gets none (event
``observation_missing``, still counted in ``tool_calls``); either makes the record untrainable and
is a label. Workspaces are named safely from the row id (never a path). Images may be base64
(line breaks allowed), data URLs, bytes, PIL images, paths, or ``{"bytes"|"path"|"url"}`` objects
(an ``http(s)`` URL is ``image_missing``: nothing is fetched); a string images column is one image.

The column layout was checked against the Metis-ColdStart viewer (``messages`` JSON string,
``images`` base64). REDSearcher publishes its SFT sets for ms-swift (github.com/RedSearchAgent/REDSearcher:
``honglyhly/REDSearcher_MM_SFT_5K`` multimodal, ``Zchu/REDSearcher_SFT_10K`` text; its RL prompts
``Zchu/REDSearcher_RL_1K`` are ``prompt`` + ``label`` rows, not trajectories), so the adapter also reads
ms-swift's agent layout (``tool_call`` messages holding ``{"name", "arguments"}`` JSON after the
assistant's thinking, ``tool_response`` observations) and ShareGPT ``conversations`` of
``{"from", "value"}`` (human / gpt / function_call / observation). :class:`ChatSource` lets a user remap
the columns (``messages_key``, ``images_key``) if a release differs.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.data.normalize.base import (
    NormalizeError,
    canonical_call,
    canonical_response,
    dedupe_answers,
    judge_label,
    persist_observation,
    safe_workspace,
    store_image,
    text_msg,
)
from kit.data.normalize.trainable import untrainable_reasons
from kit.harness.episode import EpisodeRecord, Event, RegisteredImage, Task
from kit.harness.events import EventType
from kit.types import ContentPart, Message

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_ANSWER = re.compile(r"<(answer|response)>(.*?)</\1>", re.S)
_TOOL_RESP = re.compile(r"^\s*<tool_response>(.*?)(?:</tool_response>\s*)?$", re.S)
RULE_MODE = "contains"  # the kit's default rule judge: releases' answers are free text
#: Columns that hold the reference answer in the releases (the first present one is used).
REFERENCE_KEYS = ("answer", "ground_truth", "label", "solution")


@dataclass(frozen=True)
class ChatSource:
    """One chat-format source: name, namespace prefix, hub id(s) and column keys."""

    name: str
    prefix: str
    hub_ids: tuple[str, ...]
    messages_key: str = "messages"
    images_key: str = "images"


METIS = ChatSource("metis", "METIS_", ("Accio-Lab/Metis-ColdStart",))
OPENSEARCH_VL = ChatSource("opensearch_vl", "OSVL_", ("OpenSearch-VL/Search-VL-SFT-36K", "OpenSearch-VL/Search-VL-RL-8K"))
REDSEARCHER = ChatSource("redsearcher", "RED_", ("honglyhly/REDSearcher_MM_SFT_5K", "Zchu/REDSearcher_SFT_10K"))
#: ShareGPT speaker names -> roles (``from``/``value`` messages in a ``conversations`` column).
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system",
                  "function_call": "tool_call", "observation": "tool_response", "tool": "tool_response"}


def _image_column(value: Any) -> list:
    """The images column as a list: a list/tuple as is, a JSON-list string parsed, one string (a
    path, base64 or a data URL) or one object as a one-item list (never split into characters)."""
    if value is None:
        return []
    if isinstance(value, str):
        if value.strip().startswith("["):
            try:
                parsed = json.loads(value)
            except (json.JSONDecodeError, RecursionError):
                parsed = None
            if isinstance(parsed, list):
                return parsed
        return [value] if value.strip() else []
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist"):  # numpy arrays from parquet
        return list(value.tolist())
    return [value]


def _image_bytes(item: Any) -> bytes:
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    if hasattr(item, "save") and hasattr(item, "size"):  # a PIL image (a decoded ``datasets.Image`` column)
        import io

        buf = io.BytesIO()
        try:
            item.save(buf, format=getattr(item, "format", None) or "PNG")
        except (OSError, ValueError, KeyError) as e:
            raise NormalizeError("image_unreadable", f"cannot re-encode a decoded image: {e}") from e
        return buf.getvalue()
    if isinstance(item, dict):
        if item.get("bytes") is not None:
            return _image_bytes(item["bytes"])
        ref = item.get("path") or item.get("url") or item.get("image_url")
        if isinstance(ref, dict):  # OpenAI-style {"image_url": {"url": ...}}
            ref = ref.get("url")
        if ref:
            if isinstance(ref, str) and ref.startswith(("http://", "https://")):
                raise NormalizeError("image_missing", f"{ref[:120]}: remote images are not fetched (offline)")
            return _image_bytes(ref)
    if isinstance(item, str):
        s = item.split(",", 1)[1] if item.startswith("data:") else item
        if item.startswith("data:") or len(s) > 256 or not Path(s).suffix:
            try:  # MIME base64 wraps lines: whitespace is not data
                return base64.b64decode("".join(s.split()), validate=True)
            except (binascii.Error, ValueError) as e:
                raise NormalizeError("image_unreadable", f"not base64: {e}") from e
        p = Path(s)
        if p.is_file():
            return p.read_bytes()
        raise NormalizeError("image_missing", s[:120])
    raise NormalizeError("image_unreadable", f"unsupported image item {type(item).__name__}")


@dataclass
class _Walk:
    """The state of one trajectory being read: what is built so far and the calls awaiting an observation."""

    ws: Path
    images: list
    used: int = 0
    msgs: list[Message] = field(default_factory=list)
    regs: list[RegisteredImage] = field(default_factory=list)
    final: str | None = None
    question: str = ""
    pending: list[tuple[str, int]] = field(default_factory=list)  # (tool name, turn)
    n_calls: int = 0
    events: list[Event] = field(default_factory=list)
    turn: int = 0


def _content_parts(content: Any, j: int) -> list[ContentPart]:
    """Message ``j``'s content as parts; each ``<image>`` placeholder or image part is an ``<image>`` slot."""
    parts: list[ContentPart] = []
    if isinstance(content, list):
        for p in content:
            if isinstance(p, dict) and p.get("type") in ("image", "image_url"):
                parts.append(ContentPart(type="image", image="<image>"))
            elif isinstance(p, dict) and p.get("type") == "text":
                parts.append(ContentPart(type="text", text=str(p.get("text", ""))))
    elif isinstance(content, str) or content is None:
        text = content or ""
        for k, seg in enumerate(text.split("<image>")):
            if k:
                parts.append(ContentPart(type="image", image="<image>"))
            if seg:
                parts.append(ContentPart(type="text", text=seg))
    else:
        raise NormalizeError("bad_message", f"message {j} content is {type(content).__name__}")
    return parts


class ChatAdapter:
    """Chat-format trajectories -> :class:`EpisodeRecord` (see module docstring).

    ``to_episode`` raises :class:`NormalizeError` with reasons ``missing_messages``,
    ``unparsable_json``, ``bad_message``, ``no_user_turn``, ``no_assistant_turn``, ``bad_tool_call``,
    ``parallel_tool_calls``, ``image_count_mismatch``, ``image_missing``, ``image_unreadable``.
    """

    def __init__(self, spec: ChatSource):
        self.spec = spec
        self.source = spec.name
        self.prefix = spec.prefix
        self._tools: dict[str, dict] = {}

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Schemas of the namespaced tools seen so far (argument names from the calls)."""
        return list(self._tools.values())

    def _note_tool(self, name: str, args: dict) -> None:
        if name not in self._tools:
            self._tools[name] = {"type": "function", "function": {
                "name": name, "description": f"{self.source} tool {name[len(self.prefix):]}",
                "parameters": {"type": "object", "properties": {k: {"type": "string"} for k in args}, "required": []}}}

    def _calls(self, m: dict, text: str) -> list[tuple[str, dict]]:
        out = []
        for c in m.get("tool_calls") or []:
            fn = c.get("function", c) if isinstance(c, dict) else None
            if not isinstance(fn, dict) or not fn.get("name"):
                raise NormalizeError("bad_tool_call", str(c)[:200])
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError as e:
                    raise NormalizeError("bad_tool_call", f"arguments are not JSON: {e}") from e
            out.append((str(fn["name"]), args if isinstance(args, dict) else {"input": args}))
        for body in _CALL.findall(text):
            try:
                obj = json.loads(body)
            except json.JSONDecodeError as e:
                raise NormalizeError("bad_tool_call", f"<tool_call> is not JSON: {e}") from e
            if not isinstance(obj, dict) or not obj.get("name"):
                raise NormalizeError("bad_tool_call", body[:200])
            args = obj.get("arguments", obj.get("parameters", {}))
            out.append((str(obj["name"]), args if isinstance(args, dict) else {"input": args}))
        return out

    @staticmethod
    def _standard(raw: list) -> list:
        """ShareGPT and ms-swift agent messages -> ``{"role", "content", "tool_calls"?}``: each
        ``tool_call`` message joins the assistant turn before it (a second one makes the turn
        parallel), ``tool_response`` becomes a tool observation."""
        out: list = []
        for j, m in enumerate(raw):
            if not isinstance(m, dict):
                out.append(m)  # rejected with its position below
                continue
            role = m.get("role") or SHAREGPT_ROLES.get(str(m.get("from", "")).lower())
            content = m.get("content", m.get("value"))
            if role == "tool_call":
                try:
                    call = json.loads(content) if isinstance(content, str) else content
                except json.JSONDecodeError as e:
                    raise NormalizeError("bad_tool_call", f"message {j}: tool_call is not JSON: {e}") from e
                prev = out[-1] if out and isinstance(out[-1], dict) else None
                if prev is not None and prev.get("role") == "assistant" and not _CALL.search(str(prev.get("content") or "")) \
                        and not _ANSWER.search(str(prev.get("content") or "")):
                    prev["tool_calls"] = list(prev.get("tool_calls") or []) + [call]
                else:
                    out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            elif role == "tool_response":
                out.append({"role": "tool", "content": content})
            else:
                out.append({**m, "role": role, "content": content})
        return out

    def to_episode(self, row: dict[str, Any], index: int, workspace_root: Path) -> EpisodeRecord:
        raw = self._standard(self._raw_messages(row))
        rid = f"{self.source}-{row.get('id', index)}"
        w = _Walk(safe_workspace(workspace_root, rid), _image_column(row.get(self.spec.images_key)))  # never a path
        for j, m in enumerate(raw):
            self._step(w, j, m)
        self._missing(w.pending, w.events)
        if not w.question:
            raise NormalizeError("no_user_turn", rid)
        if w.turn == 0:
            raise NormalizeError("no_assistant_turn", rid)
        if w.used != len(w.images):
            raise NormalizeError("image_count_mismatch", f"{len(w.images)} images, {w.used} placeholders")
        ref_key = next((k for k in REFERENCE_KEYS if row.get(k) not in (None, "", [])), None)
        answers = dedupe_answers(row.get(ref_key)) if ref_key else []
        msgs, events, final = w.msgs, w.events, w.final
        ok = final is not None and msgs[-1].role == "assistant"
        # correctness: the rule judge on the trajectory's own answer; no reference -> unjudged
        correct, judge = judge_label(final, answers, RULE_MODE)
        meta: dict[str, Any] = {k: row[k] for k in ("id", "source", "data_source") if k in row}
        meta.update({"correct": correct, "judge": judge, "rule_mode": RULE_MODE, "reference_field": ref_key})
        kinds = {e.type for e in events}
        # context that is not a call/observation pair as it happened is kept and marked, never trained on
        untrainable: list[str] = [t for t in (EventType.OBSERVATION_MISSING, EventType.OBSERVATION_WITHOUT_CALL) if t in kinds]
        untrainable += untrainable_reasons(msgs, events)  # a persisted preview; a placeholder the encoder refuses
        return EpisodeRecord(
            id=rid, task=Task(id=rid, question=w.question, answers=answers, source=self.source, metadata=meta),
            config_hash=f"source:{self.source}", policy=self.source, backend=f"source:{self.source}", messages=msgs,
            images=w.regs, final_response=final, events=events, status="answered" if ok else "error",
            error=None if ok else "trajectory does not end with an answer",
            trainable=ok and correct is True and not untrainable, turns=w.turn, tool_calls=w.n_calls, workspace=str(w.ws),
            labels=[self.source, {True: "correct", False: "incorrect", None: "unjudged"}[correct]] + untrainable)

    def _raw_messages(self, row: dict[str, Any]) -> list:
        """The row's messages list (``messages_key``, else ShareGPT ``conversations``; a JSON string parsed)."""
        key = self.spec.messages_key if self.spec.messages_key in row or "conversations" not in row else "conversations"
        raw = row.get(key)
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as e:
                raise NormalizeError("unparsable_json", str(e)) from e
        if not isinstance(raw, list) or not raw:
            raise NormalizeError("missing_messages", f"no {self.spec.messages_key!r} (or 'conversations') list")
        return raw

    def _step(self, w: _Walk, j: int, m: Any) -> None:
        """Message ``j`` of the trajectory, by role, into the walk ``w``."""
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool", "function"):
            raise NormalizeError("bad_message", f"message {j}: {str(m)[:120]}")
        role = m["role"]
        fixed = self._store_images(w, _content_parts(m.get("content"), j), role, j)
        text = "".join(p.text or "" for p in fixed if p.type == "text")
        if role == "system":
            w.msgs.append(Message(role="system", content=fixed or [ContentPart(type="text", text="")]))
        elif role == "user" and (wrapped := _TOOL_RESP.match(text)):
            self._wrapped_observation(w, j, wrapped, fixed)
        elif role == "user":
            if not w.question:
                w.question = text.strip()
            w.msgs.append(Message(role="user", content=fixed, turn=w.turn))
        elif role in ("tool", "function"):
            self._tool_message(w, j, m, fixed)
        else:
            self._assistant(w, m, text)

    @staticmethod
    def _store_images(w: _Walk, parts: list[ContentPart], role: str, j: int) -> list[ContentPart]:
        """``parts`` with each image slot filled by the next image of the row, stored in the workspace."""
        fixed = []
        for p in parts:
            if p.type == "image":
                if w.used >= len(w.images):
                    raise NormalizeError("image_count_mismatch", f"more image slots than {len(w.images)} images")
                kind = "user_image" if role == "user" and not w.msgs or (role == "user" and j <= 2) else "search_image"
                reg = store_image(_image_bytes(w.images[w.used]), w.ws, f"{kind}_{w.used + 1}")
                w.used += 1
                w.regs.append(reg)
                fixed.append(ContentPart(type="image", image=reg.filename))
            else:
                fixed.append(p)
        return fixed

    def _wrapped_observation(self, w: _Walk, j: int, wrapped: re.Match, fixed: list[ContentPart]) -> None:
        """A user turn wrapped in ``<tool_response>``: the observation of the pending call."""
        if not w.pending:  # an observation no call asked for: keep it as one, say so
            w.events.append(Event(type=EventType.OBSERVATION_WITHOUT_CALL, turn=w.turn, detail={"message": j}))
        name = w.pending.pop(0)[0] if w.pending else f"{self.prefix}tool"
        obs = wrapped.group(1).strip()
        imgs = [p for p in fixed if p.type == "image"]
        obs = self._persist(obs, w.ws, w.turn, name, w.events, self._reader())
        w.msgs.append(Message(role="tool", name=name, tool_call_id=f"call_{w.turn}", turn=w.turn,
                              content=imgs + [ContentPart(type="text", text=obs)]))

    def _tool_message(self, w: _Walk, j: int, m: dict, fixed: list[ContentPart]) -> None:
        """A ``tool`` / ``function`` message: the observation of the pending call (long text persisted)."""
        if not w.pending:  # the source has an observation no call asked for: keep it, say so
            w.events.append(Event(type=EventType.OBSERVATION_WITHOUT_CALL, turn=w.turn, detail={"message": j}))
        name = w.pending.pop(0)[0] if w.pending else f"{self.prefix}{m.get('name', 'tool')}"
        fixed = [ContentPart(type="text", text=self._persist(p.text or "", w.ws, w.turn, name, w.events, self._reader()))
                 if p.type == "text" else p for p in fixed]
        w.msgs.append(Message(role="tool", name=name, tool_call_id=f"call_{w.turn}", turn=w.turn,
                              content=fixed or [ContentPart(type="text", text="")]))

    def _assistant(self, w: _Walk, m: dict, text: str) -> None:
        """An assistant turn: its one call (now pending) or its answer, rewritten to the canonical form."""
        self._missing(w.pending, w.events)
        w.turn += 1
        th = _THINK.search(text)
        think = th.group(1) if th else str(m.get("reasoning_content") or "")
        calls = self._calls(m, text)
        if len(calls) > 1:
            raise NormalizeError("parallel_tool_calls", f"turn {w.turn} has {len(calls)} calls")
        if calls:
            name, args = calls[0]
            name = self.prefix + name
            self._note_tool(name, args)
            w.pending = [(name, w.turn)]
            w.n_calls += 1
            w.msgs.append(text_msg("assistant", canonical_call(think, name, args), turn=w.turn))
            return
        tags = [t for _, t in _ANSWER.findall(text)]
        if len(tags) > 1:  # the harness rule: the last complete block wins, and it is an event
            w.events.append(Event(type=EventType.MULTIPLE_RESPONSES, turn=w.turn, detail={
                "count": len(tags), "kept": "last", "dropped": [t.strip()[:200] for t in tags[:-1]]}))
        ans = tags[-1] if tags else _THINK.sub("", text).strip()
        if not ans:
            raise NormalizeError("bad_message", f"assistant turn {w.turn} has neither a call nor an answer")
        w.final = ans.strip()
        w.msgs.append(text_msg("assistant", canonical_response(think, w.final), turn=w.turn))

    @staticmethod
    def _missing(pending: list[tuple[str, int]], events: list) -> None:
        """Calls still awaiting an observation when the next assistant turn (or the end) comes: the
        source records no result for them (event ``observation_missing``; nothing is invented)."""
        for name, t in pending:
            events.append(Event(type=EventType.OBSERVATION_MISSING, turn=t, detail={
                "tool": name, "note": "the source has no observation for this call"}))
        pending.clear()

    def _reader(self) -> str | None:
        """The source's own tool that can read a persisted file (its ``execute_code``), if it has one."""
        return next((n for n in self._tools if n.endswith("execute_code")), None)

    @staticmethod
    def _persist(text: str, ws: Path, turn: int, name: str, events: list, reader: str | None = None) -> str:
        text, persisted = persist_observation(text, ws, turn, name, reader)
        if persisted:
            events.append(Event(type=EventType.RESULT_PERSISTED, turn=turn, detail=persisted))
        return text
