"""VisTarget-style benchmark building (WeAgent §5.1 "Construction and Human Verification").

The benchmark follows the same construction as the training data (§4), from **seeds held out before
any SFT/RL split** (:func:`kit.data.sample.holdout` writes them as ``benchmark_candidates.jsonl``):
each task keeps a held-out target image the agent never sees and must find and cite. Tasks are split
into **input-image** tasks (the user attaches a picture of the chain's anchor) and **text-only**
tasks. A tool-based solvability check (:func:`solvability_check`) runs each task through the harness;
the human verification step is a review round trip, not automated: :func:`export_review` writes a
CSV or JSONL sheet with absolute image paths for reviewers, :func:`import_review` reads their
verdicts (``accept`` / ``fix`` with corrections / ``reject``) back and writes the verified set.

The task files use the VisTarget JSONL layout read by :func:`kit.eval.loaders.load_vistarget_jsonl`
(image paths relative to the file), so the evaluation runner scores them with Target Match unchanged.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kit.data.records import SynthTask, write_json

MODALITIES = ("input_image", "text_only")
VERDICTS = ("accept", "fix", "reject")
REVIEW_COLUMNS = ("id", "modality", "question", "answers", "target_image", "input_image", "chain", "depth",
                  "solvable", "verdict", "corrected_question", "corrected_answers", "reviewer", "note")


class ReviewError(ValueError):
    """A review sheet cannot be imported (unknown id, unknown verdict, a fix without corrections,
    unreadable file); the message names the row."""


def _rel(path: Path, base: Path) -> str:
    return str(path.relative_to(base))


def build_vistarget(candidates: Sequence[SynthTask], out_dir: str | Path, *, n: int | None = None,
                    max_per_modality: int | None = None) -> dict[str, Any]:
    """Write held-out VisTarget-style tasks under ``out_dir``: ``tasks.jsonl`` (all),
    ``tasks_input_image.jsonl`` and ``tasks_text_only.jsonl`` (the split), images under ``images/``.

    Each row: ``id``, ``question``, ``answers``, ``target_image`` (held out), ``input_images``
    (input-image tasks), and metadata ``modality``, ``depth``, ``seed_id``, ``chain`` (the latent
    entities), ``fact`` (how the answer is read from the target), ``review`` = ``"pending"``.
    Candidates are taken in id order (deterministic), at most ``n`` overall and ``max_per_modality``
    per modality. Returns the split counts (also ``split_counts.json``).

    Raises:
        kit.eval.loaders.BenchmarkError: a target or input image is not a decodable image.
    """
    from kit.eval.loaders import save_image_bytes

    out = Path(out_dir).resolve()  # image paths are written relative to it
    img_dir = out / "images"
    rows: dict[str, list[dict[str, Any]]] = {m: [] for m in MODALITIES}
    for t in sorted(candidates, key=lambda x: x.id):
        if n is not None and sum(len(v) for v in rows.values()) >= n:
            break
        if max_per_modality is not None and len(rows[t.modality]) >= max_per_modality:
            continue
        target = save_image_bytes(Path(t.seed.target.path).read_bytes(), img_dir, "target")
        inputs = [save_image_bytes(Path(p).read_bytes(), img_dir, "input") for p in t.input_images]
        rows[t.modality].append({
            "id": f"vt_{t.id}", "question": t.query, "answers": list(t.answers), "target_image": _rel(target, out),
            "input_images": [_rel(p, out) for p in inputs], "modality": t.modality, "depth": t.chain.depth,
            "seed_id": t.seed_id, "chain": [t.chain.anchor] + [h.answer for h in t.chain.hops],
            "fact": {"kind": t.seed.fact.kind, "question": t.seed.fact.question, "evidence": t.seed.fact.evidence},
            "source_page": t.seed.source_page, "labels": list(t.labels) + list(t.seed.labels), "review": "pending"})
    out.mkdir(parents=True, exist_ok=True)
    for m in MODALITIES:
        _write_jsonl(out / f"tasks_{m}.jsonl", rows[m])
    _write_jsonl(out / "tasks.jsonl", rows["input_image"] + rows["text_only"])
    counts = {m: len(rows[m]) for m in MODALITIES}
    write_json(counts, out / "split_counts.json")
    return counts


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines() if x.strip()]
    except (OSError, json.JSONDecodeError) as e:
        raise ReviewError(f"cannot read {path}: {e}") from e


async def solvability_check(tasks_jsonl: str | Path, harness_factory: Callable[[Any, int], Any],
                            out_dir: str | Path, *, concurrency: int = 4) -> dict[str, Any]:
    """Run every task once through the harness (``harness_factory(task, sample)``) and record on each
    row ``solvable`` = answer correct (rule judge) and a cited image matching the held-out target
    (perceptual judge), with the episode id. Rewrites ``tasks_jsonl`` in place; returns counts.
    """
    from kit.eval.judges import PerceptualImageJudge, RuleJudge
    from kit.eval.loaders import load_vistarget_jsonl
    from kit.harness.runner import run_batch

    path = Path(tasks_jsonl)
    res = load_vistarget_jsonl(path, strict=True)
    recs = await run_batch(harness_factory, res.tasks, out_dir, concurrency=concurrency, progress=False)
    judge, img = RuleJudge("contains"), PerceptualImageJudge()
    verdict: dict[str, dict[str, Any]] = {}
    by_task = {t.id: t for t in res.tasks}
    for r in recs:
        t = by_task[r.task.id]
        correct = bool(judge.judge_task(t, r.final_response).correct)
        match = False
        for c in r.cited_images:
            if r.workspace and (Path(r.workspace) / c).is_file():
                if (await img.judge(Path(r.workspace) / c, t.target_image)).match:
                    match = True
                    break
        verdict[t.id] = {"solvable": correct and match, "answer_correct": correct, "target_match": match,
                         "episode": r.id, "status": r.status}
    rows = _read_jsonl(path)
    for row in rows:
        row.update(verdict.get(row["id"], {"solvable": False, "status": "not_run"}))
    _write_jsonl(path, rows)
    c = Counter("solvable" if v["solvable"] else "unsolved" for v in verdict.values())
    return {"checked": len(verdict), **dict(c)}


def export_review(tasks_jsonl: str | Path, sheet: str | Path) -> Path:
    """Write the human review sheet for a task file: ``.csv`` or ``.jsonl`` (by suffix), one row per
    task with absolute image paths (``target_image``, ``input_image``), the chain, the solvability
    result and empty ``verdict`` / ``corrected_question`` / ``corrected_answers`` (``|``-separated)
    / ``reviewer`` / ``note`` columns to fill in.

    Raises:
        ReviewError: unknown sheet format.
    """
    base = Path(tasks_jsonl).parent
    rows = []
    for r in _read_jsonl(Path(tasks_jsonl)):
        rows.append({"id": r["id"], "modality": r.get("modality", ""), "question": r["question"],
                     "answers": " | ".join(r["answers"]), "target_image": str((base / r["target_image"]).resolve()),
                     "input_image": " | ".join(str((base / p).resolve()) for p in r.get("input_images") or []),
                     "chain": " -> ".join(r.get("chain") or []), "depth": r.get("depth", ""),
                     "solvable": r.get("solvable", ""), "verdict": "", "corrected_question": "",
                     "corrected_answers": "", "reviewer": "", "note": ""})
    p = Path(sheet)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".csv":
        with open(p, "w", encoding="utf-8", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(REVIEW_COLUMNS))
            w.writeheader()
            w.writerows(rows)
    elif p.suffix == ".jsonl":
        _write_jsonl(p, rows)
    else:
        raise ReviewError(f"review sheet must be .csv or .jsonl, got {p.name}")
    return p


def _read_sheet(sheet: Path) -> list[dict[str, Any]]:
    if sheet.suffix == ".csv":
        try:
            with open(sheet, encoding="utf-8", newline="") as f:
                return list(csv.DictReader(f))
        except (OSError, csv.Error) as e:
            raise ReviewError(f"cannot read {sheet}: {e}") from e
    if sheet.suffix == ".jsonl":
        return _read_jsonl(sheet)
    raise ReviewError(f"review sheet must be .csv or .jsonl, got {sheet.name}")


def import_review(tasks_jsonl: str | Path, sheet: str | Path, out_path: str | Path) -> dict[str, Any]:
    """Apply reviewers' verdicts and write the verified task file ``out_path`` (same layout; images
    are referenced relative to ``tasks_jsonl``'s folder, so ``out_path`` must sit in that folder).

    ``accept`` keeps the task, ``fix`` replaces its question and/or answers with the corrections,
    ``reject`` drops it; a task with no verdict stays out and is counted ``pending``. Each kept row
    gets ``review`` = the verdict plus ``reviewer`` and ``note``. Returns counts by verdict (also
    written as ``<out_path stem>_review_counts.json``).

    Raises:
        ReviewError: an id not in the task file, a duplicate id, an unknown verdict, a ``fix`` with
            no correction, or ``out_path`` outside the task file's folder.
    """
    tasks_p, out = Path(tasks_jsonl), Path(out_path)
    if out.resolve().parent != tasks_p.resolve().parent:
        raise ReviewError(f"{out} must be in {tasks_p.parent} (image paths are relative to it)")
    tasks = {r["id"]: r for r in _read_jsonl(tasks_p)}
    seen: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(_read_sheet(Path(sheet)), 1):
        rid = str(row.get("id", "")).strip()
        if rid not in tasks:
            raise ReviewError(f"review row {i}: id {rid!r} is not in {tasks_p.name}")
        if rid in seen:
            raise ReviewError(f"review row {i}: id {rid!r} reviewed twice")
        v = str(row.get("verdict") or "").strip().lower()
        if v and v not in VERDICTS:
            raise ReviewError(f"review row {i} ({rid}): verdict {v!r} is not one of {VERDICTS}")
        if v == "fix" and not (str(row.get("corrected_question") or "").strip()
                               or str(row.get("corrected_answers") or "").strip()):
            raise ReviewError(f"review row {i} ({rid}): verdict 'fix' needs corrected_question or corrected_answers")
        seen[rid] = {**row, "verdict": v}
    counts: Counter = Counter()
    kept = []
    for rid, task in tasks.items():
        row = seen.get(rid)
        v = row["verdict"] if row else ""
        counts[v or "pending"] += 1
        if v not in ("accept", "fix"):
            continue
        t = dict(task)
        if v == "fix":
            if str(row.get("corrected_question") or "").strip():
                t["original_question"] = t["question"]
                t["question"] = row["corrected_question"].strip()
            if str(row.get("corrected_answers") or "").strip():
                t["original_answers"] = t["answers"]
                t["answers"] = [a.strip() for a in row["corrected_answers"].split("|") if a.strip()]
        t.update({"review": v, "reviewer": str(row.get("reviewer") or ""), "review_note": str(row.get("note") or "")})
        kept.append(t)
    _write_jsonl(out, kept)
    result = {"tasks": len(tasks), "verified": len(kept), **{k: counts.get(k, 0) for k in (*VERDICTS, "pending")}}
    write_json(result, out.with_name(f"{out.stem}_review_counts.json"))
    return result
