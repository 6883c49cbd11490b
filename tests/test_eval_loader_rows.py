"""Loaders never abort a whole evaluation for one row (issue 14, part 6): missing and duplicate ids
are per-row problems with reasons, and MM-BrowseComp rows whose image file is absent load
text-only on request, labelled all the way to the evaluation's item results."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from kit.eval.hub_loaders import load_hub_benchmark
from kit.eval.loaders import (TEXT_ONLY_LABEL, load_infoseek, load_livevqa, load_mm_browsecomp, load_vistarget_jsonl)


@pytest.fixture()
def mmbc(tmp_path, data_dir):
    shutil.copytree(data_dir / "benchmarks" / "mm_browsecomp_sample", tmp_path / "mmbc")
    f = tmp_path / "mmbc" / "MMBrowseComp.sample.jsonl"
    rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return tmp_path / "mmbc", f, rows


def _ids_unique(res):
    ids = [t.id for t in res.tasks]
    return len(ids) == len(set(ids))


def test_mmbc_missing_and_duplicate_ids_and_bad_lines_are_row_problems(mmbc):
    root, f, rows = mmbc
    with open(f, "ab") as fh:
        for extra in (dict(rows[0]), {k: v for k, v in rows[1].items() if k != "id"}, dict(rows[2], id=None), [1, 2]):
            fh.write(json.dumps(extra).encode() + b"\n")
        fh.write(b'{"id": "caf\xe9"}\n')  # not UTF-8: one problem, not a failed benchmark
    res = load_mm_browsecomp(root)
    assert len(res.tasks) == 20 and _ids_unique(res) and len(res.problems) == 5
    reasons = [p["reason"] for p in res.problems]
    assert sum("duplicate id" in r for r in reasons) == 1 and sum("missing id" in r for r in reasons) == 2
    assert any("UnicodeDecodeError" in r for r in reasons) and any("not an object" in r for r in reasons)


def test_mmbc_absent_image_default_problem_or_text_only_on_request(mmbc):
    root, f, rows = mmbc
    with_img = [r for r in rows if r.get("images")]
    (root / "images" / with_img[0]["images"][0].rsplit("/", 1)[-1].split("?")[0]).unlink()
    res = load_mm_browsecomp(root)
    assert len(res.tasks) == 19 and len(res.problems) == 1 and "not found" in res.problems[0]["reason"]
    res = load_mm_browsecomp(root, missing_images="text_only")
    assert len(res.tasks) == 20 and not res.problems and res.summary()["text_only"] == 1
    t = next(t for t in res.tasks if t.id == f"mmbc_{with_img[0]['id']}")
    assert t.input_images == [] and t.metadata["text_only"] and t.metadata["missing_images"]
    assert t.metadata["labels"] == [TEXT_ONLY_LABEL]
    assert sum(bool(t.input_images) for t in res.tasks) == 11 and all(
        not x.metadata.get("text_only") for x in res.tasks if x is not t)
    with pytest.raises(ValueError):
        load_mm_browsecomp(root, missing_images="drop")


def test_text_only_label_reaches_the_item_result(mmbc):
    from kit.eval.judges import PerceptualImageJudge, RuleJudge
    from kit.eval.runner import score_record
    from kit.harness.episode import EpisodeRecord

    root, _, rows = mmbc
    with_img = [r for r in rows if r.get("images")]
    (root / "images" / with_img[0]["images"][0].rsplit("/", 1)[-1].split("?")[0]).unlink()
    t = next(t for t in load_mm_browsecomp(root, missing_images="text_only").tasks if t.metadata.get("text_only"))
    rec = EpisodeRecord(id=t.id, task=t, config_hash="x", status="answered", final_response="x", labels=["config:a"])
    item = asyncio.run(score_record(rec, "mmbrowsecomp", "a", 0, RuleJudge(), PerceptualImageJudge()))
    assert TEXT_ONLY_LABEL in item.labels and "config:a" in item.labels


def test_hub_mmbrowsecomp_text_only_and_duplicate_ids(tmp_path, data_dir):
    src = data_dir / "benchmarks" / "mm_browsecomp_sample"
    rows = [json.loads(x) for x in (src / "MMBrowseComp.sample.jsonl").read_text().splitlines() if x.strip()]
    (tmp_path / "data").mkdir()
    textual = next(r for r in rows if not r.get("images"))
    (tmp_path / "data" / "MMBrowseComp.jsonl").write_text("\n".join(json.dumps(r) for r in rows + [textual]) + "\n")
    shutil.copytree(src / "images", tmp_path / "MMBC_images")
    gone = next(r for r in rows if r.get("images"))
    (tmp_path / "MMBC_images" / gone["images"][0].rsplit("/", 1)[-1].split("?")[0]).unlink()
    res = load_hub_benchmark("mmbrowsecomp", local_path=tmp_path, image_dir=tmp_path / "cache")
    assert len(res.tasks) == 19 and len(res.problems) == 2 and _ids_unique(res)
    assert sorted("duplicate id" in p["reason"] for p in res.problems) == [False, True]
    res = load_hub_benchmark("mmbrowsecomp", local_path=tmp_path, image_dir=tmp_path / "cache",
                             missing_images="text_only")
    assert len(res.tasks) == 20 and len(res.problems) == 1 and res.summary()["text_only"] == 1


def test_livevqa_vistarget_parquet_id_problems(tmp_path, data_dir):
    src = data_dir / "benchmarks" / "livevqa_news_sample"
    shutil.copytree(src, tmp_path / "lv")
    f = tmp_path / "lv" / "benchmark.sample.json"
    rows = json.loads(f.read_text())
    f.write_text(json.dumps(rows + [dict(rows[0]), {k: v for k, v in rows[1].items() if k != "id"},
                                    dict(rows[2], level1_qa={"question": "q", "options": "A. x", "Ground_Truth": 5})]))
    res = load_livevqa(tmp_path / "lv")
    assert len(res.tasks) == 60 and _ids_unique(res) and len(res.problems) == 4  # dup row: 2 tasks, 2 problems
    assert sum("duplicate id" in p["reason"] for p in res.problems) == 2
    assert sum("missing id" in p["reason"] for p in res.problems) == 1

    from conftest import png_bytes

    (tmp_path / "vt").mkdir()
    (tmp_path / "vt" / "t.png").write_bytes(png_bytes())
    good = {"id": "a", "question": "Which?", "answers": ["x"], "target_image": "t.png"}
    lines = [good, good, dict(good, id=None), dict(good, id="b", question=5), dict(good, id="c")]
    (tmp_path / "vt" / "v.jsonl").write_bytes(b"\n".join(json.dumps(x).encode() for x in lines) + b"\n\xff\xfe\n")
    res = load_vistarget_jsonl(tmp_path / "vt" / "v.jsonl")
    assert [t.id for t in res.tasks] == ["a", "c"] and len(res.problems) == 4
    assert any("duplicate id" in p["reason"] for p in res.problems) and any("missing id" in p["reason"] for p in res.problems)

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pq.read_table(str(data_dir / "benchmarks" / "infoseek_mini" / "mini_data.pq")).to_pylist()[:3]
    for r, did in zip(rows, ["x1", "x1", None]):
        r["data_id"] = did
    pq.write_table(pa.Table.from_pylist(rows), str(tmp_path / "ids.pq"))
    res = load_infoseek(tmp_path / "ids.pq", image_dir=tmp_path / "img")
    assert [t.id for t in res.tasks] == ["x1"] and len(res.problems) == 2


def test_text_only_mode_reaches_load_benchmarks_from_the_data_folder(mmbc, tmp_path):
    """The notebook's path: ``load_benchmarks(..., missing_images=...)`` over a data folder."""
    from kit.eval.benchmarks import BenchmarkError, load_benchmark
    from kit.eval.runner import load_benchmarks

    root, f, rows = mmbc
    data = tmp_path / "data"
    (data / "benchmarks").mkdir(parents=True)
    shutil.move(str(root), str(data / "benchmarks" / "mm_browsecomp_sample"))
    img_dir = data / "benchmarks" / "mm_browsecomp_sample" / "images"
    next(img_dir.iterdir()).unlink()
    default = asyncio.run(load_benchmarks(["mmbrowsecomp"], data_dir=data))["mmbrowsecomp"]
    assert len(default.problems) == 1 and len(default.tasks) == 19
    text_only = asyncio.run(load_benchmarks(["mmbrowsecomp", "livevqa"], data_dir=data,
                                            missing_images="text_only"))["mmbrowsecomp"]
    assert not text_only.problems and len(text_only.tasks) == 20 and text_only.summary()["text_only"] == 1
    with pytest.raises(BenchmarkError, match="MM-BrowseComp"):
        load_benchmark("local:livevqa", data_dir=data, missing_images="text_only")
