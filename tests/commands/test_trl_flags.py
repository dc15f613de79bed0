"""A TRL user's command line: ``trl grpo ... --use_peft --lora_target_modules q_proj v_proj --dtype ...`` runs
with ``trl`` replaced by ``r1vision`` (plus ``--task``); what cannot work here is one line and exit 2."""

from __future__ import annotations

import json

import pytest

from r1vision.cli import main
from r1vision.commands._args import UsageError
from r1vision.commands._train import parse


def _argv(tmp_path, *extra: str) -> list[str]:
    return ["--task", "color", "--model", "m", "--dataset", str(tmp_path), "--output_dir", str(tmp_path / "o"),
            "--use_cpu", "true", *extra]  # fmt: skip


def test_model_config_flags_map_onto_lora_and_model_loading(tmp_path, monkeypatch):
    monkeypatch.setattr("r1vision.trainer.merge.resolve_model", lambda m: m)
    _, config = parse(
        "grpo",
        _argv(tmp_path, "--use_peft", "--lora_target_modules", "q_proj", "v_proj", "--dtype", "bfloat16",
              "--attn_implementation", "eager", "--model_revision", "v1", "--use_dora"),
    )  # fmt: skip
    assert (config.lora_r, config.lora_alpha, config.lora_dropout) == (16, 32, 0.05)  # TRL's defaults
    assert config.lora_target_modules == ["q_proj", "v_proj"]
    assert config.model_init_kwargs == {"dtype": "bfloat16", "attn_implementation": "eager", "revision": "v1"}
    assert config.use_dora
    # without --use_peft: r1vision's defaults; a comma-separated string as recipes write it
    _, plain = parse("grpo", _argv(tmp_path, "--lora_r", "8", "--lora_target_modules", "q_proj,v_proj"))
    assert (plain.lora_r, plain.lora_alpha, plain.lora_dropout) == (8, 16, 0.0)
    assert plain.lora_target_modules == ["q_proj", "v_proj"] and plain.model_init_kwargs is None


def test_trl_vlm_command_line_trains_with_the_adapters_it_names(tiny_model, color_dir, tmp_path):
    """TRL's VLM recipe flags (grpo_vlm.py: --use_peft --lora_target_modules q_proj v_proj --dtype)."""
    out = tmp_path / "run"
    argv = ["grpo", "--task", "color", "--model_name_or_path", tiny_model("qwen2_vl"), "--dataset_name",
            str(color_dir), "--output_dir", str(out), "--use_peft", "--lora_target_modules", "q_proj", "v_proj",
            "--dtype", "float32", "--attn_implementation", "eager", "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "4",
            "--max_pixels", "3136", "--use_cpu", "true", "--save_strategy", "no", "--report_to", "none"]  # fmt: skip
    assert main(argv) == 0
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 16 and adapter["lora_alpha"] == 32
    assert sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert (out / "merged" / "config.json").is_file()


def test_trl_spellings_on_the_command_line_override_a_recipe_that_uses_ours(tmp_path, monkeypatch):
    """`--config sgg_grpo --dataset_name DIR` (the recipe sets `dataset:`): the command line wins, as over
    any recipe key; it was refused as two values of one field."""
    monkeypatch.setattr("r1vision.trainer.merge.resolve_model", lambda m: m)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("task: color\nmodel: org/recipe-model\ndataset: org/recipe-data\n")
    base = ["--config", str(recipe), "--output_dir", str(tmp_path / "o"), "--use_cpu", "true"]
    script, _ = parse("grpo", [*base, "--model_name_or_path", "mine", "--dataset-name", "here"])
    assert (script.model, script.dataset) == ("mine", "here")
    recipe.write_text("task: color\nmodel_name_or_path: org/recipe-model\ndataset_name: org/recipe-data\n")
    script, _ = parse("grpo", [*base, "--model", "mine", "--dataset=here"])
    assert (script.model, script.dataset) == ("mine", "here")
    script, _ = parse("grpo", base)  # nothing on the command line: the recipe's
    assert (script.model, script.dataset) == ("org/recipe-model", "org/recipe-data")
    with pytest.raises(UsageError, match="--dataset_name and --dataset name the same thing"):
        parse("grpo", [*base, "--dataset_name", "a", "--dataset", "b"])  # both given here: still refused


@pytest.mark.parametrize("flag", ["--load_in_4bit", "--load_in_8bit"])
def test_quantised_loading_without_cuda_is_one_line(tmp_path, capsys, flag):
    assert main(["grpo", *_argv(tmp_path, flag)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{flag} needs a CUDA GPU" in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.slow
def test_num_processes_launches_through_accelerate_like_trl(tiny_model, color_dir, tmp_path):
    """`r1vision grpo --num_processes 2` (as `trl grpo --num_processes 2`): two gloo processes on a CPU."""
    out = tmp_path / "run"
    argv = ["grpo", "--num_processes", "2", "--config", "color_smoke", "--model", tiny_model("qwen2_vl"),
            "--dataset", str(color_dir), "--output_dir", str(out), "--max_steps", "1"]  # fmt: skip
    assert main(argv) == 0
    layout = json.loads((out / "distributed.json").read_text())
    assert layout["world_size"] == 2 and layout["backend"] == "gloo"


def test_accelerate_config_names_resolve_to_the_shipped_files():
    from r1vision.commands._train import launch_argv

    zero3 = launch_argv("grpo", ["--num_processes", "2", "--accelerate_config", "zero3", "--task", "sgg"])
    assert "--use_deepspeed" in zero3 and zero3[zero3.index("--deepspeed_config_file") + 1].endswith(
        "zero3.json"
    )
    assert (
        zero3[-3:] == ["grpo", "--task", "sgg"]
        or "--num_processes" not in zero3[zero3.index("r1vision.cli") :]
    )
    single = launch_argv("grpo", ["--accelerate_config=single_gpu", "--task", "sgg"])
    assert single[single.index("--config_file") + 1].endswith("configs/accelerate/single_gpu.yaml")
    assert launch_argv("grpo", ["--task", "sgg"]) is None
