"""Regression of the local web's results on the shared archives (issue 17, "Done when"): the top-10
of a fixed query set (web search, text-to-image search, reverse image search) must stay what the
kit returned before the index build became streaming and its stores on-disk.

The expected results live in ``tests/fixtures/zim_regression.json``; they were recorded from the
code before that change with ``ZIM_REGRESSION_RECORD=1 pytest tests/test_zim_regression.py``.
Recorded again at index format 15, whose archives are ordered newest edition first (ZIM ``Date``),
no longer by the sha256 of their bytes: two web searches changed, each by two pages of equal score
from the 2022 and the 2023 archive (one swap in the top 10, one at the 10th place).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kit.web.zim import LocalZimWeb

FIXTURE = Path(__file__).parent / "fixtures" / "zim_regression.json"

TEXT_QUERIES = [
    "Ray Charles", "soul music pianist", "Georgia on My Mind", "blind musician Albany",
    "Atlantic Records 1950s", "Quincy Jones", "Mars planet", "Albert Einstein relativity",
    "World War II", "photosynthesis plants", "Paris capitale de la France", "ville de Warrington",
    "satellite héliosynchrone", "the", "heroin addiction arrest", "Grammy Award best R&B",
]
IMAGE_QUERIES = [
    "Ray Charles portrait", "piano", "Warrington Town Hall", "map", "flag", "Earth from space",
    "statue", "concert stage",
]
#: Reverse image queries: every k-th indexed image of each archive (by index order), by path.
REVERSE_PER_ARCHIVE = 2


def _results(web: LocalZimWeb) -> dict:
    out: dict = {"text": {}, "image": {}, "reverse": {}}
    for q in TEXT_QUERIES:
        out["text"][q] = [f"{s}/{p}" for s, p, _ in web.rank_sync(q, 10)]
    for q in IMAGE_QUERIES:
        out["image"][q] = [[h.image_url, h.page_url] for h in web.image_search_sync(q, 10)]
    for arch in sorted(web.archives, key=lambda a: a.stem):
        n = len(arch.images)
        for i in sorted({0, n // 2, n - 1} if n else set())[:REVERSE_PER_ARCHIVE + 1]:
            path = arch.images[i].path
            data = arch.read(arch.entry(path))[1]
            res = web.reverse_image_search_sync(data, 10)
            out["reverse"][f"{arch.stem}/{path}"] = {
                "pages": [h.url for h in res.pages],
                "thumbnails": [h.image_url for h in res.thumbnails],
                "knowledge_graph": res.knowledge_graph.url if res.knowledge_graph else None,
            }
    return out


@pytest.fixture(scope="module")
def web(shared_zim_web) -> LocalZimWeb:
    return shared_zim_web


def test_top_results_equal_the_recorded_ones(web):
    got = _results(web)
    if os.environ.get("ZIM_REGRESSION_RECORD") == "1":
        FIXTURE.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n",
                           encoding="utf-8")
    want = json.loads(FIXTURE.read_text(encoding="utf-8"))
    assert sum(len(v) for v in want.values()) >= 30
    assert sum(1 for v in want["text"].values() if v) >= 12  # the set is not trivially empty
    for kind in ("text", "image", "reverse"):
        for q, expected in want[kind].items():
            assert got[kind][q] == expected, (kind, q)
