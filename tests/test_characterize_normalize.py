"""Characterization of the two trajectory normalizers (issue 30, part 7): every real MMSearch-R1 trace
file in the shared data and a set of hand-made hostile rows (truncated and nested tags, missing
fields, wrong types, every image shape) go through ``to_episode``; each row's outcome is pinned as
the sha256 of the record's canonical JSON, or the reject reason with a hash of its detail, plus a hash
of every file written into the workspaces. The fixture was generated from the code before its
``to_episode`` functions were split into steps; regenerate it (only for an intended change) with
``python tests/test_characterize_normalize.py --write``.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "fixtures" / "normalize_fingerprints.json"


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def _local(text: str, roots: dict[str, str]) -> str:
    """``text`` with machine-specific folders and object addresses (PIL's errors name them) replaced."""
    for path, name in roots.items():
        text = text.replace(path, name)
    return re.sub(r" at 0x[0-9a-fA-F]+", " at 0x", text)


def _canonical(rec: Any, roots: dict[str, str]) -> str:
    """The record's JSON with sorted keys, machine-independent."""
    return _local(json.dumps(rec.model_dump(mode="json"), sort_keys=True, ensure_ascii=False, separators=(",", ":")),
                  roots)


def _tree(root: Path) -> str:
    """One hash over every file under ``root`` (relative path and content)."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(f"{p.relative_to(root).as_posix()}\0{_sha(p.read_bytes())}\n".encode())
    return h.hexdigest()


def _run(adapter: Any, rows: list, ws_root: Path, roots: dict[str, str]) -> dict[str, Any]:
    """Each row through ``adapter.to_episode`` in order; its outcome, reject counts and written files."""
    from kit.data.normalize import NormalizeError

    ws_root.mkdir(parents=True, exist_ok=True)
    out: list[str] = []
    rejects: Counter = Counter()
    for i, row in enumerate(rows):
        try:
            rec = adapter.to_episode(row, i, ws_root)
        except NormalizeError as e:
            rejects[e.reason] += 1
            out.append(f"!{e.reason}:{_sha(_local(e.detail, roots))[:16]}")
            continue
        except Exception as e:  # pinned too: a refactor must not change what escapes
            rejects[f"exception:{type(e).__name__}"] += 1
            out.append(f"!!{type(e).__name__}:{_sha(_local(str(e), roots))[:16]}")
            continue
        out.append(_sha(_canonical(rec, roots)))
    schemas = json.dumps(adapter.tool_schemas(), sort_keys=True)
    return {"rows": len(rows), "kept": len(rows) - sum(rejects.values()), "rejects": dict(sorted(rejects.items())),
            "records": out, "workspace_files": _tree(ws_root), "tool_schemas": _sha(schemas)[:16]}


# ---------------------------------------------------------------------------- MMSearch-R1 hostile rows
def _mmr1_hostile(rows: list[dict], img_dir: Path) -> list[Any]:
    """Hand-made rows built from real traces: each damages one thing."""
    full = next(r for r in rows if [x["action"] for x in r["trace"]["rounds"]] == ["image_search", "text_search", "answer"]
                and r["trace"].get("terminal_status") == "answered")
    short = next(r for r in rows if [x["action"] for x in r["trace"]["rounds"]] == ["answer"])
    failed = next(r for r in rows if str(r["trace"].get("terminal_status", "")).endswith("hard_failure"))
    png = (img_dir / Path(full["trace"]["image"]["path"]).name).read_bytes()
    out: list[Any] = []

    def edit(base: dict, fn) -> None:
        row = copy.deepcopy(base)
        fn(row["trace"], row)
        out.append(row)

    def last(tr: dict) -> dict:
        return tr["rounds"][-1]

    edit(full, lambda t, r: last(t).update(response="<reason>sure</reason><answer>Tagus"))  # truncated answer tag
    edit(full, lambda t, r: last(t).update(response="<reason>sure</reason><answer>Tagus", parsed_payload=None))
    edit(full, lambda t, r: last(t).update(response="<reason>x</reason><answer><answer>A</answer></answer>"))  # nested
    edit(full, lambda t, r: last(t).update(response="<reason>x</reason><answer>A</answer> <answer>B</answer>"))
    edit(full, lambda t, r: last(t).update(response="<reason>never closed <answer>A</answer>"))  # truncated reason
    edit(full, lambda t, r: last(t).update(response="no tags at all", parsed_payload=["one"]))
    edit(full, lambda t, r: last(t).update(response="no tags", parsed_payload=True))
    edit(full, lambda t, r: last(t).update(response="no tags", parsed_payload={"a": 1}))
    edit(full, lambda t, r: last(t).update(response="no tags", parsed_payload=[1, 2]))
    edit(full, lambda t, r: t["rounds"][1].update(response="<reason>r</reason><text_search>cut off",
                                                  query=None, parsed_payload=None))  # truncated search tag
    edit(full, lambda t, r: t["rounds"][1].update(response="<reason>r</reason><text_search> bridge river </text_search>",
                                                  query=None, parsed_payload=None))
    edit(full, lambda t, r: t["rounds"][1].update(
        response="<reason>r</reason><text_search><text_search>a</text_search></text_search>", query=None,
        parsed_payload=None))  # nested search tag
    edit(full, lambda t, r: t.pop("question"))
    edit(full, lambda t, r: t.update(question=42))
    edit(full, lambda t, r: t.update(question="   "))
    edit(full, lambda t, r: r.pop("trace"))
    out.append({"trace": "not an object"})
    out.append({"trace": {"rounds": []}})
    out.append({"trace": {"rounds": "x", "question": "q"}})
    edit(full, lambda t, r: t["rounds"].insert(0, "not a round"))
    edit(full, lambda t, r: t["rounds"][0].update(response="   "))
    edit(full, lambda t, r: t["rounds"][0].pop("response"))
    edit(full, lambda t, r: t["rounds"][0].update(action="browse"))
    edit(full, lambda t, r: t["rounds"][0].pop("action"))
    edit(full, lambda t, r: t.pop("image"))
    edit(full, lambda t, r: t.update(image=""))
    edit(full, lambda t, r: t.update(image={"width": 3}))
    edit(full, lambda t, r: t.update(image=["a list"]))
    edit(full, lambda t, r: t.update(image="data:image/png;base64," + base64.b64encode(png).decode()))
    edit(full, lambda t, r: t.update(image={"bytes": base64.encodebytes(png).decode(), "path": "x.png"}))
    edit(full, lambda t, r: t.update(image={"bytes": "###not base64###"}))
    edit(full, lambda t, r: t.update(image={"bytes": base64.b64encode(b"not an image").decode()}))
    edit(full, lambda t, r: t.update(image={"bytes": 12}))
    edit(full, lambda t, r: t.update(image={"url": "https://example.org/x/" + Path(t["image"]["path"]).name + "?s=1"}))
    edit(full, lambda t, r: t.update(image={"url": "https://example.org/"}))
    edit(full, lambda t, r: t.update(image={"path": 7}))
    edit(full, lambda t, r: t.update(image="/elsewhere/" + Path(t["image"]["path"]).name))
    edit(full, lambda t, r: t.update(image="/elsewhere/absent.png"))
    edit(full, lambda t, r: t["image"].update(png_sha256="0" * 64))
    edit(full, lambda t, r: t["image"].update(png_sha256=t["image"]["png_sha256"].upper()))
    edit(full, lambda t, r: t.update(hard_failures=[{"round": "2", "stage": "tool", "error": "boom"}]))
    edit(full, lambda t, r: t.update(hard_failures=[{"round": 1.0, "stage": "tool", "error": "boom"}]))
    edit(full, lambda t, r: t.update(hard_failures=[{"round": True, "error": "b"}], terminal_status="x_hard_failure"))
    edit(full, lambda t, r: t.update(hard_failures=[{"round": "two"}]))
    edit(full, lambda t, r: t.update(hard_failures=[{"round": 9, "stage": "late", "error": "after the end"}]))
    edit(full, lambda t, r: t.update(hard_failures="nope"))
    edit(full, lambda t, r: t.update(hard_failures=["nope"]))
    edit(full, lambda t, r: (t["rounds"].pop(), t.update(terminal_status="text_search_hard_failure", hard_failures=[])))
    edit(full, lambda t, r: t["rounds"][0].update(tool="not a dict"))
    edit(full, lambda t, r: t["rounds"][0].update(tool={"status": ["x"]}))
    edit(full, lambda t, r: t["rounds"][0].pop("tool", None))
    edit(full, lambda t, r: t["rounds"][1].update(tool={"status": {"other": 1}}))
    edit(full, lambda t, r: t["rounds"][1].update(tool={"status": {}, "returned_text": 5}))
    edit(full, lambda t, r: t["rounds"][1].update(tool={"status": {}, "returned_text": "seen <|vision_start|> x " * 900}))
    edit(full, lambda t, r: t["rounds"][1].update(tool={"status": {}, "returned_text": "short",
                                                        "returned_text_sha256": "f" * 64}))
    edit(full, lambda t, r: t["rounds"][1].update(tool={"status": {}, "returned_text": "short",
                                                        "returned_text_sha256": _sha("short")}))
    edit(full, lambda t, r: t["rounds"][1].update(tool={"status": {"summaries": "x", "results": [
        {"rank": 1, "title": "t", "url": "u", "snippet": "s"}, "junk"]}}))
    edit(full, lambda t, r: t["rounds"][1].update(tool={"status": {"summaries": [
        {"rank": 2, "title": "<b>", "url": "u&v", "summary": "s"}, {"rank": "z"}, {"error": "e"}, "junk"],
        "results": []}, "returned_text_characters": 3}))
    edit(full, lambda t, r: t["rounds"][1].update(tool={"status": {"summaries": []}}))
    edit(full, lambda t, r: last(t).update(tool={"status": {"titles": ["t"]}}))  # result on the answer round
    edit(full, lambda t, r: t.update(final_answer="something else"))
    edit(full, lambda t, r: t.update(final_answer=True))
    edit(full, lambda t, r: t.update(final_answer=3.5))
    edit(short, lambda t, r: t["rounds"].extend(copy.deepcopy(full["trace"]["rounds"])))  # rounds after answer
    edit(short, lambda t, r: t.update(ground_truth={"a": 1}))
    edit(short, lambda t, r: t.update(ground_truth=None, candidate_answers=None))
    edit(short, lambda t, r: t.update(candidate_answers='["x", "X ", 4]'))
    edit(short, lambda t, r: t.update(data_id="../../escape"))
    edit(short, lambda t, r: t.pop("data_id"))
    edit(short, lambda t, r: t.update(terminal_status=None))
    edit(short, lambda t, r: r.update(models={"mmsearch": {"repository": "org/model"}}))
    edit(failed, lambda t, r: t.update(hard_failures=[]))
    edit(failed, lambda t, r: t.update(terminal_status="answered"))
    out.append({"_unparsable": True, "_reason": "bad_encoding", "_error": "line 3"})
    out.append({"_unparsable": True})
    return out


def _thumbs(rows: list[dict], img_dir: Path, folder: Path) -> Path:
    """Every thumbnail the traces name, as a copy of a real image (bytes fixed, no encoder involved)."""
    folder.mkdir(parents=True, exist_ok=True)
    pngs = sorted(img_dir.glob("*.png"))
    names = set()
    for r in rows:
        for rnd in (r.get("trace") or {}).get("rounds") or []:
            st = ((rnd.get("tool") or {}).get("status") or {}) if isinstance(rnd, dict) else {}
            for ref in list(st.get("local_thumbnail_paths") or []) + list(st.get("thumbnail_urls") or []):
                if ref:
                    names.add(Path(str(ref).split("?", 1)[0]).name)
    for i, name in enumerate(sorted(names)):
        if name and i % 5:  # every fifth one stays missing
            (folder / name).write_bytes(pngs[i % len(pngs)].read_bytes())
    return folder


def _mmr1_sets(data_dir: Path, tmp: Path, roots: dict[str, str]) -> dict[str, Any]:
    from kit.data.normalize import MMSearchR1Adapter, read_mmsearch_r1

    tdir = data_dir / "trajectories" / "mmsearch_r1"
    imgs = data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images"
    out: dict[str, Any] = {}
    files = sorted(p for p in tdir.iterdir() if p.suffix in (".json", ".jsonl"))
    every: list = []
    for f in files:
        rows = list(read_mmsearch_r1(f))
        every += rows
        out[f"mmsearch_r1/{f.name}"] = _run(MMSearchR1Adapter(imgs), rows, tmp / f.name, roots)
    thumbs = _thumbs(every, imgs, tmp / "thumbs")
    out["mmsearch_r1/all_files+thumbnails"] = _run(MMSearchR1Adapter(imgs, thumbnail_dir=thumbs), every,
                                                   tmp / "with_thumbs", roots)
    preds = list(read_mmsearch_r1(tdir / "predictions_fvqa50.jsonl"))
    hostile = _mmr1_hostile(preds, imgs)
    out["mmsearch_r1/hostile"] = _run(MMSearchR1Adapter(imgs), hostile, tmp / "hostile", roots)
    out["mmsearch_r1/hostile+thumbnails"] = _run(MMSearchR1Adapter(imgs, prefix="X_", thumbnail_dir=thumbs),
                                                 hostile, tmp / "hostile_thumbs", roots)
    damaged = tmp / "damaged.jsonl"
    lines = (tdir / "predictions_fvqa50.jsonl").read_bytes().splitlines()
    damaged.write_bytes(b"\n".join([lines[0], lines[1][:500], b"\xff\xfe junk", b"[" * 5000, lines[2]]) + b"\n")
    out["mmsearch_r1/damaged_file"] = _run(MMSearchR1Adapter(imgs), list(read_mmsearch_r1(damaged)),
                                           tmp / "damaged", roots)
    return out


# ---------------------------------------------------------------------------- chat rows
def _png(color: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> bytes:
    """A small PNG written byte by byte (zlib level fixed), so its bytes never depend on Pillow."""
    import struct
    import zlib

    w, h = size
    raw = b"".join(b"\0" + bytes(color) * w for _ in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def _chat_rows(tmp: Path) -> list[Any]:
    """Format-true and hostile chat rows (Metis, ms-swift, ShareGPT layouts)."""
    b64 = base64.b64encode(_png((10, 120, 200))).decode()
    b64b = base64.b64encode(_png((200, 10, 10), (16, 16))).decode()
    tmp.mkdir(parents=True, exist_ok=True)
    on_disk = tmp / "chat_img.png"
    on_disk.write_bytes(_png((0, 200, 0)))
    call = json.dumps({"name": "image_search", "arguments": {"image": "img_1"}})
    code = json.dumps({"name": "execute_code", "arguments": {"code": "print(1)"}})
    user = {"role": "user", "content": "<image>Which bridge is this?"}
    obs = {"role": "user", "content": "<tool_response>Golden Gate Bridge - Wikipedia</tool_response>"}
    ask = {"role": "assistant", "content": f"<think>Search by image.</think><tool_call>{call}</tool_call>"}
    done = {"role": "assistant", "content": "<think>It is the Golden Gate.</think><answer>Golden Gate Bridge</answer>"}

    def row(msgs: Any, i: int, images: Any = None, **kw: Any) -> dict:
        return {"id": i, "messages": msgs, "images": [b64] if images is None else images, **kw}

    base = [{"role": "system", "content": "You are an agent."}, user, ask, obs, done]
    rows: list[Any] = [
        row(json.dumps(base), 1, answer="Golden Gate Bridge"),
        row(base, 2, answer="Bay Bridge"),
        row(base, 3, ground_truth=["golden gate bridge", "GG"]),
        row(base, 4, label="", solution="Golden Gate"),
        row(base, 5),
        row(base, 6, answer={"a": 1}),
        row("{not json", 7),
        row("[]", 8),
        {"id": 9, "images": []},
        row([user, {"role": "assistant", "content": "x"}], 10, images=[]),
        row([{"role": "user", "content": "hi"}], 11, images=[]),
        row([{"role": "assistant", "content": "<answer>a</answer>"}], 12, images=[]),
        row([{"role": "user", "content": "q"}, {"role": "wizard", "content": "x"}], 13, images=[]),
        row([{"role": "user", "content": "q"}, "not a message"], 14, images=[]),
        row([{"role": "user", "content": 5}], 15, images=[]),
        row([user, done], 16, images=[b64, b64]),
        row([user, {"role": "user", "content": "<image>again"}, done], 17),
        row([user, ask, obs, {"role": "assistant", "content": "<think>truncated think <answer>Golden Gate"}], 18),
        row([user, ask, obs, {"role": "assistant", "content": "<think>t</think><answer>A</answer><answer>B</answer>"}], 19),
        row([user, ask, obs, {"role": "assistant", "content": "<answer><answer>nested</answer></answer>"}], 20),
        row([user, ask, obs, {"role": "assistant", "content": "<response>R</response><answer>A</answer>"}], 21),
        row([user, ask, obs, {"role": "assistant", "content": "<think>only thinking</think>"}], 22),
        row([user, {"role": "assistant", "content": '<tool_call>{"name": "s", "arguments": {}}'}, done], 23),
        row([user, {"role": "assistant", "content": "<tool_call>{broken}</tool_call>"}], 24),
        row([user, {"role": "assistant", "content": '<tool_call>["x"]</tool_call>'}], 25),
        row([user, {"role": "assistant", "content": f"<tool_call>{call}</tool_call><tool_call>{call}</tool_call>"}], 26),
        row([user, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "text_search", "arguments": '{"query": "bridge"}'}}]},
            {"role": "tool", "content": "results", "name": "text_search"}, done], 27),
        row([user, {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "text_search", "arguments": "not json"}}]}], 28),
        row([user, {"role": "assistant", "content": "", "tool_calls": ["bad"]}], 29),
        row([user, {"role": "assistant", "content": "", "tool_calls": [{"name": "raw", "arguments": "  "}]},
             {"role": "function", "content": [{"type": "text", "text": "fn"}]}, done], 30),
        row([user, {"role": "assistant", "content": "", "tool_calls": [{"name": "raw", "arguments": [1, 2]}]},
             done], 31),
        row([user, obs, done], 32),
        row([user, {"role": "tool", "content": "orphan", "name": "lookup"}, done], 33),
        row([user, ask, {"role": "user", "content": "<tool_response>" + "long observation text " * 900}, done], 34),
        row([user, {"role": "assistant", "content": f"<tool_call>{code}</tool_call>"},
             {"role": "tool", "content": "x" * 20000}, ask, {"role": "tool", "content": "y " * 12000}, done], 35),
        row([user, {"role": "assistant", "content": "", "reasoning_content": "from a field", "tool_calls": [
            {"function": {"name": "image_search", "arguments": {"image": "img_1"}}}]},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "<tool_response>seen"}]},
            {"role": "assistant", "content": "plain final answer", "reasoning_content": "why"}], 36,
            images=[b64, b64b]),
        row([{"role": "user", "content": [{"type": "image_url"}, {"type": "text", "text": "What is it?"},
                                          {"type": "audio"}, "junk"]}, done], 37),
        row([{"role": "system", "content": None}, {"role": "user", "content": "<image><image>two?"}, done], 38,
            images=json.dumps([b64, b64b])),
        row([user, done], 39, images=b64),
        row([user, done], 40, images="data:image/png;base64," + b64),
        row([user, done], 41, images=[{"bytes": base64.b64decode(b64)}]),
        row([user, done], 42, images=[{"path": str(on_disk)}]),
        row([user, done], 43, images=[{"image_url": {"url": "https://example.org/a.png"}}]),
        row([user, done], 44, images=[str(tmp / "absent.png")]),
        row([user, done], 45, images=["@@@" * 100]),
        row([user, done], 46, images=[base64.b64encode(b"not an image").decode()]),
        row([user, done], 47, images=[12]),
        row([user, done], 48, images=[{"other": 1}]),
        row([user, done], 49, images="   "),
        row([user, ask, obs, ask, done], 50),
        row([{"role": "user", "content": "q \ufffd"}, done], 51, images=[]),
        {"messages": [{"role": "user", "content": "no id"}, done], "images": [], "answer": "golden gate bridge"},
        {"id": "../../escape", "messages": [{"role": "user", "content": "q"}, done], "images": None,
         "source": "src", "data_source": "ds"},
        {"id": 52, "images": [], "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "A"}]},
        {"id": 53, "images": [b64], "conversations": [
            {"from": "human", "value": "<image>Which bridge is this?"}, {"from": "function_call", "value": call},
            {"from": "observation", "value": "Golden Gate Bridge - Wikipedia"},
            {"from": "gpt", "value": "<think>It is.</think><answer>Golden Gate Bridge</answer>"}], "answer": "Golden Gate"},
        {"id": 54, "images": [], "conversations": [{"from": "human", "value": "q"}, {"from": "alien", "value": "?"}]},
        {"id": 55, "images": [b64], "messages": [
            user, {"role": "assistant", "content": "<think>Search.</think>\n"}, {"role": "tool_call", "content": call},
            {"role": "tool_response", "content": "Golden Gate Bridge - Wikipedia"}, done]},
        {"id": 56, "images": [], "messages": [
            {"role": "user", "content": "two?"}, {"role": "assistant", "content": "<think>t</think>"},
            {"role": "tool_call", "content": call}, {"role": "tool_call", "content": call}]},
        {"id": 57, "images": [], "messages": [{"role": "user", "content": "q"}, {"role": "tool_call", "content": "{x"}]},
        {"id": 58, "images": [], "messages": [
            {"role": "user", "content": "q"}, {"role": "assistant", "content": "<answer>a</answer>"},
            {"role": "tool_call", "content": {"name": "direct", "arguments": {"k": "v"}}},
            {"role": "tool_response", "content": "r"}, {"role": "assistant", "content": "<answer>b</answer>"}]},
        "not a dict row",
    ]
    return rows


def _chat_sets(tmp: Path, roots: dict[str, str]) -> dict[str, Any]:
    from kit.data.normalize import METIS, OPENSEARCH_VL, REDSEARCHER, ChatAdapter, ChatSource

    out: dict[str, Any] = {}
    rows = _chat_rows(tmp)
    remapped = ChatSource("custom", "CU_", ("local",), messages_key="dialog", images_key="pics")
    moved = [{"dialog": r.get("messages"), "pics": r.get("images"), **{k: v for k, v in r.items()
             if k not in ("messages", "images")}} if isinstance(r, dict) else r for r in rows]
    for spec, data in ((METIS, rows), (OPENSEARCH_VL, rows), (REDSEARCHER, rows), (remapped, moved)):
        out[f"chat/{spec.name}/hostile"] = _run(ChatAdapter(spec), copy.deepcopy(data), tmp / spec.name, roots)
    return out


def fingerprints(data_dir: Path, tmp: Path) -> dict[str, Any]:
    """Every input set's fingerprint (the fixture's content)."""
    roots = {str(tmp): "<TMP>", str(data_dir): "<DATA>"}
    return {**_mmr1_sets(data_dir, tmp / "mmr1", roots), **_chat_sets(tmp / "chat", roots)}


def test_normalizers_match_their_pinned_fingerprints(data_dir, tmp_path):
    want = json.loads(FIXTURE.read_text(encoding="utf-8"))
    got = fingerprints(data_dir, tmp_path)
    assert sorted(got) == sorted(want)
    for name in want:
        w, g = want[name], got[name]
        assert g["rejects"] == w["rejects"], name
        bad = [i for i, (a, b) in enumerate(zip(w["records"], g["records"])) if a != b]
        assert not bad and len(g["records"]) == len(w["records"]), f"{name}: rows {bad[:10]} differ"
        assert g == w, name


def test_the_fingerprint_sees_a_one_character_change(data_dir, tmp_path):
    """The fixture can fail: one character more in one trace changes exactly that row's fingerprint."""
    from kit.data.normalize import MMSearchR1Adapter, read_mmsearch_r1

    tdir = data_dir / "trajectories" / "mmsearch_r1"
    imgs = data_dir / "benchmarks" / "fvqa_mmsearch_r1" / "images"
    rows = list(read_mmsearch_r1(tdir / "predictions_fvqa50.jsonl"))
    rows[3]["trace"]["question"] += "?"
    roots = {str(tmp_path): "<TMP>", str(data_dir): "<DATA>"}
    got = _run(MMSearchR1Adapter(imgs), rows, tmp_path / "mmr1" / "predictions_fvqa50.jsonl", roots)["records"]
    want = json.loads(FIXTURE.read_text(encoding="utf-8"))["mmsearch_r1/predictions_fvqa50.jsonl"]["records"]
    assert [i for i, (a, b) in enumerate(zip(want, got)) if a != b] == [3]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kit.paths import shared_data_dir  # noqa: E402

    with tempfile.TemporaryDirectory() as d:
        fp = fingerprints(shared_data_dir(), Path(d))
    FIXTURE.write_text(json.dumps(fp, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {FIXTURE}: {sum(v['rows'] for v in fp.values())} rows in {len(fp)} sets")
