"""Experiment tracking (kit.tracking, issue 18 part 3): a real RL step loop and a two-stage SFT curriculum
log to TensorBoard, and the event files, read back with TensorBoard's own reader, hold every number of
``metrics.jsonl`` / the trainer's log rows under the same steps; the optional back ends fail with the pip
command; the evaluation table; progress bars stay on in headless runs."""

from __future__ import annotations

import json
import math
import sys

import pytest
import torch

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.tracking import Tracker, TrackingUnavailable, check_report_to, flatten_metrics

torch.set_num_threads(2)
EventAccumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator",
    reason="tensorboard is a kit dependency (pyproject)").EventAccumulator

ROW = {"groups": {"train_groups": 2, "eligible": 9}, "exclusions": {"synthesis_incomplete": 7},
       "entropy_mean": float("nan"), "loss": -7.45e-09, "step": 3, "stage": "h1", "kind": "rl",
       "skipped": "no_advantage_signal", "ok": True,
       "recovery": [{"mechanism": "overlong_retry", "triggered": 1, "retention_rate": 1.0},
                    {"mechanism": "context_limit", "triggered": 0, "retention_rate": None}]}


def read_events(log_dir):
    """{tag: {step: value}} for scalars and {tag: {step: text}} for text, via TensorBoard's reader."""
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}
    texts = {t: {e.step: e.tensor_proto.string_val[0].decode() for e in acc.Tensors(t)}
             for t in acc.Tags()["tensors"] if t.endswith("/text_summary")}
    return scalars, texts


def assert_same(rows, log_dir, step_of=lambda r: r["step"]):
    """Every number and string of every row is in the event files at the row's step (float32)."""
    scalars, texts = read_events(log_dir)
    n = 0
    for r in rows:
        s, t = flatten_metrics(r)
        assert s, r
        for k, v in s.items():
            got = scalars[k][step_of(r)]
            want = float(torch.tensor(v, dtype=torch.float32))
            assert (math.isnan(got) and math.isnan(want)) or got == want, (k, step_of(r), got, want)
            n += 1
        for k, v in t.items():
            assert texts[f"{k}/text_summary"][step_of(r)] == v, k
    assert {st for series in scalars.values() for st in series} <= {step_of(r) for r in rows} | {0}
    return n


def test_flatten_keeps_every_number_and_text():
    s, t = flatten_metrics(ROW)
    assert s["groups/train_groups"] == 2 and s["exclusions/synthesis_incomplete"] == 7 and s["ok"] == 1.0
    assert math.isnan(s["entropy_mean"]) and math.isnan(s["recovery/context_limit/retention_rate"])
    assert s["recovery/overlong_retry/triggered"] == 1 and "step" not in s
    assert t == {"stage": "h1", "kind": "rl", "skipped": "no_advantage_signal"}
    s, t = flatten_metrics({"x": [{"a": 1}, {"a": 2}], "tags": ["a", "b"]})  # no names: by index; texts as JSON
    assert s == {"x/0/a": 1.0, "x/1/a": 2.0} and t == {"tags": '["a", "b"]'}


def test_backends_are_checked_and_missing_packages_name_the_pip_command(tmp_path, monkeypatch):
    assert check_report_to(None) == "none" and check_report_to("TensorBoard") == "tensorboard"
    with pytest.raises(ValueError, match="report_to must be one of"):
        Tracker("mlflow", tmp_path)
    with pytest.raises(ValueError, match="needs a log_dir"):
        Tracker("tensorboard")
    for name in ("trackio", "wandb"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
        with pytest.raises(TrackingUnavailable, match=f"pip install {name}"):
            Tracker(name, tmp_path / name)
    t = Tracker("none", tmp_path / "none")
    assert t.log(ROW, 3) == {} and not (tmp_path / "none").exists()


def test_sft_config_report_to(tmp_path):
    from kit.train.sft import SFTTrainConfig

    assert SFTTrainConfig().report_to == "none" and SFTTrainConfig(report_to=["tensorboard"]).report_to == "tensorboard"
    assert SFTTrainConfig(report_to=[]).report_to == "none"
    with pytest.raises(ValueError, match="report_to"):
        SFTTrainConfig(report_to="mlflow")


def test_evaluation_table_round_trip(tmp_path):
    rows = [{"benchmark": "fvqa", "config": "harness", "accuracy_pct": 50.0, "episodes": 4},
            {"benchmark": "fvqa", "config": "direct", "accuracy_pct": 0.0, "episodes": 4}]
    t1 = [{"config": "harness", "fvqa": {"mean": 50.0, "std": 0.0, "runs": 2}, "avg": {"mean": 10.0, "std": 0.0, "runs": 2}}]
    with Tracker("tensorboard", tmp_path / "tb") as t:
        t.log_table("summary", rows, index=("benchmark", "config"))
        t.log_table("table1", t1, index=("config",))  # kit.eval.metrics.table1 rows: nested per benchmark
    scalars, texts = read_events(tmp_path / "tb")
    assert scalars["table1/harness/fvqa/mean"] == {0: 50.0} and scalars["table1/harness/avg/runs"] == {0: 2.0}
    assert scalars["summary/fvqa/harness/accuracy_pct"] == {0: 50.0}
    assert scalars["summary/fvqa/direct/episodes"] == {0: 4.0}
    assert "| fvqa | harness | 50.0 | 4 |" in texts["summary/text_summary"][0]


@pytest.fixture(scope="module")
def tiny():
    from kit.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint("qwen2_vl", vocab="local")


async def test_rl_steps_round_trip_through_tensorboard(tiny, tmp_path):
    from kit.rl.trainer import RLConfig, RLTrainer
    from tests.conftest import MemoryBackend

    task = Task(id="t", question="Which tower is in Paris?", answers=["Eiffel Tower"])
    cfg = RLConfig(group_size=2, prompts_per_step=1, lr=1e-2, micro_batch=2)
    tr = RLTrainer(tiny, MemoryBackend(), [task], tmp_path, cfg, labels=["smoke"], report_to="tensorboard",
                   harness_config=HarnessConfig.smoke(max_turns=1, tools_enabled=["web_search"]))
    await tr.train(2)
    tr.tracker.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and all("rescues" in r for r in rows)
    n = assert_same(rows, tmp_path / "tracking")
    assert n >= 2 * 20  # rollout stats, exclusions, recovery per mechanism, timings: every number of both rows
    _, texts = read_events(tmp_path / "tracking")
    assert texts["stage/text_summary"] == {0: "rl", 1: "rl"}


def test_sft_curriculum_round_trip_at_global_steps(tiny, tmp_path):
    pytest.importorskip("trl", reason="trl is in the 'train' extra")
    from kit.models.processor import load_image_only_processor
    from kit.train.curriculum import train_sft_curriculum
    from kit.train.sample_records import sample_record
    from kit.train.sft import SFTTrainConfig
    from kit.train.sft_data import SFTEncoder

    rec = sample_record(tmp_path / "w", rid="e")
    ex, _ = SFTEncoder(load_image_only_processor(tiny), tools=[]).encode_many([rec])
    cfg = SFTTrainConfig(max_steps=2, grad_accum=1, per_device_batch_size=1, lr_language=3e-3, lr_vision=3e-4,
                         warmup_ratio=0.0, gradient_checkpointing=False, save_steps=1000, report_to="tensorboard")
    cur = train_sft_curriculum(tiny, [rec], ex, tmp_path / "run", cfg, short_context_epochs=2, backend="trl")
    rows = cur["log"]
    assert [(r["stage"], r["step"]) for r in rows] == [("short", 1), ("short", 2), ("full", 3), ("full", 4)]
    assert_same([{k: v for k, v in r.items() if k != "stage_step"} for r in rows], tmp_path / "run" / "tracking")
    scalars, texts = read_events(tmp_path / "run" / "tracking")
    assert texts["stage/text_summary"] == {1: "short", 2: "short", 3: "full", 4: "full"}
    assert "tokens_per_s" in scalars and set(scalars["train_loss"]) == {2, 4}  # each stage's summary row


def test_progress_is_on_and_sparse_when_headless(monkeypatch):
    from kit.progress import HEADLESS_MININTERVAL_S, progress

    monkeypatch.setenv("KIT_HEADLESS", "1")
    with progress(total=3, desc="x") as bar:
        assert not bar.disable and bar.mininterval == HEADLESS_MININTERVAL_S >= 5
    monkeypatch.setenv("KIT_PROGRESS", "0")
    assert progress(range(2)).disable
