"""A format-true local stand-in for the Hugging Face Hub's benchmark releases, for preflights and tests.

The Hub is unreachable here, so a preflight (``--preflight``, :mod:`kit.profiles`) cannot download MMSearch,
MMSearch-Plus, SimpleVQA, BrowseComp-VL or VDR-Bench. :func:`install_standin_hub` publishes a few synthetic
rows of each in the file layout and columns its loader reads (:data:`kit.eval.hub_loaders.HUB_SOURCES`;
MMSearch-Plus rows encrypted with its canary like the release) to the kit's in-process Hub
(:class:`kit.hub.localhub.LocalHub`, huggingface_hub's own client over the Hub's HTTP API) and routes
``huggingface_hub`` to it, so the benchmarks load through the real hub path (snapshot download at the
default branch, the resolved commit recorded, marked ``"stand_in": true`` with ``source``
:data:`kit.eval.hub_loaders.STANDIN_SOURCE`; commit ids are content-derived, so two runs agree). The rows
are synthetic ("Who made item 0?"): results on them mean nothing and the run says ``preflight``.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

__all__ = ["STANDIN_BENCHMARKS", "install_standin_hub", "standin_release_files"]

#: the unpinned hub benchmarks (default branch + resolved commit) the stand-in serves
STANDIN_BENCHMARKS = ("mmsearch", "mmsearch_plus", "simplevqa", "browsecomp_vl", "vdr_bench")
_TOKEN = "hf_preflightStandInToken0"  # the local Hub asks writes for a token, like the Hub


def _png(color=(200, 30, 30), size=(64, 48)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _parquet(rows: dict, features=None) -> bytes:
    import datasets

    buf = io.BytesIO()
    datasets.Dataset.from_dict(rows, features=features).to_parquet(buf)
    return buf.getvalue()


def standin_release_files(name: str, n: int) -> dict[str, bytes]:
    """``{path in repo: bytes}`` of a synthetic release of ``n`` rows of benchmark ``name`` in the layout
    its hub loader reads.

    Raises:
        ValueError: ``name`` is not one of :data:`STANDIN_BENCHMARKS`.
    """
    import datasets

    from kit.eval.crypto import encrypt_text
    from kit.eval.hub_loaders import HUB_SOURCES, MMSEARCH_PLUS_CANARY

    if name not in STANDIN_BENCHMARKS:
        raise ValueError(f"no stand-in release for {name!r}; available: {STANDIN_BENCHMARKS}")
    img = {"bytes": _png(), "path": None}
    if name == "mmsearch":
        feats = datasets.Features({"sample_id": datasets.Value("string"), "query": datasets.Value("string"),
                                   "query_image": datasets.Image(), "gt_answer": datasets.Value("string")})
        return {"end2end.parquet": _parquet({"sample_id": [str(i) for i in range(n)],
                                             "query": [f"Who made item {i}?" for i in range(n)],
                                             "query_image": [img] * n, "gt_answer": [f"maker {i}" for i in range(n)]}, feats)}
    if name == "mmsearch_plus":
        feats = datasets.Features({"question": datasets.Value("string"), "answer": datasets.Sequence(datasets.Value("string")),
                                   "num_images": datasets.Value("int32"), "img_1": datasets.Image()})
        return {"data/train-00000-of-00001.parquet": _parquet(
            {"question": [encrypt_text(f"Where is place {i}?", MMSEARCH_PLUS_CANARY) for i in range(n)],
             "answer": [[encrypt_text(f"city {i}", MMSEARCH_PLUS_CANARY)] for i in range(n)],
             "num_images": [1] * n, "img_1": [img] * n}, feats)}
    if name == "simplevqa":
        b64 = base64.b64encode(_png()).decode()
        return {"data/test-00000-of-00001.parquet": _parquet(
            {"data_id": list(range(n)), "image": [b64] * n, "question": [f"What bird {i}?" for i in range(n)],
             "answer": [f"bird {i}" for i in range(n)], "language": ["EN"] * n})}
    packed = json.dumps([{"filename": "a.jpg", "data": base64.b64encode(_png()).decode()}])
    rows = {"question": [f"Q{i} about a.jpg" for i in range(n)], "answer": [f"A{i}" for i in range(n)],
            "image_packed": [packed] * n}
    return {f: _parquet(rows) for f in HUB_SOURCES[name].data_files}  # BC-VL: level 1 and level 2 files


def install_standin_hub(root: str | Path, *, n: int = 2, names=STANDIN_BENCHMARKS):
    """Publish ``n`` synthetic rows of each of ``names`` to a :class:`~kit.hub.localhub.LocalHub` under
    ``root`` and route every ``huggingface_hub`` request of this process to it, with its snapshot cache
    under ``root`` (for the process's life: a preflight kernel). Returns the hub."""
    import huggingface_hub
    import huggingface_hub.constants as hf_constants
    from huggingface_hub import CommitOperationAdd, HfApi

    from kit.eval import hub_loaders
    from kit.eval.hub_loaders import HUB_SOURCES
    from kit.hub.localhub import LocalHub

    # a fixed clock: commit ids derive from the files only, so two preflights record the same stand-in commits
    hub = LocalHub(Path(root), clock=lambda: 0.0)
    # a cache of its own: synthetic snapshots under the real repository ids must never reach the user's
    # Hugging Face cache (an offline run would later read them as the real benchmark)
    hf_constants.HF_HUB_CACHE = str(Path(root) / "hf_cache")
    huggingface_hub.set_client_factory(hub.client_factory)
    api = HfApi(token=_TOKEN)
    files_by_repo: dict[str, dict[str, bytes]] = {}
    for name in names:
        files_by_repo.setdefault(HUB_SOURCES[name].repo, {}).update(standin_release_files(name, n))
    for repo, files in files_by_repo.items():  # BC-VL and VDR-Bench share one repository
        api.create_repo(repo, repo_type="dataset", exist_ok=True)
        api.create_commit(repo, repo_type="dataset", commit_message="preflight stand-in release",
                          operations=[CommitOperationAdd(p, b) for p, b in files.items()])
    hub_loaders.STANDIN_REPOS.update(files_by_repo)  # their loads say stand_in (LoadResult.info)
    return hub
