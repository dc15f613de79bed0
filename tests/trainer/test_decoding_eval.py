"""MAYE's evaluation at three decodings during training lands in metrics.csv at the right steps."""

import csv

from r1vision.tasks import get_task
from r1vision.tasks.geometry.metrics import DECODINGS as MAYE_DECODINGS
from r1vision.trainer.decoding_eval import DecodingEvalCallback
from r1vision.trainer.grpo import VisionGRPOTrainer
from tests.helpers.cli import synth_splits
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


def test_decodings_logged_every_n_steps(tiny_model, tmp_path):
    task = get_task("geometry")
    task.synth(tmp_path / "data", 4, seed=0)
    task.synth(tmp_path / "data", 2, seed=1, split="test")
    train = task_rows("geometry", tmp_path / "data").remove_columns(["completion"])
    test = task_rows("geometry", tmp_path / "data", "test")
    args = grpo_args(tmp_path / "out", max_steps=2, max_completion_length=6)
    trainer = VisionGRPOTrainer(tiny_model("qwen2_vl"), [varied_reward], args=args, train_dataset=train)
    decodings = dict(MAYE_DECODINGS)
    decodings["pass@8_t1.0"] = {"k": 2, "temperature": 1.0, "top_p": 1.0}  # k=2 keeps the test fast
    trainer.add_callback(DecodingEvalCallback(trainer, task, {"test": list(test)}, every_steps=1,
                                              decodings=decodings, opts=task.parse_options(),
                                              max_new_tokens=4))  # fmt: skip
    trainer.train()
    with open(tmp_path / "out" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["step"] for r in rows] == ["1", "2"]
    for name in decodings:
        key = f"eval_test/{name}/accuracy"
        assert all(r.get(key) not in (None, "") for r in rows), key
        assert all(0.0 <= float(r[key]) <= 1.0 for r in rows)
    # the evaluation at a logging step leaves the step's own log in place (it was dropped)
    for key in ("loss", "learning_rate", "grad_norm", "reward"):
        assert all(r.get(key) not in (None, "") for r in rows), key


def test_cli_wires_decoding_eval(tiny_model, tmp_path):
    from r1vision.cli import main

    data = tmp_path / "data"
    synth_splits("geometry", data, {"train": 4, "test": 2})
    assert main(["grpo", "--model", tiny_model("qwen2_vl"), "--dataset", str(data), "--task", "geometry",
                 "--output_dir", str(tmp_path / "out"), "--per_device_train_batch_size", "4", "--num_generations",
                 "4", "--max_completion_length", "4", "--max_steps", "1", "--logging_steps", "1", "--report_to",
                 "none", "--save_strategy", "no", "--use_cpu", "true", "--max_pixels", "3136",
                 "--decoding_eval_splits", "test", "--decoding_eval_steps", "1",
                 "--decoding_eval_decodings", '{"greedy": {"k": 1, "temperature": 0.0}}']) == 0  # fmt: skip
    header = (tmp_path / "out" / "metrics.csv").read_text().splitlines()[0]
    assert "eval_test/greedy/accuracy" in header
