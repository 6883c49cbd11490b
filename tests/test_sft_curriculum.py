"""Short-to-long context curriculum (kit.train.curriculum) and the RL warm start that follows it."""

from __future__ import annotations

import pytest

from kit.models.processor import load_image_only_processor
from kit.models.tiny import build_tiny_checkpoint
from kit.train.curriculum import compact_record
from kit.train.sample_records import sample_record
from kit.train.sft_data import SFTEncoder


def _texts(rec, role):
    return ["".join(p.text or "" for p in m.content) for m in rec.messages if m.role == role]


def test_compact_record_cuts_only_what_the_model_reads(tmp_path):
    rec = sample_record(tmp_path / "w", rid="c")
    long_obs = rec.messages[3].model_copy(update={"content": [p.model_copy(update={"text": "x" * 900})
                                                              if p.type == "text" else p
                                                              for p in rec.messages[3].content]})
    assert long_obs.role == "tool"
    rec = rec.model_copy(update={"messages": rec.messages[:3] + [long_obs] + rec.messages[4:]})
    short = compact_record(rec, system_chars=50, observation_chars=100)
    assert all(len(t) <= 50 for t in _texts(short, "system"))
    assert all(len(t) <= 100 for t in _texts(short, "tool")) and max(len(t) for t in _texts(rec, "tool")) > 100
    for role in ("assistant", "user"):  # what the agent wrote and the user asked, interventions included
        assert _texts(short, role) == _texts(rec, role)
    assert [m.intervention for m in short.messages] == [m.intervention for m in rec.messages]
    assert [m.image_refs() for m in short.messages] == [m.image_refs() for m in rec.messages]  # images kept
    assert rec.messages[3].content[0].text == "x" * 900  # the input record is not modified
    with pytest.raises(ValueError, match=">= 0"):
        compact_record(rec, system_chars=-1)


def test_compacted_encoding_is_shorter_with_the_same_trained_tokens(tmp_path):
    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    proc = load_image_only_processor(path)
    rec = sample_record(tmp_path / "w", rid="c")
    full = SFTEncoder(proc).encode(rec)
    short = SFTEncoder(proc, tools=[]).encode(compact_record(rec, system_chars=20, observation_chars=10))
    assert short.num_tokens < full.num_tokens
    assert short.response_tokens == full.response_tokens  # every assistant turn is trained in both stages


def test_train_sft_curriculum_runs_both_stages(tmp_path):
    pytest.importorskip("trl", reason="trl is in the 'train' extra")
    from kit.train.curriculum import train_sft_curriculum
    from kit.train.sft import SFTTrainConfig

    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    recs = [sample_record(tmp_path / f"w{i}", rid=f"r{i}") for i in range(2)]
    ex, _ = SFTEncoder(load_image_only_processor(path)).encode_many(recs)
    cfg = SFTTrainConfig(max_steps=3, grad_accum=1, per_device_batch_size=1, lr_language=3e-3, lr_vision=3e-4,
                    warmup_ratio=0.0, gradient_checkpointing=False, save_steps=1000)
    res = train_sft_curriculum(path, recs, ex, tmp_path / "run", cfg, short_context_epochs=2.0, backend="trl")
    stages = [r["stage"] for r in res["log"]]
    assert stages == ["short"] * 4 + ["full"] * 3  # 2 epochs x 2 records, then max_steps=3
    assert [r["step"] for r in res["log"]] == list(range(1, 8))
    assert (tmp_path / "run" / "short" / "final" / "config.json").exists()
    assert (tmp_path / "run" / "full" / "final" / "config.json").exists()
    plain = train_sft_curriculum(path, recs, ex, tmp_path / "plain", cfg, short_context_epochs=0, backend="trl")
    assert plain["short"] is None and {r["stage"] for r in plain["log"]} == {"full"}
    with pytest.raises(ValueError, match="nothing to train on"):
        train_sft_curriculum(path, recs, [], tmp_path / "none", cfg, short_context_epochs=0, backend="trl")


def test_warm_start_short_then_full_steps(tmp_path):
    from kit.rl.warmstart import sft_warm_start

    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    recs = [sample_record(tmp_path / f"w{i}", rid=f"r{i}") for i in range(2)]
    res = sft_warm_start(path, recs, tmp_path / "warm", steps=3, full_steps=2, save_at=(3,), batch_size=2)
    assert res["stages"] == ["short"] * 3 + ["full"] * 2 and len(res["losses"]) == 5
    assert sorted(res["checkpoints"]) == [3, 5] and (res["checkpoints"][5] / "config.json").exists()
    with pytest.raises(ValueError, match="full_steps >= 0"):
        sft_warm_start(path, recs, tmp_path / "bad", steps=1, full_steps=-1)
