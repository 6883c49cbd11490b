"""Experiment tracking (kit.tracking, issue 18 part 3): a real RL run (an OPD step, then an RL step) and a
two-stage SFT curriculum log to TensorBoard, and the event files, read back with TensorBoard's own reader,
hold every number of ``metrics.jsonl`` / the trainer's log rows under the same steps; the same rows,
replayed through W&B offline and trackio (local SQLite), read back from their own storage (the ``.wandb``
transaction log, ``SQLiteStorage.get_logs``) equal, step for step, a repeated step included; a back end
that cannot start fails before the first step, one that fails later warns; the evaluation table;
progress bars stay on in headless runs."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest
import torch

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.tracking import (
    Tracker,
    TrackingError,
    TrackingUnavailable,
    TrackingWarning,
    check_report_to,
    flatten_metrics,
)

torch.set_num_threads(2)
EventMultiplexer = pytest.importorskip(
    "tensorboard.backend.event_processing.event_multiplexer",
    reason="tensorboard is a kit dependency (pyproject)").EventMultiplexer

ROW = {"groups": {"train_groups": 2, "eligible": 9}, "exclusions": {"synthesis_incomplete": 7},
       "entropy_mean": float("nan"), "loss": -7.45e-09, "step": 3, "stage": "h1", "kind": "rl",
       "skipped": "no_advantage_signal", "ok": True,
       "recovery": [{"mechanism": "overlong_retry", "triggered": 1, "retention_rate": 1.0},
                    {"mechanism": "context_limit", "triggered": 0, "retention_rate": None}]}


def read_events(log_dir, run=None):
    """{tag: {step: value}} for scalars and {tag: {step: text}} for text, via TensorBoard's reader. The log
    dir holds exactly one run, listed by TensorBoard (``--logdir log_dir``) under a name, never ``.``
    (``run``: that name, when given)."""
    mux = EventMultiplexer(size_guidance={"scalars": 0, "tensors": 0}).AddRunsFromDirectory(str(log_dir))
    mux.Reload()
    (name,) = mux.Runs()
    assert name not in (".", "") and (run is None or name == run), name
    acc = mux.GetAccumulator(name)
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
    # the trainer's rollout_ prefix on the rollout summary's rollout_s: tagged once, unless that tag is taken
    assert flatten_metrics({"rollout_rollout_s": 2.5, "rollout_reward_mean": 1.0})[0] == {
        "rollout_s": 2.5, "rollout_reward_mean": 1.0}
    assert flatten_metrics({"rollout_rollout_s": 2.5, "rollout_s": 1.0})[0] == {"rollout_rollout_s": 2.5, "rollout_s": 1.0}
    s, t = flatten_metrics({"x": [{"a": 1}, {"a": 2}], "tags": ["a", "b"]})  # no names: by index; texts as JSON
    assert s == {"x/0/a": 1.0, "x/1/a": 2.0} and t == {"tags": '["a", "b"]'}


def test_backends_are_checked_and_missing_packages_name_the_pip_command(tmp_path, monkeypatch):
    assert check_report_to(None) == "none" and check_report_to("TensorBoard") == "tensorboard"
    with pytest.raises(ValueError, match="report_to must be one of"):
        Tracker("mlflow", tmp_path)
    with pytest.raises(ValueError, match="needs a log_dir"):
        Tracker("tensorboard")
    for name in ("trackio", "wandb"):  # import fails as if not installed
        monkeypatch.setitem(sys.modules, name, None)
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


@pytest.fixture(scope="module")
def rl_run(tiny, tmp_path_factory):
    """An OPD step (KL to a teacher) then an RL step through the harness, tracked to TensorBoard:
    (metrics.jsonl rows, run folder). The other back ends replay these rows as the trainer does
    (``tracker.log(m, m["step"])``)."""
    import asyncio

    from kit.models.tiny import build_tiny_checkpoint
    from kit.rl.opd import InProcessTeacher
    from kit.rl.staging import Stage
    from kit.rl.trainer import RLConfig, RLTrainer
    from tests.conftest import MemoryBackend

    out = tmp_path_factory.mktemp("rl")
    task = Task(id="t", question="Which tower is in Paris?", answers=["Eiffel Tower"])
    cfg = RLConfig(group_size=2, prompts_per_step=1, lr=1e-2, micro_batch=2)
    teacher = InProcessTeacher(build_tiny_checkpoint("qwen2_vl", vocab="local", seed=1))
    tr = RLTrainer(tiny, MemoryBackend(), [task], out, cfg, labels=["smoke"], report_to="tensorboard",
                   stages=[Stage("opd", "opd", steps=1), Stage("rl")], teacher=teacher,
                   harness_config=HarnessConfig.smoke(max_turns=1, tools_enabled=["web_search"]))
    asyncio.run(tr.train(2))
    tr.tracker.close()
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()], out


@pytest.fixture(scope="module")
def sft_run(tiny, tmp_path_factory):
    """A two-stage SFT curriculum tracked to TensorBoard: (the curriculum's log rows at global steps, run folder)."""
    pytest.importorskip("trl", reason="trl is in the 'train' extra")
    from kit.models.processor import load_image_only_processor
    from kit.train.curriculum import train_sft_curriculum
    from kit.train.sample_records import sample_record
    from kit.train.sft import SFTTrainConfig
    from kit.train.sft_data import SFTEncoder

    tmp = tmp_path_factory.mktemp("sft")
    rec = sample_record(tmp / "w", rid="e")
    ex, _ = SFTEncoder(load_image_only_processor(tiny), tools=[]).encode_many([rec])
    cfg = SFTTrainConfig(max_steps=2, grad_accum=1, per_device_batch_size=1, lr_language=3e-3, lr_vision=3e-4,
                         warmup_ratio=0.0, gradient_checkpointing=False, save_steps=1000, report_to="tensorboard")
    cur = train_sft_curriculum(tiny, [rec], ex, tmp / "run", cfg, short_context_epochs=2, backend="trl")
    return [{k: v for k, v in r.items() if k != "stage_step"} for r in cur["log"]], tmp / "run"


def test_rl_steps_round_trip_through_tensorboard(rl_run):
    rows, out = rl_run
    assert [(r["step"], r["kind"]) for r in rows] == [(0, "opd"), (1, "rl")] and all("rescues" in r for r in rows)
    assert rows[0]["opd_kl"] > 0, rows[0]  # the distillation step's KL is one of the tracked numbers
    n = assert_same(rows, out / "tracking")
    assert n >= 2 * 20  # rollout stats, exclusions, recovery per mechanism, timings: every number of both rows
    scalars, texts = read_events(out / "tracking", run=out.name)
    assert texts["stage/text_summary"] == {0: "opd", 1: "rl"} and set(scalars["opd_kl"]) == {0}
    assert scalars["stage_index"] == {0: 0.0, 1: 1.0}  # schedule order, a curve beside the text
    assert "rollout_rollout_s" in rows[0] and set(scalars["rollout_s"]) == {0, 1} and "rollout_rollout_s" not in scalars


def test_sft_curriculum_round_trip_at_global_steps(sft_run):
    rows, run = sft_run
    assert [(r["stage"], r["step"]) for r in rows] == [("short", 1), ("short", 2), ("full", 3), ("full", 4)]
    assert_same(rows, run / "tracking")
    scalars, texts = read_events(run / "tracking")
    assert texts["stage/text_summary"] == {1: "short", 2: "short", 3: "full", 4: "full"}
    assert scalars["stage_index"] == {1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0}
    assert "tokens_per_s" in scalars and set(scalars["train_loss"]) == {2, 4}  # each stage's summary row


# --- trackio and W&B, offline, read back through their own storage ------------------------------------

WANDB_SYSTEM_KEYS = {"_step", "_runtime", "_timestamp"}
# a collection-time skip: the module fixtures (two trainings) are not run for a test that cannot run
TRACKIO_SKIP = ("trackio is optional (the 'tracking' extra), not in make setup: trackio 0.43 pins pillow < 13 "
                "and would downgrade the kit's pillow 13; pip install trackio to run it")
NEEDS_TRACKIO = pytest.mark.skipif(importlib.util.find_spec("trackio") is None, reason=TRACKIO_SKIP)


def wandb_history(log_dir):
    """The history rows of the one offline W&B run under ``log_dir``: ``[{key: value}]`` in logged order.

    wandb >= 0.2x has no Python reader of its ``.wandb`` transaction log (``DataStore`` went with the Go
    core); the file is LevelDB log framing (32 KiB blocks, 7-byte chunk headers, CRC32 seeded with the
    chunk type, after a 7-byte ``:W&B`` header) around wandb's own protobuf ``Record``, parsed here with
    ``wandb.proto.wandb_internal_pb2``; every chunk's checksum is verified. ``run.finish()`` returns
    before wandb-core has written the file's end, so this waits (up to 20 s) for the final ``exit`` record.
    """
    import time

    (path,) = log_dir.glob("wandb/offline-run-*/run-*.wandb")
    for _ in range(200):
        records = list(wandb_records(path.read_bytes()))
        if records and records[-1].WhichOneof("record_type") == "exit":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"{path}: no exit record after 20 s")
    return [{"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in rec.history.item}
            for rec in records if rec.WhichOneof("record_type") == "history"]


def wandb_records(data):
    """wandb ``Record`` messages of a ``.wandb`` file's bytes (see :func:`wandb_history`)."""
    import struct
    import zlib

    from wandb.proto import wandb_internal_pb2 as pb

    assert struct.unpack("<4sHB", data[:7]) == (b":W&B", 0xBEE1, 0), data[:7]
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (crc, n, kind) == (0, 0, 0):  # block trailer / zero padding
            pos += left
            continue
        if pos + 7 + n > len(data):  # wandb-core is still writing this chunk
            return
        chunk = data[pos + 7:pos + 7 + n]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"bad checksum at byte {pos}"
        pos += 7 + n
        buf = chunk if kind in (1, 2) else buf + chunk  # FULL, FIRST | MIDDLE, LAST
        if kind in (2, 3):
            continue
        rec = pb.Record()
        rec.ParseFromString(buf)
        yield rec


def trackio_history(log_dir, project, run):
    """The rows of one trackio run, through trackio's own ``SQLiteStorage.get_logs``, its storage pointed
    at ``log_dir`` (:func:`kit.tracking.trackio_at`; the last tracker left it on its own folder)."""
    from kit.tracking import trackio_at

    trackio_at(log_dir)
    import trackio.utils
    from trackio.sqlite_storage import SQLiteStorage

    assert SQLiteStorage.get_project_db_path(project).parent == log_dir.resolve()  # read where it was written
    rows = SQLiteStorage.get_logs(project, run)
    reserved = {f"__{k}": k for k in trackio.utils.RESERVED_KEYS}  # trackio renames "time" to "__time"
    return [{reserved.get(k, k): v for k, v in r.items() if k != "timestamp"} for r in rows]


def expected(rows):
    """What a tracker must hold for ``rows`` logged in order: every number and text, the row's step, and
    ``stage_index`` (a tracker given no schedule numbers stages as they first appear)."""
    out, order = [], {}
    for r in rows:
        s, t = flatten_metrics(r)
        out.append({**s, **t, "step": r["step"], "stage_index": float(order.setdefault(r["stage"], len(order)))})
    return out


def assert_rows_equal(got, want):
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w), (set(g) ^ set(w), w["step"])
        for k, v in w.items():
            same = g[k] == v or (isinstance(v, float) and math.isnan(v) and math.isnan(g[k]))
            assert same, (k, w["step"], g[k], v)


def replay(backend, tmp_path, rl_rows, sft_rows):
    """The trainers' calls: each metrics.jsonl row at its own step (RL, then its step 0 again as after a
    resume from an earlier checkpoint), the curriculum's rows at global steps, each in its own folder."""
    rl = [*rl_rows, rl_rows[0]]
    with Tracker(backend, tmp_path / "rl" / "tracking", run_name="rl", config={"rl": {"lr": 0.01}}) as t:
        for r in rl:
            assert t.log(r, r["step"])
    with Tracker(backend, tmp_path / "sft" / "tracking", run_name="sft") as t:
        for r in sft_rows:
            t.log(r, r["step"])
        assert t.failed_logs == 0
    return rl


def wandb_offline(monkeypatch, tmp_path):
    """W&B with no login and no network: offline mode, every folder it touches in ``tmp_path``."""
    wandb = pytest.importorskip("wandb", reason="wandb is a kit dependency (pyproject)")
    for k in ("WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_ENTITY", "WANDB_PROJECT", "WANDB_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for k in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(k, str(tmp_path / "wandb-home"))
    return wandb


def test_wandb_offline_round_trip(rl_run, sft_run, tmp_path, monkeypatch):
    wandb_offline(monkeypatch, tmp_path)
    rl = replay("wandb", tmp_path, rl_run[0], sft_run[0])
    got = wandb_history(tmp_path / "rl" / "tracking")
    assert {k for r in got for k in r} & WANDB_SYSTEM_KEYS  # wandb's own bookkeeping is there, then left out
    assert_rows_equal([{k: v for k, v in r.items() if k not in WANDB_SYSTEM_KEYS} for r in got], expected(rl))
    assert [r["step"] for r in got] == [0, 1, 0]  # the repeated step is kept (step= would drop it)
    assert got[0]["opd_kl"] == rl[0]["opd_kl"] and got[0]["stage"] == "opd"
    got = wandb_history(tmp_path / "sft" / "tracking")
    assert_rows_equal([{k: v for k, v in r.items() if k not in WANDB_SYSTEM_KEYS} for r in got], expected(sft_run[0]))
    assert [r["stage"] for r in got] == ["short", "short", "full", "full"]
    assert not list((tmp_path / "wandb-home").glob("**/*.wandb"))  # the run went to its log_dir


def test_wandb_start_failure_is_a_clear_error_before_the_first_step(tiny, tmp_path, monkeypatch):
    from kit.rl.trainer import RLConfig, RLTrainer
    from tests.conftest import MemoryBackend

    wandb_offline(monkeypatch, tmp_path)
    monkeypatch.setenv("WANDB_MODE", "online")  # no API key, no netrc: wandb.init refuses at once
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # never the real server
    task = Task(id="t", question="q?", answers=["a"])
    with pytest.raises(TrackingError, match=r"report_to='wandb' could not start.*WANDB_MODE=offline"):
        RLTrainer(tiny, MemoryBackend(), [task], tmp_path, RLConfig(group_size=2, prompts_per_step=1),
                  report_to="wandb", harness_config=HarnessConfig.smoke(max_turns=1))
    assert not (tmp_path / "metrics.jsonl").exists()


@NEEDS_TRACKIO
def test_trackio_local_round_trip(rl_run, sft_run, tmp_path, monkeypatch):
    for k in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_BUCKET_ID", "TRACKIO_WEBHOOK_URL"):
        monkeypatch.delenv(k, raising=False)  # local only: no Space, no server, no Hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "elsewhere"))  # a stale value: each tracker uses its log_dir
    rl = replay("trackio", tmp_path, rl_run[0], sft_run[0])
    assert_rows_equal(trackio_history(tmp_path / "rl" / "tracking", "mmsearch-kit", "rl"), expected(rl))
    assert_rows_equal(trackio_history(tmp_path / "sft" / "tracking", "mmsearch-kit", "sft"), expected(sft_run[0]))
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("backend", ["wandb", "trackio"])
def test_evaluation_table_round_trip_offline(backend, tmp_path, monkeypatch):
    if backend == "wandb":
        wandb_offline(monkeypatch, tmp_path)
    elif importlib.util.find_spec("trackio") is None:
        pytest.skip(TRACKIO_SKIP)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for k in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL"):
        monkeypatch.delenv(k, raising=False)
    rows = [{"benchmark": "fvqa", "config": "harness", "accuracy_pct": 50.0, "episodes": 4},
            {"benchmark": "fvqa", "config": "direct", "accuracy_pct": 0.0, "episodes": 4}]
    log_dir = tmp_path / "eval" / "tracking"
    with Tracker(backend, log_dir, run_name="eval") as t:
        t.log_table("summary", rows, index=("benchmark", "config"))
    if backend == "wandb":
        (got,) = wandb_history(log_dir)
        (table,) = log_dir.glob("wandb/offline-run-*/files/" + got["summary/path"])
        table = json.loads(table.read_text())
        assert [dict(zip(table["columns"], r, strict=True)) for r in table["data"]] == rows
    else:
        (got,) = trackio_history(log_dir, "mmsearch-kit", "eval")
        assert got["summary"]["_value"] == rows
    assert got["step"] == 0 and got["summary/fvqa/harness/accuracy_pct"] == 50.0
    assert got["summary/fvqa/direct/episodes"] == 4


def test_a_failed_write_mid_training_warns_and_is_counted(tmp_path):
    with Tracker("tensorboard", tmp_path / "tb") as t:
        def full(*a, **k):
            raise OSError("No space left on device")

        t._w.add_scalar = full
        with pytest.warns(TrackingWarning, match="No space left on device") as w:
            t.log(ROW, 3)
            t.log(ROW, 4)
        assert t.failed_logs == 2 and len(w) == 1  # warned once per error type, every failure counted


def test_progress_is_on_and_sparse_when_headless(monkeypatch):
    from kit.progress import HEADLESS_MININTERVAL_S, progress

    monkeypatch.setenv("KIT_HEADLESS", "1")
    with progress(total=3, desc="x") as bar:
        assert not bar.disable and bar.mininterval == HEADLESS_MININTERVAL_S >= 5
    monkeypatch.setenv("KIT_PROGRESS", "0")
    assert progress(range(2)).disable


def test_an_int_past_float_range_is_text_and_a_bad_write_never_stops_training(tmp_path):
    s, t = flatten_metrics({"loss": 1.0, "tokens_seen": 10**400, "sizes": [1, 10**400]})
    assert s == {"loss": 1.0, "sizes/0": 1.0} and t == {"tokens_seen": str(10**400), "sizes/1": str(10**400)}
    with Tracker("tensorboard", tmp_path / "tb") as tr:
        assert tr.log({"loss": 1.0, "tokens_seen": 10**400}, step=1) == {"loss": 1.0}
        def broken(*a, **k):
            raise OverflowError("int too large to convert to float")

        import kit.tracking as tracking
        real, tracking.flatten_metrics = tracking.flatten_metrics, broken
        try:  # a row that cannot even be flattened warns and is counted (inside the try)
            with pytest.warns(TrackingWarning, match="OverflowError"):
                assert tr.log(ROW, 2) == {}
        finally:
            tracking.flatten_metrics = real
        assert tr.failed_logs == 1


@pytest.mark.parametrize("step", [1.5, "3", -1, True, None])
def test_log_needs_a_non_negative_int_step(step, tmp_path):
    for backend in ("none", "tensorboard"):
        with Tracker(backend, tmp_path / backend) as tr, pytest.raises(ValueError, match="non-negative int step"):
            tr.log({"loss": 1.0}, step)


def test_report_to_problem_is_checked_without_the_package_or_a_kernel(tmp_path, monkeypatch):
    from kit.tracking import report_to_problem

    assert report_to_problem("none") is None and report_to_problem(None) is None
    assert "report_to must be one of" in report_to_problem("mlflow")
    monkeypatch.setitem(sys.modules, "trackio", None)  # as if not installed
    assert "pip install trackio" in report_to_problem("trackio")
    if importlib.util.find_spec("wandb") is None:
        pytest.skip("wandb is installed by make setup")
    for k in ("WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(k, raising=False)
    netrc_file = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc_file))  # none yet
    monkeypatch.setenv("WANDB_MODE", "online")
    assert "no W&B API key" in report_to_problem("wandb") and "WANDB_MODE=offline" in report_to_problem("wandb")
    monkeypatch.delenv("WANDB_MODE")  # unset: wandb runs online
    assert "no W&B API key" in report_to_problem("wandb")
    for mode in ("offline", "disabled"):
        monkeypatch.setenv("WANDB_MODE", mode)
        assert report_to_problem("wandb") is None
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert report_to_problem("wandb") is None
    monkeypatch.delenv("WANDB_API_KEY")
    netrc_file.write_text("machine api.wandb.ai\n  login user\n  password " + "p" * 40 + "\n")
    netrc_file.chmod(0o600)
    assert report_to_problem("wandb") is None


def test_stage_index_follows_the_schedule_and_the_run_is_named(tmp_path):
    with Tracker("tensorboard", tmp_path / "run" / "tracking", stages=("short", "full", "rl")) as t:
        assert t.log({"loss": 1.0, "stage": "full"}, 5)["stage_index"] == 1.0  # schedule order, not first seen
        t.log({"loss": 0.5, "stage": "extra"}, 6)  # not in the schedule: numbered after it
        t.log({"loss": 0.5}, 7)  # no stage: no index
    scalars, texts = read_events(tmp_path / "run" / "tracking", run="run")  # default name: the run folder
    assert scalars["stage_index"] == {5: 1.0, 6: 3.0} and texts["stage/text_summary"] == {5: "full", 6: "extra"}
