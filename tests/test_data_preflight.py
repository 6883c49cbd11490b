"""Notebook 02's preflight (issue 16 part 4, data side): under ``--profile paper --preflight`` every model
role is a tiny stand-in whose answers are junk, so every stage must report its rejections and failures
(bounded, counted, carded) and the notebook must still reach its end with empty parts written as zero."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kit.policy.scripted import ScriptedPolicy

RAY_ZIM = "wikipedia_en_ray_charles_2015-06"


def _junk(name: str = "junk-stand-in") -> ScriptedPolicy:
    """What a tiny random-weight model answers: never JSON, never a tool call."""
    return ScriptedPolicy(lambda messages, tools: "悚.lst intimid_ENABLE jacPIC 新浪", name=name)


# ------------------------------------------------------------------ roles
def test_preflight_roles_are_the_stand_in_labelled_preflight():
    from kit.policy.factory import ModelUnavailable, synthesis_policies
    from kit.profiles import get_profile

    stand_in = _junk()
    roles = synthesis_policies(get_profile("paper", preflight=True), "", "", stand_in=stand_in)
    assert roles.expert is stand_in and roles.rl is stand_in and not roles.offline
    assert roles.labels == ["expert:junk-stand-in", "preflight"]
    assert roles.manifest_model() == {"smoke": False, "model": "junk-stand-in", "stand_in": True,
                                      "rl_model": "junk-stand-in"}
    with pytest.raises(ValueError, match="preflight"):  # a real paper run names its expert
        synthesis_policies("paper", "", "", stand_in=stand_in)
    with pytest.raises(ModelUnavailable, match="expert_endpoint"):
        synthesis_policies("paper", "", "")


def test_preflight_default_stand_in_is_the_profiles_tiny_policy(monkeypatch):
    import kit.profiles
    from kit.policy.factory import synthesis_policies

    made = []
    monkeypatch.setattr(kit.profiles, "stand_in_policy", lambda role, **kw: made.append(role) or _junk(role))
    roles = synthesis_policies(kit.profiles.get_profile("points_seeker", preflight=True), "", "")
    assert made == ["expert"] and roles.expert_name == "expert" and "preflight" in roles.labels


# ------------------------------------------------------------------ stage 1 under a junk expert
@pytest.fixture(scope="module")
def ray(data_dir):
    from kit.data.linkgraph import LinkGraph
    from kit.data.pipeline import zim_paths
    from kit.web.zim import LocalZimWeb

    paths = zim_paths(data_dir, [RAY_ZIM])
    return LocalZimWeb(paths), LinkGraph.build(LocalZimWeb(paths, keep_links=True))


async def test_stable_seeds_stop_at_max_candidates_and_report_each_failure(tmp_path, ray):
    """A junk expert rejects every fact: without a bound the stage would ask it about every image of the
    archives; with ``max_candidates`` it stops, says so, and counts each failure by kind."""
    from kit.data.seeds import seed_summary, stable_seeds
    from kit.data.visual_fact import ExpertFactReader

    web, graph = ray
    policy = _junk()
    files = await stable_seeds(web, graph, tmp_path, limit=2, max_candidates=3,
                               fact_reader=ExpertFactReader(policy, attempts=2))
    c = seed_summary(files)
    assert c["accepted"] == 0 and c["rejected"] + c["failed"] == 3 and len(policy.calls) == 3 * 2
    assert c["failures"] == {"unparsable": 3} and c["stopped"].startswith("max_candidates")
    # a rerun with the same bound resumes without asking again; a larger one decides more
    again = await stable_seeds(web, graph, tmp_path, limit=2, max_candidates=3,
                               fact_reader=ExpertFactReader(policy, attempts=2))
    assert len(policy.calls) == 6 and again.counts()["failed"] == 3
    await stable_seeds(web, graph, tmp_path, limit=2, max_candidates=4, fact_reader=ExpertFactReader(policy, attempts=2))
    assert len(policy.calls) == 8
    with pytest.raises(ValueError, match="max_candidates"):
        await stable_seeds(web, graph, tmp_path, max_candidates=0)


def test_stage_counts_without_failures_keep_their_shape(tmp_path):
    """The smoke profile's counts (no failures, no bound) are unchanged: no extra keys."""
    from kit.data.records import Failure, Seed, StageFiles

    files = StageFiles(tmp_path, "seeds", Seed)
    assert files.counts() == {"accepted": 0, "rejected": 0, "failed": 0, "reasons": {}}
    files.failed.append(Failure(id="a", stage="seeds", error="policy: endpoint down"))
    assert files.counts()["failures"] == {"policy": 1}


def test_an_event_episode_without_a_final_response_says_so(tmp_path):
    from kit.data.seeds import SeedError, _event_seed

    rec = SimpleNamespace(status="max_turns_synthesis", final_response=None, error=None)
    with pytest.raises(SeedError) as e:
        _event_seed(rec, tmp_path, "2026-01-01T00:00:00")
    assert e.value.reason == "expert_no_answer" and "no final response" in e.value.detail


# ------------------------------------------------------------------ empty downstream stages
async def test_vqa_conversion_of_nothing_writes_an_empty_stage(tmp_path):
    """No chains (every seed rejected upstream): the stage folder exists, counts are zero, and the
    notebook's ``vqa/vqa_rl_prompts.jsonl`` can be written (it crashed with FileNotFoundError)."""
    from kit.data.vqa_convert import OfflineVQAConverter, convert_qa

    files = await convert_qa([], OfflineVQAConverter(), web=None, out_dir=tmp_path / "vqa")
    assert (tmp_path / "vqa").is_dir() and files.counts() == {"accepted": 0, "rejected": 0, "failed": 0, "reasons": {}}


def test_empty_in_house_sources_are_listed_with_zero_and_carded(tmp_path):
    from kit.data.cards import mixture_card
    from kit.data.mixtures import DataSource, build_rl_mixture, mixture_stats
    from kit.harness.episode import Task

    (tmp_path / "synth.jsonl").write_text("")
    (tmp_path / "os.jsonl").write_text(Task(id="t1", question="q?", answers=["a"]).model_dump_json() + "\n")
    ds, rep = build_rl_mixture([DataSource("synth", tmp_path / "synth.jsonl", "in-house"),
                                DataSource("mmsearch_r1", tmp_path / "os.jsonl", "open-source")])
    st = mixture_stats(ds, rep)
    assert [(r["source"], r["count"]) for r in st["by_source"]] == [("mmsearch_r1", 1), ("synth", 0)]
    assert st["empty_sources"] == ["synth"] and mixture_stats(ds)["by_source"][0]["source"] == "mmsearch_r1"
    text, _ = mixture_card(st, name="rl", kind="rl", labels=("preflight",))
    assert "Sources with no prompts: synth" in text and "Preflight run" in text and "- preflight" in text
    (tmp_path / "os.jsonl").write_text("")
    ds, rep = build_rl_mixture([DataSource("synth", tmp_path / "synth.jsonl", "in-house"),
                                DataSource("mmsearch_r1", tmp_path / "os.jsonl", "open-source")])
    text, _ = mixture_card(mixture_stats(ds, rep), name="rl", kind="rl")
    assert "**Empty:** 0 prompts" in text and "Preflight" not in text


def test_notebook_02_declares_preflight_and_sizes_through_the_profile():
    """The parameter `preflight` exists, the profile is built with it, and the preflight's sizes are
    small: a bounded stage 1, two event windows, one topic (kit.cli runs it with --preflight)."""
    from pathlib import Path

    nb = Path(__file__).resolve().parents[1] / "notebooks" / "02_data_synthesis.ipynb"
    cells = json.loads(nb.read_text())["cells"]
    par = "".join(next(c for c in cells if "parameters" in c["metadata"].get("tags", []))["source"])
    assert "\npreflight = False" in par and "seed_candidates: Count | None = None" in par
    src = "".join("".join(c["source"]) for c in cells)
    for needle in ("P = get_profile(profile, preflight=preflight)", "synthesis_policies(P,",
                   "make_summarizer(summarizer_endpoint, summarizer_model, P,", "max_candidates=seed_candidates",
                   "config=harness_config", "mixture_stats(sft_ds, sft_report)", "labels=P.labels"):
        assert needle in src, needle
