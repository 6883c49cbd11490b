"""Loaders never abort a whole evaluation for one row (issue 14, part 6): missing and duplicate ids
are per-row problems with reasons, and MM-BrowseComp rows whose image file is absent load
text-only on request, labelled all the way to the evaluation's item results."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from kit.eval.hub_loaders import load_hub_benchmark
from kit.eval.loaders import TEXT_ONLY_LABEL, load_infoseek, load_livevqa, load_mm_browsecomp, load_vistarget_jsonl


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


# ------------------------------------------------------------------ review findings (issue 14 part 6)
DEEP = b"[" * 100_000 + b"]" * 100_000


def _hub_mmbc(tmp_path, data_dir, extra_lines=(), first_prefix=b""):
    src = data_dir / "benchmarks" / "mm_browsecomp_sample"
    lines = [x for x in (src / "MMBrowseComp.sample.jsonl").read_bytes().splitlines() if x.strip()]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "MMBrowseComp.jsonl").write_bytes(
        first_prefix + b"\n".join(lines[:3] + list(extra_lines) + lines[3:]) + b"\n")
    shutil.copytree(src / "images", tmp_path / "MMBC_images")
    return tmp_path


def test_one_bad_line_does_not_abort_a_hub_benchmark(tmp_path, data_dir):
    from kit.eval.benchmarks import load_benchmark
    from kit.eval.runner import load_benchmarks

    root = _hub_mmbc(tmp_path, data_dir, [b"not json", DEEP, b'{"id": "caf\xe9"}'])
    res = load_benchmark("hub:mmbrowsecomp", local_path=root, image_dir=tmp_path / "c")
    assert len(res.tasks) == 20 and len(res.problems) == 3
    assert [p["row"] for p in res.problems] == ["MMBrowseComp.jsonl:4", "MMBrowseComp.jsonl:5", "MMBrowseComp.jsonl:6"]
    out = asyncio.run(load_benchmarks(["hub:mmbrowsecomp"], local_paths={"mmbrowsecomp": str(root)},
                                      image_dir=tmp_path / "c"))["mmbrowsecomp"]
    assert len(out.tasks) == 20 and len(out.problems) == 3
    # any other load failure (a damaged parquet file) is one benchmark-level problem, not a traceback
    (tmp_path / "fv").mkdir()
    (tmp_path / "fv" / "fvqa_test.parquet").write_bytes(b"PAR1 this is not parquet")
    out = asyncio.run(load_benchmarks(["hub:fvqa"], local_paths={"fvqa": str(tmp_path / "fv")}, image_dir=tmp_path / "c"))
    assert not out["fvqa"].tasks and len(out["fvqa"].problems) == 1 and "fvqa_test.parquet" in out["fvqa"].problems[0]["reason"]


def test_deep_nesting_and_bad_encoding_are_row_or_file_problems(mmbc, tmp_path, data_dir):
    root, f, rows = mmbc
    with open(f, "ab") as fh:
        fh.write(DEEP + b"\n" + b'{"id": 1, "x": ' + DEEP + b"}\n")
    res = load_mm_browsecomp(root)
    assert len(res.tasks) == 20 and len(res.problems) == 2 and all("nest" in p["reason"] for p in res.problems)
    src = data_dir / "benchmarks" / "livevqa_news_sample"
    for name, data in (("deep", DEEP), ("latin1", b'[{"id": "caf\xe9"}]')):
        shutil.copytree(src, tmp_path / name)
        (tmp_path / name / "zz.json").write_bytes(data)
        res = load_livevqa(tmp_path / name)
        assert len(res.tasks) == 60 and len(res.problems) == 1 and res.problems[0]["row"] == "zz.json"


def test_negative_limit_is_an_error_everywhere(mmbc, tmp_path, data_dir):
    from kit.eval.benchmarks import load_benchmark
    from kit.eval.loaders import BenchmarkError, load_fvqa
    from kit.eval.runner import load_benchmarks

    root, _, _ = mmbc
    b = data_dir / "benchmarks"
    calls = [lambda: load_fvqa(b / "fvqa_mmsearch_r1", -1), lambda: load_livevqa(b / "livevqa_news_sample", -1),
             lambda: load_mm_browsecomp(root, -1), lambda: load_infoseek(b / "infoseek_mini" / "mini_data.pq", -1),
             lambda: load_hub_benchmark("mmbrowsecomp", local_path=_hub_mmbc(tmp_path, data_dir), limit=-1)]
    for k in ("fvqa", "livevqa", "mmbrowsecomp", "infoseek"):
        calls.append(lambda k=k: load_benchmark(k, data_dir=data_dir, limit=-1))
    for c in calls:
        with pytest.raises(BenchmarkError, match="limit"):
            c()
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="limit"):
            asyncio.run(load_benchmarks(["fvqa", "livevqa"], data_dir=data_dir, limit=bad))


def test_load_benchmarks_entry_checks(data_dir):
    from kit.eval.benchmarks import load_benchmark
    from kit.eval.runner import load_benchmarks

    for specs in (["fvqa", "local:fvqa"], ["livevqa", "livevqa"]):
        with pytest.raises(ValueError, match="duplicate"):
            asyncio.run(load_benchmarks(specs, data_dir=data_dir, limit=1))
    for specs in (["fvqa"], ["mmbrowsecomp"], ["hub:fvqa"]):
        with pytest.raises(ValueError, match="missing_images"):
            asyncio.run(load_benchmarks(specs, data_dir=data_dir, limit=1, missing_images="txt_only"))
    for spec in ("fvqa", "mmbrowsecomp", "hub:fvqa"):
        with pytest.raises(ValueError, match="missing_images"):
            load_benchmark(spec, data_dir=data_dir, limit=1, missing_images="txt_only")
    out = asyncio.run(load_benchmarks([5, None, "fvqa"], data_dir=data_dir, limit=1))
    assert list(out) == ["5", "None", "fvqa"] and len(out["fvqa"].tasks) == 1
    assert all(len(out[k].problems) == 1 and "UnknownBenchmarkError" in out[k].problems[0]["reason"] for k in ("5", "None"))


def _fvqa_copy(tmp_path, data_dir, n=4):
    src = data_dir / "benchmarks" / "fvqa_mmsearch_r1"
    (tmp_path / "fv" / "metadata").mkdir(parents=True)
    (tmp_path / "fv" / "images").symlink_to(src / "images")
    files = sorted((src / "metadata").glob("*.json"))[:n]
    for f in files:
        shutil.copy(f, tmp_path / "fv" / "metadata" / f.name)
    return tmp_path / "fv", files


def test_one_id_rule_in_every_loader(mmbc, tmp_path, data_dir):
    from kit.eval.loaders import load_fvqa, row_id

    assert [row_id({"id": v}, "id") for v in ("a ", 7, 7.0, "7")] == ["a", "7", "7", "7"]
    root, files = _fvqa_copy(tmp_path, data_dir)
    base = json.loads(files[1].read_text())
    for k, did in enumerate([[1, 2], {"a": 1}, True, "  ", None, 1.5]):
        (root / "metadata" / f"bad{k}.json").write_text(json.dumps({**base, "data_id": did}))
    (root / "metadata" / "zero.json").write_text(json.dumps({**base, "data_id": 0}))
    (root / "metadata" / "spaced.json").write_text(json.dumps({**base, "data_id": base["data_id"] + " "}))
    (root / "metadata" / "nokey.json").write_text(json.dumps({k: v for k, v in base.items() if k != "data_id"}))
    tasks, problems = load_fvqa(root)
    ids = [t.id for t in tasks]
    assert "0" in ids and "nokey" in ids and "1.5" in ids and len(ids) == len(set(ids)) == 7
    reasons = {p["file"]: p["reason"] for p in problems}
    assert all("id" in reasons[f"bad{k}.json"] for k in range(5)) and "duplicate" in reasons["spaced.json"]
    assert "bad5.json" not in reasons  # 1.5 is a number id: "1.5"
    # MM-BrowseComp: 4.0 and 4 are the same id
    _, f, rows = mmbc
    with open(f, "a") as fh:
        fh.write(json.dumps(dict(rows[0], id=float(rows[0]["id"]))) + "\n")
    res = load_mm_browsecomp(mmbc[0])
    assert len(res.tasks) == 20 and len(res.problems) == 1 and "duplicate id" in res.problems[0]["reason"]


def test_byte_order_marks_are_not_problems(mmbc, tmp_path, data_dir):
    from kit.eval.loaders import load_fvqa

    root, files = _fvqa_copy(tmp_path, data_dir)
    p = root / "metadata" / files[0].name
    p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes())
    tasks, problems = load_fvqa(root)
    assert len(tasks) == 4 and not problems
    _, f, _ = mmbc
    f.write_bytes(b"\xef\xbb\xbf" + f.read_bytes())
    res = load_mm_browsecomp(mmbc[0])
    assert len(res.tasks) == 20 and not res.problems
    lv = tmp_path / "lv"
    shutil.copytree(data_dir / "benchmarks" / "livevqa_news_sample", lv)
    j = next(lv.glob("*.json"))
    j.write_bytes(b"\xef\xbb\xbf" + j.read_bytes())
    res = load_livevqa(lv)
    assert len(res.tasks) == 60 and not res.problems
