"""Short-to-long context curriculum for agentic SFT: compacted transcripts first, full ones after.

An agent transcript is mostly what the model *reads* (system prompt with tool schemas, search results,
page extracts: 8-12K tokens per trajectory in the smoke runs) and little of what it *writes* (a few
hundred tokens). :func:`compact_record` keeps every assistant turn, user turn, harness intervention and
image, and truncates only the system prompt and the tool observations, so a training step on it costs
~9x less (0.22 s vs 2.1 s per smoke step on 2 cores). Stage 1 teaches the turn format on compacted
transcripts; stage 2 continues on the full
records so the model learns to keep that format at the real context length.

Measured on the tiny smoke model (``tiny-qwen2_vl``, local vocabulary, 0.35 M parameters, 36 demonstrator
trajectories, 4 held out, greedy generation inside the full ~11K-token harness context;
``benchmarks/bench_sft_curriculum.py``):

* full records only, 72 steps: held-out tool-call validity 0, format compliance 0;
* compacted records only, 576 steps: 1.0 / 1.0 in compacted held-out contexts, but 0 / 0.08 in full ones
  (the format learned at ~2K tokens does not survive the longer context by itself);
* 576 compacted + 72 full steps: validity 1.0, format compliance 1.0 in full contexts.

This is a training-cost device for small budgets (CPU smoke runs); the paper (WeAgent §6.1) trains on
full trajectories only, which is what ``short_context_epochs = 0`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.harness.episode import EpisodeRecord


def compact_record(record: EpisodeRecord, *, system_chars: int = 200, observation_chars: int = 300) -> EpisodeRecord:
    """``record`` with its system prompt cut to ``system_chars`` characters and every tool observation's
    text to ``observation_chars`` (assistant and user turns, interventions and all images unchanged).

    Raises:
        ValueError: a negative limit.
    """
    from kit.types import ContentPart

    if system_chars < 0 or observation_chars < 0:
        raise ValueError("character limits must be >= 0")
    msgs = []
    for m in record.messages:
        limit = system_chars if m.role == "system" else observation_chars if m.role == "tool" else None
        if limit is not None:
            parts = [ContentPart(type="text", text=p.text[:limit]) if p.type == "text" else p for p in m.content]
            m = m.model_copy(update={"content": parts})
        msgs.append(m)
    return record.model_copy(update={"messages": msgs})


def train_sft_curriculum(model_path: str | Path, records: list[EpisodeRecord], examples: list, out_dir: str | Path,
                         cfg, *, short_context_epochs: float, short_cfg=None, backend: str = "auto",
                         system_chars: int = 200, observation_chars: int = 300, resume: bool = True) -> dict[str, Any]:
    """Two-stage SFT: ``short_context_epochs`` over compacted ``records`` (no tool-schema block), then
    ``cfg`` over the full encoded ``examples``, each through :func:`kit.train.sft.train_sft`.

    Args:
        records: the training records (the same ones ``examples`` were encoded from).
        examples: full-context :class:`~kit.train.sft_data.SFTExample` list for stage 2.
        cfg: :class:`~kit.train.sft.SFTTrainConfig` of stage 2; ``short_cfg`` (default: ``cfg`` with the
            stage-1 epochs and no step cap) of stage 1.
        short_context_epochs: 0 skips stage 1 (plain SFT, the paper's recipe).

    Returns:
        ``{"short": TrainResult | None, "full": TrainResult, "log": rows}``; ``log`` is both stages'
        training-loss rows with ``stage`` ("short" | "full") and a global ``step``. Stage outputs go to
        ``out_dir/short`` and ``out_dir/full`` (each with ``final/``); a finished stage 1 is reused.

    Raises:
        ValueError: no records or no examples, or no compacted record can be encoded (stage 1).
    """
    from kit.tracking import Tracker

    if not records or not examples:
        raise ValueError(f"nothing to train on: {len(records)} records, {len(examples)} full-context examples")
    out = Path(out_dir)
    # one tracker for both stages, at the global steps of the returned rows (out_dir/tracking)
    with Tracker(cfg.report_to, out / "tracking", run_name=out.name, config={"sft": cfg.to_dict()},
                 stages=("short", "full")) as tracker:  # stage_index 0 short, 1 full
        short, full = _stages(model_path, records, examples, out, cfg, short_context_epochs, short_cfg, backend,
                              system_chars, observation_chars, resume, tracker)
    rows, offset = [], 0
    for name, res in (("short", short), ("full", full)):
        if res is None:
            continue
        hist = [h for h in res.log_history if "loss" in h]
        rows += [{**h, "stage": name, "stage_step": h["step"], "step": h["step"] + offset} for h in hist]
        offset += _last_step(res)
    return {"short": short, "full": full, "log": rows}


def _last_step(res) -> int:
    return max((h["step"] for h in res.log_history if "step" in h), default=0)


def _stages(model_path, records, examples, out: Path, cfg, short_context_epochs, short_cfg, backend, system_chars,
            observation_chars, resume, tracker):
    from kit.models.processor import load_image_only_processor
    from kit.train.sft import train_sft
    from kit.train.sft_data import SFTEncoder

    short = None
    start = Path(model_path)
    if short_context_epochs > 0:
        enc = SFTEncoder(load_image_only_processor(model_path), tools=[])
        short_ex, report = enc.encode_many([compact_record(r, system_chars=system_chars,
                                                           observation_chars=observation_chars) for r in records])
        if not short_ex:
            raise ValueError(f"no compacted record could be encoded: {report.as_dict()}")
        # model_validate, not model_copy(update=): the epochs come from the caller and must be checked
        scfg = short_cfg or type(cfg).model_validate({**cfg.model_dump(), "epochs": short_context_epochs, "max_steps": -1})
        short = train_sft(model_path, short_ex, out / "short", scfg, backend=backend, resume=resume,
                          tracker=tracker, stage="short")
        start = short.output_dir / "final"
    full = train_sft(start, examples, out / "full", cfg, backend=backend, resume=resume, tracker=tracker,
                     step_offset=_last_step(short) if short is not None else 0, stage="full")
    return short, full
