"""DiffusionGRPOTrainer on tiny SD3 pipelines: exact rollout/replay parity, KL 0 with the adapter off, EMA swap
on the CPU, an exported LoRA that stock diffusers reproduces pixel for pixel (and the metadata pitfall), kill and
resume with identical metrics.csv rows, prompts without an OCR target refused by line, and learning."""

from __future__ import annotations

import csv

import pytest
import torch

from r1vision.diffusion.config import DiffusionGRPOConfig
from r1vision.diffusion.data import check_prompts, load_prompts, synth_t2i
from r1vision.diffusion.rewards import resolve_reward


def _args(out, **kw):
    base = dict(output_dir=str(out), num_generations=4, per_device_train_batch_size=8, num_inference_steps=4,
                eval_num_inference_steps=4, resolution=16, guidance_scale=1.0, max_steps=2, learning_rate=1e-2,
                lora_r=4, lora_alpha=8, beta=0.0, use_cpu=True, save_strategy="no", disable_tqdm=True,
                ema_update_interval=1, eval_num_images=2, seed=0)  # fmt: skip
    base.update(kw)
    return DiffusionGRPOConfig(**base)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    root = tmp_path_factory.mktemp("prompts")
    synth_t2i(root, 8, split="train", kind="brightness")
    synth_t2i(root, 4, seed=1, split="test", kind="brightness")
    return root


def _trainer(model, prompts, out, **kw):
    from r1vision.diffusion.trainer import DiffusionGRPOTrainer

    return DiffusionGRPOTrainer(model, [resolve_reward("prompt_brightness")], args=_args(out, **kw),
                                train_dataset=load_prompts(prompts, "train"), eval_dataset=load_prompts(prompts, "test"))  # fmt: skip


@pytest.mark.slow
def test_replay_parity_is_exact_and_kl_is_zero_with_the_adapter_off(tiny_sd3, prompts, tmp_path):
    from r1vision.diffusion.rollout import replay, rollout
    from r1vision.diffusion.sde import latent_kl

    trainer = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path, beta=0.04)
    model, family = trainer.model, trainer.family
    cond = family.encode(["a bright photo", "a dark photo"], guidance=False).repeat(2)
    roll = rollout(family, model, cond, steps=4, resolution=16, guidance_scale=1.0, noise_level=0.7,
                   generator=torch.Generator().manual_seed(3))  # fmt: skip
    for j in range(4):
        step = replay(family, model, cond, roll, j, guidance_scale=1.0, noise_level=0.7)
        assert torch.equal(step.log_prob, roll.log_probs[:, j])  # exactly: same weights, same transition
        with torch.no_grad(), model.disable_adapter():
            ref = replay(family, model, cond, roll, j, guidance_scale=1.0, noise_level=0.7)
        # PEFT's gaussian init starts B at zero: the adapter changes nothing yet, so the KL is exactly 0
        assert torch.equal(latent_kl(step.mean, ref.mean, step.std), torch.zeros(4))
    trainer.train()
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [float(r["logprob_parity_max"]) for r in rows] == [0.0, 0.0]  # logged every step
    assert all(float(r["kl"]) >= 0 for r in rows) and "frac_reward_zero_std" in rows[0]


def test_ema_swap_restores_the_raw_weights_on_cpu():
    from r1vision.diffusion.ema import EMA

    p = torch.nn.Parameter(torch.zeros(3))
    ema = EMA([p], decay=0.5, update_interval=1)
    with torch.no_grad():
        p.fill_(1.0)
    ema.step(0)  # warm-up decay min((1 + 0) / 10, 0.5) = 0.1: shadow = 0.1 * 0 + 0.9 * 1
    assert torch.allclose(ema.shadow[0], torch.full((3,), 0.9))
    with ema.swapped():
        assert torch.allclose(p, torch.full((3,), 0.9))
    assert torch.equal(p.detach(), torch.ones(3))  # Flow-GRPO's .cpu() aliasing restored 0.9 here


@pytest.mark.slow
def test_exported_lora_reproduces_the_images_in_stock_diffusers(tiny_sd3, prompts, tmp_path):
    """Through the VAE model: the trained adapter saved as a diffusers LoRA and loaded by the stock pipeline
    gives the trainer's images exactly; without the adapter metadata (alpha != r) they differ."""
    from diffusers import StableDiffusion3Pipeline
    from peft.utils import get_peft_model_state_dict

    from r1vision.runners.t2i import sample_images

    trainer = _trainer(tiny_sd3(), prompts, tmp_path / "run", resolution=64, max_steps=2, ema=False)
    trainer.train()
    trainer.save_model()
    wanted = trainer.generate(["a bright photo", "a dark photo"], steps=4, seed=7, use_ema=False)
    got = sample_images(tiny_sd3(), ["a bright photo", "a dark photo"], tmp_path / "imgs",
                        lora=str(tmp_path / "run" / "lora"), steps=4, guidance_scale=1.0, resolution=64, seed=7)  # fmt: skip
    import numpy as np

    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(wanted, got, strict=True))
    # the pitfall: the same weights saved without their metadata lose the alpha / r scale
    layers = {
        k.removeprefix("base_model.model."): v for k, v in get_peft_model_state_dict(trainer.model).items()
    }
    StableDiffusion3Pipeline.save_lora_weights(tmp_path / "bare", transformer_lora_layers=layers)
    bare = sample_images(tiny_sd3(), ["a bright photo"], tmp_path / "imgs2", lora=str(tmp_path / "bare"), steps=4,
                         guidance_scale=1.0, resolution=64, seed=7)  # fmt: skip
    assert not np.array_equal(np.asarray(bare[0]), np.asarray(wanted[0]))


@pytest.mark.slow
def test_kill_and_resume_give_the_same_rows(tiny_sd3, prompts, tmp_path):
    from transformers import TrainerCallback

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= 2:
                control.should_training_stop = True

    kw = dict(max_steps=4, save_strategy="steps", save_steps=2)
    full = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path / "full", **kw)
    full.train()
    killed = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path / "killed", **kw)
    killed.add_callback(StopAt())
    killed.train()
    assert (tmp_path / "killed" / "checkpoint-2" / "ema.pt").is_file()
    resumed = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path / "killed", **kw)
    resumed.train(resume_from_checkpoint=str(tmp_path / "killed" / "checkpoint-2"))
    a = list(csv.DictReader(open(tmp_path / "full" / "metrics.csv")))
    b = list(csv.DictReader(open(tmp_path / "killed" / "metrics.csv")))
    assert [r["step"] for r in b] == ["1", "2", "3", "4"]
    for ra, rb in zip(a, b, strict=True):
        for key in ("reward", "policy_loss", "grad_norm"):
            assert float(ra[key]) == pytest.approx(float(rb[key]), rel=1e-5, abs=1e-9), (ra["step"], key)
    assert torch.allclose(full.ema.shadow[0], resumed.ema.shadow[0])


def test_ocr_prompts_without_a_quoted_target_are_refused_by_line(tmp_path):
    from r1vision.tasks.loading import DatasetValidationError

    (tmp_path / "train.txt").write_text('a sign that says "OPEN"\na sign with no quotes\n')
    rows = load_prompts(tmp_path, "train")
    with pytest.raises(
        DatasetValidationError, match=r"train.txt:2: prompt 'a sign with no quotes' has no text"
    ):
        check_prompts(rows, ["ocr"])
    check_prompts(rows, ["brightness"])  # only OCR rewards need a target


@pytest.mark.slow
def test_the_tiny_pixel_model_learns_the_prompt_conditioned_brightness(tiny_sd3, prompts, tmp_path):
    """The learning proof at test size: eval reward (bright prompts bright, dark prompts dark) rises."""
    trainer = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path, max_steps=100, num_generations=8,
                       per_device_train_batch_size=16,
                       ema_update_interval=2, lora_r=8, lora_alpha=16, seed=42, eval_num_inference_steps=8)  # fmt: skip
    before = trainer.evaluate()["eval_reward"]
    trainer.train()
    after = trainer.evaluate()["eval_reward"]
    assert after > before + 0.15, (before, after)


@pytest.mark.slow
def test_rewards_of_one_rollout_batch_run_while_the_next_is_sampled(tiny_sd3, prompts, tmp_path, monkeypatch):
    import time

    import r1vision.diffusion.trainer as trainer_module
    from r1vision.diffusion.trainer import DiffusionGRPOTrainer

    sampled, scored = [], []
    real_rollout = trainer_module.rollout

    def timed_rollout(*a, **kw):
        start = time.perf_counter()
        out = real_rollout(*a, **kw)
        time.sleep(0.2)  # a sampling batch that takes long enough to overlap with
        sampled.append((start, time.perf_counter()))
        return out

    brightness = resolve_reward("prompt_brightness")

    def slow_brightness(prompts, images, **columns):
        start = time.perf_counter()
        time.sleep(0.2)
        scored.append((start, time.perf_counter(), len(images)))
        return brightness(prompts, images, **columns)

    monkeypatch.setattr(trainer_module, "rollout", timed_rollout)
    trainer = DiffusionGRPOTrainer(tiny_sd3(pixel_space=True), [slow_brightness],
                                   args=_args(tmp_path, rollout_batch_size=4, max_steps=1),
                                   train_dataset=load_prompts(prompts, "train"))  # fmt: skip
    trainer.train()
    assert [n for *_, n in scored] == [4, 4] and len(sampled) == 2  # 2 prompts x 4 images in batches of 4
    # the first batch's reward started before the second batch's sampling ended, and ended after it began
    assert scored[0][0] < sampled[1][1] and scored[0][1] > sampled[1][0]
    row = next(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert float(row["logprob_parity_max"]) == 0.0  # replay of the joined batches is still exact
    assert float(row["reward_busy_s"]) >= 0.4 > float(row["reward_s"])  # only the last batch's wait is paid


def test_same_latent_starts_each_group_from_one_noise_whatever_the_rollout_batches(
    tiny_sd3, prompts, tmp_path
):
    """Flow-GRPO's same_latent: one initial noise per prompt, drawn from the seed, the generation and the
    prompt (not the process), so a group spread over rollout batches and processes still shares it."""
    trainer = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path, same_latent=True, rollout_batch_size=3)
    rows = [{"prompt": p} for p in ["a bright photo", "a dark photo"] for _ in range(4)]
    gen = trainer._generate(trainer.model, rows, index=0)
    start = gen.roll.latents[:, 0]
    assert all(torch.equal(start[0], start[i]) for i in range(1, 4))
    assert all(torch.equal(start[4], start[i]) for i in range(5, 8))
    assert not torch.equal(start[0], start[4])
    again = trainer._generate(trainer.model, list(reversed(rows)), index=0)  # another order, same noise
    assert torch.equal(again.roll.latents[0, 0], start[4])
    assert not torch.equal(trainer._generate(trainer.model, rows, index=1).roll.latents[0, 0], start[0])


def test_the_adapter_init_follows_the_seed_not_the_process(tiny_sd3, prompts, tmp_path):
    """The LoRA adapter is drawn before transformers' Trainer seeds the RNG: unseeded, a second trainer in
    the same process started from another adapter (the kill-and-resume test passed only after other tests)."""
    first = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path / "a")
    torch.rand(1000)  # whatever the process did in between
    second = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path / "b")
    other = _trainer(tiny_sd3(pixel_space=True), prompts, tmp_path / "c", seed=1)

    def adapter(trainer):
        return [p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_A" in n]

    assert all(torch.equal(a, b) for a, b in zip(adapter(first), adapter(second), strict=True))
    assert not all(torch.equal(a, c) for a, c in zip(adapter(first), adapter(other), strict=True))


def test_a_launch_asking_for_fsdp_is_refused_by_the_config(tmp_path, monkeypatch):
    """A hand-written ``accelerate launch --use_fsdp`` reaches the config first: refused in one line."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ValueError, match="FSDP is not supported by the text-to-image trainer"):
        _args(tmp_path)
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "false")
    assert _args(tmp_path).per_device_train_batch_size == 8
