"""`r1vision report`: seeds aligned by step, mean ± std and max computed by hand."""

import csv

import pytest

from r1vision.cli import main
from r1vision.report import aggregate, read_run


def _write(path, rows):
    path.mkdir(parents=True)
    with open(path / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", "epoch", "reward", "loss"])
        w.writeheader()
        w.writerows(rows)


def test_mean_std_max_over_seeds(tmp_path):
    _write(tmp_path / "s0", [{"step": 1, "epoch": 0.1, "reward": 0.0, "loss": 1}, {"step": 2, "reward": 0.5}])
    _write(
        tmp_path / "s1", [{"step": 1, "epoch": 0.1, "reward": 1.0, "loss": ""}, {"step": 2, "reward": 0.7}]
    )
    runs = [read_run(tmp_path / "s0"), read_run(tmp_path / "s1")]
    curve = aggregate(runs, "reward")
    assert curve[0][:2] == (1, 0.5) and curve[0][2] == pytest.approx(0.70710678)  # sample std of 0 and 1
    assert curve[1][1] == pytest.approx(0.6)
    assert aggregate(runs, "loss") == [(1, 1.0, 0.0, 1)]  # a blank cell is not a zero

    assert (
        main(
            [
                "report",
                str(tmp_path / "s0"),
                str(tmp_path / "s1"),
                "--metrics",
                "reward",
                "--output_dir",
                str(tmp_path / "rep"),
            ]
        )
        == 0
    )
    table = (tmp_path / "rep" / "report.md").read_text()
    assert "| reward | 0.5500 | 0.6000 | 2 | 0.6000 ± 0.1414 |" in table
    assert (tmp_path / "rep" / "reward.png").stat().st_size > 1000


def test_unknown_metric_is_named(tmp_path):
    _write(tmp_path / "s0", [{"step": 1, "reward": 0.0}])
    with pytest.raises(KeyError, match="nope"):
        main(["report", str(tmp_path / "s0"), "--metrics", "nope", "--output_dir", str(tmp_path / "rep")])
