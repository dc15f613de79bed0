"""Per-rank vLLM servers: ``r1vision vllm-serve``, the server app, and the client each training process uses.

R1-SGG's layout for clusters of 24 GB cards puts vLLM servers on some GPUs and ZeRO-3 trainers on the
others, optionally one server per training process. TRL's server mode does not fit that: its client talks
to one server (rank 0 gathers every prompt and broadcasts the completions) and syncs weights over NCCL,
which fails on CPU. Here each training process talks to its own server (``vllm_server_port + local
rank``), sends its own prompts and pushes its own copy of the weights over HTTP.

- :func:`build_app`: a small FastAPI app around one in-process ``vllm.LLM`` built with
  :func:`~r1vision.generation.vllm_engine.engine_kwargs` (the trainer's pixel budget, image limit and
  dtype rules, as in colocate mode). Endpoints: ``GET /health``, ``GET /info`` (budget, request
  counters), ``POST /generate`` (token IDs with one unexpanded placeholder per image, PNG images, sampling
  parameters incl. ``n`` and ``logprobs``), ``POST /weights/begin|chunk|end`` (safetensors chunks loaded
  through :class:`~r1vision.generation.vllm_engine.InplaceReload`, so it works on vLLM-CPU and GPUs) and
  ``POST /reset_cache``.
- :class:`ServerGroup`: starts ``N`` server processes (server ``i`` on ``base_port + i``, on GPUs a block
  of ``tensor_parallel_size`` devices each), waits for their health with a timeout and an error that
  names the port and the server log's tail, and stops them (process groups, SIGTERM then SIGKILL).
- :func:`vllm_serve_main`: the ``r1vision vllm-serve`` command; with ``-- COMMAND`` it runs the command
  while the servers are up and stops them when it ends, or stops everything when a server dies.
- :class:`VLLMServerClient`: the HTTP client (health wait with a timeout, generate, chunked weight push).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

DEFAULT_CHUNK_BYTES = 256 * 2**20  # weight-push request size; bounds the client's extra host memory


class ServerStartError(RuntimeError):
    """A vLLM server exited or did not become healthy in time."""


# ------------------------------------------------------------------------------------------------ encoding
def encode_image(image: Any) -> str:
    """PNG bytes of a PIL image (or an HWC uint8 array), base64-encoded for JSON."""
    from PIL import Image

    if not isinstance(image, Image.Image):
        import numpy as np

        image = Image.fromarray(np.asarray(image))
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")  # lossless: the server sees the trainer's pixels
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode_image(data: str) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")


# -------------------------------------------------------------------------------------------------- server
@dataclass
class ServerOptions:
    """What one server process runs: the model, its engine settings, and where it listens."""

    model: str
    port: int
    host: str = "127.0.0.1"
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    min_pixels: int | None = None
    max_pixels: int | None = None
    max_images_per_prompt: int = 1
    dtype: str | None = None
    max_model_len: int | None = None
    seed: int = 0


class ServerEngine:
    """One in-process ``vllm.LLM`` with the trainer's budget, used by one request at a time."""

    def __init__(self, options: ServerOptions) -> None:
        from transformers import AutoConfig, AutoProcessor

        from r1vision.generation import vllm_compat
        from r1vision.generation.vllm_engine import engine_kwargs, setup_cpu_env
        from r1vision.trainer.modeling import budget_for, model_family

        setup_cpu_env()
        # In-process engine core: weights are loaded into the model object directly (no RPC to a worker).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm_compat.apply()
        self.options = options
        # Read the model before importing vLLM, so a wrong path fails in seconds.
        family = model_family(AutoConfig.from_pretrained(options.model))
        processor = AutoProcessor.from_pretrained(options.model)
        self.budget = budget_for(processor, family, options.min_pixels, options.max_pixels)
        from vllm import LLM

        # On CPU generate in float32, the training dtype there (vLLM-CPU would pick bfloat16 for "auto");
        # on GPUs the checkpoint's dtype, as TRL's colocate mode does.
        dtype = options.dtype or ("auto" if torch.cuda.is_available() else "float32")
        kwargs = engine_kwargs(
            options.model,
            self.budget,
            options.max_images_per_prompt,
            dtype=dtype,
            max_model_len=options.max_model_len,
            seed=options.seed,
            # The importance-sampling correction wants log-probs after temperature and logit processing.
            logprobs_mode="processed_logprobs",
        )
        if torch.cuda.is_available():
            kwargs["gpu_memory_utilization"] = options.gpu_memory_utilization
            kwargs["tensor_parallel_size"] = options.tensor_parallel_size
        self.llm = LLM(**kwargs)
        self.lock = threading.Lock()
        self.reload: Any = None
        self.stats = {
            "generate_requests": 0,
            "prompts": 0,
            "completions": 0,
            "weight_updates": 0,
            "tensors": 0,
        }

    def info(self) -> dict[str, Any]:
        config = self.llm.llm_engine.model_config
        return {
            "model": self.options.model,
            "port": self.options.port,
            "pid": os.getpid(),
            "budget": {"min_pixels": self.budget.min_pixels, "max_pixels": self.budget.max_pixels},
            "max_images_per_prompt": self.options.max_images_per_prompt,
            "dtype": str(config.dtype).removeprefix("torch."),
            "max_model_len": config.max_model_len,
            # TRL's trainer reads info["model_config"]["logprobs_mode"] from a server at start-up.
            "model_config": {"logprobs_mode": "processed_logprobs"},
            "stats": dict(self.stats),
        }

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        sampling = dict(body.get("sampling") or {})
        if "logit_bias" in sampling and sampling["logit_bias"]:  # JSON keys are strings
            sampling["logit_bias"] = {int(k): float(v) for k, v in sampling["logit_bias"].items()}
        if isinstance(sampling.get("structured_outputs"), dict):
            sampling["structured_outputs"] = StructuredOutputsParams(**sampling["structured_outputs"])
        prompts, params = [], []
        for request in body["requests"]:
            prompt: dict[str, Any] = {"prompt_token_ids": [int(t) for t in request["prompt_token_ids"]]}
            images = [decode_image(i) for i in request.get("images") or []]
            if images:
                prompt["multi_modal_data"] = {"image": images if len(images) > 1 else images[0]}
            prompts.append(prompt)
            params.append(SamplingParams(**{**sampling, "n": int(request.get("n", 1))}))
        with self.lock:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
            self.stats["generate_requests"] += 1
            self.stats["prompts"] += len(prompts)
            self.stats["completions"] += sum(len(o.outputs) for o in outputs)
        results = []
        for out in outputs:
            completions = []
            for c in out.outputs:
                logprobs = token_ids = None
                if c.logprobs is not None:
                    ranked = [sorted(step.items(), key=lambda kv: kv[1].rank) for step in c.logprobs]
                    token_ids = [[int(t) for t, _ in step] for step in ranked]
                    logprobs = [[_finite(lp.logprob) for _, lp in step] for step in ranked]
                completions.append(
                    {"token_ids": list(c.token_ids), "logprobs": logprobs, "logprob_token_ids": token_ids}
                )
            results.append({"prompt_token_ids": list(out.prompt_token_ids), "completions": completions})
        return {"results": results}

    def begin_weights(self, names: Sequence[str]) -> None:
        from r1vision.generation.vllm_engine import InplaceReload

        if self.options.tensor_parallel_size > 1:
            # The reload reaches into the in-process model; tensor-parallel shards live in worker processes.
            raise NotImplementedError(
                "weight updates need --tensor-parallel-size 1 per server (one server per GPU instead)"
            )
        if not names:  # an empty reload would reset the whole model and load nothing into it
            raise ValueError("weights/begin needs the names of the tensors (or modules) to be loaded")
        with self.lock:
            self.reload = InplaceReload(self.llm, names)

    def load_chunk(self, data: bytes) -> int:
        from safetensors.torch import load

        tensors = load(data)
        with self.lock:
            if self.reload is None:
                raise RuntimeError("weights/chunk before weights/begin")
            self.reload.load(tensors.items())
        return len(tensors)

    def end_weights(self) -> int:
        with self.lock:
            if self.reload is None:
                raise RuntimeError("weights/end before weights/begin")
            count = self.reload.finish()
            self.reload = None
            self.stats["weight_updates"] += 1
            self.stats["tensors"] += count
        return count

    def reset_cache(self) -> None:
        with self.lock:
            self.llm.reset_prefix_cache()
            self.llm.llm_engine.reset_encoder_cache()


def _finite(x: float) -> float | None:
    return None if x != x else float(x)  # NaN -> None, as TRL's extract_logprobs does


def build_app(engine: ServerEngine) -> Any:
    """The FastAPI app serving ``engine`` (blocking work runs in the thread pool, one call at a time)."""
    from fastapi import FastAPI, Request
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title="r1vision vLLM server")

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "pid": os.getpid()}

    @app.get("/info")
    def info() -> dict[str, Any]:
        return engine.info()

    @app.post("/generate")
    def generate(body: dict[str, Any]) -> dict[str, Any]:
        return engine.generate(body)

    @app.post("/weights/begin")
    def weights_begin(body: dict[str, Any]) -> dict[str, Any]:
        engine.begin_weights(body.get("names") or [])
        return {"status": "ok"}

    async def weights_chunk(request: Request) -> dict[str, Any]:
        data = await request.body()
        return {"tensors": await run_in_threadpool(engine.load_chunk, data)}

    # Postponed annotations are strings FastAPI resolves in module globals, where Request is not imported.
    weights_chunk.__annotations__["request"] = Request
    app.post("/weights/chunk")(weights_chunk)

    @app.post("/weights/end")
    def weights_end() -> dict[str, Any]:
        return {"tensors": engine.end_weights()}

    @app.post("/reset_cache")
    def reset_cache() -> dict[str, Any]:
        engine.reset_cache()
        return {"status": "ok"}

    return app


def _server_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--model", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--min-pixels", type=int, default=None, help="pixel budget (default: the processor's)")
    p.add_argument("--max-pixels", type=int, default=None, help="pixel budget (default: the processor's)")
    p.add_argument("--max-images-per-prompt", type=int, default=1)
    p.add_argument("--dtype", default=None, help="default: the checkpoint's on GPUs, float32 on CPU")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--seed", type=int, default=0, help="server i uses seed + i")
    return p


def _serve_one(argv: Sequence[str]) -> int:
    """One server process (started by :class:`ServerGroup`)."""
    import uvicorn

    p = _server_parser("python -m r1vision.generation.vllm_server")
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args(argv)
    options = ServerOptions(**{k: v for k, v in vars(a).items()})
    engine = ServerEngine(options)
    print(f"r1vision vLLM server: {options.model} on {options.host}:{options.port}", flush=True)
    uvicorn.run(build_app(engine), host=options.host, port=options.port, log_level="warning")
    return 0


# ---------------------------------------------------------------------------------------------- launcher
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
        need = self.first_device + self.num_servers * self.tensor_parallel_size
        if need > len(ids):
            raise ServerStartError(
                f"{self.num_servers} server(s) x tensor_parallel_size {self.tensor_parallel_size} from device "
                f"{self.first_device} need {need} GPUs; {len(ids)} visible"
            )
        return ids

    def start(self) -> ServerGroup:
        """Start the processes (each in its own process group, logging to ``log_dir/vllm-server-PORT.log``)."""
        devices = self._devices()
        Path(self.log_dir).mkdir(parents=True, exist_ok=True)
        for i, port in enumerate(self.ports):
            env = {**os.environ, **self.env}
            if devices is not None:
                start = self.first_device + i * self.tensor_parallel_size
                env["CUDA_VISIBLE_DEVICES"] = ",".join(devices[start : start + self.tensor_parallel_size])
            cmd = [sys.executable, "-m", "r1vision.generation.vllm_server", "--model", self.model]
            cmd += ["--port", str(port), "--host", self.host]
            cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size), *self.server_args]
            cmd += ["--seed", str(self.seed + i)]  # servers sample differently for identical prompts
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


def vllm_serve_main(argv: Sequence[str] | None = None) -> int:
    """``r1vision vllm-serve``: start the servers, wait for health, serve until stopped (or run a command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    p = _server_parser("r1vision vllm-serve")
    p.description = (
        "Start N r1vision vLLM servers (server i on --base-port + i), one per training process "
        "(--vllm_server_per_rank true). With `-- COMMAND ...` run the command while they are up."
    )
    p.add_argument("--num-servers", type=int, default=1)
    p.add_argument("--base-port", type=int, default=8000)
    p.add_argument("--first-device", type=int, default=0, help="first GPU (of the visible ones) to use")
    p.add_argument("--health-timeout", type=float, default=600.0, help="seconds to wait for all servers")
    p.add_argument("--log-dir", default="logs", help="server i logs to LOG_DIR/vllm-server-PORT.log")
    a = p.parse_args(argv)
    server_args = ["--gpu-memory-utilization", str(a.gpu_memory_utilization)]
    server_args += ["--max-images-per-prompt", str(a.max_images_per_prompt)]
    for flag in ("min_pixels", "max_pixels", "dtype", "max_model_len"):
        if getattr(a, flag) is not None:
            server_args += ["--" + flag.replace("_", "-"), str(getattr(a, flag))]
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
    )

    def on_signal(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    child: subprocess.Popen | None = None
    try:
        group.start()
        group.wait_healthy(a.health_timeout)
        print(f"vllm-serve: {a.num_servers} server(s) healthy on ports {group.ports}", flush=True)
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


# ------------------------------------------------------------------------------------------------ client
class VLLMServerClient:
    """HTTP client of one r1vision vLLM server (one per training process)."""

    def __init__(self, base_url: str, request_timeout: float | None = 3600.0) -> None:
        import requests

        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        self.request_timeout = request_timeout

    def _post(self, path: str, **kwargs: Any) -> Any:
        response = self.session.post(self.base_url + path, timeout=self.request_timeout, **kwargs)
        if not response.ok:
            raise RuntimeError(
                f"vLLM server {self.base_url}{path}: HTTP {response.status_code}: {response.text[:2000]}"
            )
        return response.json()

    def wait_healthy(self, timeout: float) -> dict[str, Any]:
        """Poll ``/health`` until it answers; ``ConnectionError`` naming the URL after ``timeout`` seconds."""
        import requests

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                if self.session.get(self.base_url + "/health", timeout=5).ok:
                    return self.get_server_info()
            except requests.RequestException as exc:
                last = exc
            if time.monotonic() > deadline:
                raise ConnectionError(
                    f"no r1vision vLLM server answered at {self.base_url} within {timeout:.0f}s ({last}). "
                    "Start one server per training process with `r1vision vllm-serve --num-servers N "
                    "--base-port P` (P = vllm_server_port), or raise vllm_server_timeout."
                )
            time.sleep(1.0)

    def get_server_info(self) -> dict[str, Any]:
        """``/info``: model, budget, dtype, request counters (also what TRL's trainer reads at start-up)."""
        response = self.session.get(self.base_url + "/info", timeout=30)
        response.raise_for_status()
        return response.json()

    def generate(self, requests: list[dict[str, Any]], sampling: dict[str, Any]) -> list[dict[str, Any]]:
        """``requests``: ``{"prompt_token_ids", "images" (PIL), "n"}``; returns one result per request."""
        body = {
            "requests": [{**r, "images": [encode_image(i) for i in r.get("images") or []]} for r in requests],
            "sampling": sampling,
        }
        return self._post("/generate", data=json.dumps(body), headers=_JSON)["results"]

    def update_weights(
        self,
        names: Sequence[str],
        weights: Iterable[tuple[str, torch.Tensor]],
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> int:
        """Push ``(name, tensor)`` pairs in safetensors chunks; ``names`` pick the submodules to reload."""
        from safetensors.torch import save

        self._post("/weights/begin", data=json.dumps({"names": list(names)}), headers=_JSON)
        chunk: dict[str, torch.Tensor] = {}
        size = 0
        for name, tensor in weights:
            # A copy: under ZeRO-3 the gathered tensor is released when the next one is gathered.
            chunk[name] = tensor.detach().to("cpu", copy=True).contiguous()
            size += chunk[name].numel() * chunk[name].element_size()
            if size >= chunk_bytes:
                self._post("/weights/chunk", data=save(chunk))
                chunk, size = {}, 0
        if chunk:
            self._post("/weights/chunk", data=save(chunk))
        return int(self._post("/weights/end")["tensors"])

    def reset_cache(self) -> None:
        self._post("/reset_cache")


_JSON = {"Content-Type": "application/json"}


if __name__ == "__main__":
    raise SystemExit(_serve_one(sys.argv[1:]))
