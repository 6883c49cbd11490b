"""Products of the data pipeline on real data (one offline run over the shared ZIMs + the real MMSearch-R1
traces): SFT/RL mixtures as Hugging Face datasets with images and per-source statistics, round trip to the
SFT encoder, dataset cards, RL query filtering with rollout groups and label audit, and VisTarget-style
benchmark building with review export/import."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import httpx
import pytest

from kit.data import OFFLINE_LABEL
from kit.harness.episode import Task


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir):
    from kit.data.normalize import MMSearchR1Adapter, normalize_rows, read_mmsearch_r1
    from kit.data.pipeline import run_offline, zim_paths

    out = tmp_path_factory.mktemp("products")
    counts = asyncio.run(run_offline(zim_paths(data_dir), out, max_seeds=50, depths=(2, 3), variants=2, samples=2,
                                     holdout_seed_fraction=0.3))
    ad = MMSearchR1Adapter(data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images")
    recs, rep = normalize_rows(ad, read_mmsearch_r1(data_dir / "trajectories" / "mmsearch_r1" / "predictions_fvqa50.jsonl"),
                               out / "normalized")
    return out, counts, recs, rep


# ---------------------------------------------------------------------------------------------- mixtures
def _sources(out):
    from kit.data.mixtures import DataSource

    return [DataSource("synth", out / "splits" / "sft_episodes.jsonl", "in-house"),
            DataSource("mmsearch_r1", out / "normalized" / "mmsearch_r1.jsonl", "open-source")]


def test_sft_mixture_dataset_stats_and_encoder_round_trip(run, tmp_path):
    from datasets import load_from_disk

    from kit.data.mixtures import build_sft_mixture, mixture_stats, records_from_sft_dataset, save_dataset
    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.train.sft_data import SFTEncoder

    out, counts, recs, _ = run
    ds, report = build_sft_mixture(_sources(out))
    n_synth, n_mmr1 = counts["stage4"]["sft"], sum(r.trainable for r in recs)
    assert report["synth"]["drawn"] == n_synth and report["mmsearch_r1"]["drawn"] == n_mmr1
    assert report["mmsearch_r1"]["not_trainable"] == sum(not r.trainable for r in recs) > 0  # tool-failure traces
    st = mixture_stats(ds)
    assert st["total"] == len(ds) == n_synth + n_mmr1
    by = {r["source"]: r for r in st["by_source"]}
    assert by["synth"]["count"] == n_synth and by["synth"]["origin"] == "in-house"
    assert by["mmsearch_r1"]["share"] == round(100 * n_mmr1 / len(ds), 1)
    assert {o["origin"]: o["count"] for o in st["by_origin"]} == {"in-house": n_synth, "open-source": n_mmr1}
    row = next(r for r in ds if r["source"] == "synth")
    assert len(row["images"]) == len(row["image_names"]) > 0 and row["images"][0].size[0] > 0
    save_dataset(ds, tmp_path / "sft")
    back = load_from_disk(str(tmp_path / "sft" / "arrow"))
    assert (tmp_path / "sft" / "data" / "train.parquet").is_file() and len(back) == len(ds)
    rebuilt = records_from_sft_dataset(back, tmp_path / "ws")
    assert [r.id for r in rebuilt] == back["id"]
    from kit.data.normalize import MMSearchR1Adapter

    proc = load_image_only_processor(build_tiny_checkpoint("qwen2_5_vl", vocab="local"))
    enc = SFTEncoder(proc, tools=MMSearchR1Adapter(".").tool_schemas())
    for src in ("synth", "mmsearch_r1"):
        r = rebuilt[back["source"].index(src)]
        ex = enc.encode(r)
        assert ex.num_loss_tokens > 0 and ex.pixel_values is not None


def test_sized_mixture_follows_weights(run):
    from kit.data.mixtures import DataSource, MixtureDataError, build_sft_mixture, mixture_stats

    out, *_ = run
    src = [DataSource("synth", out / "splits" / "sft_episodes.jsonl", "in-house", weight=1),
           DataSource("mmsearch_r1", out / "normalized" / "mmsearch_r1.jsonl", "open-source", weight=3)]
    ds, rep = build_sft_mixture(src, size=20, seed=3)
    assert rep["mmsearch_r1"]["quota"] == 15 and rep["synth"]["quota"] == 5
    # issue 27: the shared traces' thumbnails are absent, so few MMSearch-R1 records are trainable (3 of 50)
    assert rep["mmsearch_r1"]["drawn"] == min(15, rep["mmsearch_r1"]["available"])
    assert mixture_stats(ds)["total"] == rep["synth"]["drawn"] + rep["mmsearch_r1"]["drawn"]
    ds2, _ = build_sft_mixture(src, size=20, seed=3)
    assert ds2["id"] == ds["id"]  # seeded
    with pytest.raises(MixtureDataError, match="weight"):
        build_sft_mixture([DataSource("x", src[0].path, "in-house", weight=0)])
    with pytest.raises(MixtureDataError, match="does not exist"):
        build_sft_mixture([DataSource("x", out / "nope.jsonl", "in-house")])
    with pytest.raises(MixtureDataError, match="origin"):
        build_sft_mixture([DataSource("x", src[0].path, "partner")])


def test_rl_mixture_and_cards(run, tmp_path):
    from kit.data.cards import mixture_card
    from kit.data.mixtures import DataSource, MixtureDataError, build_rl_mixture, mixture_stats, tasks_from_episodes

    out, counts, recs, rep = run
    n = tasks_from_episodes(recs, tmp_path / "mmr1_tasks.jsonl")
    ds, report = build_rl_mixture([DataSource("synth", out / "splits" / "rl_prompts.jsonl", "in-house"),
                                   DataSource("mmsearch_r1", tmp_path / "mmr1_tasks.jsonl", "open-source")])
    missing = sum("input_image_missing" in r.labels for r in recs)
    assert missing == 10 and report["mmsearch_r1"]["input_image_missing"] == missing
    assert len(ds) == counts["stage4"]["rl"] + n - missing
    synth = [r for r in ds if r["source"] == "synth"]
    assert all(r["target_image"] is not None and 0 <= r["solve_rate"] <= 1 for r in synth)
    mm = next(r for r in ds if r["source"] == "mmsearch_r1")
    assert mm["input_images"][0].size[0] > 0 and mm["target_image"] is None and mm["solve_rate"] is None
    st = mixture_stats(ds)
    filters = [{"stage": "normalize", "reason": k, "count": v} for k, v in rep.quarantined.items()]
    text, paths = mixture_card(st, name="rl_mixture", kind="rl", dataset_dir=tmp_path / "rl", cards_dir=tmp_path / "cards",
                               filters=filters, smoke=True, offline=True)
    assert [p.name for p in paths] == ["README.md", "rl_mixture.md"] and paths[1].read_text() == text
    assert text.startswith("---\n") and "synthetic-offline" in text and "size_categories" in text
    assert f"| mmsearch_r1 | open-source | {n - missing} |" in text
    bad = tmp_path / "bad.jsonl"
    bad.write_text(Task(id="q", question="q?").model_dump_json() + "\n")
    ds2, rep2 = build_rl_mixture([DataSource("bad", bad, "open-source")])
    assert len(ds2) == 0 and rep2["bad"]["no_answer"] == 1
    with pytest.raises(ValueError):
        mixture_card(st, name="x", kind="dpo")
    bad.write_text("{not json\n")
    with pytest.raises(MixtureDataError, match="line 1"):
        build_rl_mixture([DataSource("bad", bad, "open-source")])


# ---------------------------------------------------------------------------------------------- RL filtering
def test_label_audit_flags():
    from kit.data.rl_filter import audit_label

    def t(a):
        return Task(id="x", question="Which river?", answers=a)

    assert audit_label(t(["Tagus"])) == []
    assert audit_label(t(["I cannot find the final answer."])) == ["refusal_placeholder"]
    assert audit_label(t(["Unknown"])) == ["refusal_placeholder"]
    assert audit_label(t([])) == ["no_answer"] and audit_label(t(["  "])) == ["no_answer"]
    assert audit_label(t(["maybe the Tagus"])) == ["hedged_answer"]
    assert audit_label(t(["Is it the Tagus?"])) == ["question_as_answer"]
    assert audit_label(t([" ".join(["word"] * 30)])) == ["overlong_answer"]


async def test_rl_filter_groups_through_harness(run, data_dir, tmp_path):
    from kit.data.pipeline import load_tasks, offline_backends, zim_paths
    from kit.data.rl_filter import RLFilterError, filter_rl_queries
    from kit.data.sample import ChainFollower
    from kit.harness.config import HarnessConfig
    from kit.harness.loop import Harness
    from kit.policy.scripted import ScriptedPolicy

    out, *_ = run
    tasks = load_tasks(out)[:8]
    web, _, cache = offline_backends(zim_paths(data_dir), tmp_path / "cache.sqlite")
    by = {t.id: t for t in tasks}
    refusal = Task(id="refuse", question="What is it?", answers=["I cannot find the final answer."])
    qs = [t.to_task() for t in tasks] + [refusal]

    def make(task, k):  # slips make groups mixed; sample 0 is the deterministic follower
        return Harness(ChainFollower(by[task.id], slip=0.0 if k == 0 else 0.6, rng_seed=k), web, HarnessConfig())

    res = await filter_rl_queries(qs, make, tmp_path / "f", group_size=4, concurrency=4, profile="smoke")
    c = res.counts
    assert c["queries"] == 9 and c["audited_out"] == 1 and c["rollouts"] == 4 * 8
    assert c["kept"] + sum(c["dropped"].values()) == 9 and c["dropped"]["refusal_placeholder"] == 1
    for t in res.kept:
        g = t.metadata["rl_group"]
        assert 0 < g["correct"] < g["rollouts"] == 4 and t.metadata["solve_rate"] == g["correct"] / 4
    for t, why in res.dropped:
        if why in ("all_correct", "all_wrong"):
            assert t.metadata["rl_group"]["correct"] == (4 if why == "all_correct" else 0)
    assert len((tmp_path / "f" / "rl_kept.jsonl").read_text().splitlines()) == c["kept"]
    assert json.loads((tmp_path / "f" / "rl_filter_counts.json").read_text()) == c
    # a scripted policy that answers right only on even samples: every group is mixed at 0.5
    good = tasks[0]

    def alternating(task, k):
        ans = good.answer if k % 2 == 0 else "nothing"
        return Harness(ScriptedPolicy([f"<think>x</think><response>{ans}</response>"]), web, HarnessConfig())

    res2 = await filter_rl_queries([good.to_task()], alternating, tmp_path / "g", group_size=4, profile="smoke")
    assert res2.counts["kept"] == 1 and res2.kept[0].metadata["solve_rate"] == 0.5
    with pytest.raises(RLFilterError):
        await filter_rl_queries([good.to_task()], alternating, tmp_path / "h", group_size=1, profile="smoke")
    cache.close()


async def test_llm_label_auditor_on_fake_endpoint():
    from kit.data.rl_filter import LLMLabelAuditor
    from kit.policy.openai_client import OpenAIChatPolicy
    from kit.policy.scripted import CharTokenCounter

    replies = {"Tagus": '{"verifiable": true, "reason": "a river name"}',
               "several": '{"verifiable": false, "reason": "ambiguous"}', "junk": "no json here"}

    def handler(request):
        prompt = json.loads(request.content)["messages"][-1]["content"]
        key = next(k for k in replies if f"Reference answer: {k}" in prompt)
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant",
                                                                             "content": replies[key]},
                                                      "finish_reason": "stop"}]})

    pol = OpenAIChatPolicy("http://judge/v1", "kimi", api_key="k", token_counter=CharTokenCounter(),
                           transport=httpx.MockTransport(handler))
    aud = LLMLabelAuditor(pol)
    assert await aud.audit(Task(id="a", question="Which river?", answers=["Tagus"])) == []
    assert await aud.audit(Task(id="b", question="Which river?", answers=["several"])) == ["unverifiable_target"]
    assert await aud.audit(Task(id="c", question="Which river?", answers=["junk"])) == ["audit_failed"]
    assert aud.last_reason["b"] == "ambiguous"


# ---------------------------------------------------------------------------------------------- VisTarget
def _candidates(out):
    from kit.data.records import SynthTask

    return [SynthTask.model_validate_json(x) for x in (out / "benchmark_candidates.jsonl").read_text().splitlines()
            if x.strip()]


async def test_vistarget_build_split_solvability_and_review(run, data_dir, tmp_path):
    from kit.data.cards import vistarget_card
    from kit.data.pipeline import load_tasks, offline_backends, zim_paths
    from kit.data.sample import ChainFollower
    from kit.data.vistarget_build import ReviewError, build_vistarget, export_review, import_review, solvability_check
    from kit.eval.loaders import load_vistarget_jsonl
    from kit.harness.config import HarnessConfig
    from kit.harness.loop import Harness

    out, counts, *_ = run
    cands = _candidates(out)
    assert len(cands) == counts["holdout"]["benchmark_candidates"] > 0
    train_seeds = {t.seed_id for t in load_tasks(out)} - {c.seed_id for c in cands}
    assert not {c.seed_id for c in cands if c.seed_id in train_seeds}
    vt = tmp_path / "vt"
    split = build_vistarget(cands, vt)
    assert sum(split.values()) == len(cands)
    res = load_vistarget_jsonl(vt / "tasks.jsonl", strict=True)  # the evaluation loader reads it unchanged
    assert len(res.tasks) == len(cands) and all(Path(t.target_image).is_file() for t in res.tasks)
    for m in ("input_image", "text_only"):
        rows = [json.loads(x) for x in (vt / f"tasks_{m}.jsonl").read_text().splitlines()]
        assert len(rows) == split[m] and all(bool(r["input_images"]) == (m == "input_image") for r in rows)
    web, _, cache = offline_backends(zim_paths(data_dir), tmp_path / "cache.sqlite")
    by = {f"vt_{c.id}": c for c in cands}
    sc = await solvability_check(vt / "tasks.jsonl", lambda t, k: Harness(ChainFollower(by[t.id]), web, HarnessConfig()),
                                 tmp_path / "solve")
    cache.close()
    assert sc["checked"] == len(cands) and sc.get("solvable", 0) > 0
    sheet = export_review(vt / "tasks.jsonl", tmp_path / "review.csv")
    rows = list(csv.DictReader(open(sheet, encoding="utf-8")))
    assert len(rows) == len(cands) and all(Path(r["target_image"]).is_absolute() and Path(r["target_image"]).is_file()
                                           for r in rows)
    # reviewers: accept the first, fix the second's answers, reject the third, leave the rest pending
    rows[0]["verdict"] = "accept"
    if len(rows) > 2:
        rows[1].update(verdict="fix", corrected_answers="colour, square | color, square", reviewer="r1")
        rows[2]["verdict"] = "reject"
    done = tmp_path / "review_done.csv"
    with open(done, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = import_review(vt / "tasks.jsonl", done, vt / "verified.jsonl")
    assert r["tasks"] == len(cands) and r["accept"] == 1 and r["pending"] == len(cands) - (3 if len(rows) > 2 else 1)
    ver = load_vistarget_jsonl(vt / "verified.jsonl", strict=True)
    assert len(ver.tasks) == r["verified"]
    if len(rows) > 2:
        fixed = next(t for t in ver.tasks if t.id == rows[1]["id"])
        assert fixed.answers == ["colour, square", "color, square"] and fixed.metadata["review"] == "fix"
    # bad sheets are refused with the row named
    rows[0]["verdict"] = "maybe"
    with open(done, "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(ReviewError, match="row 1"):
        import_review(vt / "tasks.jsonl", done, vt / "verified.jsonl")
    (tmp_path / "x.jsonl").write_text(json.dumps({"id": "nope", "verdict": "accept"}) + "\n")
    with pytest.raises(ReviewError, match="not in"):
        import_review(vt / "tasks.jsonl", tmp_path / "x.jsonl", vt / "verified.jsonl")
    (tmp_path / "y.jsonl").write_text(json.dumps({"id": rows[0]["id"], "verdict": "fix"}) + "\n")
    with pytest.raises(ReviewError, match="needs corrected"):
        import_review(vt / "tasks.jsonl", tmp_path / "y.jsonl", vt / "verified.jsonl")
    with pytest.raises(ReviewError, match="must be in"):
        import_review(vt / "tasks.jsonl", sheet, tmp_path / "elsewhere.jsonl")
    text, _ = vistarget_card(split, name="vt", dataset_dir=vt, verdicts={"accept": 1}, offline=True)
    assert "held-out target image" in text and "| text_only |" in text and (vt / "README.md").is_file()
    assert OFFLINE_LABEL in json.loads((vt / "tasks.jsonl").read_text().splitlines()[0])["labels"]


def test_load_sft_records_from_files_mixtures_and_the_hub(tmp_path, monkeypatch):
    """Notebook 04's ``data`` parameter: an episodes file, a saved mixture (images rebuilt into
    workspaces), and the same mixture published and fetched back as ``hub:dataset:owner/name@tag``
    (through the in-process Hub stand-in); nothing loadable is a clear error."""
    from kit.data.mixtures import DataSource, build_sft_mixture, load_sft_records, save_dataset
    from kit.hub.localhub import LocalHub
    from kit.hub.publish import plan_run, publish
    from kit.train.sample_records import sample_record

    eps = tmp_path / "eps" / "episodes.jsonl"
    eps.parent.mkdir()
    eps.write_text("".join(sample_record(tmp_path / "eps" / f"w{i}", rid=f"e{i}").model_dump_json() + "\n" for i in range(2)))
    assert [r.id for r in load_sft_records(eps, tmp_path / "ws")] == ["e0", "e1"]
    assert [r.id for r in load_sft_records(eps.parent, tmp_path / "ws")] == ["e0", "e1"]
    ds, _ = build_sft_mixture([DataSource("demo", eps, "in-house")])
    run = tmp_path / "results" / "run"
    save_dataset(ds, run / "sft_mixture")
    recs = load_sft_records(run / "sft_mixture", tmp_path / "ws_local")
    assert sorted(r.id for r in recs) == ["e0", "e1"] and all(r.messages for r in recs)
    monkeypatch.setenv("HF_TOKEN", "hf_mixtureTestToken123456")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    hub = LocalHub(tmp_path / "hub")
    with hub.installed():
        publish(plan_run(run, tag="t1", dataset_repos={"sft_mixture": "kit-org/demo-sft"}))
        got = load_sft_records("hub:dataset:kit-org/demo-sft@t1", tmp_path / "ws_hub")
    assert sorted(r.id for r in got) == ["e0", "e1"]
    assert [m.text() for m in got[0].messages] == [m.text() for m in next(r for r in recs if r.id == got[0].id).messages]
    with pytest.raises(FileNotFoundError, match="no episode records"):
        load_sft_records(tmp_path / "results", tmp_path / "ws")
