#!/usr/bin/env bash
# GRPO on one machine of 24 GB cards: vLLM on the first VLLM_GPUS GPUs, DeepSpeed ZeRO-3 training on
# the others (2-8 GPUs in all). The servers are stopped when training ends or dies.
#
#   NUM_GPUS=8 VLLM_GPUS=2 bash scripts/grpo/local_zero3.sh --model Qwen/Qwen2.5-VL-3B-Instruct \
#       --dataset DATA --task geometry --output_dir runs/geo-3b [--any_config_field V]
#   PER_RANK=1 NUM_GPUS=8 VLLM_GPUS=4 bash scripts/grpo/local_zero3.sh --model ... (one server per trainer)
#
# PER_RANK=0 (default): one TRL server (`trl vllm-serve`, data parallel over the VLLM_GPUS), rank 0
# gathers the prompts, weights sync over NCCL. PER_RANK=1: `r1vision vllm-serve` starts one r1vision
# server per training process (VLLM_GPUS = training GPUs x VLLM_TP; server i on port VLLM_PORT + i), each
# process generates its own prompts there and pushes its weights over HTTP (--vllm_server_per_rank).
# Environment: NUM_GPUS (default: all visible), VLLM_GPUS (default 1), VLLM_PORT (8000), VLLM_MEM (0.9),
# VLLM_TP (1, PER_RANK=1 only), SERVER_ARGS (more `r1vision vllm-serve` flags, e.g. a pixel budget set in
# a recipe YAML; --min_pixels/--max_pixels/--max_images_per_prompt on the command line are passed on),
# DS_CONFIG (configs/deepspeed/zero3.json; zero3_offload.json when it does not fit), HEALTH_TIMEOUT
# (seconds to wait for the servers, 600), MASTER_PORT.
# The model must be the first arguments' --model value, as the servers load the same weights.
# PYTHON: the interpreter with r1vision (default: the checkout's .venv, else the active venv, else python3).
# Paths are taken relative to the directory you run it from.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_common.sh"
ROOT="$R1V_ROOT"
NUM_GPUS="$(r1v_num_gpus)"
if [[ "$NUM_GPUS" -eq 0 ]]; then
  echo "local_zero3.sh: no GPU found (NUM_GPUS unset, nvidia-smi missing or listing none); this layout needs" \
    "2-8 GPUs (vLLM + ZeRO-3 training). On a CPU use scripts/grpo/local_ddp.sh, which falls back to the CPU." >&2
  exit 2
fi
VLLM_GPUS="${VLLM_GPUS:-1}"
VLLM_PORT="${VLLM_PORT:-8000}"
VLLM_MEM="${VLLM_MEM:-0.9}"
VLLM_TP="${VLLM_TP:-1}"
PER_RANK="${PER_RANK:-0}"
DS_CONFIG="${DS_CONFIG:-$ROOT/configs/deepspeed/zero3.json}"
HEALTH_TIMEOUT="${HEALTH_TIMEOUT:-600}"
TRAIN_GPUS=$((NUM_GPUS - VLLM_GPUS))
if [[ "$NUM_GPUS" -gt 8 || "$TRAIN_GPUS" -lt 1 ]]; then
  echo "local_zero3.sh: need 2-8 GPUs with VLLM_GPUS < NUM_GPUS (got $NUM_GPUS, $VLLM_GPUS)" >&2
  exit 2
fi
MODEL=""
read -r -a BUDGET <<< "${SERVER_ARGS:-}"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --model) MODEL="${args[$((i + 1))]:-}" ;;
    --min_pixels|--max_pixels|--max_images_per_prompt)  # the servers must resize like the trainer
      BUDGET+=("$(echo "${args[$i]}" | tr _ -)" "${args[$((i + 1))]:-}") ;;
  esac
done
[[ -n "$MODEL" ]] || { echo "local_zero3.sh: --model is required" >&2; exit 2; }

SERVER_GPUS=$(seq -s, 0 $((VLLM_GPUS - 1)))
TRAIN_GPU_IDS=$(seq -s, "$VLLM_GPUS" $((NUM_GPUS - 1)))
TRAIN=("${ACCELERATE[@]}" --use_deepspeed --deepspeed_config_file "$DS_CONFIG" --zero3_init_flag true
  --num_machines 1 --num_processes "$TRAIN_GPUS"
  --main_process_port "${MASTER_PORT:-29500}" -m r1vision.cli grpo)

if [[ "$PER_RANK" == "1" ]]; then
  if [[ "$VLLM_GPUS" -ne $((TRAIN_GPUS * VLLM_TP)) ]]; then
    echo "local_zero3.sh: PER_RANK=1 needs VLLM_GPUS = training GPUs x VLLM_TP" \
      "(got VLLM_GPUS=$VLLM_GPUS, $TRAIN_GPUS training GPUs, VLLM_TP=$VLLM_TP)" >&2
    exit 2
  fi
  # vllm-serve waits for every server (HEALTH_TIMEOUT), runs the training, and stops the servers when
  # it ends; if a server dies it stops the training too.
  exec env CUDA_VISIBLE_DEVICES="$SERVER_GPUS" r1vision vllm-serve --model "$MODEL" \
    --num-servers "$TRAIN_GPUS" --base-port "$VLLM_PORT" --tensor-parallel-size "$VLLM_TP" \
    --gpu-memory-utilization "$VLLM_MEM" --health-timeout "$HEALTH_TIMEOUT" --log-dir "$ROOT/logs" \
    "${BUDGET[@]}" -- env CUDA_VISIBLE_DEVICES="$TRAIN_GPU_IDS" "${TRAIN[@]}" \
    --generation_backend vllm_server --vllm_server_per_rank true --vllm_server_host 127.0.0.1 \
    --vllm_server_port "$VLLM_PORT" "$@"
fi
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

CUDA_VISIBLE_DEVICES="$TRAIN_GPU_IDS" "${TRAIN[@]}" --use_vllm true --vllm_mode server \
  --vllm_server_host 127.0.0.1 --vllm_server_port "$VLLM_PORT" "$@"
