"""Replay: re-run an evaluation from a tool-response cache snapshot with no network and compare.

A published run carries ``cache.sqlite`` (every search, image search, reverse image search and page
fetch its episodes made, keyed by WeAgent §3.2's exact-match normalization). Replaying serves every
tool call from that snapshot, read-only; the backend behind it is :class:`OfflineBackend`, which
answers any call that the snapshot cannot serve with a recorded miss (never the network). With the
same policy, seeds and judge (or judge cache), the episodes see identical tool observations and the
items get identical scores; :func:`compare_evaluations` proves it item by item and observation by
observation, and lists every difference.

Encrypted benchmarks (MM-BrowseComp, MMSearch-Plus) run against a private cache that is never
published: :func:`replay_run` reports them as not replayable instead of skipping them silently.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from kit.eval.metrics import ItemResult
from kit.harness.runner import read_episodes
from kit.types import BackendError, ImageHit, Page, ReverseImageResult, SearchHit
from kit.web.cache import CachedBackend, ToolCache, snapshot_counts

# ItemResult fields that must agree between a run and its replay (timings and paths may differ)
COMPARED_FIELDS = ("status", "score", "correct", "cited", "cited_images", "match", "turns", "tool_calls", "tool_counts",
                   "response_sha256", "judge", "error")


class ReplayError(RuntimeError):
    """A replay cannot run or did not reproduce its source (missing manifest or snapshot, cache misses
    in strict mode, configuration drift)."""


class OfflineBackend:
    """The backend behind a replay cache: every call is a miss, recorded and answered with a
    non-retryable :class:`BackendError`; it has no network code at all.

    ``name`` must equal the recorded backend's name: it is part of every cache key.
    """

    def __init__(self, name: str):
        self.name = name
        self.misses: list[tuple[str, str]] = []

    def _miss(self, op: str, what: str) -> NoReturn:
        self.misses.append((op, what))
        raise BackendError(f"replay: {op} {what[:120]!r} is not in the cache snapshot (offline)", retryable=False)

    async def search(self, query: str, num: int) -> list[SearchHit]:
        self._miss("search", query)

    async def image_search(self, query: str, num: int) -> list[ImageHit]:
        self._miss("image_search", query)

    async def reverse_image_search(self, image: bytes, num: int) -> ReverseImageResult:
        self._miss("reverse_image_search", hashlib.sha256(image).hexdigest())

    async def fetch(self, url: str) -> Page:
        self._miss("fetch", url)


def snapshot_backends(snapshot: str | Path) -> dict[str, int]:
    """``{backend name: entries}`` recorded in a cache snapshot.

    Raises:
        FileNotFoundError: no snapshot file.
        ReplayError: the file is not a tool cache.
    """
    try:
        rows = snapshot_counts(snapshot)
    except ValueError as e:
        raise ReplayError(str(e)) from e
    out: dict[str, int] = {}
    for backend, _, n in rows:
        out[backend] = out.get(backend, 0) + n
    return out


def replay_backend(snapshot: str | Path, name: str | None = None) -> tuple[CachedBackend, OfflineBackend]:
    """A read-only cached backend over ``snapshot`` and its :class:`OfflineBackend` (for the misses).

    ``name`` defaults to the snapshot's only backend.

    Raises:
        ReplayError: ``name`` is None and the snapshot holds several backends (or none).
    """
    names = snapshot_backends(snapshot)
    if name is None:
        if len(names) != 1:
            raise ReplayError(f"snapshot {snapshot} holds backends {sorted(names)}: name the one to replay")
        name = next(iter(names))
    offline = OfflineBackend(name)
    return CachedBackend(offline, ToolCache(snapshot, mode="readonly")), offline


# ---------------------------------------------------------------------------------------- compare
@dataclass
class ReplayReport:
    """Outcome of comparing a run with its replay."""

    items_compared: int = 0
    item_mismatches: list[str] = field(default_factory=list)
    episodes_compared: int = 0
    observation_mismatches: list[str] = field(default_factory=list)
    only_in_original: list[str] = field(default_factory=list)
    only_in_replay: list[str] = field(default_factory=list)
    cache_misses: list[tuple[str, str]] = field(default_factory=list)  # during the episodes
    load_misses: list[tuple[str, str]] = field(default_factory=list)  # while building tasks (see not_replayed)
    not_replayed: dict[str, str] = field(default_factory=dict)  # benchmark -> reason
    config_drift: list[str] = field(default_factory=list)  # recorded vs current harness configuration
    cache_hits: int = 0
    # role -> what the replay rebuilt from the manifest (not the run's own object): policy, judges, summarizer,
    # a preflight's stand-in Hub releases
    rebuilt: dict[str, str] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        """True when every compared item and observation agrees, nothing is missing on either side
        and no tool call missed the snapshot."""
        return (self.items_compared > 0 and not self.item_mismatches and not self.observation_mismatches
                and not self.only_in_original and not self.only_in_replay and not self.cache_misses)

    def summary(self) -> str:
        lines = [f"replay: {'IDENTICAL' if self.identical else 'DIFFERENT'} — {self.items_compared} items, "
                 f"{self.episodes_compared} episodes compared; {self.cache_hits} cache hits, "
                 f"{len(self.cache_misses)} misses"]
        for title, rows in (("item mismatches", self.item_mismatches), ("observation mismatches", self.observation_mismatches),
                            ("only in the original", self.only_in_original), ("only in the replay", self.only_in_replay),
                            ("cache misses", [f"{op} {w}" for op, w in self.cache_misses])):
            if rows:
                lines.append(f"{title} ({len(rows)}):")
                lines += [f"  {r}" for r in rows[:20]] + ([f"  … {len(rows) - 20} more"] if len(rows) > 20 else [])
        if self.load_misses:
            lines.append(f"{len(self.load_misses)} tool call(s) made while building tasks missed the snapshot, "
                         f"first: {self.load_misses[0]}")
        for d in self.config_drift:
            lines.append(f"configuration drift (replayed anyway): {d}")
        for role, what in self.rebuilt.items():
            lines.append(f"rebuilt from the manifest: {role}: {what}")
        for b, why in self.not_replayed.items():
            lines.append(f"not replayed: {b}: {why}")
        return "\n".join(lines)


def _item_key(it: ItemResult) -> str:
    return f"{it.benchmark}/{it.config}/r{it.repeat}/{it.task_id}"


def _observations(rec) -> list[dict[str, Any]]:
    """What the tools showed the model: tool messages (text and image refs) and the registered
    images' content hashes, in order."""
    obs = [{"name": m.name, "text": m.text(), "images": m.image_refs(), "intervention": m.intervention}
           for m in rec.messages if m.role == "tool"]
    return obs + [{"image": im.filename, "sha256": im.sha256} for im in rec.images]


def compare_evaluations(original: str | Path, replay: str | Path, *, skip_benchmarks: tuple[str, ...] = ()) -> ReplayReport:
    """Compare two evaluation folders (``predictions/`` and ``runs/``) item by item and episode by episode.

    Items are matched by benchmark / config / repeat / task id and compared on :data:`COMPARED_FIELDS`;
    episodes of each ``runs/<b>/<c>/r<k>/episodes.jsonl`` are matched by episode id and compared on
    their tool observations and registered image hashes.
    """
    from kit.eval.runner import read_predictions

    rep = ReplayReport()
    a = {_item_key(i): i for i in read_predictions(original) if i.benchmark not in skip_benchmarks}
    b = {_item_key(i): i for i in read_predictions(replay) if i.benchmark not in skip_benchmarks}
    rep.only_in_original += sorted(set(a) - set(b))
    rep.only_in_replay += sorted(set(b) - set(a))
    for k in sorted(set(a) & set(b)):
        rep.items_compared += 1
        for f in COMPARED_FIELDS:
            va, vb = getattr(a[k], f), getattr(b[k], f)
            if va != vb:
                rep.item_mismatches.append(f"{k}: {f} {va!r} != {vb!r}")
    oa, ob = Path(original) / "runs", Path(replay) / "runs"
    for ep_file in sorted(oa.rglob("episodes.jsonl")):
        rel = ep_file.relative_to(oa)
        if rel.parts[0] in skip_benchmarks:
            continue
        ra = {r.id: r for r in read_episodes(ep_file)}
        rb = {r.id: r for r in read_episodes(ob / rel)}
        rep.only_in_original += [f"{rel.parent}/{i}" for i in sorted(set(ra) - set(rb))]
        rep.only_in_replay += [f"{rel.parent}/{i}" for i in sorted(set(rb) - set(ra))]
        for i in sorted(set(ra) & set(rb)):
            rep.episodes_compared += 1
            xa, xb = _observations(ra[i]), _observations(rb[i])
            if xa != xb:
                n = next((j for j, (u, v) in enumerate(zip(xa, xb)) if u != v), min(len(xa), len(xb)))
                rep.observation_mismatches.append(f"{rel.parent}/{i}: observation {n} differs "
                                                  f"({len(xa)} vs {len(xb)} observations)")
    return rep


# ---------------------------------------------------------------------------------------- replay
async def replay_evaluation(benchmarks, configs, *, policy, snapshot: str | Path, out_dir: str | Path,
                            backend_name: str | None = None, strict: bool = True, **run_kwargs):
    """Run :func:`kit.eval.runner.run_evaluation` with every tool call served from ``snapshot``.

    Args:
        benchmarks, configs, policy, run_kwargs: as for ``run_evaluation`` (same seed, temperature,
            repeats and judge as the original run to reproduce it).
        snapshot: the original run's tool-cache snapshot (opened read-only, immutable).
        strict: raise when any tool call missed the snapshot (the replay then saw error
            observations the original did not).

    Returns:
        ``(outcome, offline_backend, cache)``: the evaluation outcome, the offline backend (its
        ``misses``), and the read-only cache (its ``stats``).

    Raises:
        ReplayError: ``strict`` and at least one miss.
    """
    from kit.eval.runner import run_evaluation

    web, offline = replay_backend(snapshot, backend_name)
    try:
        outcome = await run_evaluation(benchmarks, configs, policy=policy, backend=web, out_dir=out_dir, **run_kwargs)
    finally:
        web.cache.close()
    if strict and offline.misses:
        raise ReplayError(f"{len(offline.misses)} tool call(s) missed the snapshot {snapshot}, first: {offline.misses[0]}")
    return outcome, offline, web.cache


def _policy_from_manifest(model: dict[str, Any], *, seed: int = 0, max_new_tokens: int | None = None):
    """``(policy, what was rebuilt)`` from a manifest's ``model`` record.

    Rebuilt: the scripted demonstrator, and a tiny random-weight checkpoint (``kind`` ``"tiny"``, what a
    preflight or a smoke run without a model evaluates: :func:`kit.policy.factory.make_policy` builds it offline
    from its name and the run's seed) when the manifest records its checkpoint's content hash and the rebuilt
    checkpoint has exactly that hash. Anything else raises :class:`ReplayError`.
    """
    kind = model.get("kind")
    if kind == "scripted-demonstrator":
        from kit.policy.demonstrator import DemonstratorPolicy

        return DemonstratorPolicy(), "scripted demonstrator (no model)"
    if kind == "tiny":
        from kit.manifest import tree_sha256
        from kit.policy.factory import TINY_PREFIX, ModelUnavailable, make_policy

        name, recorded = model.get("model"), (model.get("checkpoint") or {}).get("sha256")
        if not (isinstance(name, str) and name.startswith(TINY_PREFIX) and recorded):
            raise ReplayError(f"the run's tiny policy {name!r} cannot be rebuilt exactly: the manifest records no "
                              "checkpoint hash to check it against; pass policy=")
        try:
            policy, info = make_policy(name, "", seed=seed, max_new_tokens=max_new_tokens)
        except ModelUnavailable as e:
            raise ReplayError(f"the run's tiny policy {name!r} cannot be rebuilt: {e}") from e
        got = tree_sha256(info["path"])["sha256"]
        if got != recorded:
            raise ReplayError(f"the rebuilt tiny policy {name!r} (seed {seed}) has checkpoint sha256 {got[:12]}…, the run's "
                              f"was {recorded[:12]}… (the tiny-model builder changed since the run): pass policy=")
        return policy, (f"{name}: tiny random-weight checkpoint built offline with seed {seed} "
                        f"(checkpoint sha256 {got[:12]}… = the manifest's), max_new_tokens={max_new_tokens}")
    raise ReplayError(f"the run's policy {kind or model} cannot be rebuilt from the manifest alone: "
                      "pass policy= (the same model, served with the same seed)")


def _stand_in_model(name: Any) -> str | None:
    """The paper model a preflight's stand-in judge / summarizer model name stands in for
    (``"tiny stand-in (tiny-qwen2_vl, random weights) for kimi-k2.6"`` → ``"kimi-k2.6"``), else None."""
    from kit.profiles import stand_in_name

    prefix = stand_in_name("")
    return name[len(prefix):] if isinstance(name, str) and name.startswith(prefix) and len(name) > len(prefix) else None


_STAND_IN_NOTE = ("tiny random-weight stand-in rebuilt offline by kit.profiles.stand_in_policy (its fixed seed); "
                  "name and prompt hash checked against the manifest")


def _check_rebuilt(role: str, obj, recorded: dict[str, Any]) -> None:
    """Raise :class:`ReplayError` unless each recorded attribute (``name``, ``prompt_version``) of the rebuilt
    ``obj`` equals the manifest's (a field the manifest does not record is not checked)."""
    for key, want in recorded.items():
        got = getattr(obj, key, None)
        if want is not None and got != want:
            raise ReplayError(f"the rebuilt {role} has {key} {got!r}, the run's was {want!r}: pass the {role} explicitly")


def _answer_judge_from_manifest(cfg: dict[str, Any], prof) -> tuple[Any, str | None]:
    """``(answer judge, what was rebuilt or None)``: the rule judge (labelled fallback as recorded), or a
    preflight's stand-in LLM judge when the manifest names it; else :class:`ReplayError`."""
    import hashlib

    from kit.eval.judge_factory import make_answer_judge
    from kit.eval.judges import JUDGE_PROMPT, RuleJudge

    kind, recorded = cfg.get("judge"), cfg.get("answer_judge")
    if kind == "rule":
        rule = RuleJudge("contains", fallback=bool(cfg.get("answer_judge_fallback", False)))
        _check_rebuilt("answer judge", rule, {"name": recorded})
        return rule, None
    paper_model = _stand_in_model(cfg.get("answer_judge_model") or cfg.get("judge_model"))
    if kind == "llm" and cfg.get("preflight") and paper_model:
        judge = make_answer_judge("llm", profile=prof, model=paper_model, cache_path=None)
        _check_rebuilt("answer judge", judge, {"name": recorded, "prompt_version": cfg.get("answer_judge_prompt_version")})
        want = cfg.get("answer_judge_prompt_sha256")
        if want and hashlib.sha256(JUDGE_PROMPT.encode()).hexdigest() != want:
            raise ReplayError("the LLM judge prompt changed since the run (its sha256 differs from the manifest's): pass judge=")
        return judge, f"{judge.name}: {_STAND_IN_NOTE}; verdicts judged again (in-memory verdict cache)"
    raise ReplayError(f"judge {recorded or kind!r}: pass judge= (an LLM judge over the run's verdict cache)")


def _image_judge_from_manifest(cfg: dict[str, Any], prof) -> tuple[Any, str | None]:
    """``(Target Match judge or None (the default, for manifests that record none), what was rebuilt or None)``."""
    import hashlib

    from kit.eval.judge_factory import make_image_judge
    from kit.eval.judges import IMAGE_JUDGE_PROMPT, PerceptualImageJudge

    recorded = cfg.get("image_judge")
    if recorded is None:  # a manifest from before judges were recorded: the runner's default, as then
        return None, None
    if isinstance(recorded, str) and recorded.startswith("image:"):
        phash = PerceptualImageJudge(fallback=bool(cfg.get("image_judge_fallback", False)))
        _check_rebuilt("image judge", phash, {"name": recorded})
        return phash, None
    paper_model = _stand_in_model(cfg.get("image_judge_model"))
    if cfg.get("preflight") and paper_model:
        judge = make_image_judge("vlm", profile=prof, model=paper_model, cache_path=None)
        _check_rebuilt("image judge", judge, {"name": recorded, "prompt_version": cfg.get("image_judge_prompt_version")})
        want = cfg.get("image_judge_prompt_sha256")
        if want and hashlib.sha256(IMAGE_JUDGE_PROMPT.encode()).hexdigest() != want:
            raise ReplayError("the VLM image judge prompt changed since the run (its sha256 differs from the manifest's): "
                              "pass image_judge=")
        return judge, f"{judge.name}: {_STAND_IN_NOTE}; verdicts judged again (in-memory verdict cache)"
    raise ReplayError(f"image judge {recorded!r}: pass image_judge= (the same VLM judge over the run's verdict cache)")


def _summarizer_from_manifest(cfg: dict[str, Any], prof) -> tuple[Any, str | None]:
    """``(web_extract summarizer or None (the default, for manifests that record none), what was rebuilt or None)``:
    the extractive summarizer as recorded, or a preflight's stand-in LLM summarizer; else :class:`ReplayError`
    (its summaries are tool observations, not in the cache snapshot)."""
    from kit.harness.summarize import make_summarizer

    recorded = cfg.get("summarizer")
    if recorded is None:
        return None, None
    if isinstance(recorded, str) and recorded.startswith("extractive"):
        s = make_summarizer(profile=prof, kind="extractive")
        _check_rebuilt("summarizer", s, {"name": recorded})
        return s, None
    paper_model = _stand_in_model(recorded[len("llm:"):] if isinstance(recorded, str) and recorded.startswith("llm:") else None)
    if cfg.get("preflight") and paper_model:
        s = make_summarizer("", paper_model, prof, kind="llm")
        _check_rebuilt("summarizer", s, {"name": recorded})
        return s, f"{recorded}: {_STAND_IN_NOTE.replace(' and prompt hash', '')}"
    raise ReplayError(f"web_extract summarizer {recorded!r}: pass summarizer= (its summaries are tool observations "
                      "the cache snapshot does not hold)")


def _profile_from_manifest(cfg: dict[str, Any], m: dict[str, Any]):
    """The run's :class:`kit.profiles.Profile`: its name, preflight and ablation switches (from the run identity
    the command line records), checked against the recorded recipe label."""
    from kit.profiles import get_profile

    params = (m.get("run_identity") or {}).get("params") or {}
    switches = {k: params.get(k) for k in ("self_recovery",) if isinstance(params.get(k), bool)}
    try:
        prof = get_profile(cfg["profile"], preflight=bool(cfg.get("preflight")), switches=switches)
    except (KeyError, ValueError) as e:
        raise ReplayError(f"the run's profile cannot be rebuilt: {e}") from e
    label = prof.recipe_obj().label
    if cfg.get("recipe") and cfg["recipe"] != label:
        raise ReplayError(f"the run's recipe was {cfg['recipe']!r}, its profile now resolves to {label!r}")
    return prof


def _stand_in_hub_benchmarks(cfg: dict[str, Any]) -> dict[str, str | None]:
    """``{benchmark: recorded commit}`` of the benchmarks a preflight loaded from its local stand-in Hub."""
    return {k: v.get("resolved_commit") for k, v in (cfg.get("benchmark_sources") or {}).items()
            if isinstance(v, dict) and v.get("stand_in") is True}


# the rows per release notebook 06 publishes to its stand-in Hub (``install_standin_hub(..., n=1)``); the
# recorded commits (content-derived) prove the rebuilt releases are the run's
STANDIN_HUB_ROWS = 1


def _read_eval_manifest(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(manifest, its config)`` of a notebook-06 run folder with predictions, else :class:`ReplayError`."""
    from kit.manifest import read_manifest

    try:
        m = read_manifest(run_dir)
    except ValueError as e:  # JSON errors
        raise ReplayError(f"{run_dir / 'manifest.json'} is not readable JSON: {e}") from e
    cfg = m.get("config") if isinstance(m, dict) else None
    if not isinstance(cfg, dict) or cfg.get("notebook") != "06_evaluation":
        raise ReplayError(f"{run_dir} is not an evaluation run (its manifest names no notebook 06_evaluation)")
    if not (run_dir / "predictions").is_dir():
        raise ReplayError(f"{run_dir} holds no evaluation (no predictions/ folder) to compare with")
    return m, cfg


def _replay_out_dir(run_dir: Path, out_dir: str | Path | None) -> Path:
    """The replay's output folder: ``out_dir`` (new or empty, not the run) or a fresh temporary one."""
    if out_dir is None:
        return Path(tempfile.mkdtemp(prefix="replay_"))
    out = Path(out_dir)
    # a replay into a folder with results would resume them and compare nothing new
    if out.resolve() == run_dir.resolve() or (out.exists() and any(out.iterdir())):
        raise ReplayError(f"replay output folder {out} is not empty (or is the run itself): give a new folder")
    return out


def _republish_standin_hub(out: Path) -> Callable[[], None]:
    """Publish notebook 06's stand-in Hub releases again under ``out``; returns what undoes the rerouting."""
    import huggingface_hub
    import huggingface_hub.constants as hf_constants
    from huggingface_hub.utils._http import default_client_factory

    from kit.eval import hub_loaders
    from kit.eval.hub_standin import install_standin_hub

    hf_cache, standin_repos = hf_constants.HF_HUB_CACHE, set(hub_loaders.STANDIN_REPOS)

    def restore() -> None:  # install_standin_hub routes this process's huggingface_hub to it: undo that
        huggingface_hub.set_client_factory(default_client_factory)
        hf_constants.HF_HUB_CACHE = hf_cache
        hub_loaders.STANDIN_REPOS.clear()
        hub_loaders.STANDIN_REPOS.update(standin_repos)

    try:
        install_standin_hub(out / "standin_hub", n=STANDIN_HUB_ROWS)
    except BaseException:
        restore()
        raise
    return restore


def _usable_benchmarks(loaded: dict[str, Any], cfg: dict[str, Any], standin: dict[str, str | None],
                       report: ReplayReport, run_dir: Path) -> dict[str, Any]:
    """The loaded benchmarks to replay; the others go to ``report.not_replayed``, mismatches raise."""
    from kit.eval.runner import is_sensitive

    recorded_ids = cfg.get("task_ids", {})
    usable = {}
    for key, lr in loaded.items():
        if recorded_ids.get(key) and not lr.tasks:
            report.not_replayed[key] = "could not be loaded offline: " + "; ".join(p.get("reason", str(p)) for p in lr.problems[:2])
        elif is_sensitive(lr.tasks):
            report.not_replayed[key] = "encrypted benchmark: its tool cache is private and not in the snapshot"
        elif [t.id for t in lr.tasks] != recorded_ids.get(key, []):
            raise ReplayError(f"benchmark {key}: tasks {[t.id for t in lr.tasks]} differ from the recorded "
                              f"{recorded_ids.get(key)}")
        elif key in standin and lr.info.get("resolved_commit") != standin[key]:
            raise ReplayError(f"benchmark {key}: the rebuilt stand-in Hub release is at commit "
                              f"{lr.info.get('resolved_commit')}, the run's was {standin[key]}")
        else:
            usable[key] = lr
    if not usable:
        raise ReplayError(f"nothing to replay in {run_dir}: {report.not_replayed}")
    return usable


def _configs_and_drift(prof, cfg: dict[str, Any], allow_config_drift: bool) -> tuple[dict[str, Any], list[str]]:
    """The current code's configurations for the run and their drift from the recorded ones."""
    from kit.eval.configs import make_configs
    from kit.manifest import _diff

    configs = make_configs(prof, list(cfg["configs"]), real_model=bool(cfg.get("real_model", False)),
                           protocol=cfg.get("protocol"))
    drift: list[str] = []
    for name, c in configs.items():
        now = json.loads(json.dumps(c.harness.model_dump() | {"text_only": c.text_only}, default=str))
        _diff(cfg["configs"][name], now, name, drift)
    if drift and not allow_config_drift:
        raise ReplayError("the harness configuration differs from the recorded one (code changed since the run): "
                          + "; ".join(drift) + " — pass allow_config_drift=True (CLI --allow-drift) to replay anyway")
    return configs, drift


@dataclass
class _Roles:
    """The policy, judges and summarizer of a replay, given or rebuilt from the manifest."""

    policy: Any
    judge: Any
    image_judge: Any
    summarizer: Any

    def rebuild_missing(self, m: dict[str, Any], cfg: dict[str, Any], prof, rebuilt: dict[str, str]) -> None:
        """Rebuild each role not given from the manifest, naming what was rebuilt in ``rebuilt``."""
        if self.judge is None:
            self.judge, what = _answer_judge_from_manifest(cfg, prof)
            if what:
                rebuilt["answer judge"] = what
        if self.image_judge is None:
            self.image_judge, what = _image_judge_from_manifest(cfg, prof)
            if what:
                rebuilt["image judge"] = what
        if self.summarizer is None:
            self.summarizer, what = _summarizer_from_manifest(cfg, prof)
            if what:
                rebuilt["summarizer"] = what
        if self.policy is None:
            first: dict[str, Any] = next(iter(cfg["configs"].values()), {})  # notebook 06 bounds generation by the first configuration's
            self.policy, rebuilt["policy"] = _policy_from_manifest(m.get("model", {}), seed=int(m.get("seed") or 0),
                                                                   max_new_tokens=first.get("max_response_tokens"))


async def replay_run(run_dir: str | Path, *, snapshot: str | Path | None = None, out_dir: str | Path | None = None,
                     policy=None, judge=None, image_judge=None, summarizer=None, data_dir: str | Path | None = None,
                     allow_config_drift: bool = False) -> ReplayReport:
    """Replay a notebook-06 evaluation folder offline from its manifest and cache snapshot, and compare.

    The manifest supplies the profile (with its preflight), benchmarks, source, items per benchmark,
    protocol, configurations (checked against the current code's: a drift is an error unless
    ``allow_config_drift``, then listed in the report), repeats, seed, temperature, judges, summarizer and
    task ids. Local benchmark files come from the shared data folder; a preflight's stand-in Hub releases
    are published again (their recorded commits checked); encrypted benchmarks are reported as not
    replayable (their cache is private).

    What the manifest fully determines is rebuilt when not given, and named in :attr:`ReplayReport.rebuilt`:
    the scripted demonstrator, a tiny random-weight policy (its checkpoint hash checked), the rule and
    perceptual judges, the extractive summarizer, and a preflight's tiny stand-in LLM / VLM judges and LLM
    summarizer (their names and prompt hashes checked). Anything else must be passed (``policy``, ``judge``,
    ``image_judge``, ``summarizer``).

    Raises:
        FileNotFoundError: no manifest or snapshot.
        ReplayError: not an evaluation manifest, configuration drift, a policy, judge or summarizer that cannot
            be rebuilt, or task ids (or stand-in Hub commits) that differ from the recorded ones.
    """
    from kit.eval.runner import load_benchmarks
    from kit.paths import shared_data_dir

    run_dir = Path(run_dir)
    m, cfg = _read_eval_manifest(run_dir)
    snap = Path(snapshot) if snapshot else run_dir / "cache.sqlite"
    out = _replay_out_dir(run_dir, out_dir)
    prof = _profile_from_manifest(cfg, m)
    rebuilt: dict[str, str] = {}
    # a run whose episodes made no tool call (a preflight's random policy) leaves an empty snapshot: nothing can
    # hit, so the backend's name (part of every key) is the recorded one only for the record
    backend_name = None if snapshot_backends(snap) else str(cfg.get("web_backend") or "zim")
    standin = _stand_in_hub_benchmarks(cfg)
    # a preflight loaded these from its local stand-in Hub: publish the same releases again
    restore = _republish_standin_hub(out) if standin else None
    web, offline = replay_backend(snap, backend_name)
    params = (m.get("run_identity") or {}).get("params") or {}
    try:
        loaded = await load_benchmarks(cfg["benchmarks"], source=cfg.get("source", "local"), limit=cfg.get("n_per_benchmark"),
                                       web=web, data_dir=data_dir or shared_data_dir(), image_dir=out / "images",
                                       protocol=cfg.get("protocol"), missing_images=params.get("missing_images", "problem"))
    finally:
        web.cache.close()
        if restore is not None:
            restore()
    load_misses = list(offline.misses)  # building tasks from the web (vistarget_zim) must replay too
    report = ReplayReport()
    usable = _usable_benchmarks(loaded, cfg, standin, report, run_dir)
    if standin:
        rebuilt["benchmarks"] = (f"{', '.join(sorted(k for k in standin if k in usable))}: the preflight's synthetic "
                                 f"stand-in Hub releases ({STANDIN_HUB_ROWS} row each) published again locally "
                                 "(commits = the manifest's)")
    configs, drift = _configs_and_drift(prof, cfg, allow_config_drift)
    roles = _Roles(policy, judge, image_judge, summarizer)
    roles.rebuild_missing(m, cfg, prof, rebuilt)
    outcome, offline, cache = await replay_evaluation(
        usable, configs, policy=roles.policy, snapshot=snap, out_dir=out, backend_name=backend_name,
        repeats=cfg["repeats"], seed=m["seed"], temperature=cfg["temperature"], judge=roles.judge,
        image_judge=roles.image_judge, summarizer=roles.summarizer, labels=m.get("labels", []), strict=False,
        private_dir=out / "private", max_trials=prof.recipe_obj().get("eval.max_trials", None))
    cmp = compare_evaluations(run_dir, out, skip_benchmarks=tuple(report.not_replayed))
    cmp.not_replayed = report.not_replayed
    cmp.config_drift = drift
    cmp.cache_misses = list(offline.misses)
    cmp.load_misses = load_misses
    cmp.cache_hits = cache.stats["hits"]
    cmp.rebuilt = rebuilt
    return cmp
