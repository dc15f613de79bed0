"""Batched, resumable generation over a dataset (one JSON record per row, written as it is done)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "inference and evaluation"


def build_parser() -> argparse.ArgumentParser:
    p = parser("infer", __doc__)
    add(p, "--task", default=None, help="task name (default: the one in the model's r1vision_run.json)")
    add(
        p,
        "--model",
        required=True,
        help="Hub id or local folder (an r1vision output: its run settings apply)",
    )
    add(p, "--dataset", required=True, help="Hub id, local folder or file")
    add(p, "--split", default="test")
    add(p, "--output_dir", required=True, help="output folder (shard-*.jsonl); rerun to resume")
    add(p, "--batch_size", minimum=1, type=int, default=8)
    add(
        p,
        "--max_new_tokens",
        minimum=1,
        type=int,
        default=None,
        help="default: the task's (sgg 2048, svg 4096, ...)",
    )
    add(p, "--temperature", type=float, default=0.0, help="0: greedy (default); > 0 samples")
    add(p, "--top_p", type=float, default=1.0, help="nucleus sampling (1.0: off)")
    add(p, "--top_k", type=int, default=0, help="top-k sampling (0: off)")
    add(p, "--min_p", type=float, default=0.0, help="min-p sampling (0: off)")
    add(p, "--repetition_penalty", type=float, default=1.0, help="1.0: off")
    add(p, "--num_samples", minimum=1, type=int, default=1, help="samples per row (pass@k)")
    add(p, "--seed", type=int, default=0)
    add(p, "--min_pixels", type=int, default=None)
    add(p, "--max_pixels", type=int, default=None)
    # the video budget (see `r1vision grpo --help`); unset: the training run's, else the defaults
    add(p, "--video_fps", type=float, default=None, help="frames sampled per second of video (2.0)")
    add(p, "--video_min_frames", minimum=1, type=int, default=None, help="fewest frames per video (4)")
    add(p, "--video_max_frames", minimum=1, type=int, default=None, help="most frames per video (16)")
    add(p, "--video_max_frame_pixels", minimum=1, type=int, default=None, help="largest frame area")
    add(p, "--video_total_pixels", minimum=1, type=int, default=None, help="area a video's frames share")
    add(p, "--limit", minimum=1, type=int, default=None, help="the first N rows only")
    add(p, "--image_root", default=None, help="folder relative image paths resolve against")
    add(p, "--task_options", default=None, help="JSON object of the task's options (merged into the run's)")
    add(
        p,
        "--backend",
        choices=["hf", "vllm"],
        default="hf",
        help="generation backend; 'vllm' needs vLLM (on CPU: scripts/install_vllm_cpu.sh)",
    )
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from r1vision.commands._precheck import check_model_folder, check_paths

    check_paths(a, model="model folder", dataset="dataset file or folder")
    check_model_folder(a.model)
    from r1vision.commands._args import UsageError
    from r1vision.generation.sampling import SamplingOptions

    # Every decoding value is the command's (documented defaults), never the checkpoint's generation_config.
    try:
        options = SamplingOptions(
            a.max_new_tokens or 1,
            a.temperature,
            a.top_p,
            a.num_samples,
            a.seed,
            a.top_k,
            a.min_p,
            a.repetition_penalty,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from r1vision.runners.infer import InferenceStopped, inference_settings, run_inference
    from r1vision.tasks import get_task
    from r1vision.tasks.options import options_mapping
    from r1vision.trainer.run_info import VIDEO_KEYS

    given = options_mapping(a.task_options) if a.task_options else None
    try:
        video = {k: getattr(a, k) for k in VIDEO_KEYS}
        settings = inference_settings(
            a.model, a.task, a.max_new_tokens, given, a.min_pixels, a.max_pixels, video=video
        )
    except ValueError as exc:  # no task named anywhere
        raise UsageError(str(exc)) from None
    print(
        f"infer settings ({', '.join(f'{k} from {v}' for k, v in settings['sources'].items())}): "
        f"task {settings['task']}, max_new_tokens {settings['max_new_tokens']}, task_options "
        f"{settings['task_options']}",
        file=sys.stderr,
    )
    task = get_task(settings["task"])
    opts = task.parse_options(settings["task_options"])
    options = dataclasses.replace(options, max_new_tokens=settings["max_new_tokens"])
    try:
        out = run_inference(
            task,
            opts,
            a.model,
            a.dataset,
            a.output_dir,
            split=a.split,
            batch_size=a.batch_size,
            options=options,
            min_pixels=settings["min_pixels"],
            max_pixels=settings["max_pixels"],
            limit=a.limit,
            image_root=a.image_root,
            backend=a.backend,
            video=settings["video"],
        )
    except InferenceStopped as exc:  # a preemption: exit as the trainers do, so sbatch --requeue reruns it
        from r1vision.trainer.preemption import EXIT_PREEMPTED

        print(f"r1vision infer: {exc}", file=sys.stderr)
        return EXIT_PREEMPTED
    print(f"predictions in {out}")
    return 0
