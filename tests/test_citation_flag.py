"""Issue 27 part 3: an expert trajectory citing an image whose page and caption name another entity than its answer
is flagged on the record (event ``citation_mismatch``) and in its outcome; an image of the answer's own page is not."""

from __future__ import annotations

from types import SimpleNamespace

from kit.data.sample import judge_episode
from kit.harness.episode import EpisodeRecord, RegisteredImage, Task
from kit.harness.events import EventType


def _record(title: str, page: str) -> EpisodeRecord:
    img = RegisteredImage(filename="search_image_1.png", ref="search_image_1", kind="search_image", sha256="0" * 64,
                          title=title, page_url=page, width=10, height=10, mime="image/png")
    return EpisodeRecord(id="e", config_hash="c", task=Task(id="t", question="Who recorded the album?", answers=["Ray Charles"]),
                         final_response="Ray Charles. <IMG: search_image_1.png>", cited_images=["search_image_1.png"],
                         images=[img], status="answered", trainable=True)


def _task():
    fact = SimpleNamespace(kind="text")
    return SimpleNamespace(answers=["Ray Charles"], seed=SimpleNamespace(fact=fact, target=SimpleNamespace(sha256="1", path="/x")))


def test_an_image_of_another_entity_is_flagged_on_the_record_and_the_outcome():
    rec = _record("Norah Jones", "https://en.wikipedia.org/wiki/Norah_Jones")
    out = judge_episode(_task(), rec)
    assert out["correct"] and out["citation_mismatch"]
    (ev,) = [e for e in rec.events if e.type == EventType.CITATION_MISMATCH]
    assert ev.detail["images"][0]["image"] == "search_image_1.png"
    judge_episode(_task(), rec)
    assert [e.type for e in rec.events].count(EventType.CITATION_MISMATCH) == 1  # judged twice, flagged once


def test_an_image_of_the_answers_page_is_not_flagged():
    rec = _record("Ray Charles", "https://en.wikipedia.org/wiki/Ray_Charles")
    assert judge_episode(_task(), rec)["citation_mismatch"] is False and not rec.events
