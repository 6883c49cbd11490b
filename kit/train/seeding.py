"""POINTS-Seeker source formats for Agentic Seeding and SFT mixtures (§3.2.1, App. A.2-A.3).

Row -> :class:`EpisodeRecord` converters for the formats :mod:`kit.train.mixtures` does not cover:

* ``"toucan"`` (``Agent-Ark/Toucan-1.5M``): ``messages`` is a JSON *string* of turns with roles
  ``system`` / ``user`` / ``assistant`` / ``tool_call`` / ``tool_response``; ``available_tools`` a JSON
  string of tool schemas. A ``tool_call`` turn becomes ``<tool_call>\\n{json}\\n</tool_call>`` appended
  to the current assistant turn (one model turn), a ``tool_response`` a ``tool`` message; the tool
  schemas go into the system turn (the SFT encoder renders the harness's own tools, not these).
* ``"vqa"`` (``Reason-RFT``, ``VisualWebInstruct``): image + question + answer columns. A.2: "For
  multi-modal datasets, we utilize only the images and questions, and then distill the reasoning chain
  using Qwen3-VL-235B-A22B-Thinking, filtering based on the original answer." With
  ``reasoning="teacher"`` a :data:`Distiller` (a teacher endpoint, :func:`openai_teacher`) writes the
  assistant turn and rows whose distilled answer does not match the original are dropped and counted
  (``filtered_answer_mismatch``); ``reasoning="dataset_answer"`` (labelled option, NOT the paper's
  recipe) uses the dataset's own answer as the assistant turn, and every record carries the label
  ``seeding:dataset-answer``.

Column names per source are ``Source.columns`` (defaults :data:`VQA_COLUMNS`); the layouts of the
real datasets that the kit could not verify are marked in ``kit/recipes/points_seeker.yaml`` (``mixtures.seeding``).
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.harness.episode import EpisodeRecord, Task
from kit.types import ContentPart, Message

# teacher of A.2 / A.3 (re-annotation of reasoning chains)
TEACHER_MODEL = "Qwen3-VL-235B-A22B-Thinking"
VQA_COLUMNS = {"image": "image", "question": "question", "answer": "answer"}
# (workspace, messages) -> the teacher's full response text (with <think>...</think>)
Distiller = Callable[[Path, list[Message]], str]
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


class SeedingRowError(ValueError):
    """A source row lacks what its format needs (message names the source, row and field)."""


def _text(t: str) -> list[ContentPart]:
    return [ContentPart(type="text", text=t)]


def _record(src, idx: int, msgs: list[Message], labels: list[str], workspace: str | None = None,
            question: str = "", answer: str | None = None) -> EpisodeRecord:
    rid = f"{Path(src.name).name}-{idx}"
    task = Task(id=rid, question=question, source=src.name, answers=[answer] if answer else [])
    return EpisodeRecord(id=rid, task=task, config_hash="mixture", messages=msgs, status="answered", trainable=True,
                         labels=[f"mixture:{src.kind}"] + labels, workspace=workspace)


def toucan_record(row: dict[str, Any], src, idx: int) -> EpisodeRecord:
    """One Toucan-1.5M row as a record (see module doc).

    Raises:
        SeedingRowError: ``messages`` missing or not a JSON list, an unknown role, no assistant turn.
    """
    raw = row.get("messages")
    try:
        turns = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise SeedingRowError(f"{src.name} row {idx}: 'messages' is not JSON: {e}") from e
    if not isinstance(turns, list) or not turns:
        raise SeedingRowError(f"{src.name} row {idx}: 'messages' must be a non-empty JSON list")
    tools = row.get("available_tools")
    msgs: list[Message] = []
    if tools:
        tools_text = tools if isinstance(tools, str) else json.dumps(tools)
        msgs.append(Message(role="system", content=_text(f"Available tools (JSON schemas):\n{tools_text}")))
    for t in turns:
        role, content = t.get("role"), t.get("content") or ""
        content = content if isinstance(content, str) else json.dumps(content)
        if role == "system":
            if msgs and msgs[0].role == "system":  # keep one system turn: the row's prompt, then the tools
                msgs[0] = Message(role="system", content=_text(content + "\n\n" + msgs[0].content[0].text))
            else:
                msgs.insert(0, Message(role="system", content=_text(content)))
        elif role == "user":
            msgs.append(Message(role="user", content=_text(content)))
        elif role in ("assistant", "tool_call"):
            piece = content if role == "assistant" else f"<tool_call>\n{content}\n</tool_call>"
            if msgs and msgs[-1].role == "assistant":  # a call after the reasoning is the same model turn
                prev = msgs[-1].content[0].text
                msgs[-1] = Message(role="assistant", content=_text(f"{prev}\n{piece}" if prev else piece))
            else:
                msgs.append(Message(role="assistant", content=_text(piece)))
        elif role == "tool_response":
            msgs.append(Message(role="tool", content=_text(content)))
        else:
            raise SeedingRowError(f"{src.name} row {idx}: unsupported Toucan role {role!r}")
    if not any(m.role == "assistant" for m in msgs):
        raise SeedingRowError(f"{src.name} row {idx}: no assistant turn")
    return _record(src, idx, msgs, ["format:toucan"], question=str(row.get("question") or ""))


def final_answer(text: str) -> str:
    """The answer in a response: ``<answer>..</answer>``, else the last ``\\boxed{..}``, else the text
    after ``</think>``."""
    m = _ANSWER_TAG.findall(text)
    if m:
        return m[-1].strip()
    b = _BOXED.findall(text)
    if b:
        return b[-1].strip()
    return text.split("</think>")[-1].strip()


def answers_match(predicted: str, original: str) -> bool:
    """A.2 "filtering based on the original answer": normalized exact match of the final answers, or
    containment of the original's final answer (kit choice; the paper does not give the criterion)."""
    from kit.eval.judges import normalize_answer

    p, o = normalize_answer(final_answer(predicted)), normalize_answer(final_answer(original))
    return bool(o) and (p == o or f" {o} " in f" {p} ")


def _write_image(value: Any, root: Path | None, dest: Path, src, idx: int) -> str:
    """Store the row's image in ``dest`` and return its file name (datasets Image dict / PIL / path)."""
    from PIL import Image

    if isinstance(value, list):  # VisualWebInstruct-style list of images: the first one
        if not value:
            raise SeedingRowError(f"{src.name} row {idx}: empty image list")
        value = value[0]
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if isinstance(value, dict) and value.get("bytes"):
            im = Image.open(io.BytesIO(value["bytes"]))
        elif isinstance(value, dict) and value.get("path"):
            im = _open_in_snapshot(value["path"], root)
        elif isinstance(value, str):
            im = _open_in_snapshot(value, root)
        elif hasattr(value, "save"):
            im = value
        else:
            raise SeedingRowError(f"{src.name} row {idx}: image column holds {type(value).__name__}")
        im.convert("RGB").save(dest / "user_image_1.png")
    except (OSError, ValueError) as e:
        raise SeedingRowError(f"{src.name} row {idx}: image cannot be read: {e}") from e
    return "user_image_1.png"


def _open_in_snapshot(rel: str, root: Path | None):
    """Open an image named relative to the snapshot: a file, else a member of a top-level ``.zip``
    (VisualWebInstruct ships ``images.zip``)."""
    import zipfile

    from PIL import Image

    base = Path(root or ".")
    if (base / rel).is_file():
        return Image.open(base / rel)
    for z in sorted(base.glob("*.zip")):
        with zipfile.ZipFile(z) as zf:
            if rel in zf.namelist():
                return Image.open(io.BytesIO(zf.read(rel)))
    raise OSError(f"{rel} is neither a file nor in a .zip archive of {base}")


def vqa_record(row: dict[str, Any], src, idx: int, *, root: Path | None, workspace: Path,
               distiller: Distiller | None) -> EpisodeRecord | None:
    """One image+question+answer row as a record; None when the distilled answer is filtered out.

    Raises:
        SeedingRowError: a missing column; ``reasoning="teacher"`` without a distiller.
    """
    cols = {**VQA_COLUMNS, **(src.columns or {})}
    for k, c in cols.items():
        if row.get(c) in (None, "", []):
            raise SeedingRowError(f"{src.name} row {idx}: missing {k} column {c!r}")
    question, answer = str(row[cols["question"]]).replace("<image>", "").strip(), str(row[cols["answer"]])
    ws = workspace / f"{Path(src.name).name}-{idx}"
    img = _write_image(row[cols["image"]], root, ws, src, idx)
    user = Message(role="user", content=[ContentPart(type="image", image=img)] + _text(question))
    if src.reasoning == "teacher":
        if distiller is None:
            raise SeedingRowError(f"{src.name}: reasoning='teacher' needs a teacher endpoint ({TEACHER_MODEL}, A.2); "
                                  "pass distiller=openai_teacher(...) or set reasoning='dataset_answer' (labelled, "
                                  "not the paper's recipe)")
        response = distiller(ws, [user])
        if not answers_match(response, answer):
            return None
        labels = [f"seeding:distilled:{TEACHER_MODEL}"]
    else:
        response, labels = answer, ["seeding:dataset-answer"]
    msgs = [user, Message(role="assistant", content=_text(response))]
    return _record(src, idx, msgs, ["format:vqa"] + labels, workspace=str(ws), question=question, answer=answer)


def openai_teacher(base_url: str, model: str = TEACHER_MODEL, *, api_key: str | None = None,
                   max_tokens: int = 8192, temperature: float = 0.6) -> Distiller:
    """A :data:`Distiller` over an OpenAI-compatible endpoint serving the A.2 teacher.

    ``max_tokens`` and ``temperature`` are kit choices (the paper gives no decoding settings). The
    reasoning a server returns separately (``reasoning_content``) is kept as ``<think>...</think>``.
    """
    from kit.policy.openai_client import OpenAIChatPolicy
    from kit.types import SamplingParams

    policy = OpenAIChatPolicy(base_url, model, api_key=api_key)
    sampling = SamplingParams(max_tokens=max_tokens, temperature=temperature)

    def distill(workspace: Path, messages: list[Message]) -> str:
        return asyncio.run(policy.generate(messages, [], sampling, workspace)).text

    return distill
