"""SFT selection of stage-4 episodes (WeAgent §4.4 "Expert trajectory collection": "Correct and
complete trajectories form the SFT set"). The kit's extra "target-matched" requirement is an option
(``require_target_match``), off by default as in the paper."""

from __future__ import annotations

import json

import pytest

from kit.data.records import Chain, Hop, Seed, SynthTask
from kit.data.sample import sft_eligible, split_outcomes
from kit.harness.episode import EpisodeRecord


def _task(i: int) -> SynthTask:
    seed = Seed.model_validate({
        "id": f"s{i}", "branch": "stable", "concept": "Ray Charles", "source_page": "https://en.wikipedia.org/wiki/Ray",
        "as_of": "2026-01-01",
        "target": {"url": "x", "page_url": "p", "page_title": "Ray", "position": 1, "path": "/x",
                   "sha256": "0" * 64, "width": 1, "height": 1},
        "fact": {"kind": "tone_orientation", "question": "q", "answer": "colour, portrait"}})
    hop = Hop(subject="Hank", subject_url="u", answer="Ray", answer_url="p", question="q?", evidence="e")
    chain = Chain(id=f"c{i}", seed_id=f"s{i}", depth=1, hops=[hop], anchor="Hank", anchor_url="u")
    return SynthTask(id=f"t{i}", seed_id=f"s{i}", chain=chain, seed=seed, query="q", answer="a", answers=["a"],
                     modality="text_only")


def _setup():
    """t0: correct+complete but the cited image is not the target; t1: all three; t2: incorrect."""
    tasks = [_task(i) for i in range(3)]
    recs = [EpisodeRecord(id=f"e{i}", task=t.to_task(), config_hash="h", status="answered", trainable=True)
            for i, t in enumerate(tasks)]
    flags = [(True, True, False), (True, True, True), (False, True, True)]
    outcomes = {f"t{i}": [{"episode": f"e{i}", "correct": c, "complete": k, "target_match": m}]
                for i, (c, k, m) in enumerate(flags)}
    return tasks, recs, outcomes


def _sft_ids(out) -> list[str]:
    return [json.loads(line)["id"] for line in (out / "sft_episodes.jsonl").read_text().splitlines()]


def test_default_is_the_papers_correct_and_complete(tmp_path):
    tasks, recs, outcomes = _setup()
    counts = split_outcomes(tasks, recs, outcomes, tmp_path)
    assert _sft_ids(tmp_path) == ["e0", "e1"]
    assert counts["sft"] == 2 and counts["require_target_match"] is False
    assert counts["strata"] == {"solved": 2, "mixed": 0, "unsolved": 1}


def test_require_target_match_option(tmp_path):
    tasks, recs, outcomes = _setup()
    counts = split_outcomes(tasks, recs, outcomes, tmp_path, require_target_match=True)
    assert _sft_ids(tmp_path) == ["e1"]
    assert counts["sft"] == 1 and counts["require_target_match"] is True
    assert counts["strata"] == {"solved": 1, "mixed": 0, "unsolved": 2}


def test_sft_eligible_rule_and_bad_outcome():
    o = {"correct": True, "complete": True, "target_match": False}
    assert sft_eligible(o) and not sft_eligible(o, require_target_match=True)
    assert not sft_eligible({**o, "complete": False})
    with pytest.raises(KeyError, match="target_match"):
        sft_eligible({"correct": True, "complete": True}, require_target_match=True)
