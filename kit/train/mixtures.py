"""Agentic Seeding mixtures (POINTS-Seeker §3.2.3, stage I) for the SFT data path.

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
  text-agentic traces; a ``tools`` column is ignored, the encoder renders its own).

:data:`DEFAULT_MIXTURE` (``agentic_seeding.json``) is an example stage-I config; its hub names and
weights are a starting point to edit, not the paper's (unpublished) mixture.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kit.harness.episode import EpisodeRecord, Task
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
    format: Literal["episodes", "messages"] = "messages"
    split: str = "train"
    subset: str | None = None


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
            mix = cls(sources=sources, size=int(d["size"]), seed=int(d.get("seed", 0)), name=d.get("name", "mixture"))
        except (KeyError, TypeError) as e:
            raise MixtureError(f"bad mixture config: {e}") from e
        if not sources:
            raise MixtureError("a mixture needs at least one source")
        for s in sources:
            if not s.weight > 0:
                raise MixtureError(f"source {s.name}: weight must be positive, got {s.weight}")
            if s.kind not in ("reasoning", "text_agentic", "multimodal_reasoning", "multimodal_agentic"):
                raise MixtureError(f"source {s.name}: unknown kind {s.kind!r}")
            if s.format not in ("episodes", "messages"):
                raise MixtureError(f"source {s.name}: unknown format {s.format!r}")
        if mix.size <= 0:
            raise MixtureError(f"size must be positive, got {mix.size}")
        return mix

    @classmethod
    def from_file(cls, path: str | Path) -> Mixture:
        """Load a JSON mixture config."""
        return cls.from_dict(json.loads(Path(path).read_text()))

    def quotas(self) -> dict[str, int]:
        """Records per source: ``size * weight / Σweight``, rounded so the total equals ``size``."""
        total = sum(s.weight for s in self.sources)
        raw = [self.size * s.weight / total for s in self.sources]
        q = [int(x) for x in raw]
        for i in sorted(range(len(raw)), key=lambda i: raw[i] - q[i], reverse=True)[: self.size - sum(q)]:
            q[i] += 1
        return {s.name: n for s, n in zip(self.sources, q)}


def _rows(src: Source) -> list[dict[str, Any]]:
    p = Path(src.name)
    if p.suffix == ".jsonl":
        if not p.is_file():
            raise MixtureError(f"source file {p} does not exist")
        return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        from datasets import load_dataset

        ds = load_dataset(src.name, src.subset, split=src.split)
    except Exception as e:  # hub unreachable, not cached, bad split: one clear error per source
        raise MixtureError(f"cannot load source {src.name!r} (split {src.split}); it must be in the local "
                           f"datasets cache when the Hub is unreachable: {type(e).__name__}: {e}") from e
    return list(ds)


_SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "function_call": "assistant", "observation": "tool"}
DEFAULT_MIXTURE = Path(__file__).with_name("agentic_seeding.json")


def row_to_record(row: dict[str, Any], src: Source, idx: int) -> EpisodeRecord:
    """One source row as an :class:`EpisodeRecord` (see module doc for the formats).

    Raises:
        MixtureError: a row without the fields its format needs.
    """
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


def sample_mixture(mix: Mixture) -> tuple[list[EpisodeRecord], dict[str, Any]]:
    """Draw ``mix.size`` records by weight; returns ``(records, report)`` where the report gives per
    source the quota, the rows available and the records drawn.

    Raises:
        MixtureError: a source cannot be loaded or has malformed rows.
    """
    rng = random.Random(mix.seed)
    quotas = mix.quotas()
    records, report = [], {}
    for src in mix.sources:
        rows = _rows(src)
        take = min(quotas[src.name], len(rows))
        idx = rng.sample(range(len(rows)), take)
        records += [row_to_record(rows[i], src, i) for i in idx]
        report[src.name] = {"kind": src.kind, "quota": quotas[src.name], "available": len(rows), "drawn": take}
    rng.shuffle(records)
    return records, report
