#!/usr/bin/env bash
# GRPO on one machine of 24 GB cards: a vLLM server on the first VLLM_GPUS GPUs, DeepSpeed ZeRO-3
# training on the others (2-8 GPUs in all). The server is stopped when training ends or dies.
#
#   NUM_GPUS=8 VLLM_GPUS=2 bash scripts/grpo/local_zero3.sh --model Qwen/Qwen2.5-VL-3B-Instruct \
#       --dataset DATA --task geometry --output_dir runs/geo-3b [--any_config_field V]
#
# Environment: NUM_GPUS (default: all visible), VLLM_GPUS (default 1; the server runs data parallel over
# them), VLLM_PORT (8000), VLLM_MEM (0.9), DS_CONFIG (configs/deepspeed/zero3.json; zero3_offload.json
# when it does not fit), HEALTH_TIMEOUT (seconds to wait for the server, 600), MASTER_PORT.
# The model must be the first arguments' --model value, as the server loads the same weights.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
NUM_GPUS="${NUM_GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}"
VLLM_GPUS="${VLLM_GPUS:-1}"
VLLM_PORT="${VLLM_PORT:-8000}"
VLLM_MEM="${VLLM_MEM:-0.9}"
DS_CONFIG="${DS_CONFIG:-$ROOT/configs/deepspeed/zero3.json}"
HEALTH_TIMEOUT="${HEALTH_TIMEOUT:-600}"
TRAIN_GPUS=$((NUM_GPUS - VLLM_GPUS))
if [[ "$NUM_GPUS" -gt 8 || "$TRAIN_GPUS" -lt 1 ]]; then
  echo "local_zero3.sh: need 2-8 GPUs with VLLM_GPUS < NUM_GPUS (got $NUM_GPUS, $VLLM_GPUS)" >&2
  exit 2
fi
MODEL=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [[ "${args[$i]}" == "--model" ]]; then MODEL="${args[$((i + 1))]:-}"; fi
done
[[ -n "$MODEL" ]] || { echo "local_zero3.sh: --model is required" >&2; exit 2; }

SERVER_GPUS=$(seq -s, 0 $((VLLM_GPUS - 1)))
TRAIN_GPU_IDS=$(seq -s, "$VLLM_GPUS" $((NUM_GPUS - 1)))
cd "$ROOT"
CUDA_VISIBLE_DEVICES="$SERVER_GPUS" trl vllm-serve --model "$MODEL" --port "$VLLM_PORT" \
  --data_parallel_size "$VLLM_GPUS" --gpu_memory_utilization "$VLLM_MEM" &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true' EXIT

deadline=$((SECONDS + HEALTH_TIMEOUT))
until curl -sf "http://127.0.0.1:${VLLM_PORT}/health/" >/dev/null; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "local_zero3.sh: vLLM server exited" >&2; exit 1; fi
  if ((SECONDS > deadline)); then
    echo "local_zero3.sh: vLLM server not healthy after ${HEALTH_TIMEOUT}s on port $VLLM_PORT" >&2
    exit 1
  fi
  sleep 5
done

CUDA_VISIBLE_DEVICES="$TRAIN_GPU_IDS" accelerate launch \
  --config_file "$ROOT/configs/accelerate/deepspeed_zero3.yaml" --deepspeed_config_file "$DS_CONFIG" \
  --num_machines 1 --num_processes "$TRAIN_GPUS" --main_process_port "${MASTER_PORT:-29500}" \
  -m r1vision.cli grpo --use_vllm true --vllm_mode server --vllm_server_host 127.0.0.1 \
  --vllm_server_port "$VLLM_PORT" "$@"
