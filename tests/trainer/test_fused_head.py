"""TRL's fused LM head projects only the labelled positions on a CPU inside VisionGRPOTrainer's log-prob
pass (r1vision.trainer.fused_head), with the same log-probs, entropies and gradients as its every-position
path there."""

from __future__ import annotations

import contextlib

import pytest
import torch

from r1vision.trainer.fused_head import labelled_positions_only, projects_labelled_only
from tests.helpers.images import tiny_vlm_batch
from tests.helpers.tasks import task_rows
from tests.helpers.training import grpo_args, varied_reward


@pytest.fixture
def projected_rows(monkeypatch):
    """The row count of every projection TRL's fused head runs (its tile function's input)."""
    import trl.trainer.utils as head

    rows: list[int] = []
    apply = head._ChunkedLogProbFunction.apply

    def spy(hidden, *args):
        rows.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(head._ChunkedLogProbFunction, "apply", spy)
    return rows


def test_labelled_rows_only_with_the_same_values_and_gradients(tiny_model, projected_rows):
    from trl.trainer.utils import add_fused_lm_head

    model, batch = tiny_vlm_batch(tiny_model("qwen2_vl"))
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    labels[:, :-4] = -100  # GRPO labels the completion alone (here the last 4 positions)
    labels[0, -1] = -100  # a completion cut short: its last position is padding
    b, t = labels.shape
    mask = labels[:, 1:] != -100

    def run(compact: bool):
        model.zero_grad()
        projected_rows.clear()
        with labelled_positions_only() if compact else contextlib.nullcontext():
            out = model(**batch, labels=labels, fused_lm_head=True)
        (out.log_probs[mask].sum() + out.entropy[mask].sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return out.log_probs[mask].detach(), out.entropy[mask].detach(), grads, list(projected_rows)

    every = run(False)
    labelled = run(True)
    assert every[3] == [b * (t - 1)]  # outside: every position but the last, prompt and image tokens too
    assert labelled[3] == [int(mask.sum())] == [3 * 3 + 2]
    torch.testing.assert_close(labelled[0], every[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(labelled[1], every[1], rtol=0, atol=1e-6)
    assert labelled[2].keys() == every[2].keys() and every[2]
    for name in every[2]:
        # float rounding only: the same sums over fewer rows (relative to the tensor's largest entry)
        scale = every[2][name].abs().max()
        assert (labelled[2][name] - every[2][name]).abs().max() <= 1e-6 * scale, name


def test_the_swap_is_undone_even_after_an_error():
    import trl.trainer.utils as head

    original = head._use_triton
    cpu = torch.device("cpu")
    assert not projects_labelled_only(cpu)
    with pytest.raises(RuntimeError), labelled_positions_only():
        assert projects_labelled_only(cpu)
        raise RuntimeError
    assert head._use_triton is original and not projects_labelled_only(cpu)
    # a device that is neither a CPU nor a Triton one keeps TRL's every-position path
    with labelled_positions_only():
        assert not projects_labelled_only(torch.device("meta"))


def test_grpo_projects_only_the_completion_positions_on_a_cpu(
    tiny_model, color_dir, tmp_path, projected_rows
):
    from r1vision.trainer.grpo import VisionGRPOTrainer

    rows = task_rows("color", color_dir).remove_columns(["completion"])
    trainer = VisionGRPOTrainer(
        tiny_model("qwen2_vl"), [varied_reward], train_dataset=rows,
        args=grpo_args(tmp_path / "grpo", max_steps=1, beta=0.04),  # a reference pass too
    )  # fmt: skip
    masks = []
    generate = trainer._generate_and_score_completions

    def spy(inputs):
        out = generate(inputs)
        masks.append(out["completion_mask"])
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    labelled = int(masks[0].sum())
    # the reference pass and the policy's training pass, each over the completion tokens alone
    assert sum(projected_rows) == 2 * labelled and len(projected_rows) >= 2
