"""``r1vision vllm-serve``: what it starts, from the recipe and the model folder (no vLLM needed)."""

from __future__ import annotations

from tests.helpers.paths import RECIPE_FILES

RECIPES = RECIPE_FILES  # the VLM recipes (t2i_*: tests/configs/test_t2i_recipes.py)


def test_vllm_serve_takes_an_adapter_folder(tmp_path, monkeypatch):
    """`vllm-serve --model <LoRA output>` serves the run's merged model; the training command keeps its own."""
    import r1vision.generation.vllm_launch as launch
    from r1vision.cli import main

    (tmp_path / "run" / "merged").mkdir(parents=True)
    (tmp_path / "run" / "adapter_config.json").write_text(
        '{"base_model_name_or_path": "Qwen/Qwen3-VL-4B-Instruct"}'
    )
    (tmp_path / "run" / "merged" / "config.json").write_text("{}")
    seen = []
    monkeypatch.setattr(launch, "vllm_serve_main", lambda argv: seen.append(list(argv)) or 0)
    run = str(tmp_path / "run")
    assert main(["vllm-serve", "--model", run, "--", "r1vision", "grpo", "--model", run]) == 0
    assert seen == [["--model", str(tmp_path / "run" / "merged"), "--", "r1vision", "grpo", "--model", run]]
