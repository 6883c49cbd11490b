"""Issue 27 part 3: the demonstrator's answers are whole (never cut at an abbreviation or mid-sentence by
its own truncation) and the image it cites names the answer's subject."""

from __future__ import annotations

from kit.data.normalize.trainable import answer_cut, citation_mismatches, first_sentence
from kit.harness.episode import EpisodeRecord, RegisteredImage, Task
from kit.policy.demonstrator import DemonstratorPolicy
from kit.types import ContentPart, Message

TOOLS = [{"type": "function", "function": {"name": n}} for n in
         ("web_search_based_on_image", "web_search", "web_extract", "web_search_for_image")]


def _msg(role, text, name=None):
    return Message(role=role, name=name, content=[ContentPart(type="text", text=text)])


def _episode(page_text: str, image_block: str) -> list[Message]:
    search = ("## Query: abbey founded\n1. Melrose Abbey\n   URL: zim://w/A/Melrose_Abbey\n   Snippet: …abbey…\n"
              "2. London\n   URL: zim://w/A/London\n")
    extract = f"## Melrose Abbey\nURL: zim://w/A/Melrose_Abbey\n\n{page_text}"
    return [_msg("system", "s"), _msg("user", "Which abbey was founded by monks here?"),
            _msg("assistant", "<think>a</think>"), _msg("tool", search, "web_search"),
            _msg("assistant", "<think>b</think>"), _msg("tool", extract, "web_extract"),
            _msg("assistant", "<think>c</think>"), _msg("tool", image_block, "web_search_for_image")]


IMAGES = ("## Query: Melrose Abbey\n"
          "[Image 1] search_image_1.jpg — The Blues Brothers (film) (wiki)\n   Page: zim://w/A/The_Blues_Brothers_(film)\n"
          "   Caption: The Bluesmobile races through the mall.\n"
          "[Image 2] search_image_2.jpg — Melrose Abbey (wiki)\n   Page: zim://w/A/Melrose_Abbey\n"
          "   Caption: The east end of the abbey church.\n")


def _final(msgs):
    text = DemonstratorPolicy().next_text(msgs, TOOLS)
    return text.split("<response>", 1)[1].split("</response>", 1)[0]


def test_answer_is_never_cut_at_an_abbreviation():
    page = ("**Melrose Abbey** is a partly ruined monastery built c. 1136 by Cistercian monks at the request of "
            "King David I. It lies in the Scottish Borders.")
    ans = _final(_episode(page, IMAGES))
    assert "built c. 1136 by Cistercian monks at the request of King David I." in ans
    assert answer_cut(ans) is None and not ans.split("<IMG", 1)[0].rstrip().endswith("c.")


def test_answer_is_never_cut_mid_sentence():
    long_sentence = "Melrose Abbey " + "was rebuilt and enlarged over many centuries " * 12 + "until the Reformation."
    ans = _final(_episode(long_sentence + " Next sentence.", IMAGES))
    body = ans.split("<IMG", 1)[0].strip()
    assert body == "Melrose Abbey."  # the sentence is too long to add whole: left out, never cut
    assert answer_cut(ans) is None
    ans2 = _final(_episode("Melrose Abbey (lit. 'bare moor', also U.S. sources) is in Scotland. More.", IMAGES))
    assert "is in Scotland." in ans2 and answer_cut(ans2) is None


def test_cited_image_names_the_answers_subject():
    ans = _final(_episode("Melrose Abbey is a monastery.", IMAGES))
    assert ans.startswith("Melrose Abbey.") and ans.endswith("<IMG: search_image_2.jpg>")
    only_other = IMAGES.split("[Image 2]")[0]
    assert "<IMG:" not in _final(_episode("Melrose Abbey is a monastery.", only_other))  # no image supports it


def test_checks_find_cut_answers_and_mismatched_citations():
    assert answer_cut("London. It was built c.") == "abbreviation"
    assert answer_cut("United States. The United States of America (U.S.A.") == "open_bracket"
    assert answer_cut("Taxonomy. It is the study of naming, defining and classifying groups of biologica") \
        == "mid_sentence"
    assert answer_cut("Martin Luther King Jr.") is None and answer_cut("Ray Charles") is None
    assert first_sentence("It was built c. 1850 by monks. Then it burned.") == "It was built c. 1850 by monks."
    imgs = [RegisteredImage(ref=f"search_image_{i}", filename=f"search_image_{i}.jpg", kind="search_image", title=t,
                            page_url=f"zim://w/A/{t.replace(' ', '_')}", sha256="0" * 64, width=1, height=1, mime="image/jpeg")
            for i, t in ((1, "The Blues Brothers (film)"), (2, "London"))]
    rec = EpisodeRecord(id="x", task=Task(id="x", question="q"), config_hash="h", policy="p", backend="b",
                        images=imgs, final_response="London. London is a city. <IMG: search_image_1.jpg>",
                        cited_images=["search_image_1.jpg"])
    assert [m["image"] for m in citation_mismatches(rec)] == ["search_image_1.jpg"]
    assert citation_mismatches(rec.model_copy(update={"cited_images": ["search_image_2.jpg"]})) == []
