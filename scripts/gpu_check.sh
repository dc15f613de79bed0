#!/usr/bin/env bash
# The first thing to run on a GPU machine: r1vision against stock TRL on one card, ~9 minutes, no vLLM and
# no internet needed (scripts/gpu_check.py says what each phase checks). Ends with GPU-CHECK: PASS|FAIL.
#
#   bash scripts/gpu_check.sh [--out gpu_check] [--budget 540]     # on the GPU machine
#   bash scripts/gpu_check.sh --cpu-smoke --out /tmp/gc           # the same phases, tiny, on a CPU
#
# A bare machine (torch preinstalled, nothing else): bring the small wheels along first, on a machine with
# the package index: `bash scripts/gpu_check_wheels.sh` writes .whl/ (trl, transformers, peft, datasets,
# accelerate, deepspeed, ...); this script installs them from there when they are missing (--no-index).
# PYTHON: the interpreter (default: the checkout's .venv, else python3). Results: OUT/report.md,
# OUT/report.json, OUT/logs/.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON="$(command -v python3)"; fi
fi
if ! "$PYTHON" -c "import trl, transformers, peft, datasets, accelerate" 2>/dev/null; then
  if [[ -d "$ROOT/.whl" ]]; then
    echo "gpu_check.sh: installing the carried wheels from $ROOT/.whl" >&2
    "$PYTHON" -m pip install -q --no-index --find-links "$ROOT/.whl" --no-deps "$ROOT"/.whl/*.whl || exit 2
  else
    echo "gpu_check.sh: trl/transformers/peft/datasets/accelerate missing and no .whl/ to install them from" \
      "(bash scripts/gpu_check_wheels.sh on a machine with the package index)" >&2
    exit 2
  fi
fi
cd "$ROOT"
PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" "$ROOT/scripts/gpu_check.py" "$@"
