"""Benchmark loaders by published name, with pinned revisions (WeAgent §7.1, POINTS-Seeker §4.1).

:data:`HUB_SOURCES` is the registry: for each benchmark the published repository (a Hugging Face
dataset id, or ``github:<owner>/<repo>`` for benchmarks released on GitHub), the pinned revision (a
commit), the data file inside the repository, the split, and the row → :class:`Task` mapping with
the subset rule the papers apply:

=============== ======================================= =========================================
benchmark       source                                  subset / mapping
=============== ======================================= =========================================
mmsearch        CaraJ/MMSearch ``end2end.parquet``      end-to-end set (rows without a query
                                                        image load text-only); F1 scorer
mmsearch_plus   Cie1/MMSearch-Plus                      published decryption (canary
                                                        ``MMSearch-Plus``); every image of a row
simplevqa       m-a-p/SimpleVQA (test)                  all rows, ``metadata["language"]`` kept
browsecomp_vl   Osilly/Vision-DeepResearch-Eval         level 1 + level 2 parquet, images packed
vdr_bench       Osilly/Vision-DeepResearch-Eval         ``testmini500_v1.parquet``
livevqa         github:fumingyang2004/LIVEVQA           News benchmark; level 1 (multiple choice)
                                                        and level 2 (multi-hop) as separate tasks
fvqa            lmms-lab/FVQA ``fvqa_test.parquet``     MMSearch-R1 schema (test split)
mmbrowsecomp    github:MMBrowseComp/MM-BrowseComp       decrypted in memory with each row's canary
=============== ======================================= =========================================

Subsets that a paper applies (POINTS-Seeker §4.1: image-containing MMSearch, single-image
MMSearch-Plus, English SimpleVQA) are not part of the release: they belong to an evaluation
protocol (:mod:`kit.eval.protocols`, ``protocol=``), applied only when that protocol is selected.

Revisions: a commit verified from here is pinned in the registry. Where it could not be verified
from this machine (the Hub is unreachable here) the registry holds ``revision=None``; loading from
the network then takes the repository's default branch, warns (:class:`UnpinnedRevisionWarning`)
and records the commit it resolved to (``LoadResult.info["resolved_commit"]``, which notebook 06
writes into the run manifest), so the run can be repeated with ``revision="<that sha>"``. Hugging
Face releases are fetched as a snapshot of the registry's data files into the Hugging Face cache
(:func:`kit.hub.download.download`; ``HF_HUB_OFFLINE=1`` serves the cached snapshot of the default
branch); GitHub releases resolve ``HEAD`` to a commit through the GitHub API first. Loading from a
local copy (``local_path``: a folder laid out like the repository, or a ``datasets.save_to_disk``
folder) needs no revision; tests use that and the in-process Hub (:mod:`kit.hub.localhub`).

``datasets`` is imported lazily (it is in the optional ``train`` extra).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.eval.crypto import DecryptionError, decrypt_text
from kit.eval.hub_rows import BadRow, convert_rows
from kit.eval.loaders import (
    BenchmarkError,
    LoadResult,
    _answers,
    _aslist,
    check_limit,
    check_missing_images,
    default_image_dir,
    image_to_bytes,
    json_line,
    livevqa_tasks,
    mmbrowsecomp_task,
    mmsearch_r1_task,
    row_id,
    save_image_bytes,
    sha256_text,
)
from kit.eval.loaders.common import checked_image
from kit.eval.protocols import EvalProtocol, get_protocol
from kit.harness.episode import Task

MMSEARCH_PLUS_CANARY = "MMSearch-Plus"  # the authors' hint: the repository name without the user


class UnknownBenchmarkError(KeyError):
    """A benchmark name that is not in the registry (the message lists the known names)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unknown benchmark"


class UnpinnedRevisionWarning(UserWarning):
    """A benchmark loaded from the network at its default branch (no pinned or given revision);
    the message and ``LoadResult.info["resolved_commit"]`` name the commit it resolved to."""


_COMMIT = re.compile(r"^[0-9a-f]{40}$")

#: repositories served by the preflight's local stand-in Hub (:func:`kit.eval.hub_standin.install_standin_hub`
#: fills it): their loads are marked ``stand_in`` so a synthetic snapshot never passes for the real release
STANDIN_REPOS: set[str] = set()
STANDIN_SOURCE = "local stand-in hub (format-true, not the real release)"


@dataclass
class RowContext:
    """What a row converter may use: where to put image bytes and how to fetch a referenced image."""

    benchmark: str
    image_dir: Path
    resolve_image: Callable[[str], Path]
    file: str = ""
    missing_images: str = "problem"  # MM-BrowseComp: "text_only" loads rows with absent images, labelled


def _id(row: dict[str, Any], key: str, i: int) -> str:
    """The row's ``key`` when the release has that column (null or empty there: a missing-id
    problem), else the row number."""
    return row_id(row, key) if key in row else str(i)


@dataclass(frozen=True)
class HubSource:
    """One registry entry (see the module table)."""

    key: str
    repo: str  # "owner/name" on the Hugging Face Hub, or "github:owner/name"
    revision: str | None
    data_files: tuple[str, ...]  # patterns inside the repository
    split: str
    builder: str  # "parquet" | "json"
    convert: Callable[[dict[str, Any], int, RowContext], list[Task]]
    subset: str
    licence: str
    images_root: str | None = None  # GitHub releases: folder of the images the rows reference by name
    sensitive: bool = False
    notes: str = ""
    revision_evidence: str = ""

    @property
    def on_github(self) -> bool:
        """The benchmark is released in a GitHub repository (read through raw file URLs)."""
        return self.repo.startswith("github:")


# ------------------------------------------------------------------------------------------ converters
def _one_image(value: Any, ctx: RowContext, prefix: str) -> str:
    data = image_to_bytes(value)
    if data is None:
        raise BenchmarkError("empty image cell")
    return str(save_image_bytes(data, ctx.image_dir, prefix))


def _mmsearch(row: dict[str, Any], i: int, ctx: RowContext) -> list[Task]:
    # rows without a query image load text-only; POINTS-Seeker's protocol filters them out
    q = str(row.get("query") or "").strip()
    if not q:
        raise BenchmarkError("empty query")
    answers = _answers([row.get("gt_answer")], _aslist(row.get("alternative_gt_answers")))
    if not answers:
        raise BenchmarkError("no gt_answer")
    images = [] if row.get("query_image") is None else [_one_image(row["query_image"], ctx, "mmsearch")]
    return [Task(id=f"mmsearch_{_id(row, 'sample_id', i)}", question=q, input_images=images,
                 answers=answers, source="mmsearch",
                 metadata={"rule_mode": "f1", "area": row.get("area"), "subfield": row.get("subfield"),
                           "timestamp": str(row.get("timestamp") or "")})]


def _mmsearch_plus(row: dict[str, Any], i: int, ctx: RowContext) -> list[Task]:
    n_img = row.get("num_images")
    imgs = [row.get(f"img_{k}") for k in range(1, 6) if row.get(f"img_{k}") is not None]
    if n_img is not None and n_img != len(imgs):
        raise BenchmarkError(f"num_images is {n_img} but {len(imgs)} image cells are filled")
    if not imgs:
        raise BenchmarkError("no image cell is filled")
    try:
        question = decrypt_text(row["question"], MMSEARCH_PLUS_CANARY).strip()
        answers = _answers([decrypt_text(a, MMSEARCH_PLUS_CANARY) for a in _aslist(row.get("answer")) if a], [])
    except (KeyError, DecryptionError) as e:
        raise BenchmarkError(f"decryption failed: {e}") from e
    if not question or not answers:
        raise BenchmarkError("empty question or answer after decryption")
    images = [_one_image(im, ctx, "mmsearch_plus") for im in imgs]
    return [Task(id=f"mmsearch_plus_{_id(row, 'id', i)}", question=question, input_images=images,
                 answers=answers, source="mmsearch_plus",
                 metadata={"sensitive": True, "category": row.get("category"), "difficulty": row.get("difficulty"),
                           "subtask": row.get("subtask"), "question_sha256": sha256_text(question),
                           "answer_sha256": sha256_text(answers[0])})]


def _simplevqa(row: dict[str, Any], i: int, ctx: RowContext) -> list[Task]:
    q = str(row.get("question") or "").strip()
    answers = _answers(_aslist(row.get("answer")), [])
    if not q or not answers:
        raise BenchmarkError("empty question or answer")
    return [Task(id=f"simplevqa_{_id(row, 'data_id', i)}", question=q, input_images=[_one_image(row.get("image"), ctx, "simplevqa")],
                 answers=answers, source="simplevqa",
                 metadata={k: row.get(k) for k in ("language", "original_category", "vqa_category", "source", "atomic_fact")})]


def _packed(prefix: str) -> Callable[[dict[str, Any], int, RowContext], list[Task]]:
    """Rows of the Vision-DeepResearch evaluation parquet: ``question``, ``answer``, and the images
    packed as a JSON list of ``{"filename", "data": base64}`` in ``image_packed`` (or ``images``)."""

    def convert(row: dict[str, Any], i: int, ctx: RowContext) -> list[Task]:
        q = str(row.get("question") or "").strip()
        answers = _answers(_aslist(row.get("answer")), [])
        if not q or not answers:
            raise BenchmarkError("empty question or answer")
        packed = row.get("image_packed")
        items = json.loads(packed) if isinstance(packed, str) and packed.strip() else _aslist(packed)
        images = []
        for k, it in enumerate(items):
            data = image_to_bytes(it.get("data") if isinstance(it, dict) else it)
            if data is None:
                raise BenchmarkError(f"packed image {k} has no data")
            path = str(save_image_bytes(data, ctx.image_dir, prefix))
            fname = it.get("filename") if isinstance(it, dict) else None
            if fname:  # questions may name their image file: point them at the registered name instead
                q = q.replace(fname, f"user_image_{k + 1}")
            images.append(path)
        if not items:
            for im in _aslist(row.get("images")):
                images.append(_one_image(im, ctx, prefix))
        stem = Path(ctx.file).stem.removeprefix(prefix + "_")
        tid = _id(row, "id", i) if "id" in row else _id(row, "idx", i) if "idx" in row else f"{stem}_{i}"
        return [Task(id=f"{prefix}_{tid}", question=q, input_images=images, answers=answers, source=prefix,
                     metadata={"file": Path(ctx.file).name, "row": i})]

    return convert


def _livevqa(row: dict[str, Any], i: int, ctx: RowContext) -> list[Task]:
    return livevqa_tasks(row, ctx.resolve_image(row.get("img_path") or ""), source="livevqa_news")


def _fvqa(row: dict[str, Any], i: int, ctx: RowContext) -> list[Task]:
    return [mmsearch_r1_task(row, i, prefix="fvqa", image_dir=ctx.image_dir, source="fvqa")]


def _mmbrowsecomp(row: dict[str, Any], i: int, ctx: RowContext) -> list[Task]:
    return [mmbrowsecomp_task(row, ctx.resolve_image, source="mm_browsecomp", missing_images=ctx.missing_images)]


HUB_SOURCES: dict[str, HubSource] = {s.key: s for s in [
    HubSource("mmsearch", "CaraJ/MMSearch", None, ("end2end.parquet",), "end2end", "parquet", _mmsearch,
              "end-to-end set (protocol points_seeker: rows with a query image)", "see the dataset card (CaraJ/MMSearch)",
              notes="file name from a public processing script that keeps only end2end.parquet; not verified here"),
    HubSource("mmsearch_plus", "Cie1/MMSearch-Plus", None, ("data/train-*.parquet",), "train", "parquet",
              _mmsearch_plus, "all rows (protocol points_seeker: num_images == 1); question/answer decrypted in memory",
              "see the dataset card",
              sensitive=True, notes="fields from the authors' decryption script and the lmms-eval task card; the "
                                    "file pattern is the standard push_to_hub layout, not verified here"),
    HubSource("simplevqa", "m-a-p/SimpleVQA", None, ("data/test-*.parquet",), "test", "parquet", _simplevqa,
              "all rows (protocol points_seeker: language == EN)", "Apache-2.0 (dataset card)",
              notes="fields from public loaders (image as a base64 string); file pattern not verified here"),
    HubSource("browsecomp_vl", "Osilly/Vision-DeepResearch-Eval", None,
              ("data/bcvl_level1_199.parquet", "data/bcvl_level2_200.parquet"), "test", "parquet", _packed("bcvl"),
              "all 399 items (level 1 + level 2)", "see the dataset card",
              notes="BrowseComp-VL as repackaged with embedded images by the Vision-DeepResearch evaluation release"),
    HubSource("vdr_bench", "Osilly/Vision-DeepResearch-Eval", None, ("data/testmini500_v1.parquet",), "test", "parquet",
              _packed("vdr"), "testmini (500 items)", "see the dataset card",
              notes="file names and packed-image format from the Vision-DeepResearch evaluation README and unpacker"),
    HubSource("livevqa", "github:fumingyang2004/LIVEVQA", "a7c88d18560cd01ed1709962743f6c0e5244d145",
              ("liveVQA_benchmarks/News/benchmark.json",), "test", "json", _livevqa,
              "News benchmark (350 items); level 1 and level 2 as separate tasks", "MIT (GitHub repository)",
              images_root="liveVQA_benchmarks/News/News_imgs",
              revision_evidence="git log of the repository: 2025-10-11 'update the benchmark'"),
    HubSource("fvqa", "lmms-lab/FVQA", "bb4a4ff4c9c3fd0382d11f5d7fccd66d0b8428b5", ("fvqa_test.parquet",), "test",
              "parquet", _fvqa, "test split (1,800 items)", "Apache-2.0",
              notes="fvqa_train.parquet is documented; the test file name follows it, not verified here",
              revision_evidence="revision recorded by two independent public MMSearch-R1 reproductions"),
    HubSource("mmbrowsecomp", "github:MMBrowseComp/MM-BrowseComp", "5f5298cd0e84ac511ad1cda3840cef73773661cc",
              ("data/MMBrowseComp.jsonl",), "test", "json", _mmbrowsecomp,
              "all 224 items; question, answer and checklist decrypted in memory", "MIT", images_root="MMBC_images",
              sensitive=True, revision_evidence="git log of the repository: 2025-08-20 'release data & eval scripts'"),
]}


def hub_names() -> list[str]:
    """Registered benchmark names."""
    return sorted(HUB_SOURCES)


def get_source(name: str) -> HubSource:
    """Registry entry of ``name``.

    Raises:
        UnknownBenchmarkError: ``name`` is not registered.
    """
    try:
        return HUB_SOURCES[name]
    except KeyError:
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}; registered: {hub_names()}") from None


# ------------------------------------------------------------------------------------------ loading
def _github_raw(repo: str, revision: str, path: str) -> str:
    """Raw file URL of ``path`` at ``revision`` (a commit: :func:`_github_commit` resolves others)."""
    return f"https://raw.githubusercontent.com/{repo.split(':', 1)[1]}/{revision}/{path}"


def _download(url: str, timeout_s: float = 60.0, headers: dict[str, str] | None = None) -> bytes:
    import httpx

    try:
        r = httpx.get(url, timeout=timeout_s, follow_redirects=True, headers=headers)
    except httpx.HTTPError as e:
        raise BenchmarkError(f"download of {url} failed: {type(e).__name__}: {e}") from e
    if r.status_code != 200:
        raise BenchmarkError(f"download of {url} failed: HTTP {r.status_code}")
    return r.content


def _github_commit(repo: str, ref: str | None) -> str:
    """The commit sha that ``ref`` (a branch, tag or sha; ``None``: the default branch, ``HEAD``)
    names in a GitHub repository, through the REST API's ``commits/<ref>`` with the plain-sha media type.

    Raises:
        BenchmarkError: the API is unreachable or answers something that is not a commit sha.
    """
    if ref is not None and _COMMIT.match(ref):
        return ref
    name = repo.split(":", 1)[1]
    body = _download(f"https://api.github.com/repos/{name}/commits/{ref or 'HEAD'}",
                     headers={"Accept": "application/vnd.github.sha"}).decode("utf-8", "replace").strip()
    if not _COMMIT.match(body):
        raise BenchmarkError(f"{repo}: the GitHub API did not resolve {ref or 'HEAD'!r} to a commit: {body[:80]!r}")
    return body


def _hub_snapshot(src: HubSource, revision: str | None, cache_dir: str | Path | None) -> tuple[Path, str]:
    """``(snapshot folder, commit sha)`` of the registry's data files of a Hugging Face dataset at
    ``revision`` (``None``: the default branch), fetched into the Hugging Face cache.

    Raises:
        BenchmarkError: the repository or revision does not exist, or the Hub is unreachable /
            ``HF_HUB_OFFLINE`` is set without a cached snapshot.
    """
    from huggingface_hub.constants import DEFAULT_REVISION

    from kit.hub.download import DownloadError, download

    try:
        got = download(src.repo, revision=revision or DEFAULT_REVISION, repo_type="dataset", cache_dir=cache_dir,
                       allow_patterns=list(src.data_files))
    except DownloadError as e:
        raise BenchmarkError(f"{src.key}: {e}") from e
    if not _COMMIT.match(got.commit):  # the cache names snapshot folders by commit; anything else is not reproducible
        raise BenchmarkError(f"{src.key}: {src.repo}@{revision} did not resolve to a commit (got {got.commit!r})")
    return got.path, got.commit


def _is_saved_dataset(folder: Path) -> bool:
    return (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file()


def json_rows(data: bytes, fname: str) -> list[tuple[str, int, dict | BadRow]]:
    """``[(where, row index, row or BadRow)]`` of a JSON file (a list of rows, or one row) or, when
    the whole file is not one JSON document, of JSON lines read one by one (``where`` is
    ``"<file>:<line>"``, 1-based, as the local loaders say), so one damaged line is one problem."""
    try:
        whole = json_line(data)
    except ValueError:
        whole = None
    else:
        rows = whole if isinstance(whole, list) else [whole]
        return [(f"{fname}:{i}", i, r) for i, r in enumerate(rows)]
    out: list[tuple[str, int, dict | BadRow]] = []
    for line, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            row: Any = json_line(raw)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, too deep
            row = BadRow(f"{type(e).__name__}: {str(e)[:300]}")
        out.append((f"{fname}:{line}", len(out), row))
    return out


def _load(what: str, fn: Callable[[], Any]) -> Any:
    """Run a ``datasets`` loader; any failure (damaged file, not cached offline, bad split) is one
    :class:`BenchmarkError` naming ``what``, never a traceback from inside ``datasets``."""
    try:
        return fn()
    except BenchmarkError:
        raise
    except Exception as e:  # datasets / pyarrow raise many unrelated types (DatasetGenerationError, ArrowInvalid ...)
        raise BenchmarkError(f"{what}: cannot be loaded: {type(e).__name__}: {str(e)[:300]}") from e


def _rows(src: HubSource, local_path: Path | None, revision: str | None, cache_dir: str | Path | None = None
          ) -> tuple[list[tuple[str, str, int, dict | BadRow]], dict]:
    """``[(file name, where, row index, row)]`` and provenance. JSON releases are read by the kit
    (:func:`json_rows`: a bad line is a :class:`BadRow`); parquet through ``datasets``. A Hugging
    Face release is read from its snapshot (:func:`_hub_snapshot`); ``info["resolved_commit"]`` is
    the commit the rows come from (``None`` for a local copy).

    Raises:
        BenchmarkError: missing ``datasets`` or data files, or a file that cannot be loaded at all.
    """
    if local_path is None and not src.on_github:
        snap, commit = _hub_snapshot(src, revision, cache_dir)
        snap_rows, snap_info = _rows(src, snap, None)
        del snap_info["local_path"]
        # the snapshot's place is in info["files"]; the commit is what a rerun needs
        return snap_rows, {**snap_info, "revision": revision, "resolved_commit": commit}
    info: dict[str, Any] = {"repo": src.repo, "revision": revision, "subset": src.subset, "licence": src.licence,
                            "resolved_commit": None}
    out: list[tuple[str, str, int, dict | BadRow]] = []

    def dataset(what: str, fn: Callable[[], Any]) -> list[tuple[str, str, int, dict | BadRow]]:
        ds = _load(what, fn)
        return [(Path(what).name, f"{Path(what).name}:{i}", i, r) for i, r in enumerate(ds)]

    def need_datasets():
        try:
            import datasets
        except ImportError as e:
            raise BenchmarkError("loading benchmarks by hub name needs `datasets`: pip install 'mmsearch-kit[eval]'") from e
        return datasets

    if local_path is not None:
        info["local_path"] = str(local_path)
        if _is_saved_dataset(local_path):
            datasets = need_datasets()

            def from_disk():
                ds = datasets.load_from_disk(str(local_path))
                if isinstance(ds, datasets.DatasetDict):
                    ds = ds[src.split] if src.split in ds else next(iter(ds.values()))
                return ds
            return dataset(str(local_path), from_disk), {**info, "format": "save_to_disk"}
        files = []
        for pattern in src.data_files:
            found = sorted(local_path.glob(pattern))
            if not found:
                raise BenchmarkError(f"{local_path} has no file matching {pattern!r} (laid out like {src.repo})")
            files += found
        for f in files:
            if src.builder == "json":
                out += [(f.name, w, i, r) for w, i, r in json_rows(f.read_bytes(), f.name)]
            else:
                datasets = need_datasets()
                out += dataset(str(f), lambda f=f: datasets.load_dataset(  # type: ignore[misc]  # noqa: B023 (called at once)
                    src.builder, data_files={src.split: str(f)}, split=src.split))
        from kit.manifest import file_sha256

        info["files"] = [{"path": str(f), "sha256": file_sha256(f)} for f in files]
        return out, info
    commit = _github_commit(src.repo, revision)  # every file of one run from one commit
    info["resolved_commit"] = commit
    for pattern in src.data_files:
        name = Path(pattern).name
        if src.builder == "json":
            out += [(name, w, i, r) for w, i, r in json_rows(_download(_github_raw(src.repo, commit, pattern)), name)]
        else:
            datasets = need_datasets()
            out += dataset(pattern, lambda p=pattern: datasets.load_dataset(  # type: ignore[misc]  # noqa: B023
                src.builder, data_files={src.split: _github_raw(src.repo, commit, p)}, split=src.split))
    return out, info


def _image_resolver(name: str, src: HubSource, local: Path | None, img_dir: Path,
                    commit: list[str | None]) -> Callable[[str], Path]:
    """``resolve(ref)``: the local path of a row's image reference (decoded once; fetched at ``commit[0]``)."""

    def resolve(ref: str) -> Path:
        fname = Path(str(ref).split("?", 1)[0]).name
        if not fname:
            raise BenchmarkError("empty image reference")
        if local is not None:
            base = local / src.images_root if src.images_root else local
            p = base / fname
            if not p.is_file():
                raise BenchmarkError(f"image {fname!r} not found in {base}")
            return checked_image(p, img_dir / "upright").path  # decoded once: an undecodable image is the row's problem
        cached = img_dir / "by_name" / fname
        if not cached.is_file():
            if not src.images_root or not commit[0]:
                raise BenchmarkError(f"image {fname!r}: {name} has no image folder to fetch from")
            data = _download(_github_raw(src.repo, commit[0], f"{src.images_root}/{fname}"))
            return save_image_bytes(data, img_dir, Path(fname).stem)  # decoded (and stored upright) there
        return checked_image(cached, img_dir / "upright").path

    return resolve


def _revision_warning(name: str, src: HubSource, info: dict[str, Any], local: Path | None, unpinned: bool) -> str | None:
    """The warning a stand-in or unpinned load carries (also set in ``info``), else None."""
    if local is None and src.repo in STANDIN_REPOS:  # a preflight's synthetic release, not the Hub's
        info.update({"stand_in": True, "source": STANDIN_SOURCE})
        msg = (f"{name}: loaded {src.repo} from the {STANDIN_SOURCE} at its commit {info['resolved_commit']} "
               "(synthetic rows; the commit is the stand-in's, not a revision of the real release)")
    elif unpinned:
        msg = (f"{name}: no revision of {src.repo} is pinned in the registry or given; loaded its default branch at "
               f"commit {info['resolved_commit']} (recorded as resolved_commit; pass revision='{info['resolved_commit']}' "
               "to repeat this run)")
    else:
        return None
    info["warnings"] = [msg]
    return msg


def load_hub_benchmark(name: str, *, local_path: str | Path | None = None, revision: str | None = None,
                       limit: int | None = None, image_dir: str | Path | None = None, strict: bool = False,
                       missing_images: str = "problem", protocol: str | EvalProtocol | None = None,
                       cache_dir: str | Path | None = None) -> LoadResult:
    """Load benchmark ``name`` from its published repository at the pinned revision (the default
    branch when none is pinned or given, with a warning), or from a local copy laid out like
    that repository.

    Args:
        local_path: a folder laid out like the repository (the registry's ``data_files`` patterns
            and, for GitHub releases, ``images_root``), or a ``datasets.save_to_disk`` folder.
        revision: overrides the pinned revision (a commit sha, branch or tag; recorded with the
            commit it resolved to).
        limit: stop after this many tasks (counted after the protocol's filters).
        image_dir: where image bytes are materialized (default: the kit cache).
        missing_images: ``"problem"`` (default: a row whose image is absent is a per-row problem)
            or ``"text_only"`` (MM-BrowseComp: such a row loads without images, labelled
            ``metadata["text_only"]``; see :func:`kit.eval.loaders.mmbrowsecomp_task`).
        protocol: evaluation protocol (name or :class:`kit.eval.protocols.EvalProtocol`; default
            ``weagent_mmsearch``, no filters) whose filters select the subset; rows left out are
            counted in ``LoadResult.filtered`` with the protocol and filter in the reason.
        cache_dir: Hugging Face cache for the snapshot (default: the standard cache).

    Missing and duplicate ids are per-row problems with reasons; the other rows load. Every image
    is decoded once at load (:func:`kit.eval.loaders.checked_image`, :func:`kit.eval.loaders.save_image_bytes`):
    an undecodable one (a text file named ``.png``, a truncated JPEG, an empty file) is its row's problem.

    Returns:
        :class:`LoadResult` with tasks, per-row problems and rows filtered by the protocol;
        ``info`` holds ``revision`` (asked), ``pinned_revision``, ``resolved_commit`` (read),
        ``unpinned``, ``protocol`` and, for remote loads, the data files with their sha256.

    Warns:
        UnpinnedRevisionWarning: remote loading without a pinned or given revision.

    Raises:
        UnknownBenchmarkError: ``name`` is not registered.
        kit.eval.protocols.ProtocolError: an unknown protocol name.
        BenchmarkError: missing ``datasets``, missing data files, an unreachable Hub without a
            cached snapshot, or ``strict`` and a bad row.
    """
    src = get_source(name)
    check_missing_images(missing_images)
    check_limit(limit)
    proto = get_protocol(protocol)
    local = Path(local_path) if local_path is not None else None
    rev = revision or src.revision
    img_dir = Path(image_dir) if image_dir else default_image_dir() / name
    commit: list[str | None] = [rev]  # set to the resolved commit once the rows are read
    resolve = _image_resolver(name, src, local, img_dir, commit)
    rows, info = _rows(src, local, rev, cache_dir)
    commit[0] = info["resolved_commit"] or rev
    unpinned = local is None and rev is None
    info.update({"pinned_revision": src.revision, "unpinned": unpinned, "protocol": proto.describe(name),
                 "revision_evidence": src.revision_evidence, "notes": src.notes})
    msg = _revision_warning(name, src, info, local, unpinned)
    if msg is not None:
        warnings.warn(msg, UnpinnedRevisionWarning, stacklevel=2)
    res = LoadResult(name, info=info)
    convert_rows(res, rows, src.convert, proto.exclude,
                 lambda fname: RowContext(name, img_dir, resolve, fname, missing_images), strict=strict, limit=limit)
    return res
