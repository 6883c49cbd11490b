"""Benchmark loaders into :class:`kit.harness.episode.Task` (local files; published releases by
name are in :mod:`kit.eval.hub_loaders`).

Local formats: FVQA (MMSearch-R1 evaluation folders), MM-BrowseComp (published encrypted JSONL,
decrypted in memory), LiveVQA (GitHub JSON; level 1 and level 2 as separate tasks), the
MMSearch-R1 parquet schema (InfoSeek; FVQA's hub release) and VisTarget-style JSONL.

FVQA in the MMSearch-R1 evaluation format: one ``metadata/*.json`` per item (question,
``reward_model.ground_truth``, ``candidate_answers``, category) and its query image. The ``image``
field holds an absolute path from the machine that made the file, so the image is resolved by file
name in the sibling ``images/`` folder.
"""

from __future__ import annotations

import base64 as _base64
import hashlib as _hashlib
import io as _io
import json
import re as _re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from kit.eval.crypto import DecryptionError, decrypt_text
from kit.harness.episode import Task


class BenchmarkError(ValueError):
    """A benchmark file or row that cannot be turned into a task (the message names the file)."""


def _answer_list(value, field: str) -> list[str]:
    """Reference answers as strings: a string or number, or a list of them.

    Raises:
        BenchmarkError: any other shape (objects, nested lists, booleans, null).
    """
    if isinstance(value, bool) or value is None:
        raise BenchmarkError(f"{field} must be a string, a number or a list of them, got {value!r}")
    if isinstance(value, (str, int, float)):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in value):
        raise BenchmarkError(f"{field} must be a string, a number or a list of them")
    return [str(a).strip() for a in value if str(a).strip()]


def load_fvqa(root: str | Path, limit: int | None = None, *, strict: bool = False) -> tuple[list[Task], list[dict]]:
    """Load FVQA items in MMSearch-R1 format from ``root`` (with ``metadata/`` and ``images/``).

    Returns ``(tasks, problems)``: rows that cannot be loaded (bad JSON, missing question or image)
    are reported in ``problems`` as ``{"file": ..., "reason": ...}`` instead of being dropped silently.

    Raises:
        BenchmarkError: ``root`` has no ``metadata/`` folder, or ``strict`` and a row is bad.
    """
    root = Path(root)
    meta_dir, img_dir = root / "metadata", root / "images"
    if not meta_dir.is_dir():
        raise BenchmarkError(f"{root} has no metadata/ folder (expected the MMSearch-R1 FVQA layout)")
    check_limit(limit)
    tasks: list[Task] = []
    problems: list[dict] = []
    seen: set[str] = set()
    for f in sorted(meta_dir.glob("*.json")):
        if limit is not None and len(tasks) >= limit:
            break
        try:
            row = json.loads(f.read_text(encoding="utf-8-sig"))  # utf-8-sig: a byte-order mark is not content
            if not isinstance(row, dict):
                raise BenchmarkError(f"row is a JSON {type(row).__name__}, not an object")
            q = row.get("question")
            rm = row.get("reward_model")
            if not isinstance(rm, dict):
                raise BenchmarkError("reward_model must be an object")
            if not isinstance(q, str) or not q.strip():
                raise BenchmarkError("missing or empty question")
            answers = _answer_list(rm.get("ground_truth"), "reward_model.ground_truth")
            if not answers:
                raise BenchmarkError("empty reward_model.ground_truth")
            extra = rm.get("candidate_answers")
            answers += [a for a in (_answer_list(extra, "candidate_answers") if extra is not None else [])
                        if a not in answers]
            name = Path(str(row.get("image", ""))).name
            img = img_dir / name
            if not name or not img.is_file():
                raise BenchmarkError(f"query image {name!r} not found in {img_dir}")
            tid = row_id(row, "data_id") if "data_id" in row else f.stem  # the file name only when there is no field
            if tid in seen:
                raise BenchmarkError(f"duplicate data_id {tid!r}")
            seen.add(tid)
            tasks.append(Task(id=tid, question=q.strip(), input_images=[str(img.resolve())], answers=answers,
                              source="fvqa_mmsearch_r1",
                              metadata={"category": row.get("category"), "file": f.name,
                                        "image_sha256": row.get("source_image_sha256")}))
        except (ValueError, KeyError, TypeError, OSError, RecursionError) as e:  # JSON/Unicode errors are ValueErrors
            problem = {"file": f.name, "reason": f"{type(e).__name__}: {str(e)[:300]}"}
            if strict:
                raise BenchmarkError(f"{f}: {problem['reason']}") from e
            problems.append(problem)
    return tasks, problems


# ================================================================================================
# Shared schema helpers for the other benchmarks (WeAgent §7.1, POINTS-Seeker §4.1).
#
# Every loader below returns a :class:`LoadResult`: the tasks, the rows that could not become tasks
# (``problems``: one dict per row with a reason), and the rows a benchmark's own subset rule leaves
# out (``filtered``: counts per reason, e.g. MMSearch rows without a query image). Nothing is
# dropped silently. Images that arrive as bytes are validated (decoded in full) and written once
# under ``image_dir`` by content hash; ``Task.input_images`` are then absolute paths.
# ================================================================================================


MAX_IMAGE_PIXELS = 64_000_000  # same decompression-bomb guard as the harness registry


@dataclass
class LoadResult:
    """Outcome of loading one benchmark.

    Attributes:
        tasks: loaded tasks, in file order.
        problems: ``{"benchmark", "row", "id", "reason"}`` per row that could not be turned into a
            task (missing image, corrupt row, failed decryption ...).
        filtered: ``{reason: count}`` of rows left out by the benchmark's subset rule.
        info: provenance (files read with sha256, hub id and revision, subset rule).
    """

    benchmark: str
    tasks: list[Task] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)
    filtered: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def problem(self, row: Any, reason: str, task_id: str | None = None) -> None:
        """Record a row that could not be loaded (never includes decrypted text)."""
        self.problems.append({"benchmark": self.benchmark, "row": row, "id": task_id, "reason": reason})

    def add(self, tasks: list[Task], row: Any) -> list[Task]:
        """Append ``tasks`` converted from ``row``; a task whose id is already loaded is not added
        but reported as a problem of that row (a duplicate id would make episodes collide and stop
        the whole run). Returns the tasks added."""
        seen = self.__dict__.setdefault("_first_row", {t.id: None for t in self.tasks})
        added = []
        for t in tasks:
            if t.id in seen:
                self.problem(row, f"duplicate id {t.id!r} (first loaded from row {seen[t.id]})", t.id)
                continue
            seen[t.id] = row
            self.tasks.append(t)
            added.append(t)
        return added

    def skip(self, reason: str) -> None:
        """Count a row excluded by the benchmark's subset rule."""
        self.filtered[reason] = self.filtered.get(reason, 0) + 1

    def summary(self) -> dict[str, Any]:
        """Counts for reports: tasks, problem rows, filtered rows."""
        return {"benchmark": self.benchmark, "tasks": len(self.tasks), "problems": len(self.problems),
                "filtered": sum(self.filtered.values()), "filtered_by_reason": dict(self.filtered),
                "text_only": sum(1 for t in self.tasks if (t.metadata or {}).get("text_only"))}


TEXT_ONLY_LABEL = "text_only:missing_images"
MISSING_IMAGES = ("problem", "text_only")


def row_id(row: dict[str, Any], key: str) -> str:
    """The row's id from field ``key`` as text, by one rule for every loader: a string (stripped)
    or a number (an integral float is the integer: ``4.0`` and ``4`` are the same id ``"4"``), so
    ids that differ only in spacing or number type are caught as duplicates.

    Raises:
        BenchmarkError: ``missing id`` (absent, null, empty or blank) or ``bad id`` (a boolean, a
            list, an object, NaN or infinity).
    """
    import math

    v = row.get(key)
    if v is None or (isinstance(v, str) and not v.strip()):
        raise BenchmarkError(f"missing id: field {key!r} is {'absent' if key not in row else repr(v)[:40]}")
    if isinstance(v, bool) or not isinstance(v, (str, int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise BenchmarkError(f"bad id: field {key!r} must be a string or a number, got {repr(v)[:40]}")
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    return str(v).strip()


def check_limit(limit: Any) -> None:
    """``limit`` is ``None`` (all rows) or an integer >= 0.

    Raises:
        BenchmarkError: anything else (a negative number would otherwise load one row or none).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BenchmarkError(f"limit must be None or an integer >= 0, got {limit!r}")


def json_line(raw: bytes) -> Any:
    """One JSON line (UTF-8; a byte-order mark is ignored).

    Raises:
        ValueError: not UTF-8 or not JSON (``UnicodeDecodeError`` / ``JSONDecodeError``), or nested
            too deeply to decode (the decoder's ``RecursionError``, reworded).
    """
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except RecursionError:
        raise ValueError("JSON nested too deeply to decode") from None


def check_missing_images(missing_images: Any) -> None:
    """Raises ``ValueError`` unless ``missing_images`` is one of :data:`MISSING_IMAGES`."""
    if missing_images not in MISSING_IMAGES:
        raise ValueError(f"missing_images must be one of {MISSING_IMAGES}, got {missing_images!r}")


def sha256_text(text: str) -> str:
    """Hex sha256 of ``text`` (UTF-8): how decrypted questions and answers appear in outputs."""
    return _hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_image_dir() -> Path:
    """Where images that arrive as bytes (parquet / hub rows) are materialized: the kit cache."""
    from kit.paths import cache_dir

    return cache_dir() / "benchmark_images"


def save_image_bytes(data: bytes, image_dir: str | Path, prefix: str) -> Path:
    """Validate image bytes (full decode, bomb guard) and store them once under ``image_dir`` as
    ``<prefix>_<sha256[:20]>.<ext>``. Returns the absolute path.

    Raises:
        BenchmarkError: the bytes are not a decodable image (message gives the decoder's reason).
    """
    from kit.harness.errors import ImageError
    from kit.harness.registry import decode_image

    try:
        im = decode_image(data, max_pixels=MAX_IMAGE_PIXELS)
    except ImageError as e:
        raise BenchmarkError(f"image rejected: {e.message}") from e
    ext = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "BMP": "bmp"}.get(im.format or "", "png")
    d = Path(image_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{prefix}_{_hashlib.sha256(data).hexdigest()[:20]}.{ext}"
    if not path.exists():
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return path.resolve()


def image_to_bytes(value: Any) -> bytes | None:
    """Bytes of an image cell in any of the forms ``datasets`` / parquet give: ``{"bytes": ...}``,
    raw ``bytes``, a base64 string, or a PIL image (re-encoded as PNG). ``None`` for an empty cell.

    Raises:
        BenchmarkError: a value of another type, or a string that is not base64.
    """
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path") and Path(value["path"]).is_file():
            return Path(value["path"]).read_bytes()
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value) or None
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return _base64.b64decode(value, validate=True)
        except ValueError as e:
            raise BenchmarkError(f"image string is not base64 ({len(value)} characters)") from e
    if hasattr(value, "save") and hasattr(value, "size"):  # PIL.Image
        buf = _io.BytesIO()
        value.save(buf, format="PNG")
        return buf.getvalue()
    raise BenchmarkError(f"unsupported image value of type {type(value).__name__}")


def resolve_by_name(ref: str, folder: Path) -> Path:
    """Resolve an image reference (URL or foreign absolute path) to a file in ``folder`` by its
    file name, as the shared samples require.

    Raises:
        BenchmarkError: no such file.
    """
    name = Path(str(ref).split("?", 1)[0]).name
    p = folder / name
    if not name or not p.is_file():
        raise BenchmarkError(f"image {name or ref!r} not found in {folder}")
    return p.resolve()


def _aslist(value: Any) -> list:
    """A cell that should be a list: lists/tuples/arrays as lists, JSON-list strings parsed, a
    scalar string wrapped, None -> []."""
    if value is None:
        return []
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            try:
                out = json.loads(s)
                return list(out) if isinstance(out, list) else [out]
            except json.JSONDecodeError:
                pass
        return [value] if s else []
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _answers(*groups: Iterable[Any]) -> list[str]:
    """Reference answer first, then alternatives; stripped, non-empty, de-duplicated, order kept."""
    out: list[str] = []
    for g in groups:
        for a in g:
            s = str(a).strip() if a is not None else ""
            if s and s not in out:
                out.append(s)
    return out


def _file_info(path: Path) -> dict[str, Any]:
    from kit.manifest import file_sha256

    return {"path": str(path), "sha256": file_sha256(path)}


# ------------------------------------------------------------------------------------- MM-BrowseComp
MMBC_QUESTION_MARKER = "Question: "


def mmbrowsecomp_task(row: dict[str, Any], resolve_image: Callable[[str], Path], *, source: str,
                      missing_images: str = "problem") -> Task:
    """One MM-BrowseComp row (still encrypted, as published) -> :class:`Task`, decrypting in memory.

    ``question``, ``answer`` and every ``checklist`` item are decrypted with the row's ``canary``
    (the authors' scheme, :mod:`kit.eval.crypto`). The task is marked ``metadata["sensitive"]``:
    its question, answers, checklist and any model response must never be written to outputs; the
    metadata carries their sha256 instead. ``resolve_image`` maps each image URL to a local file.

    ``missing_images="text_only"``: a row whose image file is absent is loaded without its images
    and labelled (``metadata["text_only"]``, ``metadata["missing_images"]`` with the file names, and
    :data:`TEXT_ONLY_LABEL` in ``metadata["labels"]``, which the evaluation copies onto each item).

    Raises:
        BenchmarkError: missing fields, failed decryption, or (default ``missing_images="problem"``)
            an image that cannot be resolved; ``ValueError`` for an unknown ``missing_images``.
    """
    check_missing_images(missing_images)
    if not isinstance(row, dict):
        raise BenchmarkError(f"row is a JSON {type(row).__name__}, not an object")
    row_id(row, "id")
    for key in ("id", "question", "answer", "canary"):
        if row.get(key) in (None, ""):
            raise BenchmarkError(f"missing field {key!r}")
    canary = str(row["canary"])
    try:
        question = decrypt_text(row["question"], canary).strip()
        answer = decrypt_text(row["answer"], canary).strip()
        checklist = [decrypt_text(c, canary) for c in _aslist(row.get("checklist"))]
    except DecryptionError as e:
        raise BenchmarkError(f"decryption failed: {e}") from e
    if not question or not answer:
        raise BenchmarkError("empty question or answer after decryption")
    images, missing = [], []
    for u in _aslist(row.get("images")):
        try:
            images.append(str(resolve_image(u)))
        except BenchmarkError as e:
            if missing_images != "text_only":
                raise
            missing.append({"ref": str(u)[:200], "reason": str(e)[:200]})
    extra: dict[str, Any] = {}
    if missing:  # text-only on request: no partial image set, the question is asked without images
        images = []
        extra = {"text_only": True, "missing_images": missing, "labels": [TEXT_ONLY_LABEL]}
    return Task(id=f"mmbc_{row_id(row, 'id')}", question=question, input_images=images, answers=[answer], source=source,
                metadata={**extra, "sensitive": True, "mmbc_id": row["id"], "category": row.get("category"),
                          "subtask": row.get("subtask"), "level": row.get("level"),
                          "checklist": checklist, "checklist_property": row.get("checklist_property"),
                          "judge_question": question.split(MMBC_QUESTION_MARKER)[-1].strip(),
                          "question_sha256": sha256_text(question), "answer_sha256": sha256_text(answer)})


def load_mm_browsecomp(root: str | Path, limit: int | None = None, *, strict: bool = False,
                       missing_images: str = "problem") -> LoadResult:
    """Load MM-BrowseComp rows from the ``*.jsonl`` files in ``root`` (published, encrypted format)
    with their images from ``root/images`` (image fields are URLs: resolved by file name).

    Per-row problems (reported, the rest loads): a line that is not JSON or not UTF-8, a missing or
    duplicate id, failed decryption, an absent image file (``missing_images="problem"``, the
    default); ``missing_images="text_only"`` loads such a row without images, labelled (see
    :func:`mmbrowsecomp_task`).

    Decrypted text stays in the returned tasks only (see :func:`mmbrowsecomp_task`).

    Raises:
        BenchmarkError: no ``.jsonl`` file in ``root``, or ``strict`` and a row is bad.
    """
    root = Path(root)
    files = sorted(root.glob("*.jsonl"))
    if not files:
        raise BenchmarkError(f"{root} has no .jsonl file (expected MM-BrowseComp's published JSONL)")
    check_missing_images(missing_images)
    check_limit(limit)
    res = LoadResult("mmbrowsecomp", info={"files": [_file_info(f) for f in files], "format": "MM-BrowseComp JSONL",
                                           "missing_images": missing_images})
    img_dir = root / "images"
    for f in files:
        for i, raw in enumerate(f.read_bytes().splitlines(), 1):
            if not raw.strip():
                continue
            rid = None
            try:
                row = json_line(raw)  # per line: one badly encoded or too deeply nested line is one problem
                try:  # the problem line names the id only when it is one
                    rid = row_id(row, "id") if isinstance(row, dict) else None
                except BenchmarkError:
                    rid = None
                res.add([mmbrowsecomp_task(row, lambda u: resolve_by_name(u, img_dir), source="mm_browsecomp",
                                           missing_images=missing_images)], f"{f.name}:{i}")
            except (ValueError, BenchmarkError, AttributeError, TypeError) as e:  # JSON/Unicode errors are ValueErrors
                reason = f"{type(e).__name__}: {e}"
                if strict:
                    raise BenchmarkError(f"{f.name} line {i}: {reason}") from e
                res.problem(f"{f.name}:{i}", reason, None if rid is None else f"mmbc_{rid}")
            if limit is not None and len(res.tasks) >= limit:
                return res
    return res


# ------------------------------------------------------------------------------------------ LiveVQA
_OPTION = _re.compile(r"^\s*\(?([A-Z])[\.\):]\s*(.*)$", _re.S)


def parse_options(options: Iterable[str]) -> dict[str, str]:
    """``["A. foo", "B. bar"]`` -> ``{"A": "foo", "B": "bar"}``.

    Raises:
        BenchmarkError: an option without a letter label.
    """
    out = {}
    for o in options:
        m = _OPTION.match(str(o))
        if not m:
            raise BenchmarkError(f"option without a letter label: {str(o)[:60]!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def livevqa_tasks(row: dict[str, Any], image: Path, *, levels: Iterable[int] = (1, 2), source: str) -> list[Task]:
    """One LiveVQA row -> its level-1 task (multiple choice: the options are shown, scored by the
    chosen letter or the option text) and/or its level-2 task (multi-hop, open answer, scored
    against ``Ground_Truth_List``). Ids: ``livevqa_<id>_l1`` / ``_l2``.

    Raises:
        BenchmarkError: a requested level is missing or malformed.
    """
    out = []
    for level in levels:
        qa = row.get(f"level{level}_qa")
        if not isinstance(qa, dict) or not str(qa.get("question") or "").strip():
            raise BenchmarkError(f"no level-{level} question")
        gt_list = _aslist(qa.get("Ground_Truth_List"))
        meta = {"level": level, "question_type": qa.get("question_type"), "news_source": row.get("source"),
                "time": row.get("time"), "livevqa_id": row.get("id")}
        question = str(qa["question"]).strip()
        if level == 1:
            options = parse_options(qa.get("options") or [])
            letter = str(qa.get("Ground_Truth") or "").strip().upper()
            if letter not in options:
                raise BenchmarkError(f"level-1 Ground_Truth {letter!r} is not one of the options {sorted(options)}")
            question += "\n\nOptions:\n" + "\n".join(f"{k}. {v}" for k, v in options.items()) + \
                "\n\nAnswer with the letter of the correct option."
            answers = _answers([options[letter]], gt_list)
            meta.update({"choices": options, "correct_choice": letter, "rule_mode": "choice"})
        else:
            answers = _answers(gt_list, [])
            if not answers:
                raise BenchmarkError("level-2 question without Ground_Truth_List")
        out.append(Task(id=f"livevqa_{row_id(row, 'id')}_l{level}", question=question, input_images=[str(image)],
                        answers=answers, source=f"{source}_l{level}", metadata=meta))
    return out


def load_livevqa(root: str | Path, limit: int | None = None, *, levels: Iterable[int] = (1, 2),
                 strict: bool = False) -> LoadResult:
    """Load LiveVQA items (the GitHub release format: a JSON list with ``level1_qa`` /
    ``level2_qa`` per news image) from the ``*.json`` file in ``root``, images from ``root/images``.
    Level 1 (multiple choice) and level 2 (multi-hop) become separate tasks; ``limit`` counts rows.

    Raises:
        BenchmarkError: no JSON file, the file is not a list, or ``strict`` and a row is bad.
    """
    root = Path(root)
    files = sorted(root.glob("*.json"))
    if not files:
        raise BenchmarkError(f"{root} has no .json file (expected LiveVQA's benchmark JSON)")
    check_limit(limit)
    res = LoadResult("livevqa", info={"files": [_file_info(f) for f in files], "levels": list(levels)})
    img_dir = root / "images"
    rows_done = 0
    for f in files:
        try:  # one unreadable file is one problem (the other files load)
            data = json_line(f.read_bytes())
            if not isinstance(data, list):
                raise BenchmarkError(f"holds a JSON {type(data).__name__}, expected a list of items")
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, too deep, not a list
            if strict:
                raise BenchmarkError(f"{f}: {e}") from e
            res.problem(f.name, f"{type(e).__name__}: {e}")
            continue
        for i, row in enumerate(data):
            try:
                if not isinstance(row, dict):
                    raise BenchmarkError(f"row is a {type(row).__name__}, not an object")
                row_id(row, "id")
                image = resolve_by_name(str(row.get("img_path") or ""), img_dir)
                res.add(livevqa_tasks(row, image, levels=levels, source="livevqa_news"), f"{f.name}:{i}")
            except (BenchmarkError, TypeError, AttributeError, ValueError) as e:
                if strict:
                    raise BenchmarkError(f"{f.name} row {i}: {e}") from e
                res.problem(f"{f.name}:{i}", f"{type(e).__name__}: {e}",
                            row.get("id") if isinstance(row, dict) else None)
            rows_done += 1
            if limit is not None and rows_done >= limit:
                return res
    return res


# ------------------------------------------------------------------ MMSearch-R1 parquet (InfoSeek, FVQA)
def mmsearch_r1_task(row: dict[str, Any], index: int, *, prefix: str, image_dir: Path, source: str) -> Task:
    """One row of the MMSearch-R1 training/eval parquet schema (``prompt`` chat list, ``images``
    list of ``{"bytes": ...}``, ``reward_model`` with ``ground_truth`` and ``candidate_answers``
    as a list or JSON string, optional ``data_id`` / ``category``) -> :class:`Task`.

    Raises:
        BenchmarkError: no user question, no ground truth, or an undecodable image.
    """
    prompt = _aslist(row.get("prompt"))
    users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    if isinstance(content, list):  # multimodal chat content: keep the text parts
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    question = _re.sub(r"<image>", "", str(content or "")).strip()
    if not question:
        raise BenchmarkError("no user question in prompt")
    rm = row.get("reward_model") or {}
    if not isinstance(rm, dict):
        raise BenchmarkError(f"reward_model is a {type(rm).__name__}, not an object")
    gt = rm.get("ground_truth")
    if isinstance(gt, dict):  # some releases nest {"target": [...]}
        gt = gt.get("target")
    if gt in (None, "", []):
        raise BenchmarkError("no reward_model.ground_truth")
    answers = _answers(_aslist(gt), _aslist(rm.get("candidate_answers")))
    images = []
    for im in _aslist(row.get("images")):
        data = image_to_bytes(im)
        if data is None:
            raise BenchmarkError("empty image cell")
        images.append(str(save_image_bytes(data, image_dir, prefix)))
    # rows of releases without ids (InfoSeek) are numbered; a data_id column with a null is a missing id
    tid = row_id(row, "data_id") if "data_id" in row else f"{prefix}_{index}"
    return Task(id=tid, question=question, input_images=images, answers=answers, source=source,
                metadata={"category": row.get("category"), "data_source": row.get("data_source"), "row": index})


def read_parquet_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a parquet file as Python dicts (pyarrow; installed with the ``train`` extra).

    Raises:
        BenchmarkError: pyarrow missing or the file is not readable parquet.
    """
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # the loader must say how to fix it, not fail obscurely
        raise BenchmarkError("reading parquet needs pyarrow: pip install 'mmsearch-kit[train]' (datasets brings it)") from e
    try:
        return pq.read_table(str(path)).to_pylist()
    except Exception as e:  # pyarrow raises ArrowInvalid / OSError subclasses for damaged files
        raise BenchmarkError(f"{path}: not readable parquet: {type(e).__name__}: {e}") from e


def load_mmsearch_r1_parquet(path: str | Path, limit: int | None = None, *, benchmark: str, prefix: str,
                             image_dir: str | Path | None = None, strict: bool = False) -> LoadResult:
    """Load a parquet file in the MMSearch-R1 schema (see :func:`mmsearch_r1_task`).

    Raises:
        BenchmarkError: unreadable file, or ``strict`` and a row is bad.
    """
    check_limit(limit)
    path = Path(path)
    img_dir = Path(image_dir) if image_dir else default_image_dir() / benchmark
    res = LoadResult(benchmark, info={"files": [_file_info(path)], "format": "MMSearch-R1 parquet"})
    for i, row in enumerate(read_parquet_rows(path)):
        try:
            res.add([mmsearch_r1_task(row, i, prefix=prefix, image_dir=img_dir, source=benchmark)], f"{path.name}:{i}")
        except (BenchmarkError, TypeError, AttributeError, ValueError) as e:
            if strict:
                raise BenchmarkError(f"{path.name} row {i}: {e}") from e
            res.problem(f"{path.name}:{i}", f"{type(e).__name__}: {e}",
                        row.get("data_id") if isinstance(row, dict) else None)
        if limit is not None and len(res.tasks) >= limit:
            break
    return res


def load_infoseek(path: str | Path, limit: int | None = None, *, image_dir: str | Path | None = None,
                  strict: bool = False) -> LoadResult:
    """InfoSeek in the MMSearch-R1 parquet form (e.g. ``infoseek_mini/mini_data.pq``). Rows carry
    no id: tasks are ``infoseek_<row>``."""
    return load_mmsearch_r1_parquet(path, limit, benchmark="infoseek", prefix="infoseek", image_dir=image_dir,
                                    strict=strict)


# ----------------------------------------------------------------------------- VisTarget-style JSONL
def load_vistarget_jsonl(path: str | Path, limit: int | None = None, *, strict: bool = False) -> LoadResult:
    """VisTarget-style tasks (WeAgent §5) from a JSONL file: one object per line with ``id``,
    ``question``, ``answers`` (list), ``target_image`` (held out: never shown to the agent) and
    optional ``input_images``; image paths are relative to the file's folder.

    Raises:
        BenchmarkError: unreadable file, or ``strict`` and a row is bad.
    """
    check_limit(limit)
    path = Path(path)
    if not path.is_file():
        raise BenchmarkError(f"{path} does not exist")
    res = LoadResult("vistarget", info={"files": [_file_info(path)], "format": "VisTarget JSONL"})
    base = path.parent
    for i, line in enumerate(path.read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json_line(line)
            target = (base / row["target_image"]).resolve()
            if not target.is_file():
                raise BenchmarkError(f"target image {row['target_image']!r} not found")
            inputs = []
            for p in _aslist(row.get("input_images")):
                q = (base / p).resolve()
                if not q.is_file():
                    raise BenchmarkError(f"input image {p!r} not found")
                inputs.append(str(q))
            answers = _answers(_aslist(row.get("answers")), [])
            if not isinstance(row.get("question"), str) or not row["question"].strip() or not answers:
                raise BenchmarkError("empty question or answers")
            res.add([Task(id=row_id(row, "id"), question=row["question"].strip(), input_images=inputs,
                                  answers=answers, target_image=str(target), source="vistarget",
                                  metadata={k: v for k, v in row.items()
                                            if k not in ("id", "question", "answers", "target_image", "input_images")})],
                    f"{path.name}:{i}")
        except (ValueError, KeyError, BenchmarkError, TypeError, AttributeError) as e:
            if strict:
                raise BenchmarkError(f"{path.name} line {i}: {e}") from e
            res.problem(f"{path.name}:{i}", f"{type(e).__name__}: {e}")
        if limit is not None and len(res.tasks) >= limit:
            break
    return res
