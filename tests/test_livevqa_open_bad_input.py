"""livevqa-open on malformed releases and bad items: clear errors, rejections with reasons, nothing dropped
silently (real LiveVQA rows from shared/data, altered one field at a time)."""

import copy
import json
import shutil

import pytest

from kit.cli import main
from kit.data.livevqa_open import REASONS, open_ended, open_livevqa_split
from kit.eval.loaders import load_livevqa
from kit.harness.episode import Task


@pytest.fixture(scope="module")
def root(data_dir):
    r = data_dir / "benchmarks" / "livevqa_news_sample"
    if not (r / "benchmark.sample.json").is_file():
        pytest.skip(f"LiveVQA sample not found at {r} (shared/data/benchmarks/livevqa_news_sample)")
    return r


@pytest.fixture(scope="module")
def rows(root):
    return json.loads((root / "benchmark.sample.json").read_text())


def _release(tmp_path, root, rows, *, images=True, name="b.json", text=None):
    """A release folder holding ``rows`` (or the raw ``text``) and, with ``images``, their image files."""
    rel = tmp_path / "rel"
    rel.mkdir()
    (rel / name).write_text(text if text is not None else json.dumps(rows))
    if images:
        (rel / "images").mkdir()
        for r in rows:
            shutil.copy(root / "images" / r["img_path"], rel / "images")
    return rel


def _run(rel, out, capsys):
    code = main(["livevqa-open", str(rel), "--out", str(out)])
    return code, capsys.readouterr()


def _rejected(out):
    return {x["id"]: x for x in map(json.loads, (out / "livevqa_open_rejected.jsonl").read_text().splitlines())}


@pytest.mark.parametrize("text,what", [('{"items": []}', "dict"), ("null", "null"), ('"rows"', "str")])
def test_json_top_level_not_a_list_exits_2_naming_the_file(tmp_path, root, rows, capsys, text, what):
    rel = _release(tmp_path, root, rows[:2], text=text)
    code, cap = _run(rel, tmp_path / "o", capsys)
    assert code == 2 and cap.out == ""
    err = cap.err.strip()
    assert "\n" not in err and "b.json" in err and what in err and "list" in err
    assert not (tmp_path / "o" / "rl_prompts.jsonl").exists()


def test_one_bad_json_file_beside_a_good_one_exits_2(tmp_path, root, rows, capsys):
    rel = _release(tmp_path, root, rows[:2])
    (rel / "c.json").write_text("{not json")
    code, cap = _run(rel, tmp_path / "o", capsys)
    assert code == 2 and "c.json" in cap.err and "JSONDecodeError" in cap.err


def test_missing_images_folder_exits_2(tmp_path, root, rows, capsys):
    rel = _release(tmp_path, root, rows[:2], images=False)
    code, cap = _run(rel, tmp_path / "o", capsys)
    assert code == 2 and "images" in cap.err and str(rel) in cap.err and "\n" not in cap.err.strip()
    assert not (tmp_path / "o").exists()


def test_missing_folder_and_empty_list_exit_2(tmp_path, root, rows, capsys):
    code, cap = _run(tmp_path / "nowhere", tmp_path / "o", capsys)
    assert code == 2 and "nowhere" in cap.err and "folder" in cap.err
    rel = _release(tmp_path, root, [])
    code, cap = _run(rel, tmp_path / "o", capsys)
    assert code == 2 and "no usable rows" in cap.err and "b.json" in cap.err
    assert not (tmp_path / "o" / "rl_prompts.jsonl").exists()


def test_missing_image_files_rejected_with_reason_and_counted(tmp_path, root, rows, capsys):
    rel = _release(tmp_path, root, rows[:3])
    (rel / "images" / rows[1]["img_path"]).unlink()
    out = tmp_path / "o"
    code, cap = _run(rel, out, capsys)
    assert code == 0
    summary = json.loads((out / "livevqa_open_summary.json").read_text())
    assert summary["loader_problems"] == 1 and summary["prompts"] == 4
    rej = _rejected(out)
    assert rej[rows[1]["id"]]["reason"] == "load_failed" and "not found" in rej[rows[1]["id"]]["detail"]
    assert "1 row" in cap.err and "livevqa_open_rejected.jsonl" in cap.err


def test_all_image_files_missing_exits_2(tmp_path, root, rows, capsys):
    rel = _release(tmp_path, root, rows[:3])
    for r in rows[:3]:
        (rel / "images" / r["img_path"]).unlink()
    code, cap = _run(rel, tmp_path / "o", capsys)
    err = cap.err.strip()
    assert code == 2 and "no usable rows" in err and "3 rows" in err and "not found" in err and "\n" not in err
    assert not (tmp_path / "o" / "rl_prompts.jsonl").exists()


def test_all_items_rejected_exits_2(tmp_path, root, rows, capsys):
    bad = copy.deepcopy(rows[:1])
    bad[0]["level1_qa"]["Ground_Truth_List"].append(None)
    bad[0]["level2_qa"]["Ground_Truth_List"].append({"n": 1})
    code, cap = _run(_release(tmp_path, root, bad), tmp_path / "o", capsys)
    assert code == 2 and "no usable rows" in cap.err and "answer_not_text" in cap.err


def test_reason_keys_added():
    assert {"duplicate_option_letters", "answer_names_other_option", "answer_not_text"} <= set(REASONS)


def test_duplicate_option_letters_in_the_release_rejected(tmp_path, root, rows, capsys):
    bad = copy.deepcopy(rows[:2])
    opts = bad[0]["level1_qa"]["options"]
    opts[2] = "A." + opts[2][2:]  # two "A." options: the loader keeps one, the item is wrong data
    out = tmp_path / "o"
    code, _ = _run(_release(tmp_path, root, bad), out, capsys)
    assert code == 0
    rej = _rejected(out)
    l1 = f"livevqa_{bad[0]['id']}_l1"
    assert rej[l1]["reason"] == "duplicate_option_letters" and "A" in rej[l1]["detail"]
    assert set(rej) == {l1}  # its level-2 task and the other row are fine
    # the same through the API on a loaded split
    res = open_livevqa_split(load_livevqa(out.parent / "rel"))
    assert res.summary["rejected"] == {"duplicate_option_letters": 1}


def test_duplicate_option_letters_in_question_or_metadata_rejected():
    t = Task(id="q", question="Who founded it?\nA. Ada Lovelace\nA. Grace Hopper\nB. Alan Turing", answers=["B"])
    assert open_ended(t).reason == "duplicate_option_letters"
    m = Task(id="m", question="Who founded it?", answers=["Ada Lovelace"],
             metadata={"choices": {"A": "Ada Lovelace", "a": "Grace Hopper", "B": "Alan Turing"},
                       "correct_choice": "A", "rule_mode": "choice"})
    assert open_ended(m).reason == "duplicate_option_letters"


def test_answer_naming_another_option_rejected(root):
    t = next(x for x in load_livevqa(root).tasks if x.metadata["level"] == 1)
    letter, ch = t.metadata["correct_choice"], t.metadata["choices"]
    other = next(k for k in ch if k != letter)
    for extra in (ch[other], f"  {ch[other].upper()} ", other):
        o = open_ended(t.model_copy(update={"answers": [*t.answers, extra]}))
        assert (o.status, o.reason) == ("rejected", "answer_names_other_option"), extra
        assert other in o.detail
    ok = open_ended(t.model_copy(update={"answers": [*t.answers, letter]}))  # the correct letter: dropped, fine
    assert ok.status == "converted" and letter not in ok.task.answers


def test_answer_naming_another_option_in_the_release_rejected(tmp_path, root, rows, capsys):
    bad = copy.deepcopy(rows[:2])
    qa = bad[1]["level1_qa"]
    wrong = next(o[3:] for o in qa["options"] if o[0] != qa["Ground_Truth"])
    qa["Ground_Truth_List"].append(wrong)
    out = tmp_path / "o"
    assert _run(_release(tmp_path, root, bad), out, capsys)[0] == 0
    assert _rejected(out)[f"livevqa_{bad[1]['id']}_l1"]["reason"] == "answer_names_other_option"


@pytest.mark.parametrize("entry", [None, {"name": "2023"}, ["2023"], True, 2023.0])
def test_non_text_answer_entries_rejected_never_stringified(tmp_path, root, rows, capsys, entry):
    year = next(r for r in rows if r["level1_qa"]["Ground_Truth_List"][0] == "2023")
    bad = copy.deepcopy([year, rows[0]])
    bad[0]["level1_qa"]["Ground_Truth_List"].append(entry)
    bad[0]["level2_qa"]["Ground_Truth_List"].append(entry)
    out = tmp_path / "o"
    code, _ = _run(_release(tmp_path, root, bad), out, capsys)
    assert code == 0
    rej = _rejected(out)
    for lv in (1, 2):
        r = rej[f"livevqa_{year['id']}_l{lv}"]
        assert r["reason"] == "answer_not_text" and "Ground_Truth_List[" in r["detail"]
    prompts = (out / "rl_prompts.jsonl").read_text()
    assert "None" not in prompts and "{'name'" not in prompts and "True" not in prompts
    assert len(prompts.splitlines()) == 2  # the other row's two tasks


def test_int_year_answer_kept_as_its_text(tmp_path, root, rows, capsys):
    year = copy.deepcopy(next(r for r in rows if r["level1_qa"]["Ground_Truth_List"][0] == "2023"))
    year["level1_qa"]["Ground_Truth_List"] = [2023, "the year 2023"]
    out = tmp_path / "o"
    assert _run(_release(tmp_path, root, [year]), out, capsys)[0] == 0
    l1 = next(t for t in map(json.loads, (out / "rl_prompts.jsonl").read_text().splitlines())
              if t["id"].endswith("_l1"))
    assert l1["answers"] == ["2023", "the year 2023"] and l1["metadata"]["question_format"] == "open"


def test_non_text_answers_on_a_task_rejected():
    base = Task(id="q", question="Who founded it?\nA. Ada Lovelace\nB. Grace Hopper", answers=["B"])
    for entry in (None, {"x": 1}, ["y"], 2.5):
        o = open_ended(Task.model_construct(**{**base.model_dump(), "answers": ["B", entry]}))
        assert (o.status, o.reason) == ("rejected", "answer_not_text"), entry
    o = open_ended(Task.model_construct(**{**base.model_dump(), "answers": ["B", 1843]}))
    assert o.status == "converted" and o.task.answers == ["Grace Hopper", "1843"]
    opened = Task.model_construct(id="o", question="What is shown?", answers=["a cat", None], metadata={})
    assert open_ended(opened).reason == "answer_not_text"
