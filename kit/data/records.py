"""Records exchanged by the data pipeline stages, and the resumable jsonl store they live in.

One record is one JSON line. Each stage reads the previous stage's accepted file and writes three
files: accepted, ``*_rejected.jsonl`` (filter reasons) and ``*_failed.jsonl`` (expert failures after
retries), so a rerun skips every id already decided (WeAgent §4; issue "the pipeline resumes per stage").
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, Field, model_validator

T = TypeVar("T", bound=BaseModel)


class TargetImage(BaseModel):
    """The terminal visual evidence C of a chain: a localized image on a source page.

    ``position`` is the 1-based index of the image among the page's images in page order (the order
    ``web_extract`` registers them); ``path`` is the localized copy (absolute path).
    """

    url: str
    page_url: str
    page_title: str
    caption: str = ""
    position: int
    path: str
    sha256: str
    width: int
    height: int
    mime: str = ""


class PixelFact(BaseModel):
    """A short fact D read from the target image's pixels (WeAgent §4.1).

    ``answer`` is the canonical answer, ``answers`` its accepted variants, ``evidence`` the measured
    quantities it was computed from (so an audit can recompute it).
    """

    kind: str
    question: str
    answer: str
    answers: list[str] = Field(default_factory=list)
    evidence: dict[str, Any] = Field(default_factory=dict)


#: Where a seed's fact D came from: read from the image by the expert model (WeAgent §4.1, the paper
#: profile and the event branch), or computed from pixel statistics (tone and orientation, the offline
#: profile's stand-in; :func:`kit.data.seeds.pixel_fact`).
FactSource = Literal["expert", "pixel_statistics"]


def fact_source_of(fact: PixelFact) -> FactSource:
    """``"pixel_statistics"`` for a computed tone/orientation fact, else ``"expert"``."""
    return "pixel_statistics" if fact.kind == "tone_orientation" else "expert"


class Seed(BaseModel):
    """Stage 1 output: a visually grounded seed (stable fact or time-sensitive event).

    ``fact_source`` labels how D was obtained (:data:`FactSource`); records written before the field
    existed get it from ``fact.kind``.
    """

    id: str
    branch: Literal["stable", "event"]
    concept: str
    definition: str = ""
    category: str = ""
    source_page: str
    event_date: str | None = None
    as_of: str
    target: TargetImage
    fact: PixelFact
    fact_source: FactSource | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)
    labels: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _fact_source(self) -> Seed:
        derived = fact_source_of(self.fact)
        if self.fact_source is None:
            self.fact_source = derived
        elif self.fact_source != derived:
            raise ValueError(f"fact_source {self.fact_source!r} contradicts fact kind {self.fact.kind!r}")
        return self


class Hop(BaseModel):
    """One bridge relation n_{i-1} -> n_i: a QA pair whose answer is ``answer`` (entity n_i), asked
    from the predecessor ``subject`` (n_{i-1}). ``evidence`` is the text that supports it."""

    subject: str
    subject_url: str
    answer: str
    answer_url: str
    question: str
    evidence: str
    provenance: dict[str, Any] = Field(default_factory=dict)


class Chain(BaseModel):
    """Stage 2 output: the latent chain n_0 -> ... -> n_d, ``hops[0]`` starting at the anchor n_0."""

    id: str
    seed_id: str
    depth: int
    hops: list[Hop]
    anchor: str
    anchor_url: str
    anchor_image: str | None = None  # path of an image of n_0 (input-image tasks)
    anchor_image_url: str | None = None
    labels: list[str] = Field(default_factory=list)


class SynthTask(BaseModel):
    """Stage 3 output: a validated task (query q, answer D, chain, target image C, audit evidence)."""

    id: str
    seed_id: str
    chain: Chain
    seed: Seed
    query: str
    answer: str
    answers: list[str]
    modality: Literal["input_image", "text_only"]
    input_images: list[str] = Field(default_factory=list)
    audit: dict[str, Any] = Field(default_factory=dict)
    labels: list[str] = Field(default_factory=list)

    def to_task(self) -> Any:
        """The harness :class:`~kit.harness.episode.Task` (target image held out)."""
        from kit.harness.episode import Task

        return Task(id=self.id, question=self.query, input_images=list(self.input_images), answers=list(self.answers),
                    target_image=self.seed.target.path, source="synth",
                    metadata={"seed_id": self.seed_id, "depth": self.chain.depth, "modality": self.modality,
                              "fact_kind": self.seed.fact.kind, "fact_source": self.seed.fact_source,
                              "labels": self.labels})


class Rejection(BaseModel):
    """A candidate removed by a stage, with the reason (a stable key) and detail."""

    id: str
    stage: str
    reason: str
    detail: str = ""
    item: dict[str, Any] = Field(default_factory=dict)


class Failure(BaseModel):
    """An item the expert could not process after its retries (endpoint errors, unparsable output)."""

    id: str
    stage: str
    error: str
    attempts: int = 1


class JsonlStore(Generic[T]):
    """Append-only jsonl of one pydantic model, one fsync'd line per record.

    ``ids()`` returns the ids already written (a torn last line from a killed run is ignored and cut),
    which is how stages resume.

    Raises:
        ValueError: a line other than the last is not a valid record.
    """

    def __init__(self, path: str | Path, model: type[T]):
        self.path = Path(path)
        self.model = model

    def read(self) -> list[T]:
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()
        out, good = [], 0
        for i, ln in enumerate(lines):
            if ln.strip():
                try:
                    out.append(self.model.model_validate_json(ln))
                except ValueError as e:
                    if i < len(lines) - 1 or tail.strip():
                        raise ValueError(f"{self.path}: line {i + 1} is not a valid {self.model.__name__}: {e}") from e
                    break
            good += len(ln) + 1
        if good < len(data):  # torn or damaged last line: cut it so appends stay valid
            with open(self.path, "r+b") as f:
                f.truncate(good)
        return out

    def ids(self) -> set[str]:
        return {r.id for r in self.read()}

    def append(self, rec: T) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(rec.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())

    def extend(self, recs: Iterable[T]) -> int:
        n = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            for r in recs:
                f.write(r.model_dump_json() + "\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        return n

    def sort(self, order: Sequence[str]) -> None:
        """Rewrite the file with its records in ``order`` of ids (records of other ids after them, as they
        were), atomically: stages that run items concurrently append them as they finish, and the file a
        run leaves is then the same from run to run. The lines are moved as they are (fields the model
        does not know are kept, no default is added); the side file is removed whatever happens.

        Raises:
            ValueError: (:meth:`read`) a line other than the last is not a valid record.
        """
        if not self.path.exists():
            return
        recs = self.read()  # validates every line and cuts a torn last one
        lines = [ln for ln in self.path.read_bytes().split(b"\n") if ln.strip()]
        rank = {i: k for k, i in enumerate(order)}
        ranked = sorted(range(len(recs)), key=lambda k: (rank.get(recs[k].id, len(rank)), k))
        if ranked == list(range(len(recs))):
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.writelines(lines[k] + b"\n" for k in ranked)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)


class StageFiles:
    """The accepted / rejected / failed stores of one stage under ``out_dir`` (``<name>.jsonl``,
    ``<name>_rejected.jsonl``, ``<name>_failed.jsonl``)."""

    def __init__(self, out_dir: str | Path, name: str, model: type[T]):
        d = Path(out_dir)
        self.name = name
        self.accepted = JsonlStore(d / f"{name}.jsonl", model)
        self.rejected = JsonlStore(d / f"{name}_rejected.jsonl", Rejection)
        self.failed = JsonlStore(d / f"{name}_failed.jsonl", Failure)
        #: why the stage stopped before its candidates ran out (a size bound), None otherwise
        self.stopped: str | None = None

    def done_ids(self) -> set[str]:
        return self.accepted.ids() | self.rejected.ids() | self.failed.ids()

    def sort(self, order: Sequence[str]) -> None:
        """:meth:`JsonlStore.sort` of the three stores (the stage's items in input order)."""
        for store in (self.accepted, self.rejected, self.failed):
            store.sort(order)

    def counts(self) -> dict[str, Any]:
        """``{"accepted", "rejected", "failed", "reasons"}`` (rejections per reason), plus ``failures``
        (failed items per kind) when some failed and ``stopped`` when a size bound stopped the stage."""
        rej = self.rejected.read()
        reasons: dict[str, int] = {}
        for r in rej:
            reasons[r.reason] = reasons.get(r.reason, 0) + 1
        failed = self.failed.read()
        out: dict[str, Any] = {"accepted": len(self.accepted.read()), "rejected": len(rej), "failed": len(failed),
                               "reasons": dict(sorted(reasons.items()))}
        if failed:  # failures by kind: the error's first word ("unparsable", "policy", ...)
            kinds = Counter(f.error.split(":", 1)[0].strip() or "error" for f in failed)
            out["failures"] = dict(sorted(kinds.items()))
        if self.stopped:
            out["stopped"] = self.stopped
        return out


def write_json(obj: Any, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    return p
