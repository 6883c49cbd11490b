"""Reading open-source releases for the adapters: a Hub dataset id (from the local ``datasets``
cache when the Hub is unreachable) or local files (jsonl / json / parquet), row by row.

Hub ids of the named sources are on their :class:`~kit.data.normalize.chat.ChatSource` specs
(``METIS``, ``OPENSEARCH_VL``, ``REDSEARCHER``). Rows come as plain dicts; a decoded image column
arrives as PIL images, which :class:`~kit.data.normalize.chat.ChatAdapter` re-encodes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kit.data.normalize.base import NormalizeError

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow"}


def source_rows(hub_id: str | None = None, *, data_files: str | Path | Sequence[str | Path] | None = None,
                split: str = "train", subset: str | None = None, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Rows of a release: ``data_files`` (local files of one format) or ``hub_id`` (+ ``subset``).

    Raises:
        NormalizeError: (``source_unavailable``) nothing to read, mixed or unknown file formats, or
            the dataset cannot be loaded (not cached while offline, unknown split); ``ValueError``
            for ``limit`` < 0.
    """
    from datasets import load_dataset

    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    try:
        if data_files is not None:
            files = [data_files] if isinstance(data_files, (str, Path)) else list(data_files)
            kinds = {_BUILDERS.get(Path(f).suffix.lower()) for f in files}
            if not files or len(kinds) != 1 or None in kinds:
                raise NormalizeError("source_unavailable", f"data_files must share one of {sorted(_BUILDERS)}: {files}")
            ds = load_dataset(kinds.pop(), data_files=[str(f) for f in files], split="train")
        elif hub_id:
            ds = load_dataset(hub_id, subset, split=split)
        else:
            raise NormalizeError("source_unavailable", "give a hub id or data_files")
    except NormalizeError:
        raise
    except Exception as e:  # hub unreachable, not cached, bad split, unreadable file: one clear error
        raise NormalizeError("source_unavailable", f"{hub_id or data_files}: {type(e).__name__}: {e}") from e
    for i, row in enumerate(ds):
        if limit is not None and i >= limit:
            return
        yield row
