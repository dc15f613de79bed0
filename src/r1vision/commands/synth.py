"""Write a synthetic dataset for a task, in the schema of its real dataset (offline)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "data and models"
# Prompt sets for text-to-image GRPO, by --task name: OCR signs (Flow-GRPO's format), bright/dark photos.
T2I_KINDS = {"t2i_ocr": "ocr", "t2i_brightness": "brightness"}


def build_parser() -> argparse.ArgumentParser:
    p = parser("synth", __doc__)
    add(
        p,
        "--task",
        required=True,
        help="task name (see `r1vision tasks`), or t2i_ocr / t2i_brightness prompts",
    )
    add(p, "--output_dir", required=True, help="folder to write (rows + images)")
    add(p, "--n", minimum=1, type=int, required=True, help="number of rows")
    add(p, "--seed", type=int, default=0)
    add(p, "--split", default="train")
    add(p, "--synth_options", default=None, help="JSON object of the generator's options")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    if a.task in T2I_KINDS:  # text-to-image prompt sets (r1vision t2i-grpo)
        from r1vision.diffusion.data import synth_t2i

        path = synth_t2i(a.output_dir, a.n, seed=a.seed, split=a.split, kind=T2I_KINDS[a.task])
        print(f"wrote {a.n} {a.task} prompts ({a.split}) to {path}")
        return 0
    from r1vision.tasks import get_task
    from r1vision.tasks.options import options_mapping

    options = options_mapping(a.synth_options, "--synth_options")
    path = get_task(a.task).synth(a.output_dir, a.n, seed=a.seed, split=a.split, options=options)
    print(f"wrote {a.n} {a.task} rows ({a.split}) to {path}")
    return 0
