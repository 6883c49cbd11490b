"""LiveVQA multiple choice -> open-ended RL prompts (POINTS-Seeker App. A.4) on the real LiveVQA sample."""

import json
import random
import re
import shutil

import pytest

from kit.data.livevqa_open import REASONS, open_ended, open_livevqa_split, strip_options
from kit.eval.loaders import load_livevqa
from kit.harness.episode import Task
from kit.rl.prompts import load_rl_prompts, rl_prompts_problem


@pytest.fixture(scope="module")
def root(data_dir):
    r = data_dir / "benchmarks" / "livevqa_news_sample"
    if not (r / "benchmark.sample.json").is_file():
        pytest.skip(f"LiveVQA sample not found at {r} (shared/data/benchmarks/livevqa_news_sample)")
    return r


@pytest.fixture(scope="module")
def loaded(root):
    return load_livevqa(root)


@pytest.fixture(scope="module")
def raw(root):
    return {r["id"]: r for r in json.loads((root / "benchmark.sample.json").read_text())}


def _mc(tasks):
    return [t for t in tasks if t.metadata.get("rule_mode") == "choice"]


def test_real_rows_all_converted_or_rejected(loaded, raw, tmp_path):
    mc = _mc(loaded.tasks)
    assert len(loaded.tasks) == 60 and len(mc) == 30  # level 1 multiple choice, level 2 open
    res = open_livevqa_split(loaded, tmp_path)
    s = res.summary
    assert s["input"] == 60 and s["converted"] + s["already_open"] + s["kept_mc"] + sum(s["rejected"].values()) == 60
    assert s["already_open"] == 30 and s["kept_mc"] == 0 and s["loader_problems"] == 0
    assert all(r.reason in REASONS for r in res.rejections)
    assert s["converted"] + sum(s["rejected"].values()) == 30
    rejected = {r.id for r in res.rejections}
    by_id = {t.id: t for t in res.tasks}
    for t in mc:
        if t.id in rejected:
            continue
        o = by_id[t.id]
        letter, options = t.metadata["correct_choice"], t.metadata["choices"]
        assert o.answers[0] == options[letter] and o.answers[0] == t.answers[0]
        assert not re.search(r"(?m)^\s*\(?[A-E][.):]\s", o.question) and "Options" not in o.question
        assert "letter" not in o.question and not any(v in o.question for v in options.values())
        # the open question is exactly the row's original stem
        assert o.question == raw[t.metadata["livevqa_id"]]["level1_qa"]["question"].strip()
        assert o.input_images == t.input_images and o.source == "livevqa_news_l1_open"
        assert not {"choices", "correct_choice", "rule_mode"} & set(o.metadata)
        prov = o.metadata["livevqa_open"]
        assert prov["original_question"] == t.question and prov["options"] == options and prov["letter"] == letter
        assert o.metadata["livevqa_id"] == t.metadata["livevqa_id"] and o.metadata["question_format"] == "open"
        assert not any(re.fullmatch(r"[A-E]", a) for a in o.answers)
    for t in loaded.tasks:
        if t.metadata["level"] == 2:
            assert by_id[t.id] == t  # already open: unchanged
    # the RL prompt file is what notebook 05 / kit.rl.prompts reads
    assert rl_prompts_problem(tmp_path) is None
    back = load_rl_prompts(tmp_path, tmp_path / "img")
    assert [t.id for t in back] == [t.id for t in res.tasks]
    assert json.loads((tmp_path / "livevqa_open_summary.json").read_text()) == s


def test_real_rows_all_convert_with_the_rule(loaded):
    # every real multiple-choice row has a plain stem: the rule converts all 30
    assert open_livevqa_split(loaded).summary["converted"] == 30


def test_deterministic_and_order_independent(loaded, tmp_path):
    a = open_livevqa_split(loaded, tmp_path / "a", fraction=0.5, seed=3)
    b = open_livevqa_split(loaded, tmp_path / "b", fraction=0.5, seed=3)
    assert (tmp_path / "a" / "rl_prompts.jsonl").read_bytes() == (tmp_path / "b" / "rl_prompts.jsonl").read_bytes()
    shuffled = list(loaded.tasks)
    random.Random(1).shuffle(shuffled)
    c = open_livevqa_split(shuffled, fraction=0.5, seed=3)
    conv = lambda r: {t.id for t in r.tasks if t.metadata.get("question_format") == "open"}  # noqa: E731
    assert conv(a) == conv(b) == conv(c)


def test_fraction(loaded):
    half = open_livevqa_split(loaded, fraction=0.5, seed=0)
    assert half.summary["converted"] == 15 and half.summary["kept_mc"] == 15 and len(half.tasks) == 60
    orig = {t.id: t for t in loaded.tasks}
    kept = [t for t in half.tasks if t.metadata.get("rule_mode") == "choice"]
    assert len(kept) == 15 and all(t == orig[t.id] for t in kept)  # unselected: unchanged multiple choice
    other = open_livevqa_split(loaded, fraction=0.5, seed=1)
    ids = lambda r: {t.id for t in r.tasks if t.metadata.get("question_format") == "open"}  # noqa: E731
    assert ids(half) != ids(other)
    assert open_livevqa_split(loaded, fraction=0.0).summary["converted"] == 0
    assert open_livevqa_split(loaded, fraction=0.0).summary["kept_mc"] == 30
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            open_livevqa_split(loaded, fraction=bad)


def _variant(t, suffix, **md):
    return t.model_copy(update={"id": t.id + suffix, "metadata": {**t.metadata, **md}})


def test_bad_rows_rejected_with_reasons(loaded, tmp_path):
    t = _mc(loaded.tasks)[0]
    ch = t.metadata["choices"]
    letter = t.metadata["correct_choice"]
    bad = [
        _variant(t, "_oor", correct_choice="F"),
        _variant(t, "_nolet", correct_choice=""),
        _variant(t, "_empty", choices={}),
        _variant(t, "_blank", choices={**ch, letter: ""}),
        _variant(t, "_dup", choices={**ch, "Z" if letter != "Z" else "Y": ch[letter]}),
        _variant(t, "_all", choices={**ch, letter: "All of the above"}).model_copy(update={"answers": ["All of the above"]}),
        t.model_copy(update={"id": t.id + "_mism", "answers": ["something else"]}),
        t.model_copy(update={"id": t.id + "_needs",
                             "question": t.question.replace("Based on the provided image, what event is taking place?",
                                                            "Which of the following events is taking place?")}),
    ]
    want = ["answer_letter_not_in_options", "answer_letter_not_in_options", "options_missing", "empty_answer_option",
            "ambiguous_options", "answer_refers_to_options", "answer_mismatch", "question_needs_options"]
    for b, w in zip(bad, want):
        o = open_ended(b)
        assert (o.status, o.reason, o.task) == ("rejected", w, None), b.id
    res = open_livevqa_split([*loaded.tasks, *bad], tmp_path)
    s = res.summary
    assert s["input"] == 68 and s["converted"] + s["already_open"] + s["kept_mc"] + sum(s["rejected"].values()) == 68
    assert sum(s["rejected"].values()) == 8 and s["rejected"]["answer_letter_not_in_options"] == 2
    lines = [json.loads(x) for x in (tmp_path / "livevqa_open_rejected.jsonl").read_text().splitlines()]
    assert sorted(x["id"] for x in lines) == sorted(b.id for b in bad)
    assert all(x["stage"] == "livevqa_open" and x["item"]["question"] for x in lines)
    assert not {b.id for b in bad} & {x.id for x in res.tasks}
    with pytest.raises(ValueError, match="duplicate"):
        open_livevqa_split([t, t])


def test_loader_problems_reported(root, tmp_path):
    rows = json.loads((root / "benchmark.sample.json").read_text())[:3]
    (tmp_path / "images").mkdir()
    for r in rows:
        shutil.copy(root / "images" / r["img_path"], tmp_path / "images")
    rows[1]["level1_qa"]["Ground_Truth"] = "H"  # letter out of range: the loader refuses the row
    (tmp_path / "b.json").write_text(json.dumps(rows))
    res = open_livevqa_split(load_livevqa(tmp_path))
    assert res.summary["loader_problems"] == 1 and res.summary["input"] == 4
    assert [r.reason for r in res.rejections] == ["load_failed"] and "Ground_Truth" in res.rejections[0].detail


def test_rewriter_only_for_stems_the_rule_cannot_open(loaded):
    t = _mc(loaded.tasks)[0]
    needs = t.model_copy(update={"question": "Which of the following events is shown?\n\nOptions:\n" +
                                 "\n".join(f"{k}. {v}" for k, v in t.metadata["choices"].items())})
    calls = []

    def rw(stem, options, answer):
        calls.append(stem)
        return "What event is shown?"

    assert open_ended(t, rewriter=rw).task.metadata["livevqa_open"]["rewrite"] == "rule" and calls == []
    o = open_ended(needs, rewriter=rw)
    assert o.status == "converted" and o.task.question == "What event is shown?"
    assert o.task.metadata["livevqa_open"]["rewrite"] == "rewriter" and calls == ["Which of the following events is shown?"]
    assert open_ended(needs, rewriter=lambda *a: None).reason == "rewriter_declined"
    assert open_ended(needs, rewriter=lambda *a: 1 / 0).reason == "rewriter_error"
    assert open_ended(needs, rewriter=lambda *a: "Which is it?\nA. x\nB. y").reason == "options_left_in_question"


def test_options_in_question_text_and_letter_answer():
    t = Task(id="q1", question="Who founded the company?\nA. Ada Lovelace\nB. Grace Hopper\nAnswer with the letter.",
             answers=["B"], input_images=["x.png"])
    o = open_ended(t)
    assert o.status == "converted" and o.task.question == "Who founded the company?"
    assert o.task.answers == ["Grace Hopper"] and o.task.metadata["livevqa_open"]["letter"] == "B"
    assert open_ended(Task(id="q2", question="What is shown?", answers=["a cat"])).status == "already_open"
    assert strip_options("Choose the correct answer: what is shown?", {}) == "what is shown?"


def test_the_command_writes_rl_prompts_notebook_05_reads_and_refuses_a_bad_release(tmp_path, data_dir, capsys):
    from kit.cli import main
    from kit.rl.prompts import load_rl_prompts

    root = data_dir / "benchmarks" / "livevqa_news_sample"
    if not root.is_dir():
        pytest.skip(f"no LiveVQA sample at {root}")
    assert main(["livevqa-open", str(root), "--out", str(tmp_path / "o")]) == 0
    summary = json.loads((tmp_path / "o" / "livevqa_open_summary.json").read_text())
    tasks = load_rl_prompts(str(tmp_path / "o"), tmp_path / "img")
    assert len(tasks) == summary["prompts"] and summary["converted"] > 0
    assert main(["livevqa-open", str(tmp_path), "--out", str(tmp_path / "x")]) == 2
    assert main(["livevqa-open", str(root), "--out", str(tmp_path / "y"), "--fraction", "1.5"]) == 2
    assert "fraction" in capsys.readouterr().err
