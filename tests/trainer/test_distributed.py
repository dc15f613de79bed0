"""Scale-out, for real on CPU: every DeepSpeed/accelerate config valid, 2-process DDP (gloo) GRPO,
2-process DeepSpeed ZeRO-3 (partitioned parameters, GRPO + SFT, checkpoint save and exact resume), ZeRO-2,
and 2-process FSDP2 (sharded parameters; SFT and LoRA GRPO equal to DDP; sharded checkpoint, exact resume).

FSDP2 runs on a gloo CPU mesh (torch's ``fully_shard`` supports it), but accelerate keeps FSDP to GPUs: the
FSDP2 runs put ``tests/helpers/cpu_fsdp`` on the workers' path to lift that one gate (see its docstring).

Each launch runs ``accelerate launch`` in a subprocess (one 2-process run at a time; the machine has two
cores). The first DeepSpeed run compiles a CPU comm op with g++ (~25 s, cached in ~/.cache/torch_extensions).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from r1vision.estimate import TrainSetup, estimate, load_model_config, shape_of
from r1vision.trainer.distributed import LAYOUT_FILE, launch_command
from r1vision.trainer.sample_log import read_samples
from tests.helpers.launch import launch_env, run_command, run_launched
from tests.helpers.paths import ROOT

DS_DIR = ROOT / "configs" / "deepspeed"
ACC_DIR = ROOT / "configs" / "accelerate"
DS_FILES = sorted(DS_DIR.glob("*.json"))


def _run(cmd: list[str], cwd: Path, cold: bool = False, **env: str):
    return run_launched(cmd, cwd, cold=cold, **env)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model):
    from r1vision.tasks.color.synth import synth_color

    root = tmp_path_factory.mktemp("dist")
    synth_color(root / "data", 16, seed=0, split="train")
    # Tiny tensors stay whole under the default persistence threshold; 0 partitions every parameter.
    z3 = json.loads((DS_DIR / "zero3.json").read_text())
    z3["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    (root / "zero3_tiny.json").write_text(json.dumps(z3))
    return root, tiny_model("qwen2_vl")


def _grpo_args(model: str, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "grpo",
        *("--model", model, "--dataset", str(data), "--task", "color", "--output_dir", str(out)),
        *("--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "8"),
        *("--logging_steps", "1", "--report_to", "none", "--use_cpu", "true", "--max_pixels", "3136"),
        *("--disable_tqdm", "true", "--seed", "0"),
        *extra,
    ]


def _sft_args(model: str, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        "sft",
        *("--model", model, "--dataset", str(data), "--task", "color", "--output_dir", str(out)),
        *("--per_device_train_batch_size", "2", "--logging_steps", "1", "--report_to", "none"),
        *("--use_cpu", "true", "--max_pixels", "3136", "--disable_tqdm", "true", "--seed", "0"),
        *("--learning_rate", "0.001", "--lr_scheduler_type", "constant"),
        *extra,
    ]


def _steps(out: Path) -> list[str]:
    with open(out / "metrics.csv") as f:
        return [row["step"] for row in csv.DictReader(f)]


def _layout(out: Path) -> dict:
    return json.loads((out / LAYOUT_FILE).read_text())


def _load(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


# --------------------------------------------------------------------------------------- configs
def _resolve_auto(node, values: dict):
    """Replace HF's "auto" placeholders with concrete values, as the Trainer does, for DeepSpeed to check."""
    if isinstance(node, dict):
        return {k: (values[k] if v == "auto" else _resolve_auto(v, values)) for k, v in node.items()}
    return node


@pytest.mark.parametrize("path", DS_FILES, ids=lambda p: p.name)
def test_deepspeed_config_is_valid(path: Path):
    from deepspeed.runtime.config import DeepSpeedConfig
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    hf = HfTrainerDeepSpeedConfig(str(path))
    assert hf.is_zero3() == ("zero3" in path.name)
    assert hf.is_offload() == ("offload" in path.name)
    values = dict(
        enabled=False,
        train_batch_size=4,
        train_micro_batch_size_per_gpu=4,
        gradient_accumulation_steps=1,
        gradient_clipping=1.0,
        lr=1e-5,
        betas=[0.9, 0.999],
        eps=1e-8,
        weight_decay=0.0,
        reduce_bucket_size=64 * 64,
        stage3_prefetch_bucket_size=int(0.9 * 64 * 64),
        stage3_param_persistence_threshold=640,
    )
    raw = json.loads(path.read_text())
    resolved = _resolve_auto(raw, values)
    assert "auto" not in json.dumps(resolved)
    # DeepSpeed's own pydantic validation: unknown or misspelt keys and bad values raise here.
    ds = DeepSpeedConfig(resolved)
    assert ds.zero_optimization_stage == raw["zero_optimization"]["stage"]
    assert ds.zero_enabled


def test_deepspeed_configs_complete():
    assert {p.name for p in DS_FILES} >= {
        "zero2.json",
        "zero2_offload.json",
        "zero3.json",
        "zero3_offload.json",
    }


@pytest.mark.parametrize("path", sorted(ACC_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_config_is_valid(path: Path):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(str(path))  # unknown keys raise
    ds_file = (config.deepspeed_config or {}).get("deepspeed_config_file")
    if ds_file:
        assert (ROOT / ds_file).is_file(), ds_file
    assert config.num_processes >= 1 and config.num_machines >= 1


def test_launch_command_shapes():
    ddp = launch_command("ddp", 2, ["grpo"], port=1234)
    assert "--multi_gpu" in ddp and ddp[ddp.index("--num_processes") + 1] == "2"
    assert "--cpu" not in ddp  # --cpu silently runs one process
    z3 = launch_command("zero3", 2, ["sft"], deepspeed_config="z.json", port=1)
    assert z3[z3.index("--zero3_init_flag") + 1] == "true" and "--use_deepspeed" in z3
    with pytest.raises(ValueError):
        launch_command("zero3", 2, ["sft"])


@pytest.mark.slow
def test_finish_process_exits_a_launched_worker_without_finalisation(tmp_path):
    """A worker started by a launcher leaves through os._exit (exit handlers run, C++ finalisation
    skipped: where gloo's joinable threads aborted ~1 run in 7); elsewhere it just returns the code."""
    import sys

    script = (
        "import atexit\n"
        "atexit.register(lambda: print('exit handler ran', flush=True))\n"
        "from r1vision.trainer.distributed import finish_process\n"
        "code = finish_process(3)\n"
        "print('returned', code, flush=True)\n"
    )
    cmd = [sys.executable, "-c", script]
    launched = run_command(cmd, env={**launch_env(), "TORCHELASTIC_RUN_ID": "t"}, timeout=600)
    assert launched.returncode == 3 and "exit handler ran" in launched.stdout
    assert "returned" not in launched.stdout
    env = {k: v for k, v in launch_env().items() if k not in ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE")}
    plain = run_command(cmd, env=env, timeout=600)
    assert plain.returncode == 0 and "returned 3" in plain.stdout
    # vLLM's CPU platform sets LOCAL_WORLD_SIZE in any process that builds an engine: not a launcher
    with_vllm_env = run_command(cmd, env={**env, "LOCAL_WORLD_SIZE": "1"}, timeout=600)
    assert with_vllm_env.returncode == 0 and "returned 3" in with_vllm_env.stdout


@pytest.mark.slow
def test_freeing_the_ddp_model_after_teardown_never_hangs():
    """2-process gloo worlds that end as a run ends (teardown, then the trainer and its DDP reducer freed):
    none hangs. Before teardown() kept the destroyed group referenced, 8 of 75 hung for ever (the group's
    destructor joined gloo's worker thread under the GIL; the thread waited for the GIL)."""
    import sys

    proc = run_launched(
        [sys.executable, str(ROOT / "tests" / "scripts" / "gloo_teardown.py"), "40", "10"], ROOT
    )
    assert proc.stdout.strip().splitlines()[-1] == "hangs 0", proc.stdout[-2000:]


def test_cli_in_process_returns_after_a_vllm_engine_set_its_env(monkeypatch):
    """After an in-process vLLM engine (LOCAL_WORLD_SIZE set), ``cli.main`` must return, not os._exit."""
    from r1vision.trainer.distributed import finish_process

    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert finish_process(0) == 0


# ------------------------------------------------------------------------------------------- runs
@pytest.mark.slow
def test_ddp_grpo_two_gloo_ranks(setup):
    root, model = setup
    out = root / "ddp"
    cmd = launch_command("ddp", 2, _grpo_args(model, root / "data", out, "--max_steps", "2"))
    proc = _run([*cmd, "--save_strategy", "no"], root, cold=True)  # as a user's launch: every process exec'd
    layout = _layout(out)
    assert layout["world_size"] == 2 and layout["backend"] == "gloo"
    assert layout["distributed_type"] == "MULTI_CPU"
    assert [r["rank"] for r in layout["ranks"]] == [0, 1]
    assert len({r["pid"] for r in layout["ranks"]}) == 2  # two real processes
    assert _steps(out) == ["1", "2"]
    assert (out / "model.safetensors").exists()
    assert "terminate called" not in proc.stderr


@pytest.mark.slow
def test_zero3_grpo_partitions_saves_and_resumes(setup):
    root, model = setup
    out = root / "z3_grpo"
    cfg = root / "zero3_tiny.json"
    args = _grpo_args(model, root / "data", out, "--save_strategy", "steps", "--save_steps", "1")
    proc = _run(
        launch_command("zero3", 2, [*args, "--max_steps", "2"], deepspeed_config=cfg), root, cold=True
    )
    # DeepSpeed's CPU backend does not compile its shared-memory all-reduce op (~40 s; training never uses it)
    assert "deepspeed_shm_comm" not in proc.stdout + proc.stderr

    layout = _layout(out)
    assert layout["zero_stage"] == 3 and layout["distributed_type"] == "DEEPSPEED"
    assert layout["world_size"] == 2 and layout["backend"] == "gloo"
    for rank in layout["ranks"]:
        # each rank holds about half of every tensor (DeepSpeed pads shards to equal size)
        assert rank["param_elements_local"] < 0.55 * rank["param_elements_full"], rank
    assert (
        sum(r["param_elements_local"] for r in layout["ranks"]) >= layout["ranks"][0]["param_elements_full"]
    )
    ckpt = out / "checkpoint-2"
    assert (ckpt / "global_step2").is_dir() and (ckpt / "latest").read_text().strip() == "global_step2"
    assert (out / "model.safetensors").exists()  # gathered 16-bit weights on save
    assert _steps(out) == ["1", "2"]

    resume = [*args, "--max_steps", "3", "--resume_from_checkpoint", str(ckpt)]
    _run(launch_command("zero3", 2, resume, deepspeed_config=cfg), root)
    assert _steps(out) == ["1", "2", "3"]
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    # the resumed run continued the counters from the checkpoint instead of starting over
    assert state["log_history"][0]["step"] == 1 and state["log_history"][2]["step"] == 3


@pytest.mark.slow
def test_zero3_sft_resume_matches_uninterrupted_run(setup):
    """ZeRO-3 (every parameter partitioned) on 2 gloo ranks, weight decay on, checkpointed each step:
    checkpoint-2 resumed on 2 processes, checkpoint-1 on ONE (1 x 4, same global batch: DeepSpeed's universal
    form, with r1vision's mend of its ZeRO-3 load), and that run's checkpoint-2 back on 2: each reproduces
    the uninterrupted run's step 3 on the same rows. Before the mend the one-process resume was 9.2e-5 off
    (Adam's step shared by the two param groups; the no-decay group decaying)."""
    import torch

    root, model = setup
    cfg = root / "zero3_tiny.json"

    def args(out: Path, per_device: int, *extra: str) -> list[str]:
        a = _sft_args(model, root / "data", out, "--max_steps", "3", "--weight_decay", "0.1", *extra)
        a[a.index("--per_device_train_batch_size") + 1] = str(per_device)
        return a

    def run(nproc: int, out: Path, per_device: int, *extra: str) -> None:
        _run(launch_command("zero3", nproc, args(out, per_device, *extra), deepspeed_config=cfg), root)

    full = root / "z3_sft_full"
    run(2, full, 2, "--save_strategy", "steps", "--save_steps", "1")
    assert _layout(full)["zero_stage"] == 3
    assert _steps(full)[:3] == ["1", "2", "3"]
    step2 = _load(full / "checkpoint-2" / "model.safetensors")
    want = _load(full / "model.safetensors")
    assert any(not torch.equal(step2[k], want[k]) for k in want)  # step 3 really trained

    def same_as_full(out: Path, steps: tuple[int, ...]) -> None:
        got = _load(out / "model.safetensors")
        assert want.keys() == got.keys()
        for key in want:
            assert torch.allclose(want[key].float(), got[key].float(), atol=1e-5), (out.name, key)
        # the same rows: each step's hash of the row indices all ranks trained on
        assert read_samples(out) == {s: read_samples(full)[s] for s in steps}

    resumed = root / "z3_sft_resumed"
    run(2, resumed, 2, "--save_strategy", "no", "--resume_from_checkpoint", str(full / "checkpoint-2"))
    same_as_full(resumed, (3,))
    one = root / "z3_sft_on_one"  # 2 -> 1 process
    ckpt1 = str(full / "checkpoint-1")
    run(1, one, 4, "--save_strategy", "steps", "--save_steps", "1", "--resume_from_checkpoint", ckpt1)
    assert (full / "checkpoint-1" / "latest_universal").is_file()
    same_as_full(one, (2, 3))
    back = root / "z3_sft_back_on_two"  # 1 -> 2 processes
    run(2, back, 2, "--save_strategy", "no", "--resume_from_checkpoint", str(one / "checkpoint-2"))
    same_as_full(back, (3,))


@pytest.mark.slow
def test_zero3_lora_run_ends_with_its_merged_model_and_resumes_on_one_process(setup, tmp_path):
    """LoRA under ZeRO-3 on 2 gloo ranks (the 24 GB path): the run ends (the end-of-run merge built the base
    model partitioned on the main process alone and hung there for ever) with a merged folder equal to a
    stand-alone merge of its adapter, and its checkpoint resumes on ONE process to the uninterrupted run's
    adapter (LoRA dropout off: a different process count does not restore the per-process RNG streams that
    dropout draws from)."""
    from r1vision.trainer.merge import merge_adapter

    root, model = setup
    cfg = root / "zero3_tiny.json"
    lora = ("--use_peft", "true", "--lora_r", "4", "--lora_dropout", "0", "--weight_decay", "0.1")

    def args(out: Path, per_device: int, *extra: str) -> list[str]:
        a = _sft_args(model, root / "data", out, "--max_steps", "3", *lora, *extra)
        a[a.index("--per_device_train_batch_size") + 1] = str(per_device)
        return a

    full, one = root / "z3_lora_full", root / "z3_lora_on_one"
    cmd = args(full, 2, "--save_strategy", "steps", "--save_steps", "2")
    _run(launch_command("zero3", 2, cmd, deepspeed_config=cfg), root, timeout=600)  # a hang: fail in minutes
    alone = merge_adapter(full, tmp_path / "alone")  # in this process: no DeepSpeed anywhere
    _same_weights(alone / "model.safetensors", full / "merged" / "model.safetensors", atol=0.0)

    ckpt = str(full / "checkpoint-2")
    cmd = args(one, 4, "--save_strategy", "no", "--resume_from_checkpoint", ckpt)
    _run(launch_command("zero3", 1, cmd, deepspeed_config=cfg), root, timeout=600)
    _same_weights(full / "adapter_model.safetensors", one / "adapter_model.safetensors")
    assert read_samples(one) == {3: read_samples(full)[3]}


@pytest.mark.slow
def test_zero2_sft_checkpoint_of_two_processes_resumes_on_one_and_back(setup):
    """The shipped ZeRO-2 config on 2 gloo ranks, checkpointed each step; checkpoint-2 then resumes on ONE
    process with the same global batch (1 x 4 for 2 x 2): r1vision converts the optimizer shards to
    DeepSpeed's universal form (once, inside the checkpoint) and step 3 equals the uninterrupted run's, on
    the same rows."""
    import torch

    root, model = setup
    cfg = DS_DIR / "zero2.json"
    out = root / "z2_sft"
    args = _sft_args(
        model, root / "data", out, "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1"
    )
    _run(launch_command("zero2", 2, args, deepspeed_config=cfg), root, cold=True)
    layout = _layout(out)
    assert layout["zero_stage"] == 2 and layout["world_size"] == 2
    # ZeRO-2 shards optimizer state and gradients, never the parameters
    assert all(r["param_elements_local"] == r["param_elements_full"] for r in layout["ranks"])
    with open(out / "metrics.csv") as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f) if r.get("loss")]
    assert len(losses) == 3 and all(loss == loss and loss > 0 for loss in losses)

    one = root / "z2_sft_on_one"  # on to step 4, saving each step
    args = _sft_args(
        model, root / "data", one, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "1"
    )
    args[args.index("--per_device_train_batch_size") + 1] = "4"
    args += ["--resume_from_checkpoint", str(out / "checkpoint-2")]
    _run(launch_command("zero2", 1, args, deepspeed_config=cfg), root)
    assert (out / "checkpoint-2" / "latest_universal").is_file()
    step2, want = _load(out / "checkpoint-2" / "model.safetensors"), _load(out / "model.safetensors")
    got = _load(one / "checkpoint-3" / "model.safetensors")
    assert any(not torch.equal(step2[k], want[k]) for k in want)  # step 3 really trained
    for key in want:  # measured: 8.8e-9 apart
        assert torch.allclose(want[key].float(), got[key].float(), atol=1e-6), key
    assert read_samples(one)[3] == read_samples(out)[3]

    # and the reverse: the one-process checkpoint-3 resumes on 2 processes; step 4 equals the one-process run's
    two = root / "z2_sft_back_on_two"
    args = _sft_args(model, root / "data", two, "--max_steps", "4", "--save_strategy", "no")
    args += ["--resume_from_checkpoint", str(one / "checkpoint-3")]
    _run(launch_command("zero2", 2, args, deepspeed_config=cfg), root)
    want, got = _load(one / "model.safetensors"), _load(two / "model.safetensors")
    for key in want:
        assert torch.allclose(want[key].float(), got[key].float(), atol=1e-6), key
    assert read_samples(two) == {4: read_samples(one)[4]}


@pytest.mark.slow
def test_selftest_ddp_layout(capsys):
    from r1vision import selftest

    assert selftest.run_checks("ddp", nproc=2) == 0
    out = capsys.readouterr().out
    assert "PASS  grpo 2 steps (ddp, hf)" in out and "2 ranks (MULTI_CPU, gloo), grad norm" in out


@pytest.mark.slow
def test_dynamic_sampling_two_ranks_one_without_signal(setup):
    """Rank 0's first round is flat, rank 1's is not: both ranks generate a second round together (no hang:
    the round count is agreed over the ranks), and every group that trains, on both, has reward spread."""
    root, model = setup
    out = root / "dyn"
    args = _grpo_args(model, root / "data", out, "--max_steps", "2", "--save_strategy", "no")
    reward = "tests.helpers.training.flat_first_round_on_rank0"
    args += ["--dynamic_sampling", "true", "--reward_funcs", reward]
    _run(launch_command("ddp", 2, args), root, PYTHONPATH=str(ROOT))
    with open(out / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("loss")]
    assert [float(r["dynamic_sampling/rounds"]) for r in rows] == [2.0, 1.0]
    drawn = [float(r["dynamic_sampling/prompts_drawn"]) for r in rows]
    assert drawn == [4.0, 2.0]  # one group per rank a round
    assert all(float(r["dynamic_sampling/groups_with_spread"]) == 1.0 for r in rows)
    assert float(rows[0]["grad_norm"]) > 0


# ------------------------------------------------------------------------------------------ FSDP2
_CPU_FSDP = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "helpers" / "cpu_fsdp"), str(ROOT)])}


def _same_weights(a: Path, b: Path, atol: float = 1e-5) -> None:
    import torch

    want, got = _load(a), _load(b)
    shared = want.keys() & got.keys()
    # FSDP's full state dict also names the tied lm_head (equal to the embedding); from_pretrained takes both
    assert want.keys() <= got.keys() and len(got.keys() - want.keys()) <= 1, got.keys() ^ want.keys()
    for key in shared:
        assert torch.allclose(want[key].float(), got[key].float(), atol=atol), key


@pytest.mark.slow
def test_fsdp2_sft_equals_ddp_and_resumes_from_its_sharded_checkpoint(setup):
    """FSDP2 shards every parameter over the two ranks and trains exactly as DDP does; its checkpoints are
    sharded (one file per rank), resuming from one reproduces the run on 2 processes and on 3 (same global
    batch of 6: torch's distributed checkpoint re-shards at load), and the final save is one whole model
    that from_pretrained loads."""
    from transformers import AutoModelForImageTextToText

    root, model = setup
    ddp, fsdp, resumed = root / "f_sft_ddp", root / "f_sft_fsdp", root / "f_sft_resumed"

    def args(out: Path, *extra: str, per_device: int = 3) -> list[str]:
        a = _sft_args(model, root / "data", out, "--max_steps", "3", "--weight_decay", "0.1", *extra)
        a[a.index("--per_device_train_batch_size") + 1] = str(per_device)
        return a

    _run(launch_command("ddp", 2, args(ddp, "--save_strategy", "no")), root)
    _run(
        launch_command("fsdp2", 2, args(fsdp, "--save_strategy", "steps", "--save_steps", "1")),
        root,
        **_CPU_FSDP,
    )

    layout = _layout(fsdp)
    assert layout["distributed_type"] == "FSDP" and layout["fsdp_version"] == 2 and layout["world_size"] == 2
    for rank in layout["ranks"]:  # each rank holds half of every parameter
        assert rank["param_elements_local"] <= 0.5 * rank["param_elements_full"] + 1024, rank
    # estimate-memory --fsdp2 counts what a rank holds (fp32 here: 4 B a weight), padding aside
    est = estimate(shape_of(load_model_config(model)), TrainSetup(gpus=2, zero=0, fsdp=True, weight_bytes=4))
    assert [r["param_elements_local"] for r in layout["ranks"]] == [
        pytest.approx(est.weights / 4, abs=1024)
    ] * 2
    shards = fsdp / "checkpoint-2" / "pytorch_model_fsdp_0"
    assert (shards / ".metadata").is_file() and len(list(shards.glob("*.distcp"))) == 2
    assert not (fsdp / "checkpoint-2" / "model.safetensors").exists()  # sharded, not gathered

    with open(ddp / "metrics.csv") as f_ddp, open(fsdp / "metrics.csv") as f_fsdp:
        loss_ddp = [float(r["loss"]) for r in csv.DictReader(f_ddp) if r.get("loss")]
        loss_fsdp = [float(r["loss"]) for r in csv.DictReader(f_fsdp) if r.get("loss")]
    assert len(loss_ddp) == 3 and loss_fsdp == pytest.approx(loss_ddp, abs=1e-5)
    _same_weights(ddp / "model.safetensors", fsdp / "model.safetensors")
    _, info = AutoModelForImageTextToText.from_pretrained(fsdp, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info

    resume = args(resumed, "--save_strategy", "no", "--resume_from_checkpoint", str(fsdp / "checkpoint-2"))
    _run(launch_command("fsdp2", 2, resume), root, **_CPU_FSDP)
    assert _steps(resumed)[-1] == "3"
    _same_weights(fsdp / "model.safetensors", resumed / "model.safetensors", atol=1e-6)

    on_three = root / "f_sft_on_three"  # 2 -> 3 processes, 3 x 2: the checkpoint re-sharded at load
    ckpt = str(fsdp / "checkpoint-2")
    resume = args(on_three, "--save_strategy", "no", "--resume_from_checkpoint", ckpt, per_device=2)
    _run(launch_command("fsdp2", 3, resume), root, **_CPU_FSDP)
    assert _layout(on_three)["world_size"] == 3
    _same_weights(fsdp / "model.safetensors", on_three / "model.safetensors", atol=1e-6)
    assert read_samples(on_three) == {3: read_samples(fsdp)[3]}  # step 3 on the same rows


@pytest.mark.slow
def test_fsdp2_under_bf16_holds_fp32_masters_as_the_estimate_counts(setup):
    """Under bf16 mixed precision (TRL's default on a GPU) accelerate upcasts the trainable parameters to
    fp32 before FSDP2 shards them; the frozen vision tower stays bf16. What each of two ranks holds is what
    ``estimate-memory --fsdp2`` counts for it (16/N B per trainable parameter in all, not the 8/N of bf16
    states): the weights' share, byte for byte up to FSDP's padding."""
    root, model = setup
    out = root / "f_sft_bf16"
    extra = ("--max_steps", "1", "--save_strategy", "no", "--bf16", "true", "--dtype", "bfloat16")
    _run(launch_command("fsdp2", 2, [*_sft_args(model, root / "data", out, *extra), "--freeze_vision_tower", "true"]),
         root, **_CPU_FSDP)  # fmt: skip
    layout = _layout(out)
    assert layout["distributed_type"] == "FSDP" and layout["world_size"] == 2
    shape = shape_of(load_model_config(model))
    est = estimate(shape, TrainSetup(gpus=2, zero=0, fsdp=True, freeze_vision=True, weight_bytes=2))
    bf16_states = estimate(
        shape, TrainSetup(gpus=2, zero=0, fsdp=True, freeze_vision=True, weight_bytes=2, bf16_autocast=False)
    )
    for rank in layout["ranks"]:
        assert rank["param_dtypes"] == ["bfloat16", "float32"], rank  # fp32 masters, the frozen tower bf16
        assert rank["param_bytes_local"] == pytest.approx(est.weights, abs=4096), rank
        assert rank["param_bytes_local"] > 1.5 * bf16_states.weights, rank
    assert _steps(out)[-1] == "1"


@pytest.mark.slow
def test_fsdp2_lora_grpo_equals_ddp(setup):
    """LoRA GRPO under FSDP2 (generation from sharded weights, a reward with spread so the adapter moves)
    gives the adapter that DDP gives; the final folder holds the adapter and the merged model."""
    root, model = setup
    reward = ["--reward_funcs", "tests.helpers.training.varied_reward", "--use_peft", "true"]
    common = ["--max_steps", "2", "--save_strategy", "no", "--learning_rate", "0.01", *reward]
    ddp, fsdp = root / "f_lora_ddp", root / "f_lora_fsdp"
    _run(launch_command("ddp", 2, _grpo_args(model, root / "data", ddp, *common)), root, **_CPU_FSDP)
    cmd = launch_command("fsdp2", 2, _grpo_args(model, root / "data", fsdp, *common))
    _run(cmd, root, cold=True, **_CPU_FSDP)  # the sitecustomize applied by the interpreter itself
    assert _layout(fsdp)["distributed_type"] == "FSDP"
    want, got = _load(ddp / "adapter_model.safetensors"), _load(fsdp / "adapter_model.safetensors")
    assert want.keys() == got.keys()
    assert max(float(v.abs().max()) for k, v in got.items() if "lora_B" in k) > 0  # the adapter trained
    for key in want:
        assert (want[key] - got[key]).abs().max() < 1e-5, key
    assert (fsdp / "merged" / "config.json").is_file()


def test_fsdp_sharded_checkpoint_is_resumable_only_with_its_metadata(tmp_path):
    from r1vision.checkpoints import checkpoint_problem

    ckpt = tmp_path / "checkpoint-4"
    (ckpt / "pytorch_model_fsdp_0").mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    (ckpt / "pytorch_model_fsdp_0" / "__0_0.distcp").write_bytes(b"x")
    assert checkpoint_problem(str(ckpt)) == "no model weights"  # .metadata is written last: cut save
    (ckpt / "pytorch_model_fsdp_0" / ".metadata").write_bytes(b"x")
    assert checkpoint_problem(str(ckpt)) is None


def test_fsdp2_launch_flags_and_refusals(monkeypatch):
    from types import SimpleNamespace

    from r1vision.commands._args import UsageError
    from r1vision.commands._train import launch_argv, train
    from r1vision.trainer.distributed import check_requested_layout

    cmd = launch_command("fsdp2", 2, ["grpo"], port=1)
    assert cmd[cmd.index("--fsdp_version") + 1] == "2" and "--use_fsdp" in cmd
    assert cmd[cmd.index("--fsdp_state_dict_type") + 1] == "SHARDED_STATE_DICT"
    # on CPU, accelerate would quietly run DDP: refused before launching, and in a worker started by hand
    with pytest.raises(UsageError, match="GPUs only"):
        launch_argv("grpo", ["--accelerate_config", "fsdp2", "--num_processes", "2"])
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    ddp_state = SimpleNamespace(distributed_type=SimpleNamespace(name="MULTI_CPU"))
    with pytest.raises(RuntimeError, match="runs these processes as MULTI_CPU"):
        check_requested_layout(ddp_state)
    check_requested_layout(SimpleNamespace(distributed_type=SimpleNamespace(name="FSDP")))
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    with pytest.raises(UsageError, match="not supported by t2i-grpo"):
        train("t2i-grpo", ["--config", "t2i_smoke", "--accelerate_config", "fsdp2"])


# ------------------------------------------------------------------------------ resume across layouts
def _losses(out: Path) -> dict[str, float]:
    with open(out / "metrics.csv") as f:
        return {r["step"]: float(r["loss"]) for r in csv.DictReader(f) if r.get("loss")}


@pytest.mark.slow
def test_a_checkpoint_resumes_on_another_process_count_with_the_same_global_batch(setup):
    """A DDP run checkpointed on 2 processes continues on 1 (per-device batch doubled) exactly as it would
    have on 2, and a 1-process run continues on 2: the samplers draw global batches and accelerate splits
    them, so the same global batch gives the same data order. Another global batch is refused in one line
    (exit 2) unless --allow_layout_change."""
    import sys

    root, model = setup
    args = lambda out, per_device, *extra: _sft_args(  # noqa: E731
        model,
        root / "data",
        out,
        "--max_steps",
        "4",
        "--per_device_train_batch_size",
        str(per_device),
        *extra,
    )
    one = [sys.executable, "-m", "r1vision.cli"]
    for first, then in ((2, 1), (1, 2)):
        whole, resumed = root / f"lay_{first}", root / f"lay_{first}_on_{then}"
        cmd = args(whole, 4 // first, "--save_strategy", "steps", "--save_steps", "2")
        _run(launch_command("ddp", 2, cmd) if first == 2 else [*one, *cmd], root)
        ckpt = whole / "checkpoint-2"
        assert json.loads((ckpt / "r1vision_layout.json").read_text())["global_batch"] == 4
        cmd = args(resumed, 4 // then, "--save_strategy", "no", "--resume_from_checkpoint", str(ckpt))
        _run(launch_command("ddp", 2, cmd) if then == 2 else [*one, *cmd], root)
        want, got = _losses(whole), _losses(resumed)
        assert sorted(got) == ["3", "4"] and [got[s] for s in "34"] == pytest.approx(
            [want[s] for s in "34"], abs=1e-5
        )
        _same_weights(whole / "model.safetensors", resumed / "model.safetensors")
        # the rows of each step, gathered over the processes and hashed: the same data order on either layout
        rows = read_samples(whole)
        assert sorted(rows) == [1, 2, 3, 4] and read_samples(resumed) == {3: rows[3], 4: rows[4]}
    assert read_samples(root / "lay_1") == read_samples(root / "lay_2")  # 1 process vs 2: same steps
    assert len(set(read_samples(root / "lay_1").values())) == 4  # and the steps differ from each other

    other = args(
        root / "lay_other",
        2,
        "--save_strategy",
        "no",
        "--resume_from_checkpoint",
        str(root / "lay_2" / "checkpoint-2"),
    )
    proc = run_command([*one, *other], root, timeout=900)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = [x for x in proc.stderr.splitlines() if "error:" in x]
    assert len(line) == 1 and "global batch of 4 (2 processes x 2 x 1 accumulation)" in line[0], proc.stderr[
        -3000:
    ]
    assert "this run has 2 (1 x 2 x 1)" in line[0] and "--allow_layout_change" in line[0]
    _run([*one, *other, "--allow_layout_change", "true"], root)
    assert _steps(root / "lay_other")[-1] == "4"


@pytest.mark.slow
def test_a_grpo_checkpoint_inside_a_generation_resumes_on_any_process_count(setup):
    """One generation feeds 2 optimizer steps; the checkpoint after the first keeps each process's share of
    it. On 2 processes again the run continues from those samples exactly; on 1 process (and a 1-process
    checkpoint on 2) every process generates it anew from the same prompts and the next generation comes
    on the uninterrupted run's step (one process loading its share while another generated would hang)."""
    import sys

    root, model = setup
    one = [sys.executable, "-m", "r1vision.cli"]
    within = (
        "--steps_per_generation",
        "2",
        "--learning_rate",
        "0.01",
        "--save_strategy",
        "steps",
        "--save_steps",
        "1",
    )

    def args(out: Path, per_device: int, *extra: str) -> list[str]:
        return [
            *_grpo_args(model, root / "data", out, *within, *extra),
            "--per_device_train_batch_size",
            str(per_device),
        ]

    whole = root / "gen_2"
    _run(launch_command("ddp", 2, args(whole, 4, "--max_steps", "3")), root)
    ckpt = whole / "checkpoint-1"
    assert sorted(p.name for p in ckpt.glob("rollout_buffer_rank*.pt")) == [
        "rollout_buffer_rank0.pt", "rollout_buffer_rank1.pt"]  # fmt: skip
    assert not list((whole / "checkpoint-2").glob("rollout_buffer_*"))  # a generation boundary
    rows = read_samples(whole)
    assert sorted(rows) == [1, 3]  # the steps that generate

    same = root / "gen_2_on_2"
    _run(
        launch_command("ddp", 2, args(same, 4, "--max_steps", "3", "--resume_from_checkpoint", str(ckpt))),
        root,
    )
    want, got = _losses(whole), _losses(same)
    assert sorted(got) == ["2", "3"] and [got[s] for s in "23"] == pytest.approx(
        [want[s] for s in "23"], abs=1e-5
    )
    _same_weights(whole / "model.safetensors", same / "model.safetensors")
    assert read_samples(same) == {3: rows[3]}  # step 2 trained the saved samples

    solo = root / "gen_2_on_1"
    proc = _run([*one, *args(solo, 8, "--max_steps", "3", "--resume_from_checkpoint", str(ckpt))], root)
    assert "samples that generation anew" in proc.stderr
    assert read_samples(solo) == {2: rows[1], 3: rows[3]}  # generation 0 again, then generation 1 on time

    first = root / "gen_1"
    _run([*one, *args(first, 8, "--max_steps", "1")], root)
    assert (first / "checkpoint-1" / "rollout_buffer_rank0.pt").is_file()
    both = root / "gen_1_on_2"
    resume = ("--max_steps", "3", "--resume_from_checkpoint", str(first / "checkpoint-1"))
    proc = _run(launch_command("ddp", 2, args(both, 4, *resume)), root)
    assert "samples that generation anew" in proc.stderr
    assert read_samples(both) == {2: read_samples(first)[1], 3: rows[3]}


def test_a_sharded_checkpoint_resumes_elsewhere_only_under_its_own_sharding(tmp_path):
    """ZeRO-1/2/3 checkpoints resume on another count under ZeRO (DeepSpeed's universal form), FSDP ones
    under FSDP (torch's distributed checkpoint re-shards); either resumed without its sharding is refused in
    one line."""
    from r1vision.checkpoints import layout_change_problem, needs_universal

    ckpt = tmp_path / "checkpoint-2"
    ckpt.mkdir()
    then = {
        "world_size": 2,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
        "global_batch": 4,
    }
    now = {"world_size": 1, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1}
    (ckpt / "r1vision_layout.json").write_text(json.dumps({**then, "zero_stage": 2, "fsdp": False}))
    assert "resume it under DeepSpeed ZeRO (--zero 2)" in layout_change_problem(str(ckpt), now)
    assert layout_change_problem(str(ckpt), {**now, "zero_stage": 2}) is None
    assert needs_universal(str(ckpt), {**now, "zero_stage": 2})
    same = {**now, "world_size": 2, "per_device_train_batch_size": 2, "zero_stage": 2}
    assert layout_change_problem(str(ckpt), same) is None and not needs_universal(str(ckpt), same)
    (ckpt / "r1vision_layout.json").write_text(json.dumps({**then, "zero_stage": 3, "fsdp": False}))
    assert layout_change_problem(str(ckpt), {**now, "zero_stage": 3}) is None
    assert needs_universal(str(ckpt), {**now, "zero_stage": 3})
    (ckpt / "r1vision_layout.json").write_text(json.dumps({**then, "zero_stage": 0, "fsdp": True}))
    problem = layout_change_problem(str(ckpt), now)
    assert "FSDP checkpoint of 2 processes" in problem and "under FSDP (--accelerate_config fsdp2)" in problem
    assert "FSDP checkpoint" in layout_change_problem(
        str(ckpt), {**now, "world_size": 2, "per_device_train_batch_size": 2}
    )
    assert layout_change_problem(str(ckpt), {**now, "fsdp": True}) is None
    assert not needs_universal(str(ckpt), {**now, "fsdp": True})
    (ckpt / "r1vision_layout.json").write_text(json.dumps({**then, "zero_stage": 0, "fsdp": False}))
    assert layout_change_problem(str(ckpt), now) is None  # DDP: same global batch on one process
    assert "global batch of 4" in layout_change_problem(str(ckpt), {**now, "gradient_accumulation_steps": 2})
    # text-to-image: the generation batch decides the prompts, so it must match as well
    t2i = {**then, "zero_stage": 0, "fsdp": False, "steps_per_generation": 2, "generation_images": 8}
    (ckpt / "r1vision_layout.json").write_text(json.dumps(t2i))
    assert (
        layout_change_problem(str(ckpt), {**now, "steps_per_generation": 2, "generation_images": 8}) is None
    )
    problem = layout_change_problem(str(ckpt), {**now, "steps_per_generation": 4, "generation_images": 16})
    assert "sampled generations of 8 images (2 processes x 2 x steps_per_generation 2)" in problem
    assert "this run samples 16 (1 x 4 x 4)" in problem and "--allow_layout_change" in problem
    (ckpt / "r1vision_layout.json").unlink()  # written before the file existed: nothing to compare
    (ckpt / "rng_state_0.pth").write_bytes(b"")
    assert layout_change_problem(str(ckpt), now) is None


@pytest.mark.slow
def test_ddp_grpo_on_video_rows_two_gloo_ranks(setup, motion_dir):
    # The video path (decode, budget, per-sample video tensors through TRL's split and through dynamic
    # sampling's second round) on two ranks that draw different clips, rank 0 without signal at first.
    root, _ = setup
    from r1vision.testing.tiny import tiny_model_path

    model = str(tiny_model_path("qwen2_5_vl"))
    out = root / "ddp_video"
    args = _grpo_args(model, motion_dir, out, "--max_steps", "2", "--video_max_frame_pixels", "1568")
    args[args.index("--task") + 1] = "motion"
    args += [
        "--dynamic_sampling",
        "true",
        "--reward_funcs",
        "tests.helpers.training.flat_first_round_on_rank0",
    ]
    cmd = launch_command("ddp", 2, args)
    _run([*cmd, "--save_strategy", "no"], root, PYTHONPATH=str(ROOT))
    assert _layout(out)["world_size"] == 2
    assert _steps(out) == ["1", "2"]
    hashes = read_samples(out)  # the gathered rows of each step: two different draws
    assert sorted(hashes) == [1, 2] and hashes[1] != hashes[2]
    with open(out / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("loss")]
    assert [float(r["dynamic_sampling/rounds"]) for r in rows] == [2.0, 1.0]  # rank 0 drew again
    assert all(float(r["dynamic_sampling/groups_with_spread"]) == 1.0 for r in rows)
    assert float(rows[0]["grad_norm"]) > 0
    assert (out / "model.safetensors").exists()
