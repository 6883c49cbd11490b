"""Notebook 02 runs headless under the smoke profile: counts through every stage, normalized
MMSearch-R1 traces, RL filtering, VQA conversion, a VisTarget-style set with its review sheet, SFT/RL
mixtures as Hugging Face datasets with images and cards, and a manifest."""

from __future__ import annotations

import base64
import csv
import io
import json

import pytest
from PIL import Image


@pytest.mark.slow
def test_notebook_02_smoke(tmp_path, data_dir):
    from datasets import load_from_disk

    from kit.cli import run_notebook
    from kit.data import OFFLINE_LABEL

    out = tmp_path / "nb"
    red = tmp_path / "redsearcher_release.jsonl"  # a format-true ms-swift agent row (REDSearcher's layout)
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 120, 200)).save(buf, "PNG")
    msgs = [{"role": "user", "content": "<image>Which bridge is this?"},
            {"role": "assistant", "content": "<think>Search by image.</think>"},
            {"role": "tool_call", "content": json.dumps({"name": "image_search", "arguments": {"image": "img_1"}})},
            {"role": "tool_response", "content": "Golden Gate Bridge - Wikipedia"},
            {"role": "assistant", "content": "<think>It is the Golden Gate.</think><answer>Golden Gate Bridge</answer>"}]
    # a reference answer: the chat adapter trains only on trajectories its judge scores correct
    red.write_text("".join(json.dumps({"id": i, "messages": msgs, "answer": "Golden Gate Bridge",
                                       "images": [base64.b64encode(buf.getvalue()).decode()]})
                           + "\n" for i in range(2)))
    executed = run_notebook("02", "smoke", {"max_seeds": 50, "rl_filter_queries": 8, "vqa_n": 6,
                                            "open_sources": {"redsearcher": str(red)}}, out)
    assert executed.exists()
    for f in ["counts.json", "summary.json", "stage_counts.csv", "manifest.json", "tasks.jsonl", "seeds_rejected.jsonl",
              "splits/sft_episodes.jsonl", "normalized/mmsearch_r1.jsonl", "normalized/mmsearch_r1_quarantine.jsonl",
              "rl_filter/rl_filter_counts.json", "vqa/vqa.jsonl", "vistarget/tasks.jsonl", "vistarget/review.csv",
              "data_cards/sft_mixture.md", "data_cards/rl_mixture.md", "data_cards/vistarget_candidates.md",
              "datasets/sft_mixture/README.md", "datasets/sft_mixture/data/train.parquet"]:
        assert (out / f).exists(), f
    s = json.loads((out / "summary.json").read_text())
    c = s["stages"]
    assert c["label"] == OFFLINE_LABEL and c["stage1_seeds"]["accepted"] == 50
    assert c["stage1_seeds"]["fact_sources"] == {"pixel_statistics": 50}  # offline: labelled pixel statistics
    assert c["stage3_tasks"]["accepted"] == c["holdout"]["train_pool"] + c["holdout"]["benchmark_candidates"]
    assert s["normalize"]["read"] == 50 and s["normalize"]["kept"] + sum(s["normalize"]["quarantined"].values()) == 50
    rl = s["rl_filter"]
    assert rl["queries"] == min(8, c["stage4"]["rl"]) and rl["kept"] + sum(rl["dropped"].values()) == rl["queries"]
    assert s["vqa"]["accepted"] + s["vqa"]["rejected"] + s["vqa"]["failed"] == 6
    # mixtures: rows per source add up, shares sum to ~100, images embedded and decodable
    sft = load_from_disk(str(out / "datasets" / "sft_mixture" / "arrow"))
    assert len(sft) == s["sft_mixture"]["total"] == sum(r["count"] for r in s["sft_mixture"]["by_source"])
    assert abs(sum(r["share"] for r in s["sft_mixture"]["by_origin"]) - 100) < 0.2
    assert {r["source"] for r in s["sft_mixture"]["by_source"]} == {"synth", "mmsearch_r1", "redsearcher"}
    assert s["normalized_sources"]["redsearcher"]["kept"] == 2
    assert (out / "normalized" / "redsearcher_sft.jsonl").read_text().count('"RED_image_search"') >= 2
    row = next(r for r in sft if r["source"] == "synth")
    assert row["images"] and row["images"][0].size[0] > 0 and OFFLINE_LABEL in row["labels"]
    rlm = load_from_disk(str(out / "datasets" / "rl_mixture" / "arrow"))
    assert len(rlm) == s["rl_mixture"]["total"] and all(r["answers"] for r in rlm)
    card = (out / "data_cards" / "sft_mixture.md").read_text()
    assert "synthetic-offline" in card and "| mmsearch_r1 | open-source |" in card
    assert "fact_source=pixel_statistics" in card and "fact:pixel_statistics" in row["labels"]
    # VisTarget: held-out set, review sheet lists every task with existing absolute image paths
    vt = [json.loads(x) for x in (out / "vistarget" / "tasks.jsonl").read_text().splitlines()]
    sheet = list(csv.DictReader(open(out / "vistarget" / "review.csv", encoding="utf-8")))
    assert len(sheet) == len(vt) == c["holdout"]["benchmark_candidates"]
    assert all((out / "vistarget" / r["target_image"]).is_file() for r in vt)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"]["smoke"] is True and "smoke" in manifest["labels"]


@pytest.fixture
def fake_expert_server():
    """A local OpenAI-compatible expert (threaded HTTP server) for the paper profile: it plays the hop
    protocol over the local web, approves reviews and answers without tools (see test_data_expert)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import httpx
    from test_data_paper_profile import VisualFactEndpoint

    fake = VisualFactEndpoint()  # GenericExpertEndpoint that also reads stable seeds' facts from their images

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            req = httpx.Request("POST", "http://x" + self.path,
                                content=self.rfile.read(int(self.headers.get("Content-Length", 0))))
            resp = fake(req)
            self.send_response(resp.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(resp.content)))
            self.end_headers()
            self.wfile.write(resp.content)

        def do_GET(self):  # the model list every OpenAI-compatible server answers (the CLI preflight asks it)
            body = b'{"object": "list", "data": [{"id": "kimi-fake", "object": "model"}]}'
            self.send_response(200 if self.path.rstrip("/") == "/v1/models" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", fake
    srv.shutdown()
    srv.server_close()


@pytest.mark.slow
def test_notebook_02_paper_profile_on_local_endpoint(tmp_path, data_dir, fake_expert_server):
    """The paper branch (model expert for events, hops, review, queries, trajectories, RL audit and
    VQA) runs against an OpenAI-compatible endpoint; outputs are labelled by the expert, not offline."""
    from kit.cli import run_notebook
    from kit.data import OFFLINE_LABEL

    url, fake = fake_expert_server
    out = tmp_path / "paper"
    # web_backend="zim": no SERPER_API_KEY here, so the local web is chosen explicitly (and labelled); the
    # paper's LLM summarizer (Table 4) has no endpoint here either: its labelled extractive fallback
    run_notebook("02", "paper", {"expert_endpoint": url, "expert_model": "kimi-fake", "web_backend": "zim",
                                 "summarizer": "extractive",
                                 "event_end": "2026-01-06", "event_topics": ["finance"], "max_seeds": 6, "depths": [2],
                                 "variants": 1, "samples": 1, "rl_group_size": 2, "vqa_n": 2,
                                 "zim_names": ["wikipedia_en_ray_charles_2015-06"], "holdout_seed_fraction": 0.3}, out)
    s = json.loads((out / "summary.json").read_text())
    assert s["label"] == "expert:kimi-fake,local-web,summarizer: extractive (fallback)" and OFFLINE_LABEL not in s["label"]
    assert s["stages"]["expert"] == "llm:openai:kimi-fake"
    assert fake.calls["hop"] > 0 and fake.calls["solve"] > 0 and fake.calls["fact"] > 0
    # stable seeds' facts read from the image by the expert, not pixel statistics (WeAgent §4.1)
    s1 = s["stages"]["stage1_seeds"]
    assert s1["accepted"] > 0 and s1["fact_sources"] == {"expert": s1["accepted"]}
    seeds = [json.loads(x) for x in (out / "seeds.jsonl").read_text().splitlines()]
    assert all(x["fact_source"] == "expert" and x["fact"]["kind"] == "expert_read" for x in seeds)
    assert s["stages"]["stage_web"] == "zim"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["event_window"] == ["2026-01-01", "2026-01-06"] and manifest["config"]["web_backend"] == "zim"
    assert (out / "event_runs" / "episodes.jsonl").is_file() and (out / "expert" / "hops" / "episodes.jsonl").is_file()
    c2 = s["stages"]["stage2_chains"]
    assert c2["accepted"] + c2["rejected"] + c2["failed"] == 6
    card = (out / "data_cards" / "sft_mixture.md").read_text()
    assert "synthetic-offline" not in card and "smoke" not in card.split("---")[1]
    assert "fact_source=expert" in card and "pixel_statistics" not in card
    assert manifest["model"]["smoke"] is False
