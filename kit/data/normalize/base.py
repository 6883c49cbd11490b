"""Shared machinery of the open-source adapters (WeAgent §4.5 "SFT normalization").

An adapter turns one source row into a :class:`~kit.harness.episode.EpisodeRecord` whose assistant
turns are in one of the two canonical forms (:func:`canonical_call`: ``<think>…</think><tool_call>…
</tool_call>``; :func:`canonical_response`: ``<think>…</think><response>…</response>``) and whose
tools carry a source namespace prefix (``RED_``, ``MMR1_``, ...). :func:`normalize_rows` runs an
adapter over rows: malformed rows (:class:`NormalizeError`) and garbled text go to a quarantine
jsonl with their reason, and everything is counted. The token-length filters (a response over
4,096 tokens, a trajectory over 48K) are the SFT encoder's (:func:`token_filter` reuses
:class:`kit.train.sft_data.SFTEncoder` and its ``ResponseTooLong`` / ``TrajectoryTooLong``).
"""

from __future__ import annotations

import io
import json
import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kit.harness.episode import EpisodeRecord, RegisteredImage
from kit.harness.portable import portable_record
from kit.types import ContentPart, Message

_MOJIBAKE = re.compile(r"(?:Ã[\x80-\xbf¡-ÿ]|â€|Â[\xa0-\xbf]|ï¿½)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class NormalizeError(ValueError):
    """A source row cannot be converted; ``reason`` is the quarantine key."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


def garbled(text: str, *, max_bad_ratio: float = 0.01) -> str | None:
    """Why ``text`` looks corrupted, or ``None``: U+FFFD replacement characters, C0/C1 control
    characters other than tab/newline, lone surrogates, mojibake sequences (UTF-8 read as Latin-1),
    each beyond ``max_bad_ratio`` of the characters (at least one bad character counts for short text)."""
    if not text:
        return None
    n = len(text)
    if text.isascii():  # replacement chars, surrogates and mojibake are all non-ASCII: one scan suffices
        bad = {"control_chars": len(_CONTROL.findall(text))}
    else:
        bad = {"replacement_char": text.count("\ufffd"),
               "control_chars": len(_CONTROL.findall(text)),
               "surrogates": len(_SURROGATE.findall(text)),
               "mojibake": len(_MOJIBAKE.findall(text))}
    for k, v in bad.items():
        if v and v / n >= max_bad_ratio or v >= 3:
            return k
    return None


def canonical_call(think: str, name: str, arguments: dict[str, Any]) -> str:
    """Canonical intermediate action: ``<think>…</think>`` + one ``<tool_call>`` JSON."""
    return (f"<think>{think.strip()}</think>\n<tool_call>\n"
            + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>")


def canonical_response(think: str, answer: str) -> str:
    """Canonical terminal turn: ``<think>…</think><response>…</response>``."""
    return f"<think>{think.strip()}</think>\n<response>{answer.strip()}</response>"


def text_msg(role: str, text: str, **kw) -> Message:
    return Message(role=role, content=[ContentPart(type="text", text=text)], **kw)


def _replace_file(dest: Path, data: bytes) -> None:
    """Write ``data`` as a new file at ``dest`` (temporary file, then rename): an existing entry —
    a hard link to a source image, a symlink — is replaced, never written through."""
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store_image(data: bytes, workspace: Path, name: str) -> RegisteredImage:
    """Write image bytes into ``workspace/<name>.<ext>`` and describe it as a registered image.

    Raises:
        NormalizeError: (``image_unreadable``) bytes that are not a decodable image.
    """
    import hashlib

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size
            fmt = (im.format or "PNG").lower()
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise NormalizeError("image_unreadable", str(e)) from e
    ext = {"jpeg": "jpg"}.get(fmt, fmt)
    workspace.mkdir(parents=True, exist_ok=True)
    fn = f"{name}.{ext}"
    _replace_file(workspace / fn, data)
    return RegisteredImage(ref=name, filename=fn, kind="user_image" if name.startswith("user") else "search_image",
                           sha256=hashlib.sha256(data).hexdigest(), width=w, height=h, mime=f"image/{fmt}")


_FILE_MEMO: dict[tuple[str, int, int], tuple[str, int, int, str]] = {}


def store_file(src: Path, workspace: Path, name: str) -> RegisteredImage:
    """Like :func:`store_image` for an image file, copied into the workspace; its sha256 and header are
    memoised by (path, size, mtime) so re-normalizing a source does not re-hash its images.

    Raises:
        NormalizeError: (``image_unreadable``) not a decodable image; (``image_missing``) unreadable file.
    """
    import hashlib

    from PIL import Image, UnidentifiedImageError

    try:
        st = src.stat()
        key = (str(src), st.st_size, st.st_mtime_ns)
        meta = _FILE_MEMO.get(key)
        if meta is None:
            data = src.read_bytes()  # one read serves the hash and the header
            with Image.open(io.BytesIO(data)) as im:
                meta = (hashlib.sha256(data).hexdigest(), im.size[0], im.size[1], (im.format or "PNG").lower())
            _FILE_MEMO[key] = meta
    except (UnidentifiedImageError, ValueError) as e:
        raise NormalizeError("image_unreadable", f"{src.name}: {e}") from e
    except OSError as e:
        raise NormalizeError("image_missing", f"{src}: {e}") from e
    sha, w, h, fmt = meta
    fn = f"{name}.{ {'jpeg': 'jpg'}.get(fmt, fmt)}"
    workspace.mkdir(parents=True, exist_ok=True)
    # A copy, never a hard link: a link shares the source's inode, so any later write to the workspace
    # file (a rerun storing other bytes, code run in an episode) would overwrite the source dataset.
    _replace_file(workspace / fn, src.read_bytes())
    return RegisteredImage(ref=name, filename=fn, kind="user_image" if name.startswith("user") else "search_image",
                           sha256=sha, width=w, height=h, mime=f"image/{fmt}")


class Adapter(Protocol):
    source: str
    prefix: str

    def to_episode(self, row: dict[str, Any], index: int, workspace_root: Path) -> EpisodeRecord: ...

    def tool_schemas(self) -> list[dict[str, Any]]: ...


@dataclass
class NormalizeReport:
    """Counts of one normalization run; ``seconds`` is wall time, ``records_per_s`` throughput."""

    source: str
    read: int = 0
    kept: int = 0
    quarantined: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "read": self.read, "kept": self.kept,
                "quarantined": dict(self.quarantined), "seconds": round(self.seconds, 4),
                "records_per_s": round(self.read / self.seconds, 1) if self.seconds else None}


def _all_text(rec: EpisodeRecord) -> str:
    return "\n".join([rec.task.question] + [m.text() for m in rec.messages])


def safe_workspace(root: Path, rid: str) -> Path:
    """The workspace folder of record ``rid`` under ``root``: a safe name derived from the id
    (:func:`kit.harness.runner.workspace_name`: unsafe characters replaced, plus a short hash), so
    an id taken from the data (``../../x``, ``a/b``) can never write outside ``root``."""
    from kit.harness.runner import workspace_name

    return root / workspace_name(rid)


def _row_id(row: Any) -> Any:
    """The id a quarantine line names: the row's ``id``, else its trace's ``data_id`` (MMSearch-R1)."""
    if not isinstance(row, dict):
        return None
    if row.get("id") is not None:
        return row["id"]
    tr = row.get("trace")
    return tr.get("data_id") if isinstance(tr, dict) else row.get("data_id")


def _convert(adapter: Adapter, i: int, row: Any, ws_root: Path) -> tuple[Any, EpisodeRecord | NormalizeError]:
    rid = _row_id(row)
    try:
        if not isinstance(row, dict):
            raise NormalizeError("not_an_object", type(row).__name__)
        rec = adapter.to_episode(row, i, ws_root)
        why = garbled(_all_text(rec))
        if why:
            raise NormalizeError("garbled_text", why)
    except NormalizeError as e:
        return rid, e
    except Exception as e:  # an adapter tripping over a row it did not foresee: quarantine the row, keep going
        return rid, NormalizeError("adapter_error", f"{type(e).__name__}: {e}")
    return rid, rec


def normalize_rows(adapter: Adapter, rows: Iterable[dict[str, Any]], out_dir: str | Path, *, workers: int = 1,
                   window: int = 64) -> tuple[list[EpisodeRecord], NormalizeReport]:
    """Convert rows; write ``<source>.jsonl`` (episode records) and ``<source>_quarantine.jsonl``
    (one ``{"index", "id", "reason", "detail"}`` per rejected row) under ``out_dir``.

    Rows that are not dicts, rows the adapter rejects and rows with garbled text are quarantined
    with their reason; nothing is dropped without a line in the quarantine file.

    ``workers`` > 1 converts rows ``window`` at a time in threads (output order = input order): it
    pays off where reading and hashing images is slow (network file systems), since both release
    the GIL; on local disks the serial path measured as fast or faster (benchmarks/bench_data.py).
    """
    from concurrent.futures import ThreadPoolExecutor
    from itertools import islice

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ws_root = out / "workspaces"
    ws_root.mkdir(exist_ok=True)
    rep = NormalizeReport(adapter.source)
    kept: list[EpisodeRecord] = []
    t0 = time.perf_counter()
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    it = enumerate(rows)
    try:
        with open(out / f"{adapter.source}_quarantine.jsonl", "w", encoding="utf-8") as q, \
                open(out / f"{adapter.source}.jsonl", "w", encoding="utf-8") as f:
            while batch := list(islice(it, window)):
                if pool is None:
                    results = [_convert(adapter, i, row, ws_root) for i, row in batch]
                else:
                    results = list(pool.map(lambda ir: _convert(adapter, ir[0], ir[1], ws_root), batch))
                for (i, _), (rid, res) in zip(batch, results):
                    rep.read += 1
                    if isinstance(res, NormalizeError):
                        rep.quarantined[res.reason] += 1
                        q.write(json.dumps({"index": i, "id": str(rid) if rid is not None else None,
                                            "reason": res.reason, "detail": res.detail[:300]},
                                           ensure_ascii=False) + "\n")
                        continue
                    kept.append(res)
                    f.write(portable_record(res, out).model_dump_json() + "\n")  # workspace relative to out
    finally:
        if pool is not None:
            pool.shutdown()
    rep.kept = len(kept)
    rep.seconds = time.perf_counter() - t0
    return kept, rep


def token_filter(records: list[EpisodeRecord], encoder) -> tuple[list[EpisodeRecord], dict[str, Any]]:
    """Apply the Appendix A length filters through ``encoder`` (a :class:`kit.train.sft_data.SFTEncoder`
    built with the source's namespaced tool schemas); returns the records that encode and the
    encoder's counts by reason (``response_over_limit``, ``trajectory_over_limit``, ``not_trainable``, ...)."""
    from kit.train.sft_data import SFTDataError

    kept, skipped = [], Counter()
    for r in records:
        if not r.trainable:
            skipped["not_trainable"] += 1
            continue
        try:
            encoder.encode(r)
        except SFTDataError as e:
            skipped[e.reason] += 1
            continue
        kept.append(r)
    return kept, {"kept": len(kept), "skipped": dict(skipped)}


def tool_schema(name: str, description: str, params: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"type": "object", "properties": params,
                                                            "required": required}}}


# ---------------------------------------------------------------- faithful records (issue 14, part 4)
def dedupe_answers(*groups: Any) -> list[str]:
    """Reference answers, first the reference then its alternatives, each once: strings (numbers
    as text) stripped, empty ones dropped, and repeats removed by their NFC, whitespace-collapsed,
    case-folded form (the first spelling is kept). A group may be a scalar, a list, or a JSON-list
    string (some releases store ``candidate_answers`` that way).

    Raises:
        NormalizeError: (``bad_type``) an answer that is an object, a nested list or a boolean.
    """
    import unicodedata

    out: list[str] = []
    seen: set[str] = set()
    for g in groups:
        if g is None:
            continue
        if isinstance(g, str) and g.strip().startswith("["):
            try:
                g = json.loads(g)
            except json.JSONDecodeError:
                pass
        for a in (g if isinstance(g, (list, tuple)) else [g]):
            if a is None:
                continue
            if isinstance(a, bool) or not isinstance(a, (str, int, float)):
                raise NormalizeError("bad_type", f"reference answer of type {type(a).__name__}: {str(a)[:80]}")
            s = " ".join(str(a).split())
            key = unicodedata.normalize("NFC", s).casefold()
            if s and key not in seen:
                seen.add(key)
                out.append(s)
    return out


def judge_label(final: str | None, answers: list[str], mode: str) -> tuple[bool | None, str]:
    """The record's correctness: the kit's rule judge (:class:`kit.eval.judges.RuleJudge`, ``mode``)
    on the trace's own final answer against its references. ``(None, judge)`` when there is no
    reference to judge against (the record is then unjudged, never assumed correct)."""
    from kit.eval.judges import RuleJudge

    j = RuleJudge(mode)
    if not answers:
        return None, j.name
    v = j.score(final, answers)
    return bool(v.correct), v.judge


def persist_observation(text: str, workspace: Path, turn: int, tool: str,
                        reader: str | None = None) -> tuple[str, dict | None]:
    """An observation as the harness would put it in context (WeAgent Table 5 "persistence"):
    text over ``HarnessConfig.persist_threshold_chars`` characters is written in full to
    ``workspace/tool_results/turnNN_<tool>.txt`` and replaced in context by its first
    ``persist_preview_chars`` characters plus a pointer. The pointer names ``reader`` (the tool of the
    record's own tool set that can read the file) and no other: a source without one gets none.

    The source's model read the whole text, so the record no longer holds what it saw: the event detail
    says so (``seen_by_model``) and the adapters mark the record untrainable (issue 27, part 2).

    Returns ``(in-context text, result_persisted event detail or None)``.
    """
    from kit.harness.config import HarnessConfig
    from kit.harness.loop import TOOL_RESULTS_DIR

    cfg = HarnessConfig()
    if len(text) <= cfg.persist_threshold_chars:
        return text, None
    rel = f"{TOOL_RESULTS_DIR}/turn{turn:02d}_{tool}.txt"
    (workspace / TOOL_RESULTS_DIR).mkdir(parents=True, exist_ok=True)
    (workspace / rel).write_text(text, encoding="utf-8")
    how = f"; read it with {reader} if you need more." if reader else "."
    preview = (text[: cfg.persist_preview_chars]
               + f"\n\n[Result truncated: {len(text)} characters in total. The full result is saved as {rel}{how}]")
    return preview, {"tool": tool, "chars": len(text), "file": rel, "shown_chars": cfg.persist_preview_chars,
                     "seen_by_model": "the full text", "untrainable": "the record holds a preview of what the model read"}
