"""Benchmark: language-aware text folding of the local web (issue 27, part 5) before and after, in
one run, on the shared archives.

Not a test: prints a table and a final ``BENCH {json}`` line; exits 1 when a target is missed, 2
without the shared data. Run from the project root:

    .venv/bin/python benchmarks/bench_zim_folding.py [--repeat 3]

The same archives are indexed twice into temporary index roots: *before* with format 8's analyzer
(``text_analyzer(language, folding=False)``: no Greek/Cyrillic folding, empty ``exact`` field) and
*after* with the kit's (:func:`kit.web.zim.text.fold_text`, exact forms). Measured:

* index size: the tantivy text and image indexes of the collection (bytes), after / before;
* search latency: ``search_sync`` (ranking + snippets) over title and phrase queries sampled from
  the archives plus every query pair below, each query's best of ``--repeat`` runs, summed, after /
  before (interleaved, so machine load hits both alike);
* query pairs found: every Greek, Cyrillic and accented-Latin word (4+ letters) of the archives'
  text, queried unaccented (``ἱπποπόταμος`` -> ``ιπποποταμος``) and upper-case (``ΙΠΠΟΠΌΤΑΜΟΣ``);
  a pair is found when an article holding the word is in the top 10.

Targets: index size and latency ratios at most 1.10; after finds at least as many pairs as before
in every script, and every Greek and Cyrillic pair.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchlib import Summary  # noqa: E402

from kit.paths import zim_paths  # noqa: E402
from kit.web.zim import LocalZimWeb  # noqa: E402
from kit.web.zim import index as index_mod  # noqa: E402
from kit.web.zim import text as text_mod  # noqa: E402

_WORD = re.compile(r"\w*[^\x00-\x7f]\w*")


def _script(word: str) -> str | None:
    for ch in word:
        if ord(ch) > 127 and ch.isalpha():
            name = unicodedata.name(ch, "").split(" ", 1)[0]
            return {"GREEK": "greek", "CYRILLIC": "cyrillic", "LATIN": "latin"}.get(name)
    return None


def _strip(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.combining(c))


def build(paths: list[Path], root: Path, folding: bool) -> tuple[LocalZimWeb, int, float]:
    """The web over ``paths`` indexed under ``root`` (analyzer with or without folding), the size of
    its collection's tantivy indexes and the collection build time."""
    original = index_mod.text_analyzer
    index_mod.text_analyzer = lambda language: original(language, folding=folding)  # type: ignore[assignment]
    try:
        web = LocalZimWeb(paths, index_dir=root)
        t0 = time.perf_counter()
        web.ensure_ready()
        seconds = time.perf_counter() - t0
    finally:
        index_mod.text_analyzer = original
    if not folding:  # queries analyzed like format 8 too
        for li in web.collection.indexes.values():
            li.analyzer = text_mod.text_analyzer(li.language, folding=False)
        for arch in web.archives:
            arch.analyzer = text_mod.text_analyzer(arch.analyzer.language, folding=False)
    size = sum(f.stat().st_size for d in web.collection.dir.iterdir() if d.is_dir()
               for f in d.rglob("*") if f.is_file())
    return web, size, seconds


def corpus_words(web: LocalZimWeb) -> tuple[dict[str, dict[str, set[str]]], list[str]]:
    """{script: {word: urls of the articles holding it}} and 2-3-word phrases / titles."""
    words: dict[str, dict[str, set[str]]] = {"greek": {}, "cyrillic": {}, "latin": {}}
    phrases: list[str] = []
    rng = random.Random(0)
    for arch in web.archives:
        # full bodies (the store keeps prefixes of long ones: issue 32)
        for _doc, path, title, body in arch.iter_full_texts():
            url = arch.url(path)
            for m in _WORD.finditer(f"{title}\n{body}"):
                w = m.group()
                script = _script(w)
                if script and len(w) >= 4 and w.isalpha():
                    words[script].setdefault(w, set()).add(url)
            if rng.random() < 0.3:
                toks = body.split()
                if len(toks) > 3:
                    i = rng.randrange(len(toks) - 3)
                    phrases.append(" ".join(toks[i:i + rng.choice((2, 3))]))
                phrases.append(title)
    return words, phrases


def pairs_found(web: LocalZimWeb, words: dict[str, dict[str, set[str]]]) -> dict[str, tuple[int, int]]:
    out = {}
    for script, table in words.items():
        found = total = 0
        for word, urls in sorted(table.items()):
            for variant in {_strip(word).lower(), word.upper()} - {word}:
                total += 1
                found += bool(urls & {h.url for h in web.search_sync(variant, 10)})
        out[script] = (found, total)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    summary = Summary("bench_zim_folding")
    paths = zim_paths()
    if not paths:
        return summary.skip("no shared ZIM archives (../shared/data/zim)")
    tmp = Path(tempfile.mkdtemp(prefix="bench_zim_folding_"))
    try:
        before, size_b, build_b = build(paths, tmp / "before", folding=False)
        after, size_a, build_a = build(paths, tmp / "after", folding=True)
        words, phrases = corpus_words(after)
        queries = phrases[:300] + [v for table in words.values() for w in sorted(table)
                                   for v in (_strip(w).lower(), w.upper(), w)]
        best_b = [float("inf")] * len(queries)
        best_a = [float("inf")] * len(queries)
        for _ in range(args.repeat):
            for i, q in enumerate(queries):
                for web, best in ((before, best_b), (after, best_a)):
                    t0 = time.perf_counter()
                    web.search_sync(q, 10)
                    best[i] = min(best[i], time.perf_counter() - t0)
        found_b, found_a = pairs_found(before, words), pairs_found(after, words)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'':28}{'before':>12}{'after':>12}")
    print(f"{'tantivy indexes (bytes)':28}{size_b:>12,}{size_a:>12,}")
    print(f"{'collection build (s)':28}{build_b:>12.2f}{build_a:>12.2f}")
    print(f"{'search, sum of best (ms)':28}{1e3 * sum(best_b):>12.1f}{1e3 * sum(best_a):>12.1f}"
          f"   ({len(queries)} queries)")
    for script in found_b:
        (fb, n), (fa, _) = found_b[script], found_a[script]
        print(f"{script + ' pairs found':28}{f'{fb}/{n}':>12}{f'{fa}/{n}':>12}")
    summary.target("index_size_ratio", size_a / size_b, "<=", 1.10)
    summary.target("search_latency_ratio", sum(best_a) / sum(best_b), "<=", 1.10)
    summary.figure("index_bytes", {"before": size_b, "after": size_a})
    summary.figure("search_ms", {"before": 1e3 * sum(best_b), "after": 1e3 * sum(best_a),
                                 "queries": len(queries)})
    for script in found_b:
        (fb, n), (fa, _) = found_b[script], found_a[script]
        summary.figure(f"{script}_pairs", {"before": fb, "after": fa, "total": n})
        summary.check(f"{script}_pairs_not_fewer", fa - fb, fa >= fb, "after >= before")
        if script != "latin":
            summary.check(f"{script}_pairs_all_found", fa, fa == n, f"== {n}")
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
