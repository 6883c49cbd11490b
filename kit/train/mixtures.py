"""Agentic Seeding mixtures (POINTS-Seeker §3.2.1, stage I) for the SFT data path.

A mixture lists sources — reasoning, text-agentic and multimodal-reasoning corpora by hub name, or
local episode files — each with a weight. :func:`sample_mixture` draws records from every source in
proportion to its weight (without replacement inside a source; a source that is too small is used
whole and the shortfall is reported), and the result goes through the same
:class:`kit.train.sft_data.SFTEncoder` as harness episodes.

Hub sources must already be in the local ``datasets`` cache (the Hub is unreachable on CPU/CI
machines); they are converted to :class:`EpisodeRecord` by a per-source ``format``:

* ``"episodes"``: rows are episode records (``EpisodeRecord`` JSON) — also any local ``.jsonl``;
* ``"messages"``: rows with a ``messages`` list of ``{"role", "content"}`` or a ShareGPT
  ``conversations`` list of ``{"from", "value"}`` (text chat SFT data, e.g. reasoning or
  text-agentic traces; a ``tools`` column is ignored, the encoder renders its own);
* ``"toucan"`` and ``"vqa"``: see :mod:`kit.train.seeding` (Toucan-1.5M; image+question+answer rows
  whose reasoning a teacher endpoint distills, POINTS-Seeker A.2).

Hub sources are fetched by id and ``revision`` through :func:`kit.hub.download.download` (the standard
cache; offline mode serves the cache; a :class:`kit.hub.localhub.LocalHub` serves a local copy in hub
layout, :func:`kit.train.local_copies.write_local_copy`) and read from the snapshot with ``datasets``
(``subset`` = config, ``data_files`` = globs inside the repo). No revision: ``main``, with a warning,
and the resolved commit goes into the report.

Mixture specs (:data:`MIXTURES`): ``points_seeker_seeding`` (:data:`DEFAULT_MIXTURE`, the four
sources POINTS-Seeker A.2 names, weights proportional to the sizes it states), ``points_seeker_sft``
(A.3; sources the paper names without a hub id are required parameters) — both rows of
``kit/recipes/points_seeker.yaml`` (``mixtures.seeding`` / ``mixtures.sft``, cited) — and
``kit_open_alternatives`` (``agentic_seeding.json``, the kit's earlier example with other datasets).
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kit.harness.episode import EpisodeRecord, Task
from kit.harness.portable import WorkspacePathError, resolved_record
from kit.types import ContentPart, Message

Kind = Literal["reasoning", "text_agentic", "multimodal_reasoning", "multimodal_agentic"]


class MixtureError(ValueError):
    """A mixture config or one of its sources is invalid or cannot be loaded."""


@dataclass
class Source:
    """One mixture component: ``name`` (hub id or local ``.jsonl`` path), ``kind``, ``weight`` > 0."""

    name: str
    kind: Kind
    weight: float
    format: Literal["episodes", "messages", "toucan", "vqa"] = "messages"
    split: str = "train"
    subset: str | None = None
    revision: str | None = None  # hub revision (tag/branch/commit); None: "main" with a warning
    data_files: list[str] | None = None  # globs inside the hub repo (also what is downloaded)
    extra_files: list[str] | None = None  # further globs to download (image folders of "vqa" rows)
    columns: dict[str, str] | None = None  # "vqa": {"image", "question", "answer"} column names
    reasoning: Literal["teacher", "dataset_answer"] = "teacher"  # "vqa": see kit.train.seeding
    stated_size: int | None = None  # the size the paper states (documentation; weights derive from it)
    note: str = ""  # provenance / uncertainty of the hub id and layout


@dataclass
class Mixture:
    """A weighted list of sources with a total record budget (``size``)."""

    sources: list[Source]
    size: int
    seed: int = 0
    name: str = "mixture"
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Mixture:
        """Build from a config dict ``{"name", "size", "seed", "sources": [{name, kind, weight, ...}]}``.

        Raises:
            MixtureError: no sources, a non-positive weight or size, an unknown kind or format.
        """
        try:
            sources = [Source(**s) for s in d["sources"]]
            mix = cls(sources=sources, size=int(d["size"]), seed=int(d.get("seed", 0)), name=d.get("name", "mixture"),
                      meta=dict(d.get("meta", {})))
        except (KeyError, TypeError) as e:
            raise MixtureError(f"bad mixture config: {e}") from e
        if not sources:
            raise MixtureError("a mixture needs at least one source")
        for s in sources:
            if not s.weight > 0:
                raise MixtureError(f"source {s.name}: weight must be positive, got {s.weight}")
            if s.name.startswith("REQUIRED:"):
                raise MixtureError(f"source {s.name!r}: the paper names no hub id; pass a hub id or .jsonl path")
            if s.kind not in ("reasoning", "text_agentic", "multimodal_reasoning", "multimodal_agentic"):
                raise MixtureError(f"source {s.name}: unknown kind {s.kind!r}")
            if s.format not in ("episodes", "messages", "toucan", "vqa"):
                raise MixtureError(f"source {s.name}: unknown format {s.format!r}")
        if mix.size <= 0:
            raise MixtureError(f"size must be positive, got {mix.size}")
        return mix

    @classmethod
    def from_file(cls, path: str | Path) -> Mixture:
        """Load a JSON mixture config, or a :data:`MIXTURES` name (the paper's live in the recipe)."""
        return cls.from_dict(mixture_spec(path))

    def quotas(self) -> dict[str, int]:
        """Records per source: ``size * weight / Σweight``, rounded so the total equals ``size``."""
        total = sum(s.weight for s in self.sources)
        raw = [self.size * s.weight / total for s in self.sources]
        q = [int(x) for x in raw]
        for i in sorted(range(len(raw)), key=lambda i: raw[i] - q[i], reverse=True)[: self.size - sum(q)]:
            q[i] += 1
        return {s.name: n for s, n in zip(self.sources, q)}


log = logging.getLogger(__name__)


def load_source_rows(src: Source, cache_dir: str | Path | None = None) -> tuple[list[dict[str, Any]], Path | None, str | None]:
    """``(rows, snapshot_folder, resolved_commit)`` of a source (folder and commit None for ``.jsonl``).

    Raises:
        MixtureError: a missing file; a hub source that cannot be downloaded or read.
    """
    p = Path(src.name)
    if p.suffix == ".jsonl":
        if not p.is_file():
            raise MixtureError(f"source file {p} does not exist")
        return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()], p.parent, None
    from kit.hub.download import download

    if src.revision is None:
        log.warning("source %s: no revision pinned, loading 'main' (the resolved commit is reported)", src.name)
    try:
        snap = download(src.name, revision=src.revision or "main", repo_type="dataset", cache_dir=cache_dir,
                        allow_patterns=(list(src.data_files) + list(src.extra_files or []) + ["README.md"])
                        if src.data_files else None)
        from datasets import load_dataset

        # explicit data_files define the files (a config name would then not exist); subset picks a README config
        ds = load_dataset(str(snap.path), None if src.data_files else src.subset, data_files=src.data_files,
                          split=src.split)
    except Exception as e:  # hub unreachable, not cached, bad split or files: one clear error per source
        raise MixtureError(f"cannot load source {src.name!r} (revision {src.revision or 'main'}, split {src.split}); "
                           f"offline it must be in the hub cache or a local hub copy: {type(e).__name__}: {e}") from e
    return list(ds), snap.path, snap.commit


def _rows(src: Source) -> list[dict[str, Any]]:
    return load_source_rows(src)[0]


_SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "function_call": "assistant", "observation": "tool"}
# name -> "recipe:key" (paper values live in the recipe: kit/recipes/points_seeker.yaml `mixtures`) or a JSON path
MIXTURES: dict[str, str | Path] = {
    "points_seeker_seeding": "points_seeker:mixtures.seeding",  # A.2 sources, paper default
    "points_seeker_sft": "points_seeker:mixtures.sft",  # A.3 sources
    "kit_open_alternatives": Path(__file__).with_name("agentic_seeding.json"),  # kit variant, other datasets
}
DEFAULT_MIXTURE = "points_seeker_seeding"  # a MIXTURES name: load_mixture(DEFAULT_MIXTURE)


def mixture_spec(name_or_path: str | Path) -> dict[str, Any]:
    """The mixture config dict of a :data:`MIXTURES` name (a recipe row, copied) or a JSON file path.

    Raises:
        MixtureError: neither a known name nor a file.
    """
    import copy

    where = MIXTURES.get(str(name_or_path), Path(name_or_path))
    if isinstance(where, str):
        from kit.recipes import load_recipe

        recipe, key = where.split(":", 1)
        return copy.deepcopy(load_recipe(recipe).get(key))
    if not Path(where).is_file():
        raise MixtureError(f"unknown mixture {name_or_path!r}; known: {sorted(MIXTURES)}")
    return json.loads(Path(where).read_text())


def load_mixture(name_or_path: str | Path, replace: dict[str, dict[str, Any]] | None = None, **fields) -> Mixture:
    """A mixture spec by :data:`MIXTURES` name or path, with sources replaced by name (``replace``:
    ``{"REQUIRED:ocr_samples": {"name": "my/ocr", "weight": 15000}}`` merges into that source) and
    top-level fields (``size``, ``seed``) overridden.

    Raises:
        MixtureError: unknown name; a replaced source not in the spec; a ``REQUIRED:`` source left.
    """
    d = mixture_spec(name_or_path)
    names = [s["name"] for s in d["sources"]]
    for k in replace or {}:
        if k not in names:
            raise MixtureError(f"mixture {d.get('name')}: no source {k!r} to replace; sources: {names}")
    d["sources"] = [{**s, **(replace or {}).get(s["name"], {})} for s in d["sources"]]
    return Mixture.from_dict({**d, **fields})


def row_to_record(row: dict[str, Any], src: Source, idx: int) -> EpisodeRecord:
    """One source row as an :class:`EpisodeRecord` (see module doc for the formats).

    Raises:
        MixtureError: a row without the fields its format needs.
    """
    if src.format == "toucan":
        from kit.train.seeding import SeedingRowError, toucan_record

        try:
            return toucan_record(row, src, idx)
        except SeedingRowError as e:
            raise MixtureError(str(e)) from e
    if src.format == "vqa":
        raise MixtureError(f"{src.name}: 'vqa' rows need images and a teacher; use sample_mixture")
    if src.format == "episodes":
        try:
            return EpisodeRecord.model_validate(row)
        except Exception as e:
            raise MixtureError(f"{src.name} row {idx} is not an episode record: {e}") from e
    msgs = row.get("messages", row.get("conversations"))
    if not isinstance(msgs, list) or not msgs:
        raise MixtureError(f"{src.name} row {idx} has no 'messages' (or ShareGPT 'conversations') list")
    out = []
    for m in msgs:
        role = _SHAREGPT_ROLES.get(m.get("role", m.get("from")), m.get("role", m.get("from")))
        content = m.get("content", m.get("value"))
        if role not in ("system", "user", "assistant", "tool"):
            raise MixtureError(f"{src.name} row {idx}: unsupported role {role!r}")
        text = content if isinstance(content, str) else "".join(
            c.get("text", "") for c in (content or []) if isinstance(c, dict) and c.get("type") == "text")
        out.append(Message(role=role, content=[ContentPart(type="text", text=text)]))
    rid = f"{Path(src.name).stem}-{idx}"
    return EpisodeRecord(id=rid, task=Task(id=rid, question="", source=src.name), config_hash="mixture",
                         messages=out, status="answered", trainable=True, labels=[f"mixture:{src.kind}"])


def sample_mixture(mix: Mixture, *, workspace: str | Path | None = None, distiller=None,
                   cache_dir: str | Path | None = None) -> tuple[list[EpisodeRecord], dict[str, Any]]:
    """Draw ``mix.size`` records by weight; returns ``(records, report)`` where the report gives per
    source the quota, the rows available, the records drawn, the resolved hub commit and, for
    ``"vqa"`` sources, the rows filtered out by the answer check (``filtered_answer_mismatch``).

    Args:
        workspace: folder for the images of ``"vqa"`` records (required when the mixture has one).
        distiller: :data:`kit.train.seeding.Distiller` (teacher endpoint) for ``reasoning="teacher"``.

    Raises:
        MixtureError: a source cannot be loaded or has malformed rows; a ``"vqa"`` source without a
            workspace, or with ``reasoning="teacher"`` and no distiller.
    """
    from kit.train.seeding import SeedingRowError, vqa_record

    rng = random.Random(mix.seed)
    quotas = mix.quotas()
    records, report = [], {}
    for src in mix.sources:
        rows, root, commit = load_source_rows(src, cache_dir)
        take = min(quotas[src.name], len(rows))
        idx = rng.sample(range(len(rows)), take)
        filtered = 0
        if src.format == "vqa":
            if workspace is None:
                raise MixtureError(f"{src.name}: 'vqa' sources need a workspace for their images")
            for i in idx:
                try:
                    r = vqa_record(rows[i], src, i, root=root, workspace=Path(workspace), distiller=distiller)
                except SeedingRowError as e:
                    raise MixtureError(str(e)) from e
                if r is None:
                    filtered += 1
                else:
                    records.append(r)
        else:
            # an episode row's relative workspace is relative to its file's folder (kit.harness.portable)
            try:
                records += [resolved_record(row_to_record(rows[i], src, i), root) if root is not None
                            else row_to_record(rows[i], src, i) for i in idx]
            except WorkspacePathError as e:  # a workspace climbing out of the run: refused, named
                raise MixtureError(f"{src.name}: {e}") from e
        report[src.name] = {"kind": src.kind, "quota": quotas[src.name], "available": len(rows), "drawn": take,
                            "filtered_answer_mismatch": filtered, "commit": commit, "revision": src.revision}
    rng.shuffle(records)
    return records, report
