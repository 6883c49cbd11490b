"""Benchmark loaders on the real shared files, the canary cipher, and hub-format loaders on local
copies laid out like the published repositories (the Hub is unreachable here)."""

from __future__ import annotations

import base64
import io
import json
import shutil

import pytest
from conftest import png_bytes
from PIL import Image

from kit.eval.benchmarks import load_benchmark, parse_spec
from kit.eval.crypto import DecryptionError, decrypt_text, derive_key, encrypt_text
from kit.eval.hub_loaders import (
    HUB_SOURCES,
    MMSEARCH_PLUS_CANARY,
    UnknownBenchmarkError,
    load_hub_benchmark,
)
from kit.eval.loaders import (
    BenchmarkError,
    load_fvqa,
    load_infoseek,
    load_livevqa,
    load_mm_browsecomp,
    load_vistarget_jsonl,
    parse_options,
    sha256_text,
)


def _jpeg(color=(10, 120, 200), size=(40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="JPEG")
    return buf.getvalue()


# ------------------------------------------------------------------------------------------ crypto
def test_cipher_round_trip_and_key():
    assert len(derive_key("pw", 70)) == 70 and derive_key("pw", 70)[:32] == derive_key("pw", 32)
    for text in ["", "a", "Which 名字 — ü?" * 9, "x" * 1000]:
        ct = encrypt_text(text, "mmbrowsecomp:canary")
        assert decrypt_text(ct, "mmbrowsecomp:canary") == text
        if text:
            assert ct != base64.b64encode(text.encode()).decode()  # really encrypted


def test_cipher_rejects_bad_input():
    with pytest.raises(DecryptionError, match="base64"):
        decrypt_text("not base64 !!", "k")
    ct = encrypt_text("A fairly long question about a picture taken in 1972 in Georgia." * 2, "right")
    with pytest.raises(DecryptionError, match="UTF-8"):
        decrypt_text(ct, "wrong")
    with pytest.raises(DecryptionError):
        decrypt_text(None, "k")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ real files
def test_fvqa_real_files(data_dir):
    tasks, problems = load_fvqa(data_dir / "benchmarks" / "fvqa_mmsearch_r1")
    assert len(tasks) == 40 and problems == []
    assert all(t.answers and t.input_images for t in tasks)


def test_mm_browsecomp_real_files_decrypt_in_memory(data_dir):
    root = data_dir / "benchmarks" / "mm_browsecomp_sample"
    res = load_mm_browsecomp(root)
    assert len(res.tasks) == 20 and res.problems == []
    rows = [json.loads(line) for line in (root / "MMBrowseComp.sample.jsonl").read_text().splitlines() if line.strip()]
    by_id = {f"mmbc_{r['id']}": r for r in rows}
    for t in res.tasks:
        row = by_id[t.id]
        # decryption round trip on the published rows: re-encrypting gives the published ciphertext
        assert encrypt_text(t.question, row["canary"]) == row["question"]
        assert encrypt_text(t.answers[0], row["canary"]) == row["answer"]
        assert [encrypt_text(c, row["canary"]) for c in t.metadata["checklist"]] == row["checklist"]
        assert t.metadata["sensitive"] is True
        assert t.metadata["question_sha256"] == sha256_text(t.question)
        assert t.metadata["judge_question"] and "Question: " not in t.metadata["judge_question"]
        assert len(t.input_images) == len(row["images"])
    assert sum(bool(t.input_images) for t in res.tasks) == 12
    assert res.info["files"][0]["sha256"]


def test_mm_browsecomp_bad_rows_are_reported(tmp_path, data_dir):
    src = data_dir / "benchmarks" / "mm_browsecomp_sample"
    shutil.copytree(src, tmp_path / "mmbc")
    f = tmp_path / "mmbc" / "MMBrowseComp.sample.jsonl"
    rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    bad_b64 = dict(rows[0], id=9001, question="%%% not base64")
    wrong_canary = dict(rows[1], id=9002, canary="mmbrowsecomp:another-canary")
    missing_img = dict(rows[2], id=9003, images=["https://example.org/MMBC_images/does_not_exist.png"])
    with open(f, "a") as fh:
        for r in (bad_b64, wrong_canary, missing_img):
            fh.write(json.dumps(r) + "\n")
        fh.write("{not json\n")
    res = load_mm_browsecomp(tmp_path / "mmbc")
    assert len(res.tasks) == 20
    reasons = {p["id"]: p["reason"] for p in res.problems}
    assert len(res.problems) == 4
    assert "decryption failed" in reasons["mmbc_9001"] and "decryption failed" in reasons["mmbc_9002"]
    assert "not found" in reasons["mmbc_9003"]
    assert any("JSONDecodeError" in p["reason"] for p in res.problems)
    with pytest.raises(BenchmarkError):
        load_mm_browsecomp(tmp_path / "mmbc", strict=True)


def test_livevqa_real_files_levels_as_separate_tasks(data_dir):
    root = data_dir / "benchmarks" / "livevqa_news_sample"
    res = load_livevqa(root)
    assert len(res.tasks) == 60 and res.problems == []
    l1 = [t for t in res.tasks if t.metadata["level"] == 1]
    l2 = [t for t in res.tasks if t.metadata["level"] == 2]
    assert len(l1) == len(l2) == 30
    first = json.loads((root / "benchmark.sample.json").read_text())[0]
    t1 = next(t for t in l1 if t.id == f"livevqa_{first['id']}_l1")
    letter = first["level1_qa"]["Ground_Truth"]
    assert t1.metadata["correct_choice"] == letter and t1.metadata["rule_mode"] == "choice"
    assert t1.answers[0] == parse_options(first["level1_qa"]["options"])[letter]
    assert "Options:" in t1.question and "A. " in t1.question
    t2 = next(t for t in l2 if t.id == f"livevqa_{first['id']}_l2")
    assert t2.answers == first["level2_qa"]["Ground_Truth_List"] and "Options" not in t2.question
    assert len(load_livevqa(root, levels=(2,), limit=3).tasks) == 3


def test_livevqa_missing_image_and_bad_options(tmp_path, data_dir):
    root = data_dir / "benchmarks" / "livevqa_news_sample"
    rows = json.loads((root / "benchmark.sample.json").read_text())[:3]
    (tmp_path / "images").mkdir()
    for r in rows[:2]:
        shutil.copy(root / "images" / r["img_path"], tmp_path / "images")
    rows[1]["level1_qa"]["options"] = ["no letter here"]
    (tmp_path / "b.json").write_text(json.dumps(rows))
    res = load_livevqa(tmp_path)
    assert len(res.tasks) == 2 and len(res.problems) == 2  # row 1: bad options; row 2: image missing
    assert any("option without a letter" in p["reason"] for p in res.problems)
    assert any("not found" in p["reason"] for p in res.problems)


def test_infoseek_real_parquet(tmp_path, data_dir):
    res = load_infoseek(data_dir / "benchmarks" / "infoseek_mini" / "mini_data.pq", image_dir=tmp_path / "img")
    assert [t.id for t in res.tasks] == [f"infoseek_{i}" for i in range(5)] and res.problems == []
    assert res.tasks[0].answers[0] == "Spain" and "Kingdom of Spain" in res.tasks[0].answers
    for t in res.tasks:
        with Image.open(t.input_images[0]) as im:
            im.load()
    # the same bytes are stored once
    assert len(list((tmp_path / "img").iterdir())) == len({t.input_images[0] for t in res.tasks})


def test_mmsearch_r1_parquet_corrupt_image_is_a_problem(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"prompt": [{"role": "user", "content": "<image>What is shown?"}], "images": [{"bytes": _jpeg()}],
             "reward_model": {"ground_truth": "a cat", "candidate_answers": '["cat"]'}},
            {"prompt": [{"role": "user", "content": "Broken?"}], "images": [{"bytes": b"\x89PNG garbage"}],
             "reward_model": {"ground_truth": "x", "candidate_answers": "[]"}},
            {"prompt": [{"role": "user", "content": "No answer"}], "images": [{"bytes": _jpeg()}],
             "reward_model": {"ground_truth": "", "candidate_answers": "[]"}}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
    res = load_infoseek(tmp_path / "x.parquet", image_dir=tmp_path / "img")
    assert [t.question for t in res.tasks] == ["What is shown?"] and res.tasks[0].answers == ["a cat", "cat"]
    assert len(res.problems) == 2
    assert "image rejected" in res.problems[0]["reason"] and "ground_truth" in res.problems[1]["reason"]
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(BenchmarkError, match="parquet"):
        load_infoseek(tmp_path / "bad.parquet")


def test_vistarget_jsonl(tmp_path):
    (tmp_path / "t.png").write_bytes(png_bytes())
    lines = [{"id": "v1", "question": "Which tower?", "answers": ["Eiffel Tower"], "target_image": "t.png"},
             {"id": "v2", "question": "Which?", "answers": ["x"], "target_image": "missing.png"}]
    (tmp_path / "vt.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    res = load_vistarget_jsonl(tmp_path / "vt.jsonl")
    assert [t.id for t in res.tasks] == ["v1"] and res.tasks[0].target_image.endswith("t.png")
    assert res.tasks[0].input_images == [] and "not found" in res.problems[0]["reason"]


def test_load_benchmark_dispatch(data_dir, monkeypatch, tmp_path):
    assert parse_spec("hub:fvqa") == ("hub", "fvqa") and parse_spec("livevqa") == ("local", "livevqa")
    with pytest.raises(UnknownBenchmarkError, match="known"):
        load_benchmark("no_such_benchmark")
    with pytest.raises(UnknownBenchmarkError, match="no local files"):
        load_benchmark("local:simplevqa")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no pin: the default branch, here not reachable nor cached
    with pytest.raises(BenchmarkError, match="CaraJ/MMSearch@main is not in the local cache"):
        load_benchmark("hub:mmsearch", cache_dir=tmp_path)
    assert len(load_benchmark("fvqa", limit=3).tasks) == 3
    assert load_benchmark("mmbrowsecomp", limit=2).tasks[0].metadata["sensitive"]


def test_registry_entries_are_complete():
    for key, src in HUB_SOURCES.items():
        assert src.data_files and src.split and src.builder in ("parquet", "json") and src.subset
        assert src.revision is None or len(src.revision) == 40
        if src.revision:
            assert src.revision_evidence, key
    assert {"mmsearch", "mmsearch_plus", "simplevqa", "browsecomp_vl", "vdr_bench", "livevqa", "fvqa",
            "mmbrowsecomp"} <= set(HUB_SOURCES)


# ------------------------------------------------------------------------------------------ hub formats
datasets = pytest.importorskip("datasets", reason="hub loaders need the optional `datasets` package")


def _img_cell(data: bytes) -> dict:
    return {"bytes": data, "path": None}


def test_hub_mmsearch_image_subset_and_save_to_disk(tmp_path):
    feats = datasets.Features({"sample_id": datasets.Value("string"), "query": datasets.Value("string"),
                               "query_image": datasets.Image(), "gt_answer": datasets.Value("string"),
                               "alternative_gt_answers": datasets.Sequence(datasets.Value("string")),
                               "area": datasets.Value("string"), "subfield": datasets.Value("string"),
                               "timestamp": datasets.Value("string")})
    ds = datasets.Dataset.from_dict({
        "sample_id": ["1", "2", "3"], "query": ["Who painted this?", "Text only question", ""],
        "query_image": [_img_cell(png_bytes()), None, _img_cell(png_bytes((1, 2, 3)))],
        "gt_answer": ["Claude Monet", "x", "y"], "alternative_gt_answers": [["Monet"], [], []],
        "area": ["art"] * 3, "subfield": ["painting"] * 3, "timestamp": ["2024"] * 3}, features=feats)
    ds.to_parquet(str(tmp_path / "end2end.parquet"))
    res = load_hub_benchmark("mmsearch", local_path=tmp_path, image_dir=tmp_path / "img", protocol="points_seeker")
    assert [t.id for t in res.tasks] == ["mmsearch_1"] and res.tasks[0].answers == ["Claude Monet", "Monet"]
    assert res.tasks[0].metadata["rule_mode"] == "f1" and len(res.problems) == 1
    assert res.filtered == {"points_seeker/image_containing: no query image": 1}
    whole = load_hub_benchmark("mmsearch", local_path=tmp_path, image_dir=tmp_path / "img")  # WeAgent: no filter
    assert [(t.id, len(t.input_images)) for t in whole.tasks] == [("mmsearch_1", 1), ("mmsearch_2", 0)] and not whole.filtered
    ds.save_to_disk(str(tmp_path / "saved"))
    res2 = load_hub_benchmark("mmsearch", local_path=tmp_path / "saved", image_dir=tmp_path / "img", protocol="points_seeker")
    assert [t.id for t in res2.tasks] == ["mmsearch_1"] and res2.info["format"] == "save_to_disk"


def test_hub_mmsearch_plus_decrypts_single_image_rows(tmp_path):
    feats = datasets.Features({"question": datasets.Value("string"), "answer": datasets.Sequence(datasets.Value("string")),
                               "num_images": datasets.Value("int32"), "img_1": datasets.Image(), "img_2": datasets.Image(),
                               "category": datasets.Value("string")})
    enc = lambda s: encrypt_text(s, MMSEARCH_PLUS_CANARY)  # noqa: E731
    ds = datasets.Dataset.from_dict({
        "question": [enc("In which city was this photo taken?"), enc("Two images?"), "garbage%%"],
        "answer": [[enc("Lisbon"), enc("Lisboa")], [enc("x")], ["also garbage"]],
        "num_images": [1, 2, 1], "img_1": [_img_cell(png_bytes())] * 3, "img_2": [None, _img_cell(png_bytes()), None],
        "category": ["Travel"] * 3}, features=feats)
    (tmp_path / "data").mkdir()
    ds.to_parquet(str(tmp_path / "data" / "train-00000-of-00001.parquet"))
    res = load_hub_benchmark("mmsearch_plus", local_path=tmp_path, image_dir=tmp_path / "img", protocol="points_seeker")
    assert len(res.tasks) == 1 and res.tasks[0].question == "In which city was this photo taken?"
    assert res.tasks[0].answers == ["Lisbon", "Lisboa"] and res.tasks[0].metadata["sensitive"]
    assert res.filtered == {"points_seeker/single_image: 2 images, not a single-image sample": 1}
    assert "decryption failed" in res.problems[0]["reason"]
    whole = load_hub_benchmark("mmsearch_plus", local_path=tmp_path, image_dir=tmp_path / "img")  # WeAgent: every row
    assert [len(t.input_images) for t in whole.tasks] == [1, 2] and not whole.filtered


def test_hub_simplevqa_english_subset(tmp_path):
    b64 = base64.b64encode(_jpeg()).decode()
    ds = datasets.Dataset.from_dict({"data_id": [0, 1, 2], "image": [b64, b64, "!!notb64"], "question": ["What bird?", "这是什么?", "Q?"],
                                     "answer": ["Robin", "鸟", "A"], "language": ["EN", "CN", "EN"],
                                     "original_category": ["a"] * 3, "vqa_category": ["b"] * 3, "source": ["c"] * 3,
                                     "atomic_fact": ["d"] * 3})
    (tmp_path / "data").mkdir()
    ds.to_parquet(str(tmp_path / "data" / "test-00000-of-00001.parquet"))
    res = load_hub_benchmark("simplevqa", local_path=tmp_path, image_dir=tmp_path / "img", protocol="points_seeker")
    assert [t.id for t in res.tasks] == ["simplevqa_0"] and res.tasks[0].answers == ["Robin"]
    assert res.filtered == {"points_seeker/english: language 'CN', not English": 1}
    assert "not base64" in res.problems[0]["reason"]
    whole = load_hub_benchmark("simplevqa", local_path=tmp_path, image_dir=tmp_path / "img")  # WeAgent: all languages
    assert [t.id for t in whole.tasks] == ["simplevqa_0", "simplevqa_1"] and not whole.filtered


def test_hub_packed_parquet_bcvl_and_vdr(tmp_path):
    packed = json.dumps([{"filename": "level1_7.jpg", "data": base64.b64encode(_jpeg()).decode()}])
    (tmp_path / "data").mkdir()
    for name in ("bcvl_level1_199", "bcvl_level2_200", "testmini500_v1"):
        datasets.Dataset.from_dict({"question": ["What company makes this (see level1_7.jpg)?", "Q2"],
                                    "answer": ["Oxford Nanopore", "A2"], "image_packed": [packed, "[]"]}
                                   ).to_parquet(str(tmp_path / "data" / f"{name}.parquet"))
    bc = load_hub_benchmark("browsecomp_vl", local_path=tmp_path, image_dir=tmp_path / "img")
    assert len(bc.tasks) == 4 and bc.tasks[0].id == "bcvl_level1_199_0"
    assert "level1_7.jpg" not in bc.tasks[0].question and "user_image_1" in bc.tasks[0].question
    assert len(bc.tasks[0].input_images) == 1 and bc.tasks[1].input_images == []
    vdr = load_hub_benchmark("vdr_bench", local_path=tmp_path, image_dir=tmp_path / "img")
    assert len(vdr.tasks) == 2 and vdr.tasks[0].answers == ["Oxford Nanopore"]


def test_hub_livevqa_and_mmbrowsecomp_github_layouts(tmp_path, data_dir):
    lv_src = data_dir / "benchmarks" / "livevqa_news_sample"
    news = tmp_path / "livevqa" / "liveVQA_benchmarks" / "News"
    (news / "News_imgs").mkdir(parents=True)
    rows = json.loads((lv_src / "benchmark.sample.json").read_text())[:3]
    (news / "benchmark.json").write_text(json.dumps(rows))
    for r in rows:
        shutil.copy(lv_src / "images" / r["img_path"], news / "News_imgs")
    lv = load_hub_benchmark("livevqa", local_path=tmp_path / "livevqa")
    assert len(lv.tasks) == 6 and lv.problems == [] and lv.info["revision"] == HUB_SOURCES["livevqa"].revision

    mb_src = data_dir / "benchmarks" / "mm_browsecomp_sample"
    root = tmp_path / "mmbc"
    (root / "data").mkdir(parents=True)
    shutil.copytree(mb_src / "images", root / "MMBC_images")
    shutil.copy(mb_src / "MMBrowseComp.sample.jsonl", root / "data" / "MMBrowseComp.jsonl")
    mb = load_hub_benchmark("mmbrowsecomp", local_path=root)
    local = load_mm_browsecomp(mb_src)
    assert [t.id for t in mb.tasks] == [t.id for t in local.tasks] and mb.problems == []
    assert [t.question for t in mb.tasks] == [t.question for t in local.tasks]


def test_hub_fvqa_parquet_layout(tmp_path, data_dir):
    tasks, _ = load_fvqa(data_dir / "benchmarks" / "fvqa_mmsearch_r1", limit=2)
    rows = {"data_id": [t.id for t in tasks],
            "prompt": [[{"role": "user", "content": "<image>" + t.question}] for t in tasks],
            "images": [[{"bytes": open(t.input_images[0], "rb").read(), "path": None}] for t in tasks],
            "reward_model": [{"ground_truth": t.answers[0], "candidate_answers": json.dumps(t.answers[1:]),
                              "style": "rule"} for t in tasks],
            "data_source": ["fvqa_test"] * 2}
    datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / "fvqa_test.parquet"))
    res = load_hub_benchmark("fvqa", local_path=tmp_path, image_dir=tmp_path / "img")
    assert [t.id for t in res.tasks] == [t.id for t in tasks]
    assert [t.answers for t in res.tasks] == [t.answers for t in tasks]
    assert [t.question for t in res.tasks] == [t.question for t in tasks]
    with pytest.raises(BenchmarkError, match="no file matching"):
        load_hub_benchmark("vdr_bench", local_path=tmp_path)


def test_fvqa_loader_reports_every_broken_row(tmp_path, data_dir):
    import shutil

    from kit.eval.loaders import load_fvqa

    src = data_dir / "benchmarks" / "fvqa_mmsearch_r1"
    root = tmp_path / "fvqa"
    (root / "metadata").mkdir(parents=True)
    shutil.copytree(src / "images", root / "images")
    good = json.loads((src / "metadata" / "001_fvqa_train_4724.json").read_text())
    rows = {
        "a_ok": good,
        "b_number": {**good, "data_id": "n1", "reward_model": {"ground_truth": 42, "candidate_answers": "forty-two"}},
        "c_dict_gt": {**good, "data_id": "d1", "reward_model": {"ground_truth": {"x": 1}}},
        "d_list_rm": {**good, "data_id": "l1", "reward_model": ["x"]},
        "e_empty_gt": {**good, "data_id": "e1", "reward_model": {"ground_truth": "  "}},
        "f_dup": good,
    }
    for name, row in rows.items():
        (root / "metadata" / f"{name}.json").write_text(json.dumps(row))
    (root / "metadata" / "g_utf8.json").write_bytes(b'{"question": "\xff\xfe"}')
    (root / "metadata" / "h_deep.json").write_text("[" * 100000)
    (root / "metadata" / "i_dir.json").mkdir()
    (root / "metadata" / "j_link.json").symlink_to(root / "nowhere.json")
    tasks, problems = load_fvqa(root)
    assert [t.id for t in tasks] == ["fvqa_train_4724", "n1"]
    assert tasks[1].answers == ["42", "forty-two"]
    assert sorted(p["file"] for p in problems) == ["c_dict_gt.json", "d_list_rm.json", "e_empty_gt.json", "f_dup.json",
                                                   "g_utf8.json", "h_deep.json", "i_dir.json", "j_link.json"]
    assert load_fvqa(root, limit=0) == ([], [])
