"""TRL's SFT step bar follows the kit's progress policy (issue 18): in a headless run (stderr not a
terminal, papermill's log, CI) the bar refreshes at most every ``kit.progress.HEADLESS_MININTERVAL_S``
seconds instead of once per step, and the log rows do not redraw it on every logging step."""

from __future__ import annotations

import re

import pytest
import torch

from kit.models.processor import load_image_only_processor
from kit.models.tiny import build_tiny_checkpoint
from kit.train.sample_records import sample_record
from kit.train.sft import SFTTrainConfig, train_sft
from kit.train.sft_data import SFTEncoder

pytest.importorskip("trl", reason="trl is in the 'train' extra (pip install -e '.[train]')")

BAR = re.compile(r"\d+/6 \[")  # one refresh of the 6-step training bar: "  3/6 [00:01<00:02, ..."


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_headless_sft_bar_is_sparse(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("KIT_HEADLESS", "1")
    monkeypatch.delenv("KIT_PROGRESS", raising=False)
    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    enc = SFTEncoder(load_image_only_processor(path), tools=[])
    ex, _ = enc.encode_many([sample_record(tmp_path / f"w{i}", rid=f"e{i}") for i in range(2)])
    cfg = SFTTrainConfig(max_steps=6, grad_accum=1, per_device_batch_size=1, lr_language=1e-3, lr_vision=1e-4,
                         warmup_ratio=0.0, gradient_checkpointing=False, save_steps=1000, logging_steps=1)
    capfd.readouterr()
    res = train_sft(path, ex, tmp_path / "run", cfg, backend="trl", save_final=False)
    err = capfd.readouterr().err
    assert len(res.losses()) == 6  # the rows still reach the log history (and the tracker)
    refreshes = BAR.findall(err)
    # the opening 0/6 and the closing 6/6; the old per-step bar (and a redraw per log row) wrote >= 6
    assert 1 <= len(refreshes) <= 2, err
    assert "6/6" in err.rsplit("\r", 1)[-1] or "6/6" in refreshes[-1], err


class _State:
    is_world_process_zero = True
    max_steps = 4
    global_step = 0


class _Trainer:
    """The two methods ``use_kit_progress`` needs, over transformers' own CallbackHandler."""

    def __init__(self, callbacks):
        from transformers.trainer_callback import CallbackHandler

        self.callback_handler = CallbackHandler(callbacks, None, None, None, None)

    def remove_callback(self, cb):
        self.callback_handler.remove_callback(cb)

    def add_callback(self, cb):
        self.callback_handler.add_callback(cb)


def test_use_kit_progress_swaps_only_the_bar():
    from transformers.trainer_callback import DefaultFlowCallback, PrinterCallback, ProgressCallback

    from kit.progress import use_kit_progress

    t = _Trainer([DefaultFlowCallback, ProgressCallback])
    use_kit_progress(t)
    names = [type(cb).__name__ for cb in t.callback_handler.callbacks]
    assert names == ["DefaultFlowCallback", "KitProgressCallback"]
    from transformers.utils.notebook import NotebookProgressCallback  # transformers' default inside a kernel

    t = _Trainer([DefaultFlowCallback, NotebookProgressCallback])
    use_kit_progress(t)
    assert [type(cb).__name__ for cb in t.callback_handler.callbacks] == ["DefaultFlowCallback", "KitProgressCallback"]
    t = _Trainer([DefaultFlowCallback, PrinterCallback])  # disable_tqdm=True: no bar to swap, rows still printed
    use_kit_progress(t)
    assert [type(cb).__name__ for cb in t.callback_handler.callbacks] == ["DefaultFlowCallback", "PrinterCallback"]


@pytest.mark.parametrize("headless", ["1", "0"])
def test_log_rows_printed_only_where_watched(headless, monkeypatch, capsys):
    from kit import progress as kp

    monkeypatch.setenv("KIT_HEADLESS", headless)
    monkeypatch.setattr(kp, "headless", lambda: headless == "1")  # "0": as if a terminal showed the bar
    cb, state = kp.trainer_progress_callback(), _State()
    cb.on_train_begin(None, state, None)
    assert cb.training_bar.mininterval == (kp.HEADLESS_MININTERVAL_S if headless == "1" else 0.5)
    state.global_step = 1
    cb.on_step_end(None, state, None)
    cb.on_log(None, state, None, logs={"loss": 1.23456, "learning_rate": 1e-5, "epoch": 0.25})
    assert cb.training_bar.postfix == "loss=1.235, learning_rate=1e-05"
    cb.on_train_end(None, state, None)
    out = capsys.readouterr().out
    assert ("'loss': '1.235'" in out) is (headless == "0"), out


def test_disabled_bars_take_log_rows(monkeypatch):
    from kit.progress import trainer_progress_callback

    monkeypatch.setenv("KIT_PROGRESS", "0")
    cb, state = trainer_progress_callback(), _State()
    cb.on_train_begin(None, state, None)
    assert cb.training_bar.disable
    cb.on_log(None, state, None, logs={"loss": 0.5})
    cb.on_train_end(None, state, None)
