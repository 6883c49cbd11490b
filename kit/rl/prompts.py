"""RL prompts from the places a paper run names them (WeAgent §4.5 "RL query filtering", §6.2; POINTS-Seeker A.4).

:func:`load_rl_prompts` reads the data pipeline's RL split (``splits/rl_prompts.jsonl`` of notebook 02, one
:class:`~kit.harness.episode.Task` per line), a saved RL mixture (:func:`kit.data.mixtures.save_dataset`:
``arrow/`` or ``data/*.parquet``, rows of :func:`kit.data.mixtures.rl_row`) or a published one
(``hub:dataset:owner/name@revision``, downloaded into the standard Hugging Face cache). Mixture rows carry
their images embedded; they are written under ``image_dir`` so the harness can register them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kit.harness.episode import Task

__all__ = ["RLPromptError", "load_rl_prompts", "rl_prompts_problem", "tasks_from_rl_rows"]


class RLPromptError(ValueError):
    """RL prompts that cannot be loaded: nothing at the path, a malformed line or row, a task without answer."""


def _write_image(img: Any, image_dir: Path, row_id: str, i: int) -> str:
    if isinstance(img, dict) and img.get("bytes"):
        data = img["bytes"]
        name = Path(str(img.get("path") or f"{i}.png")).name
    else:
        raise RLPromptError(f"row {row_id}: image {i} has no embedded bytes")
    # content-addressed names: two rows with an image called "0.png" never overwrite each other
    dest = image_dir / f"{hashlib.sha256(data).hexdigest()[:16]}_{name}"
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return str(dest)


def _undecoded(rows):
    """A ``datasets.Dataset`` with its image columns left as stored bytes (not decoded to PIL images)."""
    feats = getattr(rows, "features", None)
    if not feats:
        return rows
    from datasets import Image, Sequence

    for col in ("input_images", "target_image"):
        f = feats.get(col)
        if isinstance(f, Image):
            rows = rows.cast_column(col, Image(decode=False))
        elif isinstance(f, Sequence) and isinstance(f.feature, Image):
            rows = rows.cast_column(col, Sequence(Image(decode=False)))
        elif isinstance(f, list) and f and isinstance(f[0], Image):
            rows = rows.cast_column(col, [Image(decode=False)])
    return rows


def tasks_from_rl_rows(rows, image_dir: str | Path) -> list[Task]:
    """RL mixture rows (:func:`kit.data.mixtures.rl_row`) back into :class:`Task` objects; input and target
    images are written under ``image_dir``.

    Raises:
        RLPromptError: a row without id, question or reference answer, or with an image without bytes.
    """
    out: list[Task] = []
    image_dir = Path(image_dir)
    rows = _undecoded(rows)
    for n, row in enumerate(rows):
        rid = str(row.get("id") or f"row{n}")
        answers = [str(a) for a in (row.get("answers") or []) if str(a).strip()]
        if not row.get("question") or not answers:
            raise RLPromptError(f"RL prompt row {rid}: a question and a reference answer are required (RL needs a judgeable target)")
        meta = row.get("metadata") or "{}"
        try:
            metadata = json.loads(meta) if isinstance(meta, str) else dict(meta)
        except (ValueError, TypeError) as e:
            raise RLPromptError(f"RL prompt row {rid}: metadata is not JSON: {e}") from None
        metadata.setdefault("source", row.get("source"))
        imgs = [_write_image(im, image_dir, rid, i) for i, im in enumerate(row.get("input_images") or [])]
        target = row.get("target_image")
        out.append(Task(id=rid, question=str(row["question"]), answers=answers, input_images=imgs,
                        target_image=_write_image(target, image_dir, rid, -1) if target else None,
                        metadata=metadata))
    return out


def _task_line(p: Path, i: int, line: str | bytes) -> Task:
    """Line ``i`` of ``p`` as an RL prompt (a :class:`Task` with a reference answer); one reader for
    :func:`load_rl_prompts` and :func:`rl_prompts_problem`. Raises :class:`RLPromptError`."""
    try:
        t = Task.model_validate_json(line)
    except ValueError as e:
        raise RLPromptError(f"{p}:{i}: not a task: {str(e).splitlines()[0]}") from None
    if not [a for a in t.answers if str(a).strip()]:
        raise RLPromptError(f"{p}:{i}: task {t.id} has no reference answer (RL needs a judgeable target)")
    return t


def _read_jsonl(p: Path) -> list[Task]:
    tasks = []
    with open(p, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                tasks.append(_task_line(p, i, line))
    return tasks


MAX_CHECK_LINE_BYTES = 16 * 1024 * 1024  # rl_prompts_problem reads one line; a ZIM or binary file has no newline


def _first_task_problem(p: Path) -> str | None:
    """Why the first non-blank line of the ``.jsonl`` file ``p`` is not an RL prompt, or None."""
    if p.suffix.lower() != ".jsonl":  # a ZIM archive, a parquet file ... is "a file" to _locate
        return f"rl_prompts file {str(p)!r} is not a .jsonl of tasks ({_FORMS})"
    try:
        with open(p, "rb") as f:
            for i in range(1, 10_001):  # blank lines first: still bounded
                line = f.readline(MAX_CHECK_LINE_BYTES)
                if not line:
                    return f"rl_prompts file {str(p)!r} is empty: no RL prompt in it ({_FORMS})"
                if len(line) >= MAX_CHECK_LINE_BYTES and not line.endswith(b"\n"):
                    return f"{p}:{i}: not a task: a line over {MAX_CHECK_LINE_BYTES:,} bytes (not a task .jsonl)"
                if line.strip():
                    try:
                        _task_line(p, i, line.decode("utf-8"))
                    except UnicodeDecodeError:
                        return f"{p}:{i}: not a task: not UTF-8 text"
                    except RLPromptError as e:
                        return str(e)
                    return None
    except OSError as e:
        return f"rl_prompts file {str(p)!r} cannot be read: {e}"
    return f"rl_prompts file {str(p)!r} starts with 10,000 blank lines: no RL prompt found"


def _locate(p: Path) -> tuple[str, Path] | None:
    """Where the RL prompts under local path ``p`` are: ``("jsonl" | "arrow" | "parquet", path)``, or None."""
    if p.is_dir() and (p / "datasets" / "rl_mixture").is_dir():
        p = p / "datasets" / "rl_mixture"  # notebook 02's output folder: its final RL mixture (§4.5)
    elif p.is_dir() and (p / "splits" / "rl_prompts.jsonl").is_file():
        p = p / "splits" / "rl_prompts.jsonl"  # notebook 02's in-house RL split
    elif p.is_dir() and (p / "rl_prompts.jsonl").is_file():
        p = p / "rl_prompts.jsonl"
    if p.is_file():
        return "jsonl", p
    if p.is_dir() and (p / "arrow").is_dir():
        return "arrow", p / "arrow"
    if p.is_dir() and sorted(p.glob("data/*.parquet")):
        return "parquet", p
    return None


_FORMS = ("expected a task .jsonl (notebook 02's splits/rl_prompts.jsonl), notebook 02's output folder, a saved "
          "RL mixture (arrow/ or data/*.parquet) or hub:dataset:owner/name@revision")


def rl_prompts_problem(source: str | Path) -> str | None:
    """Why :func:`load_rl_prompts` cannot read ``source`` (one line), or None; offline, nothing is downloaded:
    a ``hub:`` reference must be a well-formed dataset reference (downloaded by the notebook), a local path
    must hold one of the forms of the module docstring; a task file must be a ``.jsonl`` whose first
    non-blank line is a task with a reference answer (an empty, non-JSON or non-task file is refused; the
    rest of the file is read by the notebook). Used by ``python -m kit.cli notebook 05`` before the kernel
    starts."""
    from kit.hub.download import _REF

    source = str(source)
    if source.startswith("hub:"):
        m = _REF.match(source)
        if not m:
            return f"rl_prompts={source!r} is not a hub reference: expected hub:dataset:owner/name@revision"
        if m.group(1) == "model":
            return f"rl_prompts={source!r} names a model repository: RL prompts are a dataset (hub:dataset:owner/name@revision)"
        return None
    p = Path(source).expanduser()
    if not p.exists():
        return f"rl_prompts={source!r} does not exist ({_FORMS})"
    found = _locate(p)
    if found is None:
        return f"no RL prompts at rl_prompts={source!r}: {_FORMS}"
    if found[0] == "jsonl":  # the first record is read: an empty, non-JSON or non-task file stops here
        problem = _first_task_problem(found[1])
        return f"rl_prompts={source!r}: {problem}" if problem else None
    return None


def load_rl_prompts(source: str | Path, image_dir: str | Path, *, limit: int | None = None) -> list[Task]:
    """RL prompts from ``source`` (see the module docstring), at most ``limit`` (in file order).

    Raises:
        RLPromptError: nothing loadable at ``source``, a malformed task or row, no prompts at all.
        ValueError: a bad hub reference; kit.hub.download.DownloadError: the download failed.
    """
    from kit.hub.download import resolve_ref

    found = _locate(Path(resolve_ref(str(source), repo_type="dataset")))
    if found is None:
        raise RLPromptError(f"no RL prompts at {source}: {_FORMS}")
    kind, p = found
    if kind == "jsonl" and p.suffix.lower() != ".jsonl":  # as rl_prompts_problem: a ZIM is not a task file
        raise RLPromptError(f"no RL prompts at {source}: {p.name} is not a .jsonl of tasks ({_FORMS})")
    if kind == "jsonl":
        tasks = _read_jsonl(p)
    elif kind == "arrow":
        from datasets import load_from_disk

        tasks = tasks_from_rl_rows(load_from_disk(str(p)), image_dir)
    else:
        from datasets import load_dataset

        ds = load_dataset("parquet", data_files=[str(f) for f in sorted(p.glob("data/*.parquet"))], split="train")
        tasks = tasks_from_rl_rows(ds, image_dir)
    if not tasks:
        raise RLPromptError(f"no RL prompts in {source}")
    return tasks[:limit] if limit is not None else tasks
