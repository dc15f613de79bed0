#!/usr/bin/env bash
#SBATCH --job-name=r1vision-grpo-z3
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%j.out
# Multi-node GRPO on 24 GB cards (R1-SGG's layout): the first node runs a vLLM server (data parallel over
# its GPUs), the other nodes train with DeepSpeed ZeRO-3, one `accelerate launch` per training node.
# Rendezvous from SLURM: the second node is the main training process.
#
#   sbatch --nodes=3 scripts/grpo/sbatch_zero3_server.sh --model M --dataset D --task sgg --output_dir O
#
# Environment: GPUS_PER_NODE (8), VLLM_PORT (8000), VLLM_MEM (0.9), DS_CONFIG (zero3.json; try
# zero3_offload.json when it does not fit), HEALTH_TIMEOUT (900 s), MASTER_PORT (29500).
set -euo pipefail
ROOT="${SLURM_SUBMIT_DIR:-$(pwd)}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
VLLM_PORT="${VLLM_PORT:-8000}"
VLLM_MEM="${VLLM_MEM:-0.9}"
DS_CONFIG="${DS_CONFIG:-$ROOT/configs/deepspeed/zero3.json}"
HEALTH_TIMEOUT="${HEALTH_TIMEOUT:-900}"
mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
if [[ "${#HOSTS[@]}" -lt 2 ]]; then echo "sbatch_zero3_server.sh: needs >= 2 nodes" >&2; exit 2; fi
VLLM_HOST="${HOSTS[0]}"
MASTER_ADDR="${HOSTS[1]}"
MASTER_PORT="${MASTER_PORT:-29500}"
TRAIN_NODES=$((${#HOSTS[@]} - 1))
MODEL=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [[ "${args[$i]}" == "--model" ]]; then MODEL="${args[$((i + 1))]:-}"; fi
done
[[ -n "$MODEL" ]] || { echo "sbatch_zero3_server.sh: --model is required" >&2; exit 2; }
export MASTER_ADDR MASTER_PORT GPUS_PER_NODE DS_CONFIG TRAIN_NODES VLLM_HOST VLLM_PORT
mkdir -p "$ROOT/logs"
cd "$ROOT"

srun --nodes=1 --ntasks=1 --nodelist="$VLLM_HOST" \
  trl vllm-serve --model "$MODEL" --port "$VLLM_PORT" --data_parallel_size "$GPUS_PER_NODE" \
  --gpu_memory_utilization "$VLLM_MEM" &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT

deadline=$((SECONDS + HEALTH_TIMEOUT))
until curl -sf "http://${VLLM_HOST}:${VLLM_PORT}/health/" >/dev/null; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "vLLM server on $VLLM_HOST exited" >&2; exit 1; fi
  if ((SECONDS > deadline)); then echo "vLLM server on $VLLM_HOST not healthy after ${HEALTH_TIMEOUT}s" >&2; exit 1; fi
  sleep 10
done

# Training nodes are 1..N-1; their machine rank is SLURM_NODEID - 1 (expanded on each node).
srun --nodes="$TRAIN_NODES" --ntasks-per-node=1 --relative=1 bash -c '
  exec accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml \
    --deepspeed_config_file "$DS_CONFIG" \
    --num_machines "$TRAIN_NODES" --num_processes $((TRAIN_NODES * GPUS_PER_NODE)) \
    --machine_rank $((SLURM_NODEID - 1)) --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
    --rdzv_backend static --same_network \
    -m r1vision.cli grpo --use_vllm true --vllm_mode server --vllm_server_host "$VLLM_HOST" \
    --vllm_server_port "$VLLM_PORT" "$@"
' r1vision-grpo "$@"
