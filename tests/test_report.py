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


def test_unknown_metric_is_named(tmp_path, capsys):
    """An unknown --metrics name is a one-line usage error (exit 2) that lists the available metrics."""
    _write(tmp_path / "s0", [{"step": 1, "reward": 0.0}])
    assert (
        main(["report", str(tmp_path / "s0"), "--metrics", "nope", "--output_dir", str(tmp_path / "rep")])
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nope'" in err[0] and "available: ['reward']" in err[0], err


@pytest.mark.slow
def test_default_report_draws_every_metric_group_with_an_index(tiny_model, color_dir, tmp_path):
    """A real GRPO run's metrics.csv: one figure per group, bands from the logged std, an index page."""
    from r1vision.report import _band, metric_groups

    run = tmp_path / "run"
    argv = ["grpo", "--config", "color_smoke", "--model", tiny_model("qwen2_vl"), "--dataset", str(color_dir),
            "--output_dir", str(run), "--max_steps", "3", "--logging_steps", "1", "--use_cpu", "true"]  # fmt: skip
    assert main(argv) == 0
    available = sorted(read_run(run))
    groups = metric_groups(available)
    assert groups["rewards"] == ["reward", "rewards/color_accuracy/mean", "rewards/color_format/mean"]
    for title in ("completion length", "entropy", "share of zero-std groups", "step time (s)", "loss"):
        assert title in groups, (title, sorted(groups))
    assert not any(m.endswith("/std") for ms in groups.values() for m in ms)  # std columns are bands
    runs = [read_run(run)]
    curve = aggregate(runs, "reward")
    band = _band(runs, "reward", [c[0] for c in curve], [c[1] for c in curve], [0.0] * len(curve))
    assert band is not None and band[2] == "± std within the step"
    assert main(["report", str(run), "--output_dir", str(tmp_path / "rep")]) == 0
    index = (tmp_path / "rep" / "index.html").read_text()
    pngs = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert len(pngs) == len(groups) and all(f"src='{p}'" in index for p in pngs)
    assert "&quot;task&quot;: &quot;color&quot;" in index  # the run's settings are on the page
