"""Benchmarks × configurations × repeats through the harness, judged and written per item.

Layout of one evaluation (``out_dir``)::

    runs/<benchmark>/<config>/r<k>/episodes.jsonl   one run folder each (kit.harness.runner.run_batch)
    predictions/<benchmark>__<config>__r<k>.jsonl   one ItemResult per task (kit.eval.metrics)
    problems.jsonl                                   rows that could not be loaded, with reasons

Benchmarks whose tasks are ``sensitive`` (MM-BrowseComp, MMSearch-Plus: published encrypted) run in
``private_dir`` instead of ``out_dir/runs``: their episode records hold the decrypted question and
the model's answer. Their tool calls (words of the decrypted questions) go through ``private_backend``
or, when the caller names none, a private tool cache under ``private_dir`` (:func:`private_web`).
Their prediction lines in ``out_dir`` keep only ids, scores and hashes.

The evaluation protocol (:mod:`kit.eval.protocols`, named by each :class:`EvalConfig`) decides the
runs per benchmark: ``repeats`` under ``weagent_mmsearch``; 3 below 300 tasks, else 1, under
``points_seeker`` (App. B.3). Benchmarks are loaded under a protocol (its filters, an optional
saved id list such as the hard subset) and must be run under the same one.

Every run resumes: :func:`kit.harness.runner.run_batch` skips finished episode ids, judging is
deterministic (rule judge) or cached (LLM and VLM judges), and prediction files are rewritten
atomically after each run. Same tasks, same sampling seeds (``seed + 1000 * repeat``) and the same
judge across configurations (WeAgent §7.1).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.eval.configs import EvalConfig
from kit.eval.judges import RuleJudge, Verdict
from kit.eval.loaders import LoadResult, sha256_text
from kit.eval.metrics import ItemResult
from kit.eval.protocols import EvalProtocol, ProtocolError, apply_filters, get_protocol, restrict_to_ids
from kit.harness.episode import EpisodeRecord, Task
from kit.harness.loop import Harness
from kit.harness.runner import run_batch
from kit.progress import progress as progress_bar
from kit.types import SamplingParams, SearchBackend

if TYPE_CHECKING:
    from kit.web.cache import CachedBackend


def is_sensitive(tasks: list[Task]) -> bool:
    """True when any task must not be written in clear (encrypted benchmarks)."""
    return any((t.metadata or {}).get("sensitive") for t in tasks)


def default_private_dir(out_dir: str | Path) -> Path:
    """Private run folder for sensitive benchmarks: in the kit cache, keyed by ``out_dir``, never
    under a results folder that is committed."""
    from kit.paths import cache_dir

    key = hashlib.sha256(str(Path(out_dir).resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "eval_private" / key


#: File name of the private tool cache that sensitive benchmarks use when the caller names no private backend.
PRIVATE_TOOL_CACHE = "tool_cache.sqlite"


def private_web(backend: SearchBackend, private: Path) -> CachedBackend:
    """The backend a sensitive benchmark's tool calls go through when the caller names none: the
    same web behind a tool cache of its own, ``private / PRIVATE_TOOL_CACHE`` (the calls carry words
    of decrypted questions: they must never reach the ordinary, shared or published cache). A
    :class:`~kit.web.cache.CachedBackend` is unwrapped first (its cache is the ordinary one)."""
    from kit.web.cache import CachedBackend, ToolCache

    inner = backend
    while isinstance(inner, CachedBackend):
        inner = inner.backend
    return CachedBackend(inner, ToolCache(private / PRIVATE_TOOL_CACHE))


def _atomic_write_lines(path: Path, lines: list[str]) -> None:
    """Replace ``path`` atomically (temp file, fsync, rename) unless it already holds these lines:
    a resumed, finished run then costs a read instead of an fsync per file."""
    text = "".join(line + "\n" for line in lines)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def tool_counts(rec: EpisodeRecord) -> dict[str, int]:
    """Tool observations per tool name in an episode (interventions on invalid calls excluded)."""
    c = Counter(m.name for m in rec.messages if m.role == "tool" and m.name and not m.intervention)
    return dict(c)


async def judge_answer(judge, task: Task, prediction: str | None) -> Verdict:
    """Run any judge (:class:`RuleJudge` synchronously, LLM judges asynchronously) on one answer."""
    if isinstance(judge, RuleJudge):
        return judge.judge_task(task, prediction)
    return await judge.judge_task(task, prediction)


def redact(message: str | None) -> str | None:
    """Error text of a sensitive task reduced to its first clause: server bodies and tracebacks can
    echo the prompt, which holds the decrypted question."""
    if not message:
        return message
    return message.split(":", 1)[0].strip()[:80] + " (details withheld: encrypted benchmark)"


async def score_record(rec: EpisodeRecord, benchmark: str, config: str, repeat: int, judge, image_judge) -> ItemResult:
    """Judge one episode into an :class:`ItemResult` (WeAgent eq. (2) inputs A_i, I_i, M_i).

    I_i: the final response cites at least one *valid tool-retrieved* image (registered, not the
    user's own input). M_i: the first such cited image matches the held-out target according to
    ``image_judge``; 0 without a valid citation; None (reported) when the image judge fails.
    """
    task = rec.task
    sensitive = bool((task.metadata or {}).get("sensitive"))
    verdict = await judge_answer(judge, task, rec.final_response)
    kinds = {im.filename: im.kind for im in rec.images}
    tool_cited = [f for f in rec.cited_images if kinds.get(f) not in (None, "user_image")]
    item = ItemResult(
        benchmark=benchmark, config=config, repeat=repeat, task_id=task.id, episode_id=rec.id, status=rec.status,
        score=verdict.score, correct=verdict.correct, judge=verdict.judge, judge_error=verdict.error,
        cited=bool(tool_cited), cited_images=list(rec.cited_images), has_target=task.target_image is not None,
        turns=rec.turns, tool_calls=rec.tool_calls, tool_counts=tool_counts(rec), error=rec.error, sensitive=sensitive,
        question_sha256=sha256_text(task.question),
        response_sha256=None if rec.final_response is None else sha256_text(rec.final_response),
        response=None if sensitive else rec.final_response, answers=None if sensitive else list(task.answers),
        labels=list(rec.labels) + [x for x in (task.metadata or {}).get("labels", []) if x not in rec.labels])
    if task.target_image is not None:
        if not tool_cited:
            item.match = False
        else:
            iv = await image_judge.judge(Path(rec.workspace or ".") / tool_cited[0], task.target_image)
            item.match, item.image_judge, item.image_judge_error = iv.match, iv.judge, iv.error
            item.target_distance = iv.distance
    if sensitive:
        item.error, item.judge_error, item.image_judge_error = (redact(item.error), redact(item.judge_error),
                                                                redact(item.image_judge_error))
    return item


@dataclass
class EvalOutcome:
    """All judged items plus bookkeeping for reports."""

    items: list[ItemResult] = field(default_factory=list)
    run_dirs: dict[tuple[str, str, int], Path] = field(default_factory=dict)
    prediction_files: list[Path] = field(default_factory=list)
    new_episodes: int = 0
    trials: dict[tuple[str, str], int] = field(default_factory=dict)  # (benchmark, config) -> runs (protocol rule)


def _check_protocols(benchmarks: dict[str, LoadResult], configs: dict[str, EvalConfig]) -> None:
    """Raise :class:`ProtocolError` if a benchmark was loaded under another protocol than a configuration runs."""
    for bench, lr in benchmarks.items():
        loaded_under = (lr.info.get("protocol") or {}).get("name")
        for cname, cfg in configs.items():
            if loaded_under is not None and loaded_under != cfg.protocol:
                raise ProtocolError(f"{bench} was loaded under protocol {loaded_under!r} but configuration {cname!r} "
                                    f"runs {cfg.protocol!r}: load and run under one protocol")


def _trial_harness(policy, web: SearchBackend, cfg: EvalConfig, cname: str, r: int, *, temperature: float, seed: int,
                   summarizer, labels: list[str] | tuple[str, ...]) -> Harness:
    """The harness of repeat ``r`` of configuration ``cname`` (seed ``seed + 1000 * r``, labelled by both)."""
    return Harness(policy, web, cfg.harness,
                   sampling=SamplingParams(temperature=temperature, seed=seed + 1000 * r),
                   summarizer=summarizer, context_builder=cfg.context_builder(),
                   labels=list(labels) + [f"config:{cname}", f"repeat:{r}"])


async def _run_trial(harness: Harness, tasks: list[Task], run_dir: Path,
                     concurrency: int) -> tuple[list[EpisodeRecord], int]:
    """``(records, n_new)``: every task's episode record in ``run_dir`` and how many were run now (not resumed)."""
    fresh: list[str] = []
    records = await run_batch(harness, tasks, run_dir, concurrency=concurrency, progress=False,
                              on_episode=lambda rec: fresh.append(rec.id))
    return records, len(fresh)


def _record_run(outcome: EvalOutcome, out: Path, bench: str, cname: str, r: int, run_dir: Path,
                items: list[ItemResult]) -> None:
    """Write one run's judged items to ``out/predictions/<bench>__<config>__r<r>.jsonl`` and add them to ``outcome``."""
    pred = out / "predictions" / f"{bench}__{cname}__r{r}.jsonl"
    _atomic_write_lines(pred, [it.model_dump_json() for it in items])
    outcome.items += items
    outcome.run_dirs[(bench, cname, r)] = run_dir
    outcome.prediction_files.append(pred)


async def run_evaluation(benchmarks: dict[str, LoadResult], configs: dict[str, EvalConfig], *, policy,
                         backend: SearchBackend, out_dir: str | Path, repeats: int = 3, seed: int = 0,
                         temperature: float = 0.6, judge=None, image_judge=None,
                         private_dir: str | Path | None = None, private_backend: SearchBackend | None = None,
                         summarizer=None, labels: list[str] | tuple[str, ...] = (), concurrency: int = 4,
                         on_run: Callable[[str, str, int, list[ItemResult]], None] | None = None,
                         max_trials: int | None = None) -> EvalOutcome:
    """Run every benchmark × configuration × repeat and judge each episode.

    Args:
        benchmarks: loaded benchmarks (:class:`LoadResult` by key); their problems are written to
            ``out_dir/problems.jsonl``.
        configs: configurations (:func:`kit.eval.configs.make_configs`).
        policy: the policy under evaluation (one object for all configurations).
        backend / private_backend: search backends for ordinary / sensitive benchmarks. Default for
            the sensitive ones: ``backend``'s web behind a private tool cache,
            ``private_dir / PRIVATE_TOOL_CACHE`` (:func:`private_web`), never ``backend``'s own cache.
        repeats: runs per configuration (WeAgent: 3) where the configuration's protocol has no
            trials rule; ``points_seeker``: :meth:`EvalProtocol.trials` of the benchmark's task count.
        max_trials: a cap on those runs (a size: a preflight runs each once); None: no cap.
        seed, temperature: sampling; repeat ``k`` uses seed ``seed + 1000 * k`` in every configuration.
        judge: :class:`RuleJudge` (default) or :class:`kit.eval.judges.LLMJudge`.
        image_judge: Target Match judge (default :class:`kit.eval.judges.PerceptualImageJudge`).
        private_dir: run folders of sensitive benchmarks (default :func:`default_private_dir`).
        on_run: called after each judged run with ``(benchmark, config, repeat, items)``.

    Returns:
        :class:`EvalOutcome` with every item (finished earlier or now) and the runs per benchmark.

    Raises:
        ProtocolError: before anything runs, a benchmark loaded under another protocol than a
            configuration names (its filters would not be that protocol's).
    """
    from kit.eval.judges import PerceptualImageJudge

    _check_protocols(benchmarks, configs)
    out = Path(out_dir)
    judge = judge if judge is not None else RuleJudge()
    image_judge = image_judge if image_judge is not None else PerceptualImageJudge()
    private = Path(private_dir) if private_dir else default_private_dir(out)
    _atomic_write_lines(out / "problems.jsonl", [json.dumps(p, ensure_ascii=False, default=str)
                                                 for lr in benchmarks.values() for p in lr.problems])
    outcome = EvalOutcome()
    opened: list[CachedBackend] = []  # the default private cache, opened on first use

    def sensitive_web() -> SearchBackend:  # a run without sensitive benchmarks creates nothing
        if private_backend is not None:
            return private_backend
        if not opened:
            opened.append(private_web(backend, private))
        return opened[0]

    def n_trials(bench: str, cfg: EvalConfig) -> int:
        t = cfg.eval_protocol().trials(len(benchmarks[bench].tasks), repeats)
        return t if max_trials is None else min(t, max_trials)

    bar = progress_bar(total=sum(n_trials(b, c) * len(lr.tasks) for b, lr in benchmarks.items() if lr.tasks
                                 for c in configs.values()), desc="evaluation items", unit="item")
    for bench, lr in benchmarks.items():
        if not lr.tasks:
            continue
        sensitive = is_sensitive(lr.tasks)
        for cname, cfg in configs.items():
            trials = outcome.trials[(bench, cname)] = n_trials(bench, cfg)
            for r in range(trials):
                run_dir = (private if sensitive else out / "runs") / bench / cname / f"r{r}"
                web = sensitive_web() if sensitive else backend
                harness = _trial_harness(policy, web, cfg, cname, r, temperature=temperature, seed=seed,
                                         summarizer=summarizer, labels=labels)
                records, n_new = await _run_trial(harness, lr.tasks, run_dir, concurrency)
                outcome.new_episodes += n_new
                items = [await score_record(rec, bench, cname, r, judge, image_judge) for rec in records]
                bar.update(len(lr.tasks))
                _record_run(outcome, out, bench, cname, r, run_dir, items)
                if on_run is not None:
                    on_run(bench, cname, r, items)
    bar.close()
    for web in opened:
        web.cache.close()
    return outcome


def read_predictions(out_dir: str | Path) -> list[ItemResult]:
    """All prediction lines of an evaluation folder."""
    items = []
    for f in sorted((Path(out_dir) / "predictions").glob("*.jsonl")):
        items += [ItemResult.model_validate_json(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    return items


def subset_label(lr: LoadResult) -> str:
    """What part of the benchmark was evaluated: ``"full"``, the protocol's filters, and a saved id
    list (the hard subset: its size, round threshold and reference run)."""
    parts = [f"filters {'+'.join(f)}" for f in [(lr.info.get("protocol") or {}).get("filters")] if f]
    sub = lr.info.get("id_subset")
    if sub:
        rounds = f", >= {sub['min_rounds']} rounds" if sub.get("min_rounds") else ""
        ref = f", reference {sub['reference']}" if sub.get("reference") else ""
        parts.append(f"id list {sub.get('path') or '(given)'} ({sub['ids']} ids{rounds}{ref})")
    return "; ".join(parts) or "full"


def summary_rows(benchmarks: dict[str, LoadResult], items: list[ItemResult]) -> list[dict[str, Any]]:
    """Per benchmark × configuration: loaded tasks, load problems, rows filtered by the subset rule,
    episodes, episode errors, judge errors, image-judge errors, accuracy (percent), the protocol,
    the subset evaluated (:func:`subset_label`) and the runs (distinct repeats judged)."""
    rows = []
    configs = list(dict.fromkeys(it.config for it in items))
    for bench, lr in benchmarks.items():
        for c in configs or ["-"]:
            its = [it for it in items if it.benchmark == bench and it.config == c]
            rows.append({"benchmark": bench, "config": c, "tasks": len(lr.tasks), "load_problems": len(lr.problems),
                         "filtered": sum(lr.filtered.values()), "episodes": len(its),
                         "episode_errors": sum(1 for it in its if it.status == "error"),
                         "judge_errors": sum(1 for it in its if it.judge_error and it.correct is None),
                         "image_judge_errors": sum(1 for it in its if it.image_judge_error),
                         "accuracy_pct": round(100 * sum(it.score for it in its) / len(its), 2) if its else None,
                         "protocol": (lr.info.get("protocol") or {}).get("name"), "subset": subset_label(lr),
                         "trials": len({it.repeat for it in its})})
    return rows


async def load_benchmarks(specs: list[str], *, source: str = "local", limit: int | None = None, web=None,
                          data_dir: str | Path | None = None, image_dir: str | Path | None = None,
                          local_paths: dict[str, str] | None = None, revisions: dict[str, str] | None = None,
                          missing_images: str = "problem", protocol: str | EvalProtocol | None = None,
                          subset_ids: dict[str, str | Path | list[str]] | None = None,
                          cache_dir: str | Path | None = None) -> dict[str, LoadResult]:
    """Load every spec; a spec that cannot be loaded at all (unknown name, missing data folder,
    unreachable Hub, unreadable file) becomes an empty :class:`LoadResult` whose single problem
    says why — reported and counted, never dropped. ``vistarget_zim`` is built from ``web``.
    Hub benchmarks without a pinned revision load their default branch (warned, the resolved
    commit in ``info``).

    ``protocol`` (name or :class:`EvalProtocol`; default ``weagent_mmsearch``) selects each
    benchmark's filters; ``subset_ids`` restricts a benchmark to a saved id list
    (:func:`kit.eval.protocols.save_id_list`, e.g. the hard subset) before ``limit`` applies.

    Keys are benchmark names (``str(spec)`` when it names no benchmark). ``missing_images``
    (``"problem"`` or ``"text_only"``) applies to MM-BrowseComp and hub benchmarks (see
    :func:`kit.eval.benchmarks.load_benchmark`); the others ignore it. A failure that no loader
    foresaw is one benchmark's problem too (with its type), never the end of the others.

    Raises:
        ValueError: before anything loads: ``limit`` is not ``None`` or an integer >= 0,
            ``missing_images`` is not a known mode, two specs name the same benchmark
            (``fvqa`` and ``local:fvqa``: one would silently replace the other), an unknown
            protocol (:class:`ProtocolError`), or ``subset_ids`` for a benchmark no spec names.
    """
    from kit.eval.benchmarks import load_benchmark, parse_spec
    from kit.eval.hub_loaders import UnknownBenchmarkError
    from kit.eval.loaders import BenchmarkError, check_limit, check_missing_images, default_image_dir
    from kit.eval.vistarget import build_zim_vistarget

    try:
        check_limit(limit)
    except BenchmarkError as e:
        raise ValueError(f"load_benchmarks: {e}") from None
    check_missing_images(missing_images)
    proto = get_protocol(protocol)
    first: dict[str, str] = {}
    for spec in specs:  # keys first: a duplicate would overwrite a loaded benchmark
        try:
            k = parse_spec(spec, source)[1]
        except UnknownBenchmarkError:
            k = str(spec)
        if k in first:
            raise ValueError(f"duplicate benchmark {k!r}: named by {first[k]!r} and {spec!r}; name each benchmark once")
        first[k] = spec
    subset_ids = subset_ids or {}
    if set(subset_ids) - set(first):
        raise ValueError(f"subset_ids for {sorted(set(subset_ids) - set(first))}: no spec names them (specs: {specs})")
    out: dict[str, LoadResult] = {}
    local_paths, revisions = local_paths or {}, revisions or {}
    for spec in specs:
        key = str(spec)
        try:
            src, key = parse_spec(spec, source)
            if key == "vistarget_zim":
                if web is None:
                    raise BenchmarkError("vistarget_zim needs a search backend (web=...)")
                lr = apply_filters(await build_zim_vistarget(
                    web, limit or 20, Path(image_dir) / "vistarget_zim" if image_dir else default_image_dir() / "vistarget_zim"),
                    proto)
            else:
                ids = subset_ids.get(key)
                lr = load_benchmark(spec, source=source, data_dir=data_dir, limit=None if ids is not None else limit,
                                    local_path=local_paths.get(key), revision=revisions.get(key),
                                    image_dir=Path(image_dir) / key if image_dir else None, protocol=proto,
                                    missing_images=missing_images if key == "mmbrowsecomp" or src == "hub" else "problem",
                                    cache_dir=cache_dir)
                if ids is not None:  # the saved subset first, then the limit
                    lr = restrict_to_ids(lr, ids, limit)
        except (UnknownBenchmarkError, ProtocolError, BenchmarkError, OSError) as e:
            lr = LoadResult(key)
            lr.problem(None, f"{type(e).__name__}: {e}")
        except Exception as e:  # unforeseen: reported as this benchmark's problem, the others still load
            lr = LoadResult(key)
            lr.problem(None, f"unexpected {type(e).__name__}: {str(e)[:300]}")
        out[key] = lr
    return out


class NothingEvaluated(RuntimeError):
    """An evaluation with no task to run: every benchmark failed to load or was empty (one line per benchmark)."""


def require_tasks(benchmarks: dict[str, LoadResult], max_reasons: int = 3) -> int:
    """The number of loaded tasks; an evaluation with none must not finish as a success (empty Table 1).

    Args:
        benchmarks: :class:`LoadResult` by key (``load_benchmarks``'s result).
        max_reasons: load-problem reasons listed per benchmark.
    Raises:
        NothingEvaluated: zero tasks over ``benchmarks``; the message lists each benchmark's load problems.
    """
    n = sum(len(lr.tasks) for lr in benchmarks.values())
    if n:
        return n
    lines = []
    for key, lr in benchmarks.items():
        reasons = list(dict.fromkeys(str(p.get("reason", p)) for p in lr.problems))
        shown = "; ".join(reasons[:max_reasons]) + (f"; … ({len(reasons) - max_reasons} more)" if len(reasons) > max_reasons else "")
        lines.append(f"  {key}: {len(lr.problems)} load problem(s)" + (f": {shown}" if shown else " (no rows)"))
    raise NothingEvaluated("0 tasks to evaluate: every benchmark failed to load or was empty\n"
                           + ("\n".join(lines) or "  (no benchmarks)"))
