"""Rule judge (hand-worked cases), LLM judge over an OpenAI-compatible endpoint (httpx mock
transport) with its verdict cache and failures, and the Target Match image judges."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest
from PIL import Image

from kit.eval.judges import (
    LLM_JUDGE_PROMPT_VERSION,
    LLMJudge,
    PerceptualImageJudge,
    RuleJudge,
    VerdictCache,
    VLMImageJudge,
    extract_choice,
    rule_match,
    strip_response,
    token_f1,
)
from kit.policy.openai_client import OpenAIChatPolicy
from kit.policy.scripted import CharTokenCounter


# ------------------------------------------------------------------------------------------ rule judge
def test_strip_response_removes_citations_and_thinking():
    assert strip_response("<think>hmm</think> It is  Paris <IMG: search_image_1.jpg>.") == "It is Paris ."
    assert strip_response(None) == ""


def test_rule_modes_hand_worked():
    j = RuleJudge()
    assert j.score("The Eiffel Tower <IMG: page_image_2.png>", ["Eiffel Tower"]).correct is True
    assert j.score("Parisian food", ["Paris"]).correct is False  # whole words only
    assert j.score("It's in paris, France.", ["Paris"], mode="exact").correct is False
    assert j.score("  PARIS! ", ["paris"], mode="exact").score == 1.0
    assert j.score("Lisboa", ["Lisbon", "Lisboa"], mode="exact").correct is True  # alternatives count
    v = j.score(None, ["x"])
    assert v.score == 0.0 and v.correct is False and v.judge == "rule:contains@rule-v1"
    with pytest.raises(ValueError):
        RuleJudge("fuzzy")
    with pytest.raises(ValueError):
        j.score("a", ["a"], mode="choice")  # choice needs its options
    # the existing helper is unchanged
    assert rule_match("the Eiffel Tower", ["Eiffel Tower"]) == {"exact": True, "contains": True}


def test_token_f1_hand_worked():
    # "the cat sat" -> [cat, sat]; "cat sat down" -> [cat, sat, down]: P = 1, R = 2/3, F1 = 0.8
    assert token_f1("the cat sat", "cat sat down") == pytest.approx(0.8)
    assert token_f1("dog", "cat") == 0.0 and token_f1("", "") == 1.0
    f1 = RuleJudge("f1")
    v = f1.score("Barack Obama", ["Obama", "President Barack Obama"])  # max over references
    assert v.score == pytest.approx(max(2 * 1 * 0.5 / 1.5, 2 * 1 * (2 / 3) / (1 + 2 / 3)))
    assert v.judge == "rule:f1@rule-v1" and v.correct is True
    assert f1.score("no overlap", ["Obama"]).correct is False


def test_choice_mode():
    ch = {"A": "Origami figures", "B": "Glass sculptures", "C": "Painted stones"}
    j = RuleJudge()
    assert extract_choice("(B) Glass sculptures", ch) == "B"
    assert extract_choice("I believe the answer is C.", ch) == "C"
    assert extract_choice("the answer is a vice presidential debate", ch) is None  # lower-case 'a' is a word
    assert extract_choice("A or B", ch) is None  # a hedge picks nothing
    assert j.score("B", ["Glass sculptures"], mode="choice", choices=ch, correct_choice="B").correct is True
    assert j.score("A.", ["Glass sculptures"], mode="choice", choices=ch, correct_choice="B").correct is False
    # no letter: matched by the option text
    assert j.score("They are glass sculptures", ["Glass sculptures"], mode="choice", choices=ch,
                   correct_choice="B").correct is True


# ------------------------------------------------------------------------------------------ LLM judge
def _reply(text: str) -> dict:
    return {"id": "x", "model": "judge", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                      "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def _policy(handler, model="kimi-test") -> OpenAIChatPolicy:
    return OpenAIChatPolicy("http://judge/v1", model, api_key="k", token_counter=CharTokenCounter(), max_retries=0,
                            transport=httpx.MockTransport(handler))


async def test_llm_judge_prompt_verdict_and_cache(tmp_path):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        prompt = body["messages"][0]["content"]
        ok = "Paris" in prompt.split("Agent's answer:")[1]
        return httpx.Response(200, json=_reply("VERDICT: CORRECT" if ok else "Verdict: incorrect"))

    cache = VerdictCache(tmp_path / "verdicts.sqlite")
    judge = LLMJudge(_policy(handler), "kimi-test", cache)
    v = await judge.judge("Capital of France?", ["Paris"], "It is Paris <IMG: search_image_1.jpg>")
    assert v.correct is True and v.score == 1.0 and v.judge == f"llm:kimi-test@{LLM_JUDGE_PROMPT_VERSION}"
    assert seen[0]["temperature"] == 0.0 and "tools" not in seen[0]
    assert "<IMG" not in seen[0]["messages"][0]["content"] and "- Paris" in seen[0]["messages"][0]["content"]
    assert (await judge.judge("Capital of France?", ["Paris"], "Lyon")).correct is False
    assert len(seen) == 2
    again = await judge.judge("Capital of France?", ["Paris"], "It is Paris <IMG: search_image_1.jpg>")
    assert again.cached and again.correct is True and len(seen) == 2  # no new request
    # a new judge on the same cache file reuses it; another model does not
    judge2 = LLMJudge(_policy(handler), "kimi-test", VerdictCache(tmp_path / "verdicts.sqlite"))
    assert (await judge2.judge("Capital of France?", ["Paris"], "Lyon")).cached and len(seen) == 2
    other = LLMJudge(_policy(handler, "other-model"), "other-model", cache)
    assert not (await other.judge("Capital of France?", ["Paris"], "Lyon")).cached and len(seen) == 3
    # empty answers are not sent
    assert (await judge.judge("Q", ["a"], "<IMG: x.png>")).correct is False and len(seen) == 3


async def test_llm_judge_sensitive_items_store_no_raw_text(tmp_path):
    judge = LLMJudge(_policy(lambda r: httpx.Response(200, json=_reply("Reasoning... VERDICT: CORRECT"))), "m",
                     VerdictCache(tmp_path / "c.sqlite"))
    assert (await judge.judge("secret question", ["secret answer"], "secret answer", sensitive=True)).correct
    assert (await judge.judge("public question", ["a"], "a")).correct
    raws = [r[0] for r in sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT raw FROM verdicts")]
    assert sorted(raws, key=str) == sorted([None, "Reasoning... VERDICT: CORRECT"], key=str)
    dump = (tmp_path / "c.sqlite").read_bytes()
    assert b"secret" not in dump


async def test_llm_judge_endpoint_failure_and_unparseable_reply(tmp_path):
    failing = LLMJudge(_policy(lambda r: httpx.Response(500, text="server exploded")), "m", VerdictCache(None))
    v = await failing.judge("Q?", ["Paris"], "Paris")
    assert v.correct is None and v.score == 0.0 and "judge endpoint failed" in v.error
    assert len(failing.cache) == 0  # failures are never cached
    fb = LLMJudge(_policy(lambda r: httpx.Response(500)), "m", fallback=RuleJudge())
    v = await fb.judge("Q?", ["Paris"], "Paris")
    assert v.correct is True and "fallback from llm:m" in v.judge and v.error
    garbled = LLMJudge(_policy(lambda r: httpx.Response(200, json=_reply("I think so"))), "m")
    v = await garbled.judge("Q?", ["Paris"], "Paris")
    assert v.correct is None and "unparseable" in v.error


# ------------------------------------------------------------------------------------------ image judges
async def test_perceptual_image_judge(tmp_path, data_dir):
    imgs = sorted((data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images").glob("*.png"))[:2]
    a, b = imgs
    thumb = tmp_path / "thumb.jpg"
    with Image.open(a) as im:
        im.convert("RGB").resize((im.width // 3, im.height // 3)).save(thumb, quality=70)
    j = PerceptualImageJudge()  # the kit's one "same picture" decision (kit.images.same_picture)
    same = await j.judge(a, a)
    assert same.match is True and same.distance == 0
    t = await j.judge(thumb, a)
    assert t.match is True and t.distance <= 10  # resized + recompressed copy
    d = await j.judge(b, a)
    assert d.match is False and d.distance > j.max_distance
    missing = await j.judge(tmp_path / "nope.png", a)
    assert missing.match is None and "No such file" in missing.error
    assert j.name == "image:phash+dhash<=26" and PerceptualImageJudge(10).name == "image:phash+dhash<=10"


async def test_vlm_image_judge_sends_both_images_and_caches(tmp_path, data_dir):
    imgs = sorted((data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images").glob("*.png"))[:2]
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        parts = body["messages"][0]["content"]
        n_img = sum(p["type"] == "image_url" for p in parts)
        same = parts[0]["image_url"]["url"] == parts[1]["image_url"]["url"]
        return httpx.Response(200, json=_reply(f"VERDICT: {'SAME' if same and n_img == 2 else 'DIFFERENT'}"))

    j = VLMImageJudge(_policy(handler, "vlm"), "vlm", VerdictCache(tmp_path / "img.sqlite"))
    assert (await j.judge(imgs[0], imgs[0])).match is True
    assert (await j.judge(imgs[1], imgs[0])).match is False
    cached = await j.judge(imgs[0], imgs[0])
    assert cached.cached and len(calls) == 2
    bad = VLMImageJudge(_policy(lambda r: httpx.Response(503), "vlm"), "vlm")
    v = await bad.judge(imgs[0], imgs[1])
    assert v.match is None and "judge endpoint failed" in v.error
