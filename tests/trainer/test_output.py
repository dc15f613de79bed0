"""The final output folder: the same files from the CLI and the Python API, and `--push_to_hub` uploads it
complete (run settings, merged LoRA model, model card) once, at the end: checked at the upload call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r1vision.cli import main
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


@pytest.fixture
def hub(monkeypatch):
    """huggingface_hub's HfApi at the network boundary: records calls and what the folder held then."""
    import huggingface_hub

    calls: list[tuple[str, dict]] = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))
        return huggingface_hub.RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        files = sorted(str(p.relative_to(folder_path)) for p in Path(folder_path).rglob("*") if p.is_file())
        card = (Path(folder_path) / "README.md").read_text()
        calls.append(("upload_folder", {"repo_id": repo_id, "files": files, "card": card, **kwargs}))

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return calls


def test_python_api_writes_the_cli_files_and_pushes_once_at_the_end(tiny_model, color_dir, tmp_path, hub):
    from r1vision.trainer.grpo import VisionGRPOTrainer

    out = tmp_path / "api"
    rows = task_rows("color", color_dir).remove_columns(["completion"])
    args = grpo_args(out, push_to_hub=True, hub_model_id="me/api-run", lora_r=4, max_steps=1)
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=rows)
    trainer.train()
    assert hub == [], "nothing may reach the Hub before the final save"
    trainer.save_model()
    assert [name for name, _ in hub] == ["create_repo", "upload_folder"]
    upload = hub[1][1]
    assert upload["repo_id"] == "me/api-run" and "checkpoint-*" in upload["ignore_patterns"]
    for name in ("r1vision_run.json", "README.md", "metrics.csv", "adapter_config.json", "merged/config.json",
                 "merged/model.safetensors", "processor_config.json"):  # fmt: skip
        assert name in upload["files"], name
    run = json.loads((out / "r1vision_run.json").read_text())
    assert run["kind"] == "grpo" and run["reward_weights"] == {"varied_reward": 1.0} and run["lora_r"] == 4
    assert "`varied_reward` (1)" in upload["card"] and "transformers 5.23.0" in upload["card"]


def test_cli_push_uploads_settings_recipe_and_metrics_in_the_card(tiny_model, color_dir, tmp_path, hub):
    out = tmp_path / "cli"
    argv = ["grpo", "--config", "color_smoke", "--model", tiny_model("qwen2_vl"), "--dataset", str(color_dir),
            "--output_dir", str(out), "--max_steps", "1", "--use_cpu", "true", "--push_to_hub", "true",
            "--hub_model_id", "me/color-run"]  # fmt: skip
    assert main(argv) == 0
    ((name, upload),) = [c for c in hub if c[0] == "upload_folder"]
    card = upload["card"]
    assert upload["repo_id"] == "me/color-run"
    assert "| task | `color` |" in card and "color_smoke.yaml" in card
    assert "| rewards (weight) | `accuracy` (1), `format` (0.5) |" in card and "- `reward`:" in card
    assert "r1vision_run.json" in upload["files"]


def test_t2i_push_uploads_the_lora_folders_with_a_card_that_loads_them(tmp_path, hub):
    """The text-to-image trainer writes its folder through the same contract: nothing before the end, then
    one upload holding lora/, lora_ema/, the run record and a card whose diffusers snippet loads the LoRA."""
    from r1vision.diffusion.data import synth_t2i
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    synth_t2i(tmp_path / "prompts", 4, kind="brightness")
    out = tmp_path / "t2i"
    argv = ["t2i-grpo", "--config", "t2i_smoke", "--model", str(tiny_sd3_path(pixel_space=True)), "--dataset",
            str(tmp_path / "prompts"), "--output_dir", str(out), "--max_steps", "1", "--eval_strategy", "no",
            "--save_strategy", "no", "--push_to_hub", "true", "--hub_model_id", "me/t2i-run"]  # fmt: skip
    assert main(argv) == 0
    assert [name for name, _ in hub] == ["create_repo", "upload_folder"]
    upload = hub[1][1]
    for name in ("lora/pytorch_lora_weights.safetensors", "lora_ema/pytorch_lora_weights.safetensors",
                 "r1vision_run.json", "README.md", "metrics.csv"):  # fmt: skip
        assert name in upload["files"], name
    card = upload["card"]
    assert 'pipe.load_lora_weights("me/t2i-run", subfolder="lora_ema")' in card
    assert (
        "library_name: diffusers" in card and "t2i_smoke.yaml" in card and "`prompt_brightness` (1)" in card
    )
    snippet = card.split("```python\n", 1)[1].split("```", 1)[0]
    compile(snippet, "card", "exec")  # the snippet is valid Python
    run = json.loads((out / "r1vision_run.json").read_text())
    assert run["max_sequence_length"] > 0 and run["kind"] == "t2i-grpo" and run["resolution"] == 16
