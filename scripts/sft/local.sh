#!/usr/bin/env bash
# SFT on one machine (1-8 GPUs, or the CPU when there is none), any --task.
#
#   NUM_GPUS=4 bash scripts/sft/local.sh --config sgg_sft --model M --dataset D --output_dir runs/sft
#
# Environment: NUM_GPUS (default: the GPUs nvidia-smi lists; 0 or no nvidia-smi: one process on the CPU),
# ACCELERATE_CONFIG (multi_gpu.yaml; deepspeed_zero3.yaml for 24 GB cards), MASTER_PORT, PYTHON (the
# interpreter with r1vision; default: the checkout's .venv, else the active venv, else python3).
# Paths are taken relative to the directory you run it from.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_common.sh"
NUM_GPUS="$(r1v_num_gpus)"
if [[ "$NUM_GPUS" -le 0 ]]; then
  echo "sft/local.sh: no GPU found (NUM_GPUS unset, nvidia-smi missing or listing none): one process on the CPU" >&2
  exec "$PYTHON" -m r1vision.cli sft --use_cpu true "$@"
fi
if [[ "$NUM_GPUS" -eq 1 ]]; then
  exec "$PYTHON" -m r1vision.cli sft "$@"
fi
exec "${ACCELERATE[@]}" --config_file "${ACCELERATE_CONFIG:-$R1V_ROOT/configs/accelerate/multi_gpu.yaml}" \
  --num_machines 1 --num_processes "$NUM_GPUS" --main_process_port "${MASTER_PORT:-29500}" \
  -m r1vision.cli sft "$@"
