#!/usr/bin/env bash
#SBATCH --job-name=r1vision-grpo-z3
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%j.out
# Multi-node GRPO on 24 GB cards (R1-SGG's layout), DeepSpeed ZeRO-3, one `accelerate launch` per
# training node. Two layouts:
#
# PER_RANK=0 (default): the first node runs one TRL vLLM server (`trl vllm-serve`, data parallel over its
#   GPUs), the other nodes train; the second node is the main training process.
#   sbatch --nodes=3 scripts/grpo/sbatch_zero3_server.sh --model M --dataset D --task sgg --output_dir O
# PER_RANK=1: every node runs `r1vision vllm-serve` with one server per training process on its first
#   VLLM_GPUS GPUs (VLLM_GPUS = training GPUs per node x VLLM_TP) and trains on the others; each process
#   talks to its own server on 127.0.0.1:VLLM_PORT + local rank (--vllm_server_per_rank). vllm-serve
#   stops a node's servers when its training ends, and stops the training when a server dies.
#   PER_RANK=1 VLLM_GPUS=4 sbatch --nodes=2 scripts/grpo/sbatch_zero3_server.sh --model M ...
#
# Environment: GPUS_PER_NODE (8), VLLM_PORT (8000), VLLM_MEM (0.9), VLLM_GPUS (PER_RANK=1: 4), VLLM_TP (1),
# SERVER_ARGS (more `r1vision vllm-serve` flags; --min_pixels/--max_pixels/--max_images_per_prompt on the
# command line are passed on), DS_CONFIG (zero3.json; try zero3_offload.json when it does not fit),
# HEALTH_TIMEOUT (900 s), MASTER_PORT (29500).
set -euo pipefail
ROOT="${SLURM_SUBMIT_DIR:-$(pwd)}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
VLLM_PORT="${VLLM_PORT:-8000}"
VLLM_MEM="${VLLM_MEM:-0.9}"
DS_CONFIG="${DS_CONFIG:-$ROOT/configs/deepspeed/zero3.json}"
HEALTH_TIMEOUT="${HEALTH_TIMEOUT:-900}"
PER_RANK="${PER_RANK:-0}"
mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
MASTER_PORT="${MASTER_PORT:-29500}"
MODEL=""
SERVER_FLAGS="${SERVER_ARGS:-}"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --model) MODEL="${args[$((i + 1))]:-}" ;;
    --min_pixels|--max_pixels|--max_images_per_prompt)  # the servers must resize like the trainer
      SERVER_FLAGS+=" $(echo "${args[$i]}" | tr _ -) ${args[$((i + 1))]:-}" ;;
  esac
done
[[ -n "$MODEL" ]] || { echo "sbatch_zero3_server.sh: --model is required" >&2; exit 2; }
mkdir -p "$ROOT/logs"
cd "$ROOT"

if [[ "$PER_RANK" == "1" ]]; then
  VLLM_GPUS="${VLLM_GPUS:-4}"
  VLLM_TP="${VLLM_TP:-1}"
  TRAIN_PER_NODE=$((GPUS_PER_NODE - VLLM_GPUS))
  if [[ "$TRAIN_PER_NODE" -lt 1 || "$VLLM_GPUS" -ne $((TRAIN_PER_NODE * VLLM_TP)) ]]; then
    echo "sbatch_zero3_server.sh: PER_RANK=1 needs VLLM_GPUS = (GPUS_PER_NODE - VLLM_GPUS) x VLLM_TP" \
      "(got GPUS_PER_NODE=$GPUS_PER_NODE VLLM_GPUS=$VLLM_GPUS VLLM_TP=$VLLM_TP)" >&2
    exit 2
  fi
  MASTER_ADDR="${HOSTS[0]}"
  NNODES="${#HOSTS[@]}"
  export MASTER_ADDR MASTER_PORT GPUS_PER_NODE DS_CONFIG NNODES VLLM_PORT VLLM_MEM VLLM_GPUS VLLM_TP
  export TRAIN_PER_NODE HEALTH_TIMEOUT MODEL SERVER_FLAGS ROOT
  # On each node: servers on GPUs 0..VLLM_GPUS-1, training on the rest; machine rank = SLURM_NODEID.
  exec srun --nodes="$NNODES" --ntasks-per-node=1 bash -c '
    read -r -a FLAGS <<< "$SERVER_FLAGS"
    exec env CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((VLLM_GPUS - 1)))" r1vision vllm-serve --model "$MODEL" \
      --num-servers "$TRAIN_PER_NODE" --base-port "$VLLM_PORT" --tensor-parallel-size "$VLLM_TP" \
      --gpu-memory-utilization "$VLLM_MEM" --health-timeout "$HEALTH_TIMEOUT" \
      --log-dir "$ROOT/logs/$(hostname)" "${FLAGS[@]}" -- \
      env CUDA_VISIBLE_DEVICES="$(seq -s, "$VLLM_GPUS" $((GPUS_PER_NODE - 1)))" \
      accelerate launch --use_deepspeed --zero3_init_flag true \
      --deepspeed_config_file "$DS_CONFIG" \
      --num_machines "$NNODES" --num_processes $((NNODES * TRAIN_PER_NODE)) \
      --machine_rank "$SLURM_NODEID" --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
      --rdzv_backend static --same_network \
      -m r1vision.cli grpo --generation_backend vllm_server --vllm_server_per_rank true \
      --vllm_server_host 127.0.0.1 --vllm_server_port "$VLLM_PORT" "$@"
  ' r1vision-grpo "$@"
fi

if [[ "${#HOSTS[@]}" -lt 2 ]]; then echo "sbatch_zero3_server.sh: needs >= 2 nodes" >&2; exit 2; fi
VLLM_HOST="${HOSTS[0]}"
MASTER_ADDR="${HOSTS[1]}"
TRAIN_NODES=$((${#HOSTS[@]} - 1))
export MASTER_ADDR MASTER_PORT GPUS_PER_NODE DS_CONFIG TRAIN_NODES VLLM_HOST VLLM_PORT

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
  exec accelerate launch --use_deepspeed --zero3_init_flag true \
    --deepspeed_config_file "$DS_CONFIG" \
    --num_machines "$TRAIN_NODES" --num_processes $((TRAIN_NODES * GPUS_PER_NODE)) \
    --machine_rank $((SLURM_NODEID - 1)) --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
    --rdzv_backend static --same_network \
    -m r1vision.cli grpo --use_vllm true --vllm_mode server --vllm_server_host "$VLLM_HOST" \
    --vllm_server_port "$VLLM_PORT" "$@"
' r1vision-grpo "$@"
