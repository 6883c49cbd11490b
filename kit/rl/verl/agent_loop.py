"""The ``kit_harness`` verl agent loop: one verl sample = one kit harness episode (WeAgent §3, §6.2).

The harness runs exactly as in evaluation and single-node RL (same tools, recovery rules, budgets);
its policy, :class:`VerlServerPolicy`, renders each turn's context with the model's chat template and
processor and calls verl's rollout servers token-in/token-out (``server_manager.generate``). When the
episode ends the record is scored (Eq. 5, rule judge by default), checked for eligibility (Eq. 3), and
re-tokenized with :class:`kit.train.sft_data.SFTEncoder` for training: ``prompt_ids`` = everything
before the first assistant turn, ``response_ids`` = the rest, ``response_mask`` = 1 on model-generated
tokens and 0 on tool observations and harness interventions (and 0 everywhere for an excluded
trajectory, which is how :mod:`kit.rl.verl.algos` learns eligibility), images in ``multi_modal_data``.
Why re-tokenize instead of concatenating each turn's ids: the harness rebuilds the context every turn
(image re-feed limits, V-Fold), so turn prompts are not prefixes of one another; the training view is
the final transcript, exactly as the single-node trainer sees it.

Settings come from the ``kit`` section of the verl config (``configs/verl/fa_gspo.yaml``), read through
:mod:`kit.rl.verl.settings`: with ``kit.recipe`` set (what ``python -m kit.cli recipe NAME --verl`` writes)
the harness, its stage budgets (``kit.stage``), the judge and the summarizer are the recipe's.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.loop import Harness
from kit.policy.tokens import chat_entry
from kit.rl.verl import settings
from kit.types import AssistantTurn, Message, PolicyError, SamplingParams, Usage

logger = logging.getLogger(__name__)
AGENT_NAME = "kit_harness"


class VerlServerPolicy:
    """A :class:`kit.types.Policy` over verl's rollout server manager (token-in/token-out per turn).

    Args:
        server_manager: verl ``LLMServerClient`` (``await generate(request_id, prompt_ids=...,
            sampling_params=..., image_data=...)`` → ``TokenOutput``).
        tokenizer, processor: the model's (as verl loaded them).
        sampling_params: verl's sampling parameters for this sample (temperature, top_p, ...).
        request_id: sticky-session id (all turns of an episode go to the same server).
    """

    def __init__(self, server_manager, tokenizer, processor, sampling_params: dict[str, Any], request_id: str,
                 max_context_tokens: int | None = None):
        from kit.policy.tokens import QwenTokenCounter

        self.server_manager, self.tokenizer, self.processor = server_manager, tokenizer, processor
        self.sampling_params = dict(sampling_params)
        self.request_id = request_id
        self.name = f"verl:{getattr(tokenizer, 'name_or_path', '')}"
        self.token_counter = QwenTokenCounter.from_processor(processor, name=self.name)
        self.max_context_tokens = max_context_tokens
        self.eos_ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
        self.turns: list[dict[str, Any]] = []

    def _prompt(self, messages: list[Message], tools: list[dict], workspace: str | None):
        from PIL import Image

        root = Path(workspace).resolve() if workspace else None
        images, chat = [], []
        for m in messages:
            for p in m.content:
                if p.type == "image":
                    if root is None or not p.image:
                        raise PolicyError("image part without a workspace or filename")
                    path = (root / p.image).resolve()
                    if not path.is_relative_to(root) or not path.is_file():
                        raise PolicyError(f"image {p.image!r} is not a file inside the workspace")
                    with Image.open(path) as im:
                        images.append(im.convert("RGB"))
            chat.append(chat_entry(m))
        text = self.tokenizer.apply_chat_template(chat, tools=list(tools) or None, tokenize=False,
                                                  add_generation_prompt=True)
        enc = self.processor(text=[text], images=images or None, return_tensors="pt")
        return enc["input_ids"][0].tolist(), images

    async def generate(self, messages: list[Message], tools: list[dict[str, Any]], sampling: SamplingParams,
                       workspace: str | None = None) -> AssistantTurn:
        """One turn through verl's server. Raises :class:`PolicyError` on any server failure."""
        try:
            ids, images = self._prompt(messages, tools, workspace)
        except PolicyError:
            raise
        except Exception as e:  # template / processor / image errors
            raise PolicyError(f"cannot build the prompt: {type(e).__name__}: {e}") from e
        params = {**self.sampling_params, "max_tokens": int(sampling.max_tokens)}
        try:
            out = await self.server_manager.generate(request_id=self.request_id, prompt_ids=ids, sampling_params=params,
                                                     image_data=images or None)
        except Exception as e:  # a dead or overloaded server is a policy failure, recorded by the harness
            raise PolicyError(f"rollout server failed: {type(e).__name__}: {e}") from e
        toks = list(out.token_ids)
        stopped = bool(toks) and toks[-1] in self.eos_ids
        body = toks[:-1] if stopped else toks
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        finish = "stop" if stopped or len(toks) < sampling.max_tokens else "length"
        self.turns.append({"prompt_tokens": len(ids), "completion_tokens": len(toks)})
        return AssistantTurn(text=text, finish_reason=finish, usage=Usage(prompt_tokens=len(ids), completion_tokens=len(toks)),
                             raw={"completion_ids": toks, "log_probs": out.log_probs})


def default_backend(kit_cfg: dict[str, Any]):
    """The search backend named by ``kit.backend`` (``zim``: the local ZIM web; ``serper``: live web)."""
    name = kit_cfg.get("backend", "zim")
    if name == "zim":
        from kit.paths import shared_data_dir, zim_paths
        from kit.web.zim import LocalZimWeb

        zim_dir = kit_cfg.get("zim_dir")
        paths = sorted(Path(zim_dir).glob("*.zim")) if zim_dir else zim_paths(shared_data_dir())
        if not paths:
            raise FileNotFoundError("no ZIM archives: set kit.zim_dir or MMSEARCH_KIT_DATA")
        return LocalZimWeb([Path(p) for p in paths])
    if name == "serper":
        from kit.web.live import SerperBackend

        return SerperBackend()
    raise ValueError(f"unknown kit.backend {name!r} (zim | serper)")


def default_judge(kit_cfg: dict[str, Any]):
    """The reward's answer judge: :func:`kit.rl.verl.settings.judge` (recipe mode: the recipe's
    ``eval.judge`` and ``eval.judge_model``; a paper recipe's LLM judge needs ``kit.judge_endpoint``)."""
    return settings.judge(kit_cfg)


def default_summarizer(kit_cfg: dict[str, Any]):
    """web_extract's summarizer: :func:`kit.rl.verl.settings.summarizer` (recipe mode: the recipe's
    ``eval.summarizer``, the LLM in both paper recipes; a missing endpoint stops the worker with a message
    naming ``summarizer_endpoint``)."""
    return settings.summarizer(kit_cfg)


@register(AGENT_NAME)
class KitHarnessAgentLoop(AgentLoopBase):
    """verl agent loop running one kit harness episode per sample (module docstring).

    Dataset rows (``kit.rl.verl.data.tasks_to_parquet``) carry the kit :class:`Task` as
    ``extra_info["task"]``. Class attributes ``backend_factory`` / ``judge_factory`` /
    ``summarizer_factory`` build the search backend, judge and web_extract summarizer from the ``kit``
    config section (replace them to inject others).
    """

    backend_factory = staticmethod(default_backend)
    judge_factory = staticmethod(default_judge)
    summarizer_factory = staticmethod(default_summarizer)
    _shared: ClassVar[dict[str, Any]] = {}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.kit_cfg = dict(self.config.get("kit", {}) or {})
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)

    def _harness_config(self) -> HarnessConfig:
        # kit.rl.verl.settings: the recipe's harness with this launch's stage budgets, and the same
        # algorithm → self-recovery rule as the single-node trainer
        return settings.harness_config(self.kit_cfg)

    def _get(self, key: str, factory):
        # one backend / judge per worker process, shared by its agent loops
        if key not in self._shared:
            self._shared[key] = factory(self.kit_cfg)
        return self._shared[key]

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        from kit.harness.toolsets import config_tool_specs
        from kit.rl.eligibility import check
        from kit.rl.rewards import score_record
        from kit.train.sft_data import SFTDataError, SFTEncoder, record_images

        extra = kwargs.get("extra_info") or {}
        if "task" not in extra:
            raise ValueError("dataset row has no extra_info['task'] (build the data with kit.rl.verl.data)")
        task = Task.model_validate(extra["task"])
        cfg = self._harness_config()
        policy = VerlServerPolicy(self.server_manager, self.tokenizer, self.processor, sampling_params,
                                  request_id=uuid.uuid4().hex, max_context_tokens=self.prompt_length + self.response_length)
        backend = self._get("backend", self.backend_factory)
        judge = self._get("judge", self.judge_factory)
        summarizer = self._get("summarizer", self.summarizer_factory)
        root = Path(self.kit_cfg.get("workspace_root") or tempfile.gettempdir()) / "kit_verl_workspaces"
        ws = root / f"{task.id}-{uuid.uuid4().hex[:8]}"
        sp = SamplingParams(temperature=float(sampling_params.get("temperature", 1.0)),
                            top_p=float(sampling_params.get("top_p", 1.0)), max_tokens=cfg.max_response_tokens)
        rec = await Harness(policy, backend, cfg, sampling=sp, labels=list(self.kit_cfg.get("labels", [])),
                            summarizer=summarizer).run(task, ws)
        spec = settings.algorithm_of(self.kit_cfg)
        reward = await score_record(rec, judge, kind=spec.reward, protocol=cfg.protocol,
                                    timeout_s=float(self.kit_cfg.get("judge_timeout_s", 60)))
        check_runtime = spec.check_runtime  # gspo: no filtering
        el = check(rec, reward.reward, judge_error=reward.judge_error, check_runtime=check_runtime)
        enc = SFTEncoder(self.processor, tools=[s.schema() for s in config_tool_specs(cfg).values()],
                         max_response_tokens=10**9, max_trajectory_tokens=10**9)
        reason = el.reason
        try:
            ex = enc.encode(rec)
            images = enc.load_images(record_images(rec), rec.id)
        except SFTDataError as e:
            return self._empty(task, rec, f"encode:{e.reason}")
        ids, mask = ex.input_ids.tolist(), ex.loss_mask.tolist()
        first = mask.index(True)
        prompt_ids, response_ids, response_mask = ids[:first], ids[first:], [int(m) for m in mask[first:]]
        if len(prompt_ids) > self.prompt_length:
            reason = reason or "prompt_over_limit"
        if len(response_ids) > self.response_length:
            reason = reason or "response_over_limit"
        eligible = reason is None
        if not eligible:  # excluded: nothing of it may reach the loss or the group statistics
            response_mask = [0] * len(response_mask)
            prompt_ids = prompt_ids[-self.prompt_length:]
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=response_ids[: self.response_length],
            response_mask=response_mask[: self.response_length],
            multi_modal_data={"images": images} if images else {},
            reward_score=float(reward.reward) if eligible else 0.0,
            num_turns=len(rec.messages), metrics=AgentLoopMetrics(),
            extra_fields={"kit_eligible": eligible, "kit_exclusion": reason or "", "kit_status": rec.status,
                          "kit_correct": reward.correct, "kit_format": reward.format, "kit_episode": rec.id,
                          "turn_scores": [], "tool_rewards": []})

    def _empty(self, task, rec, reason: str) -> AgentLoopOutput:
        """An excluded sample that could not even be tokenized: a one-token masked response."""
        from kit.rl.verl.data import task_prompt

        ids = self.tokenizer.apply_chat_template(task_prompt(task), tokenize=True, add_generation_prompt=True)
        ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)[-self.prompt_length:]  # BatchEncoding too
        eos = int(self.tokenizer.eos_token_id)
        return AgentLoopOutput(prompt_ids=ids, response_ids=[eos], response_mask=[0], reward_score=0.0,
                               num_turns=len(rec.messages), metrics=AgentLoopMetrics(),
                               extra_fields={"kit_eligible": False, "kit_exclusion": reason, "kit_status": rec.status,
                                             "kit_correct": None, "kit_format": 0.0, "kit_episode": rec.id,
                                             "turn_scores": [], "tool_rewards": []})
