"""SVG end to end with a tiny model: synth → SFT → GRPO (sandboxed render rewards) → infer → eval + contact sheet."""

import json

import pytest

from r1vision.cli import main
from tests.helpers.cli import infer_args, quick_train_args, scoring_args, synth_splits


@pytest.mark.slow
def test_svg_pipeline(tmp_path, tiny_model):
    data = tmp_path / "data"
    synth_splits("svg", data, {"train": 4, "test": 2})
    common = quick_train_args(data, "svg", batch=2, max_pixels=3136)
    base = tiny_model("qwen3_vl")
    assert (
        main(["sft", "--model", base, "--output_dir", str(tmp_path / "sft"), "--max_length", "512", *common])
        == 0
    )
    assert (
        main(
            [
                "grpo",
                "--model",
                str(tmp_path / "sft"),
                "--output_dir",
                str(tmp_path / "grpo"),
                "--num_generations",
                "2",
                "--max_completion_length",
                "16",
                *common,
            ]
        )
        == 0
    )
    header = (tmp_path / "grpo" / "metrics.csv").read_text().splitlines()[0]
    assert "rewards/svg_ssim/mean" in header and "rewards/svg_valid/mean" in header

    pred = tmp_path / "pred"
    assert main(infer_args("svg", tmp_path / "grpo", data, pred, max_new_tokens=16, max_pixels=3136)) == 0
    sheet = tmp_path / "sheet.png"
    out = tmp_path / "m.json"
    assert (
        main(
            [
                *scoring_args("eval", "svg", data, pred),
                "--json-out",
                str(out),
                "--contact-sheet",
                str(sheet),
            ]
        )
        == 0
    )
    metrics = json.loads(out.read_text())
    assert 0.0 <= metrics["render_rate"] <= 1.0 and {"ssim_standard", "ssim_reward"} <= set(metrics)
    assert sheet.stat().st_size > 1000
