"""``r1vision vllm-serve``: start ``N`` r1vision vLLM servers, wait for them, always stop them.

:class:`ServerGroup` starts ``N`` server processes (:mod:`r1vision.generation.vllm_server`; server ``i``
on ``base_port + i``, on GPUs a block of ``tensor_parallel_size`` devices each), waits for their health
with a timeout and an error that names the port and the server log's tail, and stops them (process
groups, SIGTERM then SIGKILL). :func:`vllm_serve_main` is the command; with ``-- COMMAND`` it runs the
command while the servers are up and stops them when it ends, or stops everything when a server dies.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from r1vision.generation.vllm_engine import budget_processor_kwargs
from r1vision.generation.vllm_plan import model_context, resolve_max_model_len
from r1vision.generation.vllm_server import _server_parser
from r1vision.vision.budget import resolve_budget
from r1vision.vision.family import model_family


class ServerStartError(RuntimeError):
    """A vLLM server exited or did not become healthy in time."""


@dataclass
class ServerGroup:
    """``num_servers`` server processes on ``base_port + i``; a context manager that always stops them."""

    model: str
    num_servers: int = 1
    base_port: int = 8000
    host: str = "127.0.0.1"
    tensor_parallel_size: int = 1
    first_device: int = 0
    log_dir: str | os.PathLike[str] = "logs"
    seed: int = 0
    server_args: list[str] = field(default_factory=list)  # more ``--flag value`` for every server
    env: dict[str, str] = field(default_factory=dict)
    kind: str = "r1vision"  # or "vllm": vLLM's own server with TRL's NCCL weight transfer
    data_parallel_size: int = 1  # kind "vllm" only
    procs: list[subprocess.Popen] = field(default_factory=list, init=False)
    logs: list[Path] = field(default_factory=list, init=False)

    @property
    def ports(self) -> list[int]:
        return [self.base_port + i for i in range(self.num_servers)]

    def url(self, i: int) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.ports[i]}"

    def _devices(self) -> list[str] | None:
        if not torch.cuda.is_available():
            return None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
        need = self.first_device + self.num_servers * self.gpus_per_server
        if need > len(ids):
            raise ServerStartError(
                f"{self.num_servers} server(s) x tensor_parallel_size {self.tensor_parallel_size} from device "
                f"{self.first_device} need {need} GPUs; {len(ids)} visible"
            )
        return ids

    @property
    def gpus_per_server(self) -> int:
        return self.tensor_parallel_size * (self.data_parallel_size if self.kind == "vllm" else 1)

    def command(self, i: int, port: int) -> list[str]:
        """The command line of server ``i``."""
        if self.kind == "vllm":
            # What `trl vllm-serve` (deprecated for removal in TRL 2.0) runs: vLLM's server with the
            # weight-transfer endpoints TRL's server mode syncs through.
            cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", self.model]
            cmd += ["--host", self.host, "--port", str(port)]
            cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
            cmd += ["--data-parallel-size", str(self.data_parallel_size), *self.server_args]
            cmd += ["--weight-transfer-config", '{"backend": "nccl"}', "--enable-scale-out"]
            cmd += ["--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1"]
            return cmd + ["--seed", str(self.seed + i)]
        cmd = [sys.executable, "-m", "r1vision.generation.vllm_server", "--model", self.model]
        cmd += ["--port", str(port), "--host", self.host]
        cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size), *self.server_args]
        return cmd + ["--seed", str(self.seed + i)]  # servers sample differently for identical prompts

    def start(self) -> ServerGroup:
        """Start the processes (each in its own process group, logging to ``log_dir/vllm-server-PORT.log``)."""
        devices = self._devices()
        Path(self.log_dir).mkdir(parents=True, exist_ok=True)
        for i, port in enumerate(self.ports):
            env = {**os.environ, **self.env}
            if self.kind == "vllm":
                env["VLLM_SERVER_DEV_MODE"] = "1"  # the weight-transfer and cache endpoints TRL calls
            if devices is not None:
                start = self.first_device + i * self.gpus_per_server
                env["CUDA_VISIBLE_DEVICES"] = ",".join(devices[start : start + self.gpus_per_server])
            cmd = self.command(i, port)
            log = Path(self.log_dir) / f"vllm-server-{port}.log"
            with open(log, "wb") as f:
                proc = subprocess.Popen(
                    cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
                )
            self.procs.append(proc)
            self.logs.append(log)
        return self

    def log_tail(self, i: int, lines: int = 30) -> str:
        try:
            text = self.logs[i].read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def dead(self) -> int | None:
        """Index of the first server process that has exited, or None."""
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                return i
        return None

    def describe_death(self, i: int) -> str:
        return (
            f"vLLM server on port {self.ports[i]} exited with code {self.procs[i].returncode}; "
            f"last lines of {self.logs[i]}:\n{self.log_tail(i)}"
        )

    def wait_healthy(self, timeout: float) -> None:
        """Block until every server answers ``/health``; :class:`ServerStartError` naming the port otherwise."""
        import requests

        deadline = time.monotonic() + timeout
        pending = set(range(self.num_servers))
        while pending:
            for i in sorted(pending):
                if self.procs[i].poll() is not None:
                    raise ServerStartError(self.describe_death(i))
                try:
                    if requests.get(self.url(i) + "/health", timeout=2).ok:
                        pending.discard(i)
                except requests.RequestException:
                    pass
            if pending and time.monotonic() > deadline:
                i = min(pending)
                raise ServerStartError(
                    f"vLLM server on port {self.ports[i]} not healthy after {timeout:.0f}s; "
                    f"last lines of {self.logs[i]}:\n{self.log_tail(i)}"
                )
            if pending:
                time.sleep(0.5)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM each server's process group, SIGKILL what is left after ``grace`` seconds."""
        for proc in self.procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # children (TP workers) too, even if the leader exited
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()

    def __enter__(self) -> ServerGroup:
        if not self.procs:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# recipe key -> server option; the trainer's values, so the servers resize and size sequences like it
RECIPE_KEYS = {
    "model": "model",
    "min_pixels": "min_pixels",
    "max_pixels": "max_pixels",
    "max_images_per_prompt": "max_images_per_prompt",
    "max_completion_length": "max_completion_length",
    "max_prompt_text_tokens": "max_prompt_text_tokens",
    "vllm_max_model_length": "max_model_len",
    "vllm_gpu_memory_utilization": None,  # a colocate setting; servers take --gpu-memory-utilization
}


def apply_recipe(a: Any, argv: Sequence[str]) -> None:
    """Fill ``a`` from ``a.config`` (a training recipe) where the command line did not set a value;
    refuse settings the servers cannot honour (tensor parallelism, no model)."""
    if a.config:
        from r1vision.configs import read_recipe

        recipe = read_recipe(a.config)  # a path or a shipped recipe name, as --config everywhere
        given = {arg.split("=", 1)[0].lstrip("-").replace("-", "_") for arg in argv if arg.startswith("--")}
        for key, option in RECIPE_KEYS.items():
            if option is None or key not in recipe or option in given or recipe[key] is None:
                continue
            setattr(a, option, recipe[key])
        # a video task's trainer sends clips: servers take them, sized by its video budget
        if _video_recipe(recipe):
            if "max_videos_per_prompt" not in given:
                a.max_videos_per_prompt = int(recipe.get("max_videos_per_prompt") or 1)
            for key in ("video_max_frames", "video_max_frame_pixels"):
                if key not in given and recipe.get(key) is not None:
                    setattr(a, key, int(recipe[key]))
        # a trainer that sends LoRA adapters needs servers with LoRA support for its rank
        if recipe.get("vllm_lora_adapters") and "max_lora_rank" not in given:
            a.max_lora_rank = int(recipe.get("lora_r") or (16 if recipe.get("use_peft") else 0))
    if a.max_completion_length is None and a.max_model_len is None:
        # TRL's default, as the trainer would use it; a server sized to the model's whole context may
        # not even start (Qwen3-VL: 262,144 tokens of KV cache)
        from trl import GRPOConfig

        a.max_completion_length = GRPOConfig.max_completion_length
    if not a.model:
        raise ValueError("--model is required (or a --config recipe that names it)")
    if a.server == "r1vision" and a.tensor_parallel_size != 1:
        from r1vision.generation.vllm_server import _TP_REFUSAL

        raise ValueError(_TP_REFUSAL)
    if a.server == "vllm" and a.num_servers != 1:
        raise ValueError("--server vllm runs one server (use --data-parallel-size for replicas)")


def _video_recipe(recipe: dict[str, Any]) -> bool:
    """Whether the recipe trains a task whose rows carry videos (``Task.videos``)."""
    name = recipe.get("task")
    if not name:
        return False
    from r1vision.tasks import get_task

    try:
        return bool(get_task(str(name)).videos)
    except (KeyError, ValueError):  # an unknown task is the trainer's to refuse
        return False


def vllm_serve_main(argv: Sequence[str] | None = None) -> int:
    """``r1vision vllm-serve``: start the servers, wait for health, serve until stopped (or run a command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    p = _server_parser("r1vision vllm-serve", model_required=False)
    p.description = (
        "Start N r1vision vLLM servers (server i on --base-port + i), one per training process "
        "(--vllm_server_per_rank true). With `-- COMMAND ...` run the command while they are up. "
        "--config reads the training recipe's model, pixel budget, image limit and lengths (flags win)."
    )
    p.add_argument("--config", default=None, help="the training recipe YAML (r1vision grpo --config)")
    p.add_argument(
        "--server",
        choices=("r1vision", "vllm"),
        default="r1vision",
        help="r1vision: per-rank servers (--vllm_server_per_rank); vllm: one vLLM server for TRL's server "
        "mode (NCCL weight sync; replaces the deprecated `trl vllm-serve`)",
    )
    p.add_argument("--data-parallel-size", type=int, default=1, help="--server vllm: engine replicas")
    p.add_argument("--num-servers", type=int, default=1)
    p.add_argument("--base-port", type=int, default=8000)
    p.add_argument("--first-device", type=int, default=0, help="first GPU (of the visible ones) to use")
    p.add_argument("--health-timeout", type=float, default=600.0, help="seconds to wait for all servers")
    p.add_argument("--log-dir", default="logs", help="server i logs to LOG_DIR/vllm-server-PORT.log")
    a = p.parse_args(argv)
    try:
        apply_recipe(a, argv)
    except (ValueError, FileNotFoundError) as exc:  # a bad recipe or name: one line
        print(f"vllm-serve: {exc}", file=sys.stderr, flush=True)
        return 2
    server_args = vllm_server_args(a) if a.server == "vllm" else _r1vision_server_args(a)
    group = ServerGroup(
        a.model,
        num_servers=a.num_servers,
        base_port=a.base_port,
        host=a.host,
        tensor_parallel_size=a.tensor_parallel_size,
        first_device=a.first_device,
        log_dir=a.log_dir,
        seed=a.seed,
        server_args=server_args,
        kind=a.server,
        data_parallel_size=a.data_parallel_size,
    )
    return _serve(group, a.health_timeout, command)


def _r1vision_server_args(a: Any) -> list[str]:
    server_args = ["--gpu-memory-utilization", str(a.gpu_memory_utilization)]
    server_args += ["--max-images-per-prompt", str(a.max_images_per_prompt)]
    if getattr(a, "max_videos_per_prompt", 0):
        server_args += ["--max-videos-per-prompt", str(a.max_videos_per_prompt)]
    if getattr(a, "max_lora_rank", 0):
        server_args += ["--max-lora-rank", str(a.max_lora_rank)]
    for flag in (
        "min_pixels",
        "max_pixels",
        "dtype",
        "max_model_len",
        "max_completion_length",
        "max_prompt_text_tokens",
        "video_max_frames",
        "video_max_frame_pixels",
    ):
        if getattr(a, flag) is not None:
            server_args += ["--" + flag.replace("_", "-"), str(getattr(a, flag))]
    return server_args


def vllm_server_args(a: Any) -> list[str]:
    """vLLM ``serve`` flags with the run's pixel budget, image limit and ``max_model_len``."""
    import json

    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(a.model)
    # The trainer's rule: explicit values win, the rest from the model's processor (or the family default).
    budget = resolve_budget(model_family(config), a.min_pixels, a.max_pixels, a.model)
    max_len = resolve_max_model_len(
        a.max_model_len,
        budget,
        a.max_images_per_prompt,
        a.max_completion_length,
        a.max_prompt_text_tokens,
        model_context(config),
    )
    args = ["--gpu-memory-utilization", str(a.gpu_memory_utilization), "--max-model-len", str(max_len)]
    args += ["--limit-mm-per-prompt", json.dumps({"image": a.max_images_per_prompt, "video": 0})]
    args += ["--mm-processor-kwargs", json.dumps(budget_processor_kwargs(budget))]
    return args + (["--dtype", a.dtype] if a.dtype else [])


def _serve(group: ServerGroup, health_timeout: float, command: list[str]) -> int:
    """Start ``group``, wait for health, run ``command`` (if any) while it is up; always stop it."""

    def on_signal(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    child: subprocess.Popen | None = None
    try:
        group.start()
        group.wait_healthy(health_timeout)
        print(f"vllm-serve: {group.num_servers} server(s) healthy on ports {group.ports}", flush=True)
        if command:
            child = subprocess.Popen(command, start_new_session=True)
        while True:
            if child is not None and child.poll() is not None:
                return child.returncode
            dead = group.dead()
            if dead is not None:
                print(f"vllm-serve: {group.describe_death(dead)}", file=sys.stderr, flush=True)
                return 1
            time.sleep(1.0)
    except ServerStartError as exc:
        print(f"vllm-serve: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        # A second Ctrl-C / SIGTERM must not interrupt the clean-up and leave servers behind.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if child is not None and child.poll() is None:
            _signal_group(child, signal.SIGTERM)
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_group(child, signal.SIGKILL)
        group.stop()
