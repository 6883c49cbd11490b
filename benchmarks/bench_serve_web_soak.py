"""serve-web soak (issue 28 part 5): 256 concurrent clients for a bounded time, in the request shapes peers send.

The service (``python -m kit.cli serve-web``, ``--rate 0``, a fresh tool cache) runs in its own process on a
loopback port. For ``--seconds`` each of ``--clients`` clients (``httpx.AsyncClient``, one connection each)
sends requests back to back, drawn per client from a fixed seed: Serper search 60 % (a JSON post, a GET with
the query string, a form post, LangChain's query-string post with no body, and page 2 of the same query),
image search 20 %, the Jina reader 20 % (``GET /r/<link>``, the root form ``GET /<link>``, ``POST /`` with a
JSON body and ``Accept: application/json``) over article titles of the archive. Baseline, same run and same
duration: the same draw against the same backend in-process (``CachedBackend(LocalZimWeb)`` on a fresh
cache, the same number of asyncio tasks).

Reported: requests/s, p50 and p99 of each, and the service's rate as a ratio of the in-process call rate.
Target: 0 errors (any non-200 answer, malformed answer, timeout or connection failure) on both sides; the
exit status is non-zero otherwise. The ratio is a figure: on a shared 2-core machine client and server share
the cores, so it measures what HTTP + JSON cost here, not a bound of the service.

Usage: python benchmarks/bench_serve_web_soak.py [--seconds 5] [--clients 256] [--zim PATH ...]
(CI-safe default 5 s; the documented full run is ``--seconds 60``, docs/serve_web.md "Throughput").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve_web import KEY, _pct, start_server  # noqa: E402
from benchlib import Summary  # noqa: E402

from kit.paths import shared_data_dir  # noqa: E402

SEARCH_FORMS = ("json", "get", "form", "query", "page2")
READER_FORMS = ("r", "root", "post")


def _draw(rng: random.Random, titles: list[str]) -> tuple[str, str, str]:
    """(operation, form, title) of one request."""
    r, t = rng.random(), rng.choice(titles)
    if r < 0.6:
        return "search", rng.choice(SEARCH_FORMS), t
    if r < 0.8:
        return "images", "json", t
    return "fetch", rng.choice(READER_FORMS), t


async def _soak(seconds: float, clients: int, titles: list[str], call) -> tuple[list[float], int, list[str], float]:
    """Every client sends back to back until ``seconds`` have passed; (latencies s, errors, first errors, wall s)."""
    lat: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    deadline = start + seconds

    async def client(i: int) -> None:
        rng = random.Random(i)
        while time.perf_counter() < deadline:
            op, form, title = _draw(rng, titles)
            t0 = time.perf_counter()
            try:
                await call(i, op, form, title)
            except Exception as e:  # noqa: BLE001 - every failure is an error of the run, counted
                errors.append(f"{op}/{form} {title!r}: {type(e).__name__}: {e}"[:300])
                continue
            lat.append(time.perf_counter() - t0)

    await asyncio.gather(*(client(i) for i in range(clients)))
    return lat, len(errors), errors[:5], time.perf_counter() - start


async def in_process(zims: list[Path], cache: Path, seconds: float, clients: int, titles: list[str],
                     links: dict[str, str]):
    from kit.web import open_local_web, open_tool_cache
    from kit.web.cache import CachedBackend

    web = open_local_web(zims)
    web.ensure_ready()
    backend = CachedBackend(web, open_tool_cache(cache, "readwrite"))

    async def call(i, op, form, title):
        if op == "search":
            hits = await backend.search(title, 10 if form == "page2" else 5)
            assert hits
        elif op == "images":
            await backend.image_search(title, 5)
        else:
            assert (await backend.fetch(links[title])).markdown

    return await _soak(seconds, clients, titles, call)


async def over_http(base: str, seconds: float, clients: int, titles: list[str], links: dict[str, str]):
    pool = [httpx.AsyncClient(base_url=base, headers={"X-API-KEY": KEY}, timeout=60.0,
                              limits=httpx.Limits(max_connections=1)) for _ in range(clients)]

    def link(title: str) -> str:
        return f"{base}/zim/{links[title][len('zim://'):]}"

    async def call(i, op, form, title):
        c = pool[i]
        if op == "search":
            params = {"q": title, "num": "5"}
            r = await {"json": lambda: c.post("/search", json={"q": title, "num": 5}),
                       "get": lambda: c.get("/search", params=params),
                       "form": lambda: c.post("/search", data=params),
                       "query": lambda: c.post("/search", params=params, headers={"Content-Type": "application/json"}),
                       "page2": lambda: c.post("/search", json={"q": title, "num": 5, "page": 2})}[form]()
            r.raise_for_status()
            assert "organic" in r.json()
        elif op == "images":
            r = await c.post("/images", json={"q": title, "num": 5})
            r.raise_for_status()
            assert "images" in r.json()
        elif form == "post":
            r = await c.post("/", json={"url": link(title)}, headers={"Accept": "application/json"})
            r.raise_for_status()
            assert r.json()["data"]["content"]
        else:
            r = await c.get(f"/r/{link(title)}" if form == "r" else f"/{link(title)}")
            r.raise_for_status()
            assert "Markdown Content:" in r.text

    try:
        return await _soak(seconds, clients, titles, call)
    finally:
        await asyncio.gather(*(c.aclose() for c in pool))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="soak time of each side (full run: 60)")
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("--zim", nargs="+", default=None, help="archives (default the shared maxi Ray Charles ZIM)")
    args = ap.parse_args()
    summary = Summary("bench_serve_web_soak")
    data = shared_data_dir()
    zims = [Path(z) for z in args.zim] if args.zim else (
        [data / "zim" / "wikipedia_en_ray_charles_maxi_2023-09.zim"] if data else [])
    if not zims or not all(z.is_file() for z in zims):
        return summary.skip("no ZIM archive (shared data folder not found)")
    from kit.web import open_local_web

    web = open_local_web(zims)
    titles = sorted({t for *_, t, _ in web.corpus(text=False)})[:200]
    links = {t: hits[0].url for t in titles if (hits := web.search_sync(t, 1))}  # the page each title reads
    titles = [t for t in titles if t in links]
    with tempfile.TemporaryDirectory() as tmp:
        base_lat, base_err, base_errs, base_wall = asyncio.run(
            in_process(zims, Path(tmp) / "inproc.sqlite", args.seconds, args.clients, titles, links))
        proc, base = start_server(zims, Path(tmp) / "served.sqlite")
        try:
            lat, n_err, errs, wall = asyncio.run(over_http(base, args.seconds, args.clients, titles, links))
        finally:
            proc.terminate()
            proc.wait(10)
    rates = {}
    for label, xs, n_bad, w in (("in_process", base_lat, base_err, base_wall), ("service", lat, n_err, wall)):
        rates[label] = len(xs) / w
        p50, p99 = _pct(xs, 50) * 1e3, _pct(xs, 99) * 1e3
        print(f"{label:>10}: {len(xs)} ok, {n_bad} errors in {w:.1f} s  {rates[label]:.0f} req/s  "
              f"p50 {p50:.1f} ms  p99 {p99:.1f} ms")
        summary.figure(f"{label}_requests", len(xs))
        summary.figure(f"{label}_req_per_s", rates[label])
        summary.figure(f"{label}_p50_ms", p50)
        summary.figure(f"{label}_p99_ms", p99)
    ratio = rates["service"] / rates["in_process"] if rates["in_process"] else float("nan")
    print(f"service rate / in-process call rate: {ratio:.2f}")
    for e in base_errs + errs:
        print("error:", e)
    summary.figure("clients", args.clients)
    summary.figure("seconds", args.seconds)
    summary.figure("rate_ratio", ratio)
    summary.target("in_process_errors", base_err, "==", 0)
    summary.target("service_errors", n_err, "==", 0)
    summary.target("service_answered", len(lat), ">", 0)
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
