#!/usr/bin/env bash
# On a GPU node with the full stack installed (vLLM too), after scripts/gpu_check.sh passed: environment, every shipped recipe's dry run,
# the selftest for each layout x generation backend (2 GRPO steps on a tiny model each), and the backend
# benchmark on a random-weight model of real shape (no download: built from its config).
#
#   bash scripts/gpu_stack_check.sh            # everything, results under gpu_check/
#   QUICK=1 bash scripts/gpu_stack_check.sh    # selftests only (no benchmark)
#
# Environment: PYTHON (python), OUT (gpu_check), NPROC (processes for ddp/zero3: 2, or 1 with one GPU),
# SHAPE (benchmark model shape: qwen2.5-vl-3b), ZERO (benchmark ZeRO stages: 0,3), LAYOUTS
# (single ddp zero3), BACKENDS (hf vllm_colocate vllm_server), QUICK (0).
# Exit code: 0 only if every check passed. The benchmark table (markdown) ends up in OUT/bench.md, ready
# for benchmarks/RESULTS.md.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || echo python3)}"
OUT="${OUT:-gpu_check}"
GPUS="$(nvidia-smi -L 2>/dev/null | wc -l)"
NPROC="${NPROC:-$([[ "$GPUS" -ge 2 ]] && echo 2 || echo 1)}"
SHAPE="${SHAPE:-qwen2.5-vl-3b}"
ZERO="${ZERO:-0,3}"
read -r -a LAYOUTS <<< "${LAYOUTS:-single ddp zero3}"
read -r -a BACKENDS <<< "${BACKENDS:-hf vllm_colocate vllm_server}"
QUICK="${QUICK:-0}"
mkdir -p "$OUT"
cd "$ROOT"
if [[ "$GPUS" -lt 1 ]]; then
  echo "gpu_check.sh: no GPU visible (nvidia-smi -L lists none); on CPU run: r1vision selftest" >&2
  exit 2
fi

declare -a SUMMARY=()
FAILED=0
check() {  # check NAME COMMAND...: run, log to OUT/NAME.log, record PASS/FAIL with the wall time
  local name="$1"; shift
  local start=$SECONDS
  if "$@" >"$OUT/$name.log" 2>&1; then
    SUMMARY+=("PASS  $name ($((SECONDS - start)) s)")
  else
    SUMMARY+=("FAIL  $name ($((SECONDS - start)) s): see $OUT/$name.log")
    FAILED=1
  fi
  echo "${SUMMARY[-1]}"
}

check environment bash -c "nvidia-smi && $PYTHON -c 'import torch, trl, transformers, vllm; \
print(torch.__version__, torch.version.cuda, torch.cuda.device_count(), trl.__version__, \
transformers.__version__, vllm.__version__)'"

# Every shipped recipe resolves and fits (or says why not) on this node's cards.
CARD_GB="$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1 | awk '{print int($1 / 1024)}')"
for recipe in configs/recipes/*.yaml; do
  name="$(basename "$recipe" .yaml)"
  [[ "$name" == t2i_* ]] && continue  # text-to-image recipes: t2i-grpo, no VLM dry run
  model=()
  grep -q '^model:' "$recipe" || case "$name" in
    svg_*) model=(--model Qwen/Qwen3-VL-4B-Instruct) ;;
    *) model=(--model Qwen/Qwen2.5-VL-3B-Instruct) ;;
  esac
  budget=()  # no budget in the recipe: the processor's (up to 16384 tokens per image) would be judged
  grep -q '^max_pixels:' "$recipe" || budget=(--max_pixels 401408)
  kind=grpo; [[ "$name" == *sft* ]] && kind=sft
  check "dry-run-$name" "$PYTHON" -m r1vision.cli "$kind" --config "$recipe" "${model[@]}" "${budget[@]}" \
    --dry-run --gpus "$GPUS" --zero 3 --card-gb "$CARD_GB"
done

for layout in "${LAYOUTS[@]}"; do
  for backend in "${BACKENDS[@]}"; do
    if [[ "$layout" != single && "$NPROC" -lt 2 ]]; then continue; fi
    check "selftest-$layout-$backend" "$PYTHON" -m r1vision.cli selftest --layout "$layout" \
      --nproc "$NPROC" --backend "$backend"
  done
done

if [[ "$QUICK" != 1 ]]; then
  check "bench-$SHAPE" "$PYTHON" benchmarks/bench_backends.py --shape "$SHAPE" --zero "$ZERO" \
    --backends hf,vllm_colocate --json-out "$OUT/bench.json"
  # the table the benchmark printed, for benchmarks/RESULTS.md
  grep '^|' "$OUT/bench-$SHAPE.log" > "$OUT/bench.md" || true
fi

echo
echo "gpu_check summary ($GPUS GPU(s), ${CARD_GB} GiB each):"
printf '  %s\n' "${SUMMARY[@]}" | tee "$OUT/summary.txt"
exit "$FAILED"
