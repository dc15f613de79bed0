#!/usr/bin/env bash
#SBATCH --job-name=r1vision-grpo-z3
#SBATCH --nodes=3
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=64
#SBATCH --time=24:00:00
#SBATCH --output=logs/%x-%j.out
#SBATCH --signal=USR1@300
#SBATCH --requeue
# Multi-node GRPO on 24 GB cards (R1-SGG's layout), DeepSpeed ZeRO-3, one `accelerate launch` per
# training node. Every srun step asks for its GPUs and CPUs explicitly (a step inherits neither on many
# Slurm versions). Two layouts:
#
# PER_RANK=0 (default): the first node runs one vLLM server (`r1vision vllm-serve --server vllm`, data
#   parallel over its GPUs, VLLM_TP GPUs per replica) for TRL's server mode; the other nodes train; the
#   second node is the main training process.
#   sbatch --nodes=3 scripts/grpo/sbatch_zero3_server.sh --model M --dataset D --task sgg --output_dir O
# PER_RANK=1: every node runs `r1vision vllm-serve` with one server per training process on its first
#   VLLM_GPUS GPUs (VLLM_GPUS = training GPUs per node; tensor parallel 1, as weights are pushed into each
#   server's in-process engine) and trains on the others; each process talks to its own server on
#   127.0.0.1:VLLM_PORT + local rank (--vllm_server_per_rank). vllm-serve stops a node's servers when its
#   training ends, and stops the training when a server dies.
#   PER_RANK=1 VLLM_GPUS=4 sbatch --nodes=2 scripts/grpo/sbatch_zero3_server.sh --config configs/recipes/sgg_grpo_24gb.yaml ...
#
# The servers read the recipe (--config) and the budget/length flags of the command line. Check the run
# first, without a GPU: r1vision grpo --config R --dry-run --gpus TRAINING_GPUS --zero 3 --card-gb 24.
# Environment: GPUS_PER_NODE (8), CPUS_PER_NODE (SLURM_CPUS_PER_TASK, else 64), VLLM_PORT (8000),
# VLLM_MEM (0.9), VLLM_GPUS (PER_RANK=1: 4), VLLM_TP (PER_RANK=0: 1), SERVER_ARGS (more `r1vision
# vllm-serve` flags), DS_CONFIG (zero3.json; try zero3_offload.json when it does not fit), HEALTH_TIMEOUT
# (900 s), MASTER_PORT (29500).
set -euo pipefail
ROOT="${SLURM_SUBMIT_DIR:-$(pwd)}"
# The interpreter with r1vision (exported into the srun shells): $PYTHON, else the checkout's .venv, else python3.
PYTHON="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || command -v python3)}"
export PYTHON
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
CPUS_PER_NODE="${CPUS_PER_NODE:-${SLURM_CPUS_PER_TASK:-64}}"
VLLM_PORT="${VLLM_PORT:-8000}"
VLLM_MEM="${VLLM_MEM:-0.9}"
VLLM_TP="${VLLM_TP:-1}"
DS_CONFIG="${DS_CONFIG:-$ROOT/configs/deepspeed/zero3.json}"
HEALTH_TIMEOUT="${HEALTH_TIMEOUT:-900}"
PER_RANK="${PER_RANK:-0}"
mapfile -t HOSTS < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
MASTER_PORT="${MASTER_PORT:-29500}"
# shellcheck source=scripts/grpo/server_args.sh
source "$ROOT/scripts/grpo/server_args.sh"
SERVE="${SERVE_FLAGS[*]@Q} ${SERVER_ARGS:-}"  # quoted for the per-node shells below
mkdir -p "$ROOT/logs"
cd "$ROOT"
# Preemption: a signal saves a checkpoint and the job requeues itself; RESUME (auto) says where it resumes.
source "$ROOT/scripts/_preempt.sh"
export RESUME="${RESUME:-auto}"
STEP=(--ntasks-per-node=1 --gpus-per-node="$GPUS_PER_NODE" --cpus-per-task="$CPUS_PER_NODE")

if [[ "$PER_RANK" == "1" ]]; then
  VLLM_GPUS="${VLLM_GPUS:-4}"
  TRAIN_PER_NODE=$((GPUS_PER_NODE - VLLM_GPUS))
  if [[ "$VLLM_TP" -ne 1 ]]; then
    echo "sbatch_zero3_server.sh: PER_RANK=1 needs VLLM_TP=1 (weights are pushed into each server's" \
      "in-process engine, which tensor-parallel workers do not share); use PER_RANK=0 for tensor parallel" >&2
    exit 2
  fi
  if [[ "$TRAIN_PER_NODE" -lt 1 || "$VLLM_GPUS" -ne "$TRAIN_PER_NODE" ]]; then
    echo "sbatch_zero3_server.sh: PER_RANK=1 needs VLLM_GPUS = GPUS_PER_NODE - VLLM_GPUS (one server per" \
      "training process; got GPUS_PER_NODE=$GPUS_PER_NODE VLLM_GPUS=$VLLM_GPUS)" >&2
    exit 2
  fi
  MASTER_ADDR="${HOSTS[0]}"
  NNODES="${#HOSTS[@]}"
  export MASTER_ADDR MASTER_PORT GPUS_PER_NODE DS_CONFIG NNODES VLLM_PORT VLLM_MEM VLLM_GPUS
  export TRAIN_PER_NODE HEALTH_TIMEOUT SERVE ROOT
  # On each node: servers on GPUs 0..VLLM_GPUS-1, training on the rest; machine rank = SLURM_NODEID.
  exec srun --nodes="$NNODES" "${STEP[@]}" bash -c '
    eval "FLAGS=($SERVE)"
    exec env CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((VLLM_GPUS - 1)))" "$PYTHON" -m r1vision.cli vllm-serve "${FLAGS[@]}" \
      --num-servers "$TRAIN_PER_NODE" --base-port "$VLLM_PORT" \
      --gpu-memory-utilization "$VLLM_MEM" --health-timeout "$HEALTH_TIMEOUT" \
      --log-dir "$ROOT/logs/$(hostname)" -- \
      env CUDA_VISIBLE_DEVICES="$(seq -s, "$VLLM_GPUS" $((GPUS_PER_NODE - 1)))" \
      "$PYTHON" -m accelerate.commands.launch --use_deepspeed --zero3_init_flag true \
      --deepspeed_config_file "$DS_CONFIG" \
      --num_machines "$NNODES" --num_processes $((NNODES * TRAIN_PER_NODE)) \
      --machine_rank "$SLURM_NODEID" --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
      --rdzv_backend static --same_network \
      -m r1vision.cli grpo --resume_from_checkpoint "$RESUME" --generation_backend vllm_server --vllm_server_per_rank true \
      --vllm_server_host 127.0.0.1 --vllm_server_port "$VLLM_PORT" "$@"
  ' r1vision-grpo "$@" || status=$?
r1v_requeue_if_preempted "$(r1v_output_dir "$@")"
exit "${status:-0}"
fi

if [[ "${#HOSTS[@]}" -lt 2 ]]; then echo "sbatch_zero3_server.sh: needs >= 2 nodes" >&2; exit 2; fi
if (( GPUS_PER_NODE % VLLM_TP != 0 )); then
  echo "sbatch_zero3_server.sh: VLLM_TP=$VLLM_TP must divide GPUS_PER_NODE=$GPUS_PER_NODE" >&2
  exit 2
fi
VLLM_HOST="${HOSTS[0]}"
MASTER_ADDR="${HOSTS[1]}"
TRAIN_NODES=$((${#HOSTS[@]} - 1))
export MASTER_ADDR MASTER_PORT GPUS_PER_NODE DS_CONFIG TRAIN_NODES VLLM_HOST VLLM_PORT

eval "FLAGS=($SERVE)"
srun --nodes=1 --ntasks=1 --nodelist="$VLLM_HOST" "${STEP[@]}" \
  "$PYTHON" -m r1vision.cli vllm-serve --server vllm "${FLAGS[@]}" --host 0.0.0.0 --base-port "$VLLM_PORT" \
  --data-parallel-size $((GPUS_PER_NODE / VLLM_TP)) --tensor-parallel-size "$VLLM_TP" \
  --gpu-memory-utilization "$VLLM_MEM" --health-timeout "$HEALTH_TIMEOUT" --log-dir "$ROOT/logs" &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null || true' EXIT

deadline=$((SECONDS + HEALTH_TIMEOUT))
until curl -sf "http://${VLLM_HOST}:${VLLM_PORT}/health" >/dev/null; do
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "vLLM server on $VLLM_HOST exited" >&2; exit 1; fi
  if ((SECONDS > deadline)); then echo "vLLM server on $VLLM_HOST not healthy after ${HEALTH_TIMEOUT}s" >&2; exit 1; fi
  sleep 10
done

# Training nodes are 1..N-1; their machine rank is SLURM_NODEID - 1 (expanded on each node).
srun --nodes="$TRAIN_NODES" --relative=1 "${STEP[@]}" bash -c '
  exec "$PYTHON" -m accelerate.commands.launch --use_deepspeed --zero3_init_flag true \
    --deepspeed_config_file "$DS_CONFIG" \
    --num_machines "$TRAIN_NODES" --num_processes $((TRAIN_NODES * GPUS_PER_NODE)) \
    --machine_rank $((SLURM_NODEID - 1)) --main_process_ip "$MASTER_ADDR" --main_process_port "$MASTER_PORT" \
    --rdzv_backend static --same_network \
    -m r1vision.cli grpo --generation_backend vllm_server --vllm_server_host "$VLLM_HOST" \
    --vllm_server_port "$VLLM_PORT" "$@"
' r1vision-grpo "$@"
