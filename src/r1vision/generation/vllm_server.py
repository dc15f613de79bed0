"""One r1vision vLLM server process: ``python -m r1vision.generation.vllm_server --model M --port P ...``.

R1-SGG's layout for clusters of 24 GB cards puts vLLM servers on some GPUs and ZeRO-3 trainers on the
others, optionally one server per training process. TRL's server mode does not fit that: its client talks
to one server (rank 0 gathers every prompt and broadcasts the completions) and syncs weights over NCCL,
which fails on CPU. Here each training process talks to its own server (``vllm_server_port + local
rank``), sends its own prompts and pushes its own copy of the weights over HTTP.

:func:`build_app` is a small FastAPI app around one in-process ``vllm.LLM`` built with
:func:`~r1vision.generation.vllm_engine.engine_kwargs` (the trainer's pixel budget, image limit and dtype
rules, as in colocate mode). Endpoints: ``GET /health``, ``GET /info`` (budget, request counters),
``POST /generate`` (token IDs with one unexpanded placeholder per image or video, PNG images, clips as
PNG frames with their metadata, sampling parameters incl. ``n`` and ``logprobs``), ``POST /weights/begin|chunk|end`` (safetensors chunks loaded through
:class:`~r1vision.generation.vllm_engine.InplaceReload`, so it works on vLLM-CPU and GPUs),
``POST /adapter`` (with ``--max-lora-rank``: a LoRA adapter as safetensors bytes, its PEFT config in the
``X-Adapter-Config`` header; generation then uses it through vLLM's LoRA support) and ``POST /reset_cache``.

The launcher (``r1vision vllm-serve``) is :mod:`r1vision.generation.vllm_launch`; the client each
training process uses is :mod:`r1vision.generation.vllm_client`.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from r1vision.generation import vllm_compat
from r1vision.generation.vllm_engine import InplaceReload, engine_kwargs, setup_cpu_env, video_request
from r1vision.vision.budget import resolve_budget
from r1vision.vision.family import model_family


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


def encode_clip(clip: Any) -> dict[str, Any]:
    """A :class:`~r1vision.vision.video.Clip` for JSON: its frames as lossless PNGs and its metadata."""
    return {
        "frames": [encode_image(frame) for frame in clip],
        "fps": clip.fps,
        "total_num_frames": int(clip.total_num_frames),
        "frames_indices": [int(i) for i in clip.frames_indices],
        "original_size": [int(v) for v in clip.original_size],
    }


def decode_clip(data: dict[str, Any]) -> Any:
    """The clip :func:`encode_clip` sent, pixel for pixel, with its metadata."""
    import numpy as np

    from r1vision.vision.video import Clip

    frames = np.stack([np.asarray(decode_image(f)) for f in data["frames"]])
    size = data["original_size"]
    return Clip(
        frames, data.get("fps"), int(data["total_num_frames"]), data["frames_indices"], (size[0], size[1])
    )


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
    max_videos_per_prompt: int = 0  # > 0: video prompts (clips arrive sampled and resized by the trainer)
    video_max_frames: int | None = None  # the trainer's video budget: sizes max_model_len for videos
    video_max_frame_pixels: int | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    max_completion_length: int | None = None
    max_prompt_text_tokens: int | None = None
    seed: int = 0
    max_lora_rank: int = 0  # > 0: vLLM's LoRA support on, adapters pushed to /adapter


class EngineThread:
    """One thread that builds an object and runs every call on it.

    vLLM's engine captures CUDA graphs and warms torch.compile on the thread that builds it; FastAPI runs
    blocking handlers on a pool of worker threads. Handing every call to the thread that built the engine
    keeps it single-threaded whichever worker took the request (and serialises the calls).
    """

    def __init__(self, name: str = "vllm-engine") -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.ident: int | None = None

    def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on the engine thread; its result, or its exception re-raised here."""

        def call() -> Any:
            if self.ident is None:
                self.ident = threading.get_ident()
            return fn(*args, **kwargs)

        return self._executor.submit(call).result()


class ServerEngine:
    """One in-process ``vllm.LLM`` with the trainer's budget, built and driven from one thread
    (:class:`EngineThread`), one request at a time."""

    def __init__(self, options: ServerOptions) -> None:
        self.thread = EngineThread()
        self.thread.run(self._build, options)

    def _build(self, options: ServerOptions) -> None:
        from transformers import AutoConfig, AutoProcessor

        setup_cpu_env()
        # In-process engine core: weights are loaded into the model object directly (no RPC to a worker).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm_compat.apply()
        self.options = options
        # Read the model before importing vLLM, so a wrong path fails in seconds.
        model_config = AutoConfig.from_pretrained(options.model)
        family = model_family(model_config)
        processor = AutoProcessor.from_pretrained(options.model)
        self.budget = resolve_budget(family, options.min_pixels, options.max_pixels, processor)
        if options.tensor_parallel_size > 1:
            raise ValueError(_TP_REFUSAL)
        max_model_len = options.max_model_len
        if max_model_len is None and options.max_completion_length is not None:
            # The run's own lengths: vLLM's default is the model's whole context (its KV cache alone can
            # exceed a 24 GB card).
            from r1vision.generation.vllm_plan import max_video_tokens, model_context, resolve_max_model_len
            from r1vision.vision.video import VideoBudget

            video_tokens = 0
            if options.max_videos_per_prompt:
                video_budget = VideoBudget.for_family(
                    family,
                    max_frames=options.video_max_frames,
                    max_frame_pixels=options.video_max_frame_pixels,
                )
                video_tokens = options.max_videos_per_prompt * max_video_tokens(video_budget)
            max_model_len = resolve_max_model_len(
                None,
                self.budget,
                options.max_images_per_prompt,
                options.max_completion_length,
                options.max_prompt_text_tokens,
                context=model_context(model_config),
                video_tokens=video_tokens,
            )
        from vllm import LLM

        # On CPU generate in float32, the training dtype there (vLLM-CPU would pick bfloat16 for "auto");
        # on GPUs the checkpoint's dtype, as TRL's colocate mode does.
        dtype = options.dtype or ("auto" if torch.cuda.is_available() else "float32")
        kwargs = engine_kwargs(
            options.model,
            self.budget,
            options.max_images_per_prompt,
            dtype=dtype,
            max_model_len=max_model_len,
            seed=options.seed,
            max_videos=options.max_videos_per_prompt,
            # The importance-sampling correction wants log-probs after temperature and logit processing.
            logprobs_mode="processed_logprobs",
        )
        if torch.cuda.is_available():
            kwargs["gpu_memory_utilization"] = options.gpu_memory_utilization
        self.adapters: Any = None
        if options.max_lora_rank > 0:
            from r1vision.generation.lora_push import AdapterVersions, engine_lora_rank

            kwargs.update(
                enable_lora=True, max_lora_rank=engine_lora_rank(options.max_lora_rank), max_loras=1
            )
            self.adapters = AdapterVersions()
        self.llm = LLM(**kwargs)
        self.lock = threading.Lock()
        self.reload: Any = None
        self.stats = {
            "generate_requests": 0,
            "prompts": 0,
            "completions": 0,
            "weight_updates": 0,
            "tensors": 0,
            "adapter_updates": 0,
        }

    def info(self) -> dict[str, Any]:
        return self.thread.run(self._info)

    def _info(self) -> dict[str, Any]:
        config = self.llm.llm_engine.model_config
        return {
            "model": self.options.model,
            "port": self.options.port,
            "pid": os.getpid(),
            "budget": {"min_pixels": self.budget.min_pixels, "max_pixels": self.budget.max_pixels},
            "max_images_per_prompt": self.options.max_images_per_prompt,
            "max_videos_per_prompt": self.options.max_videos_per_prompt,
            "dtype": str(config.dtype).removeprefix("torch."),
            "max_model_len": config.max_model_len,
            # TRL's trainer reads info["model_config"]["logprobs_mode"] from a server at start-up.
            "model_config": {"logprobs_mode": "processed_logprobs"},
            "stats": dict(self.stats),
            "engine_thread": self.thread.ident,  # every call runs on the thread that built the engine
            "max_lora_rank": self.options.max_lora_rank,
            "adapter_version": self.adapters.version if self.adapters is not None else None,
        }

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.thread.run(self._generate, body)

    def _generate(self, body: dict[str, Any]) -> dict[str, Any]:
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
            clips = [decode_clip(c) for c in request.get("videos") or []]
            if images:
                prompt["multi_modal_data"] = {"image": images if len(images) > 1 else images[0]}
            elif clips:
                prompt.update(video_request(clips))
            prompts.append(prompt)
            params.append(SamplingParams(**{**sampling, "n": int(request.get("n", 1))}))
        with self.lock:
            request = self.adapters.request if self.adapters is not None else None
            outputs = self.llm.generate(prompts, params, use_tqdm=False, lora_request=request)
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
        return self.thread.run(self._begin_weights, names)

    def _begin_weights(self, names: Sequence[str]) -> None:

        if not names:  # an empty reload would reset the whole model and load nothing into it
            raise ValueError("weights/begin needs the names of the tensors (or modules) to be loaded")
        with self.lock:
            self.reload = InplaceReload(self.llm, names)

    def load_chunk(self, data: bytes) -> int:
        return self.thread.run(self._load_chunk, data)

    def _load_chunk(self, data: bytes) -> int:
        from safetensors.torch import load

        tensors = load(data)
        with self.lock:
            if self.reload is None:
                raise RuntimeError("weights/chunk before weights/begin")
            self.reload.load(tensors.items())
        return len(tensors)

    def end_weights(self) -> int:
        return self.thread.run(self._end_weights)

    def _end_weights(self) -> int:
        with self.lock:
            if self.reload is None:
                raise RuntimeError("weights/end before weights/begin")
            count = self.reload.finish()
            self.reload = None
            self.stats["weight_updates"] += 1
            self.stats["tensors"] += count
        return count

    def load_adapter(self, data: bytes, config: dict[str, Any]) -> int:
        return self.thread.run(self._load_adapter, data, config)

    def _load_adapter(self, data: bytes, config: dict[str, Any]) -> int:
        if self.adapters is None:
            raise ValueError("this server runs without LoRA support: start it with --max-lora-rank R")
        if int(config.get("r", 0)) > self.options.max_lora_rank:
            raise ValueError(
                f"adapter rank {config.get('r')} above this server's --max-lora-rank "
                f"{self.options.max_lora_rank}"
            )
        with self.lock:
            self.adapters.add(data, config)
            self.stats["adapter_updates"] += 1
        return self.adapters.version

    def reset_cache(self) -> None:
        return self.thread.run(self._reset_cache)

    def _reset_cache(self) -> None:
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

    async def adapter(request: Request) -> dict[str, Any]:
        import json

        data = await request.body()
        config = json.loads(request.headers.get("X-Adapter-Config") or "{}")
        return {"version": await run_in_threadpool(engine.load_adapter, data, config)}

    adapter.__annotations__["request"] = Request
    app.post("/adapter")(adapter)

    @app.post("/reset_cache")
    def reset_cache() -> dict[str, Any]:
        engine.reset_cache()
        return {"status": "ok"}

    return app


_TP_REFUSAL = (
    "r1vision vLLM servers need --tensor-parallel-size 1: the trainer pushes weights into the server's "
    "in-process engine, and tensor-parallel shards live in worker processes it cannot reach. Run one "
    "server per GPU (a model too large for one GPU does not fit the 24 GB per-rank layout anyway)."
)


def _server_parser(prog: str, model_required: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--model", required=model_required)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--tensor-parallel-size", type=int, default=1, help="must be 1 (weight pushes)")
    p.add_argument("--min-pixels", type=int, default=None, help="pixel budget (default: the processor's)")
    p.add_argument("--max-pixels", type=int, default=None, help="pixel budget (default: the processor's)")
    p.add_argument("--max-images-per-prompt", type=int, default=1)
    p.add_argument(
        "--max-videos-per-prompt", type=int, default=0, help="> 0 for video datasets (the trainer's setting)"
    )
    p.add_argument("--video-max-frames", type=int, default=None, help="the trainer's (sizes max_model_len)")
    p.add_argument(
        "--video-max-frame-pixels", type=int, default=None, help="the trainer's (sizes max_model_len)"
    )
    p.add_argument("--dtype", default=None, help="default: the checkpoint's on GPUs, float32 on CPU")
    p.add_argument(
        "--max-model-len", type=int, default=None, help="default: from the lengths below and the budget"
    )
    p.add_argument("--max-completion-length", type=int, default=None, help="the trainer's")
    p.add_argument("--max-prompt-text-tokens", type=int, default=None, help="the trainer's (default 1024)")
    p.add_argument("--seed", type=int, default=0, help="server i uses seed + i")
    p.add_argument(
        "--max-lora-rank",
        type=int,
        default=0,
        help="> 0: vLLM's LoRA support on, for trainers with vllm_lora_adapters (the recipe's lora_r)",
    )
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


if __name__ == "__main__":
    raise SystemExit(_serve_one(sys.argv[1:]))
