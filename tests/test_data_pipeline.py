"""Synthesis stages 1-4 on the shared ZIM archives (WeAgent §4): seeds, backward expansion,
validation, trajectories through the harness, splits; resume; expert failures; pixel facts."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from PIL import Image

from kit.data import OFFLINE_LABEL
from kit.data.expand import expand_seeds
from kit.data.expert import ExpertError, with_retries
from kit.data.records import Seed, StageFiles
from kit.data.seeds import SeedError, date_windows, fact_correct, leak_fields, pixel_fact


def _img(color, size) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def test_pixel_fact_reads_tone_and_shape():
    f = pixel_fact(_img((200, 20, 20), (300, 150)))
    assert f.answer == "colour, landscape"
    g = pixel_fact(_img((90, 90, 90), (100, 220)))
    assert g.answer == "black-and-white, portrait"
    assert pixel_fact(_img((10, 10, 200), (200, 200))).answer == "colour, square"
    with pytest.raises(SeedError) as e:
        pixel_fact(_img((200, 20, 20), (210, 200)))  # 1.05: neither square nor clearly landscape
    assert e.value.reason == "ambiguous_orientation"
    with pytest.raises(SeedError) as e:
        pixel_fact(b"not an image")
    assert e.value.reason == "image_unreadable"


def test_fact_correct_and_leaks():
    f = pixel_fact(_img((90, 90, 90), (100, 220)))
    assert fact_correct("It is a black and white portrait picture <IMG: x.png>", f)
    assert not fact_correct("colour, portrait", f)
    assert not fact_correct("black-and-white, landscape", f)
    assert not fact_correct(None, f)
    assert leak_fields(f, {"caption": "A black-and-white photo", "title": "Ray Charles"}) == ["caption"]


def test_date_windows():
    w = date_windows("2026-01-01", "2026-01-20")
    assert w[0][0].isoformat() == "2026-01-01" and w[-1][1].isoformat() == "2026-01-20"
    assert all(a[1] == b[0] for a, b in zip(w, w[1:]))
    with pytest.raises(ValueError):
        date_windows("2026-02-01", "2026-01-01")


async def test_with_retries_then_failure_recorded(tmp_path):
    calls = []

    async def flaky():
        calls.append(1)
        raise ExpertError("endpoint 503", retryable=True)

    with pytest.raises(ExpertError):
        await with_retries(flaky, 3, wait_s=0.001)
    assert len(calls) == 3

    class Down:
        name, labels = "down", []

        async def expand_hop(self, *a, **k):
            raise ExpertError("endpoint 503", retryable=True)

    seed = Seed.model_validate_json(json.dumps(_seed_json(tmp_path)))
    files = await expand_seeds(Down(), [seed], tmp_path, depths=(2,), attempts=2)
    failed = files.failed.read()
    assert len(failed) == 1 and failed[0].attempts == 2 and "503" in failed[0].error
    # a rerun skips the decided item
    files = await expand_seeds(Down(), [seed], tmp_path, depths=(2,), attempts=2)
    assert len(files.failed.read()) == 1


class _SlowFirstExpert:
    """Returns the same hop for every variant; a seed's first variant (and the first seed) answers last, so items
    finish in the reverse of their input order."""

    name, labels = "slow-first", []

    async def expand_hop(self, node_url, node_title, *, avoid, key):
        from kit.data.records import Hop

        late = "|v" not in key or key.startswith("s0|")
        await asyncio.sleep(0.05 if late else 0.0)
        return Hop(subject=f"Pre {node_title}", subject_url=f"{node_url}/pre", answer=node_title,
                   answer_url=node_url, question="q", evidence="e")


async def test_concurrent_stages_write_the_same_files_whatever_finishes_first(tmp_path):
    """Chains finish out of order (concurrency 4): the stage's files are still in input order, and of two variants
    with the same hops the first variant is kept, not whichever finished first."""
    base = _seed_json(tmp_path)
    seeds = [Seed.model_validate({**base, "id": f"s{k}"}) for k in range(3)]
    files = await expand_seeds(_SlowFirstExpert(), seeds, tmp_path / "a", depths=(1, 2), variants=2, concurrency=4)
    kept = [c.id for c in files.accepted.read()]
    assert kept == [f"s{k}-d{d}" for k in range(3) for d in (1, 2)]  # variant 0 of each, in input order
    dup = files.rejected.read()
    assert [r.id for r in dup] == [f"s{k}-d{d}-v1" for k in range(3) for d in (1, 2)]
    assert {r.reason for r in dup} == {"duplicate_chain"}
    again = await expand_seeds(_SlowFirstExpert(), seeds, tmp_path / "b", depths=(1, 2), variants=2, concurrency=4)
    for store in ("accepted", "rejected"):
        assert getattr(files, store).path.read_bytes() == getattr(again, store).path.read_bytes()


def test_stage_files_sort_keeps_unknown_ids_after_and_is_atomic(tmp_path):
    from kit.data.records import Rejection

    files = StageFiles(tmp_path, "x", Seed)
    for i in ("c", "z", "a", "b"):
        files.rejected.append(Rejection(id=i, stage="x", reason="r", detail=""))
    files.sort(["a", "b", "c"])
    assert [r.id for r in files.rejected.read()] == ["a", "b", "c", "z"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x_rejected.jsonl"]  # no temporary file left
    files.sort(["a", "b", "c"])  # already in order: the file is not rewritten
    assert [r.id for r in files.rejected.read()] == ["a", "b", "c", "z"]


def test_store_sort_moves_lines_as_written_and_leaves_no_side_file(tmp_path, monkeypatch):
    """Sorting moves each line as it is: a field the model does not know (a newer writer's) stays,
    no default is written in; a failed write leaves the file as it was and no side file."""

    from kit.data.records import JsonlStore, Rejection

    store = JsonlStore(tmp_path / "r.jsonl", Rejection)
    raw = [{"id": "b", "stage": "x", "reason": "r", "note": "from a newer writer"},
           {"id": "a", "stage": "x", "reason": "r"}]
    store.path.write_text("".join(json.dumps(r) + "\n" for r in raw) + '{"id": "c", "sta', encoding="utf-8")
    store.sort(["a", "b"])  # the torn last line is cut, the rest reordered byte for byte
    assert [json.loads(ln) for ln in store.path.read_text().splitlines()] == raw[::-1]
    before = store.path.read_bytes()

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("kit.data.records.os.fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        store.sort(["b", "a"])
    assert store.path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.jsonl"]
    JsonlStore(tmp_path / "absent.jsonl", Rejection).sort(["a"])  # nothing written yet: nothing to do
    assert not (tmp_path / "absent.jsonl").exists()


def _seed_json(tmp_path):
    p = tmp_path / "t.png"
    p.write_bytes(_img((200, 0, 0), (300, 100)))
    return {"id": "s1", "branch": "stable", "concept": "X", "source_page": "zim://a/A/X", "as_of": "2026-01-01",
            "target": {"url": "zim://a/I/x.png", "page_url": "zim://a/A/X", "page_title": "X", "position": 1,
                       "path": str(p), "sha256": "0" * 64, "width": 300, "height": 100},
            "fact": {"kind": "tone_orientation", "question": "q", "answer": "colour, landscape"}}


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir):
    from kit.data.pipeline import run_offline, zim_paths

    out = tmp_path_factory.mktemp("synth")
    counts = asyncio.run(run_offline(zim_paths(data_dir), out, max_seeds=60, depths=(2, 3), variants=2, samples=2,
                                     holdout_seed_fraction=0.1))
    return out, counts


def test_counts_through_every_stage(run):
    out, c = run
    assert c["label"] == OFFLINE_LABEL
    s1, s2, s3 = c["stage1_seeds"], c["stage2_chains"], c["stage3_tasks"]
    assert s1["accepted"] == 60 and s1["rejected"] > 0 and sum(s1["reasons"].values()) == s1["rejected"]
    assert s2["accepted"] > 0 and s2["reasons"].get("no_predecessor", 0) > 0
    assert s3["accepted"] > 0 and s3["accepted"] + s3["rejected"] + s3["failed"] == s2["accepted"]
    assert c["holdout"]["train_pool"] + c["holdout"]["benchmark_candidates"] == s3["accepted"]
    st4 = c["stage4"]
    assert st4["episodes"] == 2 * c["holdout"]["train_pool"]
    assert 0 < st4["sft"] <= st4["tasks"] and st4["sft"] <= st4["solved_episodes"]
    assert st4["strata"]["solved"] + st4["strata"]["mixed"] + st4["strata"]["unsolved"] == st4["tasks"]
    assert json.loads((out / "counts.json").read_text())["stage3_tasks"] == s3


def test_tasks_keep_chain_target_and_audit(run):
    from kit.data.pipeline import load_tasks
    from kit.data.sample import holdout

    out, _ = run
    tasks = load_tasks(out)
    for t in tasks:
        assert t.chain.depth == len(t.chain.hops) in (2, 3)
        assert t.chain.hops[-1].answer_url == t.seed.source_page
        assert t.answer in t.answers and t.answer not in t.query
        assert all(h.answer not in t.query for h in t.chain.hops)
        assert t.audit["retrieval"]["bridge_search_ranks"] == [1] * t.chain.depth
        assert t.seed.target.path and t.to_task().target_image == t.seed.target.path
        if t.modality == "input_image":
            assert t.input_images and t.chain.anchor not in t.query
    train, bench = holdout(tasks, seed_fraction=0.1, task_fraction=0.05)
    held_seeds = {b.seed_id for b in bench if holdout([b], seed_fraction=0.1, task_fraction=0.0)[1]}
    assert not held_seeds & {t.seed_id for t in train}  # seed-level hold-out is complete


def test_sft_split_is_correct_cited_and_encodable(run):
    from kit.harness.runner import read_episodes
    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.sft_data import SFTEncoder

    out, _ = run
    sft = read_episodes(out / "splits" / "sft_episodes.jsonl")
    assert sft and all(r.trainable and r.cited_images and OFFLINE_LABEL in r.labels for r in sft)
    enc = SFTEncoder(load_image_only_processor(build_tiny_checkpoint("qwen2_5_vl", vocab="local")))
    examples, rep = enc.encode_many(sft[:3])
    assert rep.kept == len(examples) == min(3, len(sft))
    rl = [json.loads(x) for x in (out / "splits" / "rl_prompts.jsonl").read_text().splitlines()]
    assert all(0 <= r["metadata"]["solve_rate"] <= 1 for r in rl)


def test_rerun_resumes_without_new_work(run, data_dir):
    from kit.data.pipeline import run_offline, zim_paths

    out, c = run
    before = {n: StageFiles(out, n, Seed).done_ids() for n in ("seeds",)}
    c2 = asyncio.run(run_offline(zim_paths(data_dir), out, max_seeds=60, depths=(2, 3), variants=2, samples=2,
                                 holdout_seed_fraction=0.1))
    assert StageFiles(out, "seeds", Seed).done_ids() == before["seeds"]
    for k in ("stage1_seeds", "stage2_chains", "stage3_tasks"):
        assert c2[k] == c[k], k
    assert c2["stage4"]["episodes"] == c["stage4"]["episodes"]


def test_fact_share_quota_balances_seed_answers(tmp_path, data_dir):
    """``max_fact_share`` caps any one pixel-fact answer (album covers make "colour, square" common),
    rejecting the surplus with a reason; a rerun resumes with the same decisions."""
    import math

    from kit.data.linkgraph import LinkGraph
    from kit.data.pipeline import offline_backends, zim_paths
    from kit.data.seeds import seed_summary, stable_seeds

    web, links, cache = offline_backends(zim_paths(data_dir), tmp_path / "cache.sqlite")
    graph = LinkGraph.build(links)
    files = asyncio.run(stable_seeds(web, graph, tmp_path, limit=24, max_fact_share=0.3))
    c = seed_summary(files)
    assert c["accepted"] == 24 and max(c["facts"].values()) <= math.ceil(0.3 * 24)
    assert c["reasons"]["fact_quota_full"] > 0
    again = seed_summary(asyncio.run(stable_seeds(web, graph, tmp_path, limit=24, max_fact_share=0.3)))
    assert again == c
    with pytest.raises(ValueError):
        asyncio.run(stable_seeds(web, graph, tmp_path, max_fact_share=0.3))
    cache.close()
