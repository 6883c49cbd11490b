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
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kit.harness.episode import EpisodeRecord
from kit.train.curriculum import compact_record

__all__ = ["ProtocolDemonstrator", "compact_record", "sft_warm_start"]


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


def sft_warm_start(model_path: str | Path, records: list[EpisodeRecord], out_dir: str | Path, *, steps: int,
                   full_steps: int = 0, save_at: tuple[int, ...] = (), lr: float = 5e-3, full_lr: float | None = None,
                   tools: list[dict] | None = None, seed: int = 0, compact: bool = True,
                   batch_size: int = 4) -> dict[str, Any]:
    """Train ``steps`` steps of ``batch_size`` trajectories (AdamW, constant ``lr``) on ``records``
    (cycled; :func:`compact_record` first when ``compact``, rendered without a tool-schema block), then
    ``full_steps`` steps of one full trajectory each (rendered with ``tools``; ``full_lr``, default
    ``lr / 2``), saving the model at each global step in ``save_at`` and at the end.

    Returns:
        ``{"checkpoints": {step: path}, "losses": [per step], "stages": ["short"|"full" per step],
        "train_s": seconds, "encode": report}``.
    Raises:
        ValueError: no record can be encoded, ``steps < 1`` or ``full_steps < 0``.
    """
    import torch
    from transformers import AutoModelForImageTextToText

    from kit.models.processor import load_image_only_processor
    from kit.rl.logprobs import token_logprobs
    from kit.rl.objective import token_nll_loss
    from kit.train.sft_data import SFTCollator, SFTEncoder

    if steps < 1 or full_steps < 0:
        raise ValueError("need steps >= 1 and full_steps >= 0")
    out = Path(out_dir)
    torch.manual_seed(seed)
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
    collate = SFTCollator(enc.pad_token_id)
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
    return {"checkpoints": ckpts, "losses": losses, "stages": [st for st, _ in plan],
            "train_s": time.perf_counter() - t0, "encode": report.as_dict()}
