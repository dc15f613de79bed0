# Sourced by the local launchers: the checkout root, the Python that has r1vision, the GPU count.
# Nothing here changes the working directory: relative --model/--dataset/--output_dir stay relative to
# where the user ran the launcher.
R1V_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# $PYTHON, else the checkout's .venv, else the active virtualenv, else python3 on PATH.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$R1V_ROOT/.venv/bin/python" ]]; then PYTHON="$R1V_ROOT/.venv/bin/python"
  elif [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then PYTHON="$VIRTUAL_ENV/bin/python"
  else PYTHON="$(command -v python3 || command -v python || true)"
  fi
fi
if [[ -z "$PYTHON" ]] || ! "$PYTHON" -c "import importlib.util as u, sys; sys.exit(u.find_spec('r1vision') is None)" 2>/dev/null; then
  echo "$(basename "$0"): no Python with r1vision installed (tried '${PYTHON:-none}'); set PYTHON=/path/to/venv/bin/python" >&2
  exit 2
fi
ACCELERATE=("$PYTHON" -m accelerate.commands.launch)

# NUM_GPUS if set, else the GPUs nvidia-smi lists (0 when it is missing: the launchers then use the CPU).
r1v_num_gpus() {
  if [[ -n "${NUM_GPUS:-}" ]]; then echo "$NUM_GPUS"; return; fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
  else
    echo 0
  fi
}
