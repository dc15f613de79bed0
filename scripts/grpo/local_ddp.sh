#!/usr/bin/env bash
# GRPO on one machine, 1-8 GPUs of 80 GB or more: DDP training with one vLLM engine colocated in every
# training process (TRL's colocate mode with r1vision's VLM fixes).
#
#   NUM_GPUS=8 bash scripts/grpo/local_ddp.sh --model Qwen/Qwen2.5-VL-7B-Instruct --dataset DATA \
#       --task sgg --output_dir runs/sgg-7b [--config configs/recipes/X.yaml] [--any_config_field V]
#
# Sleep mode is the recipe's choice (vllm_enable_sleep_mode; the sync after a sleep re-pushes every
# weight, see `--dry-run`), not this script's. Check the run first, without a GPU:
#   r1vision grpo --config R --model M --generation_backend vllm_colocate --dry-run --gpus N
# Environment: NUM_GPUS (default: all visible GPUs), VLLM_MEM (vLLM's share of each GPU, default 0.3),
# USE_VLLM (default true; false generates with HF), ACCELERATE_CONFIG (default multi_gpu.yaml;
# deepspeed_zero2.yaml shards optimizer states), MASTER_PORT.
# No GPU (NUM_GPUS unset and nvidia-smi missing or listing none): one process on the CPU, HF generation.
# PYTHON: the interpreter with r1vision (default: the checkout's .venv, else the active venv, else
# python3). Paths are taken relative to the directory you run it from.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_common.sh"
NUM_GPUS="$(r1v_num_gpus)"
if [[ "$NUM_GPUS" -eq 0 ]]; then
  echo "local_ddp.sh: no GPU found (NUM_GPUS unset, nvidia-smi missing or listing none): one process on the CPU," \
    "generating with transformers" >&2
  exec "$PYTHON" -m r1vision.cli grpo --use_cpu true "$@"
fi
VLLM_MEM="${VLLM_MEM:-0.3}"
USE_VLLM="${USE_VLLM:-true}"
ACCELERATE_CONFIG="${ACCELERATE_CONFIG:-$R1V_ROOT/configs/accelerate/multi_gpu.yaml}"
if [[ "$NUM_GPUS" -lt 1 || "$NUM_GPUS" -gt 8 ]]; then
  echo "local_ddp.sh: NUM_GPUS must be 1..8 (got '$NUM_GPUS'); use the sbatch launchers for more" >&2
  exit 2
fi
VLLM_ARGS=()
if [[ "$USE_VLLM" == "true" ]]; then
  VLLM_ARGS=(--generation_backend vllm_colocate --vllm_gpu_memory_utilization "$VLLM_MEM")
fi
exec "${ACCELERATE[@]}" --config_file "$ACCELERATE_CONFIG" --num_machines 1 --num_processes "$NUM_GPUS" \
  --main_process_port "${MASTER_PORT:-29500}" \
  -m r1vision.cli grpo "${VLLM_ARGS[@]}" "$@"
