"""Portable run folders (issue 18): episodes.jsonl records workspaces relative to its folder, every
reader resolves them against the file's folder, and no viewer page names an absolute path of this
machine (kit.harness.portable, kit.view.paths)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path

import lxml.html
import pytest

from kit.harness.episode import EpisodeRecord, Task
from kit.harness.loop import Harness
from kit.harness.runner import EpisodeWriter, read_episodes, run_batch
from kit.policy.scripted import ScriptedPolicy, tool_call_text
from kit.view import build_site
from tests.conftest import MemoryBackend, png_bytes

ANSWER = "<think>the first hit</think><response>A bridge <IMG: search_image_1.png></response>"


def _script(msgs, tools):
    n_tool = sum(m.role == "tool" for m in msgs)
    return tool_call_text("web_search_for_image", {"query": "stone bridge", "num": 2}) if n_tool == 0 else ANSWER


def _run(tmp_path: Path, n: int = 2) -> Path:
    """A real run folder: ``n`` episodes of the harness, each with a user image and two searched images."""
    img = tmp_path / "inputs" / "q.png"
    img.parent.mkdir(parents=True)
    img.write_bytes(png_bytes(size=(40, 30)))
    tasks = [Task(id=f"t{i}", question="Which bridge?", input_images=[str(img)]) for i in range(n)]
    run = tmp_path / "run"
    h = Harness(ScriptedPolicy(_script, completion_tokens=10), MemoryBackend())
    asyncio.run(run_batch(h, tasks, run, progress=False))
    return run


def _strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


def test_written_episode_workspace_is_relative_to_its_file(tmp_path: Path):
    run = _run(tmp_path)
    lines = (run / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 2
    for line in lines:
        d = json.loads(line)
        assert d["workspace"].startswith("workspaces/t") and not os.path.isabs(d["workspace"])
        # grep-style: only the task's own input (outside the run) may name an absolute path
        inside = [s for s in _strings(d) if str(run) in s]
        assert inside == [], inside


def test_workspace_outside_the_file_folder_stays_absolute(tmp_path: Path):
    rec = EpisodeRecord(id="e", task=Task(id="e", question="q"), config_hash="h", workspace=str(tmp_path / "elsewhere" / "w"))
    asyncio.run(EpisodeWriter(tmp_path / "run" / "episodes.jsonl").write(rec))
    assert json.loads((tmp_path / "run" / "episodes.jsonl").read_text())["workspace"] == str(tmp_path / "elsewhere" / "w")
    assert rec.workspace == str(tmp_path / "elsewhere" / "w")  # the in-memory record is not changed


def test_relative_workspace_given_from_cwd_is_written_relative_to_the_file(tmp_path: Path, monkeypatch):
    from kit.harness.portable import portable_workspace, resolve_workspace

    monkeypatch.chdir(tmp_path)
    rec = EpisodeRecord(id="e", task=Task(id="e", question="q"), config_hash="h", workspace="out/workspaces/e-1")
    asyncio.run(EpisodeWriter(Path("out/episodes.jsonl")).write(rec))
    assert json.loads((tmp_path / "out" / "episodes.jsonl").read_text())["workspace"] == "workspaces/e-1"
    assert portable_workspace("../x", tmp_path / "out") == str(tmp_path.parent / "x")  # outside: absolute
    assert resolve_workspace("workspaces/e-1", "out") == str(tmp_path / "out" / "workspaces" / "e-1")
    assert resolve_workspace("/abs/w", "out") == "/abs/w" and resolve_workspace(None, "out") is None


def test_moved_run_folder_keeps_every_image_for_readers_and_viewer(tmp_path: Path):
    from kit.data.mixtures import load_sft_records
    from kit.train.sft_data import record_images

    run = _run(tmp_path)
    moved = tmp_path / "elsewhere" / "copied-run"
    moved.parent.mkdir()
    shutil.move(str(run), str(moved))
    assert not run.exists()
    recs = read_episodes(moved / "episodes.jsonl")
    for r in recs:
        assert Path(r.workspace).parent == moved / "workspaces"
        names = [i.filename for i in r.images]
        assert len(names) == 3 and all((Path(r.workspace) / n).is_file() for n in names)
    # the SFT reader (its images through the evidence registry)
    sft = load_sft_records(moved / "episodes.jsonl", tmp_path / "unused")
    assert all(p.is_file() and moved in p.parents for r in sft for p in record_images(r))
    # the viewer: every image shown, none missing
    index = build_site([moved], tmp_path / "site")
    pages = sorted((index.parent / "episodes").rglob("*.html"))
    assert len(pages) == 2
    for p in pages:
        doc = lxml.html.fromstring(p.read_text())
        assert not doc.xpath('//*[@class="missing"]')
        srcs = [i.get("src") for i in doc.xpath("//img")]
        assert len(srcs) >= 3 and all((p.parent / s).resolve().is_file() for s in srcs)


def test_old_absolute_workspace_still_read(tmp_path: Path):
    run = _run(tmp_path, n=1)
    f = run / "episodes.jsonl"
    d = json.loads(f.read_text())
    d["workspace"] = str(run / d["workspace"])  # a file written before: absolute path
    f.write_text(json.dumps(d) + "\n")
    (rec,) = read_episodes(f)
    assert rec.workspace == d["workspace"] and (Path(rec.workspace) / "user_image_1.png").is_file()
    index = build_site([run], tmp_path / "site")
    page = next((index.parent / "episodes").rglob("*.html"))
    assert not lxml.html.fromstring(page.read_text()).xpath('//*[@class="missing"]')


def test_no_page_names_an_absolute_path_of_this_machine(tmp_path: Path, monkeypatch):
    home = tmp_path / "home" / "someone"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    run = _run(tmp_path)
    # an old record with an absolute workspace, a local source image under HOME and a path in a message
    f = run / "episodes.jsonl"
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    lines[0]["workspace"] = str(run / lines[0]["workspace"])
    lines[0]["images"][0]["source_url"] = str(home / "data" / "benchmarks" / "b" / "images" / "q.png")
    lines[0]["messages"][-1]["content"][0]["text"] += f" (saved in {run}/workspaces/out.txt and {home}/notes.txt)"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    index = build_site([run], tmp_path / "site")
    pages = [index, *sorted((index.parent / "episodes").rglob("*.html"))]
    assert len(pages) == 3
    for p in pages:
        html = p.read_text()
        assert str(tmp_path) not in html and str(home) not in html, p.name
    text = lxml.html.fromstring(index.read_text()).text_content()
    assert "under run" in text  # the run named by its folder name (outside the repository)
    ep = "".join(p.read_text() for p in pages[1:])
    assert "~/data/benchmarks/b/images/q.png" in ep  # the home folder shown as ~
    assert "run/workspaces/out.txt" in ep


def test_display_path_rules(tmp_path: Path, monkeypatch):
    from kit.paths import PROJECT_ROOT
    from kit.view.paths import display_path

    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert display_path(str(PROJECT_ROOT / "results" / "smoke")) == "results/smoke"
    assert display_path(str(tmp_path / "h" / "x.png")) == "~/x.png"
    assert display_path(str(tmp_path / "run" / "w" / "a.png"), {str(tmp_path / "run"): "run"}) == "run/w/a.png"
    assert display_path("/srv/data/benchmarks/fvqa/images/1.png") == "…/fvqa/images/1.png"
    assert display_path("https://example.org/a.png") == "https://example.org/a.png"
    assert display_path("file:///srv/data/b/c/d.png") == "…/b/c/d.png"
    assert display_path("") == "" and display_path(None) == ""
    from kit.view.paths import PathScrubber

    scrub, h = PathScrubber({str(tmp_path / "run"): "run"}), str(tmp_path / "h")
    assert scrub(f"saved {h}/a.txt and {tmp_path}/run/w/b.png ({h})") == "saved ~/a.txt and run/w/b.png (~)"
    for kept in (f"https://example.org{h}/x", f"http://[::1]{h}/x"):
        assert scrub(kept) == kept  # a URL's path
    for other in (f"{h}x/y", f"/x{h}/y"):  # a longer name, a path that only contains the folder: not "~",
        out = scrub(other)  # but still no absolute path of this machine (the temporary folder, rule 8)
        assert "~" not in out and not out.startswith("/") and out.endswith("/y"), out


@pytest.mark.parametrize("rel", ["results/smoke", "results/smoke/06_evaluation"])
def test_index_names_a_repository_run_by_its_relative_path(rel: str):
    from kit.paths import PROJECT_ROOT
    from kit.view.paths import run_display

    assert run_display(PROJECT_ROOT / rel) == rel
    assert run_display(Path(os.path.relpath(PROJECT_ROOT / rel))) == rel


def test_registered_image_source_of_user_image_shown_portably(tmp_path: Path):
    run = _run(tmp_path, n=1)
    index = build_site([run], tmp_path / "site")
    page = next((index.parent / "episodes").rglob("*.html")).read_text()
    import tempfile

    tmp = Path(tempfile.gettempdir()).resolve()  # the task's input outside the run: rule 6 (temporary folder)
    shown = ("$TMPDIR/" + tmp_path.resolve().relative_to(tmp).as_posix() if tmp in tmp_path.resolve().parents
             else f"…/{tmp_path.name}") + "/inputs/q.png"  # else its last three parts (rule 8)
    assert shown in page and str(tmp_path) not in page


def test_other_episode_readers_resolve_a_moved_run(tmp_path: Path):
    """The mixture readers (notebook 04's local .jsonl sources, kit.data.mixtures' SFT sources) take a
    relative workspace from the file's folder, and an SFT row does not publish this machine's folder."""
    from kit.data.mixtures import DataSource, build_sft_mixture, sft_row
    from kit.train.mixtures import Mixture, Source, sample_mixture

    run = _run(tmp_path, n=1)
    moved = tmp_path / "moved"
    shutil.move(str(run), str(moved))
    f = moved / "episodes.jsonl"
    recs, _ = sample_mixture(Mixture([Source(str(f), "multimodal_agentic", 1.0, format="episodes")], size=1))
    assert Path(recs[0].workspace).parent == moved / "workspaces" and Path(recs[0].workspace).is_dir()
    ds, _ = build_sft_mixture([DataSource("run", f, "in-house")])
    assert len(ds) == 1 and len(ds[0]["images"]) == 3
    row = sft_row(read_episodes(f)[0], "run", "in-house")
    assert "workspace" not in json.loads(row["episode"]) and str(moved) not in row["episode"]


def test_split_beside_its_run_writes_a_relative_workspace(tmp_path: Path):
    from kit.harness.portable import portable_workspace, resolve_workspace

    ws = tmp_path / "synth" / "trajectories" / "workspaces" / "t-1"
    assert portable_workspace(ws, tmp_path / "synth" / "splits") == str(ws)  # outside: absolute by default
    assert portable_workspace(ws, tmp_path / "synth" / "splits", up=1) == "../trajectories/workspaces/t-1"
    assert portable_workspace(tmp_path / "other" / "w", tmp_path / "synth" / "splits", up=1) == str(tmp_path / "other" / "w")
    moved = tmp_path / "moved" / "splits"
    assert resolve_workspace("../trajectories/workspaces/t-1", moved) == str(moved.parent / "trajectories" / "workspaces" / "t-1")


def test_split_and_rendered_datasets_write_portable_workspaces(tmp_path: Path):
    """The other episode-file writers: notebook 02's SFT split (workspaces of the sampling run beside it)
    and notebook 03's V-Fold rendered dataset (workspaces inside it)."""
    from kit.data.sample import split_outcomes
    from kit.vfold.training import render_dataset
    from tests.test_sft_target_match import _setup
    from tests.test_vfold_accounting import _real_record

    tasks, recs, outcomes = _setup()
    for r in recs:
        r.workspace = str(tmp_path / "synth" / "trajectories" / "workspaces" / r.id)
    split_outcomes(tasks, recs, outcomes, tmp_path / "synth" / "splits")
    f = tmp_path / "synth" / "splits" / "sft_episodes.jsonl"
    assert [json.loads(x)["workspace"] for x in f.read_text().splitlines()] == \
        ["../trajectories/workspaces/e0", "../trajectories/workspaces/e1"]
    assert read_episodes(f)[0].workspace == recs[0].workspace
    render_dataset([_real_record(tmp_path, MemoryBackend())], tmp_path / "ds")
    line = json.loads((tmp_path / "ds" / "episodes.jsonl").read_text())
    assert line["workspace"] == "workspaces/ep-vfold"
    assert (tmp_path / "ds" / line["workspace"]).is_dir()


def test_transcript_names_no_machine_folder(tmp_path: Path, monkeypatch):
    from kit.harness.transcript import render_transcript

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    run = _run(tmp_path, n=1)
    (rec,) = read_episodes(run / "episodes.jsonl")
    rec.images[0].source_url = str(home / "data" / "q.png")
    rec.messages[-1].content[0].text += f" see {home}/notes.txt"
    html = render_transcript(rec)
    assert str(home) not in html and "~/data/q.png" in html and "~/notes.txt" in html
    assert html.count("data:image/png;base64,") >= 3  # the images still inlined, untouched
