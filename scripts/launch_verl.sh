#!/usr/bin/env bash
# Launch a paper recipe's RL on verl with the kit's harness driving rollouts (configs/verl/fa_gspo.yaml).
#
#   RECIPE=weagent_mmsearch bash scripts/launch_verl.sh MODEL_DIR TRAIN_PARQUET VAL_PARQUET [hydra overrides ...]
#
# RECIPE: weagent_mmsearch (default: WeAgent-MMSearch as written: FA-GSPO, 64 x 8, lr 5e-7, one stage at Table 5's
#   20 turns / 32 calls / 32,768 tokens / 900 s) | long_mdr (the same harness and FA-GSPO in Long-MDR's stages
#   h10 -> h20 -> h50 -> h75; its OPD warmup and entropy rescue run in notebook 05 only, not on verl)
#   | points_seeker (GRPO 0.7/0.2/0.1, 64 x 8, lr 1e-6, 60 steps at 10 turns, no V-Fold during RL) | smoke.
#   Its values come from `python -m kit.cli recipe $RECIPE --verl --stage S` (every value cited in
#   kit/recipes/*.yaml) and go before your overrides, so yours win. PREFLIGHT=1: the preflight overlay (sizes).
# Stages: one verl run per RL stage of the recipe's schedule (SCHEDULE=name or a stage list such as h10:200,h20
#   replaces the recipe's rl_run.stages; STAGE=name runs only that stage of it); each later
#   stage resumes from the previous stage's last checkpoint (trainer.resume_mode=auto, same checkpoint folder).
#   The OPD warmup of the Long-MDR schedule is not run here (notebook 05 with stages="opd:50" in process; pass
#   its checkpoint as MODEL_DIR). See kit/rl/verl/recipe_config.py.
# MODEL_DIR: a Qwen2.5-VL / Qwen3-VL checkpoint (the SFT model, WeAgent §6.2 initializes RL from it).
# *_PARQUET: from kit.rl.verl.data.tasks_to_parquet.
# Environment: KIT_VERL_VENV (default <repo>/.venv-verl), NGPUS (default: all visible), NNODES (1),
#   MMSEARCH_KIT_DATA (shared data with zim/ for the local web), RECIPE, PREFLIGHT, SCHEDULE, STAGE,
#   MMSEARCH_KIT_PLUGINS (your modules that register losses/rewards: imported in the driver and every worker).
# Multi-node: start a Ray cluster first (ray start --head / --address=...), then run this on the head
#   node with NNODES set; verl places rollout and training workers across the cluster.
# Examples of overrides: kit.judge_endpoint=http://judge:8000/v1 kit.summarizer_endpoint=http://llm:8000/v1
#   kit.algorithm=gspo (vanilla GSPO baseline, WeAgent Table 3: no self-recovery, no runtime filtering)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KIT_VERL_VENV:-$ROOT/.venv-verl}"
if [ $# -lt 3 ]; then
  sed -n '2,26p' "$0"; exit 2
fi
MODEL="$1"; TRAIN="$2"; VAL="$3"; shift 3
[ -x "$VENV/bin/python" ] || { echo "no verl venv at $VENV: run scripts/setup_verl.sh" >&2; exit 1; }
[ -d "$MODEL" ] || { echo "model folder $MODEL not found" >&2; exit 1; }
for f in "$TRAIN" "$VAL"; do [ -f "$f" ] || { echo "data file $f not found" >&2; exit 1; }; done
RECIPE="${RECIPE:-weagent_mmsearch}"
RFLAGS=()
[ "${PREFLIGHT:-0}" = "1" ] && RFLAGS+=(--preflight)
[ -n "${SCHEDULE:-}" ] && RFLAGS+=(--stages "$SCHEDULE")
# refuse before Ray and the model load when the recipe's judge/summarizer needs an endpoint not given
(cd "$ROOT" && "$VENV/bin/python" -m kit.rl.verl.launch_check "$RECIPE" "${RFLAGS[@]}" -- "$@") || exit 2
NGPUS="${NGPUS:-$("$VENV/bin/python" -c 'import torch; print(max(torch.cuda.device_count(), 1))')}"
NNODES="${NNODES:-1}"
export KIT_ROOT="$ROOT"
# one checkpoint folder per recipe and schedule: a stage resumes only from its own schedule's checkpoints
SCHED_TAG="${SCHEDULE:-}"; SCHED_TAG="${SCHED_TAG//[^A-Za-z0-9_.-]/_}"
RUN_NAME="$RECIPE${SCHED_TAG:+-$SCHED_TAG}"
PF_TAG=""; if [ "${PREFLIGHT:-0}" = "1" ]; then PF_TAG="_preflight"; fi  # results/<recipe>[_preflight]/, as notebooks
cd "$ROOT"
if [ -n "${STAGE:-}" ]; then
  STAGES=("$STAGE")
else
  mapfile -t STAGES < <("$VENV/bin/python" -m kit.cli recipe "$RECIPE" "${RFLAGS[@]}" --verl-stages)
  [ "${#STAGES[@]}" -gt 0 ] || { echo "recipe $RECIPE gives no verl stage" >&2; exit 1; }
fi
for S in "${STAGES[@]}"; do
  mapfile -t RECIPE_OVERRIDES < <("$VENV/bin/python" -m kit.cli recipe "$RECIPE" "${RFLAGS[@]}" --verl --stage "$S")
  [ "${#RECIPE_OVERRIDES[@]}" -gt 0 ] || { echo "no verl overrides for recipe $RECIPE stage $S" >&2; exit 1; }
  echo "[launch_verl] recipe $RECIPE${PREFLIGHT:+ (preflight=$PREFLIGHT)}${SCHEDULE:+, schedule $SCHEDULE}, stage $S" >&2
  "$VENV/bin/python" -m kit.rl.verl.main \
    --config-path "$ROOT/configs/verl" --config-name fa_gspo \
    data.train_files="$TRAIN" data.val_files="$VAL" \
    actor_rollout_ref.model.path="$MODEL" \
    trainer.n_gpus_per_node="$NGPUS" trainer.nnodes="$NNODES" \
    trainer.default_local_dir="$ROOT/results/$RUN_NAME$PF_TAG/verl_checkpoints" \
    "${RECIPE_OVERRIDES[@]}" \
    "$@"
done
