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


# One name per thing in every command; the other spellings are accepted as aliases (both `--max-pixels`
# and `--max_pixels` everywhere, TRL's `--model_name_or_path` / `--dataset_name`, older `--out` / `--gt`).
ALIASES: dict[str, tuple[str, ...]] = {
    "--model": ("--model_name_or_path",),
    "--dataset": ("--dataset_name", "--gt"),
    "--output_dir": ("--out",),
    "--task_options": ("--options",),
    "--reward_funcs": ("--rewards",),
}
# sft/grpo name the training split after TRL (`--dataset_split`); `--split` is accepted there too.
TRAIN_ALIASES = {
    "--split": "--dataset_split",
    "--out": "--output_dir",
    "--gt": "--dataset",
    "--options": "--task_options",
}


def _spellings(name: str) -> list[str]:
    """``--max-pixels`` -> [``--max-pixels``, ``--max_pixels``] (both spellings, this one first)."""
    snake, kebab = name.replace("-", "_"), "--" + name[2:].replace("_", "-")
    return list(dict.fromkeys([name, "--" + snake[2:], kebab]))


def _add(p: argparse.ArgumentParser, name: str, **kwargs) -> None:
    """Add option ``name`` (snake case) under both spellings and under its aliases."""
    names = [s for n in (name, *ALIASES.get(name, ())) for s in _spellings(n)]
    p.add_argument(*dict.fromkeys(names), dest=name[2:], **kwargs)


def _add_task(p: argparse.ArgumentParser, required: bool = True) -> None:
    """The task, as ``--task T`` or (for the commands that always took it so) positionally."""
    p.add_argument("task_positional", nargs="?", metavar="TASK", help="task name (or --task)")
    _add(p, "--task", default=None, help="task name (see `r1vision tasks`)")
    p.set_defaults(_task_required=required)


def _parse(p: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    a = p.parse_args(list(argv))
    if hasattr(a, "task_positional"):
        if a.task and a.task_positional and a.task != a.task_positional:
            p.error(f"two tasks given: {a.task_positional!r} and --task {a.task!r}")
        a.task = a.task or a.task_positional
        if a._task_required and not a.task:
            p.error("the task is required (TASK or --task)")
    return a


def _json_options(p: argparse.ArgumentParser, raw: str | None, what: str) -> dict:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        p.error(f"{what} must be a JSON object: {exc}")
    if not isinstance(value, dict):
        p.error(f"{what} must be a JSON object, got {raw!r}")
    return value


def _task_and_options(p: argparse.ArgumentParser, a: argparse.Namespace):
    """The task and the user's ``--task_options``, checked against its ``Options`` before any model loads."""
    from r1vision.tasks import get_task

    task = get_task(a.task)
    opts = _json_options(p, a.task_options, "--task_options")
    task.parse_options(opts)
    return task, opts


def _train_argv(argv: Sequence[str]) -> list[str]:
    """sft/grpo: map the other commands' spellings onto the TrlParser field names."""
    out = []
    for arg in argv:
        flag, eq, value = arg.partition("=")
        canonical = "--" + flag[2:].replace("-", "_") if flag.startswith("--") else flag
        flag = TRAIN_ALIASES.get(canonical, flag)
        out.append(flag + eq + value if eq else flag)
    return out


def _train(kind: str, argv: Sequence[str]) -> int:
    if "--dry-run" in argv:  # resolve and check everything, touch no GPU (r1vision.dry_run)
        from r1vision.dry_run import main as dry_run

        return dry_run(kind, argv)
    from trl import TrlParser

    from r1vision.recipes.config_files import resolve_config_argv
    from r1vision.recipes.train import ScriptArguments, run_grpo, run_sft
    from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig

    config_cls = VisionGRPOConfig if kind == "grpo" else VisionSFTConfig
    parser = TrlParser((ScriptArguments, config_cls), prog=f"r1vision {kind}")
    script, config = parser.parse_args_and_config(resolve_config_argv(_train_argv(argv)))
    from r1vision.trainer.checkpoint import OutputDirInUseError

    try:
        out = run_grpo(script, config) if kind == "grpo" else run_sft(script, config)
    except OutputDirInUseError as exc:  # a refusal, not a crash: the message says what to pass
        print(f"r1vision {kind}: error: {exc}", file=sys.stderr)
        return 2
    if config.process_index == 0:
        print(f"saved to {out}")
    from r1vision.trainer.distributed import finish_process  # a launched worker exits here (no abort)

    return finish_process(0)


def _tasks(argv: Sequence[str]) -> int:
    from r1vision.tasks import get_task, list_tasks

    p = argparse.ArgumentParser(prog="r1vision tasks", description="List the tasks, or one task's options.")
    p.add_argument(
        "--options", metavar="TASK", default=None, help="print TASK's options with types and defaults"
    )
    a = p.parse_args(argv)
    if a.options:
        from r1vision.tasks import task_class
        from r1vision.tasks.options import describe

        cls = task_class(a.options)
        print(describe(a.options, cls.Options))
        return 0
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
    _add_task(p)
    _add(p, "--output_dir", required=True, help="folder to write (rows + images)")
    _add(p, "--n", type=int, required=True, help="number of rows")
    _add(p, "--seed", type=int, default=0)
    _add(p, "--split", default="train")
    _add(p, "--synth_options", default=None, help="JSON object of generator options (alias --options)")
    p.add_argument("--options", dest="synth_options", default=None, help=argparse.SUPPRESS)
    a = _parse(p, argv)
    opts = _json_options(p, a.synth_options, "--synth_options")
    path = get_task(a.task).synth(a.output_dir, a.n, seed=a.seed, split=a.split, **opts)
    print(f"wrote {a.n} {a.task} rows ({a.split}) to {path}")
    return 0


def _make_tiny(argv: Sequence[str]) -> int:
    from r1vision.testing.tiny import FAMILIES, make_tiny_model

    p = argparse.ArgumentParser(prog="r1vision make-tiny-model")
    _add(p, "--family", choices=FAMILIES, required=True)
    _add(p, "--output_dir", required=True)
    _add(p, "--seed", type=int, default=0)
    _add(p, "--hidden", type=int, default=64)
    _add(p, "--layers", type=int, default=2)
    _add(p, "--heads", type=int, default=4)
    _add(p, "--vocab_size", type=int, default=1024)
    _add(p, "--vision_width", type=int, default=32)
    _add(p, "--vision_depth", type=int, default=2)
    _add(p, "--head_dim", type=int, default=None, help="sets heads = hidden / head_dim (vLLM-CPU needs 64)")
    _add(p, "--rope_theta", type=float, default=10000.0)
    _add(p, "--mrope_section", type=int, nargs=3, default=None, help="three ints summing to head_dim/2")
    a = p.parse_args(argv)
    heads = a.hidden // a.head_dim if a.head_dim else a.heads
    path = make_tiny_model(
        a.family,
        a.output_dir,
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
    from r1vision.recipes.infer import inference_settings, run_inference

    p = argparse.ArgumentParser(prog="r1vision infer", description="Batched, resumable generation.")
    _add_task(p, required=False)  # an r1vision output names its task in r1vision_run.json
    _add(p, "--model", required=True, help="Hub id or local folder")
    _add(p, "--dataset", required=True, help="Hub id, local folder or file")
    _add(p, "--split", default="test")
    _add(p, "--output_dir", required=True, help="output folder (shard-*.jsonl); rerun to resume")
    _add(p, "--batch_size", type=int, default=8)
    _add(p, "--max_new_tokens", type=int, default=None,
         help="default: the run's max_completion_length, else the task's (sgg 2048, svg 4096, ...)")  # fmt: skip
    _add(p, "--temperature", type=float, default=0.0)
    _add(p, "--top_p", type=float, default=1.0)
    _add(p, "--num_samples", type=int, default=1)
    _add(p, "--seed", type=int, default=0)
    _add(p, "--min_pixels", type=int, default=None)
    _add(p, "--max_pixels", type=int, default=None)
    _add(p, "--limit", type=int, default=None)
    _add(p, "--image_root", default=None)
    _add(p, "--task_options", default=None, help="JSON object of the task's options (prompt style, ...)")
    _add(p, "--backend", choices=["hf", "vllm"], default="hf",
         help="generation backend; 'vllm' needs vLLM (on CPU: scripts/install_vllm_cpu.sh)")  # fmt: skip
    a = _parse(p, argv)
    given = _json_options(p, a.task_options, "--task_options") if a.task_options else None
    settings = inference_settings(a.model, a.task, a.max_new_tokens, given, a.min_pixels, a.max_pixels)
    a.task, a.task_options = settings["task"], json.dumps(settings["task_options"])
    a.min_pixels, a.max_pixels = settings["min_pixels"], settings["max_pixels"]
    if settings["sources"]:
        print(f"infer settings from the training run / task defaults: {settings}", file=sys.stderr)
    task, task_opts = _task_and_options(p, a)
    options = SamplingOptions(settings["max_new_tokens"], a.temperature, a.top_p, a.num_samples, a.seed)
    out = run_inference(
        task,
        a.model,
        a.dataset,
        a.output_dir,
        split=a.split,
        batch_size=a.batch_size,
        options=options,
        min_pixels=a.min_pixels,
        max_pixels=a.max_pixels,
        limit=a.limit,
        image_root=a.image_root,
        backend=a.backend,
        task_options=task_opts,
    )
    print(f"predictions in {out}")
    return 0


def _eval(argv: Sequence[str]) -> int:
    from r1vision.recipes.evaluate import evaluate_files

    p = argparse.ArgumentParser(prog="r1vision eval", description="Score predictions against ground truth.")
    _add_task(p)
    _add(p, "--dataset", required=True, help="ground truth: Hub id, folder or file (alias --gt)")
    _add(p, "--pred", required=True, help="predictions: an infer output folder or a file")
    _add(p, "--split", default="test")
    _add(p, "--json_out", default=None)
    _add(p, "--records_out", default=None, help="write per-item verdicts as jsonl")
    _add(p, "--compat", default=None, help="reproduce another project's evaluator (sgg: r1sgg)")
    _add(p, "--model_family", default=None, help="box frame when records do not name it")
    _add(p, "--min_pixels", type=int, default=None)
    _add(p, "--max_pixels", type=int, default=None)
    _add(p, "--contact_sheet", default=None, help="svg: PNG of ground truth vs prediction with scores")
    _add(p, "--task_options", default=None, help="JSON object of the task's options")
    a = _parse(p, argv)
    task, opts = _task_and_options(p, a)
    for key in ("compat", "model_family", "min_pixels", "max_pixels", "contact_sheet"):
        if getattr(a, key) is not None:
            opts[key] = getattr(a, key)
    result = evaluate_files(task, a.dataset, a.pred, split=a.split, **opts)
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
    _add_task(p)
    _add(p, "--dataset", required=True, help="dataset with images (Hub id, folder or file; alias --gt)")
    _add(p, "--pred", default=None, help="r1vision infer output (folder or jsonl); omit for GT only")
    _add(p, "--split", default="val")
    _add(p, "--index", type=int, nargs="+", default=[0], help="row indices to draw")
    _add(p, "--output_dir", required=True, help="output folder for PNGs")
    _add(p, "--model_family", default=None)
    a = _parse(p, argv)
    if a.task not in ("sgg", "sgg_psg"):
        p.error(f"viz draws scene graphs (sgg, sgg_psg), not {a.task!r}")
    for path in visualize_prediction(
        a.dataset, a.pred, a.index, a.output_dir, split=a.split, model_family=a.model_family
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
    _add(p, "--output_dir", required=True, help="folder for the PNGs and report.md")
    a = p.parse_args(argv)
    print(report(a.runs, a.output_dir, a.metrics.split(",") if a.metrics else None))
    return 0


def _kebab_argv(argv: Sequence[str], renames: dict[str, str] | None = None) -> list[str]:
    """For the commands whose parsers spell flags with dashes: accept underscores too (``--max_pixels``),
    and ``renames`` (e.g. ``--output_dir`` for the demo's ``--out``). Everything after a bare ``--`` (the
    training command of ``vllm-serve``) is passed through untouched."""
    out, rest = [], list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            return [*out, arg, *rest]
        flag, eq, value = arg.partition("=")
        if flag.startswith("--"):
            flag = "--" + flag[2:].replace("_", "-")
            flag = (renames or {}).get(flag, flag)
        out.append(flag + eq + value if eq else flag)
    return out


def _estimate(argv: Sequence[str]) -> int:
    from r1vision.estimate import main as estimate_main

    return estimate_main(_kebab_argv(argv))


def _selftest(argv: Sequence[str]) -> int:
    from r1vision.selftest import main as selftest_main

    return selftest_main(_kebab_argv(argv))


def _vllm_serve(argv: Sequence[str]) -> int:
    from r1vision.generation.vllm_launch import vllm_serve_main
    from r1vision.trainer.merge import resolve_model

    argv = _kebab_argv(argv, {"--model-name-or-path": "--model"})
    cut = argv.index("--") if "--" in argv else len(argv)  # the training command after -- keeps its own
    for i in range(cut - 1):
        if argv[i] == "--model":  # a LoRA run's output_dir serves its merged stand-alone model
            argv[i + 1] = resolve_model(argv[i + 1])
    return vllm_serve_main(argv)


def _demo(argv: Sequence[str]) -> int:
    from r1vision.demo import main as demo_main

    return demo_main(_kebab_argv(argv, {"--output-dir": "--out"}))


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
    "configs": lambda argv: __import__("r1vision.recipes.config_files", fromlist=["main"]).main(argv),
    "merge": lambda argv: __import__("r1vision.trainer.merge", fromlist=["main"]).main(argv),
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
    from r1vision.tasks.loading import DatasetLoadError
    from r1vision.tasks.options import TaskOptionError
    from r1vision.tasks.registry import UnknownNameError

    try:
        return COMMANDS[command](rest) or 0
    except (
        TaskOptionError,
        DatasetLoadError,
        UnknownNameError,
    ) as exc:  # bad input: the message says what, no traceback
        print(f"r1vision {command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
