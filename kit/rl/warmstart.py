"""A short supervised warm start for smoke runs: plain token loss on demonstrator trajectories.

RL on a tiny *random* model is pointless (every reward is 0, every group is dropped). The smoke profile
therefore first imitates trajectories of :class:`kit.policy.demonstrator.DemonstratorPolicy` for a few
steps, saving checkpoints along the way (an early one as the RL student, the last one as the OPD
teacher), so that rollouts have mixed rewards and non-zero advantages. It is the same objective as
:func:`kit.train.sft.train_sft` (masked token NLL through :class:`~kit.train.sft_data.SFTEncoder`) in a
plain torch loop, because the smoke budget (minutes on 2 CPU cores) cannot afford TRL's start-up and
a second run for the intermediate checkpoint. Results are tiny-model smoke results, never model quality.

Speed device (smoke only): :func:`compact_record` shortens what the model *reads* (system prompt and
tool observations cut to a few hundred characters, no tool-schema block) while keeping every assistant
turn and harness intervention verbatim, so one step costs ~100x less than on the full 2-4k-token
transcript. The learned turn format transfers to the full harness context because a 2-layer model
keys its output on the local chat markup (``<|im_start|>assistant``) rather than on distant context.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kit.harness.episode import EpisodeRecord


def compact_record(record: EpisodeRecord, *, system_chars: int = 200, observation_chars: int = 300) -> EpisodeRecord:
    """``record`` with its system prompt and tool observations truncated (assistant turns, user turns
    and interventions unchanged; images kept)."""
    from kit.types import ContentPart

    msgs = []
    for m in record.messages:
        limit = system_chars if m.role == "system" else observation_chars if m.role == "tool" else None
        if limit is not None:
            parts = [ContentPart(type="text", text=p.text[:limit]) if p.type == "text" else p for p in m.content]
            m = m.model_copy(update={"content": parts})
        msgs.append(m)
    return record.model_copy(update={"messages": msgs})


def sft_warm_start(model_path: str | Path, records: list[EpisodeRecord], out_dir: str | Path, *, steps: int,
                   save_at: tuple[int, ...] = (), lr: float = 5e-3, tools: list[dict] | None = None,
                   seed: int = 0, compact: bool = True, batch_size: int = 4) -> dict[str, Any]:
    """Train ``steps`` steps of ``batch_size`` trajectories (AdamW, constant ``lr``) on ``records``
    (cycled; :func:`compact_record` first when ``compact``, rendered without a tool-schema block) and
    save the model at each step in ``save_at`` and at the end.

    Returns:
        ``{"checkpoints": {step: path}, "losses": [per step], "train_s": seconds, "encode": report}``.
    Raises:
        ValueError: no record can be encoded, or ``steps < 1``.
    """
    import torch
    from transformers import AutoModelForImageTextToText

    from kit.models.processor import load_image_only_processor
    from kit.rl.logprobs import token_logprobs
    from kit.rl.objective import token_nll_loss
    from kit.train.sft_data import SFTCollator, SFTEncoder

    if steps < 1:
        raise ValueError("steps must be >= 1")
    out = Path(out_dir)
    torch.manual_seed(seed)
    proc = load_image_only_processor(model_path)
    enc = SFTEncoder(proc, tools=[] if compact else tools)
    examples, report = enc.encode_many([compact_record(r) for r in records] if compact else records)
    if not examples:
        raise ValueError(f"no trainable demonstration: {report.as_dict()}")
    collate = SFTCollator(enc.pad_token_id)
    model = AutoModelForImageTextToText.from_pretrained(str(model_path), dtype=torch.float32)
    for n, p in model.named_parameters():  # the vision tower stays as built (text-only smoke tasks)
        if "visual" in n:
            p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses, ckpts, t0 = [], {}, time.perf_counter()
    for s in range(1, steps + 1):
        b = collate([examples[((s - 1) * batch_size + k) % len(examples)] for k in range(batch_size)])
        loss = token_nll_loss(token_logprobs(model, b).logp, b["labels"][:, 1:] != -100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if s in save_at or s == steps:
            path = out / f"step_{s:04d}"
            model.save_pretrained(str(path))
            proc.save_pretrained(str(path))
            ckpts[s] = path
    return {"checkpoints": ckpts, "losses": losses, "train_s": time.perf_counter() - t0, "encode": report.as_dict()}
