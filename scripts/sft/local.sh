#!/usr/bin/env bash
# SFT on one machine (1-8 GPUs; on a CPU-only machine add --use_cpu true and NUM_GPUS=1), any --task.
#
#   NUM_GPUS=4 bash scripts/sft/local.sh --model M --dataset D --task geometry --output_dir runs/sft
#
# Environment: NUM_GPUS (default: visible GPUs, at least 1), ACCELERATE_CONFIG (multi_gpu.yaml;
# deepspeed_zero3.yaml for 24 GB cards), MASTER_PORT.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NUM_GPUS="${NUM_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}"
NUM_GPUS=$((NUM_GPUS > 0 ? NUM_GPUS : 1))
cd "$ROOT"
if [[ "$NUM_GPUS" -eq 1 ]]; then
  exec python -m r1vision.cli sft "$@"
fi
exec accelerate launch --config_file "${ACCELERATE_CONFIG:-$ROOT/configs/accelerate/multi_gpu.yaml}" \
  --num_machines 1 --num_processes "$NUM_GPUS" --main_process_port "${MASTER_PORT:-29500}" \
  -m r1vision.cli sft "$@"
