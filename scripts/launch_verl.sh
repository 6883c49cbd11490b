#!/usr/bin/env bash
# Launch FA-GSPO on verl with the kit's harness driving rollouts (configs/verl/fa_gspo.yaml).
#
#   bash scripts/launch_verl.sh MODEL_DIR TRAIN_PARQUET VAL_PARQUET [hydra overrides ...]
#
# MODEL_DIR: a Qwen2.5-VL / Qwen3-VL checkpoint (the SFT model, WeAgent §6.2 initializes RL from it).
# *_PARQUET: from kit.rl.verl.data.tasks_to_parquet (python -c below shows how).
# Environment: KIT_VERL_VENV (default <repo>/.venv-verl), NGPUS (default: all visible), NNODES (1),
#   MMSEARCH_KIT_DATA (shared data with zim/ for the local web).
# Multi-node: start a Ray cluster first (ray start --head / --address=...), then run this on the head
#   node with NNODES set; verl places rollout and training workers across the cluster.
# Examples of overrides: data.train_batch_size=64 actor_rollout_ref.rollout.n=8 kit.harness=smoke
#   kit.algorithm=gspo (vanilla GSPO baseline: algorithm.adv_estimator=grpo actor_rollout_ref.actor.policy_loss.loss_mode=gspo)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KIT_VERL_VENV:-$ROOT/.venv-verl}"
if [ $# -lt 3 ]; then
  sed -n '2,16p' "$0"; exit 2
fi
MODEL="$1"; TRAIN="$2"; VAL="$3"; shift 3
[ -x "$VENV/bin/python" ] || { echo "no verl venv at $VENV: run scripts/setup_verl.sh" >&2; exit 1; }
[ -d "$MODEL" ] || { echo "model folder $MODEL not found" >&2; exit 1; }
for f in "$TRAIN" "$VAL"; do [ -f "$f" ] || { echo "data file $f not found" >&2; exit 1; }; done
NGPUS="${NGPUS:-$("$VENV/bin/python" -c 'import torch; print(max(torch.cuda.device_count(), 1))')}"
NNODES="${NNODES:-1}"
export KIT_ROOT="$ROOT"
cd "$ROOT"
exec "$VENV/bin/python" -m kit.rl.verl.main \
  --config-path "$ROOT/configs/verl" --config-name fa_gspo \
  data.train_files="$TRAIN" data.val_files="$VAL" \
  actor_rollout_ref.model.path="$MODEL" \
  trainer.n_gpus_per_node="$NGPUS" trainer.nnodes="$NNODES" \
  trainer.default_local_dir="$ROOT/results/05_rl_long_mdr/verl_checkpoints" \
  "$@"
