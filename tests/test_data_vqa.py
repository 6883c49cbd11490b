"""POINTS-Seeker QA -> VQA conversion (§3.2.2) on the shared ZIMs: entity extraction and selection, query
de-biasing from the entity page, reformulation around "the person/object in the image", image pairing
through the local web's image search; the model path against a fake OpenAI-compatible endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from kit.data.vqa_convert import (
    LLMVQAConverter,
    OfflineVQAConverter,
    QAItem,
    candidate_spans,
    convert_qa,
    descriptor,
    entity_type_of,
    reformulate,
)


@pytest.fixture(scope="module")
def web(data_dir):
    from kit.data.pipeline import zim_paths
    from kit.web.zim import LocalZimWeb

    return LocalZimWeb(zim_paths(data_dir, ["wikipedia_en_ray_charles_2015-06", "wikipedia_en_ray_charles_maxi_2023-09"]))


def test_text_steps():
    assert candidate_spans("Which record label released Ray Charles's album The Genius of Ray Charles?")[:3] == \
        ["The Genius of Ray Charles", "Genius of Ray Charles", "Ray Charles"]
    assert candidate_spans("which year is it?") == []
    md = "# Ray Charles\n\nRay Charles Robinson (September 23, 1930 – June 10, 2004) was an American singer-songwriter, " \
         "musician, and composer."
    d = descriptor(md, "Ray Charles")
    assert d == "American singer-songwriter" and entity_type_of(d, md) == "person"
    md2 = "# Soul Meeting\n\nSoul Meeting is a 1961 album by [Ray Charles](x) and Milt Jackson."
    assert descriptor(md2, "Soul Meeting") == "1961 album by Ray Charles" and entity_type_of("1961 album") == "object"
    assert descriptor("# X\n\nNo defining sentence here.", "X") == ""
    q = reformulate("What instrument did Hank Crawford's bandmate play with Hank Crawford?", "Hank Crawford", "person")
    assert q == "What instrument did the person in the image's bandmate play with the person in the image?"
    assert reformulate("Hank Crawford was born where?", "Hank Crawford", "person").startswith("The person in the image")


async def test_offline_conversion_on_zim(web, tmp_path):
    qas = [QAItem(id="q2", question="In which city was Hank Crawford born?", answer="Memphis"),
           QAItem(id="q3", question='What instrument did David "Fathead" Newman play in Ray Charles\'s band?',
                  answer="saxophone"),
           QAItem(id="q4", question="which year is it?", answer="2020"),
           QAItem(id="q5", question="Which label released Ray Charles's album The Genius of Ray Charles?",
                  answer="Atlantic Records")]
    files = await convert_qa(qas, OfflineVQAConverter(), web, tmp_path)
    acc = {v.qa_id: v for v in files.accepted.read()}
    rej = {r.item["id"]: r.reason for r in files.rejected.read()}
    assert set(acc) | set(rej) == {"q2", "q3", "q4", "q5"} and rej["q4"] == "no_entity"
    v = acc["q2"]
    assert v.entity == "Hank Crawford" and v.entity_type == "person"
    assert v.question == "In which city was the person in the image born?" and v.answer == "Memphis"
    assert v.search_query.startswith("Hank Crawford ") and len(v.search_query) > len("Hank Crawford ")  # de-biased
    assert Path(v.image).is_file() and "Crawford" in v.image_url + v.image_page_url
    assert "Ray Charles" not in acc["q3"].question and acc["q3"].entity == "Ray Charles"
    t = v.to_task()
    assert t.input_images == [v.image] and t.answers[0] == "Memphis"
    # resume: nothing new is decided
    again = await convert_qa(qas, OfflineVQAConverter(), web, tmp_path)
    assert len(again.accepted.read()) == len(acc) and len(again.rejected.read()) == len(rej)


async def test_offline_conversion_of_chain_hops(web, tmp_path):
    from kit.data.records import Chain, Hop
    from kit.data.vqa_convert import qa_from_chains

    hop = Hop(subject="Hank Crawford", subject_url="u", answer="Ray Charles", answer_url="v",
              question='On the page about "Hank Crawford", one sentence reads: "In 1958 he joined the band of ___." '
                       "Which page does the blank (___) name?", evidence="e")
    chains = [Chain(id="c1", seed_id="s", depth=1, hops=[hop], anchor="Hank Crawford", anchor_url="u"),
              Chain(id="c2", seed_id="s", depth=1, hops=[hop], anchor="Hank Crawford", anchor_url="u")]
    qas = qa_from_chains(chains)
    assert len(qas) == 1  # the same bridge from two chains is converted once
    files = await convert_qa(qas, OfflineVQAConverter(), web, tmp_path)
    [v] = files.accepted.read()
    assert v.question.startswith('On the page about "the person in the image"') and "Crawford" not in v.question


def _policy(replies):
    from kit.policy.openai_client import OpenAIChatPolicy
    from kit.policy.scripted import CharTokenCounter

    seen = []

    def handler(request):
        prompt = json.loads(request.content)["messages"][-1]["content"]
        seen.append(prompt)
        r = replies.pop(0)
        if isinstance(r, int):
            return httpx.Response(r, text="error")
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": r},
                                                      "finish_reason": "stop"}]})

    p = OpenAIChatPolicy("http://claude/v1", "qa2vqa", api_key="k", token_counter=CharTokenCounter(), max_retries=0,
                         transport=httpx.MockTransport(handler))
    p.seen = seen
    return p


async def test_llm_conversion_with_fake_endpoint(web, tmp_path):
    good = json.dumps({"entity": "Ray Charles", "entity_type": "person", "search_query": "Ray Charles American singer",
                       "question": "Which record label signed the person in the image in 1952?"})
    leak = json.dumps({"entity": "Ray Charles", "entity_type": "person", "search_query": "Ray Charles singer",
                       "question": "Which record label signed the person in the image (Ray Charles) in 1952?"})
    pol = _policy([good, leak, 503, "not json", "still no json", "nope", json.dumps({"entity": "X", "entity_type": "tree",
                                                                                     "search_query": "x", "question": "y"})])
    qas = [QAItem(id="a", question="Which record label signed Ray Charles in 1952?", answer="Atlantic Records"),
           QAItem(id="b", question="Which record label signed Ray Charles in 1952?", answer="Atlantic"),
           QAItem(id="c", question="Who produced Ray Charles's early records?", answer="Jerry Wexler"),
           QAItem(id="d", question="Who produced Ray Charles's early records?", answer="Ahmet Ertegun")]
    conv = LLMVQAConverter(pol)
    files = await convert_qa(qas, conv, web, tmp_path, attempts=3)
    [v] = files.accepted.read()
    assert v.qa_id == "a" and v.question == "Which record label signed the person in the image in 1952?"
    assert v.converter.startswith("llm-vqa:") and Path(v.image).is_file() and v.entity_type == "person"
    rej = {r.item["id"]: r.reason for r in files.rejected.read()}
    assert rej == {"b": "entity_still_named", "d": "bad_plan"}
    [f] = files.failed.read()  # 503, then two unparsable replies: retried, then recorded as failed
    assert f.attempts == 3 and "unparsable" in f.error
    assert "Answer: Atlantic Records" in pol.seen[0]
