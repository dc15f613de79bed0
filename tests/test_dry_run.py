"""``r1vision grpo|sft --dry-run``: every shipped recipe resolves on a CPU (no weights, no download), and
each combination that cannot work is refused before any GPU is touched."""

from __future__ import annotations

import pytest

from r1vision.cli import main as cli_main
from r1vision.dry_run import plan
from tests.helpers.paths import ROOT

RECIPES = ROOT / "configs" / "recipes"

# recipe -> (command, model when the recipe names none, dry-run flags for the layout it is meant for)
SHIPPED = {
    "color_smoke.yaml": ("grpo", "qwen2-vl-2b", []),
    "geometry_grpo.yaml": ("grpo", "Qwen/Qwen2.5-VL-7B-Instruct", ["--zero", "3"]),
    "sgg_grpo.yaml": ("grpo", "Qwen/Qwen2-VL-2B-Instruct", ["--zero", "3"]),
    "sgg_sft.yaml": ("sft", "Qwen/Qwen2-VL-2B-Instruct", ["--zero", "2"]),
    "svg_grpo.yaml": ("grpo", "Qwen/Qwen3-VL-4B-Instruct", ["--zero", "3"]),
    "svg_grpo_24gb.yaml": ("grpo", "Qwen/Qwen3-VL-4B-Instruct", ["--zero", "3", "--card-gb", "24"]),
    "sgg_grpo_24gb.yaml": ("grpo", None, ["--gpus", "4", "--zero", "3", "--card-gb", "24"]),
    "motion_grpo.yaml": ("grpo", "Qwen/Qwen2.5-VL-3B-Instruct", []),
}


def test_every_shipped_recipe_has_a_dry_run_case():
    assert {p.name for p in RECIPES.glob("*.yaml") if not p.name.startswith("t2i_")} == set(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_recipe_dry_runs(name, capsys):
    kind, model, flags = SHIPPED[name]
    argv = ["--config", str(RECIPES / name), "--dry-run", *flags]
    if model:
        argv += ["--model", model]
    assert cli_main([kind, *argv]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    for key in ("model", "pixel budget", "image tokens", "memory per GPU"):
        assert f"\n{key}" in f"\n{out}", (key, out)
    assert "OK: nothing refuses this run" in out


def test_a_video_recipe_reports_its_video_tokens(capsys):
    argv = [
        "--config",
        str(RECIPES / "motion_grpo.yaml"),
        "--dry-run",
        "--model",
        "Qwen/Qwen2.5-VL-3B-Instruct",
    ]
    assert cli_main(["grpo", *argv]) == 0
    out = capsys.readouterr().out
    # 16 frames -> 8 time steps of at most 128 tokens (100352 pixels / 28²)
    assert (
        "video tokens" in out
        and "up to 1024 per video: 16 frames at 2 fps -> 8 time steps x 128 tokens" in out
    )
    # with vLLM: the engine takes one clip per prompt and max_model_len holds its tokens (8 steps x 128, plus
    # room for Qwen3-VL's per-step timestamps); TRL's own server mode is refused before anything starts
    assert cli_main(["grpo", *argv, "--generation_backend", "vllm_colocate"]) == 0
    out = capsys.readouterr().out
    assert "1 x 1088 + 64)" in out and "limit_mm_per_prompt={'image': 1, 'video': 1}" in out
    assert cli_main(["grpo", *argv, "--generation_backend", "vllm_server"]) == 2
    assert "video rows cannot go through TRL's vLLM server" in capsys.readouterr().out


def test_fsdp2_layout_is_its_own_estimate_not_zero3(capsys):
    """``--accelerate_config fsdp2 --dry-run`` judges FSDP2's states (fp32 masters and moments under the
    GPU's bf16 mixed precision, sharded), smaller than ZeRO-3's for the same run; judged for the target GPU
    (bf16 on) although this machine has none, and ``--bf16 false`` loads fp32 weights (TRL's default)."""
    argv = [
        "--config",
        str(RECIPES / "geometry_grpo.yaml"),
        "--model",
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "--gpus",
        "8",
    ]
    fsdp, zero3 = plan("grpo", [*argv, "--fsdp2"]), plan("grpo", [*argv, "--zero", "3"])
    assert fsdp.facts["fsdp"] and fsdp.facts["zero"] == 0 and not zero3.facts["fsdp"]
    assert "FSDP2 over 8 GPUs" in "\n".join(fsdp.lines)
    assert fsdp.facts["training_bytes"] < zero3.facts["training_bytes"]
    memory = next(line for line in fsdp.lines if line.startswith("memory per GPU"))
    assert memory.endswith("weights loaded bf16")
    fp32 = plan("grpo", [*argv, "--fsdp2", "--bf16", "false"])
    assert next(line for line in fp32.lines if line.startswith("memory per GPU")).endswith(
        "weights loaded fp32"
    )
    assert fp32.facts["training_bytes"] > fsdp.facts["training_bytes"]
    assert cli_main(["grpo", "--config", "geometry_grpo", "--model", "Qwen/Qwen2.5-VL-7B-Instruct",
                     "--accelerate_config", "fsdp2", "--num_processes", "8",
                     "--dry-run"]) == 0  # fmt: skip
    assert "FSDP2 over 8 GPUs" in capsys.readouterr().out


def test_explicit_mixed_precision_is_judged_for_the_target_gpu_not_refused_here():
    """``--bf16 true`` (or a recipe's ``bf16: true``) is what a GPU run sets; transformers refuses it on a
    machine without one, which the dry run must not pass on: it plans the target GPU's bf16, and
    ``--fp16 true`` as mixed precision without bf16 (fp32 weights)."""
    argv = ["--config", str(RECIPES / "geometry_grpo.yaml"), "--model", "Qwen/Qwen2.5-VL-7B-Instruct",
            "--gpus", "8", "--fsdp2"]  # fmt: skip
    default, bf16, fp16 = (
        plan("grpo", argv),
        plan("grpo", [*argv, "--bf16", "true"]),
        plan("grpo", [*argv, "--fp16"]),
    )
    assert not bf16.problems and not fp16.problems, (bf16.problems, fp16.problems)
    assert bf16.facts["training_bytes"] == default.facts["training_bytes"]
    assert next(line for line in fp16.lines if line.startswith("memory per GPU")).endswith(
        "weights loaded fp32"
    )


@pytest.mark.slow
def test_24gb_recipe_fits_24gb_per_the_estimate():
    result = plan("grpo", ["--config", str(RECIPES / "sgg_grpo_24gb.yaml"), "--gpus", "4", "--zero", "3",
                           "--card-gb", "24"])  # fmt: skip
    assert not result.problems
    assert result.facts["training_bytes"] < 24 * 1024**3
    assert result.facts["max_model_len"] == 1024 + 512 + 1024
    text = "\n".join(result.lines)
    # the recipe sends its LoRA adapter to vLLM's LoRA support: 392 tensors, not 280 merged linears
    assert (
        "the LoRA adapter: 392 tensors, 161.5M elements" in text and "merged weights would be 6.53B" in text
    )
    merged = plan("grpo", ["--config", str(RECIPES / "sgg_grpo_24gb.yaml"), "--gpus", "4", "--zero", "3",
                           "--vllm_lora_adapters", "false"])  # fmt: skip
    assert "280 of 729 tensors" in "\n".join(merged.lines)  # LoRA + frozen tower: the changing linears only
    assert merged.facts["training_bytes"] >= result.facts["training_bytes"]


def test_vllm_colocate_shows_engine_args_and_sync():
    argv = ["--config", str(RECIPES / "svg_grpo_24gb.yaml"), "--model", "Qwen/Qwen3-VL-4B-Instruct",
            "--generation_backend", "vllm_colocate", "--vllm_enable_sleep_mode", "true", "--zero", "3"]  # fmt: skip
    result = plan("grpo", argv)
    text = "\n".join(result.lines)
    assert "max_model_len=3268" in text  # 1024 text + 200704 // 32**2 = 196 image + 2048 completion
    assert "mm_processor_kwargs={'size': {'shortest_edge': 65536, 'longest_edge': 200704}}" in text
    assert result.facts["sleep_level"] == 2
    # sleep level 2 drops every weight: each sync sends all of them, frozen tower included
    assert "(every parameter: the engine slept)" in text and not result.problems


def _refused(argv: list[str], kind: str = "grpo") -> str:
    result = plan(kind, argv)
    assert result.problems, "\n".join(result.lines)
    return " ".join(result.problems)


BASE = ["--model", "qwen2-vl-2b", "--task", "color", "--max_pixels", "3136"]


def test_refuses_sleep_mode_on_a_cpu_run():
    assert "needs CUDA" in _refused([*BASE, "--use_cpu", "true", "--generation_backend", "vllm_colocate",
                                     "--vllm_enable_sleep_mode", "true"])  # fmt: skip


def test_refuses_sleep_mode_for_servers():
    assert "colocate mode only" in _refused(
        [*BASE, "--generation_backend", "vllm_server", "--vllm_enable_sleep_mode", "true"]
    )


def test_refuses_tensor_parallel_per_rank_servers():
    assert "vllm_tensor_parallel_size=2" in _refused(
        [*BASE, "--generation_backend", "vllm_server", "--vllm_server_per_rank", "true",
         "--vllm_tensor_parallel_size", "2"]
    )  # fmt: skip


def test_refuses_a_max_model_len_shorter_than_a_rollout():
    problems = _refused([*BASE, "--generation_backend", "vllm_colocate", "--vllm_max_model_length", "600",
                         "--max_completion_length", "512"])  # fmt: skip
    assert "shorter than a rollout" in problems


def test_refuses_rollouts_longer_than_the_models_context():
    problems = _refused([*BASE, "--generation_backend", "vllm_colocate", "--max_completion_length", "40000"])
    assert "more than the model's context of 32768" in problems  # Qwen2-VL-2B


def test_refuses_a_colocated_engine_that_does_not_fit_its_share():
    # The model's whole context (what vLLM takes without max_model_len): 262,144 tokens of KV cache
    problems = _refused(["--model", "Qwen/Qwen3-VL-4B-Instruct", "--task", "svg", "--max_pixels", "200704",
                         "--generation_backend", "vllm_colocate", "--vllm_max_model_length", "262144",
                         "--per_device_train_batch_size", "8", "--zero", "3"])  # fmt: skip
    assert "colocated engine needs" in problems


def test_refuses_training_that_does_not_fit_the_card():
    problems = _refused(["--model", "Qwen/Qwen2.5-VL-7B-Instruct", *BASE[2:], "--card-gb", "24"])
    assert "more than a 24 GB card" in problems  # DDP full fine-tuning of 7B


def test_refuses_a_server_that_does_not_fit_its_gpu():
    problems = _refused(["--model", "Qwen/Qwen2.5-VL-7B-Instruct", *BASE[2:], "--lora_r", "8",
                         "--generation_backend", "vllm_server", "--zero", "3", "--card-gb", "16"])  # fmt: skip
    assert "a vLLM server needs" in problems


def test_cli_exit_code_two_on_refusal(capsys):
    argv = [
        "grpo",
        *BASE,
        "--generation_backend",
        "vllm_server",
        "--vllm_enable_sleep_mode",
        "true",
        "--dry-run",
    ]
    assert cli_main(argv) == 2
    assert "REFUSED" in capsys.readouterr().out


def test_trl_spellings_override_the_recipe_as_in_the_run():
    """`--config sgg_grpo --model_name_or_path M --dataset_name D --dry-run`: the dry run parses as the run does
    (one parse), so TRL's spellings override the recipe's `dataset:` there too; both were refused."""
    result = plan("grpo", ["--config", str(RECIPES / "sgg_grpo.yaml"), "--model_name_or_path",
                           "Qwen/Qwen2-VL-2B-Instruct", "--dataset_name", "my/data", "--zero", "3"])  # fmt: skip
    assert not result.problems, result.problems
    text = "\n".join(result.lines)
    assert "dataset my/data" in text and "Qwen/Qwen2-VL-2B-Instruct (family qwen2_vl" in text


@pytest.mark.parametrize("flags", [["--use_cpu"], ["--use_cpu", "true"], ["--use-cpu=true"]])
def test_use_cpu_in_any_spelling_targets_the_cpu(flags):
    """A bare boolean flag at the end of the line (TRL reads it as true) took the dry run down with an
    IndexError; each spelling now plans for the CPU (weights in fp32, no card to fit)."""
    result = plan("grpo", ["--config", str(RECIPES / "color_smoke.yaml"), "--model", "qwen2-vl-2b", *flags])
    assert not result.problems
    assert "weights loaded fp32" in "\n".join(result.lines)


@pytest.mark.parametrize(
    ("model", "family", "moe"),
    [
        ("Qwen/Qwen3-VL-30B-A3B-Instruct", "qwen3_vl_moe", "8 of 128 per token"),
        ("Qwen/Qwen3.5-0.8B", "qwen3_5", None),
        ("Qwen/Qwen3.6-35B-A3B", "qwen3_5_moe", "8 of 256 per token"),
    ],
)
def test_newest_qwen_families_dry_run_offline(model, family, moe, capsys):
    """The published Qwen3-VL-MoE / Qwen3.5 shapes resolve offline: family, Qwen3-VL's shipped pixel
    budget (32 px per token side), and for MoE the active share; 35B-A3B full fine-tuning needs ZeRO-3 + more."""
    code = cli_main(
        ["grpo", "--config", "sgg_grpo", "--model", model, "--zero", "3", "--gpus", "8", "--dry-run"]
    )
    out = capsys.readouterr().out
    assert f"(family {family}," in out and "factor 32" in out and f"{family} processor as shipped" in out
    assert ("experts" in out) == bool(moe) and (moe is None or moe in out)
    assert code == (0 if moe is None else 2)
