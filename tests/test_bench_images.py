"""Benchmark images are checked at load (issue 27 part 4): every image a row names is decoded once by
the kit's one decoder (kit.images.decode_image); an undecodable image (a text file named .png, a
truncated JPEG, an empty file) is that row's problem with the decoder's reason, counted apart from
accuracy, never a task that is then scored wrong. Stored hashes are of the file used.

Built on copies of the real shared samples (FVQA, LiveVQA, MM-BrowseComp) with real damaged files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import MemoryBackend

from kit.eval.hub_loaders import load_hub_benchmark
from kit.eval.loaders import BenchmarkError, load_fvqa, load_livevqa, load_mm_browsecomp, load_vistarget_jsonl
from kit.eval.loaders.common import BadImage, checked_image, save_image_bytes

NOT_AN_IMAGE = b"<!DOCTYPE html><html><body>404 Not Found</body></html>\n"  # a web error page saved as .png


def damage(path: Path, how: str) -> None:
    """Damage a real image file in place: ``text`` (a text file under the image's name), ``truncated``
    (the first half of its bytes: a download cut off), ``empty`` (zero bytes)."""
    data = path.read_bytes()
    path.write_bytes({"text": NOT_AN_IMAGE, "truncated": data[: len(data) // 2], "empty": b""}[how])


DAMAGES = ("text", "truncated", "empty")


def _decoder_words(reason: str) -> bool:
    return any(w in reason for w in ("not a raster image", "truncated", "empty"))


# ------------------------------------------------------------------------------------------ FVQA
def test_fvqa_damaged_images_are_problems_not_tasks(tmp_path, data_dir):
    src = data_dir / "benchmarks" / "fvqa_mmsearch_r1"
    root = tmp_path / "fvqa"
    (root / "metadata").mkdir(parents=True)
    (root / "images").mkdir()
    metas = sorted((src / "metadata").glob("*.json"))[:6]
    for m in metas:
        shutil.copy(m, root / "metadata")
        shutil.copy(src / "images" / Path(json.loads(m.read_text())["image"]).name, root / "images")
    damaged = {}
    for m, how in zip(metas[:3], DAMAGES):
        damage(root / "images" / Path(json.loads(m.read_text())["image"]).name, how)
        damaged[m.name] = how
    tasks, problems = load_fvqa(root)
    assert len(tasks) == 3 and {p["file"] for p in problems} == set(damaged)
    assert all("rejected" in p["reason"] and _decoder_words(p["reason"]) for p in problems), problems
    with pytest.raises(BenchmarkError, match="rejected"):
        load_fvqa(root, strict=True)


def test_fvqa_stores_the_hash_of_the_file_used(data_dir):
    """The row's ``source_image_sha256`` is of the picture the PNG was made from (rows 2 and 3 differ
    from their file); ``image_sha256`` must be the file the task shows."""
    tasks, _ = load_fvqa(data_dir / "benchmarks" / "fvqa_mmsearch_r1", limit=3)
    for t in tasks:
        assert t.metadata["image_sha256"] == hashlib.sha256(Path(t.input_images[0]).read_bytes()).hexdigest()
    assert any(t.metadata["source_image_sha256"] != t.metadata["image_sha256"] for t in tasks)


# ------------------------------------------------------------------------------------------ LiveVQA
def _livevqa_copy(src: Path, dest: Path, n: int = 6) -> list[dict]:
    rows = [r for r in json.loads((src / "benchmark.sample.json").read_text()) if r["img_path"].endswith(".jpg")][:n]
    (dest / "images").mkdir(parents=True)
    (dest / "b.json").write_text(json.dumps(rows))
    for r in rows:
        shutil.copy(src / "images" / r["img_path"], dest / "images")
    return rows


def test_livevqa_damaged_images_are_problems_not_tasks(tmp_path, data_dir):
    rows = _livevqa_copy(data_dir / "benchmarks" / "livevqa_news_sample", tmp_path)
    # real news JPEGs: a truncated JPEG, a text file named .jpg, an empty .jpg
    for r, how in zip(rows[:3], DAMAGES):
        damage(tmp_path / "images" / r["img_path"], how)
    res = load_livevqa(tmp_path)
    assert len(res.tasks) == 6 and len(res.problems) == 3  # 3 good rows x 2 levels; 3 damaged rows reported
    assert {p["id"] for p in res.problems} == {r["id"] for r in rows[:3]}
    assert all(p["reason"].startswith("BadImage") and _decoder_words(p["reason"]) for p in res.problems)
    assert res.summary()["problems"] == 3


# ------------------------------------------------------------------------------------------ MM-BrowseComp
@pytest.mark.parametrize("missing_images", ["problem", "text_only"])
def test_mmbrowsecomp_damaged_images_are_problems_in_both_modes(tmp_path, data_dir, missing_images):
    src = data_dir / "benchmarks" / "mm_browsecomp_sample"
    shutil.copytree(src, tmp_path / "mmbc")
    rows = [json.loads(x) for x in (src / "MMBrowseComp.sample.jsonl").read_text().splitlines() if x.strip()]
    with_images = [r for r in rows if r.get("images")]
    names = {r["id"]: [Path(u.split("?")[0]).name for u in r["images"]] for r in with_images}
    jpeg_row = next(r for r in with_images if any(n.endswith(".jpg") for n in names[r["id"]]))
    png_rows = [r for r in with_images if r is not jpeg_row][:2]
    targets = [(jpeg_row, "truncated"), (png_rows[0], "text"), (png_rows[1], "empty")]
    hit_rows = set()
    for r, how in targets:
        name = next(n for n in names[r["id"]] if n.endswith(".jpg")) if how == "truncated" else names[r["id"]][0]
        damage(tmp_path / "mmbc" / "images" / name, how)
        hit_rows |= {x["id"] for x in with_images if name in names[x["id"]]}
    res = load_mm_browsecomp(tmp_path / "mmbc", missing_images=missing_images)
    assert {p["id"] for p in res.problems} == {f"mmbc_{i}" for i in hit_rows}
    assert len(res.tasks) == 20 - len(hit_rows)
    assert not any((t.metadata or {}).get("text_only") for t in res.tasks)  # damaged is not "missing"
    assert all("BadImage" in p["reason"] for p in res.problems)


# ------------------------------------------------------------------------------------------ VisTarget JSONL
def test_vistarget_damaged_target_or_input_is_a_problem(tmp_path, data_dir):
    photo = sorted((data_dir / "benchmarks" / "livevqa_news_sample" / "images").glob("*.jpg"))[0]
    for name in ("good.jpg", "bad_target.jpg", "bad_input.png"):
        shutil.copy(photo, tmp_path / name)
    damage(tmp_path / "bad_target.jpg", "truncated")
    damage(tmp_path / "bad_input.png", "text")
    lines = [{"id": "ok", "question": "q", "answers": ["a"], "target_image": "good.jpg"},
             {"id": "t", "question": "q", "answers": ["a"], "target_image": "bad_target.jpg"},
             {"id": "i", "question": "q", "answers": ["a"], "target_image": "good.jpg", "input_images": ["bad_input.png"]}]
    f = tmp_path / "vt.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = load_vistarget_jsonl(f)
    assert [t.id for t in res.tasks] == ["ok"] and len(res.problems) == 2
    assert all("BadImage" in p["reason"] for p in res.problems)


# ------------------------------------------------------------------------------------------ hub layouts
def test_hub_local_copy_damaged_image_is_a_problem(tmp_path, data_dir):
    lv_src = data_dir / "benchmarks" / "livevqa_news_sample"
    news = tmp_path / "livevqa" / "liveVQA_benchmarks" / "News"
    (news / "News_imgs").mkdir(parents=True)
    rows = json.loads((lv_src / "benchmark.sample.json").read_text())[:3]
    (news / "benchmark.json").write_text(json.dumps(rows))
    for r in rows:
        shutil.copy(lv_src / "images" / r["img_path"], news / "News_imgs")
    damage(news / "News_imgs" / rows[0]["img_path"], "empty")
    damage(news / "News_imgs" / rows[1]["img_path"], "truncated")
    lv = load_hub_benchmark("livevqa", local_path=tmp_path / "livevqa", image_dir=tmp_path / "img")
    assert len(lv.tasks) == 2 and len(lv.problems) == 2
    assert all("BadImage" in p["reason"] for p in lv.problems)


# ------------------------------------------------------------------------------------------ the check itself
def test_checked_image_decodes_each_file_once(tmp_path, data_dir, monkeypatch):
    import kit.images

    photo = sorted((data_dir / "benchmarks" / "livevqa_news_sample" / "images").glob("*.jpg"))[0]
    shutil.copy(photo, tmp_path / "p.jpg")
    calls = []
    real = kit.images.decode_image
    monkeypatch.setattr(kit.images, "decode_image", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = checked_image(tmp_path / "p.jpg")
    again = checked_image(tmp_path / "p.jpg")
    assert first == again and len(calls) == 1
    assert first.sha256 == hashlib.sha256(photo.read_bytes()).hexdigest()
    damage(tmp_path / "p.jpg", "truncated")  # a changed file is checked again
    with pytest.raises(BadImage, match="truncated"):
        checked_image(tmp_path / "p.jpg")
    with pytest.raises(BadImage, match="empty"):
        save_image_bytes(b"", tmp_path / "out", "x")


# ------------------------------------------------------------------------------------------ counted apart
async def test_damaged_rows_are_counted_apart_from_accuracy(tmp_path, data_dir):
    from kit.eval.configs import make_configs
    from kit.eval.runner import run_evaluation, summary_rows
    from kit.policy.scripted import ScriptedPolicy

    rows = _livevqa_copy(data_dir / "benchmarks" / "livevqa_news_sample", tmp_path / "lv", n=4)
    for r, how in zip(rows[:3], DAMAGES):
        damage(tmp_path / "lv" / "images" / r["img_path"], how)
    lr = load_livevqa(tmp_path / "lv", levels=(2,))
    assert len(lr.tasks) == 1 and len(lr.problems) == 3
    answer = lr.tasks[0].answers[0]
    oc = await run_evaluation({"livevqa": lr}, make_configs("smoke", ["direct"]),
                              policy=ScriptedPolicy(lambda m, t: f"<response>{answer}</response>"),
                              backend=MemoryBackend(), out_dir=tmp_path / "out", repeats=1,
                              private_dir=tmp_path / "p")
    row = summary_rows({"livevqa": lr}, oc.items)[0]
    assert row["load_problems"] == 3 and row["episodes"] == 1 and row["accuracy_pct"] == 100.0
    assert row["episode_errors"] == 0
    problems = [json.loads(x) for x in (tmp_path / "out" / "problems.jsonl").read_text().splitlines()]
    assert len(problems) == 3 and all("BadImage" in p["reason"] for p in problems)

