"""The one reader of a command line and a recipe (``configs.CommandLine``, ``configs.read_recipe``): every
command resolves a shipped recipe name, both flag spellings and ``--flag=value`` the same way."""

from __future__ import annotations

import argparse

import pytest

from r1vision.configs import CommandLine, read_recipe


def test_spellings_forms_and_bare_flags_read_alike():
    line = CommandLine.of(["--config=sgg_grpo", "--max-pixels", "3136", "--use_cpu", "--report_to=none"])
    assert line.value("max_pixels") == "3136" and line.value("use_cpu") == "true"
    assert line.value("report_to") == "none"
    assert line.value("task") == "sgg"  # from the shipped recipe, by name
    assert line.value("nonexistent") is None
    assert line.without("max_pixels", "use-cpu") == ["--config=sgg_grpo", "--report_to=none"]
    assert CommandLine.of(["--num_processes=2", "--x", "1"]).without("num_processes") == ["--x", "1"]


def test_a_recipe_is_read_once_one_way(tmp_path):
    assert read_recipe("sgg_grpo")["task"] == "sgg"
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    with pytest.raises(ValueError, match="not YAML"):
        read_recipe(str(tmp_path / "bad.yaml"))
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="a recipe is a mapping"):
        read_recipe(str(tmp_path / "list.yaml"))
    with pytest.raises(FileNotFoundError, match="shipped recipes:"):
        read_recipe("sgg_grpoo")


def test_vllm_serve_reads_a_recipe_by_name():
    """``r1vision vllm-serve --config sgg_grpo`` opened the name as a path (FileNotFoundError traceback)."""
    from r1vision.generation.vllm_launch import apply_recipe

    a = argparse.Namespace(config="sgg_grpo", max_model_len=None, max_completion_length=None, model=None,
                           max_pixels=None, min_pixels=None, max_images_per_prompt=None,
                           max_prompt_text_tokens=None, max_lora_rank=None, tensor_parallel_size=1)  # fmt: skip
    try:
        apply_recipe(a, ["--config", "sgg_grpo"])
    except ValueError as exc:  # only the missing model may be refused: the recipe was read
        assert "model" in str(exc)
    assert a.max_completion_length == read_recipe("sgg_grpo")["max_completion_length"]


def test_dry_run_only_flags_take_both_spellings(tmp_path, capsys):
    from r1vision.dry_run import _pop_flag

    for form in (["--card_gb", "40"], ["--card-gb", "40"], ["--card-gb=40"], ["--card_gb=40"]):
        argv = ["--x", "1", *form]
        assert _pop_flag(argv, "--card-gb", float, 80.0) == 40.0 and argv == ["--x", "1"]
