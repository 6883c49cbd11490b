"""MM-BrowseComp's tool calls go to a private tool cache unless the caller names one (issue 27 part 4):
``run_evaluation`` without ``private_backend`` must not send the words of decrypted questions through
the ordinary, shared tool cache. Real published rows of the shared MM-BrowseComp sample, decrypted in
memory; the tool calls are web searches with the question's own words."""

from __future__ import annotations

import json

from conftest import MemoryBackend

from kit.eval.configs import make_configs
from kit.eval.runner import PRIVATE_TOOL_CACHE, default_private_dir, load_benchmarks, run_evaluation
from kit.policy.scripted import ScriptedPolicy
from kit.web.cache import CachedBackend, ToolCache


def search_the_question(messages, tools):
    """First turn: a web search with the first words of the (decrypted) question; then an answer."""
    if tools and not any(m.role == "tool" for m in messages):
        words = " ".join(next(m for m in messages if m.role == "user").text().split()[:8])
        return '<tool_call>' + json.dumps({"name": "web_search", "arguments": {"query": words}}) + '</tool_call>'
    return "<response>no idea</response>"


def _question_words(lr) -> list[str]:
    return [" ".join(t.question.split()[:8]) for t in lr.tasks]


def _cached_requests(path) -> str:
    import sqlite3

    db = sqlite3.connect(path)
    try:
        return "\n".join(r[0] for r in db.execute("SELECT request FROM entries"))
    finally:
        db.close()


async def test_default_private_cache_keeps_decrypted_words_out_of_the_shared_cache(tmp_path, data_dir):
    lr = (await load_benchmarks(["mmbrowsecomp"], limit=2, data_dir=data_dir))["mmbrowsecomp"]
    assert len(lr.tasks) == 2
    shared = ToolCache(tmp_path / "out" / "cache.sqlite")
    private = tmp_path / "private"
    await run_evaluation({"mmbrowsecomp": lr}, make_configs("smoke", ["harness"]),
                         policy=ScriptedPolicy(search_the_question), backend=CachedBackend(MemoryBackend(), shared),
                         out_dir=tmp_path / "out", repeats=1, private_dir=private)
    assert len(shared) == 0  # nothing of the sensitive benchmark reached the ordinary cache
    priv = private / PRIVATE_TOOL_CACHE
    assert priv.is_file()
    requests = _cached_requests(priv)
    from kit.web.cache import normalize_query

    assert all(normalize_query(w) in requests for w in _question_words(lr))
    blob = (tmp_path / "out" / "cache.sqlite").read_bytes()
    assert all(w.encode() not in blob for w in _question_words(lr))


async def test_default_private_cache_lives_under_default_private_dir(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("MMSEARCH_KIT_CACHE", str(tmp_path / "kitcache"))
    lr = (await load_benchmarks(["mmbrowsecomp"], limit=1, data_dir=data_dir))["mmbrowsecomp"]
    mem = MemoryBackend()  # a plain backend, no cache of its own: the sensitive calls are still cached privately
    out = tmp_path / "out"
    await run_evaluation({"mmbrowsecomp": lr}, make_configs("smoke", ["harness"]),
                         policy=ScriptedPolicy(search_the_question), backend=mem, out_dir=out, repeats=1)
    priv = default_private_dir(out) / PRIVATE_TOOL_CACHE
    assert priv.is_file() and str(priv).startswith(str(tmp_path / "kitcache"))
    assert len(ToolCache(priv, mode="readonly")) == 1 and [c[0] for c in mem.calls] == ["search"]


async def test_an_explicit_private_backend_is_used_as_given(tmp_path, data_dir):
    lr = (await load_benchmarks(["mmbrowsecomp"], limit=1, data_dir=data_dir))["mmbrowsecomp"]
    mine = ToolCache(tmp_path / "mine.sqlite")
    private = tmp_path / "private"
    await run_evaluation({"mmbrowsecomp": lr}, make_configs("smoke", ["harness"]),
                         policy=ScriptedPolicy(search_the_question), backend=MemoryBackend(),
                         private_backend=CachedBackend(MemoryBackend(), mine), out_dir=tmp_path / "out", repeats=1,
                         private_dir=private)
    assert len(mine) == 1 and not (private / PRIVATE_TOOL_CACHE).exists()


async def test_ordinary_benchmarks_keep_the_shared_cache(tmp_path, data_dir):
    lr = (await load_benchmarks(["fvqa"], limit=1, data_dir=data_dir))["fvqa"]
    shared = ToolCache(tmp_path / "cache.sqlite")
    private = tmp_path / "private"
    await run_evaluation({"fvqa": lr}, make_configs("smoke", ["harness"]), policy=ScriptedPolicy(search_the_question),
                         backend=CachedBackend(MemoryBackend(), shared), out_dir=tmp_path / "out", repeats=1,
                         private_dir=private)
    assert len(shared) == 1 and not (private / PRIVATE_TOOL_CACHE).exists()
