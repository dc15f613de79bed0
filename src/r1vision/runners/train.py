"""The SFT and GRPO runners behind ``r1vision sft`` / ``r1vision grpo``: task data → trainer → output.

The task contract is kept here: the task's options are parsed once into its ``Options`` and the run's
facts are resolved once into a :class:`~r1vision.tasks.base.RunContext` (model family, pixel budget,
end-of-sequence ids, completion length); ``load``, ``rewards`` and the decoding evaluation receive
exactly those two values. Every reward is held to its declared range here, once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from r1vision.configs import flag_values, recipe_path, required_fields, resolve_config_argv
from r1vision.tasks import get_task, resolve_rewards
from r1vision.tasks.base import RewardSpec, RunContext, Task, guarded_rewards
from r1vision.tasks.geometry.metrics import DECODINGS as MAYE_DECODINGS
from r1vision.tasks.options import merge_options, options_mapping
from r1vision.tasks.registry import check_reward_weights
from r1vision.trainer.config import VisionGRPOConfig, VisionSFTConfig
from r1vision.trainer.decoding_eval import DecodingEvalCallback
from r1vision.trainer.distributed import check_requested_layout, record_layout, teardown
from r1vision.trainer.grpo import VisionGRPOTrainer
from r1vision.trainer.merge import resolve_model
from r1vision.trainer.preemption import finish_if_preempted, signals_held
from r1vision.trainer.run_info import run_settings
from r1vision.trainer.sft import VisionSFTTrainer
from r1vision.trainer.validation import check_generation_batch
from r1vision.versions import check_generation_stack
from r1vision.vision.budget import resolve_budget
from r1vision.vision.family import model_family_of

logger = logging.getLogger(__name__)


# TRL's spelling of a field, and r1vision's; both are fields, so a recipe may set one and the command line the other.
SPELLINGS = (("model_name_or_path", "model"), ("dataset_name", "dataset"))


@dataclass
class ScriptArguments:
    """What to train on; the rest of the options are TRL's config fields (``GRPOConfig`` / ``SFTConfig``)."""

    task: str | None = field(
        default=None, metadata={"help": "Task name (`r1vision tasks`) or module:Class. Required."}
    )
    model: str = field(default="", metadata={"help": "Hub id or local folder of a vision-language model."})
    dataset: str = field(default="", metadata={"help": "Hub id, local folder or file of the task's data."})
    model_name_or_path: str | None = field(default=None, metadata={"help": "TRL's name for --model."})
    dataset_name: str | None = field(default=None, metadata={"help": "TRL's name for --dataset."})
    dataset_split: str = field(default="train", metadata={"help": "Training split."})
    eval_split: str | None = field(default=None, metadata={"help": "Optional evaluation split."})
    max_train_rows: int | None = field(default=None, metadata={"help": "Use only the first N training rows."})
    # A JSON object on the command line, a mapping in a YAML recipe (TrlParser keeps YAML values as they are).
    task_options: str | None = field(
        default=None,
        metadata={
            "help": "JSON object of the task's options (`r1vision tasks --options T` lists them); merged "
            "into the recipe's task_options, option by option."
        },
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "GRPO rewards, as TRL's --reward_funcs: names of the task's rewards, names registered "
            "with r1vision.tasks.register_reward, or dotted paths my_module.fn (default: all of the task's)."
        },
    )
    decoding_eval_splits: str | None = field(
        default=None,
        metadata={
            "help": "GRPO: comma-separated splits evaluated during training at several decodings "
            "(MAYE's scheme), logged to metrics.csv as eval_<split>/<decoding>/<metric>."
        },
    )
    decoding_eval_steps: int = field(
        default=0, metadata={"help": "Evaluate the splits every N steps (0: off)."}
    )
    decoding_eval_rows: int | None = field(default=None, metadata={"help": "Evaluate the first N rows only."})
    decoding_eval_decodings: str | None = field(
        default=None,
        metadata={
            "help": "JSON {name: {k, temperature, top_p}}; default MAYE's pass@8 T=1.0, pass@1 T=0.6, "
            "pass@1 T=0.01/top_p 0.001."
        },
    )

    def __post_init__(self) -> None:

        for alias, name in SPELLINGS:
            value = getattr(self, alias)
            if value and getattr(self, name) and value != getattr(self, name):
                raise ValueError(f"--{alias} and --{name} name the same thing; give one")
            if value:
                setattr(self, name, value)
        required = required_fields("vlm")
        if not self.task:
            raise ValueError(required["task"])
        if not self.model:
            raise ValueError(required["model"])
        self.model = resolve_model(self.model)  # a LoRA run's output_dir trains on from its merged model
        if not self.dataset:
            raise ValueError(required["dataset"])


def parse_train_argv(kind: str, argv: Sequence[str]) -> tuple[ScriptArguments, Any]:
    """``(ScriptArguments, VisionSFTConfig | VisionGRPOConfig)`` from an ``sft``/``grpo`` command line as TRL's
    scripts parse it (a YAML ``--config`` gives defaults, flags override it); the one parse of the run and
    of its ``--dry-run``. Raises ``ValueError`` for a config's own refusal.

    ``--task_options`` on the command line is merged into the recipe's ``task_options`` option by option
    (TrlParser alone would replace the whole mapping: the ``r1sgg`` preset's weights would be lost).
    """
    from trl import TrlParser

    argv = _command_line_spelling_wins(_join_report_to(resolve_config_argv(list(argv))))
    config_cls = VisionGRPOConfig if kind == "grpo" else VisionSFTConfig
    parser = TrlParser((ScriptArguments, config_cls), prog=f"r1vision {kind}")
    script, config = parser.parse_args_and_config(argv)
    recipe = recipe_path(argv)
    if recipe and any(a == "--task_options" or a.startswith("--task_options=") for a in argv):
        from r1vision.configs import read_recipe

        script.task_options = merge_options(read_recipe(recipe).get("task_options"), script.task_options)
    script.recipe = recipe  # recorded in r1vision_run.json and the model card
    return script, config


def _command_line_spelling_wins(argv: list[str]) -> list[str]:
    """A field given on the command line in one spelling (``--dataset_name``) is given in the other too, so
    it overrides a recipe that sets the other one (``dataset:``) as a command line overrides a recipe,
    instead of being refused as two different values of one thing. Both spellings on the command line
    are left as they are (different values are still refused)."""

    values = flag_values(argv)
    extra: list[str] = []
    for trl_name, own in SPELLINGS:
        given = [name for name in (trl_name, own) if values.get(name)]
        if len(given) == 1:
            other = own if given[0] == trl_name else trl_name
            extra += [f"--{other}", str(values[given[0]])]
    return argv + extra


def _join_report_to(argv: list[str]) -> list[str]:
    """``--report_to tensorboard trackio`` as ``--report_to tensorboard,trackio`` (transformers' field takes
    one string; the config splits it)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        out.append(argv[i])
        if argv[i] in ("--report_to", "--report-to"):
            values = []
            while i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                values.append(argv[i + 1])
                i += 1
            out.append(",".join(values))
        i += 1
    return out


@dataclass(frozen=True)
class Prepared:
    """A run resolved before any trainer exists: the task, its parsed options, the run context, the data."""

    task: Task
    opts: Any
    run: RunContext
    train: Any
    evald: Any


def run_context(script: ScriptArguments, config: Any, *, stop_tokens: bool = False) -> RunContext:
    """The run's facts, resolved once: model family, pixel budget (the trainer gets the same values, so
    SFT targets and reward frames are in the frame the model sees), stop tokens and completion length."""
    family = model_family_of(script.model)
    budget = resolve_budget(family, config.min_pixels, config.max_pixels, processor=script.model)
    config.min_pixels, config.max_pixels = budget.min_pixels, budget.max_pixels
    eos: tuple[int, ...] = ()
    if stop_tokens:  # rewards that judge truncation need them (geometry's no_eos)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(script.model)
        eos = tuple(
            dict.fromkeys(t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None)
        )
    return RunContext(family, budget, eos, getattr(config, "max_completion_length", None))


def prepare(script: ScriptArguments, config: Any, *, stop_tokens: bool = False) -> Prepared:
    """Parse the options, resolve the run context and load the splits (rows are validated while loading)."""
    task = get_task(script.task)
    opts = task.parse_options(script.task_options)
    run = run_context(script, config, stop_tokens=stop_tokens)
    train = task.load(script.dataset, script.dataset_split, opts, run)
    if script.max_train_rows is not None:
        train = train.select(range(min(script.max_train_rows, len(train))))
    evald = task.load(script.dataset, script.eval_split, opts, run) if script.eval_split else None
    return Prepared(task, opts, run, train, evald)


def reward_specs(prepared: Prepared, names: list[str] | None) -> list[RewardSpec]:
    """The rewards ``--reward_funcs`` selects (default: all of the task's), each held to its range."""
    return guarded_rewards(
        resolve_rewards(prepared.task, names, prepared.task.rewards(prepared.opts, prepared.run))
    )


def run_grpo(script: ScriptArguments, config: Any) -> str:
    """Train with ``VisionGRPOTrainer`` on the task's rewards; returns the output directory."""

    check_generation_stack(use_vllm=bool(getattr(config, "use_vllm", False)))
    prepared = prepare(script, config, stop_tokens=True)
    check_generation_batch(len(prepared.train), config)  # else TRL trains 0 steps and exits 0
    specs = reward_specs(prepared, script.reward_funcs)
    check_reward_weights(config.reward_weights, [s.name for s in specs])
    if config.reward_weights is None:
        config.reward_weights = [s.weight for s in specs]
    # GRPO generates the completions itself; an SFT target column would be passed to rewards as noise.
    train, evald = (_without(d, "completion") for d in (prepared.train, prepared.evald))
    trainer = VisionGRPOTrainer(
        script.model, [s.func for s in specs], args=config, train_dataset=train, eval_dataset=evald
    )
    check_requested_layout(trainer.accelerator)
    if script.decoding_eval_splits and script.decoding_eval_steps > 0:
        trainer.add_callback(_decoding_eval(script, config, prepared, trainer))
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    finish_if_preempted(trainer)  # a signal stopped it: its checkpoint is the result
    with signals_held():  # from here a signal waits for the final folder (the run is complete: exit 0)
        record_layout(trainer, config.output_dir)
        trainer.r1vision_run = _settings(trainer, "grpo", script, config, specs)
        trainer.save_model(config.output_dir)  # + processor, run settings, merged LoRA, card, Hub upload
        teardown()
    return config.output_dir


def run_sft(script: ScriptArguments, config: Any) -> str:
    """Train with ``VisionSFTTrainer`` on the task's targets; returns the output directory."""

    prepared = prepare(script, config)
    keep = {"prompt", "completion", "images", "video", "videos"}
    train, evald = (_only(d, keep) for d in (prepared.train, prepared.evald))
    trainer = VisionSFTTrainer(script.model, args=config, train_dataset=train, eval_dataset=evald)
    check_requested_layout(trainer.accelerator)
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    finish_if_preempted(trainer)  # a signal stopped it: its checkpoint is the result
    with signals_held():  # from here a signal waits for the final folder (the run is complete: exit 0)
        record_layout(trainer, config.output_dir)
        trainer.r1vision_run = _settings(trainer, "sft", script, config, [])
        trainer.save_model(config.output_dir)  # + processor, run settings, merged LoRA, card, Hub upload
        teardown()
    return config.output_dir


def _without(dataset: Any, column: str) -> Any:
    if dataset is None or column not in dataset.column_names:
        return dataset
    return dataset.remove_columns([column])


def _only(dataset: Any, keep: set[str]) -> Any:
    if dataset is None:
        return None
    return dataset.remove_columns([c for c in dataset.column_names if c not in keep])


def _settings(
    trainer: Any, kind: str, script: ScriptArguments, config: Any, specs: list[RewardSpec]
) -> dict[str, Any]:
    """The run settings ``r1vision_run.json`` records (:mod:`r1vision.trainer.output` writes them)."""

    weights = getattr(config, "reward_weights", None) or []
    rewards = {s.name: float(w) for s, w in zip(specs, weights, strict=False)}
    settings = run_settings(kind, script, config, options_mapping(script.task_options), rewards)
    settings["recipe"] = getattr(script, "recipe", None)
    return settings


def _decoding_eval(script: ScriptArguments, config: Any, prepared: Prepared, trainer: Any):

    splits = {}
    for split in [s.strip() for s in (script.decoding_eval_splits or "").split(",") if s.strip()]:
        rows = prepared.task.load(script.dataset, split, prepared.opts, prepared.run)
        n = len(rows) if script.decoding_eval_rows is None else min(script.decoding_eval_rows, len(rows))
        splits[split] = [rows[i] for i in range(n)]
    given = script.decoding_eval_decodings
    decodings = json.loads(given) if given else MAYE_DECODINGS
    return DecodingEvalCallback(
        trainer,
        prepared.task,
        splits,
        script.decoding_eval_steps,
        decodings,
        opts=prepared.opts,
        run=prepared.run,
        max_new_tokens=config.max_completion_length,
        seed=config.seed,
    )
