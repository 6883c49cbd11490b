"""Single-node RL trainer: FA-GSPO / GSPO / GRPO and OPD warmup through the harness (WeAgent §6.2,
Appendix A; Long-MDR staging).

One step = rollouts of ``group_size`` samples for each of ``prompts_per_step`` prompts through the kit's
harness with the in-process policy (:class:`kit.policy.transformers_policy.TransformersPolicy`, whose
model *is* the trained model), scoring and eligibility, re-tokenization with
:class:`~kit.train.sft_data.SFTEncoder`, old-policy log-probs (the weights that sampled, recomputed with
the training forward pass), advantages, then ``updates_per_batch`` optimizer updates with gradient
accumulation over micro-batches (each micro-batch carries its global Eq. 7 weights, so the accumulated
gradient equals the full-batch gradient). The vision tower and projector are frozen (paper, Appendix A);
``finetune="lora"`` trains LoRA adapters on the language model's projections.

Failures never crash a step and never pass as a silent zero-gradient update: excluded trajectories are
counted by reason; a step without a training group (``no_training_group``), without any non-zero
advantage (``no_advantage_signal``), with a non-finite loss or gradient (``loss_nan`` / ``grad_nan``) is
skipped, its reason written to the run log. Checkpoints (trainable weights, optimizer, schedule, RNG)
are written every ``save_every`` steps; a new trainer on the same ``out_dir`` resumes from the latest.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kit.harness.config import HarnessConfig
from kit.harness.episode import Task
from kit.harness.events import RunEventType as R
from kit.rl.config import DTYPES, RLConfig  # noqa: F401  (re-exported: kit.rl.trainer.RLConfig)
from kit.rl.eligibility import Eligibility, exclusion_counts, harness_config_for
from kit.rl.logprobs import masked_log_softmax, masked_mean, token_logprobs
from kit.rl.objective import AlgorithmSpec, algorithm, estimate_advantages, policy_loss
from kit.rl.rollout import (
    RolloutBatch,
    Trajectory,
    recovery_stats,
    rollout_groups,
    seeded_factory,
)
from kit.rl.staging import RescueConfig, RunLog, Stage, StageSchedule
from kit.types import SamplingParams, SearchBackend


@dataclass
class _Item:
    traj: Trajectory
    example: Any
    advantage: float = 0.0
    weight: float = 0.0


class RLTrainer:
    """The single-node loop (see module docstring).

    Args:
        model_path: checkpoint folder (tiny or real Qwen-VL).
        backend: search backend for the harness tools (e.g. :class:`kit.web.zim.LocalZimWeb`).
        tasks: RL prompts; step ``k`` uses the next ``prompts_per_step`` of them (cycling).
        out_dir: run folder (rollouts, ``run_log.jsonl``, ``metrics.jsonl``, ``checkpoints/``, ``final/``).
        stages: Long-MDR stages (default: one open-ended RL stage with ``harness_config``'s budgets).
        rescue: entropy rescue settings (None: off).
        judge: correctness judge (default ``RuleJudge("contains")``).
        teacher: :class:`kit.rl.opd.InProcessTeacher` for ``"opd"`` stages.
        harness_config: base budgets (default :meth:`HarnessConfig.smoke` on CPU); ``algorithm="gspo"``
            runs it with ``self_recovery=False`` (:func:`kit.rl.eligibility.harness_config_for`).
        labels: stored on every episode record (``"smoke"`` for tiny models).
        summarizer: web_extract's summarizer in the rollouts (:func:`kit.harness.summarize.make_summarizer`;
            None: extractive).
        report_to: experiment tracking of every ``metrics.jsonl`` row under its step (:mod:`kit.tracking`:
            ``"none"`` | ``"tensorboard"`` | ``"trackio"`` | ``"wandb"``), written to ``out_dir/tracking``.
    Raises:
        ValueError: no tasks, an OPD stage without a teacher, bad settings, or a harness config the algorithm
            refuses (``fa_gspo`` with ``self_recovery=False``, ``gspo`` with an explicit ``True``).
    """

    def __init__(self, model_path: str | Path, backend: SearchBackend, tasks: list[Task], out_dir: str | Path,
                 cfg: RLConfig | None = None, *, stages: list[Stage] | None = None, rescue: RescueConfig | None = None,
                 judge=None, teacher=None, harness_config: HarnessConfig | None = None,
                 labels: list[str] | tuple[str, ...] = (), summarizer=None, report_to: str = "none"):
        import torch

        from kit.policy.transformers_policy import TransformersPolicy
        from kit.train.sft_data import SFTCollator, SFTEncoder

        if not tasks:
            raise ValueError("no RL tasks")
        self.cfg = cfg or RLConfig()
        self.spec: AlgorithmSpec = algorithm(self.cfg.algorithm)
        stages = stages or [Stage("rl")]
        if any(s.kind == "opd" for s in stages) and teacher is None:
            raise ValueError("an 'opd' stage needs a teacher (kit.rl.opd.InProcessTeacher)")
        self.backend, self.tasks, self.teacher = backend, list(tasks), teacher
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.labels = list(labels)
        self.summarizer = summarizer
        # the algorithm decides self-recovery (vanilla GSPO: none; FA-GSPO: required); every stage inherits it
        self.base_config = harness_config_for(self.cfg.algorithm, harness_config or HarnessConfig.smoke())
        if judge is None:
            from kit.eval.judges import RuleJudge

            judge = RuleJudge("contains")
        self.judge = judge
        torch.manual_seed(self.cfg.seed)
        random.seed(self.cfg.seed)
        self.policy = TransformersPolicy(model_path, device=self.cfg.device, dtype=self.cfg.dtype)
        self.model = self._prepare_model(self.policy.model)
        self.policy.model = self.model
        # The training view renders the same tool schemas the policy saw (the enabled tools).
        from kit.harness.toolsets import config_tool_specs

        self.encoder = SFTEncoder(self.policy.processor,
                                  tools=[sp.schema() for sp in config_tool_specs(self.base_config).values()])
        self.collate = SFTCollator(self.encoder.pad_token_id)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            raise ValueError("no trainable parameters")
        self.opt = torch.optim.AdamW(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)
        self.log = RunLog(self.out / "run_log.jsonl")
        from kit.tracking import Tracker

        self.tracker = Tracker(report_to, self.out / "tracking", run_name=self.out.name,
                               config={"rl": self.cfg.model_dump(), "stages": [s.model_dump() for s in stages]},
                               stages=[s.name for s in stages])  # stage_index in schedule order
        self.schedule = StageSchedule(stages, rescue, self.log, temperature=self.cfg.temperature)
        from kit.runs import config_fingerprint

        # what this run is: a checkpoint of another configuration is never resumed (kit.runs.check_resume)
        self.identity = config_fingerprint({
            # where and how often it runs is not what it is: device, checkpoint cadence and micro-batching are left out
            "rl": self.cfg.model_dump(exclude={"device", "save_every", "keep_checkpoints", "micro_batch"}),
            "stages": [s.model_dump() for s in stages],
            "rescue": rescue.model_dump() if rescue else None, "harness": self.base_config.model_dump(mode="json"),
            "model": str(model_path), "judge": getattr(self.judge, "name", type(self.judge).__name__),
            "teacher": getattr(teacher, "name", type(teacher).__name__) if teacher is not None else None,
            "tasks": hashlib.sha256("\n".join(f"{t.id}\t{t.question}" for t in self.tasks).encode()).hexdigest()[:16]})
        self.step = 0
        self.history: list[dict[str, Any]] = []
        self.last_batch: RolloutBatch | None = None  # the last train_step's scored rollouts
        if not self.resume():
            self.schedule.start(0)
            self.log.write(R.RUN_START, 0, config=self.cfg.model_dump(), algorithm=asdict(self.spec),
                           stages=[s.model_dump() for s in stages], rescue=rescue.model_dump() if rescue else None,
                           labels=self.labels)

    # ------------------------------------------------------------------ model
    def _prepare_model(self, model):
        from kit.train.sft import LORA_TARGETS, is_vision_param

        if self.cfg.finetune == "lora":
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(
                r=self.cfg.lora_rank, lora_alpha=self.cfg.lora_alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                target_modules=r".*language_model.*\.(" + "|".join(LORA_TARGETS) + ")"))
        if self.cfg.freeze_vision:
            for n, p in model.named_parameters():
                if is_vision_param(n):
                    p.requires_grad_(False)
        return model

    def trainable_parameter_count(self) -> tuple[int, int]:
        """``(trainable, total)`` parameter counts."""
        tr = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        return tr, sum(p.numel() for p in self.model.parameters())

    # ------------------------------------------------------------------ loop
    def step_tasks(self, step: int) -> list[Task]:
        """The prompts of ``step`` (deterministic cycling through ``tasks``)."""
        p = self.cfg.prompts_per_step
        return [self.tasks[(step * p + j) % len(self.tasks)] for j in range(min(p, len(self.tasks)))]

    async def train(self, steps: int) -> list[dict[str, Any]]:
        """Run ``steps`` more steps (resumed runs continue their count). Returns their metrics.
        A progress bar (:mod:`kit.progress`) counts the steps and shows the last reward and stage."""
        from kit.progress import progress

        out = []
        with progress(total=steps, desc="RL steps", unit="step", initial=0) as bar:
            for _ in range(steps):
                m = await self.train_step()
                out.append(m)
                bar.set_postfix(stage=m.get("stage"), reward=m.get("rollout_reward_mean"), refresh=False)
                bar.update(1)
        return out

    async def rollouts(self, step: int | None = None) -> RolloutBatch:
        """The scored rollouts of ``step`` (default: the current one) in the current stage, exactly as
        :meth:`train_step` samples them (same seeds, harness, judge, reward and filter), without an update and
        without advancing the step. A learning-rate-0 control needs only these: its weights never change, so an
        update at lr 0 would change nothing it measures (``benchmarks/bench_learning.py``)."""
        step = self.step if step is None else step
        hcfg = self.schedule.stage.harness_config(self.base_config)
        sampling = SamplingParams(temperature=self.schedule.knobs.temperature, top_p=self.cfg.top_p,
                                  max_tokens=hcfg.max_response_tokens)
        factory = seeded_factory(self.policy, self.backend, hcfg, sampling, base_seed=self.cfg.seed + 7919 * step,
                                 labels=self.labels, summarizer=self.summarizer)
        self.model.eval()
        return await rollout_groups(factory, self.step_tasks(step), self.cfg.group_size,
                                    self.out / "rollouts" / f"step_{step:05d}", judge=self.judge, spec=self.spec,
                                    concurrency=self.cfg.rollout_concurrency, judge_timeout_s=self.cfg.judge_timeout_s,
                                    protocol=hcfg.protocol)

    async def train_step(self) -> dict[str, Any]:
        """One step of the current stage; returns its metrics (``skipped`` set when no update ran)."""
        step, stage, knobs = self.step, self.schedule.stage, self.schedule.knobs
        t0 = time.perf_counter()
        batch = self.last_batch = await self.rollouts(step)
        if stage.kind == "opd":
            m = self.opd_update(batch)
        else:
            m = self.rl_update(batch, knobs)
        m.update(step=step, stage=stage.name, kind=stage.kind, temperature=knobs.temperature,
                 step_s=round(time.perf_counter() - t0, 3), **{f"rollout_{k}": v for k, v in batch.summary().items()})
        m["recovery"] = recovery_stats(batch.trajectories())
        if m.get("skipped"):
            self.log.write(R.SKIP, step, stage=stage.name, reason=m["skipped"], exclusions=m.get("exclusions"),
                           groups=m.get("groups"))
        self.log.write(R.STEP, step, **{k: v for k, v in m.items() if k not in ("recovery", "step")})
        events = self.schedule.observe(step, m.get("rollout_reward_mean"), m.get("entropy_mean"))
        rescues = [e for e in events if e["type"] == R.RESCUE]
        m["rescues"] = len(rescues)  # Long-MDR entropy rescues this step (details in run_log.jsonl)
        if rescues:
            m["rescue_action"] = ",".join(str(e.get("action")) for e in rescues)
        self._append_metrics(m)
        self.history.append(m)
        self.step += 1
        if any(e["type"] == R.RESCUE and e["action"] == "rollback" for e in events):
            self._rollback()
        if self.step % self.cfg.save_every == 0:
            self.save_checkpoint(healthy=self._healthy(m))
        return m

    def _append_metrics(self, m: dict[str, Any]) -> None:
        """Append ``m`` to ``metrics.jsonl`` and log the same row, at its ``step``, to the tracker."""
        with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(m, default=_nan_none) + "\n")
        if self.tracker.active and isinstance(m.get("step"), int):
            self.tracker.log(m, m["step"])
            self.tracker.flush()  # a crash loses no logged step

    def _healthy(self, m) -> bool:
        r = self.schedule.rescue
        e = m.get("entropy_mean")
        return r is None or (e is not None and math.isfinite(e) and e >= r.entropy_threshold)

    # ------------------------------------------------------------------ encoding and log-probs
    def _encode(self, trajs: list[Trajectory]) -> tuple[list[_Item], list[Eligibility]]:
        from kit.train.sft_data import SFTDataError

        items, lost = [], []
        for t in trajs:
            try:
                items.append(_Item(t, self.encoder.encode(t.record)))
            except SFTDataError as e:
                t.eligibility = Eligibility(False, f"encode:{e.reason}")
                lost.append(t.eligibility)
        return items, lost

    def _chunks(self, items: list[_Item]) -> list[list[_Item]]:
        k = self.cfg.micro_batch
        return [items[i:i + k] for i in range(0, len(items), k)]

    def _old_logprobs(self, items: list[_Item], temperature: float):
        """One no-grad pass per micro-batch under the sampling weights: ``(batch, old_logp, mask)`` per chunk
        and per-item entropy. Items with non-finite log-probs are marked ``logprob_nan`` (their weight
        becomes 0, so the loss drops their rows)."""
        import torch

        chunks, ents = [], []
        with torch.no_grad():
            for ch in self._chunks(items):
                b = self.collate([it.example for it in ch])
                ts = token_logprobs(self.model, b, temperature=temperature, with_entropy=True)
                for r, it in enumerate(ch):
                    if not bool(torch.isfinite(ts.logp[r][ts.mask[r]]).all()):
                        it.traj.eligibility = Eligibility(False, "logprob_nan")
                    else:
                        ents.append(masked_mean(ts.entropy[r], ts.mask[r]))
                chunks.append((ch, b, ts.logp.detach(), ts.mask))
        return [it for it in items if it.traj.eligible], chunks, ents

    # ------------------------------------------------------------------ RL
    def rl_update(self, batch: RolloutBatch, knobs) -> dict[str, Any]:
        import torch

        trajs = [t for t in batch.trajectories() if t.eligible]
        items, _ = self._encode(trajs)
        temperature = knobs.temperature
        items, chunks, ents = self._old_logprobs(items, temperature)  # items: still eligible
        adv = estimate_advantages(self.spec, batch.rewards(), batch.eligible())
        weights = adv.weights()
        for it in items:
            g, i = it.traj.group, batch.groups[it.traj.group].index(it.traj)
            it.advantage, it.weight = adv.advantages[g][i], weights[g][i]
        m: dict[str, Any] = {"groups": adv.summary(), "exclusions": batch.exclusions(),
                             "entropy_mean": sum(ents) / len(ents) if ents else math.nan,
                             "advantage_abs_mean": (sum(abs(it.advantage) for it in items if it.weight > 0)
                                                    / max(1, sum(it.weight > 0 for it in items)))}
        if not adv.train_groups:
            return {**m, "skipped": "no_training_group"}
        if not adv.has_signal():
            return {**m, "skipped": "no_advantage_signal"}
        eps_lo = self.cfg.eps_lo if self.cfg.eps_lo is not None else self.spec.eps_lo
        eps_hi = (self.cfg.eps_hi if self.cfg.eps_hi is not None else self.spec.eps_hi) * knobs.eps_hi_scale
        t0 = time.perf_counter()
        self.model.train()
        stats = []
        for _ in range(self.cfg.updates_per_batch):
            self.opt.zero_grad(set_to_none=True)
            total = 0.0
            for ch, b, old, mask in chunks:
                w = [it.weight for it in ch]
                if not any(x > 0 for x in w):
                    continue
                if knobs.entropy_coef > 0:
                    lsm, _, mk = masked_log_softmax(self.model, b, temperature=temperature)
                    taken = lsm.gather(-1, b["labels"][:, 1:][mk].unsqueeze(-1).to(lsm.device)).squeeze(-1)
                    new = torch.zeros(mk.shape, dtype=taken.dtype, device=taken.device).masked_scatter(mk, taken)
                    ent = -(lsm.exp() * lsm).sum(-1).mean()
                else:
                    new, ent = token_logprobs(self.model, b, temperature=temperature).logp, None
                loss, st = policy_loss(self.spec, new, old, mask, [it.advantage for it in ch], w, eps_lo=eps_lo,
                                       eps_hi=eps_hi)
                if ent is not None:  # entropy bonus (rescue), weighted by this micro-batch's share of the weight
                    loss = loss - knobs.entropy_coef * ent * (sum(w) / max(sum(it.weight for it in items), 1e-12))
                if not torch.isfinite(loss):
                    self.opt.zero_grad(set_to_none=True)
                    self.model.eval()
                    return {**m, "skipped": "loss_nan"}
                loss.backward()
                total += float(loss.detach())
                stats.append(st)
            params = [p for p in self.model.parameters() if p.requires_grad]
            gn = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
            if not math.isfinite(gn):
                self.opt.zero_grad(set_to_none=True)
                self.model.eval()
                return {**m, "skipped": "grad_nan"}
            self.opt.step()
        self.model.eval()
        rows = [s for s in stats if s["rows"]]
        return {**m, "loss": total, "grad_norm": gn, "update_s": round(time.perf_counter() - t0, 3),
                "ratio_mean": sum(s["ratio_mean"] for s in rows) / max(len(rows), 1),
                "clip_frac": sum(s["clip_frac"] for s in rows) / max(len(rows), 1),
                "trained_trajectories": sum(it.weight > 0 for it in items),
                "trained_tokens": int(sum(int(mk[r].sum()) for ch, _, _, mk in chunks
                                          for r, it in enumerate(ch) if it.weight > 0))}

    # ------------------------------------------------------------------ OPD
    def opd_update(self, batch: RolloutBatch) -> dict[str, Any]:
        """One on-policy distillation update on the student's own trajectories (every trajectory the
        harness did not abort: OPD needs model tokens, not rewards)."""
        import torch

        from kit.rl.opd import reverse_kl_full, reverse_kl_sampled, row_index_of

        trajs = [t for t in batch.trajectories() if t.record.status != "error"]
        items, lost = self._encode(trajs)
        m: dict[str, Any] = {"exclusions": exclusion_counts(lost), "opd_trajectories": len(items)}
        if not items:
            return {**m, "skipped": "no_opd_trajectory", "entropy_mean": math.nan}
        t0 = time.perf_counter()
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        kls, ents, n = [], [], len(items)
        for ch in self._chunks(items):
            b = self.collate([it.example for it in ch])
            s_lsm, taken, mask = masked_log_softmax(self.model, b, temperature=self.schedule.knobs.temperature)
            t_lsm, _, _ = self.teacher.log_softmax(b, temperature=self.schedule.knobs.temperature)
            rows = row_index_of(mask)
            if t_lsm.shape == s_lsm.shape:
                loss, kl = reverse_kl_full(s_lsm, t_lsm.to(s_lsm.device), rows, len(ch))
            else:
                s_tok = s_lsm.gather(-1, taken.unsqueeze(-1)).squeeze(-1)
                t_tok = t_lsm.gather(-1, taken.unsqueeze(-1).to(t_lsm.device)).squeeze(-1).to(s_tok.device)
                loss, kl = reverse_kl_sampled(s_tok, t_tok, rows, len(ch))
            loss = loss * (len(ch) / n)
            if not torch.isfinite(loss):
                self.opt.zero_grad(set_to_none=True)
                self.model.eval()
                return {**m, "skipped": "loss_nan", "entropy_mean": math.nan}
            loss.backward()
            kls.append(kl)
            with torch.no_grad():
                ents.append(float(-(s_lsm.exp() * s_lsm).sum(-1).mean()))
        params = [p for p in self.model.parameters() if p.requires_grad]
        gn = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm))
        if not math.isfinite(gn):
            self.opt.zero_grad(set_to_none=True)
            self.model.eval()
            return {**m, "skipped": "grad_nan", "entropy_mean": math.nan}
        self.opt.step()
        self.model.eval()
        return {**m, "opd_kl": sum(kls) / len(kls), "entropy_mean": sum(ents) / len(ents), "grad_norm": gn,
                "update_s": round(time.perf_counter() - t0, 3)}

    # ------------------------------------------------------------------ checkpoints
    def _ckpt_dir(self) -> Path:
        return self.out / "checkpoints"

    def save_checkpoint(self, healthy: bool = True) -> Path:
        """Write ``checkpoints/step_<k>/`` (trainable weights, optimizer, trainer state) atomically
        (a ``COMPLETE`` marker is written last) and prune old ones (healthy ones are kept for rollback)."""
        import torch

        d = self._ckpt_dir() / f"step_{self.step:06d}"
        tmp = d.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save({n: p.detach().cpu() for n, p in self.model.named_parameters() if p.requires_grad}, tmp / "trainable.pt")
        torch.save(self.opt.state_dict(), tmp / "optimizer.pt")
        state = {"step": self.step, "schedule": self.schedule.state_dict(), "healthy": healthy,
                 "python_rng": repr(random.getstate()), "config": self.cfg.model_dump(), "identity": self.identity}
        torch.save({"torch_rng": torch.get_rng_state(), "python_rng": random.getstate()}, tmp / "rng.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(state, default=_nan_none))
        (tmp / "COMPLETE").write_text("")
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
        self.log.write(R.CHECKPOINT, self.step, path=str(d), healthy=healthy)
        done = sorted(p for p in self._ckpt_dir().glob("step_*") if (p / "COMPLETE").exists() and p.suffix != ".tmp")
        last_healthy = next((p for p in reversed(done) if json.loads((p / "trainer_state.json").read_text())["healthy"]), None)
        for p in done[:-self.cfg.keep_checkpoints]:
            if p != last_healthy:
                shutil.rmtree(p, ignore_errors=True)
        return d

    def _load(self, d: Path, *, weights_only_model: bool = False) -> dict[str, Any]:
        import torch

        sd = torch.load(d / "trainable.pt")
        named = dict(self.model.named_parameters())
        missing = [k for k in sd if k not in named]
        if missing:
            raise ValueError(f"checkpoint {d} has parameters this model lacks: {missing[:3]}")
        with torch.no_grad():
            for k, v in sd.items():
                named[k].copy_(v.to(named[k].device))
        self.opt.load_state_dict(torch.load(d / "optimizer.pt"))
        return json.loads((d / "trainer_state.json").read_text())

    def resume(self) -> bool:
        """Load the latest complete checkpoint in ``out_dir`` (True when one was found).

        Raises:
            kit.runs.ResumeMismatch: the checkpoint was written by another configuration (algorithm, stages, rescue,
                harness, model, judge, teacher or prompts differ; each differing key is named) or by a kit that
                recorded none: it is not resumed silently.
        """
        import torch

        done = sorted(p for p in self._ckpt_dir().glob("step_*") if (p / "COMPLETE").exists() and p.suffix != ".tmp")
        if not done:
            return False
        d = done[-1]
        from kit.runs import check_resume

        recorded = json.loads((d / "trainer_state.json").read_text()).get("identity")
        check_resume(recorded, self.identity, self.out)  # ResumeMismatch: another run's checkpoint
        state = self._load(d)
        self.step = int(state["step"])
        self.schedule.load_state_dict(state["schedule"])
        rng = torch.load(d / "rng.pt", weights_only=False)
        torch.set_rng_state(rng["torch_rng"])
        random.setstate(rng["python_rng"])
        self.history = self._logged_history()
        self.log.write(R.RESUME, self.step, path=str(d), stage=self.schedule.stage.name)
        return True

    def _logged_history(self) -> list[dict[str, Any]]:
        """Metrics of the steps before ``self.step`` from ``metrics.jsonl`` (the last row of a step that
        was logged twice, e.g. run again after a crash and a resume from an earlier checkpoint), so a
        resumed run reports its whole history."""
        path = self.out / "metrics.jsonl"
        rows: dict[int, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    m = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a crash mid-write
                    continue
                if isinstance(m, dict) and isinstance(m.get("step"), int) and m["step"] < self.step:
                    rows[m["step"]] = m
        return [rows[k] for k in sorted(rows)]

    def _rollback(self) -> None:
        done = sorted(p for p in self._ckpt_dir().glob("step_*") if (p / "COMPLETE").exists() and p.suffix != ".tmp")
        good = [p for p in done if json.loads((p / "trainer_state.json").read_text())["healthy"]]
        if not good:
            self.log.write(R.ROLLBACK_FAILED, self.step, reason="no healthy checkpoint")
            return
        self._load(good[-1])
        self.log.write(R.ROLLBACK, self.step, path=str(good[-1]))

    def save_final(self, path: str | Path | None = None) -> Path:
        """Save the policy (LoRA merged into a copy) and processor as a checkpoint folder."""
        path = Path(path) if path is not None else self.out / "final"
        model = self.model
        if hasattr(model, "merge_and_unload"):
            import copy

            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(str(path))
        self.policy.processor.save_pretrained(str(path))
        return path


def _nan_none(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)
