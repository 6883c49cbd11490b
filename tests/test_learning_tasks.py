"""Issue 33 part 1: the learnable task set. Well formed, split into train and held-out, and every task's answer is
on its supporting page of the shared archives (checked with the kit's own local web)."""

from __future__ import annotations

import json

import pytest

from kit.data.demo_tasks import DEMO_SOURCE, read_demo_rows
from kit.data.learning_tasks import (
    LEARNING_SOURCE,
    LearningTaskError,
    learning_archives,
    load_learning_tasks,
    read_learning_rows,
)
from kit.eval.judges import normalize_answer, rule_match
from kit.eval.vistarget import VERIFY_QUESTION

DEFAULT_ARCHIVES = ["wikipedia_en_100_mini_2022-10", "wikipedia_en_ray_charles_2015-06",
                    "wikipedia_en_ray_charles_maxi_2023-09"]


def test_task_file_is_well_formed_split_and_uses_the_default_archives():
    rows = read_learning_rows()
    assert len(rows) == 60 and learning_archives(rows) == DEFAULT_ARCHIVES
    kinds = {k: [r for r in rows if r["kind"] == k] for k in ("claim", "title", "demo")}
    assert [len(v) for v in kinds.values()] == [25, 25, 10]
    assert {r["id"] for r in kinds["demo"]} == {r["id"] for r in read_demo_rows()}  # the demo tasks are a subset
    held = [r for r in rows if r["split"] == "heldout"]
    assert 10 <= len(held) <= 20 and {r["kind"] for r in held} == {"claim", "title", "demo"}
    claims = kinds["claim"]
    yes = sum(r["answers"] == ["yes"] for r in claims)
    assert 10 <= yes <= 15 and all(r["answers"] in (["yes"], ["no"]) and r["rule_mode"] == "exact" for r in claims)
    for r in claims:  # the question is the kit's claim check; yes exactly when the claimed title is the page's
        assert r["question"] == VERIFY_QUESTION.format(caption=r["evidence"], title=r["claimed_title"]), r["id"]
        same = normalize_answer(r["claimed_title"]) == normalize_answer(r["page_title"])
        assert r["answers"] == (["yes"] if same else ["no"]), r["id"]
    # the claim about a picture is in the split of the title question about it (no held-out leak)
    split_of = {(r["page"]["path"], r["evidence"]): r["split"] for r in kinds["title"]}
    assert all(split_of[(r["page"]["path"], r["evidence"])] == r["split"] for r in claims)


def test_loader_splits_and_checks_its_inputs(tmp_path):
    train = load_learning_tasks("train", kinds=["claim", "title"])
    held = load_learning_tasks("heldout", kinds=["claim", "title"])
    assert len(train) + len(held) == 50 and not {t.id for t in train} & {t.id for t in held}
    t = next(t for t in train if t.metadata["kind"] == "claim")
    assert t.source == LEARNING_SOURCE and t.metadata["rule_mode"] == "exact" and t.input_images == []
    assert t.metadata["page"]["url"].startswith("zim://")
    with pytest.raises(LearningTaskError, match="unknown split"):
        load_learning_tasks("test")
    with pytest.raises(LearningTaskError, match="unknown kinds"):
        load_learning_tasks(kinds=["nope"])
    bad = tmp_path / "t.json"
    row = read_learning_rows()[0]
    bad.write_text(json.dumps([row, row]))
    with pytest.raises(LearningTaskError, match="appears twice"):
        read_learning_rows(bad)
    bad.write_text(json.dumps([{**row, "split": "dev"}]))
    with pytest.raises(LearningTaskError, match="split"):
        read_learning_rows(bad)
    bad.write_text(json.dumps([{k: v for k, v in row.items() if k != "page"}]))
    with pytest.raises(LearningTaskError, match="missing page"):
        read_learning_rows(bad)


@pytest.fixture(scope="module")
def web(data_dir):
    from kit.web import local_zim_paths, open_local_web

    w = open_local_web(local_zim_paths(data_dir=data_dir, names=DEFAULT_ARCHIVES))
    w.ensure_ready()
    return w


def _states(page_markdown: str, phrase: str) -> bool:
    return normalize_answer(phrase) in normalize_answer(page_markdown)


def test_every_answer_is_on_its_supporting_page(web, data_dir, tmp_path):
    """The test that fails when a task stops being answerable from the shared archives."""
    from kit.web import local_zim_paths
    from kit.web.urls import zim_url

    tasks = load_learning_tasks(zim_paths=local_zim_paths(data_dir=data_dir, names=DEFAULT_ARCHIVES),
                                image_dir=tmp_path)
    assert [t.id for t in tasks] == [r["id"] for r in read_learning_rows()]
    for t, r in zip(tasks, read_learning_rows()):
        page = web.fetch_sync(zim_url(r["page"]["archive"], r["page"]["path"]))
        assert _states(page.markdown, r["evidence"]), (t.id, r["evidence"])
        if r["kind"] == "demo":
            assert t.source == DEMO_SOURCE and rule_match(r["evidence"], t.answers)["contains"], t.id
            continue
        # the page is the captioned picture's page and its title is the answer (title) / the claim's subject
        assert normalize_answer(page.title) == normalize_answer(r["page_title"]), (t.id, page.title)
        assert any(normalize_answer(r["evidence"]) == normalize_answer(i.caption or "") for i in page.images), t.id
        if r["kind"] == "title":
            assert rule_match(page.title, t.answers)["contains"], t.id
        # the picture exists in its archive
        (img,) = web.fetch_sync(zim_url(r["image"]["archive"], r["image"]["path"])).images
        assert img.content and img.mime.startswith("image/"), t.id
