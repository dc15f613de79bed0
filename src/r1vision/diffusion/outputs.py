"""The reporting and output side of :class:`~r1vision.diffusion.trainer.DiffusionGRPOTrainer`: the step metrics
(gathered over the processes, TRL's names), deterministic sampling, Flow-GRPO's sharded evaluation (``eval_metrics.csv``, ``eval/step-N/``, ``best/``), the diffusers LoRA
folders and the run record (the checkpoint files: :mod:`r1vision.diffusion.resume`).

A mixin over ``transformers.Trainer``: it reads the trainer's ``family``, ``ema``, ``reward_funcs``,
``reward_weights``, ``reward_names``, ``_metrics``, ``model_path``, ``evaluated_steps`` and ``_best_eval``.
"""

from __future__ import annotations

import csv
import json
import math
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from r1vision.diffusion.evaluate import score_records, write_evaluation
from r1vision.diffusion.export import save_lora
from r1vision.diffusion.families import to_pil
from r1vision.diffusion.rollout import sample_ode


class EvaluateAndSaveMixin:
    """Metrics, evaluation, export and saving for the text-to-image trainer (see the module docstring)."""

    # ------------------------------------------------------------------------------------------ metrics
    def _record_generation(
        self, weighted: torch.Tensor, values: torch.Tensor, stats: dict[str, float], **scalars: float
    ) -> None:
        """Metrics of one generation, over every process's samples."""
        finite = weighted[~torch.isnan(weighted)]
        self._metrics["reward"].append(float(finite.mean()) if len(finite) else math.nan)
        self._metrics["reward_std"].append(float(finite.std(unbiased=False)) if len(finite) else math.nan)
        for j, name in enumerate(self.reward_names):
            column = values[:, j][~torch.isnan(values[:, j])]
            self._metrics[f"rewards/{name}/mean"].append(float(column.mean()) if len(column) else math.nan)
        self._metrics["frac_reward_zero_std"].append(stats["zero_std_ratio"])
        for key in ("adv_zero_rate", "group_size", "reward_std_mean"):
            self._metrics[key].append(stats[key])
        for key, value in scalars.items():
            self._metrics[key].append(float(value))

    def _joined_metrics(self) -> dict[str, float]:
        """Each metric's mean over the micro-steps since the last log and over the processes (NaN skipped);
        ``*_max`` metrics are maxima. One collective; every process has the same keys."""
        keys = sorted(self._metrics)
        local = []
        for key in keys:
            finite = [v for v in self._metrics[key] if not math.isnan(v)]
            local += [sum(finite), float(len(finite)), max(finite) if finite else -math.inf]
        table = torch.tensor(local, dtype=torch.float64).view(1, -1)
        if self.accelerator.num_processes > 1:
            table = self.accelerator.gather(table.to(self.accelerator.device)).cpu()
        out = {}
        for i, key in enumerate(keys):
            total, count, peak = table[:, 3 * i].sum(), table[:, 3 * i + 1].sum(), table[:, 3 * i + 2].max()
            if key.endswith("_max"):
                out[key] = float(peak) if count else math.nan
            else:
                out[key] = float(total / count) if count else math.nan
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL-style: the step metrics averaged since the last log (and over the processes) join
        transformers' loss, lr and grad norm."""
        if self._metrics and not any(k.startswith("eval_") for k in logs):
            logs.update(self._joined_metrics())
            self._metrics.clear()
        super().log(logs, start_time)

    # ----------------------------------------------------------------------------------------- evaluate
    @torch.no_grad()
    def generate(
        self, prompts: list[str], steps: int, seed: int, use_ema: bool = True, first_index: int = 0
    ) -> list[Any]:
        """Deterministic images (:func:`r1vision.diffusion.rollout.sample_ode`) for ``prompts``,
        ``per_device_eval_batch_size`` at a time, with the EMA weights by default."""
        model = self.accelerator.unwrap_model(self.model)
        context = self.ema.swapped() if use_ema and self.ema is not None else nullcontext()
        with context:
            model.eval()
            images = sample_ode(
                self.family,
                model,
                prompts,
                steps=steps,
                resolution=self.args.resolution,
                guidance_scale=self.args.guidance_scale,
                seed=seed,
                first_index=first_index,
                batch_size=self.args.per_device_eval_batch_size,
            )
            model.train()
        return to_pil(images)

    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: Any = None, metric_key_prefix: str = "eval"
    ) -> dict:
        """Flow-GRPO's evaluation: the eval prompts, ODE, ``eval_num_inference_steps``, a fixed seed per prompt,
        EMA weights; the prompts are sharded over the processes and the scores gathered. Writes
        ``eval_metrics.csv``, ``eval/step-N/`` (records and a contact sheet) and, when the reward improved,
        ``best/``."""

        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            return {}
        n = min(self.args.eval_num_images, len(dataset))
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        share = math.ceil(n / world)
        mine = list(range(rank * share, min((rank + 1) * share, n)))
        # every process samples the same number of batches (a ZeRO-3 forward is collective): pad, then drop
        padded = mine + [mine[-1] if mine else 0] * (share - len(mine))
        rows = [dataset[i] for i in padded]
        prompts = [str(r["prompt"]) for r in rows]
        images = self.generate(
            prompts, self.args.eval_num_inference_steps, self.args.eval_seed, first_index=rank * share
        )[: len(mine)]

        records = score_records(
            self.reward_funcs,
            self.reward_weights.tolist(),
            prompts[: len(mine)],
            images,
            rows[: len(mine)],
            indices=mine,
        )
        thumbs = [(i, im.copy()) for i, im in zip(mine, images, strict=True) if i < 16]
        if world > 1:
            from accelerate.utils import gather_object

            records, thumbs = list(gather_object(records)), list(gather_object(thumbs))
        step = self.state.global_step
        self.evaluated_steps.add(step)
        metrics: dict[str, float] = {}
        if self.is_world_process_zero():
            folder = Path(self.args.output_dir) / "eval" / f"step-{step}"
            metrics = write_evaluation(
                records, [im for _, im in sorted(thumbs, key=lambda t: t[0])], folder, self.reward_names
            )
            _append_csv(Path(self.args.output_dir) / "eval_metrics.csv", {"step": step, **metrics})
        metrics = _broadcast(self.accelerator, metrics)
        if self._best_eval is None or metrics["reward"] > self._best_eval:
            self._best_eval = metrics["reward"]
            self._export(Path(self.args.output_dir) / "best", ema=True)
            if self.is_world_process_zero():
                (Path(self.args.output_dir) / "best" / "eval.json").write_text(
                    json.dumps({"step": step, **metrics})
                )
        out = {f"{metric_key_prefix}_{k}": v for k, v in metrics.items()}
        self.log(out)
        # as transformers' own evaluate: callbacks see the metrics, and the "evaluate now" flag is cleared
        # (left set, the epoch-end check evaluated the last step again, and the runner a third time)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, out)
        return out

    # ------------------------------------------------------------------------------------------- saving
    def _export(self, folder: Path, ema: bool) -> None:
        """The adapter (EMA weights with ``ema``) as a diffusers LoRA folder, or the full denoiser (main
        process writes)."""

        if not self.is_world_process_zero():
            return
        model = self.accelerator.unwrap_model(self.model)
        context = self.ema.swapped() if ema and self.ema is not None else nullcontext()
        with context:
            if hasattr(model, "peft_config"):
                save_lora(model, folder)
            else:
                model.save_pretrained(folder / "transformer")

    def export_final(self, output_dir: str | os.PathLike) -> None:
        """The final adapters: ``lora/`` (raw weights) and ``lora_ema/``, the folders a diffusers user loads."""
        target = Path(output_dir)
        self._export(target / "lora", ema=False)
        if self.ema is not None:
            self._export(target / "lora_ema", ema=True)

    def run_settings(self) -> dict[str, Any]:
        """What ``r1vision_run.json`` records about this run, enough for stock diffusers to reproduce its
        images (``t2i-eval`` reads resolution, steps, guidance and T5 length from it)."""
        args = self.args
        base = os.path.abspath(self.model_path) if os.path.isdir(self.model_path) else self.model_path
        return {
            "kind": "t2i-grpo",
            "base_model": base,
            "family": self.family.name,
            "rewards": dict(zip(self.reward_names, self.reward_weights.tolist(), strict=True)),
            "lora_r": args.lora_r,
            "lora_alpha": args.lora_alpha,
            "resolution": args.resolution,
            "num_inference_steps": args.num_inference_steps,
            "eval_num_inference_steps": args.eval_num_inference_steps,
            "guidance_scale": args.guidance_scale,
            "noise_level": args.noise_level,
            "max_sequence_length": self.family.max_sequence_length,
            "seed": args.seed,
            "num_processes": self.accelerator.num_processes,
        }

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        super().save_model(output_dir, _internal_call)
        if _internal_call:
            return
        target = Path(output_dir or self.args.output_dir)
        self.export_final(target)  # lora/ and lora_ema/ exist before the card and the upload
        from r1vision.trainer.output import finish_output

        finish_output(
            self, target, "t2i-grpo", {**self.run_settings(), **(getattr(self, "r1vision_run", None) or {})}
        )


def _broadcast(acc: Any, metrics: dict[str, float]) -> dict[str, float]:
    """The main process's evaluation metrics on every process (each decides the same about ``best/``)."""
    if acc.num_processes == 1:
        return metrics
    from accelerate.utils import broadcast_object_list

    box = [metrics]
    broadcast_object_list(box, from_process=0)
    return box[0]


def _append_csv(path: Path, row: dict[str, Any]) -> None:
    """One row appended; a new column rewrites the file with the wider header (rows are few)."""
    rows: list[dict[str, Any]] = []
    if path.is_file():
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        rows = [
            r for r in rows if int(float(r.get("step") or -1)) < int(row["step"])
        ]  # a resumed run rewrites
    rows.append({k: v for k, v in row.items()})
    header = list(dict.fromkeys(k for r in rows for k in r))
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
