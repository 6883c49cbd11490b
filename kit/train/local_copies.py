"""Tiny, format-true local copies of mixture sources in hub layout (offline preflight, CI).

:func:`write_local_copy` publishes, for every hub source of a :class:`~kit.train.mixtures.Mixture`, a
few synthetic rows in that source's real file layout and column names (``data_files`` of the spec)
into a :class:`kit.hub.localhub.LocalHub`; :func:`kit.train.mixtures.sample_mixture` then loads them
by hub id through the same download + ``datasets`` path it uses against the Hub. The rows are
written here, not fetched: they check layouts and code paths, not data.
"""

from __future__ import annotations

import fnmatch
import io
import json
import zipfile
from typing import Any

from kit.train.mixtures import Mixture, MixtureError, Source
from kit.train.seeding import VQA_COLUMNS


def _png(colour: tuple[int, int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (32, 28), colour).save(buf, format="PNG")
    return buf.getvalue()


def _first_file(pattern: str, name: str) -> str:
    """A concrete path matching the spec's glob (``Qwen3/*.parquet`` -> ``Qwen3/train-00000-of-00001.parquet``)."""
    path = pattern.replace("**", name).replace("*", name)
    if not fnmatch.fnmatch(path, pattern):
        raise MixtureError(f"cannot make a file name for pattern {pattern!r}")
    return path


def _messages_rows(n: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"What is {i} + {i}?", "info": {"source": "local", "reference_answer": str(2 * i)}},
                          {"role": "assistant", "content": f"<think>{i} + {i} = {2 * i}</think> <answer>{2 * i}</answer>",
                           "info": {"source": "local"}}]} for i in range(n)]


def _toucan_rows(n: int) -> list[dict[str, Any]]:
    tools = json.dumps([{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}])
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What time is it?"},
            {"role": "assistant", "content": "<think>Call the clock.</think>"},
            {"role": "tool_call", "content": json.dumps({"name": "get_time", "arguments": {}})},
            {"role": "tool_response", "content": "12:00"},
            {"role": "assistant", "content": "It is 12:00."}]
    return [{"uuid": f"u{i}", "subset_name": "single-turn-original", "messages": json.dumps(msgs), "question": "What time is it?",
             "available_tools": tools, "target_tools": "get_time", "question_quality_assessment": "{}",
             "response_quality_assessment": "{}", "metadata": "{}"} for i in range(n)]


def _files_for(src: Source, n: int) -> dict[str, bytes]:
    if not src.data_files:
        raise MixtureError(f"{src.name}: a local copy needs the spec's data_files")
    files: dict[str, bytes] = {}
    if src.format == "vqa":
        cols = {**VQA_COLUMNS, **(src.columns or {})}
        images = {f"images/{src.name.split('/')[-1]}_{i}.png": _png((40 * i % 255, 90, 160)) for i in range(n)}
        rows = [{"id": str(i), cols["image"]: img, cols["question"]: f"<image>How many squares are in the image {i}?",
                 cols["answer"]: str(i)} for i, img in enumerate(images)]
        archive = next((p for p in src.extra_files or [] if p.endswith(".zip")), None)
        if archive:  # images inside an archive, as VisualWebInstruct ships them
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as zf:
                for k, v in images.items():
                    zf.writestr(k, v)
            files[archive] = buf.getvalue()
        else:
            folder = (src.extra_files or ["images/**"])[0].split("*")[0].rstrip("/") or "images"
            rows = [{**r, cols["image"]: r[cols["image"]].replace("images/", folder + "/", 1)} for r in rows]
            files.update({k.replace("images/", folder + "/", 1): v for k, v in images.items()})
    elif src.format == "toucan":
        rows = _toucan_rows(n)
    else:
        rows = _messages_rows(n)
    for pattern in src.data_files:
        path = _first_file(pattern, "train-00000-of-00001" if pattern.endswith(".parquet") else "local")
        if path.endswith(".parquet"):
            import pyarrow as pa
            import pyarrow.parquet as pq

            buf = io.BytesIO()
            pq.write_table(pa.Table.from_pylist(rows), buf)
            files[path] = buf.getvalue()
        elif path.endswith(".json"):
            files[path] = json.dumps(rows).encode()
        else:  # .jsonl (a "*.jsonl*" glob gets a plain .jsonl file)
            path = path if path.endswith(".jsonl") else path.split(".jsonl")[0] + ".jsonl"
            files[path] = "".join(json.dumps(r) + "\n" for r in rows).encode()
    return files


def write_local_copy(hub, mix: Mixture, rows: int = 3, token: str = "local") -> dict[str, str]:
    """Publish ``rows`` synthetic rows per hub source of ``mix`` into ``hub`` (a LocalHub); returns
    ``{repo_id: commit}``. Local ``.jsonl`` sources are skipped.

    Raises:
        MixtureError: a hub source without ``data_files``.
    """
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token=token)
    out = {}
    with hub.installed():
        for src in mix.sources:
            if src.name.endswith(".jsonl"):
                continue
            files = _files_for(src, rows)
            api.create_repo(src.name, repo_type="dataset", exist_ok=True)
            info = api.create_commit(src.name, repo_type="dataset", commit_message="local copy",
                                     operations=[CommitOperationAdd(k, v) for k, v in files.items()])
            out[src.name] = info.oid
    return out
