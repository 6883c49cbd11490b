"""Agentic SFT trainers (WeAgent-MMSearch §6.1; POINTS-Seeker §3.2.3).

Two back ends share the data path of :mod:`kit.train.sft_data` (same encoder, collator and masks):

* ``"trl"``: TRL ``SFTTrainer`` on CPU, one GPU, or many through ``accelerate launch`` with the
  FSDP / DeepSpeed configs in ``configs/accelerate/``;
* ``"unsloth"``: Unsloth ``FastVisionModel`` (LoRA or full fine-tuning) on a CUDA GPU, imported only
  when chosen (Unsloth does not run on CPU and pulls in torchvision).

``backend="auto"`` picks Unsloth when CUDA and Unsloth are both present, else TRL.

Paper settings (§6.1): learning rate 1e-5 for the language model and 1e-6 for the vision tower,
global batch 32 trajectories; :class:`SFTTrainConfig` defaults follow them. The optimizer gets one
parameter group per (tower, weight-decay) pair so the two rates hold under FSDP/DeepSpeed too.
Logged metrics: ``loss``, ``tokens_per_s`` (non-padding tokens per second of training),
``masked_token_share`` (trained / non-padding tokens).
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kit.train.sft_data import SFTCollator, SFTExample

Backend = Literal["auto", "trl", "unsloth"]
# transformers.SchedulerType values, listed here so building a config does not import transformers
# (tests/test_config_validation.py checks the list against the installed transformers source)
LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                 "inverse_sqrt", "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr",
                 "warmup_stable_decay", "greedy")
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class BackendUnavailable(RuntimeError):
    """The requested training back end cannot run here (no CUDA, package missing)."""


class SFTTrainConfig(BaseModel):
    """Training settings (paper values by default, WeAgent §6.1). Named apart from ``trl.SFTConfig``,
    the TRL arguments :func:`make_trainer` builds from it.

    ``per_device_batch_size * grad_accum * world_size`` is the global batch in trajectories (32 in
    the paper). ``lora_rank == 0`` is full fine-tuning. ``max_steps > 0`` overrides ``epochs``.
    A variant: ``SFTTrainConfig.model_validate({**cfg.model_dump(), "epochs": 2.0})`` (checked;
    ``model_copy(update=...)`` skips validation).

    Raises:
        ValueError: an unknown field or ``lr_scheduler``; a batch size, ``grad_accum``, ``save_steps`` or
            ``logging_steps`` below 1; a non-finite or negative rate (``lr_language`` must be > 0);
            ``epochs`` not finite and > 0; ``warmup_ratio`` outside [0, 1]; ``lora_dropout`` outside
            [0, 1); a negative ``lora_rank``.
    """

    model_config = ConfigDict(extra="forbid")

    lr_language: float = 1e-5
    lr_vision: float = 1e-6
    epochs: float = 1.0
    max_steps: int = -1
    per_device_batch_size: int = 1
    grad_accum: int = 32
    weight_decay: float = 0.0
    warmup_ratio: float = 0.03
    lr_scheduler: str = "cosine"
    lora_rank: int = 0
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    gradient_checkpointing: bool = True
    bf16: bool | None = None  # None: bf16 when CUDA supports it
    logging_steps: int = 1
    save_steps: int = 500
    save_total_limit: int = 2
    seed: int = 0
    report_to: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> SFTTrainConfig:
        # explicit finiteness checks: NaN passes every "< 0" comparison
        def finite(k: str) -> float:
            v = getattr(self, k)
            if not math.isfinite(v):
                raise ValueError(f"{k} must be finite, got {v!r}")
            return v

        for k in ("per_device_batch_size", "grad_accum", "save_steps", "logging_steps"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1")
        if finite("lr_language") <= 0:
            raise ValueError("lr_language must be > 0")
        for k in ("lr_vision", "weight_decay"):
            if finite(k) < 0:
                raise ValueError(f"{k} must be >= 0")
        if finite("epochs") <= 0:
            raise ValueError("epochs must be > 0 (max_steps > 0 overrides it)")
        if not 0 <= finite("warmup_ratio") <= 1:
            raise ValueError(f"warmup_ratio must be in [0, 1], got {self.warmup_ratio!r}")
        if not 0 <= finite("lora_dropout") < 1:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if self.lora_rank < 0:
            raise ValueError("lora_rank must be >= 0 (0: full fine-tuning)")
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise ValueError(f"unknown lr_scheduler {self.lr_scheduler!r}; expected one of {LR_SCHEDULERS}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict (``sft_config.json``)."""
        return self.model_dump()


def is_vision_param(name: str) -> bool:
    """True for parameters of the vision tower (and its merger): ``visual`` in the qualified name."""
    return ".visual." in f".{name}" or name.startswith("visual.")


def param_groups(model, lr_language: float, lr_vision: float, weight_decay: float) -> list[dict[str, Any]]:
    """Optimizer parameter groups: language model vs vision tower, with and without weight decay.

    Biases and norm weights (1-D tensors) get no decay. Frozen parameters are left out; empty groups
    are dropped. Raises ``ValueError`` when nothing is trainable.
    """
    groups: dict[tuple[bool, bool], list] = {}
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        groups.setdefault((is_vision_param(n), p.ndim >= 2), []).append(p)
    if not groups:
        raise ValueError("the model has no trainable parameters")
    return [{"params": ps, "lr": lr_vision if vis else lr_language, "weight_decay": weight_decay if decay else 0.0,
             "group_name": ("vision" if vis else "language") + ("" if decay else "_no_decay")}
            for (vis, decay), ps in sorted(groups.items())]


def resolve_backend(backend: Backend) -> str:
    """``"trl"`` or ``"unsloth"`` for ``backend``.

    Raises:
        BackendUnavailable: ``"unsloth"`` without CUDA or without the package; ``"trl"`` without trl.
        ValueError: unknown name.
    """
    import torch

    has_cuda = torch.cuda.is_available()
    has_unsloth = importlib.util.find_spec("unsloth") is not None
    if backend == "auto":
        return "unsloth" if has_cuda and has_unsloth else "trl"
    if backend == "unsloth":
        if not has_cuda:
            raise BackendUnavailable("Unsloth needs a CUDA GPU (FastVisionModel raises NotImplementedError on CPU); "
                                     "use backend='trl'")
        if not has_unsloth:
            raise BackendUnavailable("unsloth is not installed (pip install unsloth in a GPU environment)")
        return "unsloth"
    if backend == "trl":
        if importlib.util.find_spec("trl") is None:
            raise BackendUnavailable("trl is not installed (pip install -e '.[train]')")
        return "trl"
    raise ValueError(f"unknown backend {backend!r}; expected auto, trl or unsloth")


class IndexedCollator:
    """Collate rows ``{"example_index": i}`` of a ``datasets.Dataset`` by looking up encoded examples.

    TRL's trainer only accepts ``datasets`` datasets; storing pixel tensors in Arrow would copy and
    convert them every step, so the dataset holds indices and the examples stay in memory as tensors.
    """

    def __init__(self, examples: list[SFTExample], pad_token_id: int):
        if not examples:
            raise ValueError("no training examples (every record was skipped?)")
        self.examples = list(examples)
        self.collate = SFTCollator(pad_token_id)

    def dataset(self):
        from datasets import Dataset

        return Dataset.from_dict({"example_index": list(range(len(self.examples)))})

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return self.collate([self.examples[int(r["example_index"])] for r in rows])


def load_model(model_path: str | Path, backend: str, cfg: SFTTrainConfig, dtype=None):
    """Load the model for ``backend`` (``"trl"``: transformers + optional peft LoRA; ``"unsloth"``:
    ``FastVisionModel`` with LoRA or full fine-tuning). Returns the model ready for training."""
    import torch

    if backend == "unsloth":
        from unsloth import FastVisionModel  # lazy: GPU only, pulls torchvision

        model, _ = FastVisionModel.from_pretrained(str(model_path), load_in_4bit=False,
                                                   full_finetuning=cfg.lora_rank == 0,
                                                   use_gradient_checkpointing="unsloth" if cfg.gradient_checkpointing else False)
        if cfg.lora_rank > 0:
            model = FastVisionModel.get_peft_model(model, finetune_vision_layers=cfg.lr_vision > 0,
                                                   finetune_language_layers=True, r=cfg.lora_rank,
                                                   lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                                   random_state=cfg.seed)
        FastVisionModel.for_training(model)
        return model
    from transformers import AutoModelForImageTextToText

    if dtype is None:
        dtype = torch.bfloat16 if (torch.cuda.is_available() and torch.cuda.is_bf16_supported()) else torch.float32
    model = AutoModelForImageTextToText.from_pretrained(str(model_path), dtype=dtype)
    if cfg.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        # LoRA on the language model's projections; the vision tower trains only in full fine-tuning.
        model = get_peft_model(model, LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                                 target_modules=r".*language_model.*\.(" + "|".join(LORA_TARGETS) + ")",
                                                 task_type="CAUSAL_LM"))
    return model


def _trainer_class():
    """SFTTrainer with paper parameter groups and token metrics (built lazily: trl imports in ~10 s)."""
    from trl import SFTTrainer

    class AgenticSFTTrainer(SFTTrainer):
        def __init__(self, *a, lr_language: float, lr_vision: float, **kw):
            self._lr_language, self._lr_vision = lr_language, lr_vision
            self._tok = self._loss_tok = 0
            self._t0 = None
            super().__init__(*a, **kw)

        def create_optimizer(self, model=None):
            if self.optimizer is None:
                import torch

                groups = param_groups(model or self.model, self._lr_language, self._lr_vision, self.args.weight_decay)
                for g in groups:
                    g.pop("group_name")
                self.optimizer = torch.optim.AdamW(groups, betas=(self.args.adam_beta1, self.args.adam_beta2),
                                                   eps=self.args.adam_epsilon)
            return self.optimizer

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training:
                if self._t0 is None:
                    self._t0 = time.perf_counter()
                self._tok += int(inputs["attention_mask"].sum())
                self._loss_tok += int((inputs["labels"] != -100).sum())
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)

        def log(self, logs, start_time=None):
            if "loss" in logs and self._t0 is not None and self._tok:
                dt = max(time.perf_counter() - self._t0, 1e-9)
                logs["tokens_per_s"] = round(self._tok / dt, 2)
                logs["masked_token_share"] = round(self._loss_tok / self._tok, 4)
                self._tok = self._loss_tok = 0
                self._t0 = time.perf_counter()
            super().log(logs, start_time)

    return AgenticSFTTrainer


def make_trainer(model, examples: list[SFTExample], pad_token_id: int, out_dir: str | Path, cfg: SFTTrainConfig,
                 eval_examples: list[SFTExample] | None = None, processing_class=None):
    """Build the TRL trainer (also used on top of an Unsloth model) with the kit collator.

    ``out_dir`` receives checkpoints (every ``cfg.save_steps``) and the trainer state.
    """
    import torch
    from trl import SFTConfig as TRLConfig

    bf16 = cfg.bf16 if cfg.bf16 is not None else bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    args = TRLConfig(
        output_dir=str(out_dir), num_train_epochs=cfg.epochs, max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.per_device_batch_size, gradient_accumulation_steps=cfg.grad_accum,
        learning_rate=cfg.lr_language, weight_decay=cfg.weight_decay, warmup_steps=cfg.warmup_ratio,
        lr_scheduler_type=cfg.lr_scheduler, logging_steps=cfg.logging_steps, save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit, seed=cfg.seed, bf16=bf16, report_to=cfg.report_to,
        activation_checkpointing=cfg.gradient_checkpointing, remove_unused_columns=False,
        dataset_kwargs={"skip_prepare_dataset": True}, max_length=None, use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0, per_device_eval_batch_size=1,
        # not sensible for a masked multimodal batch: TRL's entropy/accuracy would decode every token
    )
    train = IndexedCollator(examples, pad_token_id)
    all_examples = list(examples) + list(eval_examples or [])
    collator = IndexedCollator(all_examples, pad_token_id)  # eval rows index after the training rows
    eval_ds = None
    if eval_examples:
        from datasets import Dataset

        eval_ds = Dataset.from_dict({"example_index": list(range(len(examples), len(all_examples)))})
    return _trainer_class()(model=model, args=args, train_dataset=train.dataset(), eval_dataset=eval_ds,
                            data_collator=collator, processing_class=processing_class,
                            lr_language=cfg.lr_language, lr_vision=cfg.lr_vision)


@dataclass
class TrainResult:
    """What :func:`train_sft` returns: back end, log history, final output folder, wall time."""

    backend: str
    log_history: list[dict[str, Any]]
    output_dir: Path
    train_s: float
    model: Any = None

    def losses(self) -> list[float]:
        return [h["loss"] for h in self.log_history if "loss" in h]


def train_sft(model_path: str | Path, examples: list[SFTExample], out_dir: str | Path, cfg: SFTTrainConfig | None = None, *,
              backend: Backend = "auto", pad_token_id: int | None = None, resume: bool | str = False,
              eval_examples: list[SFTExample] | None = None, save_final: bool = True) -> TrainResult:
    """Train on encoded examples and save the result (merged weights for LoRA) in ``out_dir/final``.

    Args:
        model_path: checkpoint folder (tiny or real Qwen-VL).
        examples: from :meth:`kit.train.sft_data.SFTEncoder.encode_many` with the same model's processor.
        resume: True resumes from the last checkpoint in ``out_dir``; a path resumes from it.

    Raises:
        BackendUnavailable, ValueError (no examples / no trainable parameters).
    """
    from kit.models.processor import load_image_only_processor

    cfg = cfg or SFTTrainConfig()
    name = resolve_backend(backend)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    processor = load_image_only_processor(model_path)
    pad = pad_token_id if pad_token_id is not None else int(processor.tokenizer.pad_token_id)
    model = load_model(model_path, name, cfg)
    trainer = make_trainer(model, examples, pad, out, cfg, eval_examples)
    t0 = time.perf_counter()
    if resume is True and not any(out.glob("checkpoint-*")):
        resume = False
    trainer.train(resume_from_checkpoint=resume or None)
    train_s = time.perf_counter() - t0
    model = trainer.model
    if save_final:
        final = out / "final"
        to_save = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
        to_save.save_pretrained(str(final))
        processor.save_pretrained(str(final))
        model = to_save
    (out / "sft_config.json").write_text(json.dumps({"backend": name, **cfg.to_dict()}, indent=1))
    return TrainResult(backend=name, log_history=list(trainer.state.log_history), output_dir=out, train_s=train_s,
                       model=model)
