"""Agentic SFT trainers (TRL on CPU; Unsloth on GPU when present), evaluation hook and mixtures."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from kit.models.processor import load_image_only_processor
from kit.models.tiny import build_tiny_checkpoint
from kit.train.mixtures import DEFAULT_MIXTURE, Mixture, MixtureError, sample_mixture
from kit.train.sample_records import sample_record as make_record
from kit.train.sft import BackendUnavailable, SFTTrainConfig, param_groups, resolve_backend, train_sft
from kit.train.sft_data import SFTEncoder
from kit.train.sft_eval import check_generation, evaluate_sft

pytest.importorskip("trl", reason="trl is in the 'train' extra (pip install -e '.[train]')")

HAS_GPU_UNSLOTH = torch.cuda.is_available() and importlib.util.find_spec("unsloth") is not None


def _cfg(**kw):
    base = dict(max_steps=8, grad_accum=1, per_device_batch_size=2, lr_language=3e-3, lr_vision=3e-4,
                warmup_ratio=0.0, gradient_checkpointing=False, save_steps=1000)
    return SFTTrainConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def tiny():
    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    return path, SFTEncoder(load_image_only_processor(path), tools=[])


def test_import_does_not_pull_trl():
    code = "import sys, kit.train.sft, kit.train.sft_data, kit.train.sft_eval, kit.train.mixtures; print('trl' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_param_groups_split_vision_and_language(tiny):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(str(tiny[0]))
    groups = param_groups(model, 1e-5, 1e-6, 0.1)
    by = {g["group_name"]: g for g in groups}
    assert set(by) == {"language", "language_no_decay", "vision", "vision_no_decay"}
    assert by["vision"]["lr"] == 1e-6 and by["language"]["lr"] == 1e-5 and by["vision_no_decay"]["weight_decay"] == 0
    ids = {id(p) for g in groups for p in g["params"]}
    vis = {id(p) for n, p in model.named_parameters() if "visual" in n}
    assert vis and vis <= {id(p) for p in by["vision"]["params"] + by["vision_no_decay"]["params"]}
    assert len(ids) == sum(1 for _ in model.parameters())


def test_backend_resolution():
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailable, match="CUDA"):
            resolve_backend("unsloth")
        assert resolve_backend("auto") == "trl"
    with pytest.raises(ValueError):
        resolve_backend("jax")


def test_trl_cpu_training_lowers_loss_and_resumes(tiny, tmp_path):
    path, enc = tiny
    ex, rep = enc.encode_many([make_record(tmp_path / f"w{i}", rid=f"e{i}") for i in range(4)])
    assert rep.kept == 4
    out = tmp_path / "run"
    res = train_sft(path, ex, out, _cfg(save_steps=4), backend="trl")
    losses = res.losses()
    assert len(losses) == 8 and losses[-1] < 0.9 * losses[0]
    logged = [h for h in res.log_history if "loss" in h]
    assert all(h["tokens_per_s"] > 0 and 0 < h["masked_token_share"] < 1 for h in logged)
    assert (out / "final" / "config.json").exists() and (out / "checkpoint-8").is_dir()
    # resume from checkpoint-4 and continue to step 10
    res2 = train_sft(path, ex, tmp_path / "run", _cfg(max_steps=10, save_steps=4), backend="trl",
                     resume=str(out / "checkpoint-8"), save_final=False)
    steps = [h["step"] for h in res2.log_history if "loss" in h]
    assert steps[-1] == 10 and min(steps) == 1  # history is restored from the checkpoint state


def test_trl_lora(tiny, tmp_path):
    path, enc = tiny
    ex, _ = enc.encode_many([make_record(tmp_path / "w", rid="e")])
    res = train_sft(path, ex, tmp_path / "lora", _cfg(max_steps=3, lora_rank=4, per_device_batch_size=1), backend="trl")
    assert len(res.losses()) == 3
    assert not any("lora" in n for n, _ in res.model.named_parameters())  # merged for saving


def test_evaluation_hook(tiny, tmp_path):
    from transformers import AutoModelForImageTextToText

    path, enc = tiny
    model = AutoModelForImageTextToText.from_pretrained(str(path))
    rep = evaluate_sft(model, enc, [make_record(tmp_path / "w")], max_new_tokens=8)
    assert rep["generations"] == 3 and rep["loss"] > 0 and 0 <= rep["format_compliance"] <= 1


def test_check_generation():
    ok = check_generation('<think>x</think>\n<tool_call>\n{"name": "web_search", "arguments": {"query": "a"}}\n</tool_call>')
    assert (ok.calls, ok.valid_calls, ok.compliant) == (1, 1, True)
    bad = check_generation('<tool_call>\n{"name": "web_search", "arguments": {"nope": 1}}\n</tool_call>')
    assert (bad.calls, bad.valid_calls) == (1, 0)
    junk = check_generation("<tool_call>{not json</tool_call>")
    assert junk.valid_calls == 0
    assert check_generation("<think>t</think><response>a</response>").compliant and not check_generation("hello").compliant
    # Table 6 grammar departures make a generation non-compliant, as in the RL format term
    for text, code in [("<response>a</response>", "think_missing"),
                       ("<think>t</think>Sure! <response>a</response>", "text_outside_grammar"),
                       ("<think>t</think><response>a</response><response>b</response>", "multiple_responses")]:
        g = check_generation(text)
        assert not g.compliant and code in g.departures, (text, g)


def test_mixture_sampling(tmp_path, tiny):
    a, b = tmp_path / "reason.jsonl", tmp_path / "agent.jsonl"
    a.write_text("\n".join(json.dumps({"conversations": [{"from": "human", "value": f"q{i}"},
                                                         {"from": "gpt", "value": f"<think>r</think>a{i}"}]})
                           for i in range(10)))
    b.write_text("\n".join(json.dumps({"messages": [{"role": "user", "content": f"u{i}"},
                                                    {"role": "assistant", "content": "ok"}]}) for i in range(3)))
    mix = Mixture.from_dict({"size": 8, "sources": [{"name": str(a), "kind": "reasoning", "weight": 1},
                                                     {"name": str(b), "kind": "text_agentic", "weight": 1}]})
    assert mix.quotas() == {str(a): 4, str(b): 4}
    recs, rep = sample_mixture(mix)
    assert rep[str(b)]["drawn"] == 3 and rep[str(a)]["drawn"] == 4 and len(recs) == 7
    ex, erep = tiny[1].encode_many(recs)
    assert erep.kept == 7 and all(e.num_loss_tokens > 0 for e in ex)
    assert Mixture.from_file(DEFAULT_MIXTURE).size > 0  # a MIXTURES name: the recipe row
    with pytest.raises(MixtureError):
        Mixture.from_dict({"size": 1, "sources": [{"name": "x", "kind": "reasoning", "weight": 0}]})
    with pytest.raises(MixtureError, match="cannot load"):
        sample_mixture(Mixture.from_dict({"size": 1, "sources": [{"name": "no-such/dataset-xyz", "kind": "reasoning",
                                                                  "weight": 1}]}))


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU_UNSLOTH, reason="needs a CUDA GPU and unsloth installed (GPU-only back end)")
def test_unsloth_training_lowers_loss(tmp_path):
    path = build_tiny_checkpoint("qwen2_5_vl", vocab="local")
    enc = SFTEncoder(load_image_only_processor(path), tools=[])
    ex, _ = enc.encode_many([make_record(tmp_path / f"w{i}", rid=f"e{i}") for i in range(4)])
    for rank in (8, 0):
        res = train_sft(path, ex, tmp_path / f"u{rank}", _cfg(lora_rank=rank), backend="unsloth")
        assert res.backend == "unsloth" and res.losses()[-1] < res.losses()[0]


def test_checkpointing_field_follows_the_installed_transformers():
    """transformers 5.17 (the GPU image) has only ``gradient_checkpointing``; >= 5.2x names it
    ``activation_checkpointing``: the SFT trainer passes whichever exists (it failed on 5.17 before)."""
    import dataclasses

    from trl import SFTConfig

    from kit.train.sft import _checkpointing_field

    old = dataclasses.make_dataclass("Old", [("gradient_checkpointing", bool, False)])
    new = dataclasses.make_dataclass("New", [("gradient_checkpointing", bool, False),
                                             ("activation_checkpointing", bool, False)])
    assert _checkpointing_field(old) == "gradient_checkpointing" and _checkpointing_field(new) == "activation_checkpointing"
    assert _checkpointing_field(SFTConfig) in {f.name for f in dataclasses.fields(SFTConfig)}
