"""Evaluation protocols: which benchmark filters, how many trials, which hard subset, per paper recipe.

A protocol is everything about *how a paper evaluates* that is not the benchmark release itself:

* ``filters``: per benchmark, the subset rules the paper applies (task-level predicates, below).
  POINTS-Seeker §4.1: "we filter MMSearch for image-containing QA pairs, MMSearch-Plus for
  single-image samples, and SimpleVQA for English instances. The remaining benchmarks use full
  datasets." WeAgent §7.1 names no filter: its benchmarks load whole.
* ``trials(n_samples, default)``: runs per configuration. POINTS-Seeker App. B.3: "For benchmarks
  with fewer than 300 samples, we report the average results on 3 trials" (else one run).
  WeAgent §7.1: every configuration three times — the run's own ``repeats`` (default 3).
* the hard subset: POINTS-Seeker §4.3 / Table 4 "selecting VQA instances requiring over ten
  interaction rounds" (chosen with Claude-Sonnet-4-5's trajectories). The kit computes it from a
  named reference run's ``episodes.jsonl`` (:func:`hard_subset`, rounds = model turns that called a
  tool, :func:`interaction_rounds`: a synthesis or answer turn is not a round), saves the ids with their
  provenance (:func:`save_id_list`) and restricts a benchmark to them (:func:`restrict_to_ids`; ``load_benchmarks(subset_ids=...)``).

Protocols are selected by name (:func:`get_protocol`): ``weagent_mmsearch`` (the kit's default)
and ``points_seeker``; their values are the recipes' (``kit/recipes/*.yaml``, section ``eval``, cited).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kit.eval.loaders import LoadResult
from kit.harness.episode import EpisodeRecord, Task


class ProtocolError(ValueError):
    """An unknown protocol or filter, a bad id list, or a benchmark loaded under another protocol."""


def _image_containing(t: Task) -> str | None:
    return None if t.input_images else "no query image"


def _single_image(t: Task) -> str | None:
    return None if len(t.input_images) == 1 else f"{len(t.input_images)} images, not a single-image sample"


def _english(t: Task) -> str | None:
    lang = (t.metadata or {}).get("language")
    if not isinstance(lang, str) or not lang.strip():
        # a filter that cannot decide must not drop the row silently: it is that row's problem
        raise ValueError("the 'english' filter needs metadata['language'] (the release's language column)")
    return None if lang.strip().upper() == "EN" else f"language {lang.strip()!r}, not English"


#: Task-level subset rules by name: ``task -> None`` (kept) or the reason it is left out.
TASK_FILTERS: dict[str, Callable[[Task], str | None]] = {
    "image_containing": _image_containing,
    "single_image": _single_image,
    "english": _english,
}


class EvalProtocol(BaseModel):
    """One paper's evaluation protocol (see the module docstring).

    Attributes:
        name / label / source: selector, display name, citation.
        benchmarks: the paper's evaluated set (registry keys), for notebooks' defaults and reports.
        filters: ``{benchmark: (filter name, ...)}`` from :data:`TASK_FILTERS`; absent: full set.
        trials_threshold: benchmarks with fewer evaluated tasks than this run ``trials_below``
            times, the others ``trials_above``; ``None``: the run's own ``repeats``.
        hard_min_rounds: an item is in the hard subset when its reference episode used at least
            this many regular turns (``None``: the protocol has no hard subset).

    Raises:
        ValueError: an unknown filter name, a non-positive trial count or round threshold.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    label: str
    source: str
    benchmarks: tuple[str, ...] = ()
    filters: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    trials_threshold: int | None = None
    trials_below: int = 3
    trials_above: int = 1
    hard_min_rounds: int | None = None
    hard_reference: str = ""

    @field_validator("filters")
    @classmethod
    def _known_filters(cls, v: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for bench, names in v.items():
            unknown = [n for n in names if n not in TASK_FILTERS]
            if unknown:
                raise ValueError(f"{bench}: unknown filter(s) {unknown}; known: {sorted(TASK_FILTERS)}")
        return v

    @model_validator(mode="after")
    def _positive(self) -> EvalProtocol:
        for k in ("trials_threshold", "trials_below", "trials_above", "hard_min_rounds"):
            v = getattr(self, k)
            if v is not None and v < 1:
                raise ValueError(f"{k} must be >= 1, got {v}")
        return self

    def trials(self, n_samples: int, default: int) -> int:
        """Runs per configuration for a benchmark of ``n_samples`` evaluated tasks (after filters,
        subset and ``limit``): ``default`` (the run's ``repeats``) without a threshold, else
        ``trials_below`` when ``n_samples < trials_threshold`` and ``trials_above`` otherwise."""
        if self.trials_threshold is None:
            return default
        return self.trials_below if n_samples < self.trials_threshold else self.trials_above

    def exclude(self, benchmark: str, task: Task) -> str | None:
        """Why ``task`` of ``benchmark`` is outside this protocol's subset (``None``: kept). The
        reason names the protocol and filter, e.g. ``"points_seeker/english: language 'CN', not English"``.

        Raises:
            ValueError: a filter cannot decide for this task (e.g. no language recorded).
        """
        for f in self.filters.get(benchmark, ()):
            why = TASK_FILTERS[f](task)
            if why is not None:
                return f"{self.name}/{f}: {why}"
        return None

    def describe(self, benchmark: str) -> dict[str, Any]:
        """What ``LoadResult.info["protocol"]`` records: name and the filters applied to ``benchmark``."""
        return {"name": self.name, "filters": list(self.filters.get(benchmark, ()))}


def _from_recipe(name: str, label: str, hard_reference: str = "") -> EvalProtocol:
    """The protocol of recipe ``name`` (kit/recipes/<name>.yaml, section eval; each value cited there)."""
    from kit.recipes import load_recipe

    r = load_recipe(name)
    return EvalProtocol(name=name, label=label, source=r.entries["eval.protocol"].source or "",
                        benchmarks=tuple(r.get("eval.benchmarks")),
                        filters={b: tuple(f) for b, f in r.get("eval.filters", {}).items()},
                        trials_threshold=r.get("eval.trials_threshold", None), trials_below=r.get("eval.trials_below", 3),
                        trials_above=r.get("eval.trials_above", 1), hard_min_rounds=r.get("eval.hard_subset_min_rounds", None),
                        hard_reference=hard_reference)


PROTOCOLS: dict[str, EvalProtocol] = {p.name: p for p in [
    _from_recipe("weagent_mmsearch", "WeAgent-MMSearch"),
    _from_recipe("points_seeker", "POINTS-Seeker",
                 hard_reference="the paper: Claude-Sonnet-4-5 trajectories; the kit: a named reference run"),
]}
DEFAULT_PROTOCOL = "weagent_mmsearch"


def protocol_names() -> list[str]:
    """Names :func:`get_protocol` accepts."""
    return sorted(PROTOCOLS)


def get_protocol(protocol: str | EvalProtocol | None = None) -> EvalProtocol:
    """The protocol named ``protocol`` (``None``: :data:`DEFAULT_PROTOCOL`); an
    :class:`EvalProtocol` is returned as is.

    Raises:
        ProtocolError: an unknown name.
    """
    if isinstance(protocol, EvalProtocol):
        return protocol
    name = DEFAULT_PROTOCOL if protocol is None else protocol
    if name not in PROTOCOLS:
        raise ProtocolError(f"unknown evaluation protocol {name!r}; known: {protocol_names()}")
    return PROTOCOLS[name]


def apply_filters(lr: LoadResult, protocol: str | EvalProtocol | None, limit: int | None = None) -> LoadResult:
    """Keep the tasks of ``lr`` the protocol's filters accept (the others counted in
    ``lr.filtered`` by reason; a task a filter cannot decide becomes a problem), then cut to
    ``limit``; records ``info["protocol"]``. Returns ``lr`` (changed in place)."""
    p = get_protocol(protocol)
    kept = []
    for t in lr.tasks:
        try:
            why = p.exclude(lr.benchmark, t)
        except ValueError as e:
            lr.problem(None, f"{type(e).__name__}: {e}", t.id)
            continue
        if why is None:
            kept.append(t)
        else:
            lr.skip(why)
    lr.tasks = kept if limit is None else kept[:limit]
    lr.info["protocol"] = p.describe(lr.benchmark)
    return lr


# ------------------------------------------------------------------------------------------ hard subset
def _records(episodes: str | Path | Iterable[EpisodeRecord]) -> list[EpisodeRecord]:
    if isinstance(episodes, (str, Path)):
        from kit.harness.runner import read_episodes

        p = Path(episodes)
        p = p / "episodes.jsonl" if p.is_dir() else p
        if not p.is_file():
            raise ProtocolError(f"no episodes file at {p} (the reference run's episodes.jsonl)")
        return read_episodes(p)
    return list(episodes)


def interaction_rounds(record: EpisodeRecord) -> int:
    """The interaction rounds of an episode as POINTS-Seeker §4.3 counts them ("VQA instances requiring over ten
    interaction rounds"): model turns answered by at least one tool observation (an action and its result). A
    turn that answers, a turn without an action and WeAgent's tool-free synthesis turn are not rounds, so an
    episode that ran out of a 10-turn budget has at most 10 (the synthesis turn once made it 11)."""
    rounds, acted = 0, False
    for m in record.messages:  # a model turn followed by a tool observation (calls in text leave tool_calls empty)
        if m.role == "assistant" and not m.intervention:
            acted = False
        elif m.role == "tool" and not acted:
            rounds, acted = rounds + 1, True
    return rounds


def hard_subset(episodes: str | Path | Iterable[EpisodeRecord], min_rounds: int = 11) -> list[str]:
    """Task ids whose reference episode used at least ``min_rounds`` interaction rounds
    (:func:`interaction_rounds`; POINTS-Seeker §4.3: "over ten interaction rounds", so 11), in first-seen order.

    Args:
        episodes: a reference run's ``episodes.jsonl`` (or its run folder), or records. The
            reference run needs a turn budget above ``min_rounds`` (POINTS-Seeker's own 10-turn
            protocol can never reach 11). A task with several episodes (samples) counts its longest.

    Raises:
        ProtocolError: ``min_rounds < 1`` or no episodes file at the path.
        ValueError: a damaged line in the episodes file (:func:`kit.harness.runner.read_episodes`).
    """
    if min_rounds < 1:
        raise ProtocolError(f"min_rounds must be >= 1, got {min_rounds}")
    longest: dict[str, int] = {}
    for rec in _records(episodes):
        longest[rec.task.id] = max(longest.get(rec.task.id, 0), interaction_rounds(rec))
    return [tid for tid, n in longest.items() if n >= min_rounds]


def save_id_list(path: str | Path, ids: list[str], *, benchmark: str, reference: str, min_rounds: int | None = None) -> Path:
    """Write ``{"benchmark", "ids", "reference", "min_rounds"}`` as JSON (the saved hard subset,
    read back by :func:`read_id_list`). ``reference`` names the run the ids come from."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"benchmark": benchmark, "ids": list(ids), "reference": reference, "min_rounds": min_rounds},
                            indent=1, ensure_ascii=False), encoding="utf-8")
    return p


def read_id_list(path: str | Path) -> dict[str, Any]:
    """A saved id list: ``{"benchmark", "ids", "reference", "min_rounds", "path", "sha256"}``
    (a bare JSON list of ids is accepted too).

    Raises:
        ProtocolError: missing file, not JSON, or ``ids`` not a list of strings.
    """
    from kit.paths import file_sha256

    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ProtocolError(f"id list {p}: {type(e).__name__}: {e}") from e
    data = {"ids": data} if isinstance(data, list) else data
    ids = data.get("ids") if isinstance(data, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ProtocolError(f"id list {p}: expected a JSON list of task ids or an object with 'ids'")
    return {"benchmark": data.get("benchmark"), "ids": ids, "reference": data.get("reference"),
            "min_rounds": data.get("min_rounds"), "path": str(p), "sha256": file_sha256(p)}


def restrict_to_ids(lr: LoadResult, ids: str | Path | list[str], limit: int | None = None) -> LoadResult:
    """Keep only the tasks of ``lr`` whose id is listed (a saved id list or a list of ids), in
    the benchmark's order, then cut to ``limit``. Tasks left out are counted in ``lr.filtered``
    (``"subset: not in <list>"``); a listed id the benchmark does not have is a problem.
    Records ``info["id_subset"]`` (path, sha256, reference, counts). Returns ``lr`` (changed in place).

    Raises:
        ProtocolError: an unreadable id list, or one saved for another benchmark.
    """
    meta: dict[str, Any] = (read_id_list(ids) if isinstance(ids, (str, Path))
                            else {"ids": list(ids), "path": None, "sha256": None})
    if meta.get("benchmark") not in (None, lr.benchmark):
        raise ProtocolError(f"id list {meta['path']} is for {meta['benchmark']!r}, not {lr.benchmark!r}")
    wanted = set(meta["ids"])
    where = meta["path"] or "the given ids"
    kept = [t for t in lr.tasks if t.id in wanted]
    for _ in range(len(lr.tasks) - len(kept)):
        lr.skip(f"subset: not in {where}")
    for missing in sorted(wanted - {t.id for t in lr.tasks}):
        lr.problem(None, f"subset id {missing!r} is not a loaded task of {lr.benchmark} "
                   "(absent from the release, filtered by the protocol, or a load problem)", missing)
    lr.tasks = kept if limit is None else kept[:limit]
    lr.info["id_subset"] = {k: meta.get(k) for k in ("path", "sha256", "reference", "min_rounds")} | {"ids": len(wanted)}
    return lr
