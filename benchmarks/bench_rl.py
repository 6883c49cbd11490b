"""RL on CPU: group-rollout concurrency, FA-GSPO loss overhead, rollout throughput and trainer step time.

    .venv/bin/python benchmarks/bench_rl.py [--group 8] [--latency 0.5] [--reps 5]

Prints (ratios are against baselines measured in the same run):

* **group concurrency**: wall time of one episode vs a group of ``--group`` episodes through
  :func:`kit.rl.rollout.rollout_groups`, with a scripted policy and tools of fixed latency (target ≤ 1.5x);
* **loss overhead**: forward + FA-GSPO loss + backward vs forward + plain token loss + backward on the same
  tiny-model batch (target ≤ 1.05x), plus the full update including the old-policy log-prob pass;
* **throughput**: episodes/min of the in-process tiny model (local vocabulary) through the harness on the
  local ZIM web (or an in-file static web without the shared data), and one trainer update's time.
Figures are tiny-model CPU smoke figures, not model quality. Ends with one ``BENCH {json}`` line;
exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchlib import Summary  # noqa: E402

from kit.types import Page, SearchHit  # noqa: E402


class StaticWeb:
    """A small in-file web (used when the shared ZIM data is absent): fixed hits and one page."""

    name = "static"

    async def search(self, query, num):
        return [SearchHit(title=f"Eiffel Tower {i}", url=f"https://example.org/{i}", snippet="The tower is in Paris.")
                for i in range(num)]

    async def image_search(self, query, num):
        return []

    async def reverse_image_search(self, image, num):
        raise NotImplementedError

    async def fetch(self, url):
        return Page(url=url, title="Eiffel Tower", markdown="The Eiffel Tower is in Paris.")


class FixedLatency:
    """Wraps a backend so every call takes at least ``latency`` seconds (a remote search API stand-in)."""

    def __init__(self, inner, latency: float):
        self.inner, self.latency, self.name = inner, latency, f"latency({getattr(inner, 'name', '')})"

    async def search(self, query, num):
        await asyncio.sleep(self.latency)
        return await self.inner.search(query, num)

    async def image_search(self, query, num):
        await asyncio.sleep(self.latency)
        return await self.inner.image_search(query, num)

    async def reverse_image_search(self, image, num):
        await asyncio.sleep(self.latency)
        return await self.inner.reverse_image_search(image, num)

    async def fetch(self, url):
        await asyncio.sleep(self.latency)
        return await self.inner.fetch(url)


def web():
    from kit.paths import shared_data_dir, zim_paths

    root = shared_data_dir()
    if root is None:
        return StaticWeb()
    from kit.web.zim import LocalZimWeb

    return LocalZimWeb([Path(p) for p in zim_paths(root)])


async def bench_concurrency(group: int, latency: float, reps: int, summary: Summary) -> None:
    from kit.eval.judges import RuleJudge
    from kit.harness.config import HarnessConfig
    from kit.harness.episode import Task
    from kit.policy.scripted import ScriptedPolicy, tool_call_text
    from kit.rl.objective import algorithm
    from kit.rl.rollout import rollout_groups, seeded_factory
    from kit.types import SamplingParams

    def script(messages, tools):
        if not any(m.role == "tool" for m in messages):
            return tool_call_text("web_search", {"query": "Eiffel Tower"}, "search")
        return "<think>done</think><response>Eiffel Tower</response>"

    backend = FixedLatency(web(), latency)
    task = Task(id="b", question="Which tower is in Paris?", answers=["Eiffel Tower"])
    cfg = HarnessConfig.smoke(tools_enabled=["web_search"])
    one, many = [], []
    for _ in range(reps):
        for n, acc in ((1, one), (group, many)):
            f = seeded_factory(ScriptedPolicy(script, latency_s=latency), backend, cfg, SamplingParams())
            with tempfile.TemporaryDirectory() as d:
                t = time.perf_counter()
                b = await rollout_groups(f, [task], n, d, judge=RuleJudge(), spec=algorithm("fa_gspo"))
                acc.append(time.perf_counter() - t)
                assert all(x.eligible for x in b.trajectories())
    o, m = statistics.median(one), statistics.median(many)
    print(f"group concurrency: 1 episode {o:.3f} s, group of {group} {m:.3f} s -> {m / o:.2f}x (target <= 1.5x; "
          f"policy and each tool call {latency:.2f} s)")
    summary.target("group_vs_one_episode_ratio", m / o, "<=", 1.5)


def bench_loss(reps: int, summary: Summary) -> None:
    import torch
    from transformers import AutoModelForImageTextToText

    from kit.harness.episode import EpisodeRecord, Task
    from kit.models.processor import load_image_only_processor
    from kit.models.tiny import build_tiny_checkpoint
    from kit.rl.logprobs import token_logprobs
    from kit.rl.objective import gspo_loss, token_nll_loss
    from kit.train.sft_data import SFTCollator, SFTEncoder
    from kit.types import ContentPart, Message

    path = build_tiny_checkpoint("qwen2_vl", vocab="local")
    enc = SFTEncoder(load_image_only_processor(path))
    task = Task(id="t", question="q", answers=["a"])

    def rec(i):
        obs = " ".join(f"result {j} about the tower" for j in range(60))
        msgs = [Message(role="system", content=[ContentPart(type="text", text="You answer questions.")]),
                Message(role="user", content=[ContentPart(type="text", text="Which tower is in Paris?")]),
                Message(role="assistant", content=[ContentPart(type="text", text='<tool_call>{"name": "web_search"}</tool_call>')]),
                Message(role="tool", content=[ContentPart(type="text", text=obs)], name="web_search"),
                Message(role="assistant", content=[ContentPart(type="text", text=f"<think>{i}</think><response>Eiffel</response>")])]
        return EpisodeRecord(id=f"r{i}", task=task, config_hash="x", messages=msgs, status="answered", trainable=True)

    batch = SFTCollator(enc.pad_token_id)([enc.encode(rec(i)) for i in range(8)])
    model = AutoModelForImageTextToText.from_pretrained(str(path))
    with torch.no_grad():
        old = token_logprobs(model, batch)
    adv = [1.0, -1.0] * 4
    w = [1 / 8] * 8

    def step(kind):
        t = time.perf_counter()
        ts = token_logprobs(model, batch)
        loss = token_nll_loss(ts.logp, ts.mask) if kind == "nll" else \
            gspo_loss(ts.logp, old.logp, ts.mask, adv, w, eps_lo=3e-4, eps_hi=4e-4)[0]
        loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    def full():
        t = time.perf_counter()
        with torch.no_grad():
            o = token_logprobs(model, batch, with_entropy=True)
        ts = token_logprobs(model, batch)
        gspo_loss(ts.logp, o.logp, ts.mask, adv, w, eps_lo=3e-4, eps_hi=4e-4)[0].backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    for _ in range(2):
        step("nll"), step("gspo")
    nll, gs, fu = [], [], []
    for _ in range(reps):  # interleaved so machine load affects both alike
        nll.append(step("nll"))
        gs.append(step("gspo"))
        fu.append(full())
    a, b, c = statistics.median(nll), statistics.median(gs), statistics.median(fu)
    print(f"loss overhead: token-loss step {a * 1000:.1f} ms, FA-GSPO-loss step {b * 1000:.1f} ms -> {b / a:.3f}x "
          f"(target <= 1.05x); with the old-policy log-prob pass {c * 1000:.1f} ms ({c / a:.2f}x); "
          f"batch 8 x {batch['input_ids'].shape[1]} tokens, {int(old.mask.sum())} generated")
    summary.target("fa_gspo_vs_token_loss_ratio", b / a, "<=", 1.05)
    summary.figure("full_update_vs_token_loss_ratio", c / a)


async def bench_throughput(group: int, summary: Summary) -> None:
    from kit.eval.vistarget import build_zim_vistarget
    from kit.harness.config import HarnessConfig
    from kit.harness.episode import Task
    from kit.models.tiny import build_tiny_checkpoint
    from kit.rl.trainer import RLConfig, RLTrainer

    backend = web()
    with tempfile.TemporaryDirectory() as d:
        if isinstance(backend, StaticWeb):
            tasks = [Task(id="s", question="Which tower is in Paris?", answers=["Eiffel Tower"])]
        else:
            tasks = (await build_zim_vistarget(backend, 2, Path(d) / "t")).tasks
        tr = RLTrainer(build_tiny_checkpoint("qwen2_vl", vocab="local"), backend, tasks, Path(d) / "run",
                       RLConfig(group_size=group, prompts_per_step=1, lr=1e-3, micro_batch=2, save_every=10**6),
                       harness_config=HarnessConfig.smoke(max_turns=1, max_response_tokens=64, tools_enabled=["web_search"]),
                       labels=["smoke"])
        m = await tr.train_step()
        print(f"rollout throughput (tiny model, in process, {backend.name}): {m['rollout_episodes_per_min']:.1f} "
              f"episodes/min ({m['rollout_trajectories']} episodes in {m['rollout_rollout_s']:.1f} s); "
              f"trainer step {m['step_s']:.1f} s ({m.get('skipped') or 'updated'})")
        summary.figure("rollout_episodes_per_min", m["rollout_episodes_per_min"])
        from kit.rl.eligibility import check
        from kit.rl.rewards import RewardBreakdown
        from kit.rl.rollout import RolloutBatch, Trajectory

        # an update on real encoded rollouts: the same records with mixed synthetic rewards
        recs = [r for r in _records(Path(d) / "run")][:group]
        groups = [[Trajectory(r.model_copy(update={"status": "answered", "events": []}), 0,
                              RewardBreakdown(float(i % 2), float(i % 2), 1.0, 0.0), None) for i, r in enumerate(recs)]]
        for g in groups:
            for t in g:
                t.eligibility = check(t.record, t.reward.reward)
        t0 = time.perf_counter()
        um = tr.rl_update(RolloutBatch(tasks=tasks[:1], groups=groups, wall_s=0.0), tr.schedule.knobs)
        update_s = time.perf_counter() - t0
        print(f"trainer update on {um.get('trained_trajectories')} real rollout transcripts "
              f"({um.get('trained_tokens')} generated tokens): {update_s:.2f} s")
        summary.figure("trainer_update_s", update_s)


def _records(run: Path):
    from kit.harness.runner import read_episodes

    for f in sorted(run.glob("rollouts/*/episodes.jsonl")):
        yield from read_episodes(f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    summary = Summary("bench_rl")
    asyncio.run(bench_concurrency(a.group, a.latency, max(1, a.reps // 2), summary))
    bench_loss(a.reps, summary)
    asyncio.run(bench_throughput(a.group, summary))
    return summary.finish()


if __name__ == "__main__":
    sys.exit(main())
