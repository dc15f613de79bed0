#!/usr/bin/env bash
#SBATCH --job-name=r1vision-infer
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=06:00:00
#SBATCH --output=logs/%x-%j.out
# Inference over many nodes: one `accelerate launch` per node (srun), one `r1vision infer` process per GPU,
# each writing its own shard; resubmitting the same command resumes. Scores with `r1vision eval` at the
# end; any --task. Environment: GPUS_PER_NODE (8), CPUS_PER_NODE (SLURM_CPUS_PER_TASK, else 64),
# MASTER_PORT (29500).
#
#   sbatch --nodes=2 scripts/inference/sbatch.sh --task sgg --model M --dataset D --output_dir preds/sgg
set -euo pipefail
ROOT="${SLURM_SUBMIT_DIR:-$(pwd)}"
# The interpreter with r1vision (exported into the srun shells): $PYTHON, else the checkout's .venv, else python3.
PYTHON="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || command -v python3)}"
export PYTHON
# shellcheck source=scripts/inference/eval_args.sh
source "$ROOT/scripts/inference/eval_args.sh"  # sbatch runs a copy of this file: not beside it
mkdir -p "$ROOT/logs"
cd "$ROOT"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
CPUS_PER_NODE="${CPUS_PER_NODE:-${SLURM_CPUS_PER_TASK:-64}}"
# Not `| head -n 1`: with pipefail, scontrol can die of SIGPIPE (exit 141) on large node lists.
mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
MASTER_ADDR="${HOSTS[0]}"
MASTER_PORT="${MASTER_PORT:-29500}"
NNODES="$SLURM_NNODES"
export MASTER_ADDR MASTER_PORT GPUS_PER_NODE NNODES
# Single quotes: SLURM_NODEID must expand on each node.
# The step asks for the node's GPUs and CPUs explicitly: a step inherits neither on many Slurm versions.
srun --nodes="$NNODES" --ntasks-per-node=1 --gpus-per-node="$GPUS_PER_NODE" \
  --cpus-per-task="$CPUS_PER_NODE" bash -c '
  exec "$PYTHON" -m accelerate.commands.launch --multi_gpu --num_machines "$NNODES" --num_processes $((NNODES * GPUS_PER_NODE)) \
    --machine_rank "$SLURM_NODEID" --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
    --rdzv_backend static --same_network -m r1vision.cli infer "$@"
' r1vision-infer "$@"
if [[ -n "$TASK" && -n "$DATASET" && -n "$OUT" ]]; then
  python -m r1vision.cli eval --task "$TASK" --dataset "$DATASET" --pred "$OUT" --split "$SPLIT" --json-out "$OUT/metrics.json"
fi
