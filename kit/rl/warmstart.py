"""A short supervised warm start for smoke runs: plain token loss on demonstrator trajectories.

RL on a tiny *random* model is pointless (every reward is 0, every group is dropped). The smoke profile
therefore first imitates trajectories of :class:`kit.policy.demonstrator.DemonstratorPolicy`, saving
checkpoints along the way (an earlier one as the RL student, the last one as the OPD teacher), so that
rollouts have mixed rewards and non-zero advantages. It is the same objective as
:func:`kit.train.sft.train_sft` (masked token NLL through :class:`~kit.train.sft_data.SFTEncoder`) in a
plain torch loop, because the smoke budget (minutes on 2 CPU cores) cannot afford TRL's start-up and
a second run for the intermediate checkpoint. Results are tiny-model smoke results, never model quality.

It follows the short-to-long curriculum of :mod:`kit.train.curriculum`: ``steps`` on compacted
transcripts (system prompt and observations cut, no tool-schema block; cheap), then ``full_steps`` on
the full transcripts as the harness renders them, one trajectory per step (no padding). Without the
second stage the learned format does not survive the longer rollout context (measured there).

Sizes (:func:`warm_start_sizes`): the smoke profile 300 + 300 steps; a preflight 40 + 40 steps
(:data:`PREFLIGHT_WARM_START`) and at most :data:`PREFLIGHT_WARM_START_TOKENS` trained tokens. Almost all of a
preflight's cost is the full-context stage: a paper preflight's demonstration renders to ~5.6K tokens (the
recipe's system prompt and tool schemas around a ~22-token answer), 40 of them 223K of its 265K tokens. The
warm start trains with :data:`WARM_START_THREADS` torch intra-op thread(s): with two threads on 2 shared cores
the same 80 steps took 217 s wall / 177 s CPU instead of 32 s / 25 s (measured on the paper preflight: the
threads spin while other processes hold the cores; issue 26 item 6 saw 564 s / 397 s). On idle cores two
threads are faster in wall time (18 s vs 26 s) but not in CPU (32 s vs 26 s).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, NamedTuple

from kit.extras import RL_FEATURE, import_extra
from kit.harness.episode import EpisodeRecord
from kit.train.curriculum import compact_record

__all__ = ["PREFLIGHT_WARM_START", "PREFLIGHT_WARM_START_TOKENS", "SMOKE_WARM_START", "WARM_START_THREADS",
           "ProtocolDemonstrator", "WarmStartSizes", "compact_record", "sft_warm_start", "warm_start_plan",
           "warm_start_sizes"]

#: torch intra-op threads of the warm start (a tiny model on CPU): more threads only oversubscribe small shared
#: CPUs (the paper preflight's 80 steps on 2 shared cores: 2 threads 217 s wall / 177 s CPU, 1 thread 32 s / 25 s;
#: :func:`kit.policy.factory.make_policy` bounds the tiny policies' threads the same way)
WARM_START_THREADS = 1
#: the most tokens (both stages, padding included: batch size x longest example, summed over the steps) a
#: preflight's warm start trains on: the paper preflight's 40 + 40 steps are ~265K (about 25 s on one core),
#: POINTS-Seeker's ~136K; :func:`sft_warm_start` refuses a plan over it before loading the model
PREFLIGHT_WARM_START_TOKENS = 300_000


class WarmStartSizes(NamedTuple):
    """How much a warm start trains: ``steps`` compacted steps (batch 4), then ``full_steps`` full-context steps
    (batch 1), at most ``max_tokens`` trained tokens (None: no bound). The RL student is the checkpoint at
    :attr:`student_at` (half-way through the full-context stage), the OPD teacher the last one (:attr:`total`)."""

    steps: int
    full_steps: int
    max_tokens: int | None = None

    @property
    def total(self) -> int:
        return self.steps + self.full_steps

    @property
    def student_at(self) -> int:
        return self.steps + self.full_steps // 2


#: the smoke profile's warm start (notebook 05): 300 compacted + 300 full-context steps, no token bound
SMOKE_WARM_START = WarmStartSizes(300, 300, None)
#: a preflight's warm start (notebook 05): 40 + 40 steps, at most :data:`PREFLIGHT_WARM_START_TOKENS` tokens
PREFLIGHT_WARM_START = WarmStartSizes(40, 40, PREFLIGHT_WARM_START_TOKENS)


def warm_start_sizes(profile, *, steps: int | None = None, full_steps: int | None = None) -> WarmStartSizes:
    """The warm start's sizes under ``profile`` (a :class:`kit.profiles.Profile` or its name): smoke
    :data:`SMOKE_WARM_START`, a preflight :data:`PREFLIGHT_WARM_START` (its token bound kept when the caller
    gives ``steps`` / ``full_steps``: a preflight stays small; :func:`sft_warm_start` says which sizes fit).
    ``steps`` / ``full_steps``: the caller's (``-p warm_steps`` / ``-p warm_full_steps``), None the profile's.

    Raises:
        ValueError: a profile that is neither smoke nor a preflight (a paper run starts from its SFT checkpoint).
    """
    from kit.profiles import get_profile

    prof = get_profile(profile)
    if not prof.small:
        raise ValueError(f"profile {prof.name!r} has no warm start: a paper run starts from its SFT checkpoint "
                         "(base_model); the warm start is a smoke / preflight device")
    base = SMOKE_WARM_START if prof.smoke else PREFLIGHT_WARM_START
    return WarmStartSizes(base.steps if steps is None else int(steps),
                          base.full_steps if full_steps is None else int(full_steps), base.max_tokens)


@contextlib.contextmanager
def _torch_threads(n: int | None):
    """torch's intra-op threads set to ``n`` (None: unchanged) inside the block, restored after."""
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


class ProtocolDemonstrator:
    """:class:`kit.policy.demonstrator.DemonstratorPolicy` writing its final answer in a turn protocol's answer
    tag (``points_seeker``: ``<answer>``, POINTS-Seeker §3.2.2), so a warm start on its trajectories teaches the
    grammar the rollouts are scored with. Tool calls are the demonstrator's (a call the tool set lacks is not
    made: the demonstrator plans only with the enabled tools). ``direct``: no tool call, the verdict at once
    (a preflight: the tiny stand-in learns one short answer turn, about 22 tokens, inside the overlay's
    128-token RL turns (``rl_rollout.max_response_tokens``); a demonstrated call would lengthen it).
    Implements :class:`kit.types.Policy`.

    Raises:
        ValueError: an unknown ``protocol``.
    """

    name = "scripted-demonstrator"

    def __init__(self, protocol: str = "weagent_mmsearch", token_counter=None, *, direct: bool = False):
        from kit.harness.prompts import turn_protocol
        from kit.policy.demonstrator import DemonstratorPolicy

        self.tag = turn_protocol(protocol).answer_tag
        self.direct = direct
        self.inner = DemonstratorPolicy(token_counter=token_counter)
        self.token_counter = self.inner.token_counter

    async def generate(self, messages, tools, sampling, workspace=None):
        from kit.types import AssistantTurn, Usage

        text = self.inner.next_text(messages, [] if self.direct else tools)
        if self.tag != "response":
            text = text.replace("<response>", f"<{self.tag}>").replace("</response>", f"</{self.tag}>")
        return AssistantTurn(text=text, usage=Usage(completion_tokens=self.token_counter.count_text(text)))


def _batch_tokens(batch) -> int:
    """Tokens one step trains on: batch size x its longest example (the collator pads to it)."""
    return len(batch) * max(e.num_tokens for e in batch)


def warm_start_plan(model_path: str | Path, records: list[EpisodeRecord], *, steps: int, full_steps: int = 0,
                    tools: list[dict] | None = None, compact: bool = True, batch_size: int = 4,
                    max_tokens: int | None = None) -> dict[str, Any]:
    """What :func:`sft_warm_start` trains on, decided before a model is loaded: ``steps`` steps of
    ``batch_size`` encoded ``records`` (cycled; :func:`compact_record` first when ``compact``, rendered without a
    tool-schema block), then ``full_steps`` steps of one full trajectory each (rendered with ``tools``).

    Returns:
        ``{"plan": [(stage, [SFTExample, ...]) per step], "tokens": {"short", "full", "total"} (batch size x
        longest example, summed), "max_example_tokens", "encode": report, "processor", "pad_token_id"}``.
    Raises:
        ValueError: no record can be encoded, ``steps < 1`` or ``full_steps < 0``, or the plan trains on more
            than ``max_tokens`` tokens (the message gives the sizes that fit).
    """
    from kit.models.processor import load_image_only_processor
    from kit.train.sft_data import SFTEncoder

    if steps < 1 or full_steps < 0:
        raise ValueError("need steps >= 1 and full_steps >= 0")
    proc = load_image_only_processor(model_path)
    enc = SFTEncoder(proc, tools=[] if compact else tools)
    examples, report = enc.encode_many([compact_record(r) for r in records] if compact else records)
    if not examples:
        raise ValueError(f"no trainable demonstration: {report.as_dict()}")
    plan = [("short", [examples[((s - 1) * batch_size + k) % len(examples)] for k in range(batch_size)])
            for s in range(1, steps + 1)]
    if full_steps:
        full, full_report = SFTEncoder(proc, tools=tools).encode_many(records) if compact else (examples, report)
        if not full:
            raise ValueError(f"no full-context demonstration could be encoded: {full_report.as_dict()}")
        plan += [("full", [full[s % len(full)]]) for s in range(full_steps)]
    tokens = {st: sum(_batch_tokens(b) for s2, b in plan if s2 == st) for st in ("short", "full")}
    tokens["total"] = tokens["short"] + tokens["full"]
    if max_tokens is not None and tokens["total"] > max_tokens:
        short_step = tokens["short"] / steps
        full_step = tokens["full"] / full_steps if full_steps else 0.0
        fit = int((max_tokens - tokens["short"]) // full_step) if full_step and tokens["short"] < max_tokens else 0
        raise ValueError(f"the warm start would train on {tokens['total']:,} tokens ({steps} compacted steps "
                         f"~{short_step:,.0f} each, {full_steps} full-context steps ~{full_step:,.0f} each), over its "
                         f"bound of {max_tokens:,} (kit.rl.warmstart.PREFLIGHT_WARM_START_TOKENS under a preflight): "
                         + (f"at most {fit} full-context steps fit (-p warm_full_steps {fit})" if fit
                            else "fewer compacted steps (-p warm_steps)"))
    return {"plan": plan, "tokens": tokens, "max_example_tokens": max(e.num_tokens for _, b in plan for e in b),
            "encode": report.as_dict(), "processor": proc, "pad_token_id": enc.pad_token_id}


def sft_warm_start(model_path: str | Path, records: list[EpisodeRecord], out_dir: str | Path, *, steps: int,
                   full_steps: int = 0, save_at: tuple[int, ...] = (), lr: float = 5e-3, full_lr: float | None = None,
                   tools: list[dict] | None = None, seed: int = 0, compact: bool = True,
                   batch_size: int = 4, max_tokens: int | None = None,
                   threads: int | None = WARM_START_THREADS) -> dict[str, Any]:
    """Train ``steps`` steps of ``batch_size`` trajectories (AdamW, constant ``lr``) on ``records``
    (cycled; :func:`compact_record` first when ``compact``, rendered without a tool-schema block), then
    ``full_steps`` steps of one full trajectory each (rendered with ``tools``; ``full_lr``, default
    ``lr / 2``), saving the model at each global step in ``save_at`` and at the end (:func:`warm_start_plan`).

    ``max_tokens``: the most tokens the plan may train on (a preflight: :data:`PREFLIGHT_WARM_START_TOKENS`, from
    :func:`warm_start_sizes`; None: no bound), checked before the model is loaded. ``threads``: torch's intra-op
    threads while training (default :data:`WARM_START_THREADS`; restored after; None: unchanged).

    Returns:
        ``{"checkpoints": {step: path}, "losses": [per step], "stages": ["short"|"full" per step],
        "train_s": seconds, "encode": report, "tokens": {"short", "full", "total"}, "max_example_tokens",
        "threads": torch threads used}``.
    Raises:
        ValueError: no record can be encoded, ``steps < 1`` or ``full_steps < 0``, or more than ``max_tokens``.
    """
    torch = import_extra("train", "torch", feature=RL_FEATURE)
    from transformers import AutoModelForImageTextToText

    from kit.rl.logprobs import token_logprobs
    from kit.rl.objective import token_nll_loss
    from kit.train.sft_data import SFTCollator

    out = Path(out_dir)
    torch.manual_seed(seed)
    planned = warm_start_plan(model_path, records, steps=steps, full_steps=full_steps, tools=tools, compact=compact,
                              batch_size=batch_size, max_tokens=max_tokens)
    plan, proc = planned["plan"], planned["processor"]
    collate = SFTCollator(planned["pad_token_id"])
    with _torch_threads(threads):
        used_threads = torch.get_num_threads()
        model = AutoModelForImageTextToText.from_pretrained(str(model_path), dtype=torch.float32)
        for n, p in model.named_parameters():  # the vision tower stays as built (text-only smoke tasks)
            if "visual" in n:
                p.requires_grad_(False)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        model.train()
        losses, ckpts, t0 = [], {}, time.perf_counter()
        for s, (stage, batch) in enumerate(plan, start=1):
            if stage == "full" and s == steps + 1:
                for g in opt.param_groups:
                    g["lr"] = full_lr if full_lr is not None else lr / 2
            b = collate(batch)
            loss = token_nll_loss(token_logprobs(model, b).logp, b["labels"][:, 1:] != -100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if s in save_at or s == len(plan):
                path = out / f"step_{s:04d}"
                model.save_pretrained(str(path))
                proc.save_pretrained(str(path))
                ckpts[s] = path
        train_s = time.perf_counter() - t0
    return {"checkpoints": ckpts, "losses": losses, "stages": [st for st, _ in plan], "train_s": train_s,
            "encode": planned["encode"], "tokens": planned["tokens"], "max_example_tokens": planned["max_example_tokens"],
            "threads": used_threads}
