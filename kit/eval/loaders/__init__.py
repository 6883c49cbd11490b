"""Benchmark loaders into :class:`kit.harness.episode.Task` (local files; published releases by
name are in :mod:`kit.eval.hub_loaders`).

One module per benchmark family: :mod:`~kit.eval.loaders.fvqa` (MMSearch-R1 evaluation folders),
:mod:`~kit.eval.loaders.mmbrowsecomp` (published encrypted JSONL, decrypted in memory),
:mod:`~kit.eval.loaders.livevqa` (GitHub JSON; level 1 and level 2 as separate tasks),
:mod:`~kit.eval.loaders.mmsearch_r1` (the MMSearch-R1 parquet schema: InfoSeek, FVQA's hub release),
:mod:`~kit.eval.loaders.vistarget_jsonl` (VisTarget-style JSONL); what they share (``LoadResult``,
the row-id rule, image bytes) is in :mod:`~kit.eval.loaders.common`. Everything is re-exported here.
"""

from kit.eval.loaders.common import (
                                     MAX_IMAGE_PIXELS,
                                     MISSING_IMAGES,
                                     TEXT_ONLY_LABEL,
                                     BenchmarkError,
                                     LoadResult,
                                     _answers,
                                     _aslist,
                                     _file_info,
                                     check_limit,
                                     check_missing_images,
                                     default_image_dir,
                                     image_to_bytes,
                                     json_line,
                                     resolve_by_name,
                                     row_id,
                                     save_image_bytes,
                                     sha256_text,
)
from kit.eval.loaders.fvqa import _answer_list, load_fvqa
from kit.eval.loaders.livevqa import livevqa_tasks, load_livevqa, parse_options
from kit.eval.loaders.mmbrowsecomp import MMBC_QUESTION_MARKER, load_mm_browsecomp, mmbrowsecomp_task
from kit.eval.loaders.mmsearch_r1 import load_infoseek, load_mmsearch_r1_parquet, mmsearch_r1_task, read_parquet_rows
from kit.eval.loaders.vistarget_jsonl import load_vistarget_jsonl

__all__ = [
    "MAX_IMAGE_PIXELS", "MISSING_IMAGES", "MMBC_QUESTION_MARKER", "TEXT_ONLY_LABEL", "BenchmarkError", "LoadResult",
    "check_limit", "check_missing_images", "default_image_dir", "image_to_bytes", "json_line", "livevqa_tasks",
    "load_fvqa", "load_infoseek", "load_livevqa", "load_mm_browsecomp", "load_mmsearch_r1_parquet",
    "load_vistarget_jsonl", "mmbrowsecomp_task", "mmsearch_r1_task", "parse_options", "read_parquet_rows",
    "resolve_by_name", "row_id", "save_image_bytes", "sha256_text",
]
# The private helpers _answers, _aslist, _file_info, _answer_list stay importable from here: kit.eval.hub_loaders
# and kit.eval.benchmarks import them.
