"""Training on video rows: GRPO trains each Qwen family and scores every completion with its video (the
log-probabilities equal a direct forward of the processor's inputs), SFT puts each row's video in its batch,
and what cannot be done right is refused."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from PIL import Image

from r1vision.tasks.motion.data import load_motion_dataset
from r1vision.trainer.grpo import VisionGRPOTrainer
from r1vision.trainer.video_inputs import MixedVisionInputError, split_video_fields
from r1vision.vision.family import FAMILIES
from r1vision.vision.video import load_clip
from tests.helpers.training import grpo_args, varied_reward


def _rows(motion_dir, split="train"):
    return load_motion_dataset(motion_dir, split).remove_columns(["completion"])


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_trains_on_videos_and_rewards_see_their_sizes(tiny_model, motion_dir, tmp_path, family):
    seen: dict = {}

    def spy(prompts, completions, **kwargs):
        seen.update(kwargs)
        return [0.0] * len(completions)

    f = FAMILIES[family].factor
    args = grpo_args(tmp_path, video_max_frame_pixels=f * f, beta=0.04)
    trainer = VisionGRPOTrainer(
        tiny_model(family), [varied_reward, spy], args=args, train_dataset=_rows(motion_dir)
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())
    # 8 frames at 4 fps sampled at 2 fps: 4 frames of one token each (the cap), from 56x56 originals.
    assert all(s == [[4, f, f]] for s in seen["video_sizes"])
    assert all(s == [[8, 56, 56]] for s in seen["original_video_sizes"])
    videos = trainer._buffered_inputs[0]["video_inputs"]  # one entry per sample, through TRL's shuffle
    assert len(videos) == args.per_device_train_batch_size
    assert all(v["video_grid_thw"].tolist() == [[2, 2, 2]] for v in videos)
    vision = {
        trainer.processing_class.tokenizer.convert_tokens_to_ids(t)
        for t in ("<|video_pad|>", "<|image_pad|>")
    }
    assert vision <= set(trainer.generation_config.suppress_tokens)  # never sampled: they would break scoring


def test_logps_are_scored_with_each_samples_video(tiny_model, motion_dir, tmp_path):
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_5_vl"),
        [varied_reward],
        args=grpo_args(tmp_path, video_max_frame_pixels=2 * 28 * 28),
        train_dataset=_rows(motion_dir),
    )
    proc, model = trainer.processing_class, trainer.model
    rows = [trainer._prepare_vision_row(dict(_rows(motion_dir)[i])) for i in (0, 1, 2)]
    prompts = [r["prompt"] for r in rows]
    batch = proc.apply_chat_template(
        prompts, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
        processor_kwargs={"padding": True},
    )  # fmt: skip
    completion = proc.tokenizer("left right up", add_special_tokens=False)["input_ids"][:3]
    ids = torch.cat([batch["input_ids"], torch.tensor([completion] * 3)], dim=1)
    mask = torch.cat([batch["attention_mask"], torch.ones(3, 3, dtype=torch.long)], dim=1)
    mm = torch.cat([batch["mm_token_type_ids"], torch.zeros(3, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        logits = model(
            input_ids=ids, attention_mask=mask, mm_token_type_ids=mm, pixel_values_videos=batch["pixel_values_videos"],
            video_grid_thw=batch["video_grid_thw"], second_per_grid_ts=batch["second_per_grid_ts"],
        ).logits  # fmt: skip
    direct = torch.log_softmax(logits[:, -4:-1].float(), -1).gather(-1, ids[:, -3:, None]).squeeze(-1)

    trainer._video_forward = split_video_fields(batch, [1, 1, 1])
    for batch_size in (3, 2, 1):  # TRL's chunks: each call gets its own rows' videos
        with torch.no_grad():
            logps, _, _ = trainer._get_per_token_logps_and_entropies(
                model, ids, mask, 3, batch_size=batch_size
            )
        torch.testing.assert_close(logps, direct, atol=1e-4, rtol=0)

    # A different video changes the scores: the video really is an input of the scoring pass.
    other = dict(batch)
    other["pixel_values_videos"] = batch["pixel_values_videos"].flip(0)
    trainer._video_forward = split_video_fields(other, [1, 1, 1])
    with torch.no_grad():
        changed, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, 3)
    assert (changed - direct).abs().max() > 1e-3


def test_mixed_and_mismatched_rows_are_refused(tiny_model, motion_dir, tmp_path):
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), [varied_reward], args=grpo_args(tmp_path), train_dataset=_rows(motion_dir)
    )
    row = dict(_rows(motion_dir)[0], id="clip-7")
    with pytest.raises(MixedVisionInputError, match="id='clip-7': the row has both images and videos"):
        trainer._prepare_vision_row({**row, "images": [Image.new("RGB", (28, 28))]})
    two_parts = [
        {"role": "user", "content": [{"type": "video"}, {"type": "video"}, {"type": "text", "text": "?"}]}
    ]
    with pytest.raises(MixedVisionInputError, match="id='clip-7': the prompt has 2 video part"):
        trainer._prepare_vision_row({**row, "prompt": two_parts})


def test_video_rows_without_a_video_part_get_one(tiny_model, motion_dir, tmp_path):
    clip_path = _rows(motion_dir)[0]["video"]
    data = Dataset.from_list([{"prompt": "Which way does it move?", "video": clip_path, "id": "plain"}] * 4)
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), [varied_reward], args=grpo_args(tmp_path), train_dataset=data
    )
    row = trainer._prepare_vision_row(dict(data[0]))
    content = row["prompt"][0]["content"]
    assert content[0]["type"] == "video" and len(content[0]["video"]) == len(
        load_clip(clip_path, trainer.video_budget)
    )
    assert content[1] == {"type": "text", "text": "Which way does it move?"}


def test_sft_trains_on_video_rows_with_each_rows_video_in_its_batch(tiny_model, motion_dir, tmp_path):
    from r1vision.trainer.config import VisionSFTConfig
    from r1vision.trainer.sft import VisionSFTTrainer

    rows = load_motion_dataset(motion_dir)
    args = VisionSFTConfig(
        output_dir=str(tmp_path), use_cpu=True, report_to=[], max_steps=2, per_device_train_batch_size=2,
        video_max_frame_pixels=28 * 28, learning_rate=1e-3, disable_tqdm=True,
    )  # fmt: skip
    trainer = VisionSFTTrainer(tiny_model("qwen2_5_vl"), args=args, train_dataset=rows)
    batch = trainer.data_collator([dict(trainer.train_dataset[i]) for i in (0, 1)])
    assert batch["video_grid_thw"].tolist() == [[2, 2, 2], [2, 2, 2]]  # 4 frames of one token, per row
    pad = trainer.processing_class.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert (batch["input_ids"] == pad).sum(dim=1).tolist() == [2, 2]
    assert (batch["labels"][batch["input_ids"] == pad] == -100).all()  # the video is prompt, not target
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    assert math.isfinite(trainer.train().training_loss)
    assert any(not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters())


def test_video_datasets_refuse_trls_own_server_before_an_engine_starts(motion_dir, tiny_model):
    """TRL's vLLM client sends images only: TRL's server mode is refused naming what works; colocate and
    per-rank servers take video datasets. Every vision placeholder is suppressed in generation."""
    from types import SimpleNamespace

    from transformers import AutoProcessor

    from r1vision.trainer.grpo import _prepare_for_videos

    proc = AutoProcessor.from_pretrained(tiny_model("qwen2_vl"))
    rows = _rows(motion_dir)
    trl_server = SimpleNamespace(
        use_vllm=True, vllm_mode="server", vllm_server_per_rank=False, generation_kwargs=None
    )
    with pytest.raises(
        MixedVisionInputError,
        match="row 0 problem_id=0: the dataset has video rows, which TRL's vLLM server cannot take.*vllm_colocate",
    ):
        _prepare_for_videos(trl_server, rows, proc)
    per_rank = SimpleNamespace(
        use_vllm=True, vllm_mode="server", vllm_server_per_rank=True, generation_kwargs=None
    )
    assert _prepare_for_videos(per_rank, rows, proc) is True
    args = SimpleNamespace(use_vllm=True, vllm_mode="colocate", generation_kwargs={"suppress_tokens": [3]})
    assert _prepare_for_videos(args, rows, proc) is True
    pad = proc.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert 3 in args.generation_kwargs["suppress_tokens"] and pad in args.generation_kwargs["suppress_tokens"]


def test_two_videos_in_one_prompt_train_with_both(tiny_model, motion_dir, tmp_path):
    paths = _rows(motion_dir)["video"]
    prompt = [
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "then"}, {"type": "video"}]}
    ]
    data = Dataset.from_list(
        [{"prompt": prompt, "videos": [paths[i], paths[i + 1]], "id": f"p{i}"} for i in range(4)]
    )
    args = grpo_args(tmp_path, video_max_frame_pixels=28 * 28, max_steps=1)
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=data)
    assert math.isfinite(trainer.train().training_loss)
    videos = trainer._buffered_inputs[0]["video_inputs"]
    assert all(v["video_grid_thw"].tolist() == [[2, 2, 2], [2, 2, 2]] for v in videos)
    assert all(v["pixel_values_videos"].shape[0] == 16 for v in videos)  # 2 videos x 8 patch rows
