"""Ranking (``LocalZimWeb.rank_sync``) against a raw tantivy index of the same texts, in one process.

Issue 32, part 3: ranking returns its hits' paths from the collection's heads table instead of
decompressing record blocks, so it runs at raw tantivy's speed. Target: ranking p50 <= 1.3x raw
tantivy's p50 (both measured in this run, query by query interleaved, so machine load hits both
alike). Also measured in the same run, as figures: the former ranking (the same hits named by
decoding their record blocks, the store's block cache emptied before each query, as for a cold
hit) and its ratio, and that both name the same hits for every query.

Run from the project root:

    .venv/bin/python benchmarks/bench_zim_rank.py [--articles 20000] [--work /tmp/kit_zim_rank]
        [--zim OUT.zim] [--queries 300] [--seed 0]

``--zim`` benchmarks an existing archive; otherwise one of ``--articles`` articles is generated
(:mod:`gen_zim_archive`, reused across runs) in ``--work``. The raw index is the one of
``bench_zim_scale.py``: title + body with ``en_stem``, an OR query parsed by tantivy, top 5, each
hit's stored id read. Exit status: 0 target met, 1 missed, 2 not measured (no shared archives).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import Summary  # noqa: E402

from kit.paths import zim_paths  # noqa: E402

TARGET_RATIO = 1.3
TOP = 5


def raw_index(web, out: Path):
    """(searcher, index) of a raw tantivy index of ``web``'s indexed texts in ``out`` (rebuilt)."""
    import shutil

    import tantivy

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    sb = tantivy.SchemaBuilder()
    sb.add_integer_field("id", stored=True)
    sb.add_text_field("title", tokenizer_name="en_stem")
    sb.add_text_field("body", tokenizer_name="en_stem")
    index = tantivy.Index(sb.build(), path=str(out))
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    for n, (_stem, _lang, _path, title, text) in enumerate(web.corpus()):
        writer.add_document(tantivy.Document(id=n, title=title, body=text))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return index.searcher(), index


def rank_by_blocks(web, query: str, num: int) -> list[tuple[str, str, float]]:
    """The ranking as it was before issue 32: hits named by decoding their record blocks."""
    ranked = web._rank(web._check_query(query), num)
    records = web._hit_records(ranked)
    members = web.collection.members
    return [(members[key >> 40].stem, records[key >> 40][key & ((1 << 40) - 1)][0], -s)
            for s, key, _, _ in ranked]


def measure(web, searcher, index, queries: list[str]) -> dict[str, list[float]]:
    """Per-query seconds of ranking, raw tantivy and the block-decoding ranking, interleaved."""
    lat: dict[str, list[float]] = {"rank": [], "raw": [], "blocks": []}
    stores = [a.store for a in web.archives]
    for q in queries:
        clean = " ".join(re.findall(r"\w+", q)) or "the"
        t = time.perf_counter()
        hits = searcher.search(index.parse_query(clean, ["title", "body"]), TOP).hits
        for _, addr in hits:
            searcher.doc(addr)["id"]
        lat["raw"].append(time.perf_counter() - t)
        t = time.perf_counter()
        web.rank_sync(q, TOP)
        lat["rank"].append(time.perf_counter() - t)
        for s in stores:
            s._blocks.clear()
        t = time.perf_counter()
        rank_by_blocks(web, q, TOP)
        lat["blocks"].append(time.perf_counter() - t)
    return lat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--articles", type=int, default=20000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/kit_zim_rank"))
    ap.add_argument("--zim", type=Path, default=None, help="an existing archive (no generation)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    summary = Summary("bench_zim_rank")
    if args.zim is None and not [p for p in zim_paths() if p.name.startswith("wikipedia_en_")]:
        return summary.skip("no shared ZIM archives")
    from bench_search import make_queries
    from gen_zim_archive import generate

    from kit.web.zim import LocalZimWeb

    zim = args.zim
    if zim is None:
        zim = args.work / f"gen_en_{args.articles}_s{args.seed}.zim"
        if not zim.exists():
            zim.parent.mkdir(parents=True, exist_ok=True)
            generate(zim, args.articles, args.seed, 0.3)
    web = LocalZimWeb(zim, index_dir=args.work / f"index_{zim.stem}")
    t0 = time.perf_counter()
    web.ensure_ready()
    n = sum(len(a.articles) for a in web.archives)
    print(f"{zim.name}: {n} articles, index ready in {time.perf_counter() - t0:.1f} s", flush=True)
    searcher, index = raw_index(web, args.work / f"raw_{zim.stem}")
    queries = [q for q, _ in make_queries(list(web.corpus()), args.queries, args.seed)]
    same = sum(web.rank_sync(q, TOP) == rank_by_blocks(web, q, TOP) for q in queries)
    measure(web, searcher, index, queries[:20])  # warm-up: caches, page cache
    lat = measure(web, searcher, index, queries)
    p50 = {k: statistics.median(v) * 1e3 for k, v in lat.items()}
    ratio, before = p50["rank"] / p50["raw"], p50["blocks"] / p50["raw"]
    print(f"p50 ms: ranking {p50['rank']:.3f}, raw tantivy {p50['raw']:.3f}, "
          f"block-decoding ranking {p50['blocks']:.3f}; ratio {ratio:.2f} (before {before:.2f}); "
          f"same hits on {same}/{len(queries)} queries", flush=True)
    summary.target(f"rank_vs_raw_p50_ratio_{n}", ratio, "<=", TARGET_RATIO)
    summary.target(f"same_hits_as_block_ranking_{n}", same, "==", len(queries))
    summary.figure(f"rank_p50_ms_{n}", p50["rank"])
    summary.figure(f"raw_tantivy_p50_ms_{n}", p50["raw"])
    summary.figure(f"block_rank_p50_ms_{n}", p50["blocks"])
    summary.figure(f"block_rank_vs_raw_p50_ratio_{n}", before)
    summary.figure(f"rank_vs_raw_mean_ratio_{n}", statistics.fmean(lat["rank"]) / statistics.fmean(lat["raw"]))
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
