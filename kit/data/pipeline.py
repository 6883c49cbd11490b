"""The four synthesis stages end to end (WeAgent §4, Figure 4), with counts through every stage.

:func:`run_offline` runs stage 1 (stable seeds from ZIM archives) -> 2 (backward expansion with the
:class:`~kit.data.expert.OfflineExpander`) -> 3 (validation) -> hold-out -> 4 (trajectories through
the harness with :class:`~kit.data.sample.ChainFollower`) -> SFT / RL splits, on the local web
(:class:`kit.web.zim.LocalZimWeb`) wrapped in the shared cache pool
(:class:`kit.web.cache.CachedBackend`). Each stage resumes from its jsonl files. Everything it
writes is labelled ``synthetic-offline``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.data import OFFLINE_LABEL
from kit.data.records import StageFiles, SynthTask, write_json


def zim_paths(data_dir: str | Path, names: Sequence[str] | None = None) -> list[Path]:
    """ZIM archives under ``data_dir/zim`` (all, or those whose stem is in ``names``).

    Raises:
        FileNotFoundError: no archive found.
    """
    zs = sorted((Path(data_dir) / "zim").glob("*.zim"))
    if names:
        zs = [z for z in zs if z.stem in set(names)]
    if not zs:
        raise FileNotFoundError(f"no ZIM archives under {Path(data_dir) / 'zim'}")
    return zs


def offline_backends(paths: Sequence[Path], cache_path: str | Path, index_dir: str | Path | None = None):
    """(harness backend wrapped in the cache pool, link-keeping web for the graph, the cache)."""
    from kit.web.cache import CachedBackend, ToolCache
    from kit.web.zim import LocalZimWeb

    web = LocalZimWeb(list(paths), index_dir=index_dir)
    links = LocalZimWeb(list(paths), index_dir=index_dir, keep_links=True)
    cache = ToolCache(cache_path)
    return CachedBackend(web, cache), links, cache


@dataclass
class _Synthesis:
    """Stages 1-3 of one :func:`run_offline`: the link graph, each stage's files, the expert, the stages' web."""

    graph: Any
    seed_files: Any
    seeds: list[Any]
    expert: Any
    web: Any  # backend of stages 2-4
    chain_files: Any
    task_files: Any
    tasks: list[Any]
    secs: dict[str, float]


def _anchor_image_reader(graph: Any, local_web: Any, out: Path) -> Callable[[str], Any]:
    """Stage 2's ``anchor_image(url)``: the first image of an archive page, saved under ``out/anchor_images``."""
    from kit.data.seeds import save_target

    async def anchor_image(url: str):
        art = graph.articles.get(url)
        if not art or not art.images:
            return None
        page = await local_web.fetch(url)
        for im in page.images:
            if im.content:
                path, *_ = save_target(im.content, im.mime, out / "anchor_images")
                return str(path), im.image_url
        return None

    return anchor_image


async def _synthesize(web: Any, links: Any, out: Path, *, index_dir: str | Path | None, max_seeds: int | None,
                      max_fact_share: float | None, fact_reader: Any | None, max_candidates: int | None,
                      extra_seeds: Sequence[Any], stage_web: Any | None,
                      expert_factory: Callable[[Any, Any], Any] | None, depths: Sequence[int], variants: int,
                      concurrency: int) -> _Synthesis:
    """Stages 1 (stable seeds), 2 (expansion) and 3 (validation), timed in seconds."""
    from kit.data.expand import expand_seeds
    from kit.data.expert import OfflineExpander
    from kit.data.linkgraph import LinkGraph
    from kit.data.seeds import stable_seeds
    from kit.data.validate import validate_chains

    secs: dict[str, float] = {}
    t = time.perf_counter()
    graph = LinkGraph.build(links, index_dir=None if index_dir is None else Path(index_dir) / "data_graph")
    secs["graph"] = time.perf_counter() - t

    t = time.perf_counter()
    seed_files = await stable_seeds(web, graph, out, limit=max_seeds, max_fact_share=max_fact_share,
                                    fact_reader=fact_reader, max_candidates=max_candidates)
    seeds = seed_files.accepted.read() + list(extra_seeds)
    secs["stage1_seeds"] = time.perf_counter() - t

    local_web = web  # stage 1 and the anchor images read the archives; stages 2-4 search stage_web
    web = stage_web if stage_web is not None else local_web
    t = time.perf_counter()
    expert = expert_factory(graph, web) if expert_factory else OfflineExpander(graph)
    chain_files = await expand_seeds(expert, seeds, out, depths=depths, variants=variants, concurrency=concurrency,
                                     anchor_image=_anchor_image_reader(graph, local_web, out))
    secs["stage2_expand"] = time.perf_counter() - t

    t = time.perf_counter()
    task_files = await validate_chains(expert, chain_files.accepted.read(), {s.id: s for s in seeds}, web, out,
                                       concurrency=concurrency)
    tasks = task_files.accepted.read()
    secs["stage3_validate"] = time.perf_counter() - t
    return _Synthesis(graph, seed_files, seeds, expert, web, chain_files, task_files, tasks, secs)


def _run_counts(syn: _Synthesis, labels: list[str], extra_seeds: Sequence[Any], depths: Sequence[int],
                train: list[SynthTask], bench: list[SynthTask], recs: list[Any], outcomes: dict[str, Any],
                splits: dict[str, Any]) -> dict[str, Any]:
    """The counts through every stage (``counts.json``)."""
    from kit.data.sample import sft_eligible
    from kit.data.seeds import seed_summary

    expert, web, graph, tasks, secs = syn.expert, syn.web, syn.graph, syn.tasks, syn.secs
    return {
        "label": OFFLINE_LABEL if OFFLINE_LABEL in labels else ",".join(labels),
        "expert": getattr(expert, "name", type(expert).__name__),
        "stage_web": getattr(web, "name", type(web).__name__),  # backend of stages 2-4
        "extra_seeds": len(extra_seeds),
        "graph": {"articles": len(graph), "link_targets": len(graph.backlinks)},
        "stage1_seeds": seed_summary(syn.seed_files),
        "stage2_chains": syn.chain_files.counts(),
        "stage3_tasks": syn.task_files.counts(),
        "holdout": {"train_pool": len(train), "benchmark_candidates": len(bench),
                    "benchmark_seeds": len({b.seed_id for b in bench})},
        "stage4": {"episodes": len(recs), "solved_episodes": sum(sft_eligible(o) for v in outcomes.values() for o in v),
                   "target_match": sum(o["target_match"] for v in outcomes.values() for o in v), **splits},
        "modality": {m: sum(1 for x in tasks if x.modality == m) for m in ("input_image", "text_only")},
        "depth": {str(d): sum(1 for x in tasks if x.chain.depth == d) for d in depths},
        "seconds": {k: round(v, 2) for k, v in secs.items()},
    }


async def run_offline(paths: Sequence[Path], out_dir: str | Path, *, n_tasks: int | None = None,
                      depths: Sequence[int] = (2, 3, 4), variants: int = 3, samples: int = 2, slip: float = 0.25,
                      holdout_seed_fraction: float = 0.1, holdout_task_fraction: float = 0.05,
                      max_seeds: int | None = None, concurrency: int = 4, index_dir: str | Path | None = None,
                      cache_path: str | Path | None = None, expert_factory: Callable[[Any, Any], Any] | None = None,
                      policy_factory: Callable[[SynthTask, int], Any] | None = None, extra_seeds: Sequence[Any] = (),
                      labels: Sequence[str] | None = None, max_fact_share: float | None = None,
                      fact_reader: Any | None = None, stage_web: Any | None = None,
                      summarizer: Any | None = None, max_candidates: int | None = None,
                      config: Any | None = None) -> dict[str, Any]:
    """Run every stage and return the counts (also written to ``out_dir/counts.json``).

    ``n_tasks`` caps the validated tasks sent to stage 4 (``None``: all). Seeds are expanded at every
    depth in ``depths``. Timings per stage in seconds are included under ``"seconds"``.

    Offline by default. The paper profile swaps in the model expert: ``expert_factory(graph, web)``
    (``web``: the cached local web) returns the stage-2/3 expert (e.g. :class:`~kit.data.expert.
    LLMExpert`), ``policy_factory(task, sample)`` the stage-4 policy, ``extra_seeds`` adds event
    seeds (:func:`kit.data.seeds.collect_event_seeds`), and ``labels`` replaces the
    ``synthetic-offline`` label. ``max_fact_share`` balances stage-1 fact answers
    (:func:`kit.data.seeds.stable_seeds`). ``fact_reader`` (:class:`kit.data.visual_fact.
    ExpertFactReader`) has the expert read the stable seeds' facts from their images instead of
    computing pixel statistics. ``stage_web`` is the backend of stages 2–4, already in the cache pool
    (:func:`kit.data.synthesis_web.open_synthesis_web`: the live web under the paper profile);
    ``None``: the cached local web that stage 1 reads. ``summarizer``: stage 4's web_extract
    summarizer (:func:`kit.harness.summarize.make_summarizer`; None: extractive). ``max_candidates``:
    stage 1's bound on stable-seed candidates tried (:func:`kit.data.seeds.stable_seeds`; a size).
    ``config``: stage 4's :class:`~kit.harness.config.HarnessConfig` (None: Table 5's; a preflight passes
    its recipe's, with the small response length).
    """
    from kit.data.sample import holdout, sample_trajectories, split_outcomes
    from kit.harness.config import HarnessConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    web, links, cache = offline_backends(paths, cache_path or out / "tool_cache.sqlite", index_dir)
    syn = await _synthesize(web, links, out, index_dir=index_dir, max_seeds=max_seeds, max_fact_share=max_fact_share,
                            fact_reader=fact_reader, max_candidates=max_candidates, extra_seeds=extra_seeds,
                            stage_web=stage_web, expert_factory=expert_factory, depths=depths, variants=variants,
                            concurrency=concurrency)
    labels = [OFFLINE_LABEL] if labels is None else list(labels)

    train, bench = holdout(syn.tasks, seed_fraction=holdout_seed_fraction, task_fraction=holdout_task_fraction)
    with open(out / "benchmark_candidates.jsonl", "w", encoding="utf-8") as f:
        for b in bench:
            f.write(b.model_dump_json() + "\n")
    if n_tasks is not None:
        train = train[:n_tasks]
    t = time.perf_counter()
    recs, outcomes = await sample_trajectories(train, syn.web, out / "trajectories", samples=samples, slip=slip,
                                               concurrency=concurrency, config=config or HarnessConfig(),
                                               labels=labels, policy_factory=policy_factory, summarizer=summarizer)
    splits = split_outcomes(train, recs, outcomes, out / "splits")
    syn.secs["stage4_sample"] = time.perf_counter() - t
    cache.close()
    counts = _run_counts(syn, labels, extra_seeds, depths, train, bench, recs, outcomes, splits)
    write_json(counts, out / "counts.json")
    return counts


def load_tasks(out_dir: str | Path) -> list[SynthTask]:
    """Validated tasks of a pipeline run."""
    return StageFiles(out_dir, "tasks", SynthTask).accepted.read()
