"""Every shipped YAML recipe parses into the configs it is meant for, with CLI overrides on top."""

from pathlib import Path

import pytest
from trl import TrlParser

from r1vision.recipes.train import ScriptArguments
from r1vision.tasks import get_task
from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig

RECIPES = sorted((Path(__file__).parents[1] / "configs" / "recipes").glob("*.yaml"))


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
