"""`r1vision demo --task geometry|svg --quick`: each task's demo runs every arm through the task's own rewards
and evaluation and writes every output (numbers checked for range only: too short to learn)."""

from __future__ import annotations

import csv
import json

import pytest

from r1vision.cli import main


@pytest.mark.parametrize(
    ("task", "metrics", "rewards", "picture"),
    [
        ("geometry", ("accuracy", "answered", "sampled_accuracy", "pass@k"), ("accuracy", "no_eos"),
         "reward_curve.png"),
        ("svg", ("render_rate", "reward", "ssim_standard", "pixel", "edge", "colour"), ("svg_valid", "svg_pixel",
         "svg_ssim", "svg_edge", "svg_colour"), "contact_sheet.png"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_quick_task_demo_writes_every_output(tmp_path, capsys, task, metrics, rewards, picture):
    assert (
        main(["demo", "--task", task, "--quick", "--quiet", "--threads", "1", "--output_dir", str(tmp_path)])
        == 0
    )
    out = tmp_path / task
    result = json.loads((out / "eval.json").read_text())
    assert result["torch_threads"] == 1 and result["seeds"] == [0]
    run = result["runs"][0]
    for split in ("test", "test_ood"):
        assert set(run["eval"][split]) == {"sft", "sft_matched", "sft+grpo"}
        for values in run["eval"][split].values():
            for key in metrics:
                assert 0.0 <= values[key] <= 1.0, (split, key, values[key])
            assert values["num_items"] == 8
    assert run["steps"]["grpo"] == 2
    per_sft_step = run["flops"]["sft"] / run["steps"]["sft"]
    assert abs(run["flops"]["sft_matched"] - run["flops"]["grpo"]) <= per_sft_step
    assert set(result["verdicts"]) == {"test", "test_ood"}
    table = (out / "eval_table.md").read_text()
    assert "| SFT + GRPO |" in table and "## Verdict" in table and "compute-matched" in table
    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {row["stage"] for row in rows} == {"sft", "sft+grpo", "sft_matched"}
    # GRPO is paid by the task's shipped rewards, as a user's recipe would be
    grpo = [r for r in rows if r["stage"] == "sft+grpo" and r.get("reward")]
    assert grpo and all(r[f"rewards/{name}/mean"] != "" for name in rewards for r in grpo)
    assert (out / "reward_curve.png").stat().st_size > 0 and (out / picture).stat().st_size > 0
    assert f"held-out evaluation ({task})" in capsys.readouterr().out
