"""SFT and RL mixtures as Hugging Face ``datasets`` with images, and their statistics (WeAgent §4.5
"Dataset scale and composition"; POINTS-Seeker §3.2.2).

A mixture combines sources, each tagged ``in-house`` (the synthesis pipeline) or ``open-source``
(normalized traces: MMSearch-R1, Metis, OpenSearch-VL, REDSearcher). Sizing reuses
:class:`kit.train.mixtures.Mixture` (per-source quotas from weights), so the same weights mean the
same thing in the Agentic Seeding stage and here; records are drawn without replacement by a seeded RNG.

Rows (:func:`sft_features`): one episode record per row; ``images`` holds every registered image of
the episode (``datasets.Image``, bytes embedded) with ``image_names`` giving the workspace file
name each message refers to, ``messages`` the chat as JSON and ``episode`` the rest of the
:class:`~kit.harness.episode.EpisodeRecord`, so :func:`records_from_sft_dataset` rebuilds records
that :class:`kit.train.sft_data.SFTEncoder` accepts. RL rows (:func:`rl_features`): a prompt with its
input images, reference answers, the held-out target image when there is one, and the solve rate.

:func:`mixture_stats` gives counts and shares per source and per origin like the paper's
"3.3K in-house trajectories (5.5%) and 56.2K open-source trajectories (94.5%)".
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kit.harness.episode import EpisodeRecord, Task
from kit.harness.portable import resolved_record
from kit.types import Message

Origin = Literal["in-house", "open-source"]


class MixtureDataError(ValueError):
    """A mixture source or row cannot be turned into a dataset row (missing file, missing image,
    malformed record, bad weight)."""


@dataclass(frozen=True)
class DataSource:
    """One mixture component.

    ``path``: a jsonl of episode records (SFT) or of tasks (RL: :class:`~kit.harness.episode.Task`
    dumps, e.g. ``splits/rl_prompts.jsonl``). ``weight`` > 0 sets its share when a mixture ``size``
    is given (ignored otherwise: every row is used).
    """

    name: str
    path: Path
    origin: Origin
    weight: float = 1.0


def _features(kind: str):
    from datasets import Features, Image, Value
    from datasets import Sequence as Seq

    common = {"id": Value("string"), "source": Value("string"), "origin": Value("string"),
              "question": Value("string"), "answers": Seq(Value("string")), "labels": Seq(Value("string"))}
    if kind == "sft":
        return Features({**common, "messages": Value("string"), "images": Seq(Image()),
                         "image_names": Seq(Value("string")), "episode": Value("string"),
                         "turns": Value("int32"), "tool_calls": Value("int32")})
    return Features({**common, "input_images": Seq(Image()), "input_image_names": Seq(Value("string")),
                     "target_image": Image(), "solve_rate": Value("float32"), "metadata": Value("string")})


def _check(sources: Sequence[DataSource]) -> None:
    if not sources:
        raise MixtureDataError("a mixture needs at least one source")
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise MixtureDataError(f"duplicate source names: {names}")
    for s in sources:
        if s.origin not in ("in-house", "open-source"):
            raise MixtureDataError(f"source {s.name}: origin must be 'in-house' or 'open-source', got {s.origin!r}")
        if not s.weight > 0:
            raise MixtureDataError(f"source {s.name}: weight must be positive, got {s.weight}")
        if not Path(s.path).is_file():
            raise MixtureDataError(f"source {s.name}: {s.path} does not exist")


def _quotas(sources: Sequence[DataSource], size: int | None) -> dict[str, int] | None:
    if size is None:
        return None
    from kit.train.mixtures import Mixture, Source

    return Mixture([Source(name=s.name, kind="multimodal_agentic", weight=s.weight) for s in sources],
                   size=size).quotas()


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise MixtureDataError(f"{path}: line {i} is not JSON: {e}") from e
    return out


def _image(path: Path) -> dict[str, Any]:
    try:
        return {"bytes": path.read_bytes(), "path": path.name}
    except OSError as e:
        raise MixtureDataError(f"image {path} cannot be read: {e}") from e


def sft_row(rec: EpisodeRecord, source: str, origin: Origin) -> dict[str, Any]:
    """One episode record as an SFT dataset row (images read from its workspace).

    Raises:
        MixtureDataError: the record is not trainable, or a registered image file is missing.
    """
    if not rec.trainable:
        raise MixtureDataError(f"record {rec.id} ({source}) is not trainable (status {rec.status})")
    ws = Path(rec.workspace) if rec.workspace else None
    if rec.images and ws is None:
        raise MixtureDataError(f"record {rec.id} ({source}) has images but no workspace")
    images = [_image(ws / im.filename) for im in rec.images]
    # the workspace is this machine's folder: not published (records_from_sft_dataset sets a new one)
    episode = rec.model_dump(mode="json", exclude={"messages", "workspace"})
    return {"id": rec.id, "source": source, "origin": origin, "question": rec.task.question,
            "answers": list(rec.task.answers), "labels": list(rec.labels),
            "messages": json.dumps([m.model_dump(mode="json", exclude_none=True) for m in rec.messages],
                                   ensure_ascii=False),
            "images": images, "image_names": [im.filename for im in rec.images],
            "episode": json.dumps(episode, ensure_ascii=False), "turns": rec.turns, "tool_calls": rec.tool_calls}


def rl_row(task: Task, source: str, origin: Origin) -> dict[str, Any]:
    """One task as an RL prompt row (input images and the held-out target image embedded).

    Raises:
        MixtureDataError: no reference answer (RL needs a judgeable target) or a missing image file.
    """
    if not [a for a in task.answers if str(a).strip()]:
        raise MixtureDataError(f"task {task.id} ({source}) has no reference answer")
    imgs = [_image(Path(p)) for p in task.input_images]
    rate = task.metadata.get("solve_rate")
    return {"id": task.id, "source": source, "origin": origin, "question": task.question,
            "answers": list(task.answers), "labels": list(task.metadata.get("labels") or []),
            "input_images": imgs, "input_image_names": [Path(p).name for p in task.input_images],
            "target_image": _image(Path(task.target_image)) if task.target_image else None,
            "solve_rate": None if rate is None else float(rate),
            "metadata": json.dumps(task.metadata, ensure_ascii=False, default=str)}


def _dataset(rows: list[dict[str, Any]], kind: str):
    from datasets import Dataset

    feats = _features(kind)
    if not rows:  # from_list cannot infer an empty table's columns
        return Dataset.from_dict({k: [] for k in feats}, features=feats)
    return Dataset.from_list(rows, features=feats)


def _draw(rows: list, quota: int | None, rng: random.Random) -> list:
    if quota is None or quota >= len(rows):
        return list(rows)
    return [rows[i] for i in sorted(rng.sample(range(len(rows)), quota))]


def _draw_sources(sources, size, seed, model, reject, to_row, reasons: tuple[str, ...]):
    """Validate each source's jsonl rows as ``model``, drop those for which ``reject`` names a reason,
    draw its quota and convert with ``to_row``; rows come back shuffled, with a per-source report that
    counts every reason in ``reasons`` (0 when none applied)."""
    _check(sources)
    quotas = _quotas(sources, size)
    rng = random.Random(seed)
    rows, report = [], {}
    for s in sources:
        try:
            items = [model.model_validate(r) for r in _read_jsonl(Path(s.path))]
            if model is EpisodeRecord:  # a relative workspace is relative to the file's folder (kit.harness.portable)
                items = [resolved_record(x, Path(s.path).parent) for x in items]
        except ValueError as e:  # also a workspace climbing out of the run (WorkspacePathError)
            raise MixtureDataError(f"source {s.name}: {e}") from e
        why = [reject(x) for x in items]
        good = [x for x, w in zip(items, why) if w is None]
        quota = None if quotas is None else quotas[s.name]
        drawn = _draw(good, quota, rng)
        rows += [to_row(x, s.name, s.origin) for x in drawn]
        report[s.name] = {"origin": s.origin, "available": len(good), "quota": quota, "drawn": len(drawn),
                          **{r: why.count(r) for r in reasons}}
    rng.shuffle(rows)
    return rows, report


def _rl_reject(t: Task) -> str | None:
    """Why a task cannot be an RL prompt: no reference answer (nothing to judge), or the input image
    the question is about is missing (a normalized trace labelled ``input_image_missing``)."""
    if not any(str(a).strip() for a in t.answers):
        return "no_answer"
    if "input_image_missing" in (t.metadata.get("labels") or []):
        return "input_image_missing"
    return None


def build_sft_mixture(sources: Sequence[DataSource], *, size: int | None = None, seed: int = 0):
    """SFT mixture as a ``datasets.Dataset`` (:func:`sft_features`) and its draw report.

    ``size`` ``None`` uses every trainable record of every source; otherwise per-source quotas come
    from the weights (:meth:`kit.train.mixtures.Mixture.quotas`) and records are drawn without
    replacement (a source smaller than its quota is used whole; ``drawn`` < ``quota`` reports it).
    Non-trainable records are excluded and counted (``not_trainable``).

    Returns:
        ``(dataset, report)``; report ``{source: {"origin", "available", "quota", "drawn", "not_trainable"}}``.

    Raises:
        MixtureDataError: bad sources, malformed records, missing images.
    """
    rows, report = _draw_sources(sources, size, seed, EpisodeRecord, lambda r: None if r.trainable else "not_trainable",
                                 sft_row, ("not_trainable",))
    return _dataset(rows, "sft"), report


def build_rl_mixture(sources: Sequence[DataSource], *, size: int | None = None, seed: int = 0):
    """RL prompt mixture as a ``datasets.Dataset`` (:func:`rl_features`) and its draw report.

    Sources are task jsonl files (``rl_prompts.jsonl`` of the synthesis splits, or
    :func:`tasks_from_episodes` of normalized traces, usually after :mod:`kit.data.rl_filter`).
    Tasks without a reference answer (``no_answer``) or whose input image is missing
    (``input_image_missing``) are excluded and counted. Sizing as in
    :func:`build_sft_mixture`.

    Raises:
        MixtureDataError: bad sources, malformed tasks, missing images.
    """
    rows, report = _draw_sources(sources, size, seed, Task, _rl_reject, rl_row, ("no_answer", "input_image_missing"))
    return _dataset(rows, "rl"), report


def tasks_from_episodes(records: Iterable[EpisodeRecord], out_path: str | Path) -> int:
    """Write the tasks of (normalized) episode records as an RL prompt jsonl; returns the count.
    The task's input images are kept as absolute paths so :func:`rl_row` can embed them; a record
    labelled ``input_image_missing`` passes that label on to its task, so :func:`build_rl_mixture`
    excludes and counts it."""
    p = Path(out_path)
    p.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(p, "w", encoding="utf-8") as f:
        for r in records:
            meta = dict(r.task.metadata)
            if "input_image_missing" in r.labels:
                meta["labels"] = [*(meta.get("labels") or []), "input_image_missing"]
            t = r.task.model_copy(update={"input_images": [str(Path(x).resolve()) for x in r.task.input_images],
                                          "metadata": meta})
            f.write(t.model_dump_json() + "\n")
            n += 1
    return n


def mixture_stats(ds, report: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Counts and shares (percent of the mixture, one decimal) per source and per origin, plus
    images per row, for a dataset from :func:`build_sft_mixture` / :func:`build_rl_mixture`.

    ``report``: the builder's draw report; a source it names that gave no row is listed with count 0
    (``empty_sources`` names them), so an empty in-house part shows in the tables instead of vanishing
    (a preflight's stand-in expert rejects every candidate)."""
    src = ds["source"]
    org = ds["origin"]
    total = len(src)
    img_col = "image_names" if "image_names" in ds.column_names else "input_image_names"
    n_imgs = [len(x) for x in ds[img_col]]

    def share(n: int) -> float:
        return round(100.0 * n / total, 1) if total else 0.0

    origin_of = dict(zip(src, org))
    by_source = []
    for name in sorted(set(src)):
        idx = [i for i, s in enumerate(src) if s == name]
        by_source.append({"source": name, "origin": origin_of[name], "count": len(idx), "share": share(len(idx)),
                          "images": sum(n_imgs[i] for i in idx)})
    rep = report or {}
    empty = sorted(name for name in rep if name not in origin_of)
    by_source += [{"source": name, "origin": rep[name]["origin"], "count": 0, "share": 0.0, "images": 0} for name in empty]
    by_source.sort(key=lambda r: r["source"])
    by_origin = [{"origin": o, "count": org.count(o), "share": share(org.count(o))} for o in ("in-house", "open-source")]
    out = {"total": total, "images": sum(n_imgs), "by_source": by_source, "by_origin": by_origin}
    if empty:
        out["empty_sources"] = empty
    return out


def records_from_sft_dataset(ds, workspace_root: str | Path) -> list[EpisodeRecord]:
    """Rebuild episode records from SFT rows: each row's images are written to
    ``workspace_root/<id>/<image_name>`` and the record's workspace points there.

    Raises:
        MixtureDataError: a row whose ``images`` and ``image_names`` disagree.
    """
    from datasets import Image
    from datasets import Sequence as Seq

    from kit.harness.runner import workspace_name

    root = Path(workspace_root)
    raw = ds.cast_column("images", Seq(Image(decode=False)))
    out = []
    for row in raw:
        if len(row["images"]) != len(row["image_names"]):
            raise MixtureDataError(f"row {row['id']}: {len(row['images'])} images for {len(row['image_names'])} names")
        ws = root / workspace_name(row["id"])  # safe folder name for any id
        ws.mkdir(parents=True, exist_ok=True)
        for img, name in zip(row["images"], row["image_names"]):
            (ws / Path(name).name).write_bytes(img["bytes"])
        ep = json.loads(row["episode"])
        ep["messages"] = [Message.model_validate(m) for m in json.loads(row["messages"])]
        ep["workspace"] = str(ws)
        out.append(EpisodeRecord.model_validate(ep))
    return out


def save_dataset(ds, out_dir: str | Path) -> Path:
    """``save_to_disk`` (Arrow, images embedded) plus a Parquet copy ``data/train.parquet`` (the
    layout the Hub's viewer reads); returns the folder."""
    p = Path(out_dir)
    ds.save_to_disk(str(p / "arrow"))
    (p / "data").mkdir(parents=True, exist_ok=True)
    ds.to_parquet(str(p / "data" / "train.parquet"))
    return p


def sft_features():
    """The ``datasets.Features`` of SFT mixture rows."""
    return _features("sft")


def rl_features():
    """The ``datasets.Features`` of RL mixture rows."""
    return _features("rl")


def load_sft_records(source: str | Path, workspace_root: str | Path) -> list[EpisodeRecord]:
    """Episode records for SFT from any of the places a notebook's ``data`` parameter may name.

    ``source``: an ``episodes.jsonl`` file (workspaces beside it); a folder holding ``episodes.jsonl``
    or ``sft_episodes.jsonl``; a saved mixture (:func:`save_dataset`: ``arrow/`` or ``data/*.parquet``);
    or a published one, ``hub:dataset:owner/name@revision`` (:func:`kit.hub.download.resolve_ref`,
    downloaded into the standard Hugging Face cache). Mixture rows are rebuilt into records whose
    images are written under ``workspace_root``.

    Raises:
        FileNotFoundError: nothing loadable at ``source``.
        ValueError: a bad hub reference; kit.hub.download.DownloadError: the download failed.
    """
    from kit.harness.runner import read_episodes
    from kit.hub.download import resolve_ref

    p = Path(resolve_ref(str(source), repo_type="dataset"))
    if p.is_file():
        return read_episodes(p)
    for name in ("episodes.jsonl", "sft_episodes.jsonl"):
        if (p / name).is_file():
            return read_episodes(p / name)
    if (p / "arrow").is_dir():
        from datasets import load_from_disk

        return records_from_sft_dataset(load_from_disk(str(p / "arrow")), workspace_root)
    parquet = sorted(p.glob("data/*.parquet")) if p.is_dir() else []
    if parquet:
        from datasets import load_dataset

        ds = load_dataset("parquet", data_files=[str(f) for f in parquet], split="train")
        return records_from_sft_dataset(ds, workspace_root)
    raise FileNotFoundError(f"no episode records at {p}: expected an episodes .jsonl file, a folder with "
                            "episodes.jsonl / sft_episodes.jsonl, or a saved SFT mixture (arrow/ or data/*.parquet)")
