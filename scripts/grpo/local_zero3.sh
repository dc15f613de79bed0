#!/usr/bin/env bash
# GRPO on one machine of 24 GB cards: vLLM on the first VLLM_GPUS GPUs, DeepSpeed ZeRO-3 training on
# the others (2-8 GPUs in all). `r1vision vllm-serve` starts the servers, waits for them, runs the
# training and stops the servers when it ends (or stops the training when a server dies).
#
#   NUM_GPUS=8 VLLM_GPUS=2 bash scripts/grpo/local_zero3.sh --model Qwen/Qwen2.5-VL-3B-Instruct \
#       --dataset DATA --task geometry --output_dir runs/geo-3b [--config R] [--any_config_field V]
#   PER_RANK=1 NUM_GPUS=8 VLLM_GPUS=4 bash scripts/grpo/local_zero3.sh --config configs/recipes/sgg_grpo_24gb.yaml \
#       --output_dir runs/sgg-24gb
#
# PER_RANK=0 (default): one vLLM server (`r1vision vllm-serve --server vllm`, data parallel over the
# VLLM_GPUS, VLLM_TP GPUs per replica) for TRL's server mode: rank 0 gathers the prompts, weights sync
# over NCCL. PER_RANK=1: one r1vision server per training process (VLLM_GPUS = training GPUs, tensor
# parallel 1: the weights are pushed into each server's in-process engine), server i on VLLM_PORT + i.
# Both read the recipe (--config) and the budget/length flags of the command line, so the servers
# resize images and size sequences like the trainer. Check the run first, without a GPU:
#   r1vision grpo --config R --dry-run --gpus TRAINING_GPUS --zero 3 --card-gb 24
# Environment: NUM_GPUS (default: all visible), VLLM_GPUS (default 1), VLLM_PORT (8000), VLLM_MEM (0.9),
# VLLM_TP (1; PER_RANK=0 only), SERVER_ARGS (more `r1vision vllm-serve` flags), DS_CONFIG
# (configs/deepspeed/zero3.json; zero3_offload.json when it does not fit), HEALTH_TIMEOUT (seconds to wait
# for the servers, 600), MASTER_PORT.
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
# shellcheck source=scripts/grpo/server_args.sh
source "$ROOT/scripts/grpo/server_args.sh"
read -r -a EXTRA <<< "${SERVER_ARGS:-}"

SERVER_GPUS=$(seq -s, 0 $((VLLM_GPUS - 1)))
TRAIN_GPU_IDS=$(seq -s, "$VLLM_GPUS" $((NUM_GPUS - 1)))
TRAIN=("${ACCELERATE[@]}" --use_deepspeed --deepspeed_config_file "$DS_CONFIG" --zero3_init_flag true
  --num_machines 1 --num_processes "$TRAIN_GPUS"
  --main_process_port "${MASTER_PORT:-29500}" -m r1vision.cli grpo)

if [[ "$PER_RANK" == "1" ]]; then
  if [[ "$VLLM_TP" -ne 1 ]]; then
    echo "local_zero3.sh: PER_RANK=1 needs VLLM_TP=1 (weights are pushed into each server's in-process" \
      "engine, which tensor-parallel workers do not share); use PER_RANK=0 for tensor parallel" >&2
    exit 2
  fi
  if [[ "$VLLM_GPUS" -ne "$TRAIN_GPUS" ]]; then
    echo "local_zero3.sh: PER_RANK=1 needs VLLM_GPUS = training GPUs" \
      "(got VLLM_GPUS=$VLLM_GPUS, $TRAIN_GPUS training GPUs)" >&2
    exit 2
  fi
  exec env CUDA_VISIBLE_DEVICES="$SERVER_GPUS" "$PYTHON" -m r1vision.cli vllm-serve "${SERVE_FLAGS[@]}" \
    --num-servers "$TRAIN_GPUS" --base-port "$VLLM_PORT" \
    --gpu-memory-utilization "$VLLM_MEM" --health-timeout "$HEALTH_TIMEOUT" --log-dir "$ROOT/logs" \
    "${EXTRA[@]}" -- env CUDA_VISIBLE_DEVICES="$TRAIN_GPU_IDS" "${TRAIN[@]}" \
    --generation_backend vllm_server --vllm_server_per_rank true --vllm_server_host 127.0.0.1 \
    --vllm_server_port "$VLLM_PORT" "$@"
fi
if (( VLLM_GPUS % VLLM_TP != 0 )); then
  echo "local_zero3.sh: VLLM_TP=$VLLM_TP must divide VLLM_GPUS=$VLLM_GPUS" >&2
  exit 2
fi
exec env CUDA_VISIBLE_DEVICES="$SERVER_GPUS" "$PYTHON" -m r1vision.cli vllm-serve --server vllm "${SERVE_FLAGS[@]}" \
  --data-parallel-size $((VLLM_GPUS / VLLM_TP)) --tensor-parallel-size "$VLLM_TP" \
  --base-port "$VLLM_PORT" --gpu-memory-utilization "$VLLM_MEM" --health-timeout "$HEALTH_TIMEOUT" \
  --log-dir "$ROOT/logs" "${EXTRA[@]}" -- env CUDA_VISIBLE_DEVICES="$TRAIN_GPU_IDS" "${TRAIN[@]}" \
  --generation_backend vllm_server --vllm_server_host 127.0.0.1 --vllm_server_port "$VLLM_PORT" "$@"
