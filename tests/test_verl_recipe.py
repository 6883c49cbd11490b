"""The verl recipe (kit.rl.verl) inside its own environment (``.venv-verl``, scripts/setup_verl.sh).

From the kit's main environment, :func:`test_recipe_in_verl_env` re-runs this file with the verl
environment's interpreter (skipped when that environment is absent). Inside it, the other tests check
that FA-GSPO is registered as a verl advantage estimator and policy loss whose numbers equal the kit's
own objective (Eq. 4, 6, 7), and run one ``kit_harness`` agent-loop step: a kit harness episode whose
policy calls a verl-style rollout server (scripted token output from the tiny checkpoint's tokenizer),
checking response_mask, images in multi_modal_data, reward, and exclusion when the server dies.
A full verl PPO step needs Ray workers and a GPU rollout engine; kit/rl/verl/README.md has the manual GPU check.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

from kit.paths import PROJECT_ROOT

pytestmark = pytest.mark.verl
IN_VERL = importlib.util.find_spec("verl") is not None
needs_verl = pytest.mark.skipif(not IN_VERL, reason="runs inside the verl environment (.venv-verl)")


def _venv() -> Path:
    return Path(os.environ.get("KIT_VERL_VENV", PROJECT_ROOT / ".venv-verl"))


@pytest.mark.skipif(IN_VERL, reason="this is the launcher; the checks run below in this environment")
def test_recipe_in_verl_env():
    py = _venv() / "bin" / "python"
    if not py.is_file():
        pytest.skip(f"no verl venv at {_venv()} (run scripts/setup_verl.sh or set KIT_VERL_VENV)")
    r = subprocess.run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "verl", str(Path(__file__)),
                        "-k", "not test_recipe_in_verl_env"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False,
                       timeout=900, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    out = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, out
    assert " passed" in out and "skipped" not in out.split("\n")[-2], out


@needs_verl
def test_fa_gspo_registered_and_equal_to_kit_objective():
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn

    import kit.rl.verl.algos
    from kit.rl.objective import group_advantages, gspo_loss

    est, loss_fn = get_adv_estimator_fn("fa_gspo"), get_policy_loss_fn("fa_gspo")
    # groups: A (3 of 4 eligible), B (1 of 2), D (2 of 3); excluded rows have an all-zero response mask
    rewards = [1.0, 0.0, 1.0, 0.1, 0.9, 0.0, 0.9, 0.0, 0.5]
    uid = np.array(["A", "A", "A", "A", "B", "B", "D", "D", "D"], dtype=object)
    elig = [True, True, False, True, True, False, True, True, False]
    B, T = len(rewards), 5
    mask = torch.zeros(B, T)
    for i, e in enumerate(elig):
        if e:
            mask[i, : 2 + i % 3] = 1
    tlr = torch.zeros(B, T)
    tlr[:, -1] = torch.tensor(rewards)
    adv, _ = est(token_level_rewards=tlr, response_mask=mask, index=uid, config=None)
    kit = group_advantages([rewards[0:4], rewards[4:6], rewards[6:9]], [elig[0:4], elig[4:6], elig[6:9]])
    w = [x for g in kit.weights() for x in g]
    a = [x for g in kit.advantages for x in g]
    for i in range(B):
        expect = a[i] * w[i] * B
        assert torch.allclose(adv[i], expect * mask[i], atol=1e-5), i
    assert adv[0, 0].item() == pytest.approx(1.1499302242 * (1 / 6) * 9, rel=1e-5)
    assert torch.count_nonzero(adv[4:6]) == 0  # group B dropped
    # policy loss == kit's Eq. 7 loss on the same log-probs
    torch.manual_seed(0)
    old = -torch.rand(B, T)
    new = (old + 0.05 * torch.randn(B, T)).requires_grad_(True)
    cfg = OmegaConf.create({"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio": 0.2,
                            "global_batch_info": {"dp_size": 1, "global_batch_size": B}})
    loss, metrics = loss_fn(old, new, adv, mask, "seq-mean-token-mean", cfg)
    ref, _ = gspo_loss(new, old, mask.bool() | (mask.sum(-1, keepdim=True) == 0), a, w, eps_lo=0.2, eps_hi=0.28)
    assert float(loss) == pytest.approx(float(ref), rel=1e-5)
    loss.backward()
    assert torch.count_nonzero(new.grad[[2, 5, 8]]) == 0  # excluded rows: exactly zero gradient
    assert metrics["actor/fa_gspo_rows"] == sum(elig)


def test_recipe_calls_the_kit_objective_instead_of_reimplementing_it():
    """kit/rl/verl/algos.py moves verl's tensors into the kit registry's losses (kit.rl.objective's, read through
    kit.rl.registry); it computes no ratio, clip or minimum of its own (the check reads the source)."""
    import ast

    tree = ast.parse((PROJECT_ROOT / "kit" / "rl" / "verl" / "algos.py").read_text(encoding="utf-8"))
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert {"spec.fn", "group_advantages"} <= calls and "POLICY_LOSSES.values" in calls
    own = sorted(c for c in calls if c.split(".")[-1] in ("exp", "clamp", "minimum", "clip", "std", "mean"))
    assert own == [], f"the recipe re-implements objective math: {own}"


def _extreme_batch():
    """Log-ratio above verl's clamp (row 1), a clipped row (3), an excluded row (2), ragged masks."""
    import torch

    torch.manual_seed(0)
    B, T = 7, 6
    old = -torch.rand(B, T)
    new = old + 0.05 * torch.randn(B, T)
    new[1] = old[1] + 12.0
    new[3] = old[3] + 0.5
    mask = torch.ones(B, T)
    mask[2] = 0
    mask[4, 3:] = 0
    mask[5, :1] = 0
    adv = torch.randn(B, 1).expand(B, T) * mask
    adv[1] = -1.0 * mask[1]
    return old, new, mask, adv, torch.rand(B, T) + 0.5


@needs_verl
def test_fa_gspo_loss_is_the_kit_loss_bit_for_bit():
    import torch
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    import kit.rl.verl.algos as algos
    from kit.rl.objective import gspo_loss

    loss_fn = get_policy_loss_fn("fa_gspo")
    old, new, mask, adv, isw = _extreme_batch()
    cfg = OmegaConf.create({"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio": 0.2,
                            "global_batch_info": {"dp_size": 2, "global_batch_size": 10}})
    live = mask.sum(-1) > 0
    a = (adv * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)
    # the values the recipe's own loss code gave on these tensors before it called the kit's
    before = {None: 4405.0283203125, "isw": 3559.00146484375}
    for key, w in ((None, None), ("isw", isw)):
        got_in = new.clone().requires_grad_(True)
        loss, metrics = loss_fn(old, got_in, adv, mask, "seq-mean-token-mean", cfg, rollout_is_weights=w)
        loss.backward()
        ref_in = new.clone().requires_grad_(True)
        weights = live.double() * (1.0 if w is None else ((w * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)).double())
        ref, stats = gspo_loss(ref_in, old, mask, a, weights, eps_lo=0.2, eps_hi=0.28, max_log_ratio=algos.MAX_LOG_RATIO)
        ref = ref / 10 * 2
        ref.backward()
        assert loss.item() == ref.item() == pytest.approx(before[key], rel=1e-6)
        assert torch.equal(got_in.grad, ref_in.grad) and torch.count_nonzero(got_in.grad[2]) == 0
        assert metrics["actor/fa_gspo_rows"] == stats["rows"] == 6
        assert metrics["actor/pg_clipfrac"] == pytest.approx(1 / 6)


class _Server:
    """A verl rollout server stand-in: returns the tokenization of scripted assistant texts."""

    def __init__(self, tokenizer, texts, die_after=None):
        self.tok, self.texts, self.die_after, self.calls = tokenizer, list(texts), die_after, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, **kw):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append({"prompt_len": len(prompt_ids), "images": len(image_data or []), "params": sampling_params})
        if self.die_after is not None and len(self.calls) > self.die_after:
            raise ConnectionError("rollout server died")
        text = self.texts[min(len(self.calls) - 1, len(self.texts) - 1)]
        return TokenOutput(token_ids=self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id])


def _loop(tmp_path, server, tiny):
    from conftest import MemoryBackend
    from omegaconf import OmegaConf
    from transformers import AutoProcessor
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    import kit.models  # noqa: F401  (registers the image-only processor)
    from kit.eval.judges import RuleJudge
    from kit.rl.verl.agent_loop import KitHarnessAgentLoop

    proc = AutoProcessor.from_pretrained(str(tiny))
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 16384, "response_length": 8192}},
                            "data": {}, "kit": {"harness": "smoke", "workspace_root": str(tmp_path),
                                                "harness_overrides": {"tools_enabled": ["web_search_for_image"],
                                                                      "max_turns": 3}}})
    KitHarnessAgentLoop._shared.clear()
    KitHarnessAgentLoop.backend_factory = staticmethod(lambda c: MemoryBackend())
    KitHarnessAgentLoop.judge_factory = staticmethod(lambda c: RuleJudge())
    return KitHarnessAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server(proc.tokenizer),
                               tokenizer=proc.tokenizer, processor=proc, dataset_cls=RLHFDataset,
                               data_config=DictConfigWrap(cfg.data), hf_model_type="qwen2_vl")


@needs_verl
async def test_agent_loop_step_drives_the_kit_harness(tmp_path):
    from kit.harness.episode import Task
    from kit.models.tiny import build_tiny_checkpoint
    from kit.rl.verl.data import tasks_to_rows

    tiny = build_tiny_checkpoint("qwen2_vl", vocab="local")
    texts = ['<think>look</think>\n<tool_call>\n{"name": "web_search_for_image", "arguments": {"query": "Eiffel Tower", "num": 2}}\n</tool_call>',  # noqa: E501
             "<think>found it</think>\n<response>The Eiffel Tower <IMG: search_image_1.png></response>"]
    task = Task(id="v1", question="Which tower is this?", answers=["Eiffel Tower"])
    row = tasks_to_rows([task])[0]
    loop = _loop(tmp_path, lambda tok: _Server(tok, texts), tiny)
    out = await loop.run({"temperature": 1.0, "top_p": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"])
    assert out.extra_fields["kit_eligible"] and out.extra_fields["kit_status"] == "answered"
    assert out.reward_score == pytest.approx(1.0)
    tok = loop.tokenizer
    gen = tok.decode([t for t, m in zip(out.response_ids, out.response_mask) if m])
    obs = tok.decode([t for t, m in zip(out.response_ids, out.response_mask) if not m])
    assert "<response>The Eiffel Tower" in gen and "web_search_for_image" in gen
    assert "<tool_response>" in obs and "<tool_response>" not in gen  # tool tokens masked out
    assert len(out.multi_modal_data["images"]) == 2  # the returned images travel with the sample
    assert out.response_ids[0] == tok.convert_tokens_to_ids("<think>") or gen.startswith("<think>")
    assert loop.server_manager.calls[1]["images"] == 2  # re-fed to the server on the next turn

    dead = _loop(tmp_path, lambda tok: _Server(tok, texts, die_after=1), tiny)
    out2 = await dead.run({"temperature": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"])
    assert not out2.extra_fields["kit_eligible"] and out2.extra_fields["kit_exclusion"] == "error"
    assert sum(out2.response_mask) == 0 and out2.reward_score == 0.0


@needs_verl
def test_a_plugin_loss_reaches_a_fresh_verl_process(tmp_path):
    """A loss in a module named by ``$MMSEARCH_KIT_PLUGINS`` is registered with verl as ``kit_<name>`` in a process
    that imports only ``kit.rl.verl.algos`` (what verl's workers do through ``external_lib``)."""
    import sys

    (tmp_path / "lab_losses.py").write_text(
        "from kit.rl.registry import register_policy_loss\n"
        "@register_policy_loss('lab_pg', level='token')\n"
        "def lab_pg(logp_new, logp_old, mask, advantages, weights, *, eps_lo, eps_hi):\n"
        "    return -(logp_new * mask).sum(), {'ratio_mean': 1.0, 'clip_frac': 0.0, 'rows': 1}\n")
    code = ("import kit.rl.verl.algos\nfrom verl.trainer.ppo.core_algos import get_policy_loss_fn\n"
            "print(get_policy_loss_fn('kit_lab_pg').__name__)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PROJECT_ROOT)]),
           "MMSEARCH_KIT_PLUGINS": "lab_losses"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT,
                       check=False, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("compute_kit_lab_pg_policy_loss"), r.stderr[-2000:]
