"""Resuming Qwen-VL runs: load checkpoint weights under the model's own parameter names.

transformers 5 saves Qwen-VL weights under the legacy names (``visual.*``, ``model.layers.*``) but
names them ``model.visual.*`` / ``model.language_model.*`` in memory. ``Trainer._load_from_checkpoint``
loads the file with ``load_state_dict(strict=False)`` and no renaming, so on resume *no* weight is
loaded and training silently continues from the initial model. :class:`CheckpointRenameMixin` maps the
saved names back before loading and refuses to continue if anything is still missing.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from r1vision.checkpoints import (
    LAYOUT_FILE,
    disk_errors_named,
    layout_change_problem,
    needs_universal,
    newest_complete_checkpoint,
)

logger = logging.getLogger(__name__)


def saved_name_map(model: Any) -> dict[str, str]:
    """``{name in the checkpoint file: name in model.state_dict()}`` for a transformers model."""
    from transformers.core_model_loading import revert_weight_conversion

    mapping = {}
    for key, tensor in model.state_dict().items():
        reverted = revert_weight_conversion(model, {key: tensor})
        saved = next(iter(reverted)) if len(reverted) == 1 else key
        mapping[saved] = key
    return mapping


def _read_safetensors(checkpoint: str) -> dict[str, Any] | None:
    from safetensors.torch import load_file

    single = os.path.join(checkpoint, "model.safetensors")
    index = os.path.join(checkpoint, "model.safetensors.index.json")
    if os.path.isfile(single):
        return load_file(single, device="cpu")
    if os.path.isfile(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        state: dict[str, Any] = {}
        for name in files:
            state.update(load_file(os.path.join(checkpoint, name), device="cpu"))
        return state
    return None


class CheckpointRenameMixin:
    """Mixin for ``Trainer`` subclasses: correct weight loading on ``resume_from_checkpoint``, and no silent
    rerun into an ``output_dir`` that holds a previous run (:func:`check_output_dir`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        run_args = kwargs["args"] if "args" in kwargs else (args[1] if len(args) > 1 else None)
        if run_args is not None:
            note_previous_run(self, run_args.output_dir)
        super().__init__(*args, **kwargs)

    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "_previous_run", True):
            check_output_dir(self.args, resume_from_checkpoint)  # type: ignore[attr-defined]
        if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() in ("last", "true"):
            # Trainer's own choice is the highest-numbered folder, which a kill during a save leaves torn
            resume_from_checkpoint = resolve_last_checkpoint(self.args.output_dir)  # type: ignore[attr-defined]
        # the folder this run resumes from, for what a subclass restores beside Trainer's files
        self.resumed_from = resume_from_checkpoint if isinstance(resume_from_checkpoint, str) else None
        if isinstance(resume_from_checkpoint, str) and not getattr(self.args, "allow_layout_change", False):  # type: ignore[attr-defined]
            problem = layout_change_problem(resume_from_checkpoint, self._layout())
            if problem:
                raise LayoutChangeError(problem)
        if isinstance(resume_from_checkpoint, str) and needs_universal(
            resume_from_checkpoint, self._layout()
        ):
            self._load_universal(resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]

    def _load_universal(self, checkpoint: str) -> None:
        """A ZeRO checkpoint of another process count: the main process converts its shards to DeepSpeed's
        universal format (once, inside the folder), and this run's engine loads that format, which
        DeepSpeed re-partitions over the processes it has."""
        acc = self.accelerator  # type: ignore[attr-defined]
        if acc.is_main_process:
            to_universal(checkpoint)
        acc.wait_for_everyone()
        # the dict accelerate hands deepspeed.initialize when the trainer prepares the model
        acc.state.deepspeed_plugin.deepspeed_config.setdefault("checkpoint", {})["load_universal"] = True
        self._universal_checkpoint = checkpoint
        logger.warning(
            "resuming %s on %d processes through its universal form", checkpoint, acc.num_processes
        )

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        # Trainer calls this right after DeepSpeed loaded the checkpoint: mend what its ZeRO-3 universal
        # load gets wrong before the first step uses it.
        super()._load_optimizer_and_scheduler(checkpoint)  # type: ignore[misc]
        from r1vision.trainer.distributed import zero_stage

        if (
            checkpoint
            and checkpoint == getattr(self, "_universal_checkpoint", None)
            and zero_stage(self) == 3
        ):
            mended = mend_zero3_universal_load(self.model_wrapped.optimizer, checkpoint)  # type: ignore[attr-defined]
            logger.info("ZeRO-3 universal load mended: %s", mended)

    def _layout(self) -> dict[str, Any]:
        """This run's layout as :func:`~r1vision.checkpoints.layout_change_problem` compares it."""
        from r1vision.trainer.distributed import zero_stage

        args, acc = self.args, self.accelerator  # type: ignore[attr-defined]
        world = acc.num_processes
        return {
            "world_size": world,
            "per_device_train_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "global_batch": world * args.per_device_train_batch_size * args.gradient_accumulation_steps,
            "zero_stage": zero_stage(self),
            "fsdp": acc.distributed_type.name == "FSDP",
        }

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        folder = os.path.join(self.args.output_dir, f"checkpoint-{self.state.global_step}")  # type: ignore[attr-defined]
        with disk_errors_named(folder, "a checkpoint"):
            super()._save_checkpoint(model, trial)  # type: ignore[misc]
            if self.args.should_save:  # type: ignore[attr-defined]
                # a resume on another process count compares against it (checkpoints.layout_change_problem)
                with open(os.path.join(folder, LAYOUT_FILE), "w") as f:
                    json.dump(self._layout(), f)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        from transformers import PreTrainedModel

        model = model if model is not None else self.model
        plain = isinstance(model, PreTrainedModel) and not (
            getattr(self, "is_deepspeed_enabled", False) or getattr(self, "is_fsdp_enabled", False)
        )
        state = _read_safetensors(resume_from_checkpoint) if plain else None
        if state is None:  # adapters, DeepSpeed, FSDP: the stock path handles their own formats
            return super()._load_from_checkpoint(resume_from_checkpoint, model)  # type: ignore[misc]
        mapping = saved_name_map(model)
        state = {mapping.get(k, k): v for k, v in state.items()}
        result = model.load_state_dict(state, strict=False)
        tied = set(getattr(model, "_tied_weights_keys", None) or {})
        missing = [k for k in result.missing_keys if k not in tied and not k.endswith("lm_head.weight")]
        if missing or result.unexpected_keys:
            raise RuntimeError(
                f"checkpoint {resume_from_checkpoint} does not match the model: missing {missing[:5]}, "
                f"unexpected {result.unexpected_keys[:5]}"
            )


def to_universal(checkpoint: str) -> str:
    """Convert ``checkpoint``'s ZeRO shards (the tag in its ``latest``) to DeepSpeed's universal format in
    ``<tag>_universal`` beside them, with ``latest_universal`` naming it; done once (``latest_universal`` is
    written last, so a conversion cut short is redone). Returns the universal folder."""
    import shutil
    import subprocess
    import sys

    with open(os.path.join(checkpoint, "latest")) as f:
        tag = f.read().strip()
    out = os.path.join(checkpoint, f"{tag}_universal")
    marker = os.path.join(checkpoint, "latest_universal")
    if os.path.isfile(marker) and os.path.isdir(out):
        return out
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
           os.path.join(checkpoint, tag), "--output_folder", out, "--num_extract_workers", "1",
           "--num_merge_workers", "1", "--inject_missing_state"]  # fmt: skip
    with disk_errors_named(checkpoint, "the universal form of a ZeRO checkpoint"):
        done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not os.path.isfile(marker):
        raise RuntimeError(
            f"converting {checkpoint} to DeepSpeed's universal format failed (exit {done.returncode}): "
            f"{(done.stderr or done.stdout).strip().splitlines()[-1:] or ''}; resume it on the process count "
            "that wrote it"
        )
    return out


def mend_zero3_universal_load(zero_optimizer: Any, checkpoint: str) -> dict[str, int]:
    """Undo two slips of DeepSpeed's ZeRO-3 universal load (0.19.8,
    ``load_hp_checkpoint_state_from_checkpoint_dir_stage3``) in the wrapped torch optimizer:

    - every sub-group's state gets the *same* ``step`` tensor, which the optimizer then increments in place
      once per sub-group per step: with Trainer's two groups (decay / no decay) Adam's bias correction runs
      at twice the step count (the no-decay group was ~9 % off one step's update after a resume);
    - every param group gets group 0's hyperparameters, so the no-decay group (biases, norms) decays too.

    Each state gets its own step, and each group its saved hyperparameters (the universal folder's
    ``zero/optimizer_state.pt``). Returns how many steps and groups were restored."""
    import torch

    inner = getattr(zero_optimizer, "optimizer", zero_optimizer)  # the torch optimizer DeepSpeed steps
    seen: set[int] = set()
    steps = 0
    for state in inner.state.values():
        step = state.get("step")
        if torch.is_tensor(step):
            if id(step) in seen:
                state["step"] = step.clone()
                steps += 1
            seen.add(id(step))
    with open(os.path.join(checkpoint, "latest_universal")) as f:
        folder = os.path.join(checkpoint, f.read().strip(), "zero", "optimizer_state.pt")
    saved = torch.load(folder, map_location="cpu", weights_only=False)["optimizer_state_dict"]["param_groups"]
    groups = 0
    if len(saved) == len(inner.param_groups):  # the same model and grouping; otherwise leave DeepSpeed's
        for group, hyper in zip(inner.param_groups, saved, strict=True):
            for key, value in hyper.items():
                if key != "params" and group.get(key) != value:
                    group[key] = value
                    groups += 1
    return {"steps_unshared": steps, "hyperparameters_restored": groups}


class LayoutChangeError(ValueError):
    """A resume whose layout would not continue the checkpoint's run (see ``layout_change_problem``)."""


class NoCheckpointError(FileNotFoundError):
    """``--resume_from_checkpoint last`` with no complete checkpoint in ``output_dir``."""


def resolve_last_checkpoint(output_dir: str) -> str:
    """:func:`newest_complete_checkpoint`, logging which one and which newer ones were skipped and why.
    Raises :class:`NoCheckpointError` when there is none."""
    path, skipped = newest_complete_checkpoint(output_dir)
    if path is not None:
        note = "; ".join(f"skipped {os.path.basename(p)}: {why}" for p, why in skipped)
        logger.warning(
            "resuming from %s, the newest complete checkpoint%s", path, f" ({note})" if note else ""
        )
        return path
    detail = "; ".join(f"{os.path.basename(p)}: {why}" for p, why in skipped) or "no checkpoint-* folder"
    raise NoCheckpointError(
        f"--resume_from_checkpoint last: no complete checkpoint in {output_dir} ({detail}). "
        "Start a new run with --overwrite_output_dir true, or pass a checkpoint folder."
    )


class OutputDirInUseError(FileExistsError):
    """``output_dir`` already holds a run and neither resuming nor overwriting was asked for."""


def _run_traces(output_dir: str) -> list[str]:
    """What in ``output_dir`` shows a previous run: weights, an adapter, checkpoints, metrics rows."""
    if not os.path.isdir(output_dir):
        return []
    found = []
    for name in ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors"):
        if os.path.isfile(os.path.join(output_dir, name)):
            found.append(name)
    checkpoints = sorted(n for n in os.listdir(output_dir) if n.startswith("checkpoint-"))
    if checkpoints:
        found.append(f"{len(checkpoints)} checkpoint folder(s) ({checkpoints[-1]} last)")
    metrics = os.path.join(output_dir, "metrics.csv")
    if os.path.isfile(metrics):
        with open(metrics) as f:
            rows = max(0, sum(1 for _ in f) - 1)
        if rows:
            found.append(f"metrics.csv with {rows} row(s)")
    return found


def note_previous_run(trainer: Any, output_dir: str) -> None:
    """Record, while ``trainer`` is built, whether ``output_dir`` already holds a run: what the trainer
    itself writes before ``train()`` (its ``evaluate()``) is not a previous run."""
    trainer._previous_run = bool(_run_traces(output_dir))


def check_output_dir(args: Any, resume_from_checkpoint: Any = None) -> None:
    """Refuse to train into a folder holding a previous run unless resuming or ``overwrite_output_dir``.

    Training again would silently replace the weights and cut ``metrics.csv`` to the new run's rows.
    Runs at the start of ``train()``, before the first step and before ``metrics.csv`` is touched.
    """
    if resume_from_checkpoint or getattr(args, "resume_from_checkpoint", None):
        return
    if getattr(args, "overwrite_output_dir", False):
        return
    traces = _run_traces(args.output_dir)
    if traces:
        # suggest resuming only when there is something to resume from
        if newest_complete_checkpoint(args.output_dir)[0] is not None:
            hint, resume = "", "--resume_from_checkpoint last to continue it from its last checkpoint, "
        else:
            hint, resume = " It has no complete checkpoint to resume from (save_strategy / save_steps).", ""
        raise OutputDirInUseError(
            f"output_dir {args.output_dir} already holds a run ({', '.join(traces)}).{hint} Pass "
            f"{resume}--overwrite_output_dir true to replace it, or choose another --output_dir."
        )
