"""The rank-bm25 baseline of ``benchmarks/bench_search.py`` (also used by bench_zim_scale): the
same BM25 as the kit's tantivy (its IDF) by default, rank-bm25's Okapi IDF on request, and
top-5 agreement that counts every document tied at the baseline's cut (issue 17, "Measure")."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_search import Baseline, make_queries, top_k_agreement  # noqa: E402

from kit.paths import zim_paths  # noqa: E402
from kit.web.zim import LocalZimWeb  # noqa: E402


def test_agreement_counts_ties_at_the_cut():
    # Baseline: a=3, b=2, then c, d, e, f tied at 1 (its top-3 by document order: a, b, c).
    matched = {"a": 3.0, "b": 2.0, "c": 1.0, "d": 1.0, "e": 1.0, "f": 1.0}
    assert top_k_agreement(["a", "b", "f"], matched, 3) == (2 / 3, 1.0)
    assert top_k_agreement(["a", "x", "c"], matched, 3) == (2 / 3, 2 / 3)
    # Fewer matches than k: compared over those.
    assert top_k_agreement(["a"], {"a": 1.0}, 5) == (1.0, 1.0)
    assert top_k_agreement([], {"a": 1.0, "b": 1.0}, 5) == (0.0, 0.0)
    with pytest.raises(ValueError, match="matches nothing"):
        top_k_agreement(["a"], {}, 5)


@pytest.fixture(scope="module")
def web(data_dir) -> LocalZimWeb:
    paths = zim_paths(data_dir)
    if not paths:
        pytest.skip("shared ZIM archives missing")
    w = LocalZimWeb(paths)
    w.ensure_ready()
    return w


def test_baseline_uses_tantivys_idf_and_keeps_okapis(web):
    corpus = list(web.corpus())
    base = Baseline(web, corpus, k1=1.2, b=0.75)
    _, model, _, _ = max(base.groups, key=lambda g: g[1].corpus_size)
    n_docs = model.corpus_size
    df: dict[str, int] = {}
    for doc in model.doc_freqs:
        for w in doc:
            df[w] = df.get(w, 0) + 1
    common = max(df, key=df.get)  # in more than half the documents: Okapi floors its idf
    assert df[common] > n_docs / 2
    lucene, okapi = model.idf_tables["lucene"], model.idf_tables["okapi"]
    assert lucene[common] == pytest.approx(math.log(1 + (n_docs - df[common] + 0.5) / (df[common] + 0.5)))
    assert okapi[common] == pytest.approx(0.25 * model.average_idf)  # rank-bm25's floor
    assert lucene[common] < okapi[common]
    with pytest.raises(ValueError, match="idf must be"):
        Baseline(web, corpus[:5], k1=1.2, b=0.75, idf="bm25+")
    # The kit ranks like the baseline with its own IDF (the benchmark's target, >= 0.85).
    queries = [q for q, _ in make_queries(corpus, 40, 0)]
    agree = {"lucene": [], "okapi": []}
    for q in queries:
        kit = [f"{s}/{p}" for s, p, _ in web.rank_sync(q, 5)]
        for variant in agree:
            _, matched = base.top(q, 5, idf=variant)
            if matched:
                agree[variant].append(top_k_agreement(kit, matched)[1])
    assert sum(agree["lucene"]) / len(agree["lucene"]) >= 0.9
    assert len(agree["lucene"]) == len(agree["okapi"]) >= 35
