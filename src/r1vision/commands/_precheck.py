"""Checks of a command line that need no heavy import: run before torch, TRL or any model loads.

A typo in a flag, a recipe that does not exist, an unknown task, a local path that is not there, an
out-of-range number, a Hub id that does not exist or cannot be looked up: each is one line and exit code 2
in well under a second (one Hub request at most), where TRL's parser would answer after importing
transformers (5-25 s) and a missing local folder after the Hub client's retries (74 s measured). The
valid ``sft``/``grpo`` flags are the fields of the config dataclasses, shipped as ``train_flags.json``
(``tests/commands/test_precheck.py`` fails when it differs from the dataclasses; ``python -m
r1vision.commands._precheck`` rewrites it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from r1vision import hub
from r1vision.commands._args import UsageError
from r1vision.configs import flag_values, read_recipe, required_fields
from r1vision.runners.t2i import T2IScriptArguments
from r1vision.suggest import closest

FLAGS_FILE = Path(__file__).with_name("train_flags.json")
# Flags the commands handle themselves, outside the dataclasses.
_OWN = {"config", "dry_run", "num_processes", "accelerate_config", "help", "gpus", "card_gb", "zero", "fsdp2"}
# Numbers that must be positive (> 0) or non-negative (>= 0); checked when given on the command line.
_POSITIVE = {
    "num_generations", "per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length",
    "min_pixels", "max_pixels", "num_train_epochs", "learning_rate", "max_images_per_prompt", "top_p",
    "max_videos_per_prompt",
}  # fmt: skip
_NON_NEGATIVE = {
    "temperature",
    "beta",
    "lora_r",
    "max_steps",
    "warmup_ratio",
    "weight_decay",
    "top_k",
    "min_p",
}
_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".arrow", ".yaml", ".yml", ".txt")


def train_flags(kind: str) -> set[str]:
    """The field names ``r1vision sft|grpo`` accept (``kind`` is ``"sft"`` or ``"grpo"``)."""
    return set(json.loads(FLAGS_FILE.read_text())[kind])


def suggest(name: str, valid: Sequence[str] | set[str]) -> str:
    """``"; did you mean '--x'?"`` for the closest valid name, else ``""``."""
    close = closest(name, valid, cutoff=0.75)
    return f"; did you mean '--{close}'?" if close else ""


def looks_local(value: str) -> bool:
    """Whether ``value`` names a local path rather than a Hub id (``org/name``): it starts with ``.``, ``/``
    or ``~``, has more than one ``/``, ends with a data-file suffix, or its first component is a folder here."""
    if not value or "://" in value:
        return False
    if value.startswith((".", "/", "~")) or "\\" in value or value.count("/") > 1:
        return True
    if value.endswith(_SUFFIXES):
        return True
    head = value.split("/", 1)[0]
    return "/" in value and Path(head).is_dir()


def check_path(flag: str, value: str | None, what: str) -> None:
    """Refuse a local-looking ``value`` that does not exist (a Hub id is left to the Hub)."""
    if value and looks_local(value) and not Path(value).expanduser().exists():
        parent = Path(value).expanduser().parent
        hint = f" ({parent} exists)" if str(parent) not in ("", ".") and parent.is_dir() else ""
        raise UsageError(f"--{flag} {value}: no such {what}{hint}; a Hub id looks like org/name")


def check_hub_id(flag: str, value: str | None, kind: str, what: str) -> None:
    """A ``value`` that is neither here nor local-looking is a Hub id: :func:`r1vision.hub.lookup` asks
    the Hub once (no retries), so a typo or a missing folder named without ``./`` costs a second, not the
    minute of retries the Hub clients spend before their traceback. Refused: no such repo (401/404) or no
    connection; a cached copy, offline mode (``HF_HUB_OFFLINE``: the library reads its cache, wherever
    the user put it) and any other answer are left to the library."""
    if not value or "://" in value or looks_local(value) or Path(value).expanduser().exists():
        return

    found = hub.lookup(value, kind)
    local = f"--{flag} {value}: no such local {what}"
    if found.status == "missing":
        access = "" if found.token else " (a private one needs HF_TOKEN or `hf auth login`)"
        raise UsageError(f"{local}, nor a {kind} on the Hub ({found.endpoint}){access}")
    if found.status == "unreachable":
        raise UsageError(
            f"{local}, and the Hub ({found.endpoint}) cannot be reached to look it up ({found.detail}); "
            "pass a local path, or set HF_HUB_OFFLINE=1 to load from the Hub cache"
        )


def check_numbers(values: dict[str, str | None]) -> None:
    """Refuse out-of-range numbers among the flags that have a known range."""
    for name, value in values.items():
        if value is None or name not in _POSITIVE | _NON_NEGATIVE:
            continue
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"--{name} {value}: expected a number") from None
        if name in _POSITIVE and not number > 0:
            raise UsageError(f"--{name} {value}: must be > 0")
        if name in _NON_NEGATIVE and number < 0:
            raise UsageError(f"--{name} {value}: must be >= 0")
    if values.get("top_p") is not None and float(values["top_p"] or 0) > 1:
        raise UsageError(f"--top_p {values['top_p']}: must be in (0, 1]")


# --report_to integration -> (module to find, what to install). tensorboard and trackio come with r1vision.
_TRACKERS = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "trackio": ("trackio", "trackio"),
    "wandb": ("wandb", "'r1vision[wandb]' (or: pip install wandb)"),
    "mlflow": ("mlflow", "mlflow"),
    "comet_ml": ("comet_ml", "comet_ml"),
    "clearml": ("clearml", "clearml"),
    "swanlab": ("swanlab", "swanlab"),
    "neptune": ("neptune", "neptune"),
    "dvclive": ("dvclive", "dvclive"),
    "aim": ("aim", "aim"),
    "codecarbon": ("codecarbon", "codecarbon"),
}


def report_to_values(argv: Sequence[str], recipe: dict[str, Any]) -> list[str]:
    """The trackers a command line asks for: every value after ``--report_to`` (or the recipe's)."""
    values: list[str] = []
    for i, arg in enumerate(argv):
        if arg.startswith("--report_to=") or arg.startswith("--report-to="):
            values += arg.split("=", 1)[1].split(",")
        elif arg in ("--report_to", "--report-to"):
            for item in argv[i + 1 :]:
                if item.startswith("--"):
                    break
                values += item.split(",")
    if not values and recipe.get("report_to") is not None:
        given = recipe["report_to"]
        values = list(given) if isinstance(given, list) else str(given).split(",")
    return [v.strip() for v in values if v.strip()]


def check_trackers(names: Sequence[str]) -> None:
    """Refuse a tracker that is not installed, naming what to install (before the model loads)."""
    import importlib.util

    for name in names:
        if name in ("none", "all") or name not in _TRACKERS:
            continue  # "all" means the installed ones; an unknown name is transformers' to refuse
        module, package = _TRACKERS[name]
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"--report_to {name}: {module} is not installed; pip install {package}")


def _recipe(values: dict[str, str | None]) -> dict[str, Any]:
    if not values.get("config"):
        return {}

    try:
        return read_recipe(str(values["config"]))
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def check_train_argv(kind: str, argv: Sequence[str]) -> None:
    """Everything about an ``sft``/``grpo`` command line that can be checked before TRL loads."""
    valid = train_flags(kind) | _OWN
    values = flag_values(argv)
    for name in values:
        bare = name[3:] if name.startswith("no_") else name
        if name not in valid and bare not in valid:
            raise UsageError(
                f"unknown flag '--{name}'{suggest(name, valid)} (r1vision {kind} --help lists them)"
            )
    if "config" in values and not values["config"]:
        raise UsageError("--config needs a recipe: a shipped name (`r1vision configs`) or a YAML path")
    recipe = _recipe(values)
    for key in recipe:
        if key not in valid:
            raise UsageError(f"--config: unknown option {key!r} in the recipe{suggest(key, valid)}")
    check_run_settings(kind, values, recipe)
    task = values.get("task") or recipe.get("task")
    if task and ":" not in str(task):
        from r1vision.tasks.registry import list_tasks

        names = list_tasks()
        if task not in names:
            close = closest(str(task), names)
            hint = f"; did you mean {close!r}?" if close else ""
            raise UsageError(f"unknown task {task!r}{hint}; tasks: {', '.join(names)}")
    for flag in ("model", "model_name_or_path"):
        check_path(flag, values.get(flag), "model folder")
    for flag in ("dataset", "dataset_name"):
        check_path(flag, values.get(flag), "dataset file or folder")
    check_numbers(values)
    check_trackers(report_to_values(argv, recipe))
    if "dry_run" not in values:  # a dry run reads built-in shapes and reports what it cannot resolve
        for flag in ("model", "model_name_or_path"):
            check_hub_id(flag, values.get(flag), "model", "model folder")
        for flag in ("dataset", "dataset_name"):
            check_hub_id(flag, values.get(flag), "dataset", "dataset file or folder")


def check_required(kind: str, argv: Sequence[str]) -> None:
    """What the runner requires (model, dataset, and a task for the VLM kinds), checked before a launch: on
    N processes the runner's own refusal came from every worker, after the launch, under the launcher's
    traceback (exit 1). A dry run needs less, so this is the launch path's check only."""
    values = flag_values(argv)
    recipe = _recipe(values)

    aliases = {"model": ("model", "model_name_or_path"), "dataset": ("dataset", "dataset_name")}
    for name, refusal in required_fields(kind).items():
        if not any(values.get(k) or recipe.get(k) for k in aliases.get(name, (name,))):
            raise UsageError(refusal)


def check_run_settings(kind: str, values: dict[str, str | None], recipe: dict[str, Any]) -> None:
    """Settings that would fail after the model loads (or silently): an output folder that is a file, a
    pixel budget upside down, flash-attn without the package, a process count below 1, a checkpoint to
    resume that is not there, a text-to-image model that is not a diffusers pipeline."""

    def value(key: str) -> Any:
        return values[key] if key in values else recipe.get(key)

    out = value("output_dir")
    if out and Path(str(out)).expanduser().is_file():
        raise UsageError(f"--output_dir {out}: a file is in the way (a run writes a folder there)")
    low, high = value("min_pixels"), value("max_pixels")
    try:
        upside_down = low is not None and high is not None and float(low) > float(high)
    except ValueError:
        upside_down = False  # a non-number: check_numbers names it
    if upside_down:
        raise UsageError(f"--min_pixels {low} is above --max_pixels {high}")
    if str(value("attn_implementation")) == "flash_attention_2":
        import importlib.util

        if importlib.util.find_spec("flash_attn") is None:
            raise UsageError(
                "--attn_implementation flash_attention_2: the flash-attn package is not installed "
                "(pip install flash-attn on a CUDA machine; sdpa is the default without it)"
            )
    nproc = value("num_processes")
    if nproc is not None:
        try:
            ok = int(str(nproc)) >= 1
        except ValueError:
            ok = False
        if not ok:
            raise UsageError(f"--num_processes {nproc}: must be an integer >= 1")
    resume = value("resume_from_checkpoint")
    if resume and str(resume).lower() not in ("last", "auto", "true", "false", "none"):
        from r1vision.checkpoints import resume_problem

        problem = resume_problem(str(Path(str(resume)).expanduser()))
        if problem:
            raise UsageError(f"--resume_from_checkpoint {resume}: {problem}")
    model = value("model") or value("model_name_or_path")
    if kind == "t2i" and model and Path(str(model)).expanduser().is_dir():
        if not (Path(str(model)).expanduser() / "model_index.json").is_file():
            raise UsageError(f"--model {model}: not a diffusers pipeline folder (no model_index.json)")


def check_model_folder(model: str | None) -> None:
    """A local ``--model`` folder must be a model (``config.json``), a LoRA run (``adapter_config.json``)
    or an r1vision output: a dataset folder named by mistake is refused before anything loads."""
    if not model or not Path(model).expanduser().is_dir():
        return
    folder = Path(model).expanduser()
    if not any(
        (folder / name).is_file() for name in ("config.json", "adapter_config.json", "r1vision_run.json")
    ):
        raise UsageError(f"--model {model}: not a model folder (no config.json or adapter_config.json)")


def check_paths(args: Any, **flags: str) -> None:
    """Before any heavy import in infer/eval/score/viz: each ``flag=what`` of the parsed ``args`` that is
    given must exist when it looks local (``model``, ``dataset``) or always (``pred``, ``completions``)."""
    always = {"pred", "completions"}
    for flag, what in flags.items():
        value = getattr(args, flag, None)
        if value and flag in always and not Path(value).expanduser().exists():
            raise UsageError(f"--{flag} {value}: no such {what}")
        check_path(flag, value, what)
        if flag in ("model", "dataset"):
            check_hub_id(flag, value, flag, what)


def write_flags_file() -> dict[str, Any]:
    """Regenerate ``train_flags.json`` from the dataclasses (imports TRL): every flag, and the help text of
    r1vision's own ones (fields TRL's configs do not have, or whose meaning r1vision changes)."""
    import dataclasses

    from transformers import TrainingArguments
    from trl import GRPOConfig, SFTConfig

    from r1vision.diffusion.config import DiffusionGRPOConfig
    from r1vision.runners.train import ScriptArguments
    from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig

    out: dict[str, Any] = {"help": {}}
    for kind, script, config, parent in (
        ("grpo", ScriptArguments, VisionGRPOConfig, GRPOConfig),
        ("sft", ScriptArguments, VisionSFTConfig, SFTConfig),
        ("t2i", T2IScriptArguments, DiffusionGRPOConfig, TrainingArguments),
    ):
        fields = [f for cls in (script, config) for f in dataclasses.fields(cls) if f.init]
        out[kind] = sorted({f.name for f in fields})
        theirs = {f.name: f for f in dataclasses.fields(parent)}
        own = [f for f in fields if f.name not in theirs or f.default != theirs[f.name].default]
        out["help"][kind] = {
            f.name: str(f.metadata.get("help", "")) for f in sorted(own, key=lambda f: f.name)
        }
    FLAGS_FILE.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")
    return out


# `r1vision sft|grpo --help`: r1vision's options by group, first; TRL's after (`--help-all` describes them).
HELP_GROUPS = {
    "task and data": ("task", "model", "dataset", "model_name_or_path", "dataset_name", "dataset_split",
                      "eval_split", "max_train_rows", "task_options", "image_root", "validate_rows", "max_length"),
    "vision": ("min_pixels", "max_pixels", "freeze_vision_tower", "max_images_per_prompt", "max_videos_per_prompt",
               "max_prompt_text_tokens"),
    "rewards and advantages": ("reward_funcs", "advantage_estimator", "scale_rewards", "keep_groups_by_std",
                               "dynamic_sampling", "dynamic_sampling_max_rounds"),
    "generation": ("generation_backend", "vllm_server_per_rank"),
    "LoRA and model loading (TRL's ModelConfig flags)": (
        "use_peft", "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_target_parameters",
        "lora_modules_to_save", "lora_task_type", "use_rslora", "use_dora", "dtype", "attn_implementation",
        "model_revision", "load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "use_bnb_nested_quant",
        "bnb_4bit_quant_storage"),
    "evaluation during training": ("decoding_eval_splits", "decoding_eval_steps", "decoding_eval_rows",
                                   "decoding_eval_decodings"),
    "outputs": ("metrics_csv", "overwrite_output_dir"),
}  # fmt: skip
_LAUNCH_HELP = {
    "config": "a YAML recipe: a path or a shipped recipe name (`r1vision configs` lists them); flags override it",
    "num_processes": "launch N processes through accelerate, as `trl` does",
    "accelerate_config": "ddp / multi_gpu, zero2, zero3, fsdp2 (shipped layouts), or an accelerate config file",
    "dry-run": "resolve and check the run (budget, memory, vLLM settings) without touching a GPU",
}


def help_text(kind: str, usage: str) -> str:
    """The grouped help of ``r1vision sft|grpo`` (no TRL import)."""
    import textwrap

    data = json.loads(FLAGS_FILE.read_text())
    own: dict[str, str] = data["help"][kind]
    lines = [f"usage: {usage}", ""]

    def block(title: str, items: list[tuple[str, str]]) -> None:
        lines.append(f"{title}:")
        for name, text in items:
            head = f"  --{name}"
            body = textwrap.fill(text, width=108, initial_indent=" " * 30, subsequent_indent=" " * 30)
            lines.append(head + body[len(head) :] if len(head) < 29 else head + "\n" + body)
        lines.append("")

    block("launching", list(_LAUNCH_HELP.items()))
    shown = set()
    for group, names in HELP_GROUPS.items():
        items = [(n, own[n]) for n in names if n in own]
        shown |= {n for n, _ in items}
        if items:
            block(group, items)
    rest = [(n, t) for n, t in own.items() if n not in shown]
    if rest:
        block("other r1vision options", rest)
    trl = [n for n in data[kind] if n not in own]
    base = {
        "grpo": "TRL's GRPOConfig / TrainingArguments",
        "sft": "TRL's SFTConfig / TrainingArguments",
        "t2i": "transformers' TrainingArguments",
    }[kind]
    command = "t2i-grpo" if kind == "t2i" else kind
    lines.append(f"{base} ({len(trl)} more; `r1vision {command} --help-all` describes each):")
    lines.append(textwrap.fill(", ".join(trl), width=110, initial_indent="  ", subsequent_indent="  "))
    return "\n".join(lines)


if __name__ == "__main__":
    written = write_flags_file()
    print(
        f"wrote {FLAGS_FILE} ({', '.join(f'{k}: {len(written[k])} flags' for k in ('grpo', 'sft', 't2i'))})"
    )
