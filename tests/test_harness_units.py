"""Units of the harness: registry, parsing, repair, duplicate suppression, loop guard, cache,
runner resume and transcripts."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import multiprocessing as mp

import pytest
from PIL import Image

from kit.harness.episode import EpisodeRecord, Task
from kit.harness.errors import ImageError, ToolError
from kit.harness.parsing import cited_images, decode_json_object, parse_turn
from kit.harness.recovery import DuplicateSuppressor, LoopGuard, canonical_arguments, repair_call, resolve_tool_name
from kit.harness.registry import EvidenceRegistry, decode_image
from kit.harness.tools import TOOL_SPECS, tool_specs
from kit.types import BackendError
from kit.web.cache import CachedBackend, ToolCache, cache_key
from tests.conftest import MemoryBackend, png_bytes


# ------------------------------------------------------------------------------------------- registry
def test_registry_names_refs_and_provenance(tmp_path):
    reg = EvidenceRegistry(tmp_path)
    a = reg.register_bytes(png_bytes(), "user_image")
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), "blue").save(buf, format="JPEG")
    b = reg.register_bytes(buf.getvalue(), "search_image", tool="web_search_for_image", turn=2, source_url="u")
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), "green").save(buf, format="WEBP")
    c = reg.register_bytes(buf.getvalue(), "search_image")
    assert (a.filename, b.filename, c.filename) == ("user_image_1.png", "search_image_1.jpg", "search_image_2.png")
    assert c.mime == "image/png" and b.mime == "image/jpeg" and b.turn == 2 and b.source_url == "u"
    for name in ["search_image_1.jpg", "search_image_1", "<search_image_1>", "./search_image_1.jpg", "<IMG: search_image_1.jpg>"]:
        assert reg.resolve(name) is b
    assert reg.read("search_image_1.jpg")[:2] == b"\xff\xd8"


@pytest.mark.parametrize("ref", ["/etc/passwd", "../x.png", "a/../../x.png", "~/x.png", "nope.png", "", "C:\\a.png"])
def test_registry_rejects_bad_refs(tmp_path, ref):
    reg = EvidenceRegistry(tmp_path)
    reg.register_bytes(png_bytes(), "user_image")
    with pytest.raises(ImageError) as e:
        reg.resolve(ref)
    assert e.value.code == "bad_image_ref"


def test_decompression_bomb_and_corrupt_images_refused(tmp_path):
    buf = io.BytesIO()
    Image.new("1", (20000, 20000)).save(buf, format="PNG")  # 400 MP, tiny file
    with pytest.raises(ImageError) as e:
        decode_image(buf.getvalue(), max_pixels=64_000_000)
    assert e.value.code == "image_too_large"
    good = png_bytes(size=(300, 300))
    with pytest.raises(ImageError) as e:
        decode_image(good[: len(good) // 2], max_pixels=10**8)
    assert e.value.code == "bad_image"
    with pytest.raises(ImageError):
        decode_image(b"", max_pixels=10)
    reg = EvidenceRegistry(tmp_path)
    with pytest.raises(ImageError):
        reg.register_bytes(b"GIF89a\x00\x00", "search_image")
    assert len(reg) == 0 and not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------- parsing
def test_parse_think_call_response_and_citations():
    p = parse_turn('<think>plan</think><tool_call>{"name": "web_search", "arguments": {"query": "x"}}</tool_call>')
    assert p.think == "plan" and p.calls[0].name == "web_search" and p.calls[0].arguments == {"query": "x"}
    p = parse_turn("<think>a</think><response>Paris <IMG: search_image_2.jpg> and <IMG: user_image_1.png></response>")
    assert p.response_complete and cited_images(p.response) == ["search_image_2.jpg", "user_image_1.png"]
    p = parse_turn("<response>open")
    assert p.response == "open" and not p.response_complete


@pytest.mark.parametrize("text,code", [
    ('{"a": 1} trailing', "trailing_text"), ("hello", "non_json"), ("", "non_json"), ("[1, 2]", "non_json"),
])
def test_decode_json_errors(text, code):
    assert decode_json_object(text)[1] == code


def test_decode_json_repairs():
    obj, err, _, repairs = decode_json_object("```json\n{'query': 'x', }\n```")
    assert obj == {"query": "x"} and err is None and "json_serialization_repaired" in repairs


def test_double_encoded_arguments():
    p = parse_turn('<tool_call>{"name": "web_search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>')
    assert p.calls[0].arguments == {"query": "x"} and "arguments_string_decoded" in p.calls[0].repairs


# ------------------------------------------------------------------------------------------- repair
def test_tool_name_repair_is_unambiguous():
    assert resolve_tool_name("Web-Search", TOOL_SPECS)[0] == "web_search"
    assert resolve_tool_name("functions.web_extract", TOOL_SPECS)[0] == "web_extract"
    assert resolve_tool_name("reverse_image_search", TOOL_SPECS)[0] == "web_search_based_on_image"
    with pytest.raises(ToolError):
        resolve_tool_name("search_everything", TOOL_SPECS)


def test_repair_never_invents_values():
    with pytest.raises(ToolError) as e:
        repair_call("web_search_based_on_image", {"num": 3}, TOOL_SPECS)
    assert e.value.code == "missing_argument"
    with pytest.raises(ToolError) as e:
        repair_call("web_search", {"query": "a", "q": "b"}, TOOL_SPECS)
    assert e.value.code == "ambiguous_arguments"
    r = repair_call("web_search", {"q": "a"}, TOOL_SPECS)
    assert r.arguments == {"query": "a", "num": 3}  # default from the schema, not invented


@pytest.mark.parametrize("tool,args", [
    ("web_search", {"query": "a", "num": 0}), ("web_search", {"query": "a", "num": 6}),
    ("web_search_for_image", {"query": ["a", "b", "c", "d"]}), ("web_search_for_image", {"query": "a", "num": 11}),
    ("web_search_based_on_image", {"image": ["a"] * 6}), ("web_search_based_on_image", {"image": "a", "num": 9}),
    ("web_extract", {"urls": ["u"] * 6}), ("web_search", {"query": "a", "num": "3"}), ("execute_code", {"code": ""}),
])
def test_table4_limits(tool, args):
    with pytest.raises(ToolError) as e:
        repair_call(tool, args, TOOL_SPECS)
    assert e.value.code == "bad_arguments"


def test_table4_defaults():
    assert repair_call("web_search", {"query": "a"}, TOOL_SPECS).arguments["num"] == 3
    assert repair_call("web_search_for_image", {"query": "a"}, TOOL_SPECS).arguments["num"] == 5
    assert repair_call("web_search_based_on_image", {"image": "a"}, TOOL_SPECS).arguments["num"] == 5
    assert list(tool_specs()) == ["web_search", "web_search_for_image", "web_search_based_on_image", "web_extract", "execute_code"]
    with pytest.raises(ValueError):
        tool_specs(["web_search", "nope"])


def test_duplicate_and_loop_guard_units():
    """The guards return frozen decisions (action, event code, the model-visible message), not booleans."""
    d = DuplicateSuppressor()
    d.executed("web_search", {"query": "a  b", "num": 3})
    dup = d.check("web_search", {"num": 3, "query": ["a b"]})
    assert dup.action == "block" and dup.code == "duplicate_suppressed" and "web_search" in dup.message
    assert d.check("web_search", {"query": "a b", "num": 4}).allowed
    with pytest.raises(dataclasses.FrozenInstanceError):
        dup.action = "allow"  # frozen
    assert canonical_arguments({"b": 1, "a": "x"}) == canonical_arguments({"a": " x ", "b": 1})
    g = LoopGuard(2)
    assert g.invalid("t", '{"a": 1}').allowed and not g.invalid("t", '{"a":  1}').allowed  # whitespace-normalized identity
    g = LoopGuard(2)
    assert g.invalid("t", "x").allowed
    fired = g.invalid("t", "x")
    assert fired.action == "warn" and fired.code == "loop_guard" and "2 times in a row" in fired.message
    assert not g.invalid("t", "x").allowed
    g.valid()
    assert g.invalid("t", "x").allowed
    assert g.invalid("u", "x").allowed
    g = LoopGuard(3)
    assert [g.invalid("<no action>", "", no_action=True).allowed for _ in range(3)] == [True, True, False]
    assert "last 3 turns" in g.invalid("<no action>", "", no_action=True).message


# ------------------------------------------------------------------------------------------- cache
def test_cache_hits_modes_and_snapshot(tmp_path):
    cache = ToolCache(tmp_path / "c.sqlite")
    mem = MemoryBackend()
    cb = CachedBackend(mem, cache)

    async def go():
        a = await cb.search("Eiffel  Tower", 2)
        b = await cb.search("eiffel tower", 2)  # normalized: same key
        c = await cb.search("eiffel tower", 3)
        imgs = await cb.image_search("x", 2)
        imgs2 = await cb.image_search("x", 2)
        r1 = await cb.reverse_image_search(png_bytes(), 1)
        r2 = await cb.reverse_image_search(png_bytes(), 1)
        await cb.reverse_image_search(png_bytes((1, 2, 3)), 1)
        with pytest.raises(BackendError):
            await cb.search("fail", 1)
        with pytest.raises(BackendError):
            await cb.search("fail", 1)
        return a, b, c, imgs, imgs2, r1, r2

    a, b, c, imgs, imgs2, r1, r2 = asyncio.run(go())
    assert a == b and len(c) == 3 and imgs == imgs2 and imgs2[0].content == imgs[0].content and r1 == r2
    assert [k[0] for k in mem.calls].count("search") == 4  # two misses + two failures (failures never cached)
    assert [k[0] for k in mem.calls].count("reverse_image_search") == 2  # image content hash is in the key
    assert cache.stats == {"hits": 3, "misses": 7, "writes": 5}
    snap = cache.snapshot(tmp_path / "snap.sqlite")
    ro = ToolCache(snap, mode="readonly")
    assert len(ro) == 5
    mem2 = MemoryBackend()
    cb2 = CachedBackend(mem2, ro)
    asyncio.run(cb2.search("EIFFEL tower", 2))
    asyncio.run(cb2.search("new query", 1))
    assert [k[1] for k in mem2.calls] == ["new query"] and len(ro) == 5  # misses not written in snapshot mode
    with pytest.raises(FileNotFoundError):
        ToolCache(tmp_path / "missing.sqlite", mode="readonly")
    assert cache_key("a", "search", {"q": 1}) != cache_key("b", "search", {"q": 1})


def _writer(path, start):
    c = ToolCache(path)
    for i in range(start, start + 200):
        c.put(f"k{i}", "b", "search", {"i": i}, json.dumps([i]))
    c.close()


def test_cache_survives_concurrent_writer_processes(tmp_path):
    path = tmp_path / "c.sqlite"
    ToolCache(path).close()
    ctx = mp.get_context("spawn")
    ps = [ctx.Process(target=_writer, args=(path, i * 200)) for i in range(3)]
    [p.start() for p in ps]
    [p.join(60) for p in ps]
    assert all(p.exitcode == 0 for p in ps)
    assert len(ToolCache(path)) == 600


# ------------------------------------------------------------------------------------------- runner
def _tasks(n):
    return [Task(id=f"t{i}", question=f"question {i}") for i in range(n)]


def test_runner_resumes_without_redoing_or_duplicating(tmp_path):
    from kit.harness.loop import Harness
    from kit.harness.runner import read_episodes, run_batch, workspace_name
    from kit.policy.scripted import ScriptedPolicy

    counter = {"n": 0}

    def script(messages, tools):
        counter["n"] += 1
        return "<response>ok</response>"

    h = Harness(ScriptedPolicy(script), MemoryBackend())
    recs = asyncio.run(run_batch(h, _tasks(5), tmp_path, concurrency=3, progress=False))
    assert [r.id for r in recs] == [f"t{i}" for i in range(5)] and counter["n"] == 5
    # simulate a kill mid-write: a torn last line plus a stale workspace of an unfinished episode
    f = tmp_path / "episodes.jsonl"
    lines = f.read_text().splitlines(keepends=True)
    f.write_text("".join(lines[:3]) + lines[3][:50])
    stale = tmp_path / "workspaces" / workspace_name("t3") / "junk.txt"
    stale.write_text("stale")
    recs = asyncio.run(run_batch(h, _tasks(6), tmp_path, concurrency=3, progress=False))
    assert counter["n"] == 5 + 3  # t3, t4 (torn/lost) and t5 (new) only
    ids = [r.id for r in read_episodes(f)]
    assert sorted(ids) == [f"t{i}" for i in range(6)] and len(ids) == 6
    assert not stale.exists()
    with pytest.raises(ValueError):
        asyncio.run(run_batch(h, [Task(id="x", question="a"), Task(id="x", question="b")], tmp_path / "d", progress=False))


def test_read_episodes_rejects_corruption_in_the_middle(tmp_path):
    from kit.harness.runner import read_episodes

    rec = EpisodeRecord(id="a", task=Task(id="a", question="q"), config_hash="x")
    f = tmp_path / "e.jsonl"
    f.write_text(rec.model_dump_json() + "\n{broken\n" + rec.model_dump_json() + "\n")
    with pytest.raises(ValueError, match="line 2"):
        read_episodes(f)


def test_transcript_inlines_images_and_marks_interventions(tmp_path):
    from kit.harness.loop import Harness
    from kit.harness.transcript import render_transcript
    from kit.policy.scripted import ScriptedPolicy, tool_call_text

    pol = ScriptedPolicy([tool_call_text("web_search_for_image", {"query": "x", "num": 1}), "no action",
                          "<response>see <IMG: search_image_1.png></response>"])
    rec = asyncio.run(Harness(pol, MemoryBackend()).run(Task(id="t", question="<b>q</b>"), tmp_path / "ws"))
    html = render_transcript(rec)
    assert html.count("data:image/png;base64,") == 2  # in the observation and as the cited image
    assert "harness intervention" in html and "&lt;b&gt;q&lt;/b&gt;" in html and "<b>q</b>" not in html


def test_deterministic_refusals_are_cached_and_replayed_other_errors_are_not(tmp_path):
    """A query image too small to search by is refused the same way every time: the cache keeps the
    refusal so an offline replay reproduces the error observation; a transient error is never cached."""
    import io

    from PIL import Image

    from kit.types import BackendError, RequestRejected

    class Refusing:
        name = "refusing"
        calls = 0

        async def reverse_image_search(self, image, num):
            self.calls += 1
            raise RequestRejected("image of 20x10 pixels is too small to search by")

        async def search(self, query, num):
            self.calls += 1
            raise BackendError("HTTP 503", retryable=True)

    buf = io.BytesIO()
    Image.new("RGB", (20, 10)).save(buf, "PNG")
    be, cache = Refusing(), ToolCache(tmp_path / "c.sqlite")
    cb = CachedBackend(be, cache)
    for _ in range(2):
        with pytest.raises(RequestRejected, match="too small"):
            asyncio.run(cb.reverse_image_search(buf.getvalue(), 5))
        with pytest.raises(BackendError, match="503"):
            asyncio.run(cb.search("q", 3))
    assert be.calls == 3  # the refusal once, the transient error every time
    cache.close()
    ro = CachedBackend(Refusing(), ToolCache(tmp_path / "c.sqlite", mode="readonly"))
    with pytest.raises(RequestRejected, match="too small"):
        asyncio.run(ro.reverse_image_search(buf.getvalue(), 5))
    assert ro.backend.calls == 0
