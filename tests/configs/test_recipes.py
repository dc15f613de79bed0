"""Every shipped YAML recipe parses into the configs it is meant for, with CLI overrides on top."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
import yaml
from trl import TrlParser

from r1vision.runners.train import ScriptArguments
from r1vision.tasks import get_task
from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig
from tests.helpers.cli import run_cli
from tests.helpers.paths import RECIPE_FILES, ROOT

RECIPES = RECIPE_FILES  # the VLM recipes (t2i_*: tests/configs/test_t2i_recipes.py)


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.stem for r in RECIPES])
def test_recipe_parses(recipe, tmp_path):
    config_cls = VisionSFTConfig if recipe.stem.endswith("_sft") else VisionGRPOConfig
    parser = TrlParser((ScriptArguments, config_cls))
    script, config = parser.parse_args_and_config(
        [
            "--config",
            str(recipe),
            "--model",
            "m",
            "--dataset",
            "d",
            "--output_dir",
            str(tmp_path),
            "--use_cpu",
            "true",
            "--logging_steps",
            "7",
        ]
    )
    assert config.logging_steps == 7  # CLI beats YAML
    assert config.bf16 is False  # unset in the recipes: off on CPU (on with a GPU, TRL's default)
    assert script.model == "m" and get_task(script.task).name == script.task


def test_recipes_cover_every_task_family():
    assert {r.stem.split("_")[0] for r in RECIPES} >= {"sgg", "geometry", "svg", "color"}


def test_generation_backend_maps_to_trl_switches(tmp_path):
    colocate = VisionGRPOConfig(output_dir=str(tmp_path), use_cpu=True, generation_backend="vllm_colocate")
    assert colocate.use_vllm and colocate.vllm_mode == "colocate"
    plain = VisionGRPOConfig(output_dir=str(tmp_path), use_cpu=True)
    assert plain.generation_backend == "hf" and not plain.use_vllm
    with pytest.raises(ValueError, match="generation_backend='vllm'"):
        VisionGRPOConfig(output_dir=str(tmp_path), use_cpu=True, generation_backend="vllm")


def test_bf16_is_off_on_cpu_unless_asked_for(tmp_path, monkeypatch):
    import torch

    # TRL turns an unset bf16 into True; on CPU that autocast is 20-40x slower, so r1vision leaves it off.
    assert VisionGRPOConfig(output_dir=str(tmp_path), use_cpu=True).bf16 is False
    assert VisionSFTConfig(output_dir=str(tmp_path)).bf16 is False  # no accelerator here
    assert VisionGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=True).bf16 is True  # explicit wins
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    from r1vision.trainer.config import _cpu_only

    assert not _cpu_only(VisionSFTConfig.__new__(VisionSFTConfig))  # a GPU keeps TRL's bf16 default


# ------------------------------------------------------------------------------------------- 1. recipes
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_parses_without_deprecations_or_missing_reporters(recipe: Path, tmp_path):
    """report_to names only installed integrations; no gradient_checkpointing FutureWarning."""
    from transformers.integrations import get_available_reporting_integrations
    from trl import TrlParser

    from r1vision.runners.train import ScriptArguments
    from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig

    cls = VisionSFTConfig if "sft" in recipe.stem else VisionGRPOConfig
    argv = ["--config", str(recipe), "--model", "m", "--dataset", "d", "--output_dir", str(tmp_path)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, config = TrlParser((ScriptArguments, cls)).parse_args_and_config(argv)
    future = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert not [m for m in future if "checkpointing" in m], future
    available = set(get_available_reporting_integrations())
    assert set(config.report_to) <= available, (config.report_to, available)


def test_recipe_resolves_by_name_from_any_directory(tmp_path):
    """Recipes ship with the package and `--config NAME` finds them from anywhere."""
    from r1vision.configs import resolve_config, resolve_config_argv

    os.chdir(tmp_path)
    assert resolve_config("sgg_grpo").resolve() == (ROOT / "configs/recipes/sgg_grpo.yaml").resolve()
    assert resolve_config("r1vision://recipes/svg_grpo.yaml").name == "svg_grpo.yaml"
    assert Path(resolve_config_argv(["--config", "color_smoke"])[1]).is_absolute()
    with pytest.raises(FileNotFoundError, match="shipped recipes: .*sgg_sft"):
        resolve_config("no_such_recipe")
    listing = run_cli("configs", cwd=tmp_path)
    assert listing.returncode == 0 and str(ROOT / "configs/recipes/sgg_sft.yaml") in listing.stdout


def test_accelerate_yamls_name_no_relative_json():
    """deepspeed_zero{2,3}.yaml worked only from the repository root."""
    import yaml

    for name in ("deepspeed_zero2.yaml", "deepspeed_zero3.yaml"):
        cfg = yaml.safe_load((ROOT / "configs/accelerate" / name).read_text())
        assert "deepspeed_config_file" not in cfg["deepspeed_config"], name
        assert cfg["deepspeed_config"]["zero_stage"] in (2, 3)


def test_config_equals_form_reads_the_recipe(tmp_path):
    """``--config=NAME`` is the same as ``--config NAME``: TRL's parser looks only for the two-word form, so
    without it the recipe was ignored (the run said "--task is required", or with --task trained on defaults)."""
    from r1vision.runners.train import parse_train_argv

    common = ["--model", "m", "--dataset", "d", "--output_dir", str(tmp_path)]
    two_words, _ = parse_train_argv("grpo", ["--config", "color_smoke", *common])
    equals, config = parse_train_argv("grpo", ["--config=color_smoke", *common])
    assert equals.task == two_words.task == "color"
    assert equals.recipe == two_words.recipe and Path(equals.recipe).is_absolute()
    assert (
        config.num_generations
        == yaml.safe_load((ROOT / "configs/recipes/color_smoke.yaml").read_text())["num_generations"]
    )
