"""Hostile run folders and episode files against the viewer and the portable-path readers (issue 18 attack
findings): markup in a run folder's name, absolute paths left in pages, ``data:`` text in a transcript,
symlinks out of the run, ``../`` workspaces, odd workspace strings, old runs copied elsewhere."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import lxml.html
import pytest
from pydantic import ValidationError

from kit.harness.episode import EpisodeRecord, Task
from kit.harness.portable import WorkspacePathError, portable_workspace, resolve_workspace
from kit.harness.runner import read_episodes
from kit.harness.transcript import render_transcript
from kit.view import build_site
from kit.view.load import OUTSIDE_SYMLINK, find_workspace, load_run
from kit.view.paths import PathScrubber
from tests.conftest import png_bytes


def _rec(eid: str = "ep1", **kw) -> dict:
    rec = EpisodeRecord(id=eid, task=Task(id=eid, question="Which bridge?"), config_hash="c", status="answered",
                        final_response="A bridge", labels=["config:base"])
    return {**json.loads(rec.model_dump_json()), **kw}


def _write(path: Path, *recs: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return path


def _pages(index: Path) -> dict[str, str]:
    return {p.relative_to(index.parent).as_posix(): p.read_text(encoding="utf-8") for p in index.parent.rglob("*.html")}


# 1. a run folder named like markup stays text


def test_run_folder_named_like_markup_is_escaped(tmp_path: Path):
    run = tmp_path / '<img src=x onerror=alert(1)>"q'
    rec = _rec(status="error", error=f"OSError: cannot open {run}/workspaces/w/x.png")
    rec["task"]["question"] = f"see {run}/notes.txt"
    _write(run / "episodes.jsonl", rec)
    pages = _pages(build_site([run], tmp_path / "site"))
    for name, html in pages.items():
        assert "<img src=x" not in html, name
        doc = lxml.html.fromstring(html)
        assert not doc.xpath("//*[@onerror]"), name  # no live attribute from the folder name
        assert all(el.get("data-config") is not None for el in doc.xpath("//tr[@data-run]")), name
    assert "&lt;img src=x onerror=alert(1)&gt;&#34;q/notes.txt" in pages["episodes/0/ep1.html"]


# 2. no absolute path of this machine in a page


def test_scrubber_covers_tmp_cache_siblings_and_other_absolute_paths(tmp_path: Path):
    from kit.paths import cache_dir

    run = tmp_path / "runs" / "r1"
    tmp, cache = tempfile.gettempdir(), str(cache_dir())
    scrub = PathScrubber({str(run): "r1"})
    text = (f"a {tmp}/x/y.png b file://{tmp}/u/v.png c {cache}/idx/i.bin d /srv/other/checkout/deep/secret.txt "
            f"e {run.parent}/r2/z f https://example.org/srv/a/b g file:///srv/q/w/e/r.png h data:text/plain,/a/b")
    out = scrub(text)
    assert tmp not in out and cache not in out and "/srv/" not in out.replace("https://example.org/srv/a/b", "")
    assert "$TMPDIR/x/y.png" in out and "$TMPDIR/u/v.png" in out and "$MMSEARCH_KIT_CACHE/idx/i.bin" in out
    assert "…/checkout/deep/secret.txt" in out and "…/w/e/r.png" in out
    assert "https://example.org/srv/a/b" in out  # URLs are kept
    assert scrub("</pre></td> 3/4 and/or a/b/c") == "</pre></td> 3/4 and/or a/b/c"  # tags, fractions, relative
    assert scrub("error:/srv/a/b/c/d") == "error:…/b/c/d"
    assert scrub(r"at C:\Users\bob\x\secret.png") == "at …/bob/x/secret.png"  # a Windows path
    assert PathScrubber({"/srv/runs/r1": "r1"})("/srv/runs/r1/x and /srv/runs/r2/z") == "r1/x and …/r2/z"  # a sibling


def test_site_pages_show_no_tmp_or_other_absolute_path(tmp_path: Path):
    run = tmp_path / "run"
    rec = _rec(status="error", error='Traceback: File "/opt/elsewhere/lib/secret_mod.py", line 3',
               labels=[f"config:{tempfile.gettempdir()}/cfg"])
    rec["task"]["question"] = f"Q {tmp_path}/inputs/q.png and /work/other_checkout/x/secret_other.txt"
    _write(run / "episodes.jsonl", rec)
    for name, html in _pages(build_site([run], tmp_path / "site")).items():
        for leak in (str(tmp_path), tempfile.gettempdir() + "/", "/opt/elsewhere", "/work/other_checkout"):
            assert leak not in html, (name, leak)


# 3. the transcript scrubs text that merely starts with "data:"


def test_transcript_scrubs_text_starting_with_data(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "user_image_1.png").write_bytes(png_bytes(size=(4, 3)))
    rec = EpisodeRecord.model_validate(_rec(status="error", error=f"data:{tmp_path}/x failed", workspace=str(ws)))
    rec.task.question = f"data: the file {tmp_path}/secret.py"
    rec.cited_images = ["user_image_1.png"]
    html = render_transcript(rec)
    assert str(tmp_path) not in html
    assert 'src="data:image/png;base64,' in html  # the inlined image is still a working data URI


# 4. symlinks out of the run are listed, never read


def test_symlinked_episode_files_and_folders_outside_the_run_are_listed(tmp_path: Path):
    secret = tmp_path / "secret"
    _write(secret / "private.jsonl", _rec("SECRET"))
    _write(secret / "sub" / "episodes.jsonl", _rec("IN_LINKED_DIR"))
    run = tmp_path / "run"
    _write(run / "episodes.jsonl", _rec("normal"))
    _write(run / "inner" / "episodes.jsonl", _rec("inner"))
    (run / "a").mkdir()
    os.symlink(secret / "private.jsonl", run / "a" / "episodes.jsonl")
    os.symlink(secret / "sub", run / "linked")
    os.symlink(run / "inner", run / "alias")  # inside: read once, at its real place
    _write(secret / "preds.jsonl", {"bogus": 1})
    (run / "predictions").mkdir()
    os.symlink(secret / "preds.jsonl", run / "predictions" / "p.jsonl")
    r = load_run(run)
    assert sorted(i.episode_id for i in r.items) == ["inner", "normal"]
    got = {(s.file, s.line, s.reason) for s in r.skipped}
    assert got == {("a/episodes.jsonl", 0, OUTSIDE_SYMLINK), ("linked", 0, f"{OUTSIDE_SYMLINK}: folder not read"),
                   ("predictions/p.jsonl", 0, OUTSIDE_SYMLINK)}
    html = (build_site([run], tmp_path / "site").read_text())
    assert "SECRET" not in html and "a/episodes.jsonl" in html and OUTSIDE_SYMLINK in html


# 5. relative workspaces may climb one level, no more


def test_relative_workspace_climbing_out_of_the_run_is_refused(tmp_path: Path):
    f = tmp_path / "a" / "b" / "episodes.jsonl"
    assert resolve_workspace("../trajectories/workspaces/t", f.parent) == str(tmp_path / "a" / "trajectories" / "workspaces" / "t")
    for bad in ("../../x", "../../../../../../etc", "w/../../../x"):
        with pytest.raises(WorkspacePathError, match="climbs"):
            resolve_workspace(bad, f.parent)
    _write(f, _rec("ok"), _rec("bad", workspace="../../../../etc"))  # the last line: refused, not dropped
    with pytest.raises(WorkspacePathError, match="line 2"):
        read_episodes(f)
    r = load_run(tmp_path / "a")
    ws, why = find_workspace(next(i for i in r.items if i.episode_id == "bad"))
    assert ws is None and why.startswith("workspace refused")


def test_sft_mixture_refuses_a_climbing_workspace(tmp_path: Path):
    from kit.data.mixtures import DataSource, MixtureDataError, build_sft_mixture

    p = _write(tmp_path / "run" / "x.jsonl", _rec("e", trainable=True, workspace="../../outside"))
    with pytest.raises(MixtureDataError, match="climbs"):
        build_sft_mixture([DataSource("x", p, "in-house")], seed=0)


# 6. odd workspace strings: a clear error, never a raw traceback


def test_workspace_field_refuses_nul_and_overlong_strings(tmp_path: Path):
    for bad in ("work\x00spaces/good", "a/" * 50_000):
        with pytest.raises(ValidationError, match="workspace"):
            EpisodeRecord.model_validate(_rec(workspace=bad))
        f = _write(tmp_path / f"{len(bad)}" / "episodes.jsonl", _rec(workspace=bad), _rec("next"))
        with pytest.raises(ValueError, match="line 1") as e:
            read_episodes(f)
        assert len(str(e.value)) < 2000  # the 100k-character path is not echoed
    assert portable_workspace("/elsewhere/a\x00b", tmp_path) == "/elsewhere/a\x00b"  # no ValueError from resolve()


# 7. an old run (absolute workspaces) copied elsewhere: every reader uses the copy's workspaces


def test_old_run_copied_elsewhere_reads_the_copy_workspaces(tmp_path: Path):
    import shutil

    orig = tmp_path / "orig"
    (orig / "workspaces" / "e-1").mkdir(parents=True)
    _write(orig / "episodes.jsonl", _rec("e", workspace=str(orig / "workspaces" / "e-1")))
    copy = tmp_path / "copy"
    shutil.copytree(orig, copy)
    assert read_episodes(copy / "episodes.jsonl")[0].workspace == str(copy / "workspaces" / "e-1")
    shutil.rmtree(orig)
    assert read_episodes(copy / "episodes.jsonl")[0].workspace == str(copy / "workspaces" / "e-1")
    assert find_workspace(load_run(copy).items[0])[0] == (copy / "workspaces" / "e-1").resolve()
