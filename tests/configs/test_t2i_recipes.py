"""Every shipped text-to-image recipe runs through `r1vision t2i-grpo` as the docs show it (tiny SD3 models
built offline; only the model, data, output folder and, for the SD3.5-M recipes, sizes are overridden), and
`r1vision t2i-eval` scores the exported LoRA with stock diffusers."""

from __future__ import annotations

import json

import pytest

from r1vision.cli import main
from tests.helpers.paths import ROOT
from tests.helpers.threads import one_thread  # noqa: F401 - autouse fixture

T2I = sorted(p.stem for p in (ROOT / "configs" / "recipes").glob("t2i_*.yaml"))
# SD3.5-M recipes at tiny scale: 64 px, groups of 2, one step, two eval images of 4 steps
SHRINK = ["--resolution", "64", "--num_generations", "2", "--per_device_train_batch_size", "2",
          "--gradient_accumulation_steps", "1", "--max_steps", "1", "--eval_num_images", "2",
          "--eval_num_inference_steps", "4", "--eval_steps", "1", "--save_steps", "1", "--max_sequence_length", "16",
          "--use_cpu", "true", "--bf16", "false", "--reward_funcs", "brightness"]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("t2i")
    for split, n, seed in (("train", 8, 0), ("test", 4, 1)):
        assert main(["synth", "--task", "t2i_brightness", "--output_dir", str(root / "prompts"), "--n", str(n),
                     "--seed", str(seed), "--split", split]) == 0  # fmt: skip
    assert main(["make-tiny-model", "--family", "sd3", "--output_dir", str(root / "vae")]) == 0
    assert (
        main(["make-tiny-model", "--family", "sd3", "--pixel_space", "--output_dir", str(root / "pixel")])
        == 0
    )
    return root


def test_every_t2i_recipe_is_here():
    assert T2I == ["t2i_ocr_sd35m", "t2i_ocr_sd35m_1gpu", "t2i_ocr_sd35m_fast", "t2i_smoke"]


@pytest.mark.parametrize("recipe", [r for r in T2I if r != "t2i_smoke"])
@pytest.mark.slow
def test_sd35m_recipes_run_at_tiny_scale(recipe, data, tmp_path):
    out = tmp_path / "run"
    argv = ["t2i-grpo", "--config", recipe, "--model", str(data / "vae"), "--dataset", str(data / "prompts"),
            "--output_dir", str(out), *SHRINK]  # fmt: skip
    assert main(argv) == 0
    assert (out / "lora" / "pytorch_lora_weights.safetensors").is_file() and (
        out / "eval_metrics.csv"
    ).is_file()
    run = json.loads((out / "r1vision_run.json").read_text())
    assert run["guidance_scale"] == 4.5 and run["lora_r"] == 32  # the recipe's own settings stayed


@pytest.mark.slow
def test_smoke_recipe_learns_and_t2i_eval_reads_its_lora(data, tmp_path):
    out = tmp_path / "smoke"
    argv = ["t2i-grpo", "--config", "t2i_smoke", "--model", str(data / "pixel"), "--dataset", str(data / "prompts"),
            "--output_dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = (out / "eval_metrics.csv").read_text().splitlines()
    header, first, last = rows[0].split(","), rows[1].split(","), rows[-1].split(",")
    reward = header.index("reward")
    assert float(last[reward]) > float(first[reward]) + 0.15, rows
    assert main(["t2i-eval", "--model", str(data / "pixel"), "--lora", str(out / "lora_ema"), "--prompts",
                 str(data / "prompts"), "--output_dir", str(tmp_path / "ev"), "--reward_funcs", "prompt_brightness",
                 "--steps", "8", "--guidance_scale", "1.0"]) == 0  # fmt: skip
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["reward"] == pytest.approx(float(last[reward]), abs=1e-6)  # stock diffusers, same images
    assert (tmp_path / "ev" / "contact_sheet.png").stat().st_size > 1000


def test_t2i_sample_draws_the_images_t2i_eval_scores(data, tmp_path, monkeypatch):
    # The two commands share their flags and sampling step: the same settings give the same pixels.
    import r1vision.trainer.distributed as distributed

    ended: list[int] = []  # a torchrun worker must leave through finish_process (no gloo abort at exit)
    monkeypatch.setattr(distributed, "finish_process", lambda code=0: ended.append(code) or code)
    common = ["--model", str(data / "pixel"), "--prompts", str(data / "prompts"), "--steps", "2",
              "--guidance_scale", "1.0", "--limit", "2", "--seed", "3"]  # fmt: skip
    assert main(["t2i-sample", *common, "--output_dir", str(tmp_path / "s")]) == 0
    assert (
        main(["t2i-eval", *common, "--output_dir", str(tmp_path / "e"), "--reward_funcs", "brightness"]) == 0
    )
    assert ended == [0, 0]
    from PIL import Image

    names = sorted(p.name for p in (tmp_path / "s" / "images").glob("*.png"))
    assert (
        names == ["0000.png", "0001.png"] == sorted(p.name for p in (tmp_path / "e" / "images").glob("*.png"))
    )
    for name in names:
        a, b = (Image.open(tmp_path / d / "images" / name).tobytes() for d in ("s", "e"))
        assert a == b, name
    settings = json.loads((tmp_path / "e" / "metrics.json").read_text())["settings"]
    assert (settings["steps"], settings["seed"], settings["processes"]) == (2, 3, 1)
    assert (tmp_path / "s" / "contact_sheet.png").is_file()


@pytest.mark.slow
def test_t2i_eval_on_two_processes_equals_one(data, tmp_path):
    # Each process samples a contiguous share and the records are gathered: the same metrics and images.
    common = ["t2i-eval", "--model", str(data / "pixel"), "--prompts", str(data / "prompts"), "--steps", "2",
              "--guidance_scale", "1.0", "--reward_funcs", "brightness", "--device", "cpu"]  # fmt: skip
    assert main([*common, "--output_dir", str(tmp_path / "one")]) == 0
    assert main([*common, "--output_dir", str(tmp_path / "two"), "--num_processes", "2"]) == 0
    one, two = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "two"))
    assert two["settings"]["processes"] == 2 and one["settings"]["processes"] == 1
    assert two["reward"] == pytest.approx(one["reward"], abs=1e-6)
    records = [json.loads(line) for line in (tmp_path / "two" / "records.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in records) == [0, 1, 2, 3]
