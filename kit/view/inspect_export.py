"""Export kit runs to inspect_ai's eval-log format, so ``inspect view`` opens them (docs/viewer.md).

One :class:`inspect_ai.log.EvalLog` (JSON format) holds every item of the run folder(s): one
``EvalSample`` per episode, id ``<run>/<benchmark>/<configuration>/<episode id>`` and epoch
``repeat + 1``. Messages keep their roles, text and images (inlined as data URIs); assistant tool
calls are the harness's decoded calls (:mod:`kit.view.turns`: function calling or parsed from text,
an undecodable call keeps its ``parse_error``); each kit event is an ``InfoEvent`` (source ``kit``)
carrying its type, turn and detail. Judged items get the scores ``correct`` and, with a target image,
``image_match`` (``C`` / ``I``); the status, labels and event counts are sample metadata. A
prediction without its episode record (a sensitive benchmark's) is a sample with its scores and the
question's hash only.

inspect_ai is a dev extra (``pip install inspect-ai``): it pulls ~30 packages (boto3, s3fs, textual)
the kit does not otherwise need.
"""

from __future__ import annotations

import base64
import mimetypes
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kit.harness.errors import ImageError
from kit.view.load import Item, load_run, read_workspace_image, unique_labels
from kit.view.turns import message_view

MAX_IMAGE_BYTES = 4_000_000  # an image over this is left out of the log with a text note (log size)
# inspect_ai's log_file_pattern (inspect_ai/log/_file.py): `inspect view --log-dir` lists only such names
LOG_FILE_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}[:-]\d{2}[:-]\d{2}.*$"


class InspectUnavailable(RuntimeError):
    """inspect_ai is not installed (it is a dev extra)."""


def _inspect():
    try:
        import inspect_ai.event as ev
        import inspect_ai.log as log
        import inspect_ai.model as model
        import inspect_ai.scorer as scorer
        import inspect_ai.tool as tool
    except ImportError as e:  # pragma: no cover - dev extra installed in CI
        raise InspectUnavailable("inspect_ai is not installed: pip install inspect-ai (a dev extra of the kit)") from e
    return ev, log, model, scorer, tool


def _content(parts: list[Any], it: Item, model) -> list[Any]:
    out: list[Any] = []
    for p in parts:
        if p.type == "text":
            out.append(model.ContentText(text=p.text or ""))
            continue
        try:  # only files that resolve inside the run folder
            data = read_workspace_image(it, p.image or "", max_bytes=MAX_IMAGE_BYTES)
        except ImageError as e:
            out.append(model.ContentText(text=f"[image {p.image} not exported: {e}]"))
            continue
        mime = mimetypes.guess_type(p.image)[0] or "image/png"
        out.append(model.ContentImage(image=f"data:{mime};base64," + base64.b64encode(data).decode()))
    return out


def _messages(it: Item, model, tool) -> list[Any]:
    assert it.record is not None
    msgs: list[Any] = []
    last_call_id: str | None = None
    for m in it.record.messages:
        meta = {"turn": m.turn, "intervention": m.intervention}
        if m.role == "system":
            msgs.append(model.ChatMessageSystem(content=m.text(), metadata=meta))
        elif m.role == "user":
            msgs.append(model.ChatMessageUser(content=_content(m.content, it, model), metadata=meta))
        elif m.role == "assistant":
            mv = message_view(m)
            calls = []
            for n, c in enumerate(mv.calls):
                cid = f"t{m.turn}c{n}"
                calls.append(tool.ToolCall(id=cid, function=c.name, arguments=c.arguments or {},
                                           parse_error=None if c.arguments is not None else f"{c.error}: {c.message}"))
                if c.executed:
                    last_call_id = cid
            msgs.append(model.ChatMessageAssistant(content=m.text(), tool_calls=calls or None, metadata=meta))
        else:
            msgs.append(model.ChatMessageTool(content=_content(m.content, it, model), function=m.name,
                                              tool_call_id=last_call_id or m.tool_call_id, metadata=meta))
    return msgs


def _scores(it: Item, scorer) -> dict[str, Any]:
    out: dict[str, Any] = {}
    answer = it.record.final_response if it.record else (it.prediction.response if it.prediction else None)
    if it.correct is not None:
        out["correct"] = scorer.Score(value="C" if it.correct else "I", answer=answer,
                                      explanation=it.prediction.judge if it.prediction else it.verdict.judge)
    if it.match is not None:
        out["image_match"] = scorer.Score(value="C" if it.match else "I")
    return out


def _sample(it: Item, ev, log, model, scorer, tool):
    sid = f"{it.run}/{it.benchmark}/{it.configuration}/{it.episode_id}"
    meta: dict[str, Any] = {"run": it.run, "benchmark": it.benchmark, "configuration": it.configuration,
                            "repeat": it.repeat, "status": it.status, "source": it.source}
    if it.record is None:
        p = it.prediction
        assert p is not None
        meta.update(episode_record="not kept (sensitive benchmark: private run folder)", question_sha256=p.question_sha256)
        return log.EvalSample(id=sid, epoch=it.repeat + 1, input=f"[sensitive task, question sha256 {p.question_sha256}]",
                              target=p.answers or "", scores=_scores(it, scorer), metadata=meta)
    rec = it.record
    msgs = _messages(it, model, tool)
    meta.update(trainable=rec.trainable, labels=rec.labels, policy=rec.policy, backend=rec.backend,
                events=rec.event_counts(), error=rec.error, cited_images=rec.cited_images)
    events = [ev.InfoEvent(source="kit", data={"type": e.type, "turn": e.turn, "detail": e.detail}) for e in rec.events]
    # the INPUT column shows the task's question; the system prompt and images stay in the messages
    return log.EvalSample(id=sid, epoch=it.repeat + 1, input=rec.task.question, target=rec.task.answers or "",
                          messages=msgs, output=model.ModelOutput.from_content(model=rec.policy or "kit", content=rec.final_response or ""),
                          scores=_scores(it, scorer), metadata=meta, events=events,
                          total_time=rec.timings.wall_s, error=None)


def build_inspect_log(items: list[Item], task: str, span: tuple[datetime, datetime] | None = None):
    """An ``inspect_ai.log.EvalLog`` of ``items`` (status ``success``; accuracy over judged items).

    The dataset is the distinct sample ids and ``epochs`` the largest repeat + 1, so inspect's "done /
    total samples" reads ``len(items) / len(items)`` for a complete run (every id in every epoch).
    ``span`` (UTC start, end; :func:`run_span`) sets ``stats.started_at`` / ``completed_at``; without it
    the log's creation time is both (inspect view shows a zero, not a NaN, duration)."""
    ev, log, model, scorer, tool = _inspect()
    # condense_sample moves repeated content (the same image in input and messages) into attachments,
    # as inspect_ai's own logger does; read_eval_log resolves them
    samples = [log.condense_sample(_sample(it, ev, log, model, scorer, tool)) for it in items]
    judged = [it.correct for it in items if it.correct is not None]
    results = log.EvalResults(total_samples=len(samples), completed_samples=len(samples), scores=[
        log.EvalScore(name="correct", scorer="kit", metrics={
            "accuracy": log.EvalMetric(name="accuracy", value=sum(judged) / len(judged) if judged else 0.0)})])
    policies = sorted({it.record.policy for it in items if it.record and it.record.policy}) or ["kit"]
    ids = list(dict.fromkeys(s.id for s in samples))
    now = datetime.now(UTC)
    start, end = span or (now, now)
    spec = log.EvalSpec(created=now.isoformat(timespec="seconds"), task=task,
                        dataset=log.EvalDataset(name=",".join(sorted({it.benchmark for it in items})), samples=len(ids),
                                                sample_ids=ids),
                        model=policies[0] if len(policies) == 1 else "+".join(policies),
                        config=log.EvalConfig(epochs=max((s.epoch for s in samples), default=1)))
    stats = log.EvalStats(started_at=start.isoformat(timespec="seconds"), completed_at=end.isoformat(timespec="seconds"))
    return log.EvalLog(eval=spec, status="success", results=results, samples=samples, stats=stats)


def run_span(items: list[Item]) -> tuple[datetime, datetime] | None:
    """(start, end) in UTC of the episodes of ``items``, None when none has an ``episodes.jsonl``.

    Episode records carry no clock time (only durations, ``timings.wall_s``), so the end is the latest
    modification time of an ``episodes.jsonl`` (its last line written) and the start the earliest
    ``mtime - sum(wall_s of its episodes)`` (episodes of one file run one after the other). A git clone
    sets checkout times: the duration stays right only for a run folder written on this machine."""
    files: dict[Path, float] = {}
    for it in items:
        if it.record is not None and it.episode_dir is not None:
            f = it.episode_dir / "episodes.jsonl"
            files[f] = files.get(f, 0.0) + max(it.record.timings.wall_s, 0.0)
    spans = []
    for f, wall in files.items():
        try:
            end = f.stat().st_mtime
        except OSError:
            continue
        spans.append((end - wall, end))
    if not spans:
        return None
    return (datetime.fromtimestamp(min(a for a, _ in spans), UTC), datetime.fromtimestamp(max(b for _, b in spans), UTC))


def log_file_name(task: str, when: datetime, eval_id: str) -> str:
    """``<ISO timestamp>_<task>_<id>.json`` as inspect_ai names its logs (``2026-01-02T03-04-05+00-00_kit-eval_<id>.json``):
    the only names ``inspect view --log-dir`` lists (:data:`LOG_FILE_PATTERN`)."""
    stamp = when.astimezone(UTC).isoformat(timespec="seconds").replace(":", "-")
    return f"{stamp}_{re.sub(r'[^A-Za-z0-9-]+', '-', task).strip('-') or 'kit'}_{eval_id}.json"


def name_warning(path: Path) -> str | None:
    """Why ``inspect view --log-dir`` will not list ``path`` (its name does not match :data:`LOG_FILE_PATTERN`), else None."""
    if re.match(LOG_FILE_PATTERN, path.name) and path.suffix == ".json":
        return None
    return (f"{path.name!r} does not match inspect_ai's log file pattern {LOG_FILE_PATTERN} "
            f"(<ISO timestamp>_<task>_<id>.json): `inspect view --log-dir {path.parent}` will not list it; "
            f"give a folder as --inspect-log to get such a name")


def write_inspect_log(run_dirs: list[str | Path], out: str | Path) -> tuple[Path, int]:
    """Write the eval log of one or two run folders to ``out`` (JSON format); returns (path, samples).

    ``out`` an existing folder, or a path ending in ``/`` or without a ``.json`` suffix: the log is written
    inside it as :func:`log_file_name` (what ``inspect view --log-dir`` lists); a file name is used as given
    (:func:`name_warning` says when inspect will not list it).

    Raises:
        InspectUnavailable: inspect_ai is not installed.
        kit.view.load.ViewError: a run folder cannot be read.
    """
    _, log, *_ = _inspect()
    dirs = [Path(d) for d in run_dirs]
    items = [it for d, lab in zip(dirs, unique_labels(dirs), strict=True) for it in load_run(d, lab).items]
    el = build_inspect_log(items, task="kit/" + "+".join(unique_labels(dirs)), span=run_span(items))
    folder = str(out).endswith(("/", "\\")) or Path(out).is_dir() or Path(out).suffix != ".json"
    out = Path(out) / log_file_name(el.eval.task, datetime.fromisoformat(el.eval.created), el.eval.eval_id) if folder \
        else Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log.write_eval_log(el, out, format="json")
    return out, len(items)


__all__ = ["LOG_FILE_PATTERN", "InspectUnavailable", "build_inspect_log", "log_file_name", "name_warning", "run_span",
           "write_inspect_log"]
