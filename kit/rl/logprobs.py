"""Token log-probabilities and entropy on model-generated tokens (WeAgent §6.2 ``a_{gi,t}``; Long-MDR).

The token view of a trajectory is :class:`kit.train.sft_data.SFTEncoder`'s: the record is re-rendered
through the model's chat template and processor, and the mask is 1 exactly on assistant-generated
tokens (thinking, tool calls, response, end-of-turn) and 0 on prompts, tool observations, images and
harness interventions. Re-tokenization instead of token-in/token-out: the harness stores messages, not
token ids, and every policy back end (in-process, vLLM, any OpenAI endpoint) goes through it. The
difference is that BPE may segment a decoded string differently from the sampled ids (e.g. a merge across
what were two sampled tokens); then ``log π_old`` of the re-tokenized sequence is not the sampler's
probability. Both ``log π_old`` and ``log π_θ`` are computed here on the *same* re-tokenized sequence, so
the importance ratio stays exact for the update; only the sampling distribution is approximated (verl
and other engines likewise recompute old log-probs with the training forward pass).
A second, smaller difference: the harness renders each turn's own context (the final synthesis turn is
generated without the tool-schema block, and image re-feed / V-Fold may show older turns differently),
while the training view conditions every turn on the final transcript rendered once with the enabled
tools. The policy is trained on the trajectory as recorded, which is what the paper's masked objective
describes (WeAgent §6.1–6.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kit.extras import RL_FEATURE, import_extra

MODEL_INPUTS = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")


@dataclass
class TokenStats:
    """Per-token outputs on the shifted sequence (position ``t`` predicts token ``t+1``).

    Shapes ``[B, L-1]``: ``logp`` (log-prob of the taken token; grad when computed with grad),
    ``mask`` (bool, model-generated and not padding), ``entropy`` (nats, no grad; None unless asked).
    """

    logp: Any
    mask: Any
    entropy: Any = None


def model_inputs(batch: dict[str, Any], device=None, dtype=None) -> dict[str, Any]:
    """The model's forward arguments from an :class:`~kit.train.sft_data.SFTCollator` batch, moved to
    ``device`` (pixel values cast to ``dtype``)."""
    out = {k: batch[k] for k in MODEL_INPUTS if k in batch and batch[k] is not None}
    if device is not None:
        out = {k: v.to(device) for k, v in out.items()}
    if dtype is not None and "pixel_values" in out:
        out["pixel_values"] = out["pixel_values"].to(dtype)
    return out


def token_logprobs(model, batch: dict[str, Any], *, temperature: float = 1.0, with_entropy: bool = False) -> TokenStats:
    """Log-probs of the taken tokens under ``model`` at sampling temperature ``temperature``.

    Args:
        model: a transformers (or peft-wrapped) Qwen-VL model; runs with grad unless the caller wraps
            the call in ``torch.no_grad()``.
        batch: :class:`~kit.train.sft_data.SFTCollator` output (``labels`` is -100 off the loss mask).
        temperature: logits are divided by it (the distribution the rollout sampled from).
    Returns:
        :class:`TokenStats`. Only masked positions are normalized (log-softmax over the vocabulary), so
        memory is ``O(#generated tokens × vocab)`` beyond the logits themselves.
    Raises:
        ValueError: ``temperature <= 0`` or a batch without ``labels``.
    """
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    lsm, labels, mask = masked_log_softmax(model, batch, temperature=temperature)
    dev = lsm.device
    taken = lsm.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    logp = torch.zeros(mask.shape, dtype=taken.dtype, device=dev).masked_scatter(mask, taken)
    ent = None
    if with_entropy:
        with torch.no_grad():
            e = -(lsm.exp() * lsm).sum(-1)
            ent = torch.zeros(mask.shape, dtype=e.dtype, device=dev).masked_scatter(mask, e)
    return TokenStats(logp=logp, mask=mask, entropy=ent)


def masked_log_softmax(model, batch: dict[str, Any], *, temperature: float = 1.0):
    """Forward ``model`` and return ``(log_probs [N, V], taken_ids [N], mask [B, L-1])`` for the ``N``
    model-generated positions (float32 log-softmax of ``logits / temperature``).

    Raises:
        ValueError: ``temperature <= 0`` or a batch without ``labels``.
    """
    torch = import_extra("train", "torch", feature=RL_FEATURE)

    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if "labels" not in batch:
        raise ValueError("batch has no labels (use kit.train.sft_data.SFTCollator)")
    p = next(model.parameters())
    labels = batch["labels"][:, 1:].to(p.device)
    mask = labels != -100
    inputs = model_inputs(batch, p.device, p.dtype)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft: LoRA layers stay active
    body, head = getattr(base, "model", None), getattr(base, "lm_head", None)
    if body is not None and head is not None:
        # Project only the generated positions through the LM head: O(N_gen x V) instead of O(L x V).
        hidden = body(**inputs, use_cache=False).last_hidden_state[:, :-1]
        logits = head(hidden[mask])
    else:
        logits = model(**inputs, use_cache=False).logits[:, :-1][mask]
    return torch.log_softmax(logits.float() / temperature, dim=-1), labels[mask], mask


def masked_mean(x, mask) -> float:
    """Mean of ``x`` over ``mask`` (NaN when the mask is empty); off the mask NaN or ±inf is selected out."""
    mb = mask.bool()
    n = float(mb.sum())
    return float(x[mb].sum() / n) if n else float("nan")
