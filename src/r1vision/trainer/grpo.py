"""``VisionGRPOTrainer``: TRL's ``GRPOTrainer`` with first-class image handling.

What it adds, each in the narrowest override:

- ``__init__``: loads the processor with the pixel budget, validates the dataset before the first step,
  freezes the vision tower / builds a vision-free LoRA config, writes ``metrics.csv``.
- ``_generate_and_score_completions``: turns each row's images (PIL, path, bytes, ``datasets.Image``) into
  RGB images resized to the budget and adds ``image_sizes`` / ``original_image_sizes`` columns, which
  TRL forwards to reward functions; afterwards swaps in the configured advantage estimator.
- ``_tokenize_prompts``: checks, per sample, that the image placeholder tokens equal the image features.
- with ``dynamic_sampling``, ``_generate_and_score_completions`` generates more rounds until the batch holds
  only groups with reward spread (:mod:`r1vision.trainer.dynamic_sampling`).
- checkpoints keep the generation they interrupt (:mod:`r1vision.trainer.generation_buffer`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import split_pixel_values_by_grid, unsplit_pixel_values_by_grid

from r1vision.tasks.group_filter import select_groups_by_std
from r1vision.trainer.advantages import compute_advantages
from r1vision.trainer.checkpoint import CheckpointRenameMixin
from r1vision.trainer.config import VisionGRPOConfig
from r1vision.trainer.dynamic_sampling import groups_with_spread, merge_rounds, reserve_indices
from r1vision.trainer.fused_head import labelled_positions_only
from r1vision.trainer.generation_buffer import GenerationBufferMixin
from r1vision.trainer.logline import use_compact_log
from r1vision.trainer.output import FinalOutputMixin
from r1vision.trainer.sample_log import ROW_INDEX, with_row_index
from r1vision.trainer.setup import VisionSetupMixin, drop_vision_input_grad_hooks
from r1vision.trainer.validation import first_row, prompt_texts, row_label
from r1vision.trainer.video_inputs import (
    MixedVisionInputError,
    count_video_parts,
    fill_video_parts,
    forward_with_videos,
    split_video_fields,
)
from r1vision.vision.images import images_of_row, vision_columns, with_vision_columns
from r1vision.vision.video import clips_of_prompt, load_clip, videos_of_row

logger = logging.getLogger(__name__)


class ImagePlaceholderMismatchError(ValueError):
    """The tokenized prompt's image tokens do not match the number of image features of its images."""


class VisionGRPOTrainer(
    FinalOutputMixin, CheckpointRenameMixin, GenerationBufferMixin, VisionSetupMixin, GRPOTrainer
):
    """GRPO for Qwen-VL models on image datasets. Takes the same arguments as ``trl.GRPOTrainer``."""

    _r1vision_kind = "grpo"

    def __init__(
        self,
        model: str | Any,
        reward_funcs: Callable | Sequence[Callable],
        args: VisionGRPOConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        peft_config: Any = None,
        callbacks: list | None = None,
        **kwargs: Any,
    ) -> None:
        args = args or VisionGRPOConfig(output_dir="outputs/grpo")
        processing_class, peft_config, callbacks = self._prepare_vision(
            model, args, processing_class, peft_config, callbacks, [train_dataset, eval_dataset]
        )
        processing_class.tokenizer.padding_side = "left"  # GRPO generates from left-padded prompts
        video_dataset = _prepare_for_videos(args, train_dataset, processing_class)
        train_dataset = with_row_index(train_dataset)
        eval_dataset = with_row_index(eval_dataset)

        generation: contextlib.AbstractContextManager = contextlib.nullcontext()
        if args.use_vllm:  # TRL builds its vLLM backend in __init__: hand it our VLM-aware subclass
            from r1vision.generation.vllm_plan import max_video_tokens, resolve_max_model_len
            from r1vision.generation.vllm_select import vision_vllm_generation

            max_images = getattr(args, "max_images_per_prompt", 1)
            max_videos = int(getattr(args, "max_videos_per_prompt", 1)) if video_dataset else 0
            # no video budget: not a Qwen-VL family, and the first video row is refused in one line
            known = max_videos and self.video_budget is not None
            video_tokens = max_videos * max_video_tokens(self.video_budget) if known else 0
            generation = vision_vllm_generation(
                max_images,
                per_rank_servers=getattr(args, "vllm_server_per_rank", False),
                mode=args.vllm_mode,
                lora_adapters=getattr(args, "vllm_lora_adapters", False),
                max_videos=max_videos,
                max_model_len=resolve_max_model_len(
                    args.vllm_max_model_length,
                    self.pixel_budget,
                    max_images,
                    args.max_completion_length,
                    getattr(args, "max_prompt_text_tokens", None),
                    video_tokens=video_tokens,
                )
                if self.pixel_budget is not None
                else args.vllm_max_model_length,
            )
        with generation:
            self._init_trl(
                args,
                model=model,
                reward_funcs=list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else reward_funcs,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                peft_config=peft_config,
                callbacks=callbacks,
                **kwargs,
            )
        use_compact_log(self)
        drop_vision_input_grad_hooks(self.model)
        self._image_cache: tuple[Any, Any] | None = None
        self._video_forward: list[dict[str, Any] | None] | None = None
        self._batch_labels: list[str] = []
        self._last_rewards_per_func: torch.Tensor | None = None
        if getattr(self.args, "dynamic_sampling", False):
            _check_dynamic_sampling(self.args, self.num_generations, self.train_dataset)

    # ----------------------------------------------------------------------------------------------- images
    def _prepare_vision_row(self, row: dict[str, Any]) -> dict[str, Any]:
        if videos_of_row(row):
            return self._prepare_video_row(row)
        if not images_of_row(row):
            return row
        # Rows arrive repeated num_generations times in a row; decode and resize each distinct row once.
        key = row.get("row_index")
        if key is not None and self._image_cache is not None and self._image_cache[0] == key:
            extra = self._image_cache[1]
        else:
            extra = vision_columns(row, self.pixel_budget, self.args.image_root)
            if key is not None:
                self._image_cache = (key, extra)
        return with_vision_columns(row, extra)

    def _prepare_video_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A video row: its clips decoded under the video budget, in the prompt's video parts."""
        label = row_label(row, row.get("row_index"))
        if images_of_row(row):
            raise MixedVisionInputError(
                f"{label}: the row has both images and videos; r1vision trains one kind per row "
                "(TRL scores image tensors only, so a mixed row would be scored without its images)"
            )
        if self.video_budget is None:
            raise MixedVisionInputError(
                f"{label}: videos need a Qwen-VL family model (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5); "
                f"this model is {self.model_family or 'another family'}"
            )
        key = row.get("row_index")
        if key is not None and self._image_cache is not None and self._image_cache[0] == key:
            clips = self._image_cache[1]
        else:
            root = self.args.image_root
            clips = [load_clip(v, self.video_budget, root) for v in videos_of_row(row)]
            if key is not None:
                self._image_cache = (key, clips)
        new = {k: v for k, v in row.items() if k not in ("video", "videos")}
        new["prompt"] = fill_video_parts(row["prompt"], clips, label)
        new["video_sizes"] = [[len(c), *c.frame_size] for c in clips]
        new["original_video_sizes"] = [[c.total_num_frames, *c.original_size] for c in clips]
        return new

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = self._generate_round(inputs)
        if getattr(self.args, "dynamic_sampling", False) and self.model.training:
            output = self._dynamic_sampling(output, len(inputs))
        return output

    def _generate_round(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's generation and scoring of one local batch, with images prepared and our advantages."""
        inputs = [self._prepare_vision_row(row) for row in inputs]
        if self.model.training and self._sample_log is not None:
            self._sample_log.record([row[ROW_INDEX] for row in inputs if row.get(ROW_INDEX) is not None])
        self._batch_labels = [row_label(row, row.get("row_index")) for row in inputs]
        kinds = {("video" if row.get("video_sizes") else "image") for row in inputs if "prompt" in row}
        has_images = any(images_of_row(row) for row in inputs)
        if "video" in kinds and has_images:
            raise MixedVisionInputError(
                "this batch mixes image rows and video rows; TRL scores image tensors only, so keep one kind "
                "per dataset (or per run)"
            )
        self._video_forward = None
        output = super()._generate_and_score_completions(inputs)
        if self._video_forward is not None:  # per sample, so it follows TRL's shuffle and split
            output["video_inputs"] = self._video_forward
        if self._last_rewards_per_func is not None:
            self._replace_advantages(output, len(inputs))
        return output

    def _tokenize_prompts(self, prompts: list):
        self._check_literal_vision_tokens(prompts)
        prompt_ids, images, multimodal_fields = super()._tokenize_prompts(prompts)
        if images is not None and "image_grid_thw" in multimodal_fields:
            self._check_placeholders(prompt_ids, images, multimodal_fields["image_grid_thw"])
        if "video_grid_thw" in multimodal_fields:
            counts = [count_video_parts(p) for p in prompts]
            self._video_forward = split_video_fields(multimodal_fields, counts)
            self._check_video_placeholders(prompt_ids, self._video_forward)
            if self.use_vllm:  # TRL hands vLLM token IDs and images only: the clips go beside them
                self.vllm_generation.pending_videos = [clips_of_prompt(p) for p in prompts]
        return prompt_ids, images, multimodal_fields

    def _check_video_placeholders(self, prompt_ids: list, per_sample: list) -> None:
        """Every sample must carry exactly as many video tokens as its videos produce features."""
        merge = self.processing_class.video_processor.merge_size
        for i, (ids, video) in enumerate(zip(prompt_ids, per_sample, strict=True)):
            expected = (
                0 if video is None else int(video["video_grid_thw"].prod(dim=-1).sum()) // (merge * merge)
            )
            found = _count_token(ids, self._video_pad_token_id)
            if found != expected:
                raise ImagePlaceholderMismatchError(
                    f"{self._label(i)}: the prompt has {found} video placeholder tokens but its video(s) produce "
                    f"{expected} video features. Use one {{'type': 'video'}} part per video and no literal "
                    "vision tokens in the text."
                )

    # ------------------------------------------------------------------------------------------------ videos
    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kwargs
    ):
        videos = getattr(self, "_video_forward", None)
        with labelled_positions_only():  # off a GPU, TRL's fused head projects the prompt too
            if not videos or all(v is None for v in videos):
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, **kwargs
                )
            token_ids = {"image": self._image_pad_token_id, "video": self._video_pad_token_id}
            with forward_with_videos(model, videos, input_ids.size(0), batch_size, token_ids):
                return super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, **kwargs
                )

    def _compute_loss(self, model, inputs):
        self._video_forward = inputs.get("video_inputs")  # this step's rows, after TRL's shuffle and split
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._video_forward = None

    def _label(self, i: int) -> str:
        return self._batch_labels[i] if i < len(self._batch_labels) else f"sample {i}"

    def _check_literal_vision_tokens(self, prompts: list) -> None:
        """Literal image tokens in prompt text add placeholders without features; name the sample."""
        token = getattr(self.processing_class, "image_token", "<|image_pad|>")
        for i, prompt in enumerate(prompts):
            found = sum(text.count(token) for text in prompt_texts(prompt))
            if found:
                raise ImagePlaceholderMismatchError(
                    f"{self._label(i)}: the prompt text holds {found} literal {token} token(s), so its "
                    "image placeholder tokens cannot match its image features. Use one {'type': 'image'} "
                    "part per image instead."
                )

    def _check_placeholders(self, prompt_ids: list, images: list, grid_thw: torch.Tensor) -> None:
        """Every sample must carry exactly as many image tokens as its images produce features."""
        merge = getattr(self.processing_class.image_processor, "merge_size", 2)
        per_image = (torch.as_tensor(grid_thw).prod(dim=-1) // (merge * merge)).tolist()
        token_id = self._image_pad_token_id
        cursor = 0
        for i, (ids, imgs) in enumerate(zip(prompt_ids, images, strict=True)):
            n_images = len(imgs or [])
            expected = int(sum(per_image[cursor : cursor + n_images]))
            cursor += n_images
            found = _count_token(ids, token_id)
            if found != expected:
                raise ImagePlaceholderMismatchError(
                    f"{self._label(i)}: the prompt has {found} image placeholder tokens but its {n_images} image(s) "
                    f"produce {expected} image features. Check that the prompt has one {{'type': 'image'}} "
                    "part per image and no literal vision tokens in its text."
                )

    # ------------------------------------------------------------------------------------- dynamic sampling
    def _dynamic_sampling(self, first: dict[str, Any], local: int) -> dict[str, Any]:
        """Rounds of generation until every process holds ``local / num_generations`` groups with reward
        spread (or ``dynamic_sampling_max_rounds``); one batch of those groups, in TRL's layout."""
        group, acc = self.num_generations, self.accelerator
        n_groups, start = local // group, acc.process_index * local
        rounds: list[dict[str, Any]] = []
        chosen: list[list[int]] = []
        flat: list[list[int]] = []

        def take(output: dict[str, Any]) -> None:
            spread = groups_with_spread(self._weighted_rewards()[start : start + local].cpu(), group)
            have = sum(len(c) for c in chosen)
            rounds.append(split_pixel_values_by_grid(output))
            chosen.append([g for g, s in enumerate(spread) if s][: n_groups - have])
            flat.append([g for g, s in enumerate(spread) if not s])

        take(first)
        max_rounds = int(self.args.dynamic_sampling_max_rounds)
        while len(rounds) < max_rounds:
            deficit = torch.tensor([n_groups - sum(len(c) for c in chosen)], device=acc.device)
            if int(acc.gather(deficit).max()) <= 0:  # every process has its batch: all stop together
                break
            take(self._generate_round(self._reserve_inputs(len(rounds), local)))
        with_spread = sum(len(c) for c in chosen)
        for r in range(len(rounds)):  # at the cap: complete the batch with flat groups (zero advantage)
            missing = n_groups - sum(len(c) for c in chosen)
            chosen[r] = sorted(chosen[r] + flat[r][: max(missing, 0)])
        rows = [[g * group + i for g in groups for i in range(group)] for groups in chosen]
        merged = unsplit_pixel_values_by_grid(
            merge_rounds(rounds, rows, int(self.processing_class.tokenizer.pad_token_id))
        )
        loss_mask = merged["completion_mask"]
        if merged.get("tool_mask") is not None:
            loss_mask = loss_mask * merged["tool_mask"]
        merged["num_items_in_batch"] = acc.gather(loss_mask.sum()).sum()
        spread_total = int(acc.gather(torch.tensor([with_spread], device=acc.device)).sum())
        groups_total = n_groups * acc.num_processes
        metrics = self._metrics["train"]
        metrics["dynamic_sampling/rounds"].append(float(len(rounds)))
        metrics["dynamic_sampling/prompts_drawn"].append(float(len(rounds) * groups_total))
        metrics["dynamic_sampling/groups_with_spread"].append(spread_total / groups_total)
        if spread_total < groups_total and acc.is_main_process:
            logger.warning(
                "dynamic sampling: %d of %d groups have reward spread after %d rounds (the cap); the rest "
                "train with zero advantage. Raise dynamic_sampling_max_rounds or check the rewards.",
                spread_total, groups_total, len(rounds),
            )  # fmt: skip
        return merged

    def _reserve_inputs(self, round_index: int, local: int) -> list[dict[str, Any]]:
        """This process's rows of an extra round: prompts drawn from the training set by (seed, step, round),
        each repeated ``num_generations`` times as TRL's sampler repeats them."""
        group, acc = self.num_generations, self.accelerator
        per_process = local // group
        picks = reserve_indices(
            len(self.train_dataset), per_process * acc.num_processes, self.args.seed,
            self.state.global_step, round_index,
        )  # fmt: skip
        mine = picks[acc.process_index * per_process : (acc.process_index + 1) * per_process]
        return [self.train_dataset[i] for i in mine for _ in range(group)]

    # ------------------------------------------------------------------------------------------- advantages
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _weighted_rewards(self) -> torch.Tensor:
        """Weighted reward sum per completion (global batch); NaN where every reward function returned None."""
        rewards_per_func = self._last_rewards_per_func
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        return torch.where(torch.isnan(rewards_per_func).all(dim=1), torch.nan, rewards)

    def _replace_advantages(self, output: dict[str, Any], local_batch: int) -> None:
        """Swap in the configured estimator and group filter; log the advantages that will train.

        TRL computed GRPO advantages over the global batch and logged them; for any other estimator, or with
        group filtering, both the local slice in ``output`` and the logged global values are replaced.
        """

        estimator, keep = self.args.advantage_estimator, self.args.keep_groups_by_std
        if estimator == "grpo" and keep >= 1.0:
            return  # TRL's own advantages (all its options) train and are logged unchanged
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._weighted_rewards()
        start = self.accelerator.process_index * local_batch
        logged = list(self._logs["advantages"])[-rewards.numel() :]
        if estimator == "grpo" and len(logged) == rewards.numel():  # TRL's values (all its options)
            advantages = torch.tensor(logged, dtype=torch.float32, device=rewards.device)
        elif estimator == "grpo":
            advantages = compute_advantages(rewards, group, "grpo", self.args.scale_rewards)
        else:
            counts = None
            if estimator == "reinforce_pp_maye":  # MAYE whitens over tokens: every process's token counts
                local = output["completion_mask"].sum(dim=1).to(torch.float32)
                counts = self.accelerator.gather(local)
            advantages = compute_advantages(
                rewards,
                group,
                estimator,
                self.args.scale_rewards,
                token_counts=counts,
                chunk_size=local_batch,
            )
        if keep < 1.0:
            advantages = advantages * self._group_keep_mask(rewards, group, mode).to(advantages.device)
        output["advantages"] = advantages[start : start + local_batch].to(output["advantages"].device)
        logged_adv = self._logs["advantages"]
        for _ in range(min(rewards.numel(), len(logged_adv))):
            logged_adv.pop()  # TRL's GRPO values for this batch
        logged_adv.extend(advantages.tolist())

    def _group_keep_mask(self, rewards: torch.Tensor, group: int, mode: str) -> torch.Tensor:
        """1 for completions of the groups with the highest reward std (over the global batch), else 0."""

        kept = select_groups_by_std(rewards.tolist(), group, float(self.args.keep_groups_by_std))
        mask = torch.zeros(rewards.numel())
        mask[kept] = 1.0
        self._metrics[mode]["groups/kept_fraction"].append(len(kept) / rewards.numel())
        return mask


def _check_dynamic_sampling(args: Any, num_generations: int, train_dataset: Any) -> None:
    """Dynamic sampling picks whole groups per process: each process's generation batch must hold whole
    groups, and extra prompts are drawn by index from a sized dataset."""
    local = args.per_device_train_batch_size * args.steps_per_generation
    if local % num_generations:
        raise ValueError(
            f"dynamic_sampling: per_device_train_batch_size x steps_per_generation = {local} must be a multiple "
            f"of num_generations = {num_generations} (each process then holds whole prompt groups)"
        )
    if train_dataset is not None and not hasattr(train_dataset, "__len__"):
        raise ValueError(
            "dynamic_sampling draws extra prompts by index: it needs a map-style (not streaming) dataset"
        )


def _prepare_for_videos(args: Any, dataset: Any, processor: Any) -> bool:
    """Whether the dataset holds videos. A video dataset never samples a vision placeholder token:
    Qwen-VL counts every ``<|video_pad|>`` in a sequence as a video slot, so a sampled one would break the
    scoring forward ("features and tokens do not match"). Added to ``generation_kwargs["suppress_tokens"]``
    (vLLM backends turn it into a logit bias). TRL's own server mode is refused before anything starts
    (its client sends images only)."""
    first = first_row(dataset)
    if first is None or not videos_of_row(first):
        return False
    if args.use_vllm and args.vllm_mode == "server" and not getattr(args, "vllm_server_per_rank", False):
        raise MixedVisionInputError(
            f"{row_label(first, 0)}: the dataset has video rows, which TRL's vLLM server cannot take (its "
            "client sends images only): use generation_backend vllm_colocate, or vllm_server with "
            "vllm_server_per_rank and `r1vision vllm-serve`"
        )
    tokenizer = getattr(processor, "tokenizer", processor)
    names = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
    ids = [int(i) for i in (tokenizer.convert_tokens_to_ids(n) for n in names) if i is not None and i >= 0]
    kwargs = dict(args.generation_kwargs or {})
    kwargs["suppress_tokens"] = sorted({*map(int, kwargs.get("suppress_tokens") or []), *ids})
    args.generation_kwargs = kwargs
    return True


def _count_token(ids: Any, token_id: int) -> int:
    """How often ``token_id`` occurs in one prompt's ids (TRL hands lists; tensors work too)."""
    if isinstance(ids, list):
        return ids.count(token_id)  # C loop; a Python generator costs ~40 ns per token (1k-token prompts)
    return int((torch.as_tensor(ids) == token_id).sum())
