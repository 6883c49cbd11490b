"""Benchmark names, display information and one entry point to load any of them.

Names follow WeAgent Table 1 (MMBrowseComp, MMSearch, MMSearch-Plus, VisTarget-Bench, SimpleVQA,
VDR-Bench, LiveVQA, FVQA) plus POINTS-Seeker's BrowseComp-VL and the MMSearch-R1 InfoSeek split.

A spec is ``"<name>"``, ``"local:<name>"`` (the real sample files under the shared data folder,
``benchmarks/``) or ``"hub:<name>"`` (the published release, :mod:`kit.eval.hub_loaders`).
``vistarget_zim`` (VisTarget-style tasks built from the local web) needs a search backend and is
built by :func:`kit.eval.vistarget.build_zim_vistarget` (the evaluation runner does it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kit.eval.hub_loaders import HUB_SOURCES, UnknownBenchmarkError, load_hub_benchmark
from kit.eval.loaders import (
    BenchmarkError,
    LoadResult,
    check_limit,
    check_missing_images,
    load_fvqa,
    load_infoseek,
    load_livevqa,
    load_mm_browsecomp,
    load_vistarget_jsonl,
)
from kit.eval.protocols import EvalProtocol, apply_filters, get_protocol
from kit.harness.episode import Task

MMSEARCH_STYLE = "MMSearch-style Tasks"
KNOWLEDGE_QA = "Multimodal Knowledge QA"


@dataclass(frozen=True)
class BenchmarkInfo:
    """Display name and Table-1 group of a benchmark."""

    key: str
    display: str
    group: str


BENCHMARKS: dict[str, BenchmarkInfo] = {b.key: b for b in [
    BenchmarkInfo("mmbrowsecomp", "MMBrowseComp", MMSEARCH_STYLE),
    BenchmarkInfo("mmsearch", "MMSearch", MMSEARCH_STYLE),
    BenchmarkInfo("mmsearch_plus", "MMSearch-Plus", MMSEARCH_STYLE),
    BenchmarkInfo("vistarget", "VisTarget-Bench", MMSEARCH_STYLE),
    BenchmarkInfo("vistarget_zim", "VisTarget-style (ZIM)", MMSEARCH_STYLE),
    BenchmarkInfo("browsecomp_vl", "BC-VL", MMSEARCH_STYLE),
    BenchmarkInfo("simplevqa", "SimpleVQA", KNOWLEDGE_QA),
    BenchmarkInfo("vdr_bench", "VDR-Bench", KNOWLEDGE_QA),
    BenchmarkInfo("livevqa", "LiveVQA", KNOWLEDGE_QA),
    BenchmarkInfo("fvqa", "FVQA", KNOWLEDGE_QA),
    BenchmarkInfo("infoseek", "InfoSeek", KNOWLEDGE_QA),
]}
TABLE_ORDER = list(BENCHMARKS)

# Local real files (shared data folder, benchmarks/...) and how to read them.
LOCAL_FILES: dict[str, tuple[str, Callable[..., LoadResult]]] = {
    "fvqa": ("fvqa_mmsearch_r1", lambda p, limit: _fvqa_result(p, limit)),
    "mmbrowsecomp": ("mm_browsecomp_sample", lambda p, limit, **kw: load_mm_browsecomp(p, limit, **kw)),
    "livevqa": ("livevqa_news_sample", lambda p, limit: load_livevqa(p, limit)),
    "infoseek": ("infoseek_mini/mini_data.pq", lambda p, limit: load_infoseek(p, limit)),
}
_SPEC = re.compile(r"^(?:(hub|local):)?([a-z0-9_]+)$")


# name -> loader(path, limit) of benchmarks registered from outside the kit (register_benchmark)
_REGISTERED: dict[str, Callable[[Path, int | None], LoadResult | list]] = {}


def register_benchmark(key: str, loader: Callable[[Path, int | None], LoadResult | list], *,
                       display: str | None = None, group: str = KNOWLEDGE_QA, replace: bool = False) -> BenchmarkInfo:
    """Make ``load_benchmark("local:<key>", local_path=...)`` read a benchmark of your own.

    ``loader(path, limit)`` reads the file or folder ``local_path`` and returns a :class:`LoadResult`, or a
    list of :class:`~kit.harness.episode.Task` (wrapped into one, duplicate ids reported as problems). The
    benchmark then appears in reports under ``display`` in ``group`` (Table 1's two groups:
    :data:`MMSEARCH_STYLE`, :data:`KNOWLEDGE_QA`) and is filtered by the run's protocol like any other.

    Raises:
        ValueError: ``key`` is not ``[a-z0-9_]+``, is a built-in or registered name (unless ``replace`` for
            a registered one), ``loader`` is not callable, or ``group`` is not one of the two groups.
    """
    if not isinstance(key, str) or not re.fullmatch(r"[a-z0-9_]+", key):
        raise ValueError(f"a benchmark key is lower-case letters, digits and '_', got {key!r}")
    if key in BENCHMARKS and not (replace and key in _REGISTERED):
        raise ValueError(f"benchmark {key!r} is " + ("registered already (pass replace=True)" if key in _REGISTERED
                                                      else "built in: choose another key"))
    if not callable(loader):
        raise ValueError(f"benchmark {key!r}: the loader must be callable, got {type(loader).__name__}")
    if group not in (MMSEARCH_STYLE, KNOWLEDGE_QA):
        raise ValueError(f"benchmark {key!r}: group is {MMSEARCH_STYLE!r} or {KNOWLEDGE_QA!r}, got {group!r}")
    info = BenchmarkInfo(key, display or key, group)
    BENCHMARKS[key] = info
    if key not in TABLE_ORDER:
        TABLE_ORDER.append(key)
    _REGISTERED[key] = loader
    return info


def _load_registered(key: str, local_path, load_limit: int | None, proto: EvalProtocol, limit: int | None) -> LoadResult:
    """Run a registered loader on ``local_path`` and apply the protocol's filters and ``limit``."""
    if local_path is None:
        raise BenchmarkError(f"local:{key} is a registered benchmark: pass local_path (its file or folder)")
    out = _REGISTERED[key](Path(local_path), load_limit)
    if isinstance(out, LoadResult):
        res = out
    elif isinstance(out, list) and all(isinstance(t, Task) for t in out):
        res = LoadResult(key, info={"loader": getattr(_REGISTERED[key], "__qualname__", repr(_REGISTERED[key])),
                                    "path": str(local_path)})
        res.add(out, row=None)
    else:
        raise BenchmarkError(f"the loader of {key!r} returned {type(out).__name__}: return a LoadResult or a list of Task")
    return apply_filters(res, proto, limit)


def _fvqa_result(path: Path, limit: int | None) -> LoadResult:
    tasks, problems = load_fvqa(path, limit)
    from kit.eval.loaders import _file_info

    res = LoadResult("fvqa", tasks=tasks, info={"files": [_file_info(f) for f in sorted((path / "metadata").glob("*.json"))],
                                                 "format": "MMSearch-R1 FVQA folder"})
    for p in problems:
        res.problem(p["file"], p["reason"])
    return res


def display_name(key: str) -> str:
    """Table header of a benchmark key (the key itself when unknown)."""
    return BENCHMARKS[key].display if key in BENCHMARKS else key


def parse_spec(spec: str, default_source: str = "local") -> tuple[str, str]:
    """``"hub:fvqa"`` -> ``("hub", "fvqa")``; a bare name takes ``default_source``.

    Raises:
        UnknownBenchmarkError: malformed spec (not a string) or unknown name.
    """
    if not isinstance(spec, str):
        raise UnknownBenchmarkError(f"a benchmark spec is a string like 'fvqa' or 'hub:fvqa', got {spec!r}")
    m = _SPEC.match(spec.strip())
    if not m or m.group(2) not in BENCHMARKS:
        raise UnknownBenchmarkError(f"unknown benchmark {spec!r}; known: {sorted(BENCHMARKS)} "
                                    "(optionally prefixed with 'local:' or 'hub:')")
    return m.group(1) or default_source, m.group(2)


def load_benchmark(spec: str, *, source: str = "local", data_dir: str | Path | None = None, limit: int | None = None,
                   local_path: str | Path | None = None, revision: str | None = None,
                   image_dir: str | Path | None = None, missing_images: str = "problem",
                   protocol: str | EvalProtocol | None = None, cache_dir: str | Path | None = None) -> LoadResult:
    """Load one benchmark by spec (see the module docstring).

    Args:
        source: source for bare names (``local`` or ``hub``).
        data_dir: the shared data folder (default :func:`kit.paths.shared_data_dir`).
        local_path: for ``hub`` specs, a local copy laid out like the repository; for
            ``local:vistarget``, the VisTarget JSONL file.
        missing_images: ``"problem"`` (default: a row whose image file is absent is a per-row
            problem) or ``"text_only"`` (such a row loads without images, labelled
            ``text_only:missing_images``); MM-BrowseComp and hub benchmarks only.
        protocol: evaluation protocol (:mod:`kit.eval.protocols`; default ``weagent_mmsearch``)
            whose filters select the subset, for hub and local specs alike.
        cache_dir: Hugging Face cache for hub snapshots (default: the standard cache).

    Hub benchmarks with no pinned revision load the default branch with an
    :class:`~kit.eval.hub_loaders.UnpinnedRevisionWarning` and record the commit it resolved to.

    Raises:
        UnknownBenchmarkError: unknown name, or a local spec with no local files for it.
        BenchmarkError: no data folder, or unreadable data, or an unreachable Hub (no cached snapshot).
        kit.eval.protocols.ProtocolError: an unknown protocol name.
        ValueError: ``missing_images`` is not one of ``"problem"``, ``"text_only"`` (checked first,
            for every benchmark); ``BenchmarkError`` for a ``limit`` that is not an integer >= 0.
    """
    check_missing_images(missing_images)
    check_limit(limit)
    proto = get_protocol(protocol)
    src, key = parse_spec(spec, source)
    if key == "vistarget_zim":
        raise BenchmarkError("vistarget_zim is built from a search backend: use kit.eval.vistarget.build_zim_vistarget")
    if src == "hub":
        if key not in HUB_SOURCES:
            raise UnknownBenchmarkError(f"{key!r} has no published source in the registry; registered: {sorted(HUB_SOURCES)}")
        return load_hub_benchmark(key, local_path=local_path, revision=revision, limit=limit, image_dir=image_dir,
                                  missing_images=missing_images, protocol=proto, cache_dir=cache_dir)
    # local loaders take no filter: with one, load everything, filter, then cut to the limit
    filtered = bool(proto.filters.get(key))
    load_limit = None if filtered else limit
    if key == "vistarget":
        if local_path is None:
            raise BenchmarkError("local:vistarget needs local_path: the VisTarget JSONL file")
        return apply_filters(load_vistarget_jsonl(local_path, load_limit), proto, limit)
    if key in _REGISTERED:
        return _load_registered(key, local_path, load_limit, proto, limit)
    if key not in LOCAL_FILES:
        raise UnknownBenchmarkError(f"no local files for {key!r} (local: {sorted(LOCAL_FILES)}); use 'hub:{key}'")
    from kit.paths import shared_data_dir

    root = Path(data_dir) if data_dir else shared_data_dir()
    if root is None:
        raise BenchmarkError("no shared data folder: set MMSEARCH_KIT_DATA or pass data_dir")
    rel, fn = LOCAL_FILES[key]
    if missing_images != "problem":
        if key != "mmbrowsecomp":
            raise BenchmarkError(f"missing_images={missing_images!r} applies to MM-BrowseComp and hub benchmarks, not local:{key}")
        return apply_filters(fn(root / "benchmarks" / rel, load_limit, missing_images=missing_images), proto, limit)
    return apply_filters(fn(root / "benchmarks" / rel, load_limit), proto, limit)
