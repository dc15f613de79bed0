#!/usr/bin/env bash
#SBATCH --job-name=r1vision-sft
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=12:00:00
#SBATCH --output=logs/%x-%j.out
#SBATCH --signal=USR1@300
#SBATCH --requeue
# SFT on one or more nodes, one `accelerate launch` per node, rendezvous from SLURM; any --task.
#
#   sbatch --nodes=2 scripts/sft/sbatch.sh --model M --dataset D --task sgg --output_dir O
#
# Environment: GPUS_PER_NODE (8), CPUS_PER_NODE (SLURM_CPUS_PER_TASK, else 64), ACCELERATE_CONFIG
# (multi_node.yaml; deepspeed_zero3.yaml for 24 GB cards), MASTER_PORT (29500).
set -euo pipefail
ROOT="${SLURM_SUBMIT_DIR:-$(pwd)}"
# The interpreter with r1vision (exported into the srun shells): $PYTHON, else the checkout's .venv, else python3.
PYTHON="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || command -v python3)}"
export PYTHON
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
CPUS_PER_NODE="${CPUS_PER_NODE:-${SLURM_CPUS_PER_TASK:-64}}"
ACCELERATE_CONFIG="${ACCELERATE_CONFIG:-$ROOT/configs/accelerate/multi_node.yaml}"
# Not `| head -n 1`: with pipefail, scontrol can die of SIGPIPE (exit 141) on large node lists.
mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
MASTER_ADDR="${HOSTS[0]}"
MASTER_PORT="${MASTER_PORT:-29500}"
NNODES="$SLURM_NNODES"
export MASTER_ADDR MASTER_PORT GPUS_PER_NODE ACCELERATE_CONFIG NNODES
mkdir -p "$ROOT/logs"
cd "$ROOT"
# Preemption: a signal saves a checkpoint and the job requeues itself; RESUME (auto) says where it resumes.
source "$ROOT/scripts/_preempt.sh"
export RESUME="${RESUME:-auto}"
# The step asks for the node's GPUs and CPUs explicitly: a step inherits neither on many Slurm versions.
srun --nodes="$NNODES" --ntasks-per-node=1 --gpus-per-node="$GPUS_PER_NODE" \
  --cpus-per-task="$CPUS_PER_NODE" bash -c '
  exec "$PYTHON" -m accelerate.commands.launch --config_file "$ACCELERATE_CONFIG" \
    --num_machines "$NNODES" --num_processes $((NNODES * GPUS_PER_NODE)) \
    --machine_rank "$SLURM_NODEID" --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
    --rdzv_backend static --same_network \
    -m r1vision.cli sft --resume_from_checkpoint "$RESUME" "$@"
' r1vision-sft "$@" || status=$?
r1v_requeue_if_preempted "$(r1v_output_dir "$@")"
exit "${status:-0}"
