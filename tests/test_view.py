"""The static run viewer (kit.view, docs/viewer.md): index and filters, episode pages, comparisons,
bad input, offline resources, inspect_ai export."""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import shutil
from datetime import datetime
from pathlib import Path

import lxml.html
import pytest
from PIL import Image

from kit.cli import main as cli_main
from kit.eval.metrics import ItemResult
from kit.harness.episode import EpisodeRecord, Event, RegisteredImage, Task
from kit.types import ContentPart, Message, ToolCall
from kit.view import ViewError, build_site, compare_configurations, load_run

ROOT = Path(__file__).resolve().parents[1]
SMOKE_EVAL = ROOT / "results" / "smoke" / "06_evaluation"


def _text(s: str) -> list[ContentPart]:
    return [ContentPart(type="text", text=s)]


def _record(eid: str, config: str, *, status: str = "answered", workspace: Path | None = None) -> EpisodeRecord:
    """An episode with a text-parsed call (turn 1), a function-calling call (turn 2) and events on both."""
    msgs = [
        Message(role="system", content=_text("system prompt"), turn=0),
        Message(role="user", content=[*_text("Which bridge is this?"), ContentPart(type="image", image="user_image_1.png")],
                turn=0),
        Message(role="assistant", turn=1, content=_text(
            '<think>search first</think>\n<tool_call>\n{"name": "web_search", "arguments": {"query": "stone bridge", '
            '"num": 3}}\n</tool_call>')),
        Message(role="tool", name="web_search", tool_call_id="c1", turn=1,
                content=_text("1. Bridge\n   URL: https://example.org/bridge")),
        Message(role="assistant", turn=2, content=_text("<think>read it</think>"),
                tool_calls=[ToolCall(id="c2", name="web_extract", arguments='{"urls": ["https://example.org/bridge"]}')]),
        Message(role="tool", name="web_extract", tool_call_id="c2", turn=2, content=_text("# Bridge page")),
        Message(role="user", intervention=True, turn=2, content=_text("Format error: one action per turn.")),
        Message(role="assistant", turn=3, content=_text("<think>done</think><response>Tower Bridge "
                                                        "<IMG: user_image_1.png></response>")),
    ]
    return EpisodeRecord(
        id=eid, task=Task(id=eid, question=f"question of {eid}", answers=["Tower Bridge"], source="toybench"),
        config_hash="h", policy="toy", messages=msgs, final_response="Tower Bridge <IMG: user_image_1.png>",
        cited_images=["user_image_1.png"], status=status, turns=3, tool_calls=2,
        events=[Event(type="argument_repair", turn=1, detail={"repairs": ["code_fence_removed"]}),
                Event(type="duplicate_suppressed", turn=2)],
        images=[RegisteredImage(ref="user_image_1", filename="user_image_1.png", kind="user_image", sha256="0" * 64,
                                width=4, height=4, mime="image/png", source_url="https://example.org/img.png")],
        workspace=str(workspace) if workspace else None, labels=["toy", f"config:{config}", "repeat:0"])


def _pred(eid: str, config: str, correct: bool, match: bool | None = None, status: str = "answered") -> ItemResult:
    return ItemResult(benchmark="toybench", config=config, repeat=0, task_id=eid, episode_id=eid, status=status,
                      correct=correct, score=float(correct), match=match, has_target=match is not None)


@pytest.fixture()
def eval_run(tmp_path: Path) -> Path:
    """An evaluation folder: configurations ``harness`` and ``no_refeed`` of toybench, 3 tasks each, with
    predictions; ep_b's outcome changes between them; one malformed line; one prediction without record."""
    run = tmp_path / "eval"
    outcomes = {"harness": {"ep_a": True, "ep_b": True, "ep_c": False},
                "no_refeed": {"ep_a": True, "ep_b": False, "ep_c": False}}
    for cfg, outs in outcomes.items():
        d = run / "runs" / "toybench" / cfg / "r0"
        lines = []
        for eid in outs:
            ws = d / "workspaces" / f"{eid}-abc"
            ws.mkdir(parents=True)
            Image.new("RGB", (4, 4), (200, 10, 10)).save(ws / "user_image_1.png")
            lines.append(_record(eid, cfg, workspace=ws).model_dump_json())
        if cfg == "no_refeed":
            lines.append('{"id": "broken", "task": ')  # a line cut mid-write
        (d / "episodes.jsonl").write_text("\n".join(lines) + "\n")
        preds = [_pred(e, cfg, c, match=c if e == "ep_c" else None) for e, c in outs.items()]
        if cfg == "harness":
            preds.append(ItemResult(benchmark="secretbench", config=cfg, repeat=0, task_id="s1", episode_id="s1",
                                    status="answered", correct=False, sensitive=True))
        p = run / "predictions" / f"toybench__{cfg}__r0.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n".join(x.model_dump_json() for x in preds) + "\n")
    return run


def _doc(path: Path):
    return lxml.html.fromstring(path.read_text(encoding="utf-8"))


def test_index_lists_every_item_with_filter_attributes(eval_run: Path, tmp_path: Path):
    index = build_site([eval_run], tmp_path / "site")
    doc = _doc(index)
    rows = doc.xpath('//table[@id="episodes"]//tr[@class="item"]')
    # 6 episode records + the sensitive prediction whose record is private; the broken line is reported
    assert len(rows) == 7
    ids = sorted(r.xpath("td[5]")[0].text_content().split()[0] for r in rows)
    assert ids == ["ep_a", "ep_a", "ep_b", "ep_b", "ep_c", "ep_c", "s1"]
    b_no = [r for r in rows if r.get("data-config") == "no_refeed" and "ep_b" in r.text_content()][0]
    assert (b_no.get("data-status"), b_no.get("data-benchmark"), b_no.get("data-correct")) == ("answered", "toybench", "wrong")
    assert " argument_repair " in b_no.get("data-events") and " duplicate_suppressed " in b_no.get("data-events")
    c_h = [r for r in rows if r.get("data-config") == "harness" and "ep_c" in r.text_content()][0]
    assert c_h.get("data-match") == "no match"
    filters = {s.get("data-filter"): [o.get("value") for o in s.xpath("option")] for s in doc.xpath("//select")}
    assert set(filters) == {"run", "status", "benchmark", "config", "events", "correct", "match"}
    assert filters["config"] == ["", "harness", "no_refeed"] and "argument_repair" in filters["events"]
    skipped = doc.xpath('//div[@class="skipped"]')[0].text_content()
    assert "1 line skipped" in skipped and "runs/toybench/no_refeed/r0/episodes.jsonl" in skipped and "not JSON" in skipped
    assert "sensitive benchmark" in doc.xpath('//tr[@data-benchmark="secretbench"]')[0].text_content()
    assert "correct 3" in doc.text_content() and "wrong 4" in doc.text_content()  # the counts line


def test_episode_page_calls_structured_events_on_their_turn_images_copied(eval_run: Path, tmp_path: Path):
    index = build_site([eval_run], tmp_path / "site")
    link = _doc(index).xpath('//tr[@data-config="harness"]//a[text()="ep_a"]')[0].get("href")
    page = index.parent / link
    doc = _doc(page)
    calls = doc.xpath('//div[@class="call"]')
    text_call, fc_call = calls
    assert text_call.get("data-call-source") == "parsed from text"
    assert text_call.xpath('.//span[@class="fn"]')[0].text == "web_search"
    rows = {tr.xpath("td")[0].text_content(): tr.xpath("td")[1].text_content() for tr in text_call.xpath(".//tr")}
    assert rows == {"query": "stone bridge", "num": "3"}  # arguments as a table, not the raw JSON
    assert fc_call.get("data-call-source") == "function calling"
    assert fc_call.xpath('.//span[@class="fn"]')[0].text == "web_extract"
    for ev_type, turn in (("argument_repair", "1"), ("duplicate_suppressed", "2")):
        ev = doc.xpath(f'//div[@class="event"][@data-event-type="{ev_type}"]')[0]
        assert ev.xpath('ancestor::section[@class="turn"]')[0].get("data-turn") == turn
    assert doc.xpath('//section[@data-turn="2"]//div[contains(@class, "intervention")]')  # harness message on its turn
    obs = doc.xpath('//div[contains(@class, "tool")]/details')
    assert len(obs) == 2  # observations collapsible
    srcs = [img.get("src") for img in doc.xpath("//img")]
    assert srcs and all(not s.startswith(("data:", "/", "http")) for s in srcs)
    assert all((page.parent / s).resolve().is_file() for s in srcs)


def test_site_has_no_network_references(eval_run: Path, tmp_path: Path):
    index = build_site([eval_run], tmp_path / "site")
    pages = list(index.parent.rglob("*.html"))
    assert len(pages) > 7
    for p in pages:
        html = p.read_text(encoding="utf-8")
        doc = lxml.html.fromstring(html)
        refs = [v for el in doc.iter() if isinstance(el.tag, str) for k, v in el.attrib.items() if k in ("src", "href")]
        assert not [r for r in refs if re.match(r"^\s*(https?:)?//", r)], p
        assert not re.search(r"url\(\s*['\"]?(https?:)?//|@import", html), p
        assert not doc.xpath("//script[@src] | //link[@rel='stylesheet']"), p
    assert "https://example.org/bridge" in (index.parent / "episodes").rglob("*.html").__next__().read_text()  # as text


def test_configuration_comparison_lists_changed_items_first(eval_run: Path, tmp_path: Path):
    pairs = compare_configurations(load_run(eval_run).items, "harness", "no_refeed")
    assert [(p.key[2], p.change) for p in pairs][:1] == [("ep_b", "regressed")]
    assert [p.change for p in pairs[1:]] == ["only A", "same", "same"]  # s1: a prediction of harness only
    index = build_site([eval_run], tmp_path / "site")
    link = _doc(index).xpath('//a[contains(text(), "harness vs no_refeed")]')[0].get("href")
    rows = _doc(index.parent / link).xpath('//tr[@class and starts-with(@class, "pair")]')
    assert rows[0].get("data-change") == "regressed" and "ep_b" in rows[0].text_content()


def test_two_runs_compared_item_by_item(eval_run: Path, tmp_path: Path):
    after = tmp_path / "after"
    d = after / "runs" / "toybench" / "harness" / "r0"
    d.mkdir(parents=True)
    (d / "episodes.jsonl").write_text("\n".join(_record(e, "harness", status=s).model_dump_json()
                                                for e, s in (("ep_a", "answered"), ("ep_c", "context_limit"))) + "\n")
    index = build_site([eval_run, after], tmp_path / "site")
    link = _doc(index).xpath('//a[text()="eval vs after"]')[0].get("href")
    rows = _doc(index.parent / link).xpath('//tr[@data-change]')
    changes = [r.get("data-change") for r in rows]
    # no predictions in "after": ep_c's outcome is its status (answered -> context_limit); ep_a's is judged
    # on one side only, so it counts as changed too; then items only in A
    assert changes[:2] == ["changed", "changed"] and changes[2:] == ["only A"] * 5


def test_bad_input_clear_errors(tmp_path: Path, eval_run: Path, capsys):
    with pytest.raises(ViewError, match="does not exist"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ViewError, match="no episodes.jsonl"):
        load_run(tmp_path / "empty")
    d = tmp_path / "bad"
    d.mkdir()
    (d / "episodes.jsonl").write_text('{"id": 3}\nnot json\n\n')
    run = load_run(d)
    assert run.items == [] and [(s.line, s.reason.split(":")[0]) for s in run.skipped] == [
        (1, "not an episode record"), (2, "not JSON")]
    assert cli_main(["view", str(tmp_path / "missing"), "-o", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    keep = tmp_path / "precious"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a viewer site"):
        build_site([eval_run], keep)
    assert (keep / "notes.txt").read_text() == "mine"  # a folder the builder did not write is never removed


def test_cli_builds_and_rebuilds(eval_run: Path, tmp_path: Path, capsys):
    out = tmp_path / "site"
    assert cli_main(["view", str(eval_run), "-o", str(out)]) == 0
    assert cli_main(["view", str(eval_run), "-o", str(out), "--configs", "harness", "no_refeed"]) == 0
    assert (out / "index.html").is_file() and len(list(out.glob("compare-*.html"))) == 1
    assert "index.html" in capsys.readouterr().out


@pytest.mark.skipif(not (SMOKE_EVAL / "runs").is_dir(), reason="committed smoke evaluation not present")
def test_committed_smoke_evaluation(tmp_path: Path):
    run = load_run(SMOKE_EVAL)
    lines = sum(1 for f in (SMOKE_EVAL / "runs").rglob("episodes.jsonl") for x in f.read_text().splitlines() if x.strip())
    index = build_site([SMOKE_EVAL], tmp_path / "site")
    doc = _doc(index)
    linked = doc.xpath('//tr[@class="item"]//a')
    assert len(linked) == lines == len([i for i in run.items if i.record is not None]) and not run.skipped
    assert doc.xpath('//a[contains(text(), "direct vs harness")]')


def test_inspect_log_round_trip(eval_run: Path, tmp_path: Path, capsys):
    inspect_log = pytest.importorskip("inspect_ai.log")
    out = tmp_path / "logs" / "kit.json"
    assert cli_main(["view", str(eval_run), "-o", str(tmp_path / "site"), "--inspect-log", str(out)]) == 0
    log = inspect_log.read_eval_log(str(out))
    assert log.status == "success" and len(log.samples) == 7
    s = {x.id: x for x in log.samples}["eval/toybench/no_refeed/ep_b"]
    s = inspect_log.resolve_sample_attachments(s, "full")
    assert s.epoch == 1 and s.scores["correct"].value == "I" and s.target == ["Tower Bridge"]
    calls = [c for m in s.messages if m.role == "assistant" for c in (m.tool_calls or [])]
    assert [(c.function, c.arguments) for c in calls] == [("web_search", {"query": "stone bridge", "num": 3}),
                                                          ("web_extract", {"urls": ["https://example.org/bridge"]})]
    assert [(e.data["type"], e.data["turn"]) for e in s.events if e.event == "info"] == [
        ("argument_repair", 1), ("duplicate_suppressed", 2)]
    user = [m for m in s.messages if m.role == "user"][0]
    assert any(getattr(c, "image", "").startswith("data:image/png;base64,") for c in user.content)
    raw = json.loads(out.read_text())
    assert raw["eval"]["task"] == "kit/eval" and raw["results"]["scores"][0]["metrics"]["accuracy"]["value"] == 3 / 7
    assert "does not match inspect_ai's log file pattern" in capsys.readouterr().err  # kit.json: not listed


def test_inspect_log_folder_is_listed_by_inspect_with_question_input_times_and_counts(eval_run: Path, tmp_path: Path,
                                                                                      capsys):
    """--inspect-log DIR: inspect_ai's list_eval_logs finds the log; INPUT is the question (not the system
    prompt), the stats have start/end times (no NaN duration), dataset samples x epochs = samples written."""
    inspect_log = pytest.importorskip("inspect_ai.log")
    shutil.copytree(eval_run / "runs" / "toybench" / "harness" / "r0", eval_run / "runs" / "toybench" / "harness" / "r1")
    logs = tmp_path / "logs"
    assert cli_main(["view", str(eval_run), "-o", str(tmp_path / "site"), "--inspect-log", str(logs)]) == 0
    assert "warning" not in capsys.readouterr().err
    (info,) = inspect_log.list_eval_logs(str(logs))
    log = inspect_log.read_eval_log(info)
    s = {(x.id, x.epoch): x for x in log.samples}
    assert s[("eval/toybench/harness/ep_a", 2)].input == "question of ep_a"
    assert s[("eval/toybench/harness/ep_a", 1)].messages[0].role == "system"  # the system prompt stays in messages
    assert len(log.samples) == 10 and log.results.total_samples == 10 and log.eval.config.epochs == 2
    assert log.eval.dataset.samples == 7 == len(set(log.eval.dataset.sample_ids))  # 3 ids of r0 only, 3 in both
    start, end = (datetime.fromisoformat(log.stats.started_at), datetime.fromisoformat(log.stats.completed_at))
    assert start <= end and end.tzinfo is not None


def test_images_stored_once_and_large_ones_shrunk(eval_run: Path, tmp_path: Path):
    site = build_site([eval_run], tmp_path / "site").parent
    assert len(list((site / "images").iterdir())) == 1  # one user image shared by 6 episodes
    ws = next(eval_run.rglob("ep_a-abc"))
    Image.effect_noise((2000, 60), 80).convert("RGB").save(ws / "user_image_1.png")
    site = build_site([eval_run], tmp_path / "site").parent
    big = [p for p in (site / "images").iterdir() if p.suffix == ".webp"]
    assert len(big) == 1 and max(Image.open(big[0]).size) == 1024
    site = build_site([eval_run], tmp_path / "site", image_max_side=0).parent
    assert (ws / "user_image_1.png").read_bytes() in [p.read_bytes() for p in (site / "images").iterdir()]


def test_message_view_answer_protocol_and_undecodable_call():
    from kit.view.turns import message_view

    mv = message_view(Message(role="assistant", turn=1, content=_text("<think>x</think><answer>Paris</answer>")))
    assert mv.response == "Paris" and mv.calls == []  # POINTS-Seeker's <answer> tag
    mv = message_view(Message(role="assistant", turn=1, content=_text('<think>x</think><tool_call>{"name": "web_search", '
                                                                        '"arguments": {"query": </tool_call>')))
    assert [(c.arguments, c.error is not None, c.source) for c in mv.calls] == [(None, True, "parsed from text")]
    assert '"web_search"' in mv.calls[0].raw  # the page shows the raw call beside the error


def test_evaluation_nested_in_a_larger_run_keeps_its_predictions(eval_run: Path):
    run = load_run(eval_run.parent)  # e.g. results/smoke holding 06_evaluation/
    judged = {(i.configuration, i.episode_id): i.correct for i in run.items if i.benchmark == "toybench"}
    assert judged == {("harness", "ep_a"): True, ("harness", "ep_b"): True, ("harness", "ep_c"): False,
                      ("no_refeed", "ep_a"): True, ("no_refeed", "ep_b"): False, ("no_refeed", "ep_c"): False}
    assert [i.source for i in run.items if i.record is None] == ["eval/predictions"]


def test_workspace_found_beside_episodes_when_the_recorded_path_moved(tmp_path: Path):
    d = tmp_path / "moved"
    ws = d / "workspaces" / "ep_a-abc"
    ws.mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(ws / "user_image_1.png")
    rec = _record("ep_a", "harness", workspace=Path("/elsewhere/results/workspaces/ep_a-abc"))  # cloned elsewhere
    (d / "episodes.jsonl").write_text(rec.model_dump_json() + "\n")
    (page,) = (build_site([d], tmp_path / "site").parent / "episodes").rglob("*.html")
    doc = _doc(page)
    assert doc.xpath("//img") and not doc.xpath('//*[@class="missing"]')


def _secret_png(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (1, 2, 3)).save(path)
    return path.read_bytes()


def test_files_outside_the_run_are_never_read(tmp_path: Path):
    """A workspace recorded outside the run (``/etc``-like), one that is a symlink out of it and a file
    symlinked out of an inside workspace: nothing is copied, the page says why; a workspace recorded
    outside but present in ``workspaces/`` beside episodes.jsonl (a copied results folder) is shown."""
    outside = tmp_path / "outside"
    secret = _secret_png(outside / "user_image_1.png")
    run = tmp_path / "run"
    d = run / "model"
    (d / "workspaces" / "moved-1").mkdir(parents=True)
    Image.new("RGB", (4, 4), (9, 9, 9)).save(d / "workspaces" / "moved-1" / "user_image_1.png")
    (run / "wsdir").symlink_to(outside, target_is_directory=True)
    (d / "workspaces" / "inside-2").mkdir()
    (d / "workspaces" / "inside-2" / "user_image_1.png").symlink_to(outside / "user_image_1.png")
    shutil.copytree(d / "workspaces" / "moved-1", outside / "moved-1")  # the recorded path exists, outside
    recs = [_record("abs", "c", workspace=outside), _record("symdir", "c", workspace=run / "wsdir"),
            _record("symfile", "c", workspace=d / "workspaces" / "inside-2"),
            _record("moved", "c", workspace=outside / "moved-1")]
    (d / "episodes.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in recs))
    site = build_site([run], tmp_path / "site").parent
    stored = [p.read_bytes() for p in (site / "images").iterdir()] if (site / "images").is_dir() else []
    assert secret not in stored and len(stored) == 1  # only the copy inside the run
    pages = {p.stem.split("__")[-1]: _doc(p) for p in (site / "episodes").rglob("*.html")}
    for eid in ("abs", "symdir", "symfile"):
        why = pages[eid].xpath('//p[@class="missing"]')[0].text_content()
        # a planted link is refused; a recorded path of another copy is "not in this copy", and not read
        assert ("image not in this copy of the run" in why and "outside the run is not read" in why if eid == "abs"
                else "image not available (outside the run)" in why)
        assert not pages[eid].xpath("//img")
    assert pages["moved"].xpath("//img") and not pages["moved"].xpath('//p[@class="missing"]')
    if importlib.util.find_spec("inspect_ai") is not None:
        from kit.view.inspect_export import write_inspect_log

        path, _ = write_inspect_log([run], tmp_path / "log.json")
        assert base64.b64encode(secret).decode() not in path.read_text()


def test_output_folder_is_never_a_run_folder_or_above_it(eval_run: Path, tmp_path: Path, capsys):
    """-o equal to the run folder or one of its parents is refused even with the site marker planted,
    so is a marked folder inside the run that holds the run's files; -o an existing file: exit 2."""
    (eval_run / ".kit-view").write_text("planted")
    (tmp_path / ".kit-view").write_text("planted")
    inner = eval_run / "runs" / "toybench"
    (inner / ".kit-view").write_text("planted")
    for out in (eval_run, tmp_path, inner):
        with pytest.raises(ValueError, match="run folder"):
            build_site([eval_run], out)
        assert cli_main(["view", str(eval_run), "-o", str(out)]) == 2
        assert "run folder" in capsys.readouterr().err
    assert len(list(eval_run.rglob("episodes.jsonl"))) == 2 and len(list(eval_run.rglob("*.png"))) == 6
    other = tmp_path / "other"
    other.mkdir()
    (other / "episodes.jsonl").write_text(_record("ep_a", "harness").model_dump_json() + "\n")
    with pytest.raises(ValueError, match="run folder"):  # the second run of a comparison counts too
        build_site([other, eval_run], eval_run)
    (tmp_path / "link").symlink_to(eval_run, target_is_directory=True)
    with pytest.raises(ValueError, match="symlink"):
        build_site([eval_run], tmp_path / "link")
    marked = tmp_path / "marked"  # the marker alone does not make a folder replaceable
    marked.mkdir()
    (marked / ".kit-view").write_text("planted")
    (marked / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="notes.txt"):
        build_site([eval_run], marked)
    assert (marked / "notes.txt").read_text() == "mine"
    file_out = tmp_path / "site.html"
    file_out.write_text("mine")
    assert cli_main(["view", str(eval_run), "-o", str(file_out)]) == 2
    assert "not a folder" in capsys.readouterr().err and file_out.read_text() == "mine"
    assert cli_main(["view", str(eval_run), "-o", str(file_out / "sub")]) == 2
    assert "view:" in capsys.readouterr().err
    assert cli_main(["view", str(eval_run)]) == 0  # the default RUN/view inside the run still builds
    assert cli_main(["view", str(eval_run)]) == 0 and (eval_run / "view" / "index.html").is_file()


def test_deeply_nested_and_huge_number_lines_are_skipped_with_a_reason(tmp_path: Path):
    d = tmp_path / "deep"
    d.mkdir()
    good = _record("ep_a", "c").model_dump_json()
    (d / "episodes.jsonl").write_text("[" * 50000 + "]" * 50000 + "\n" + '{"id": ' + "7" * 5000 + "}\n" + good + "\n")
    run = load_run(d)
    assert [i.episode_id for i in run.items] == ["ep_a"]
    assert [s.line for s in run.skipped] == [1, 2]
    assert "nested too deeply" in run.skipped[0].reason and run.skipped[1].reason.startswith("not JSON")
    index = build_site([d], tmp_path / "site")
    assert "2 lines skipped" in _doc(index).xpath('//div[@class="skipped"]')[0].text_content()


def _clone_run(tmp_path: Path) -> Path:
    """A run whose 3 episodes record their workspaces by absolute path and register their image's real sha256."""
    import hashlib

    d = tmp_path / "run" / "model"
    lines = []
    for k, eid in enumerate(["ep_a", "ep_b", "ep_c"]):
        ws = d / "workspaces" / f"{eid}-1"
        ws.mkdir(parents=True)
        Image.new("RGB", (4 + k, 4), (k, 9, 9)).save(ws / "user_image_1.png")
        rec = _record(eid, "c", workspace=ws)
        rec.images[0].sha256 = hashlib.sha256((ws / "user_image_1.png").read_bytes()).hexdigest()
        lines.append(rec.model_dump_json())
    (d / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "run"


def _shown(site: Path) -> tuple[int, list[str]]:
    docs = [_doc(p) for p in (site / "episodes").rglob("*.html")]
    return (sum(len(d.xpath("//img")) for d in docs),
            [d.xpath('//p[@class="missing"]')[0].text_content() for d in docs if d.xpath('//p[@class="missing"]')])


def test_rebuild_in_a_clone_keeps_every_image_by_content(tmp_path: Path):
    """A clone has no workspaces/ (gitignored): rebuilding into the same -o, or from the run's committed site
    (RUN_DIR/view), shows every image again, taken by its registered sha256; without either it says why."""
    run = _clone_run(tmp_path)
    site = build_site([run], tmp_path / "site").parent
    before = _shown(site)
    assert before[0] == 6 and not before[1]  # 3 pages, each image shown in its message and as cited
    build_site([run], run / "view")  # the committed site
    shutil.rmtree(run / "model" / "workspaces")
    assert _shown(build_site([run], tmp_path / "site").parent) == before  # same -o: none lost
    assert _shown(build_site([run], tmp_path / "other").parent) == before  # from RUN_DIR/view
    assert _shown(build_site([run], run / "view").parent) == before  # the committed site rebuilt in place
    shutil.rmtree(run / "view")
    n, why = _shown(build_site([run], tmp_path / "fresh").parent)
    assert n == 0 and len(why) == 3 and all("image not in this copy of the run (workspaces/ are not committed)" in w
                                            and "outside the run)" not in w for w in why)


@pytest.mark.skipif(not (ROOT / "results" / "smoke" / "view" / "images").is_dir() or shutil.which("git") is None
                    or not (ROOT / ".git").exists(), reason="committed smoke site or git not present")
def test_committed_site_images_are_not_gitignored():
    """Every image the committed smoke site shows is committable: a small PNG kept as is fell under
    ``results/**/*.png`` in .gitignore, so a clone's pages lacked it."""
    import subprocess

    site = ROOT / "results" / "smoke" / "view"
    shown = sorted({m for p in (site / "episodes").rglob("*.html")
                    for m in re.findall(r'src="\.\./\.\./(images/[^"]+)"', p.read_text(encoding="utf-8"))})
    assert shown
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *[f"results/smoke/view/{s}" for s in shown]],
                             cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert ignored == []


def test_empty_benchmark_has_its_own_filter_value_and_wide_cells_wrap_with_full_title(tmp_path: Path):
    """An item without benchmark is selectable ("(none)"; "" is "all"); the events cell and the evidence
    registry's sha256 / source cells carry their full value in a title, and table cells wrap."""
    d = tmp_path / "run" / "m"
    d.mkdir(parents=True)
    blank = _record("ep_x", "c")
    blank.task.source = ""
    blank.images[0].source_url = "zim://wikipedia_en_" + "x" * 200 + ".jpg"
    (d / "episodes.jsonl").write_text(blank.model_dump_json() + "\n" + _record("ep_y", "c").model_dump_json() + "\n")
    site = build_site([tmp_path / "run"], tmp_path / "site").parent
    doc = _doc(site / "index.html")
    opts = doc.xpath('//select[@data-filter="benchmark"]/option/@value')
    assert opts == ["", "(none)", "toybench"]
    rows = doc.xpath('//tr[@class="item"]')
    assert sorted(r.get("data-benchmark") for r in rows) == ["(none)", "toybench"]
    ev = rows[0].xpath('./td[@class="ev"]')[0]
    assert ev.get("title") == ev.text_content() == "argument_repair×1, duplicate_suppressed×1"
    # URLs break anywhere; other cells only where a word cannot fit ("smoke", not "sm oke"), paths at "/"
    css = (site / "index.html").read_text()
    assert re.search(r"td\{overflow-wrap:break-word\}td\.url\{overflow-wrap:anywhere\}"
                     r"td\.ev\{min-width:12em\}\.scroll\{overflow-x:auto\}", css)
    assert doc.xpath('//div[@class="scroll"]/table[@id="episodes"]')  # wide tables scroll, the page does not
    page = _doc(next((site / "episodes").rglob("*ep_x.html")))
    sha = page.xpath('//td[@class="h"]')[0]
    assert sha.get("title") == "0" * 64 and sha.text_content() == "0" * 12 + "…"
    assert page.xpath(f'//td[@class="url"][@title="{blank.images[0].source_url}"]')
