#!/usr/bin/env bash
# Batched, resumable inference on one machine: one `r1vision infer` process per GPU (accelerate launch),
# each on its own shard of the rows (rerun the same command to resume), then `r1vision eval`.
#
#   NUM_GPUS=4 bash scripts/inference/local.sh --task sgg --model runs/sgg-7b --dataset D --output_dir preds/sgg \
#       [--split test] [--batch-size 8] [--max-new-tokens 1024] [any other `r1vision infer` option]
#
# Environment: NUM_GPUS (default: the GPUs nvidia-smi lists; 0, 1 or no nvidia-smi: one process, on the
# CPU when there is no GPU), EVAL (true: run `r1vision eval` afterwards; needs --task, --dataset, --output_dir
# among the arguments), PYTHON (default: the checkout's .venv, else the active venv, else python3).
# Paths are taken relative to the directory you run it from.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../_common.sh"
NUM_GPUS="$(r1v_num_gpus)"
EVAL="${EVAL:-true}"
# shellcheck source=scripts/inference/eval_args.sh
source "$(dirname "${BASH_SOURCE[0]}")/eval_args.sh"
if [[ "$NUM_GPUS" -le 0 ]]; then
  echo "inference/local.sh: no GPU found (NUM_GPUS unset, nvidia-smi missing or listing none): one process on the CPU" >&2
fi
if [[ "$NUM_GPUS" -le 1 ]]; then
  "$PYTHON" -m r1vision.cli infer "$@"
else
  # r1vision infer deals rows round-robin to the launched processes; each writes shard-<rank>.jsonl.
  "${ACCELERATE[@]}" --multi_gpu --num_machines 1 --num_processes "$NUM_GPUS" \
    --main_process_port "${MASTER_PORT:-29500}" -m r1vision.cli infer "$@" \
    || { echo "inference/local.sh: inference failed; rerun the same command to resume" >&2; exit 1; }
fi
if [[ "$EVAL" == "true" && -n "$TASK" && -n "$DATASET" && -n "$OUT" ]]; then
  "$PYTHON" -m r1vision.cli eval --task "$TASK" --dataset "$DATASET" --pred "$OUT" --split "$SPLIT" \
    --json-out "$OUT/metrics.json"
fi
