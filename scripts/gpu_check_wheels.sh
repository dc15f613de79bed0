#!/usr/bin/env bash
# Fetch the small wheels scripts/gpu_check.sh needs on a bare GPU machine (torch preinstalled, no index;
# install them there with pip install --no-index --no-deps --target DIR .whl/*.whl and PYTHONPATH=DIR)
# into .whl/ (tens of MiB): the pinned trl, transformers, peft, datasets, accelerate, deepspeed (built
# without ops) and their small pure-Python dependencies. Run where the package index is reachable.
#   bash scripts/gpu_check_wheels.sh            # then carry .whl/ with the checkout
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || command -v python3)}"
OUT="$ROOT/.whl"
mkdir -p "$OUT"
# huggingface_hub 1.x: 2.x needs httpx2/httpcore2, which GPU images lack (transformers 5.23 takes >= 1.31).
# diffusers: the text-to-image benchmark (benchmarks/bench_t2i_gpu.py).
# Not carried (the GPU image has them, and the carry limit is 64 MiB): pyarrow (55 MiB; the image's 25.0.1
# serves datasets 5.2), fsspec, and torch's own dependencies sympy, mpmath and networkx.
PINS=(trl==1.16.0 transformers==5.23.0 peft==0.21.2 datasets==5.2.0 accelerate==1.15.0 tokenizers==0.23.3
      diffusers==0.42.1 safetensors "huggingface_hub==1.33.0" hf_xet pyyaml tqdm regex dill multiprocess xxhash
      pydantic pydantic_core annotated_types typing_inspection hjson ninja msgpack py-cpuinfo
      math-verify==0.9.0 latex2sympy2_extended antlr4-python3-runtime==4.13.2 orjson)
# For the GPU machine's interpreter (PYVER, default 3.12), not this one's: compiled wheels must match it.
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "${PYVER:-3.12}" --implementation cp \
  "${PLATFORMS[@]}" -d "$OUT" "${PINS[@]}"
# DeepSpeed ships an sdist only: build a wheel without its CUDA ops (they build at first use, JIT).
DS_BUILD_OPS=0 "$PYTHON" -m pip wheel -q --no-deps -w "$OUT" deepspeed==0.19.8
du -sh "$OUT"
