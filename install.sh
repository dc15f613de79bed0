#!/usr/bin/env bash
# Install r1vision into ./.venv.
#   bash install.sh         runtime (CPU torch 2.13.0 without an NVIDIA GPU; GPU stack + vllm/deepspeed with one)
#   bash install.sh --dev   also the test tools (pytest, ruff, hypothesis, pycocotools) and the svg/deepspeed extras
# Safe to run again: it only reinstalls when pyproject.toml, setup.py, the C helpers, the constraints or the mode changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $arg (use --dev)" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpu=1; constraints=requirements/constraints-gpu.txt; extras="vllm,deepspeed,svg,diffusion,ocr,video"
  # The pinned torch 2.13.0 and vLLM 0.30.0 wheels are CUDA 13 builds: they need an NVIDIA driver >= 580.
  # With an older one torch sees no GPU and every run would silently train on the CPU.
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')"
  if [ -n "$driver" ] && [ "${driver%%.*}" -lt 580 ] 2>/dev/null && [ "${R1VISION_ALLOW_OLD_DRIVER:-0}" != 1 ]; then
    echo "install.sh: NVIDIA driver $driver is older than 580, which the pinned CUDA 13 builds of torch 2.13.0 and" \
      "vLLM 0.30.0 need; upgrade the driver (or set R1VISION_ALLOW_OLD_DRIVER=1 after installing a torch built for" \
      "your CUDA yourself)" >&2
    exit 2
  fi
else
  gpu=0; constraints=requirements/constraints-cpu.txt; extras="svg,diffusion,ocr,video"
fi
[ "$dev" = 1 ] && extras="$extras,dev,deepspeed"

stamp=.venv/.r1vision-install
# setup.py and the C source too: the compiled helpers are built at install, a changed source needs a rebuild
want="$(cat pyproject.toml setup.py src/r1vision/_speedups.c src/r1vision/tasks/svg/_fastscore.c "$constraints" | sha256sum | cut -c1-16) gpu=$gpu extras=$extras"
if [ -x .venv/bin/r1vision ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "r1vision already installed in .venv ($want)"
  exit 0
fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
export PIP_CONSTRAINT="$PWD/$constraints"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# DeepSpeed builds its ops at first use (JIT), not at install.
export DS_BUILD_OPS=0
# pip's configured local indexes that do not exist on this machine print a warning per package; hide those.
pipq() {
  set +e
  .venv/bin/pip "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}
echo "installing r1vision[$extras] (gpu=$gpu) with constraints $constraints"
if [ "$gpu" = 0 ]; then
  # The local CPU wheel first, so nothing later can resolve a CUDA torch.
  pipq install -q torch==2.13.0
fi
pipq install -q -e ".[$extras]"

# torchvision: the only release accepting torch 2.13 is a CUDA build, which breaks transformers'
# processors on CPU. It must never be present there (a dependency may have pulled it in).
if [ "$gpu" = 0 ] && .venv/bin/python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('torchvision') is None)"; then
  pipq uninstall -y -q torchvision
fi

.venv/bin/python -c "import r1vision, torch, trl, transformers; print(f'r1vision {r1vision.__version__}: torch {torch.__version__}, trl {trl.__version__}, transformers {transformers.__version__}')"
# The compiled SGG reward helpers and SVG score filters are optional (no C compiler: same results, slower);
# say which ones we got.
.venv/bin/python -c "from r1vision import compiled; print('compiled helpers (r1vision._speedups):', 'built' if compiled.AVAILABLE else 'NOT built: no C compiler or Python headers; the pure-Python paths run (same results, slower)')"
.venv/bin/python -c "from r1vision.tasks.svg import score; print('compiled SVG score filters (r1vision.tasks.svg._fastscore):', 'built' if score._fast else 'NOT built: the numpy paths run (same scores, slower)')"
echo "$want" > "$stamp"
