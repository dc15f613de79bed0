"""The first thing to run on a GPU: r1vision's training and weight-sync paths against stock TRL, on one card.

Fits a bare machine (one H100 80 GB or H200, CUDA 13, torch preinstalled, no internet, no vLLM; the small
wheels r1vision needs carried along, see ``gpu_check.sh``) in about 9 minutes (``--budget``). Phases:

1. **env**: versions, CUDA usable (FAIL if not: every later run would train on the CPU), bf16, flash-attn;
   static checks on Qwen2.5-VL-7B's real layout (meta device, no memory): the weight sync of a default and
   of a ``q_proj v_proj`` LoRA sends whole vLLM-fused groups, under names vLLM can place.
2. **build**: a model at Qwen2.5-VL-7B widths (hidden 3584, vocab 152064, vision 1280) with few layers
   (``--text-layers``, ``--vision-depth``: ~2.2B parameters by default), random bf16 weights, r1vision's
   offline processor; the folder must load with ``AutoProcessor`` and resolve a video-processor config
   (what a torchvision install's stock processor needs).
3. **t2i**: one Flow-GRPO micro-step per GPU at SD3.5-Medium's shapes (``benchmarks/bench_t2i_gpu.py``): the
   trainer's SDE rollout against a stock diffusers pipeline (images/s), the training step with all 9
   transitions replayed, its peak memory against ``r1vision estimate-memory``, and the replay's log-prob parity.
4. **runs**, each in its own process (clean peaks): stock ``trl.GRPOTrainer`` and ``VisionGRPOTrainer`` on
   the same rows and seeds (12 steps, the first not timed; the pairs run in alternating order), full
   fine-tuning and LoRA, plain, under the shipped ``configs/deepspeed/zero3.json`` (``accelerate launch
   --zero3_init_flag true``) and under the shipped ``configs/accelerate/fsdp2.yaml`` (one process: FSDP2's
   fp32 masters under bf16 and its per-block gathers, against ZeRO-3's). Fixed-length completions (EOS and
   vision tokens suppressed) so both do the same work. Recorded: step time, peak memory, how the
   parameters are held (a run launched sharded that trained unsharded FAILs) and their dtype, finite
   loss, weights moved, input-grad hooks on the vision tower. ``--runs`` picks some (``--no-t2i`` skips
   phase 3): a short GPU session can run only the FSDP2 pair.
5. **sync probe** (r1vision LoRA runs): the streamed sync's names (fused groups whole, vLLM roots), merged
   values against ``W + s*B@A`` computed independently, base weights unchanged after repeated syncs,
   the sync's extra peak streamed vs holding every tensor (what the colocate backend did), and the
   per-rank push rate (GPU->CPU copy + safetensors serialisation).
6. **report**: ``report.md`` / ``report.json``: r1vision vs stock (step time FAIL above x1.5, WARN above
   x1.15; peak memory FAIL above x1.25, WARN above x1.10 — on a GPU only), measured peak vs
   ``r1vision.estimate`` (WARN above x1.2); the last line is ``GPU-CHECK: PASS`` or ``GPU-CHECK: FAIL``
   (exit 1).

``--cpu-smoke`` runs the same phases at tiny sizes on the CPU, the trainer runs two at a time (timings and
memory are then informative only); it is part of the test suite (``tests/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FAMILY = "qwen2_5_vl"
SUPPRESS = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|vision_start|>",
    "<|vision_end|>",
)
# The runs, most valuable first (a run that no longer fits the budget is reported SKIPPED). Layouts: plain
# (one process), zero3 (the shipped configs/deepspeed/zero3.json), fsdp2 (the shipped configs/accelerate/fsdp2.yaml).
RUNS = [
    # name, trainer, lora rank, layout, probe
    ("trl-full", "trl", 0, "plain", False),
    ("r1v-full", "r1v", 0, "plain", False),
    ("r1v-lora", "r1v", 64, "plain", True),
    ("trl-lora", "trl", 64, "plain", False),
    ("r1v-z3-lora", "r1v", 64, "zero3", True),
    ("r1v-z3-full", "r1v", 0, "zero3", False),
    ("trl-z3-full", "trl", 0, "zero3", False),
    ("trl-fsdp-full", "trl", 0, "fsdp2", False),
    ("r1v-fsdp-full", "r1v", 0, "fsdp2", False),
    ("r1v-fsdp-lora", "r1v", 64, "fsdp2", False),
]
RUN_NAMES = [run[0] for run in RUNS]
LAYOUTS = {run[0]: run[3] for run in RUNS}
PAIRS = [
    ("r1v-full", "trl-full"),
    ("r1v-lora", "trl-lora"),
    ("r1v-z3-full", "trl-z3-full"),
    ("r1v-fsdp-full", "trl-fsdp-full"),
]
# The text-to-image phase: one Flow-GRPO micro-step per GPU at SD3.5-Medium's shapes (random weights): 9
# images of 512 px, 10 SDE steps with CFG 4.5, all 9 trained transitions replayed with backward, KL 0.04,
# LoRA r32 on Flow-GRPO's targets, EMA, no gradient checkpointing (its 80 GB setting).
T2I_ARGS = ["--images", "9", "--trained", "9", "--steps", "10", "--resolution", "512", "--repeats", "2",
            "--no-checkpointing"]  # fmt: skip


def gib(n: float) -> float:
    return round(float(n) / 2**30, 3)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str))


# ------------------------------------------------------------------------------------------------ env
def phase_env(cpu_smoke: bool) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    import importlib
    import importlib.util
    import platform

    info: dict[str, Any] = {"python": platform.python_version()}
    checks: list[tuple[str, str]] = []
    for name in (
        "torch",
        "transformers",
        "trl",
        "peft",
        "accelerate",
        "datasets",
        "deepspeed",
        "torchvision",
    ):
        try:
            info[name] = getattr(importlib.import_module(name), "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - recorded and judged
            info[name] = f"IMPORT FAILED: {type(exc).__name__}: {exc}"
            if name in ("trl", "transformers", "peft", "datasets", "accelerate"):
                checks.append(("FAIL", f"{name} does not import: {exc}"))
    import torch

    info["cuda"] = torch.cuda.is_available()
    info["torch_cuda"] = torch.version.cuda
    info["flash_attn"] = importlib.util.find_spec("flash_attn") is not None
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["memory_total_gib"] = gib(torch.cuda.get_device_properties(0).total_memory)
        info["bf16"] = torch.cuda.is_bf16_supported()
        checks.append(
            ("PASS" if info["bf16"] else "FAIL", f"CUDA usable on {info['device']}, bf16 {info['bf16']}")
        )
    elif cpu_smoke:
        checks.append(("PASS", "CPU smoke run: no CUDA expected"))
    else:
        checks.append(("FAIL", "torch.cuda.is_available() is False: every run would train on the CPU"))
    try:
        checks += static_sync_checks()
    except Exception as exc:  # noqa: BLE001
        checks.append(("FAIL", f"static sync checks crashed: {type(exc).__name__}: {exc}"))
    return info, checks


def fused_gaps(names: list[str]) -> list[str]:
    """Places where a sync sends part of a group vLLM fuses into one tensor."""
    from r1vision.generation.weight_sync import FUSED_GROUPS, module_of

    sent = {module_of(n) for n in names}
    gaps = []
    for path in sorted(sent):
        parent, _, leaf = path.rpartition(".")
        for group in FUSED_GROUPS:
            if leaf in group and not all(f"{parent}.{m}" in sent for m in group):
                gaps.append(f"{parent}: {leaf} without all of {'/'.join(group)}")
    return gaps


def bad_roots(names: list[str]) -> list[str]:
    """Names vLLM's Qwen-VL mapping cannot place (outside the language model, the vision tower, lm_head)."""
    ok = ("model.language_model.", "model.visual.", "lm_head.")
    return [n for n in names if not n.startswith(ok)]


def static_sync_checks() -> list[tuple[str, str]]:
    """r1vision's sync on Qwen2.5-VL-7B's real layout (meta device): default LoRA and q_proj v_proj."""
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText

    from r1vision.estimate import load_model_config
    from r1vision.generation.weight_sync import sync_param_names
    from r1vision.trainer.setup import freeze_vision_tower, lora_config

    checks = []
    config = load_model_config("qwen2.5-vl-7b")
    for label, targets in (("all-linear-lm", ["all-linear-lm"]), ("q_proj v_proj", ["q_proj", "v_proj"])):
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(config)
            freeze_vision_tower(model)
            model = get_peft_model(model, lora_config(16, 32, 0.0, targets))
        names = sync_param_names(model)
        gaps, roots = fused_gaps(names), bad_roots(names)
        if gaps or roots:
            checks.append(
                ("FAIL", f"LoRA {label}: sync splits fused groups {gaps[:2]} / unplaceable {roots[:2]}")
            )
        else:
            checks.append(
                ("PASS", f"LoRA {label} on the 7B layout: {len(names)} tensors, fused groups whole")
            )
    return checks


# ---------------------------------------------------------------------------------------------- build
def phase_build(
    out: Path, cpu_smoke: bool, text_layers: int, vision_depth: int, side: int
) -> tuple[Path, list]:
    from importlib import resources

    from transformers import AutoProcessor
    from transformers.video_processing_utils import BaseVideoProcessor

    import r1vision  # noqa: F401 - processor registration, as in a real run
    from r1vision.testing.shaped import make_shaped_model
    from r1vision.testing.tiny import make_tiny_model

    target = out / "model"
    if cpu_smoke:
        make_tiny_model(FAMILY, target, max_pixels=side * side)
    else:
        shape = json.loads(
            (resources.files("r1vision") / "data" / "model_shapes" / "qwen2.5-vl-7b.json").read_text()
        )
        shape["text_config"]["num_hidden_layers"] = text_layers
        shape["vision_config"]["depth"] = vision_depth
        shape["vision_config"]["fullatt_block_indexes"] = [i for i in range(vision_depth) if i % 4 == 3]
        write_json(out / "shape.json", shape)
        make_shaped_model(str(out / "shape.json"), target, dtype="bfloat16", max_pixels=side * side)
    checks = []
    try:
        processor = AutoProcessor.from_pretrained(target)
        BaseVideoProcessor.get_video_processor_dict(str(target))
        checks.append(("PASS", f"the model folder loads ({type(processor).__name__}) and has a video config"))
    except Exception as exc:  # noqa: BLE001
        checks.append(("FAIL", f"the model folder does not load as stock processors need: {exc}"[:300]))
    return target, checks


# ------------------------------------------------------------------------------------------------ run
def rows(n: int, side: int):
    """``n`` rows of one aligned ``side`` px image and a question (neither trainer resizes it)."""
    import random

    from datasets import Dataset
    from PIL import Image, ImageDraw

    rng = random.Random(0)
    out = []
    for _ in range(n):
        colour = rng.choice(["red", "green", "blue", "yellow"])
        image = Image.new("RGB", (side, side), "white")
        x, y, r = rng.randint(side // 4, 3 * side // 4), rng.randint(side // 4, 3 * side // 4), side // 8
        ImageDraw.Draw(image).ellipse([x - r, y - r, x + r, y + r], fill=colour)
        prompt = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour is it?"}]}
        ]
        out.append({"prompt": prompt, "images": [image], "answer": colour})
    return Dataset.from_list(out)


def varied(completions: list, **kwargs: Any) -> list[float]:
    """Deterministic and different per completion, so advantages are non-zero and weights move."""
    return [float(len(str(c)) % 7) / 7 for c in completions]


def run_one(a: argparse.Namespace) -> int:
    """One training configuration (``--run NAME``); writes ``runs/NAME.json``."""
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    import r1vision  # noqa: F401

    out = Path(a.out)
    model_path = str(out / "model")
    gpu = torch.cuda.is_available()
    if a.layout == "fsdp2" and not gpu:
        # accelerate keeps FSDP to GPUs (on a CPU it runs DDP): the smoke lifts that one gate in this worker,
        # as the 2-process FSDP2 tests do (tests/helpers/cpu_fsdp); sharding itself is torch's fully_shard
        import runpy

        runpy.run_path(str(ROOT / "tests" / "helpers" / "cpu_fsdp" / "sitecustomize.py"))
    tok = AutoTokenizer.from_pretrained(model_path)
    common = dict(
        output_dir=str(out / "trainer" / a.run), per_device_train_batch_size=a.batch, num_generations=a.batch,
        max_completion_length=a.completion, max_steps=a.steps, learning_rate=5e-4, logging_steps=1,
        report_to=[], save_strategy="no", bf16=gpu, use_cpu=not gpu, seed=0, disable_tqdm=True,
        generation_kwargs={"suppress_tokens": [tok.convert_tokens_to_ids(t) for t in SUPPRESS]},
    )  # fmt: skip
    data = rows(a.batch * a.steps, a.side)
    if a.trainer == "r1v":
        from r1vision.trainer.config import VisionGRPOConfig
        from r1vision.trainer.grpo import VisionGRPOTrainer

        extra = {"max_pixels": a.side * a.side, "min_pixels": a.side * a.side // 4}
        if a.lora:
            extra |= {"lora_r": a.lora, "lora_alpha": 2 * a.lora, "freeze_vision_tower": True}
        if gpu:
            extra["dtype"] = "bfloat16"
        trainer = VisionGRPOTrainer(
            model_path, [varied], args=VisionGRPOConfig(**common, **extra), train_dataset=data
        )
    else:
        from trl import GRPOConfig, GRPOTrainer

        peft_config = None
        if a.lora:
            from r1vision.trainer.setup import lora_config

            peft_config = lora_config(a.lora, 2 * a.lora, 0.0, ["all-linear-lm"])
        args = GRPOConfig(**common, model_init_kwargs={"dtype": "bfloat16"} if gpu else None)
        trainer = GRPOTrainer(model_path, [varied], args=args, train_dataset=data, peft_config=peft_config)

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if gpu:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)

    trainer.add_callback(Clock())
    model = trainer.model
    watched = [n for n, p in model.named_parameters() if p.requires_grad][:3]
    before = _snapshot(model, watched)
    hooked = [n for n, m in model.named_modules() if any(
        getattr(h, "__name__", "") == "make_inputs_require_grads" for h in m._forward_hooks.values())]  # fmt: skip
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    peak = torch.cuda.max_memory_allocated() if gpu else _rss_peak()
    # by name: FSDP2 replaces each parameter with a sharded one when the trainer prepares the model
    model = trainer.model
    after = _snapshot(model, watched)
    layout, dtype = _layout_of(model)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    result: dict[str, Any] = {
        "name": a.run, "trainer": a.trainer, "lora": a.lora, "layout": layout, "param_dtype": dtype,
        # the median step after the first (warm-up: allocator, kernels): 12 steps on a GPU, as 4 steps of a
        # generation-bound run measured x1.25 where 12 alternated steps measured x0.98 for the same pair
        "step_seconds": _median(times[1:] or times), "steps": len(times),
        "peak_gib": gib(peak), "losses_finite": bool(losses) and all(math.isfinite(x) for x in losses),
        "weights_moved": any(not torch.equal(before[n], after[n]) for n in before),
        "vision_input_grad_hooks": [n for n in hooked if "visual" in n],
    }  # fmt: skip
    if a.probe:
        result["probe"] = sync_probe(trainer, gpu)
    write_json(out / "runs" / f"{a.run}.json", result)
    return 0


def _gib_text(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def _snapshot(model: Any, names: list[str]) -> dict[str, Any]:
    """Whole copies of the parameters ``names`` (gathered under ZeRO-3, ``full_tensor()`` under FSDP2)."""
    params = dict(model.named_parameters())
    chosen = [params[n] for n in names]
    ctx: Any = contextlib.nullcontext()
    if any(hasattr(p, "ds_numel") for p in chosen):
        import deepspeed

        ctx = deepspeed.zero.GatheredParameters(chosen)
    with ctx:
        return {
            n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().cpu().clone()
            for n, p in zip(names, chosen, strict=True)
        }


def _layout_of(model: Any) -> tuple[str, str]:
    """How the trained model's parameters are held (``zero3``, ``fsdp2`` or ``plain``) and their dtype."""
    params = [p for p in model.parameters() if p.is_floating_point()]
    sharded = [p for p in params if hasattr(p, "ds_numel")]
    if sharded:
        return "zero3", str(sharded[0].ds_tensor.dtype)
    layout = "fsdp2" if any(hasattr(p, "full_tensor") for p in params) else "plain"  # DTensors
    return layout, str(params[0].dtype)


def _rss_peak() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def sync_probe(trainer: Any, gpu: bool) -> dict[str, Any]:
    """r1vision's weight-sync iteration on the trained model, as the vLLM backends consume it."""
    import torch

    from r1vision.generation.weight_sync import iter_sync_tensors, merged_weight, sync_param_names

    model = trainer.model
    gather = _gather_fn(model)
    names = sync_param_names(model)
    out: dict[str, Any] = {
        "tensors": len(names),
        "fused_gaps": fused_gaps(names),
        "bad_roots": bad_roots(names),
    }
    # streamed (what the backends do now) against holding every tensor (what the colocate backend did)
    base_alloc = torch.cuda.memory_allocated() if gpu else 0
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    largest = total = 0
    for _, tensor in iter_sync_tensors(model, gather):
        size = tensor.numel() * tensor.element_size()
        largest, total = max(largest, size), total + size
    streamed = (torch.cuda.max_memory_allocated() - base_alloc) if gpu else largest
    out |= {
        "streamed_extra_peak_gib": float(f"{streamed / 2**30:.3g}"),
        "held_all_gib": float(f"{total / 2**30:.3g}"),
    }
    # merged values against W + s * B @ A computed here, and no drift of the base after repeated syncs
    errors, drift = [], False
    layers = [m for _, m in model.named_modules() if "default" in getattr(m, "lora_A", {})][:4]
    snapshots = []
    for layer in layers:
        with gather(list(layer.parameters())):
            base = layer.get_base_layer().weight.detach().float()
            a, b = layer.lora_A["default"].weight.float(), layer.lora_B["default"].weight.float()
            want = base + layer.scaling["default"] * (b @ a)
            got = merged_weight(layer).float()
            errors.append(float((got - want).abs().max() / (want.abs().max() + 1e-12)))
            snapshots.append(layer.get_base_layer().weight.detach().clone())
    for _ in range(5 if layers else 0):  # repeated syncs must leave the base weights bit-identical
        for _ in iter_sync_tensors(model, gather):
            pass
    for layer, snapshot in zip(layers, snapshots, strict=True):
        with gather(list(layer.parameters())):
            drift = drift or not torch.equal(snapshot, layer.get_base_layer().weight.detach())
    out |= {"merge_rel_error": max(errors) if errors else None, "base_drift": drift}
    # the per-rank push: device -> CPU copy and safetensors serialisation, the part r1vision controls
    from safetensors.torch import save

    start, moved = time.perf_counter(), 0
    chunk: dict[str, Any] = {}
    for name, tensor in iter_sync_tensors(model, gather):
        chunk[name] = tensor.detach().to("cpu", copy=True).contiguous()
        moved += chunk[name].numel() * chunk[name].element_size()
        if moved >= 256 * 2**20:
            save(chunk)
            chunk = {}
    if chunk:
        save(chunk)
    seconds = time.perf_counter() - start
    out["per_rank_gib_per_s"] = float(f"{moved / 2**30 / seconds:.3g}") if seconds > 0 else None
    return out


def _gather_fn(model: Any):
    if any(hasattr(p, "ds_numel") for p in model.parameters()):
        import deepspeed

        return lambda params: deepspeed.zero.GatheredParameters(params)
    return lambda params: contextlib.nullcontext()


# -------------------------------------------------------------------------------------- text-to-image
def phase_t2i(a: argparse.Namespace, timeout: float) -> dict[str, Any]:
    """``benchmarks/bench_t2i_gpu.py`` in its own process: the trainer's rollout against a stock diffusers
    pipeline, its training step and peak memory against the estimate (``--cpu-smoke``: the tiny pipeline)."""
    out = Path(a.out)
    result = out / "t2i.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_t2i_gpu.py"), "--json", str(result)]
    cmd += ["--cpu-smoke"] if a.cpu_smoke else T2I_ARGS
    log = out / "logs" / "t2i.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    try:
        with log.open("w") as f:
            done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s (log: {log})"}
    if done.returncode != 0 or not result.is_file():
        tail = log.read_text().strip().splitlines()[-1:] or ["?"]
        return {"error": f"exit {done.returncode}: {tail[0][:200]} (log: {log})"}
    return json.loads(result.read_text())


def judge_t2i(r: dict[str, Any], gpu: bool) -> list[tuple[str, str]]:
    if r.get("skipped"):
        return [("WARN", f"t2i: skipped ({r['skipped']})")]
    if r.get("error"):
        return [("FAIL", f"t2i: {r['error']}")]
    ratio = r["rollout_images_per_s"] / r["stock_images_per_s"]
    level = "FAIL" if gpu and ratio < 0.75 else "WARN" if ratio < 0.9 else "PASS"
    checks = [(level, f"t2i rollout {r['rollout_images_per_s']:.2f} images/s vs stock diffusers "
               f"{r['stock_images_per_s']:.2f}: x{ratio:.2f}")]  # fmt: skip
    parity = r["logprob_parity_max"]
    checks.append(("PASS" if parity <= 1e-3 else "FAIL", f"t2i replay log-prob parity {parity:.2e} (rollout vs "
                   f"training replay, same weights); step {r['train_step_s']:.2f} s"))  # fmt: skip
    peak, estimate = r.get("peak_allocated_gib"), r.get("estimate_peak_gib")
    if gpu and peak is not None and estimate:
        level = "WARN" if peak > 1.2 * estimate else "PASS"
        checks.append(
            (level, f"t2i peak {peak:.1f} GiB, estimate {estimate:.1f} GiB (x{peak / estimate:.2f})")
        )
    return checks


# --------------------------------------------------------------------------------------------- report
def judge(
    results: dict[str, dict[str, Any]], gpu: bool, estimates: dict[str, float]
) -> list[tuple[str, str]]:
    checks: list[tuple[str, str]] = []
    for name, r in results.items():
        if r.get("skipped"):
            checks.append(("WARN", f"{name}: skipped ({r['skipped']})"))
            continue
        if r.get("error"):
            checks.append(("FAIL", f"{name}: {r['error']}"))
            continue
        ok = r["losses_finite"] and r["weights_moved"]
        asked = LAYOUTS.get(name)
        if asked and r.get("layout") != asked:
            checks.append(
                ("FAIL", f"{name}: launched as {asked} but trained {r.get('layout')} (not sharded)")
            )
        checks.append(("PASS" if ok else "FAIL", f"{name}: loss finite {r['losses_finite']}, weights moved "
                       f"{r['weights_moved']}, {r['param_dtype']}, step {r['step_seconds']:.2f} s, peak {r['peak_gib']} GiB"))  # fmt: skip
        if r["trainer"] == "r1v" and r["vision_input_grad_hooks"]:
            checks.append(
                (
                    "FAIL",
                    f"{name}: the frozen vision tower is hooked for input grads {r['vision_input_grad_hooks']}",
                )
            )
        probe = r.get("probe")
        if probe:
            bad = (
                probe["fused_gaps"]
                or probe["bad_roots"]
                or probe["base_drift"]
                or (probe["merge_rel_error"] or 0) > 1e-2
            )
            checks.append(("FAIL" if bad else "PASS", f"{name} sync: {probe['tensors']} tensors, fused gaps "
                           f"{len(probe['fused_gaps'])}, merge error {probe['merge_rel_error']}, drift {probe['base_drift']}, "
                           f"streamed +{probe['streamed_extra_peak_gib']} GiB vs {probe['held_all_gib']} GiB held, "
                           f"per-rank {probe['per_rank_gib_per_s']} GiB/s"))  # fmt: skip
        if gpu and name in estimates and r["peak_gib"] > 1.2 * estimates[name]:
            checks.append(
                (
                    "WARN",
                    f"{name}: measured peak {r['peak_gib']} GiB > 1.2 x estimate {estimates[name]:.2f} GiB",
                )
            )
    for ours, stock in PAIRS:
        a, b = results.get(ours, {}), results.get(stock, {})
        if not a.get("step_seconds") or not b.get("step_seconds"):
            continue
        t, m = a["step_seconds"] / b["step_seconds"], a["peak_gib"] / max(b["peak_gib"], 1e-9)
        level = "PASS"
        if gpu and (t > 1.5 or m > 1.25):
            level = "FAIL"
        elif t > 1.15 or m > 1.10:
            level = "WARN"
        checks.append((level, f"{ours} / {stock}: step time x{t:.2f}, peak memory x{m:.2f}"))
    return checks


def estimate_peaks(model: Path, a: argparse.Namespace) -> dict[str, float]:
    """``r1vision.estimate``'s peak for each run's setup, in GiB."""
    from transformers import AutoConfig

    from r1vision.estimate import GIB, TrainSetup, estimate, shape_of

    shape = shape_of(AutoConfig.from_pretrained(model))
    out = {}
    for name, _, lora, layout, _ in RUNS:
        setup = TrainSetup(gpus=1, zero=3 if layout == "zero3" else 0, fsdp=layout == "fsdp2", lora_r=lora, freeze_vision=bool(lora), batch=a.batch,
                           prompt_tokens=32, completion_tokens=a.completion, max_pixels=a.side * a.side,
                           num_generations=a.batch)  # fmt: skip
        out[name] = estimate(shape, setup).peak / GIB
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-smoke", action="store_true", help="the same phases at tiny sizes on the CPU")
    p.add_argument("--out", default="gpu_check")
    p.add_argument("--budget", type=float, default=540.0, help="seconds for the whole check")
    p.add_argument("--text-layers", type=int, default=4)
    p.add_argument("--vision-depth", type=int, default=8)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--completion", type=int, default=None)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--side", type=int, default=None, help="image side in pixels (a multiple of 28)")
    p.add_argument(
        "--runs", default=None, help=f"comma-separated runs to do (default: all): {','.join(RUN_NAMES)}"
    )
    p.add_argument("--no-t2i", action="store_true", help="skip the text-to-image phase")
    p.add_argument("--run", default=None, help=argparse.SUPPRESS)  # internal: one configuration
    p.add_argument("--trainer", default=None, help=argparse.SUPPRESS)
    p.add_argument("--lora", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--layout", default="plain", help=argparse.SUPPRESS)
    a = p.parse_args()
    chosen = RUN_NAMES if a.runs is None else [n.strip() for n in a.runs.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in RUN_NAMES]
    if unknown or not chosen:
        p.error(
            f"--runs: unknown run {unknown[0] if unknown else '(none given)'}; the runs are {','.join(RUN_NAMES)}"
        )
    a.chosen = [run for run in RUNS if run[0] in chosen]
    a.side = a.side or (56 if a.cpu_smoke else 448)
    a.steps = a.steps or (2 if a.cpu_smoke else 12)
    a.completion = a.completion or (8 if a.cpu_smoke else 64)
    if a.run:
        return run_one(a)
    started = time.time()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    checks: list[tuple[str, str]] = []
    info, env_checks = phase_env(a.cpu_smoke)
    checks += env_checks
    for status, text in env_checks:
        print(f"{status}  env: {text}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    model = None
    t2i: dict[str, Any] = {"skipped": "the environment check failed"}
    if not any(s == "FAIL" for s, _ in env_checks):
        # first, capped at a third of the budget: its numbers are new; the runs below skip what no longer fits
        t2i = {"skipped": "--no-t2i"} if a.no_t2i else phase_t2i(a, timeout=max(60.0, a.budget / 3))
        print(
            f"{'FAIL' if t2i.get('error') else 'skipped' if t2i.get('skipped') else 'done'}  t2i", flush=True
        )
        model, build_checks = phase_build(out, a.cpu_smoke, a.text_layers, a.vision_depth, a.side)
        checks += build_checks
        for status, text in build_checks:
            print(f"{status}  build: {text}", flush=True)
        durations: list[float] = []
        if a.cpu_smoke:  # no card to share and the timings informative only: two runs at a time
            results.update(smoke_runs(a, started))
        for name, trainer, lora, layout, probe in [] if a.cpu_smoke else a.chosen:
            left = a.budget - (time.time() - started)
            expected = max(durations) if durations else 0.0
            if left < expected * 1.2 or left < 20:
                results[name] = {"skipped": f"{left:.0f} s of the budget left, a run takes ~{expected:.0f} s"}
                continue
            results[name] = launch(a, name, trainer, lora, layout, probe, timeout=left)
            durations.append(results[name].pop("wall_seconds", 0.0))
            print(f"{'FAIL' if results[name].get('error') else 'done'}  {name}", flush=True)
    estimates = estimate_peaks(model, a) if model is not None else {}
    checks += judge(results, bool(info.get("cuda")), estimates)
    checks += judge_t2i(t2i, bool(info.get("cuda")))
    verdict = "FAIL" if any(s == "FAIL" for s, _ in checks) else "PASS"
    write_json(out / "report.json", {"env": info, "runs": results, "t2i": t2i, "estimates_gib": estimates, "checks": checks,
                                     "verdict": verdict, "seconds": round(time.time() - started, 1)})  # fmt: skip
    lines = [f"# GPU check: {info.get('device', 'CPU smoke')}", "", f"torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), "
             f"trl {info.get('trl')}, transformers {info.get('transformers')}, deepspeed {info.get('deepspeed')}", "",
             "| run | dtype | step s | peak GiB | estimate GiB |", "|---|---|---|---|---|"]  # fmt: skip
    for name, r in results.items():
        if "step_seconds" in r:
            lines.append(f"| {name} | {r['param_dtype']} | {r['step_seconds']:.3f} | {r['peak_gib']} | "
                         f"{estimates.get(name, float('nan')):.2f} |")  # fmt: skip
    if "train_step_s" in t2i:
        lines += ["", "| text-to-image (SD3.5-M shapes) | value |", "|---|---|",
                  f"| rollout images/s (stock diffusers) | {t2i['rollout_images_per_s']:.2f} ({t2i['stock_images_per_s']:.2f}) |",
                  f"| training micro-step s ({t2i['images']} images, {t2i['trained']} transitions) | {t2i['train_step_s']:.2f} |",
                  f"| peak GiB (estimate) | {_gib_text(t2i.get('peak_allocated_gib'))} ({_gib_text(t2i.get('estimate_peak_gib'))}) |"]  # fmt: skip
    lines += ["", *[f"- {s} {t}" for s, t in checks], "", f"GPU-CHECK: {verdict}"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    for status, text in checks:
        print(f"{status}  {text}", flush=True)
    print(f"GPU-CHECK: {verdict}", flush=True)
    return 0 if verdict == "PASS" else 1


def smoke_runs(a: argparse.Namespace, started: float) -> dict[str, dict]:
    """The chosen runs of :data:`RUNS`, two at a time (``--cpu-smoke``; on 2 cores the smoke took 68 s, was 103 s)."""
    from concurrent.futures import ThreadPoolExecutor

    timeout = max(60.0, a.budget - (time.time() - started))
    with ThreadPoolExecutor(2) as pool:
        futures = {run[0]: pool.submit(launch, a, *run, timeout=timeout) for run in a.chosen}
        results = {name: future.result() for name, future in futures.items()}
    for name, r in results.items():
        r.pop("wall_seconds", None)
        print(f"{'FAIL' if r.get('error') else 'done'}  {name}", flush=True)
    return results


def fresh_run(out: Path, name: str) -> None:
    """Remove what an earlier check left for run ``name`` in ``out`` (its trainer folder and result)."""
    import shutil

    shutil.rmtree(out / "trainer" / name, ignore_errors=True)
    (out / "runs" / f"{name}.json").unlink(missing_ok=True)


def launch(
    a: argparse.Namespace, name: str, trainer: str, lora: int, layout: str, probe: bool, timeout: float
) -> dict:
    """One run in its own process (under ``accelerate launch`` with the shipped zero3.json for ZeRO-3, the
    shipped fsdp2.yaml for FSDP2, on one process)."""
    args = [__file__, "--run", name, "--trainer", trainer, "--lora", str(lora), "--layout", layout, "--out", a.out,
            "--steps", str(a.steps), "--completion", str(a.completion), "--batch", str(a.batch), "--side", str(a.side)]  # fmt: skip
    if probe:
        args.append("--probe")
    if a.cpu_smoke:
        args.append("--cpu-smoke")
    cmd = [sys.executable, *args]
    if layout != "plain":
        # one port per run: smoke runs go two at a time
        port = 29500 + (os.getpid() + RUN_NAMES.index(name)) % 1000
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1", "--num_machines", "1",
               "--main_process_port", str(port)]  # fmt: skip
        if layout == "zero3":
            cmd += ["--use_deepspeed", "--deepspeed_config_file", str(ROOT / "configs" / "deepspeed" / "zero3.json"),
                    "--zero3_init_flag", "true"]  # fmt: skip
        else:  # the shipped file (8 processes on one node), on this one card
            cmd += ["--config_file", str(ROOT / "configs" / "accelerate" / "fsdp2.yaml")]
        cmd += args
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    fresh_run(
        Path(a.out), name
    )  # a rerun into the same --out starts clean (r1vision refuses a used output_dir)
    log = Path(a.out) / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    try:
        with log.open("w") as f:
            done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s (log: {log})", "wall_seconds": time.time() - start}
    result_file = Path(a.out) / "runs" / f"{name}.json"
    if done.returncode != 0 or not result_file.is_file():
        tail = log.read_text().strip().splitlines()[-1:] or ["?"]
        return {
            "error": f"exit {done.returncode}: {tail[0][:200]} (log: {log})",
            "wall_seconds": time.time() - start,
        }
    return json.loads(result_file.read_text()) | {"wall_seconds": time.time() - start}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main())
