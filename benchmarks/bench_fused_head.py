"""GRPO's log-prob pass on a CPU: TRL's fused LM head over every position (TRL 1.16 off Triton) against
only the labelled completion positions (``r1vision.trainer.fused_head``, what Triton devices do).

The model is the real-config Qwen2.5-VL of the test suite (``tests/fixtures/realcfg``: the real 151,936-token
vocabulary and processor, tiny widths), a batch shaped like one micro-batch of the MAYE geometry recipe:
336 px diagrams (144 image tokens) with their question, 16 completion tokens labelled. Timed: the forward
with ``fused_lm_head=True`` and the backward of the completion's log-probs, the two paths alternated,
``--repeats`` times each, one torch thread; the median and the ratio to the every-position path.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_fused_head.py [--batch 2] [--repeats 7]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def batch_and_model(batch: int, completion: int):
    """The real-config Qwen2.5-VL and ``batch`` geometry-like prompts plus ``completion`` labelled tokens."""
    import torch
    from PIL import Image, ImageDraw
    from tests.helpers.realcfg import realcfg_model_path
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl.trainer.utils import add_fused_lm_head

    path = realcfg_model_path("qwen2_5_vl")
    model = AutoModelForImageTextToText.from_pretrained(path)
    proc = AutoProcessor.from_pretrained(path)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    question = "In the triangle ABC, AB = 5 and BC = 12 with a right angle at B. Find AC. " * 2
    image = Image.new("RGB", (336, 336), "white")
    ImageDraw.Draw(image).polygon([(40, 290), (290, 290), (40, 60)], outline="black", width=3)
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    text = proc.apply_chat_template(msgs, add_generation_prompt=True)
    inputs = proc(text=[text] * batch, images=[[image]] * batch, return_tensors="pt", padding=True)
    gen = torch.Generator().manual_seed(0)
    tail = torch.randint(0, 151_000, (batch, completion), generator=gen)
    for key in ("attention_mask", "mm_token_type_ids", "token_type_ids"):  # text columns: 1 / 0 on the tail
        if key in inputs:
            fill = torch.ones_like(tail) if key == "attention_mask" else torch.zeros_like(tail)
            inputs[key] = torch.cat([inputs[key], fill.to(inputs[key].dtype)], dim=1)
    inputs["input_ids"] = torch.cat([inputs["input_ids"], tail], dim=1)
    labels = inputs["input_ids"].clone()
    labels[:, :-completion] = -100
    return model, inputs, labels


def one_pass(model, inputs, labels, compact: bool) -> float:
    from r1vision.trainer.fused_head import labelled_positions_only

    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    with labelled_positions_only() if compact else contextlib.nullcontext():
        out = model(**inputs, labels=labels, fused_lm_head=True)
    mask = labels[:, 1:] != -100
    out.log_probs[mask].sum().backward()
    return time.perf_counter() - start


def main() -> None:
    import torch
    from machine_info import describe

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2, help="rows per pass (the recipe's micro-batch: 2)")
    p.add_argument("--completion", type=int, default=16)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, inputs, labels = batch_and_model(a.batch, a.completion)
    one_pass(model, inputs, labels, True)  # warm-up, both paths
    one_pass(model, inputs, labels, False)
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(a.repeats):
        for compact in (i % 2 == 0, i % 2 != 0):  # alternate which path goes first
            times[compact].append(one_pass(model, inputs, labels, compact))
    b, t = inputs["input_ids"].shape
    print(f"{describe()}; torch threads 1; batch {b} x {t} positions, {a.completion} labelled per row")
    print(f"{'path':<44} {'projected rows':>14} {'median s':>9} {'ratio':>7}")
    base = statistics.median(times[False])
    labelled = int((labels[:, 1:] != -100).sum())
    for compact, name, rows in ((False, "every position (TRL 1.16 off Triton)", b * (t - 1)),
                                (True, "labelled only (r1vision on a CPU)", labelled)):  # fmt: skip
        med = statistics.median(times[compact])
        print(f"{name:<44} {rows:>14} {med:9.3f} {med / base:7.3f}")


if __name__ == "__main__":
    main()
