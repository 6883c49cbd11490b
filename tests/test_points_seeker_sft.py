"""POINTS-Seeker SFT recipe (§3.2.3 Eq. SFT NLL, §4.1, App. A.2-A.3): loss normalisation, packing,
Agentic Seeding / SFT mixtures by hub id loaded from a local copy in hub layout."""

from __future__ import annotations

import pytest
import torch

from kit.models.processor import load_image_only_processor
from kit.models.tiny import build_tiny_checkpoint
from kit.train.sample_records import sample_record
from kit.train.sft_data import SFTCollator, SFTEncoder

pytest.importorskip("trl", reason="trl is in the 'train' extra")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForImageTextToText

    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    enc = SFTEncoder(load_image_only_processor(path), tools=[])
    ws = tmp_path_factory.mktemp("ws")
    recs = [sample_record(ws / f"w{i}", rid=f"e{i}") for i in range(2)]
    # a text-only record with fewer trained tokens, so token mean and sample sum differ
    short = recs[0].model_copy(update={"id": "short", "messages": [m for m in recs[0].messages
                                                                  if m.role in ("system", "assistant")][:2]})
    ex, rep = enc.encode_many(recs + [short])
    assert rep.kept == 3, rep.as_dict()
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(str(path)).eval()
    return path, enc, ex, model


def _direct_nll(model, batch):
    """Per-sample Σ masked -log p, computed with plain torch on the unpacked padded batch."""
    out = model(**{k: v for k, v in batch.items() if k != "labels"})
    logp = torch.log_softmax(out.logits.float(), dim=-1)[:, :-1]
    tgt = batch["labels"][:, 1:]
    m = tgt != -100
    tok = -logp.gather(-1, tgt.clamp(min=0)[..., None])[..., 0] * m
    return tok.sum(dim=1), m.sum()


def _trainer(tiny, tmp_path, **cfg):
    from kit.train.sft import SFTTrainConfig, make_trainer

    path, enc, ex, model = tiny
    c = SFTTrainConfig(max_steps=1, per_device_batch_size=3, grad_accum=1, gradient_checkpointing=False,
                       save_steps=1000, **cfg)
    return make_trainer(model, ex, enc.pad_token_id, tmp_path, c)


@pytest.mark.parametrize("norm", ["token_mean", "sample_sum"])
def test_loss_normalisation_matches_direct_torch(tiny, tmp_path, norm):
    _, enc, ex, model = tiny
    batch = SFTCollator(enc.pad_token_id)(ex)
    with torch.no_grad():
        per_sample, n_tok = _direct_nll(model, batch)
        tr = _trainer(tiny, tmp_path, loss_normalization=norm)
        n = tr._get_num_items_in_batch([batch], torch.device("cpu"))
        loss = tr.compute_loss(model, dict(batch), num_items_in_batch=n)
    expected = per_sample.sum() / (len(ex) if norm == "sample_sum" else n_tok)
    assert int(n) == (3 if norm == "sample_sum" else int(n_tok))
    assert torch.allclose(loss.float(), expected, rtol=1e-4), (float(loss), float(expected))
    other = per_sample.sum() / (n_tok if norm == "sample_sum" else len(ex))
    assert not torch.allclose(loss.float(), other, rtol=1e-3)  # the two normalisations differ on this batch


def test_sample_sum_counts_samples_over_accumulation(tiny, tmp_path):
    _, enc, ex, _ = tiny
    col = SFTCollator(enc.pad_token_id)
    tr = _trainer(tiny, tmp_path, loss_normalization="sample_sum", packing=True)
    from kit.train.packing import PackedSFTCollator

    packed = PackedSFTCollator(enc.pad_token_id, 10**6)
    # two micro-batches: a packed one with 2 samples in 1 row, a padded one with 1 sample
    assert int(tr._get_num_items_in_batch([packed(ex[:2]), col(ex[2:])], torch.device("cpu"))) == 3
    assert tr.loss_is_scaled_for_ga is True


def test_packing_keeps_masks_counts_and_sample_independence(tiny):
    from kit.train.packing import PackedSFTCollator, find_rope_index_fn, pack_bins

    _, enc, ex, model = tiny
    lens = [e.num_tokens for e in ex]
    col = PackedSFTCollator(enc.pad_token_id, max_tokens=lens[0] + lens[1], rope_index_fn=find_rope_index_fn(model))
    b = col(ex)
    assert pack_bins(lens, lens[0] + lens[1]) == [[0, 1], [2]]
    assert b["input_ids"].shape == (2, lens[0] + lens[1]) and int(b["num_samples"]) == 3
    assert b["position_ids"].shape == (4, 2, lens[0] + lens[1]) and "attention_mask" not in b
    # loss masks: concatenation of each sample's mask (first token of each sample never a target)
    want = torch.cat([ex[0].loss_mask, ex[1].loss_mask])
    assert torch.equal(b["labels"][0] != -100, want) and int((b["labels"][1] != -100).sum()) == ex[2].num_loss_tokens
    starts = (b["position_ids"][0, 0] == 0).nonzero().flatten().tolist()
    assert starts == [0, lens[0]]
    # packed forward == separate forwards: no attention across the boundary, M-RoPE per sample
    with torch.no_grad():
        # use_cache=False as in training (TRL sets it): with a cache transformers skips the packed mask
        packed_logits = model(**{k: v for k, v in b.items() if k not in ("labels", "num_samples", "num_tokens")},
                              use_cache=False).logits
        for i, (row, off) in enumerate([(0, 0), (0, lens[0]), (1, 0)]):
            single = SFTCollator(enc.pad_token_id)([ex[i]])
            ref = model(**{k: v for k, v in single.items() if k != "labels"}).logits[0]
            assert torch.allclose(packed_logits[row, off:off + lens[i]], ref, atol=1e-4), i
    with pytest.raises(ValueError, match="over the packing limit"):
        PackedSFTCollator(enc.pad_token_id, max_tokens=lens[0] - 1)(ex[:1])


def test_points_seeker_sft_config():
    from kit.train.sft import points_seeker_sft_config

    c = points_seeker_sft_config(world_size=2, per_device_batch_size=4)
    assert c.per_device_batch_size * c.grad_accum * 2 == 64 and c.lr_language == c.lr_vision == 5e-5
    assert c.packing and c.max_packed_tokens == 32768 and c.loss_normalization == "sample_sum"
    with pytest.raises(ValueError, match="divisible"):
        points_seeker_sft_config(per_device_batch_size=5)


def test_packed_sample_sum_training_runs_through_trl(tiny, tmp_path):
    from kit.train.sft import SFTTrainConfig, train_sft

    path, enc, ex, _ = tiny
    cfg = SFTTrainConfig(max_steps=2, per_device_batch_size=3, grad_accum=1, lr_language=3e-3, lr_vision=3e-4,
                         warmup_ratio=0.0, gradient_checkpointing=False, save_steps=1000, packing=True,
                         max_packed_tokens=4096, loss_normalization="sample_sum")
    res = train_sft(path, ex, tmp_path / "run", cfg, backend="trl", save_final=False)
    logged = [h for h in res.log_history if "loss" in h]
    assert len(logged) == 2 and all(h["tokens_per_s"] > 0 and 0 < h["masked_token_share"] < 1 for h in logged)


def test_points_seeker_seeding_spec_names_the_papers_sources():
    from kit.train.mixtures import DEFAULT_MIXTURE, MIXTURES, Mixture, MixtureError, load_mixture

    mix = load_mixture(DEFAULT_MIXTURE)
    names = [s.name for s in mix.sources]
    assert names == ["a-m-team/AM-DeepSeek-R1-Distilled-1.4M", "Agent-Ark/Toucan-1.5M",
                     "tanhuajie2001/Reason-RFT-CoT-Dataset", "TIGER-Lab/VisualWebInstruct"]
    q = mix.quotas()  # weights proportional to the sizes A.2 states
    assert q == {n: s for n, s in zip(names, (1_400_000, 1_500_000, 10_000, 900_000))}
    assert {s.name: s.reasoning for s in mix.sources if s.format == "vqa"} == dict.fromkeys(names[2:], "teacher")
    assert Mixture.from_file(MIXTURES["kit_open_alternatives"]).size > 0  # the old example, kept as a variant
    with pytest.raises(MixtureError, match="names no hub id"):
        load_mixture("points_seeker_sft")
    sft = load_mixture("points_seeker_sft", replace={
        "REQUIRED:points_seeker_trajectories_text": {"name": "t.jsonl"},
        "REQUIRED:points_seeker_trajectories_rendered": {"name": "r.jsonl"},
        "REQUIRED:infoseek_trajectories": {"name": "i.jsonl", "weight": 100},
        "REQUIRED:ocr_samples": {"name": "me/ocr"}})
    assert [s.weight for s in sft.sources] == [5339, 5339, 100, 15000, 1_000_000]


def test_seeding_mixture_loads_by_hub_id_from_local_copy(tmp_path, monkeypatch, tiny):
    from kit.hub.localhub import LocalHub
    from kit.train.local_copies import write_local_copy
    from kit.train.mixtures import MixtureError, load_mixture, sample_mixture

    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    hub = LocalHub(tmp_path / "hub")
    mix = load_mixture("points_seeker_seeding")  # paper-size quotas, capped by the 3 rows of each copy
    commits = write_local_copy(hub, mix, rows=3)
    assert set(commits) == {s.name for s in mix.sources}

    def teacher(ws, msgs):  # a stand-in endpoint: right on even questions, wrong on odd ones
        n = int(msgs[0].content[-1].text.split("image ")[1].rstrip("?"))
        return f"<think>count</think><answer>{n if n % 2 == 0 else n + 7}</answer>"

    with hub.installed():
        with pytest.raises(MixtureError, match="teacher endpoint"):
            sample_mixture(mix, workspace=tmp_path / "ws", cache_dir=tmp_path / "c0")
        recs, rep = sample_mixture(mix, workspace=tmp_path / "ws", distiller=teacher, cache_dir=tmp_path / "c1")
    assert all(rep[n]["commit"] == c for n, c in commits.items())
    for n in ("tanhuajie2001/Reason-RFT-CoT-Dataset", "TIGER-Lab/VisualWebInstruct"):
        kept = sum(1 for r in recs if r.task.source == n)
        # questions 0, 1, 2: the stand-in teacher is wrong on 1, so exactly one row is filtered
        assert (rep[n]["drawn"], rep[n]["filtered_answer_mismatch"], kept) == (3, 1, 2)
    toucan = next(r for r in recs if r.task.source == "Agent-Ark/Toucan-1.5M")
    assert [m.role for m in toucan.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert "<tool_call>" in toucan.messages[2].content[0].text and "get_time" in toucan.messages[0].content[0].text
    ex, erep = tiny[1].encode_many(recs)
    assert erep.kept == len(recs) and any(e.image_grid_thw is not None for e in ex)
    vqa = [r for r in recs if "format:vqa" in r.labels]
    assert vqa and all("seeding:distilled:Qwen3-VL-235B-A22B-Thinking" in r.labels for r in vqa)

    # the labelled fallback: the dataset's own answer, no teacher, nothing filtered
    alt = load_mixture("points_seeker_seeding", replace={n: {"reasoning": "dataset_answer"} for n in (
        "tanhuajie2001/Reason-RFT-CoT-Dataset", "TIGER-Lab/VisualWebInstruct")})
    with hub.installed():
        recs2, rep2 = sample_mixture(alt, workspace=tmp_path / "ws2", cache_dir=tmp_path / "c1")
    vqa2 = [r for r in recs2 if "format:vqa" in r.labels]
    assert len(vqa2) == 6 and all("seeding:dataset-answer" in r.labels for r in vqa2)
