"""LoRA outputs: the adapter, the merged stand-alone model, and both as ``--model`` of later commands."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.paths import RECIPE_FILES, ROOT
from tests.helpers.stock import stock_load

RECIPES = RECIPE_FILES  # the VLM recipes (t2i_*: tests/configs/test_t2i_recipes.py)


@pytest.mark.slow
def test_lora_run_leaves_merged_model_and_adapter_works_as_model(tiny_model, color_dir, tmp_path):
    """A LoRA output was a dead end (relative base, no model config)."""
    from r1vision.cli import main

    os.chdir(tmp_path)
    os.symlink(tiny_model("qwen2_vl"), "base")  # a relative --model, as a user types it
    out = tmp_path / "lora"
    argv = ["grpo", "--model", "base", "--dataset", str(color_dir), "--task", "color", "--output_dir", "lora"]
    argv += [
        "--lora_r",
        "4",
        "--max_steps",
        "1",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "2",
    ]
    argv += [
        "--max_completion_length",
        "4",
        "--use_cpu",
        "true",
        "--max_pixels",
        "3136",
        "--report_to",
        "none",
    ]
    argv += ["--save_strategy", "no"]
    assert main(argv) == 0
    adapter_cfg = json.loads((out / "adapter_config.json").read_text())
    assert Path(adapter_cfg["base_model_name_or_path"]).is_absolute()
    assert json.loads((out / "r1vision_run.json").read_text())["task"] == "color"
    found = stock_load(out / "merged")
    assert found["model"] == "Qwen2VLForConditionalGeneration" and found["names"] == ["Qwen2VLProcessor"] * 2
    # the adapter folder itself is a valid --model, from another directory
    os.chdir(ROOT)
    preds = tmp_path / "preds"
    assert main(["infer", "--task", "color", "--model", str(out), "--dataset", str(color_dir), "--output_dir",
                 str(preds), "--limit", "2", "--max-new-tokens", "4"]) == 0  # fmt: skip
    assert sum(1 for _ in open(preds / "shard-00000.jsonl")) == 2
    assert main(["merge", str(out), "--output_dir", str(tmp_path / "m2")]) == 0
    assert stock_load(tmp_path / "m2")["model"] == "Qwen2VLForConditionalGeneration"


def test_the_merge_loads_the_base_whole_inside_a_zero3_run():
    """A ZeRO-3 run leaves transformers' ZeRO-3 config set; the end-of-run merge (main process only) must
    not build the base model partitioned, whose collectives the other ranks never join (a hang on 2+
    processes). Inside the merge's loading ZeRO-3 is off; after it the run's config is back."""
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    from r1vision.trainer.merge import _whole_model_loading

    config = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_batch_size": 1})
    assert is_deepspeed_zero3_enabled()
    with _whole_model_loading():
        assert not is_deepspeed_zero3_enabled()
    assert is_deepspeed_zero3_enabled()
    del config  # transformers holds it weakly: the run's config ends with the run
    assert not is_deepspeed_zero3_enabled()
