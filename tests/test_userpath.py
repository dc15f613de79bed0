"""The path a user walks (issue 13): shipped recipes, LoRA outputs, stock folders, launchers, reruns, torchrun
inference and bad images. Each test failed before its fix; the end-to-end run is tests/test_acceptance.py."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from PIL import Image

from conftest import grpo_args, varied_reward

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "configs" / "recipes").glob("*.yaml"))


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def _cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 300):
    return subprocess.run(
        [sys.executable, "-m", "r1vision.cli", *args], cwd=cwd, env=env or _env(), capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------- 1. recipes
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_parses_without_deprecations_or_missing_reporters(recipe: Path, tmp_path):
    """Item 1: report_to names only installed integrations; no gradient_checkpointing FutureWarning."""
    from transformers.integrations import get_available_reporting_integrations
    from trl import TrlParser

    from r1vision.recipes.train import ScriptArguments
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
    """Item 7: recipes ship with the package and `--config NAME` finds them from anywhere."""
    from r1vision.recipes.config_files import resolve_config, resolve_config_argv

    os.chdir(tmp_path)
    assert resolve_config("sgg_grpo").resolve() == (ROOT / "configs/recipes/sgg_grpo.yaml").resolve()
    assert resolve_config("r1vision://recipes/svg_grpo.yaml").name == "svg_grpo.yaml"
    assert Path(resolve_config_argv(["--config", "color_smoke"])[1]).is_absolute()
    with pytest.raises(FileNotFoundError, match="shipped recipes: .*sgg_sft"):
        resolve_config("no_such_recipe")
    listing = _cli("configs", cwd=tmp_path)
    assert listing.returncode == 0 and str(ROOT / "configs/recipes/sgg_sft.yaml") in listing.stdout


def test_accelerate_yamls_name_no_relative_json():
    """Item 7: deepspeed_zero{2,3}.yaml worked only from the repository root."""
    import yaml

    for name in ("deepspeed_zero2.yaml", "deepspeed_zero3.yaml"):
        cfg = yaml.safe_load((ROOT / "configs/accelerate" / name).read_text())
        assert "deepspeed_config_file" not in cfg["deepspeed_config"], name
        assert cfg["deepspeed_config"]["zero_stage"] in (2, 3)


# ----------------------------------------------------------------------------- 2/3. LoRA and stock folders
STOCK_LOAD = r"""
import json, sys
from pathlib import Path
from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer
d = Path(sys.argv[1])
model = AutoModelForImageTextToText.from_pretrained(d)
tok, ip = AutoTokenizer.from_pretrained(d), AutoImageProcessor.from_pretrained(d)
names = [json.loads((d / f).read_text()).get("processor_class")
         for f in ("processor_config.json", "tokenizer_config.json") if (d / f).exists()]
assert "r1vision" not in sys.modules
print(json.dumps({"model": type(model).__name__, "tokenizer": type(tok).__name__, "names": names}))
"""


def stock_load(folder: str | Path) -> dict:
    """Load ``folder`` in a fresh interpreter that never imports r1vision; what it found."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", STOCK_LOAD, str(folder)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_saved_processor_names_stock_classes(tiny_model, tmp_path):
    """Item 3: tokenizer_config.json named ImageOnlyQwen2VLProcessor, which stock transformers cannot load."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model("qwen2_5_vl"))
    processor.save_pretrained(tmp_path)
    text = "".join(p.read_text() for p in tmp_path.glob("*.json"))
    assert "ImageOnly" not in text
    assert (
        json.loads((tmp_path / "tokenizer_config.json").read_text())["processor_class"]
        == "Qwen2_5_VLProcessor"
    )


def test_lora_run_leaves_merged_model_and_adapter_works_as_model(tiny_model, color_dir, tmp_path):
    """Item 2: a LoRA output was a dead end (relative base, no model config)."""
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
    assert main(["infer", "--task", "color", "--model", str(out), "--dataset", str(color_dir), "--out",
                 str(preds), "--limit", "2", "--max-new-tokens", "4"]) == 0  # fmt: skip
    assert sum(1 for _ in open(preds / "shard-00000.jsonl")) == 2
    assert main(["merge", str(out), "--output_dir", str(tmp_path / "m2")]) == 0
    assert stock_load(tmp_path / "m2")["model"] == "Qwen2VLForConditionalGeneration"


# ------------------------------------------------------------------------------------------- 7. launchers
def test_launchers_without_gpu_keep_relative_paths(tiny_model, color_dir, tmp_path):
    """Item 7: without nvidia-smi and NUM_GPUS the launchers exited 127 silently and cd'ed to the repo root."""
    path = ":".join(p for p in os.environ["PATH"].split(":") if not (Path(p) / "nvidia-smi").exists())
    env = _env(PATH=path, PYTHON=sys.executable)
    env.pop("NUM_GPUS", None)
    os.symlink(tiny_model("qwen2_vl"), tmp_path / "m")
    os.symlink(color_dir, tmp_path / "data")
    sft = ["bash", str(ROOT / "scripts/sft/local.sh"), "--model", "m", "--dataset", "data", "--task", "color"]
    sft += [
        "--output_dir",
        "out",
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "2",
        "--max_pixels",
        "3136",
    ]
    proc = subprocess.run(sft, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no GPU found" in proc.stderr and (tmp_path / "out" / "model.safetensors").exists()
    infer = ["bash", str(ROOT / "scripts/inference/local.sh"), "--task", "color", "--model", "out"]
    infer += ["--dataset", "data", "--out", "preds", "--limit", "2", "--max-new-tokens", "4"]
    proc = subprocess.run(infer, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "preds" / "metrics.json").exists()
    zero3 = subprocess.run(["bash", str(ROOT / "scripts/grpo/local_zero3.sh"), "--model", "m"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert zero3.returncode == 2 and "no GPU found" in zero3.stderr and "local_ddp.sh" in zero3.stderr
    for script in ("sft/local.sh", "inference/local.sh", "grpo/local_ddp.sh", "grpo/local_zero3.sh"):
        text = (ROOT / "scripts" / script).read_text()
        assert 'cd "$ROOT"' not in text and "\npython " not in text and " python -m" not in text, script


# ------------------------------------------------------------------------------------ 8. torchrun on CPU
def test_torchrun_inference_splits_rows(tiny_model, color_dir, tmp_path):
    """Item 8: under `torchrun --nproc 2` on CPU both processes were rank 0 and wrote every row twice."""
    torchrun = Path(sys.executable).parent / "torchrun"
    # --standalone: a free rendezvous port, so concurrent test runs do not collide on torchrun's 29500
    cmd = [
        str(torchrun),
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "r1vision.cli",
        "infer",
        "--task",
        "color",
    ]
    cmd += ["--model", tiny_model("qwen2_vl"), "--dataset", str(color_dir), "--split", "test"]
    cmd += ["--out", str(tmp_path / "p"), "--max-new-tokens", "2"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shards = sorted((tmp_path / "p").glob("shard-*.jsonl"))
    indices = [json.loads(line)["index"] for s in shards for line in s.read_text().splitlines()]
    assert len(shards) == 2 and sorted(indices) == list(range(8))


# ------------------------------------------------------------------------------------------- 9. reruns
def test_training_into_a_used_output_dir_refuses(tiny_model, color_dir, tmp_path):
    """Item 9: a rerun silently replaced the weights and cut metrics.csv."""
    from r1vision.tasks import get_task
    from r1vision.trainer.checkpoint import OutputDirInUseError
    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = get_task("color").load(str(color_dir), split="train")
    out = tmp_path / "run"
    out.mkdir()
    metrics = "step,epoch,loss\n" + "".join(f"{i},0.1,0.5\n" for i in range(1, 11))
    (out / "metrics.csv").write_text(metrics)
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), varied_reward, args=grpo_args(out), train_dataset=rows
    )
    with pytest.raises(OutputDirInUseError, match="metrics.csv with 10 row.*--overwrite_output_dir"):
        trainer.train()
    assert (out / "metrics.csv").read_text() == metrics
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), varied_reward, args=grpo_args(out, overwrite_output_dir=True, max_steps=1),
        train_dataset=rows,
    )  # fmt: skip
    trainer.train()
    assert len((out / "metrics.csv").read_text().splitlines()) == 2  # header + the new run's one step
    assert grpo_args(tmp_path / "x", resume_from_checkpoint="last").resume_from_checkpoint is True


def test_cli_rerun_refusal_is_a_message_not_a_traceback(tiny_model, color_dir, tmp_path, capsys):
    """Item 9 from the command line: exit 2 and the message, like every other bad-input error."""
    from r1vision.cli import main

    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.csv").write_text("step,epoch,loss\n1,0.1,0.5\n")
    argv = ["grpo", "--config", "color_smoke", "--model", tiny_model("qwen2_vl"), "--dataset", str(color_dir),
            "--output_dir", str(out), "--max_steps", "1", "--use_cpu", "true"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--overwrite_output_dir" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------- 10. bad images
def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def _row(image) -> dict:
    prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "colour?"}]}]
    return {"prompt": prompt, "images": [image], "id": "r7"}


def test_extreme_aspect_ratio_is_named_before_training():
    from r1vision.trainer.validation import DatasetValidationError, validate_row

    with pytest.raises(DatasetValidationError, match=r"row 3 id='r7': images\[0\].*2010x10.*aspect ratio"):
        validate_row(_row(_png(Image.new("RGB", (2010, 10)))), 3)


def test_sft_length_checked_against_image_tokens(tiny_model):
    from transformers import AutoProcessor

    from r1vision.trainer.config import VisionSFTConfig
    from r1vision.trainer.validation import DatasetValidationError, check_sequence_lengths
    from r1vision.vision.budget import PixelBudget

    assert VisionSFTConfig(output_dir="x", use_cpu=True).max_length is None  # TRL's 1024: too short
    processor = AutoProcessor.from_pretrained(tiny_model("qwen2_vl"))
    row = _row(_png(Image.new("RGB", (1024, 1024), "red")))
    row["completion"] = [{"role": "assistant", "content": [{"type": "text", "text": "red"}]}]
    budget = PixelBudget.for_family("qwen2_vl")  # the default budget: 35 x 35 = 1,225 tokens for this photo
    assert check_sequence_lengths([row], processor, budget, None) > 1225
    with pytest.raises(
        DatasetValidationError, match=r"row 0 id='r7': its prompt needs \d+ tokens \(1225 image tokens"
    ):
        check_sequence_lengths([row], processor, budget, 1024)


def test_sgg_loader_names_row_of_unreadable_image(tmp_path):
    from r1vision.tasks import get_task

    Image.new("RGB", (64, 48), "white").save(tmp_path / "ok.png")
    (tmp_path / "bad.png").write_bytes(b"not an image at all")
    objects = json.dumps([{"id": "circle.1", "bbox": [1, 1, 10, 10]}])
    with open(tmp_path / "train.jsonl", "w") as f:
        for i, name in enumerate(["ok.png", "bad.png"]):
            f.write(
                json.dumps({"image_id": f"img{i}", "image": name, "objects": objects, "relationships": "[]"})
            )
            f.write("\n")
    with pytest.raises(Exception, match=r"row 1 \(image_id='img1'\): field 'image': cannot read"):
        get_task("sgg").load(str(tmp_path), split="train", model_family="qwen2_vl", with_completion=True)


def test_truncated_image_named_by_validator():
    from r1vision.trainer.validation import DatasetValidationError, validate_row

    data = _png(Image.effect_noise((64, 64), 50).convert("RGB"))
    with pytest.raises(DatasetValidationError, match=r"row 0 id='r7': images\[0\]"):
        validate_row(_row(data[: len(data) // 2]), 0)


def test_rgba_on_white_and_16bit_scaled():
    import numpy as np

    from r1vision.vision.images import load_image

    transparent = load_image(_png(Image.new("RGBA", (4, 4), (0, 0, 0, 0))))
    assert transparent.getpixel((0, 0)) == (255, 255, 255)  # PIL's convert("RGB") gives black
    half = load_image(_png(Image.new("RGBA", (4, 4), (0, 0, 0, 128))))
    assert 120 <= half.getpixel((0, 0))[0] <= 135
    grey16 = load_image(_png(Image.fromarray(np.full((4, 4), 32768, dtype=np.uint16))))
    assert grey16.mode == "RGB" and abs(grey16.getpixel((0, 0))[0] - 128) <= 1  # PIL clips to 255


def test_empty_dataset_is_a_clear_error():
    import datasets

    from r1vision.trainer.validation import DatasetValidationError, validate_dataset

    empty = datasets.Dataset.from_dict({"prompt": [], "images": []})
    with pytest.raises(DatasetValidationError, match="no rows"):
        validate_dataset(empty)


# ---------------------------------------------------------------------------------- 4. infer settings
def test_infer_defaults_come_from_the_task_and_the_run(tmp_path):
    """Item 4: infer used 256 new tokens and the open prompt for every model and task."""
    from r1vision.recipes.infer import inference_settings
    from r1vision.trainer.run_info import write_run_info

    plain = inference_settings(str(tmp_path), "sgg")
    assert plain["max_new_tokens"] >= 1400 and plain["task_options"] == {}  # a 20+30 graph: ~1,323 tokens
    assert inference_settings(str(tmp_path), "svg")["max_new_tokens"] >= 2048
    with pytest.raises(ValueError, match="pass --task"):
        inference_settings(str(tmp_path))
    run = {"task": "sgg", "task_options": {"prompt": "closed", "think": True}, "max_completion_length": 777,
           "min_pixels": 3136, "max_pixels": 200704}  # fmt: skip
    write_run_info(tmp_path, run)
    got = inference_settings(str(tmp_path))
    assert (got["task"], got["task_options"], got["max_new_tokens"]) == ("sgg", run["task_options"], 777)
    assert (got["min_pixels"], got["max_pixels"]) == (3136, 200704)
    mine = inference_settings(str(tmp_path), "sgg", 99, {"prompt": "open"}, max_pixels=50176)
    assert (mine["max_new_tokens"], mine["task_options"], mine["max_pixels"]) == (
        99,
        {"prompt": "open"},
        50176,
    )
    other = inference_settings(str(tmp_path), "geometry")  # another task: the run's options do not apply
    assert other["task_options"] == {} and other["max_new_tokens"] == 2048 and other["max_pixels"] is None


def test_infer_cli_uses_the_runs_prompt(tiny_model, tmp_path, monkeypatch):
    """Item 4: `infer --model <r1vision output>` builds the prompt variant the model was trained with."""
    import r1vision.recipes.infer as infer
    from r1vision.cli import main

    seen = []
    real_generate = infer.generate

    def spy(model, processor, rows, budget, options, **kw):
        seen.append((json.dumps([r["prompt"] for r in rows]), options.max_new_tokens))
        return real_generate(model, processor, rows, budget, options, **kw)

    monkeypatch.setattr(infer, "generate", spy)
    from r1vision.tasks import get_task
    from r1vision.trainer.run_info import write_run_info

    data = tmp_path / "sgg"
    get_task("sgg").synth(data, 2, seed=0, split="test", preset="demo")
    model = tmp_path / "model"
    os.symlink(tiny_model("qwen2_vl"), model)
    write_run_info(
        tmp_path / "run", {"task": "sgg", "task_options": {"prompt": "closed"}, "max_completion_length": 3}
    )
    for name in os.listdir(model):  # an r1vision output: the model files plus r1vision_run.json
        os.symlink(model / name, tmp_path / "run" / name)
    out = tmp_path / "p"
    assert (
        main(["infer", "--model", str(tmp_path / "run"), "--dataset", str(data), "--output_dir", str(out)])
        == 0
    )
    records = [json.loads(line) for line in (out / "shard-00000.jsonl").read_text().splitlines()]
    assert len(records) == 2
    assert seen and all(tokens == 3 for _, tokens in seen)  # the run's max_completion_length
    assert all("Object categories" in prompt for prompt, _ in seen)  # the closed prompt lists the vocabulary


def test_vllm_serve_takes_an_adapter_folder(tmp_path, monkeypatch):
    """Item 2: `vllm-serve --model <LoRA output>` serves the run's merged model; the training command keeps its own."""
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


def test_grpo_with_fewer_rows_than_a_generation_round_is_refused():
    """A dataset smaller than one generation round made TRL train 0 steps and exit 0 (found by the
    acceptance run of the MAYE geometry recipe: 128 prompts per round)."""
    from r1vision.trainer.validation import DatasetValidationError, check_generation_batch

    args = grpo_args("unused", per_device_train_batch_size=2, num_generations=1, steps_per_generation=64,
                     advantage_estimator="reinforce_pp")  # fmt: skip
    with pytest.raises(DatasetValidationError, match="has 1 row.*128 distinct prompts.*0 steps"):
        check_generation_batch(1, args)
    check_generation_batch(128, args)
