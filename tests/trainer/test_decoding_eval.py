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


def test_each_process_generates_its_share_and_all_rows_are_scored(tiny_model, tmp_path, monkeypatch):
    """Under several processes (ZeRO-3 included) each rank generates rows rank, rank+world, ... from the
    gathered model and the completions come back in row order; before, every rank generated every row."""
    import contextlib
    from types import SimpleNamespace

    import accelerate.utils
    import trl.models.utils

    from r1vision.trainer import decoding_eval

    task = get_task("geometry")
    task.synth(tmp_path / "data", 4, seed=0)
    test = list(task_rows("geometry", tmp_path / "data"))
    generated: list[str] = []

    def fake_generate(model, processor, batch, budget, options, image_root):
        generated.extend(str(r["id"]) for r in batch)
        return [
            [f"\\boxed{{{r['answer']}}}"] for r in batch
        ]  # right answers: accuracy 1 iff all rows come back

    unwrapped = []
    monkeypatch.setattr(decoding_eval, "generate", fake_generate)
    monkeypatch.setattr(trl.models.utils, "unwrap_model_for_generation",
                        lambda model, acc, gather_deepspeed3_params: unwrapped.append(gather_deepspeed3_params)
                        or contextlib.nullcontext(model))  # fmt: skip
    other_rank = [(i, [f"\\boxed{{{test[i]['answer']}}}"]) for i in range(0, len(test), 2)]
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda pairs: other_rank + pairs)
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(process_index=1, num_processes=2), model_wrapped=torch_module(),
        processing_class=None, pixel_budget=None, args=SimpleNamespace(image_root=None),
    )  # fmt: skip
    callback = DecodingEvalCallback(trainer, task, {"test": test}, every_steps=1,
                                    decodings={"greedy": {"k": 1, "temperature": 0.0}}, opts=task.parse_options())  # fmt: skip
    logs = callback.evaluate_now(1)
    assert generated == [str(test[i]["id"]) for i in range(1, len(test), 2)]  # rank 1's share only
    assert unwrapped == [True] and logs["eval_test/greedy/accuracy"] == 1.0


def torch_module():
    import torch

    return torch.nn.Linear(1, 1)
