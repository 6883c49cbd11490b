"""Sequence packing for agentic SFT (POINTS-Seeker §4.1 "Implementation details").

POINTS-Seeker: "Batch samples are flattened and concatenated into sequences up to 32k tokens." The
kit packs each micro-batch of encoded examples into rows of at most ``max_tokens`` tokens and keeps
every sample independent inside a row:

* text positions restart at 0 at each sample, and no ``attention_mask`` is passed, so transformers
  builds a block-diagonal causal mask from the positions (``masking_utils.find_packed_sequence_indices``;
  FlashAttention uses the same positions as ``cu_seqlens``): no token attends across a boundary;
* Qwen-VL's 3-D M-RoPE positions are computed per sample with the model's own ``get_rope_index``
  and concatenated; the model receives them as ``position_ids`` of shape ``[4, R, L]`` (text row first,
  the layout transformers' Qwen-VL models read as "packed");
* the forward must run with ``use_cache=False`` (TRL's trainer sets it): with a cache, transformers
  skips the packed-mask detection;
* each sample's loss mask is kept as is, and the first label of each sample is ``-100`` (no target
  crosses a boundary); ``num_samples`` carries the number of original samples, the ``N`` of the
  sample-sum loss (:mod:`kit.train.sft`, POINTS-Seeker Eq. SFT NLL).

Why not TRL's ``packing`` / ``padding_free``: TRL 1.16 refuses both for vision datasets ("Packing is
not supported for vision datasets"), its packing runs in dataset preparation, which the kit skips
(examples are pre-encoded tensors, ``skip_prepare_dataset``), and its padding-free collator builds
1-D positions, not Qwen-VL's M-RoPE.

Whether the paper's in-house framework resets attention at sample boundaries is not stated; the
kit does (kit choice: the objective of Eq. SFT NLL conditions each sample on its own prefix only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kit.train.sft_data import IGNORE_INDEX, SFTExample

# POINTS-Seeker §4.1: "sequences up to 32k tokens" (read as 32 * 1024; the paper writes "32k")
PACKED_MAX_TOKENS = 32 * 1024


def pack_bins(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Group example indices, in order, into bins whose total length is at most ``max_tokens``.

    Order is kept (images are concatenated in example order), so this is next-fit, not best-fit.

    Raises:
        ValueError: ``max_tokens`` < 1, or an example longer than ``max_tokens`` (it cannot be packed
            without cutting it; the encoder's trajectory filter should be at most ``max_tokens``).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    bins: list[list[int]] = []
    used = 0
    for i, n in enumerate(lengths):
        if n > max_tokens:
            raise ValueError(f"example {i} has {n} tokens, over the packing limit of {max_tokens}")
        if not bins or used + n > max_tokens:
            bins.append([])
            used = 0
        bins[-1].append(i)
        used += n
    return bins


def find_rope_index_fn(model) -> Callable | None:
    """The model's M-RoPE position function (``get_rope_index`` of the Qwen-VL inner model), or None."""
    for mod in model.modules():
        fn = getattr(mod, "get_rope_index", None)
        if callable(fn):
            return fn
    return None


class PackedSFTCollator:
    """Collate encoded examples into packed rows (see module doc).

    Args:
        pad_token_id: fills the tail of rows shorter than the longest row (labels ``-100``; the tail
            gets its own positions from 0, so it forms a separate block that no sample attends to).
        max_tokens: row length limit (POINTS-Seeker: 32k).
        rope_index_fn: the model's ``get_rope_index`` (:func:`find_rope_index_fn`); None gives 2-D
            text positions only (text-only models).

    Returns (per call): ``input_ids``, ``labels``, ``mm_token_type_ids``: ``[R, L]``; ``position_ids``:
    ``[4, R, L]`` (with ``rope_index_fn``) or ``[R, L]``; ``num_samples``: scalar long tensor;
    ``num_tokens``: non-padding tokens; ``pixel_values`` / ``image_grid_thw`` when any example has images.

    Raises:
        ValueError: empty batch; an example over ``max_tokens``.
    """

    def __init__(self, pad_token_id: int, max_tokens: int = PACKED_MAX_TOKENS, rope_index_fn: Callable | None = None):
        self.pad_token_id = int(pad_token_id)
        self.max_tokens = int(max_tokens)
        self.rope_index_fn = rope_index_fn

    def _positions(self, e: SFTExample):
        import torch

        n = e.num_tokens
        text = torch.arange(n, dtype=torch.long)
        if self.rope_index_fn is None:
            return text[None]
        if e.image_grid_thw is None:
            return torch.cat([text[None], text[None].expand(3, -1)], dim=0)  # text-only: t = h = w
        pos, _ = self.rope_index_fn(e.input_ids[None], mm_token_type_ids=e.mm_token_type_ids[None],
                                    image_grid_thw=e.image_grid_thw,
                                    attention_mask=torch.ones(1, n, dtype=torch.long))
        return torch.cat([text[None], pos[:, 0, :].to(torch.long)], dim=0)

    def __call__(self, examples: list[SFTExample]) -> dict[str, Any]:
        import torch

        if not examples:
            raise ValueError("empty batch")
        bins = pack_bins([e.num_tokens for e in examples], self.max_tokens)
        rows = []
        for b in bins:
            ids, labels, mm, pos = [], [], [], []
            for i in b:
                e = examples[i]
                lab = torch.where(torch.as_tensor(e.loss_mask, dtype=torch.bool), e.input_ids, IGNORE_INDEX)
                lab[0] = IGNORE_INDEX  # no target across a sample boundary
                ids.append(e.input_ids)
                labels.append(lab)
                mm.append(e.mm_token_type_ids)
                pos.append(self._positions(e))
            rows.append((torch.cat(ids), torch.cat(labels), torch.cat(mm), torch.cat(pos, dim=1)))
        L = max(r[0].shape[0] for r in rows)
        R = len(rows)
        n_pos = rows[0][3].shape[0]
        out_ids = torch.full((R, L), self.pad_token_id, dtype=torch.long)
        out_lab = torch.full((R, L), IGNORE_INDEX, dtype=torch.long)
        out_mm = torch.zeros((R, L), dtype=torch.long)
        out_pos = torch.zeros((n_pos, R, L), dtype=torch.long)
        for r, (ids, lab, mm, pos) in enumerate(rows):
            n = ids.shape[0]
            out_ids[r, :n], out_lab[r, :n], out_mm[r, :n], out_pos[:, r, :n] = ids, lab, mm, pos
            out_pos[:, r, n:] = torch.arange(L - n)  # the padding tail is its own block
        batch: dict[str, Any] = {"input_ids": out_ids, "labels": out_lab, "mm_token_type_ids": out_mm,
                                 "position_ids": out_pos if self.rope_index_fn is not None else out_pos[0],
                                 "num_samples": torch.tensor(len(examples)),
                                 "num_tokens": torch.tensor(sum(e.num_tokens for e in examples))}
        pv = [e.pixel_values for e in examples if e.pixel_values is not None]
        if pv:  # bins keep example order, so images stay in placeholder order
            batch["pixel_values"] = torch.cat(pv, dim=0)
            batch["image_grid_thw"] = torch.cat([e.image_grid_thw for e in examples if e.image_grid_thw is not None])
        return batch
