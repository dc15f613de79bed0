#!/usr/bin/env bash
#SBATCH --job-name=r1vision-grpo
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%j.out
#SBATCH --signal=USR1@300
#SBATCH --requeue
# Multi-node GRPO on 80 GB cards: DDP (or ZeRO-2) over all GPUs of all nodes, one vLLM engine colocated
# in every training process. One `accelerate launch` per node (srun, one task per node, asking for the
# node's GPUs and CPUs explicitly: a step inherits neither on many Slurm versions); the rendezvous
# comes from SLURM: the first node is the main process. Sleep mode is the recipe's choice.
#
#   sbatch --nodes=4 scripts/grpo/sbatch_colocate.sh --model M --dataset D --task sgg --output_dir O
#
# Check the run first, without a GPU: r1vision grpo --config R --model M --generation_backend
# vllm_colocate --dry-run --gpus $((NODES * 8)).
# Environment: GPUS_PER_NODE (8), CPUS_PER_NODE (SLURM_CPUS_PER_TASK, else 64), VLLM_MEM (0.3),
# ACCELERATE_CONFIG (multi_node.yaml; for ZeRO-3 across nodes use deepspeed_zero3.yaml), MASTER_PORT
# (29500). Run from the repository root.
set -euo pipefail
ROOT="${SLURM_SUBMIT_DIR:-$(pwd)}"
# The interpreter with r1vision (exported into the srun shells): $PYTHON, else the checkout's .venv, else python3.
PYTHON="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || command -v python3)}"
export PYTHON
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
CPUS_PER_NODE="${CPUS_PER_NODE:-${SLURM_CPUS_PER_TASK:-64}}"
VLLM_MEM="${VLLM_MEM:-0.3}"
ACCELERATE_CONFIG="${ACCELERATE_CONFIG:-$ROOT/configs/accelerate/multi_node.yaml}"
# Not `| head -n 1`: with pipefail, scontrol can die of SIGPIPE (exit 141) on large node lists.
mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
MASTER_ADDR="${HOSTS[0]}"
MASTER_PORT="${MASTER_PORT:-29500}"
NNODES="$SLURM_NNODES"
export MASTER_ADDR MASTER_PORT GPUS_PER_NODE ACCELERATE_CONFIG NNODES VLLM_MEM
mkdir -p "$ROOT/logs"
cd "$ROOT"
# Preemption: a signal saves a checkpoint and the job requeues itself; RESUME (auto) says where it resumes.
source "$ROOT/scripts/_preempt.sh"
export RESUME="${RESUME:-auto}"
# Single quotes: SLURM_NODEID must expand on each node, not here.
srun --nodes="$NNODES" --ntasks-per-node=1 --gpus-per-node="$GPUS_PER_NODE" \
  --cpus-per-task="$CPUS_PER_NODE" bash -c '
  exec "$PYTHON" -m accelerate.commands.launch --config_file "$ACCELERATE_CONFIG" \
    --num_machines "$NNODES" --num_processes $((NNODES * GPUS_PER_NODE)) \
    --machine_rank "$SLURM_NODEID" --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
    --rdzv_backend static --same_network \
    -m r1vision.cli grpo --resume_from_checkpoint "$RESUME" --generation_backend vllm_colocate \
    --vllm_gpu_memory_utilization "$VLLM_MEM" "$@"
' r1vision-grpo "$@" || status=$?
r1v_requeue_if_preempted "$(r1v_output_dir "$@")"
exit "${status:-0}"
