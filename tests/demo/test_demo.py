"""`r1vision demo --quick` runs every stage and writes every output."""

import json

import pytest

from r1vision.cli import main


@pytest.mark.slow
def test_demo_quick(tmp_path, capsys):
    """The quick demo runs every stage and writes every output; numbers are checked for range only."""
    import csv

    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--quiet", "--threads", "1", "--output_dir", str(out)]) == 0
    result = json.loads((out / "eval.json").read_text())
    assert result["seeds"] == [0] and result["headline_metric"] == "relation_recall"
    assert result["torch_threads"] == 1  # pinned by the demo, recorded with the numbers
    run = result["runs"][0]
    for split in ("test", "test_ood"):
        assert set(run["eval"][split]) == {"sft", "sft_matched", "sft+grpo"}
        for metrics in run["eval"][split].values():
            for key in ("format", "object_f1", "relation_recall", "R@50", "relation_f1", "exact"):
                assert 0.0 <= metrics[key] <= 1.0
            assert 0.0 <= metrics["reward"] <= 3.0
            assert metrics["num_images"] == 8
    assert run["steps"]["grpo"] == 2 and run["steps"]["sft_matched"] >= 1
    # The matched arm stops at the step end nearest GRPO's counted FLOPs: within one SFT step of them.
    per_sft_step = run["flops"]["sft"] / run["steps"]["sft"]
    assert abs(run["flops"]["sft_matched"] - run["flops"]["grpo"]) <= per_sft_step
    assert set(result["verdicts"]) == {"test", "test_ood"}
    table = (out / "eval_table.md").read_text()
    assert "| SFT checkpoint |" in table and "| SFT + GRPO |" in table and "compute-matched" in table
    assert "## Verdict" in table
    with (out / "metrics.csv").open() as f:
        stages = {row["stage"] for row in csv.DictReader(f)}
    assert stages == {"sft", "sft+grpo", "sft_matched"}
    assert (out / "reward_curve.png").stat().st_size > 0
    drawings = sorted(p.name for p in (out / "drawings").glob("*.png"))
    assert len(drawings) == 6  # one row per split, three arms
    assert "held-out evaluation" in capsys.readouterr().out
