"""Text-to-image GRPO on two CPU processes (gloo), launched as a user launches it: Flow-GRPO's multi-GPU
semantics. A process whose rewards are all flat still takes part in every collective (on every step and on
alternate steps; the weights equal those of a run where its loss is zero), rewards are gathered so that
advantages are per-prompt statistics over the whole step (groups spread over the processes, the std of every
reward), logged metrics are means over the processes, the evaluation is sharded and equals a one-process
evaluation, and under DeepSpeed ZeRO-2 one trainer step is one engine step (the LR schedule counts trainer
steps; the shipped zero2.json works with SD3).
"""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.diffusion.test_advantages import flow_grpo_tracker
from tests.helpers.launch import launch_env, run_launched
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.slow
SCRIPT = ROOT / "tests" / "scripts" / "t2i_grpo.py"
REWARD = "tests.helpers.t2i_rewards.flat_on_rank1"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(layout: str, dump: Path, args: list[str], processes: int = 2, cold: bool = False, **env: str):
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--num_processes",
           str(processes), "--main_process_port", str(_port())]  # fmt: skip
    if layout == "ddp":
        cmd += ["--multi_gpu", "--mixed_precision", "no"]
    else:
        config = ROOT / "configs" / "deepspeed" / f"{layout}.json"
        cmd += ["--use_deepspeed", "--deepspeed_config_file", str(config), "--zero3_init_flag", "false"]
    return run_launched([*cmd, str(SCRIPT), str(dump), "--", *args], ROOT, cold=cold, **env)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_sd3):
    root = tmp_path_factory.mktemp("t2i_dist")
    (root / "prompts").mkdir()
    # distinct texts: prompts are grouped by text, and a text drawn twice in a step is one group
    lines = [f"a {'bright' if i % 2 else 'dark'} photo, number {i}" for i in range(22)]
    (root / "prompts" / "train.txt").write_text("\n".join(lines[:16]) + "\n")
    (root / "prompts" / "test.txt").write_text("\n".join(lines[16:]) + "\n")
    return root, tiny_sd3(pixel_space=True)


def _args(model: str, root: Path, out: str, *extra: str) -> list[str]:
    return ["--model", model, "--dataset", str(root / "prompts"), "--output_dir", str(root / out),
            "--reward_funcs", REWARD, "--num_generations", "4", "--per_device_train_batch_size", "8",
            "--num_inference_steps", "4", "--resolution", "16", "--guidance_scale", "1.0", "--beta", "0.0",
            "--learning_rate", "1e-2", "--lora_r", "4", "--lora_alpha", "8", "--use_cpu", "true",
            "--report_to", "none", "--disable_tqdm", "true", "--save_strategy", "no", "--seed", "0",
            "--eval_num_inference_steps", "4", "--eval_num_images", "5", "--per_device_eval_batch_size", "2",
            *extra]  # fmt: skip


def _dumps(dump: Path) -> tuple[list[dict], list[dict]]:
    records = [json.loads((dump / f"rank{r}.json").read_text()) for r in (0, 1)]
    weights = [torch.load(dump / f"rank{r}.pt") for r in (0, 1)]
    return records, weights


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_a_flat_process_takes_part_in_every_step_and_contributes_nothing(setup):
    """Rank 1's rewards are constant on every step: with zero-advantage samples dropped it has nothing to
    train, still replays one sample with weight 0 (it hung DDP before), and the weights equal those of the
    same run keeping its samples (advantage 0: loss and gradient exactly 0)."""
    root, model = setup
    common = ("--spread_groups", "false", "--max_steps", "2", "--eval_strategy", "no")
    _launch(
        "ddp", root / "flat", _args(model, root, "flat", "--drop_zero_advantage", "true", *common), cold=True
    )
    _launch("ddp", root / "kept", _args(model, root, "kept", "--drop_zero_advantage", "false", *common))
    (flat0, flat1), (w_flat, w_flat1) = _dumps(root / "flat")
    _, (w_kept, _) = _dumps(root / "kept")
    assert flat0["global_step"] == flat1["global_step"] == 2 and flat0["world_size"] == 2
    assert all(len(c) == 0 for g in flat1["generations"] for c in g["chunks"])  # nothing to train on rank 1
    assert all(len(c) == 8 for g in flat0["generations"] for c in g["chunks"])  # every sample of rank 0
    for name in w_flat:
        assert torch.equal(w_flat[name], w_flat1[name]), name  # the processes hold one model
        assert torch.allclose(w_flat[name], w_kept[name], atol=1e-7, rtol=0), name
    moved = [n for n in w_flat if "lora_B" in n and w_flat[n].abs().max() > 0]
    assert moved  # rank 0's signal trained both (lora_B starts at zero)
    rows = _rows(root / "flat" / "metrics.csv")
    # the logged reward is the mean over both processes: rank 1's images all scored 0.5
    for row, gen0 in zip(rows, flat0["generations"], strict=True):
        want = (np.mean(gen0["rewards"]) + 0.5) / 2
        assert float(row["reward"]) == pytest.approx(want, abs=1e-6)


def test_a_process_flat_on_alternate_steps_finishes(setup):
    root, model = setup
    _launch("ddp", root / "alt", _args(model, root, "alt", "--spread_groups", "false", "--max_steps", "4",
                                       "--eval_strategy", "no", "--rollout_batch_size", "8"), R1V_FLAT="alternate")  # fmt: skip
    (rank0, rank1), _ = _dumps(root / "alt")
    assert rank0["global_step"] == rank1["global_step"] == 4
    empty = [all(len(c) == 0 for c in g["chunks"]) for g in rank1["generations"]]
    assert empty == [True, False, True, False]


def test_groups_span_processes_and_advantages_use_every_reward(setup):
    """Flow-GRPO's layout: a group's images shuffled over both processes; the advantages each process
    trains on are Flow-GRPO's per-prompt tracker over the rewards of both (global std), and the evaluation
    (sharded, 5 prompts over 2 processes) gives the records of a one-process evaluation."""
    root, model = setup
    _launch("ddp", root / "spread", _args(model, root, "spread", "--spread_groups", "true", "--max_steps", "2",
                                          "--eval_on_start", "true", "--eval_strategy", "steps", "--eval_steps", "2"),
            R1V_FLAT="never")  # fmt: skip
    (rank0, rank1), _ = _dumps(root / "spread")
    spans = 0
    for g0, g1 in zip(rank0["generations"], rank1["generations"], strict=True):
        prompts, rewards = g0["prompts"] + g1["prompts"], g0["rewards"] + g1["rewards"]
        spans += len(set(g0["prompts"]) & set(g1["prompts"]))
        want = np.clip(flow_grpo_tracker(prompts, rewards, global_std=True), -5, 5)
        got = np.array(g0["advantages"] + g1["advantages"])
        assert np.allclose(got, want, atol=1e-5)
    assert spans > 0  # some group had images on both processes
    records = [json.loads(line) for line in (root / "spread" / "eval" / "step-0" / "records.jsonl").open()]
    assert [r["index"] for r in records] == [0, 1, 2, 3, 4]
    single = _single_process_eval(model, root)
    # the same image per prompt index whatever the process and batch (a pixel may round differently: 5e-6)
    assert [r["reward"] for r in records] == pytest.approx([r["reward"] for r in single], abs=1e-4)
    evals = _rows(root / "spread" / "eval_metrics.csv")
    assert [r["step"] for r in evals] == ["0", "2"]  # step 0, then the last step once


def _single_process_eval(model: str, root: Path) -> list[dict]:
    """The same evaluation at step 0 in this process."""
    from r1vision.diffusion.config import DiffusionGRPOConfig
    from r1vision.diffusion.data import load_prompts
    from r1vision.diffusion.rewards import resolve_reward
    from r1vision.diffusion.trainer import DiffusionGRPOTrainer

    args = DiffusionGRPOConfig(output_dir=str(root / "single"), num_generations=4, per_device_train_batch_size=8,
                               num_inference_steps=4, resolution=16, guidance_scale=1.0, beta=0.0, lora_r=4,
                               lora_alpha=8, use_cpu=True, report_to="none", seed=0, eval_num_inference_steps=4,
                               eval_num_images=5, per_device_eval_batch_size=3)  # fmt: skip
    trainer = DiffusionGRPOTrainer(model, [resolve_reward(REWARD)], args=args,
                                   train_dataset=load_prompts(root / "prompts", "train"),
                                   eval_dataset=load_prompts(root / "prompts", "test"))  # fmt: skip
    trainer.evaluate()
    return [json.loads(line) for line in (root / "single" / "eval" / "step-0" / "records.jsonl").open()]


def test_zero2_takes_one_engine_step_per_trainer_step(setup):
    """The shipped zero2.json (its hidden-size "auto" filled from the denoiser's width), 4 trained
    transitions per micro-step, 2 micro-steps per optimizer step, one generation feeding 2 optimizer steps:
    DeepSpeed's engine and LR schedule count trainer steps (they counted every transition), and the second
    update of each generation is off-policy (the PPO clip acts)."""
    root, model = setup
    layout = ("--max_steps", "4", "--gradient_accumulation_steps", "2", "--steps_per_generation", "4",
              "--lr_scheduler_type", "linear", "--learning_rate", "0.2", "--eval_strategy", "no")  # fmt: skip
    _launch("zero2", root / "z2", _args(model, root, "z2", *layout, "--per_device_train_batch_size", "4",
                                        "--save_strategy", "steps", "--save_steps", "2"), cold=True)  # fmt: skip
    (rank0, rank1), (w0, w1) = _dumps(root / "z2")
    assert rank0["global_step"] == rank0["engine_global_steps"] == rank1["engine_global_steps"] == 4
    assert rank0["scheduler_steps"] == 4
    assert rank0["lrs"] == pytest.approx([0.2, 0.15, 0.1, 0.05])  # linear over 4 trainer steps
    assert len(rank0["generations"]) == 2  # 4 steps x 2 micro-steps / 4 micro-steps per generation
    assert all(torch.equal(w0[n], w1[n]) for n in w0)
    rows = _rows(root / "z2" / "metrics.csv")
    assert [float(r["off_policy"]) for r in rows] == [0.0, 1.0, 0.0, 1.0]
    # on-policy replays equal the rollout to float32 rounding (other batch shapes than the rollout's)
    assert all(float(r["logprob_parity_max"]) < 1e-5 for r in rows[::2])
    assert max(float(r["clipfrac"]) for r in rows[1::2]) > 0  # off-policy updates are clipped
    # its step-2 checkpoint (2 optimizer shards) resumes on 1 process under ZeRO-2 with the same batches,
    # through DeepSpeed's universal form, and the LR schedule continues
    ckpt = root / "z2" / "checkpoint-2"
    proc = _launch("zero2", root / "z2_on_1", _args(model, root, "z2", *layout, "--per_device_train_batch_size", "8",
                                                    "--resume_from_checkpoint", str(ckpt)), processes=1)  # fmt: skip
    assert "through its universal form" in proc.stderr and (ckpt / "global_step2_universal").is_dir()
    resumed = json.loads((root / "z2_on_1" / "rank0.json").read_text())
    assert resumed["world_size"] == 1 and resumed["global_step"] == resumed["scheduler_steps"] == 4
    assert resumed["lrs"] == pytest.approx([0.2, 0.15, 0.1, 0.05])  # steps 1-2 restored, 3-4 trained here
    assert [r["step"] for r in _rows(root / "z2" / "metrics.csv")] == ["1", "2", "3", "4"]


def _one_process(dump: Path, args: list[str]):
    return run_launched([sys.executable, str(SCRIPT), str(dump), "--", *args], ROOT)


def _copy_checkpoint(src: Path, out: Path) -> Path:
    import shutil

    shutil.copytree(src, out / src.name)
    return out / src.name


def test_a_checkpoint_inside_a_generation_resumes_on_any_process_count(setup):
    """A checkpoint taken between the two updates of one generation holds each process's share of its
    samples. Resumed on the same count it continues exactly (those samples, no new sampling); on another
    count (2 -> 1 and 1 -> 2) every process samples that generation anew, from the same prompts (1 -> 2 hung:
    one process loaded its share while the other sampled and gathered); another optimizer batch is refused."""
    root, model = setup
    common = ("--max_steps", "2", "--steps_per_generation", "2", "--save_strategy", "steps", "--save_steps", "1",
              "--eval_strategy", "no")  # fmt: skip
    _launch("ddp", root / "mid", _args(model, root, "mid", *common), R1V_FLAT="never")
    ckpt = root / "mid" / "checkpoint-1"
    assert sorted(p.name for p in ckpt.glob("rollout_buffer_rank*.pt")) == [
        "rollout_buffer_rank0.pt", "rollout_buffer_rank1.pt"]  # fmt: skip
    layout = json.loads((ckpt / "r1vision_layout.json").read_text())
    assert (layout["world_size"], layout["global_batch"], layout["generation_images"]) == (2, 16, 32)
    (full0, full1), (w_full, _) = _dumps(root / "mid")
    drawn = sorted(full0["generations"][0]["prompts"] + full1["generations"][0]["prompts"])

    resume = ("--resume_from_checkpoint",)
    _copy_checkpoint(ckpt, root / "same")
    _launch("ddp", root / "same_dump", _args(model, root, "same", *common, *resume, str(root / "same" / ckpt.name)),
            R1V_FLAT="never")  # fmt: skip
    (same0, same1), (w_same, _) = _dumps(root / "same_dump")
    assert same0["generations"] == same1["generations"] == []  # the saved samples, not new ones
    for name in w_full:
        assert torch.equal(w_same[name], w_full[name]), name

    _copy_checkpoint(ckpt, root / "one")
    proc = _one_process(root / "one_dump", _args(model, root, "one", *common, "--per_device_train_batch_size", "16",
                                                 *resume, str(root / "one" / ckpt.name)))  # fmt: skip
    one = json.loads((root / "one_dump" / "rank0.json").read_text())
    assert "samples that generation anew" in proc.stderr
    assert one["global_step"] == 2 and [g["index"] for g in one["generations"]] == [0]
    assert sorted(one["generations"][0]["prompts"]) == drawn
    assert [r["step"] for r in _rows(root / "one" / "metrics.csv")] == ["2"]

    refused = subprocess.run([sys.executable, "-m", "r1vision.cli", "t2i-grpo",
                              *_args(model, root, "one", *common, *resume, str(root / "one" / ckpt.name))],
                             cwd=ROOT, env=launch_env(), capture_output=True, text=True, timeout=600)  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "global batch of 16 (2 processes x 8 x 1 accumulation), this run has 8" in refused.stderr

    _one_process(root / "solo_dump", _args(model, root, "solo", "--per_device_train_batch_size", "16",
                                             "--max_steps", "1", *common[2:]))  # fmt: skip
    single = json.loads((root / "solo_dump" / "rank0.json").read_text())
    ckpt1 = _copy_checkpoint(root / "solo" / "checkpoint-1", root / "two")
    _launch(
        "ddp", root / "two_dump", _args(model, root, "two", *common, *resume, str(ckpt1)), R1V_FLAT="never"
    )
    (two0, two1), (w0, w1) = _dumps(root / "two_dump")
    assert [g["index"] for g in two0["generations"]] == [g["index"] for g in two1["generations"]] == [0]
    assert two0["global_step"] == two1["global_step"] == 2
    assert sorted(two0["generations"][0]["prompts"] + two1["generations"][0]["prompts"]) == sorted(
        single["generations"][0]["prompts"])  # fmt: skip
    assert all(torch.equal(w0[n], w1[n]) for n in w0)
