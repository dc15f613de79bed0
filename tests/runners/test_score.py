"""``r1vision score``: given completions scored with the task's rewards exactly as GRPO training does."""

from __future__ import annotations

import json
import math

import datasets
import pytest

from r1vision.cli import main
from r1vision.tasks import get_task
from tests.helpers.cli import synth_splits
from tests.helpers.tasks import run_context


@pytest.fixture(scope="module")
def sgg_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("sgg_score")
    synth_splits("sgg", root, {"test": 3})
    return root


def _targets(root, family: str, **options) -> list[str]:
    """The ground truth written as answers (the SFT targets) in ``family``'s box frame."""
    task = get_task("sgg")
    raw = datasets.load_dataset("parquet", data_files=str(root / "test.parquet"), split="train")
    opts = task.parse_options(options)
    return [task.sft_target(raw[i], opts, run_context(family)) for i in range(len(raw))]


def _spam(answer: str) -> str:
    """Every relation of the answer repeated with every other predicate of the answer: the gaming case."""
    start, end = answer.index("{"), answer.rindex("}") + 1
    graph = json.loads(answer[start:end])
    predicates = sorted({r["predicate"] for r in graph["relationships"]})
    graph["relationships"] = [
        {**r, "predicate": p} for r in graph["relationships"] for p in [r["predicate"], *predicates]
    ]
    return answer[:start] + json.dumps(graph) + answer[end:]


def test_score_cli_on_perfect_spam_and_broken_answers(sgg_data, tiny_model, tmp_path, capsys):
    model = tiny_model("qwen2_vl")
    targets = _targets(sgg_data, "qwen2_vl", preset="r1sgg")
    lines = [{"index": i, "completion": t, "note": "ignored"} for i, t in enumerate(targets)]
    lines += [{"index": 0, "completion": _spam(targets[0])}, {"index": 1, "completion": "a cat on a mat"}]
    path = tmp_path / "completions.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "scores.json"
    argv = ["score", "--task", "sgg", "--model", model, "--dataset", str(sgg_data), "--split", "test",
            "--completions", str(path), "--task_options", '{"preset": "r1sgg"}', "--json_out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "edge" in printed and "(weight 5)" in printed and "total" in printed
    records = json.loads(out.read_text())
    assert [r["index"] for r in records] == [0, 1, 2, 0, 1]
    assert set(records[0]) == {"index", "format", "node", "box", "edge", "edge_hard", "total"}
    for perfect in records[:3]:  # the preset's weights 1/2/2/5 on full marks, in the model's box frame
        assert (perfect["format"], perfect["node"], perfect["box"], perfect["edge"]) == (1.0, 1.0, 1.0, 1.0)
        assert perfect["total"] == pytest.approx(10.0)
    spam, broken = records[3], records[4]
    assert spam["edge"] < 1.0 and spam["total"] < 10.0  # several predicates per pair do not earn full credit
    assert broken["total"] == 0.0


def test_scores_equal_the_trainers_reward_matrix(sgg_data, tiny_model):
    """The same completions through VisionGRPOTrainer._calculate_rewards and the weighted sum it trains on."""
    import torch

    from r1vision.runners.score import ScoreItem, score_items
    from r1vision.runners.train import reward_specs
    from r1vision.trainer.grpo import VisionGRPOTrainer
    from tests.helpers.training import grpo_args

    model = tiny_model("qwen2_vl")
    task = get_task("sgg")
    opts = task.parse_options({"preset": "r1sgg"})
    run = run_context("qwen2_vl")
    rows = task.load(str(sgg_data), "test", opts, run)
    targets = _targets(sgg_data, "qwen2_vl", preset="r1sgg")
    items = [ScoreItem(0, targets[0]), ScoreItem(0, _spam(targets[0])), ScoreItem(2, targets[0])]

    class Prepared:
        pass

    prepared = Prepared()
    prepared.task, prepared.opts, prepared.run = task, opts, run
    specs = reward_specs(prepared, None)
    weights = [s.weight for s in specs]
    ours = score_items(specs, weights, rows, items, run.pixel_budget())

    import tempfile

    budget = run.pixel_budget()
    args = grpo_args(tempfile.mkdtemp(), reward_weights=weights, min_pixels=budget.min_pixels,
                     max_pixels=budget.max_pixels)  # fmt: skip
    trainer = VisionGRPOTrainer(model, [s.func for s in specs], args=args, train_dataset=rows)
    inputs = [trainer._prepare_vision_row(dict(rows[item.index])) for item in items]
    completions = [[{"role": "assistant", "content": item.completion}] for item in items]
    matrix = trainer._calculate_rewards(
        inputs, [r["prompt"] for r in inputs], completions, [[1]] * len(items)
    )
    totals = trainer._weighted_rewards()
    for k, record in enumerate(ours):
        for j, spec in enumerate(specs):
            assert record[spec.name] == pytest.approx(float(matrix[k, j]), abs=1e-6), (k, spec.name)
        assert record["total"] == pytest.approx(float(totals[k]), abs=1e-5)
    assert not any(math.isnan(r["total"]) for r in ours) and torch.isfinite(totals).all()
    assert ours[0]["total"] == pytest.approx(10.0) and ours[1]["edge"] < 1.0  # full marks; spam diluted


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"completion": "x"}', "a line needs 'index'"),
        ('{"index": 7, "completion": "x"}', "index 7 is not a row of the split"),
        ('{"index": 0, "completion": 3}', "'completion' must be text"),
    ],
)
def test_bad_completion_lines_are_refused_by_line(sgg_data, tiny_model, tmp_path, capsys, line, message):
    path = tmp_path / "c.jsonl"
    path.write_text('{"index": 0, "completion": "x"}\n' + line + "\n")
    argv = ["score", "--task", "sgg", "--model", tiny_model("qwen2_vl"), "--dataset", str(sgg_data),
            "--split", "test", "--completions", str(path)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: {message}" in err and "Traceback" not in err
