"""The scene-graph-generation task: wires data, prompts, rewards, synthesis and evaluation together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from r1vision.tasks.base import EvalResult, RewardSpec, RunContext, Task
from r1vision.tasks.options import option
from r1vision.tasks.sgg.categories import Vocabulary, load_vocabulary
from r1vision.tasks.sgg.data import image_size, load_raw, sft_target, to_trainer_format, validate_rows
from r1vision.tasks.sgg.evaluate import evaluate_sgg
from r1vision.tasks.sgg.prompts import R1_THINK_SYSTEM, R1SGG_PLAIN_SYSTEM, R1SGG_PROMPT_SG, compact_prompt
from r1vision.tasks.sgg.viz import visualize_prediction


def _local_vocab(source: str | Path) -> Path | None:
    """``vocab.json`` next to a local dataset (written by ``r1vision synth sgg``), if any."""
    path = Path(source)
    for candidate in (path / "vocab.json", path.parent / "vocab.json"):
        if path.exists() and candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class SGGOptions:
    """Options of the ``sgg`` / ``sgg_psg`` tasks (``--task_options``).

    The matching and box-term weights default to ``None``: the ``preset``'s value, else 1.
    """

    # data and prompts
    prompt: Literal["open", "closed", "compact", "r1sgg", "r1sgg_closed"] = option(
        "open",
        "open vocabulary, closed (lists the categories), a one-line prompt, or R1-SGG's own (the dataset's "
        "prompt_open / prompt_close column, as R1-SGG trains; system message R1's <think> template when think, "
        "else its plain one)",
    )
    think: bool = option(False, "ask for <think>...</think> before the answer")
    system: str | None = option(None, "system prompt")
    vocab: str | None = option(None, "vg150, psg, synth or a JSON path (default: vocab.json beside the data)")
    validate: bool = option(True, "check every row before training")
    limit: int | None = option(None, "use the first N rows")
    with_completion: bool | None = option(None, "add SFT targets (default: when the family is known)")
    # rewards
    reward_set: Literal["graph", "f1"] = option(
        "graph", "graph: format/node/box/edge/edge_hard; f1: format/node_f1/edge_f1"
    )
    preset: Literal["default", "r1sgg"] | None = option(
        None, "reward settings by name: r1sgg = R1-SGG's weights 1/2/2/5, matching 1/2/5"
    )
    weights: dict[str, float] | None = option(None, "reward name -> weight")
    strict_format: bool = option(True, "format reward: strict (True) or lenient")
    require_think: bool = option(False, "format reward: require <think>")
    group_size: int | None = option(None, "per-reward group normalisation over groups of N")
    warmup_steps: int = option(0, "linear warm-up of warmup_rewards over N steps")
    warmup_rewards: tuple[str, ...] = option(("node", "box", "edge", "edge_hard"), "rewards that warm up")
    w_label: float | None = option(None, "node matching: label-similarity weight (default 1)")
    w_giou: float | None = option(None, "node matching: GIoU weight (default 1)")
    w_l1: float | None = option(None, "node matching: L1 weight (default 1)")
    box_iou_weight: float | None = option(None, "box reward: IoU weight (default 1)")
    box_l1_weight: float | None = option(None, "box reward: exp(-L1) weight (default 1)")
    iou_threshold: float = option(0.5, "IoU for a box to count as found")
    object_similarity: Any = option(None, "label similarity for objects (Python API)")
    predicate_similarity: Any = option(None, "label similarity for predicates (Python API)")
    # evaluation
    compat: Literal["r1sgg"] | None = option(None, "eval: reproduce R1-SGG's evaluator")
    export_r1sgg: str | None = option(
        None, "eval: also write the predictions as R1-SGG's sgg_pred_results.json"
    )


class SGGTask(Task):
    """Scene graphs on VG150 (default), PSG (``vocab="psg"``) or synthetic scenes (``vocab.json``).

    The run context's ``model_family`` fixes the box frame and its ``budget`` the resized image size, for
    SFT targets, rewards and evaluation alike.
    """

    name = "sgg"
    description = "scene-graph generation (VG150 / PSG / synthetic shapes): objects with boxes + relations"
    default_vocab = "vg150"
    Options = SGGOptions
    max_new_tokens = 2048  # a VG150 graph of 20 objects + 30 relations is ~1,323 Qwen tokens
    synthesizer = "r1vision.tasks.sgg.synth:synth_sgg"

    def vocabulary(self, source: str | Path | None, opts: SGGOptions) -> Vocabulary:
        """``opts.vocab``, else ``vocab.json`` beside a local dataset, else the task's default list."""
        return load_vocabulary(self.vocab_name(source, opts))

    def vocab_name(self, source: str | Path | None, opts: SGGOptions) -> str:
        if opts.vocab is not None:
            return str(opts.vocab)
        local = _local_vocab(source) if source is not None else None
        return str(local) if local else self.default_vocab

    def load(self, source: str | Path, split: str, opts: SGGOptions, run: RunContext):
        """Trainer rows; ``prompt="closed"`` lists the vocabulary, ``prompt="compact"`` is a one-line
        instruction (:func:`compact_prompt`), ``think=True`` asks for <think> first."""
        ds, root = load_raw(source, split)
        if opts.validate:
            validate_rows(ds)
        if opts.limit:
            ds = ds.select(range(min(opts.limit, len(ds))))
        r1sgg = opts.prompt.startswith("r1sgg")
        system = opts.system
        if r1sgg and system is None:
            system = R1_THINK_SYSTEM if opts.think else R1SGG_PLAIN_SYSTEM
        return to_trainer_format(
            ds,
            root,
            model_family=run.model_family,
            vocabulary=self.vocabulary(source, opts) if opts.prompt == "closed" else None,
            think=opts.think,
            system=system,
            with_completion=opts.with_completion,
            budget=run.budget,
            prompt_text={"compact": compact_prompt(run.model_family), "r1sgg": R1SGG_PROMPT_SG}.get(
                opts.prompt
            ),
            prompt_column="prompt_close" if opts.prompt == "r1sgg_closed" else None,
        )

    def rewards(self, opts: SGGOptions, run: RunContext) -> list[RewardSpec]:
        """``format``, ``node``, ``box``, ``edge``, ``edge_hard`` (:func:`~.rewards.make_rewards`, e.g.
        ``preset="r1sgg"``), or with ``reward_set="f1"`` the F1 set ``format``, ``node_f1``, ``edge_f1``
        (:func:`~.f1.f1_rewards`)."""
        if run.model_family is None:
            raise ValueError(
                "SGG rewards need the model family (it fixes the box frame the model answers in)"
            )
        if opts.reward_set == "f1":
            from r1vision.tasks.sgg.f1 import f1_rewards

            return f1_rewards(
                run.model_family,
                weights=opts.weights,
                strict_format=opts.strict_format,
                iou_threshold=opts.iou_threshold,
                budget=run.budget,
                require_think=opts.require_think,
            )
        from r1vision.tasks.sgg.rewards import make_rewards  # (scipy: not needed to evaluate)

        return make_rewards(
            run.model_family,
            weights=opts.weights,
            strict_format=opts.strict_format,
            require_think=opts.require_think,
            group_size=opts.group_size,
            warmup_steps=opts.warmup_steps,
            warmup_rewards=opts.warmup_rewards,
            preset=opts.preset,
            w_label=opts.w_label,
            w_giou=opts.w_giou,
            w_l1=opts.w_l1,
            box_iou_weight=opts.box_iou_weight,
            box_l1_weight=opts.box_l1_weight,
            iou_threshold=opts.iou_threshold,
            object_similarity=opts.object_similarity,
            predicate_similarity=opts.predicate_similarity,
            budget=run.budget,
        )

    def sft_target(self, row: Mapping[str, Any], opts: SGGOptions, run: RunContext) -> str:
        """SFT target of a raw row (size from ``original_image_sizes`` or the image)."""
        if run.model_family is None:
            raise ValueError("SGG SFT targets need the model family")
        size = row.get("original_image_sizes")
        if size is not None:
            size = size[0] if isinstance(size[0], (list, tuple)) else size
        else:
            size = image_size(row.get("image", (row.get("images") or [None])[0]))
        return sft_target(row["objects"], row["relationships"], tuple(size), run.model_family, run.budget)

    def evaluate(
        self, rows: Sequence[Mapping[str, Any]], completions: Sequence[str], opts: SGGOptions, run: RunContext
    ) -> EvalResult:
        """VG150 metrics (:func:`evaluate_sgg`); ``compat="r1sgg"`` reproduces R1-SGG's evaluator."""
        records: list[dict[str, Any]] = []
        metrics = evaluate_sgg(
            list(rows),
            list(completions),
            opts.compat,
            model_family=run.model_family,
            budget=run.budget,
            vocab=self.vocab_name(None, opts),
            records=records,
        )
        return EvalResult(metrics=metrics, records=records)

    def evaluate_files(self, gt: str, pred: str, split: str, opts: SGGOptions, run: RunContext) -> EvalResult:
        """``r1vision eval --task sgg``: ground truth by Hub id or local copy (no images needed); predictions
        from ``r1vision infer`` (folder or jsonl) or R1-SGG's ``sgg_pred_results.json``. ``export_r1sgg``
        also writes the predictions in R1-SGG's format (:mod:`.export`)."""
        records: list[dict[str, Any]] = []
        vocab = self.vocab_name(gt, opts)
        metrics = evaluate_sgg(
            gt,
            pred,
            opts.compat,
            model_family=run.model_family,
            budget=run.budget,
            vocab=vocab,
            split=split,
            records=records,
        )
        if opts.export_r1sgg:
            from r1vision.tasks.sgg.export import export_r1sgg

            export_r1sgg(
                gt,
                pred,
                opts.export_r1sgg,
                vocab=vocab,
                model_family=run.model_family,
                budget=run.budget,
                split=split,
            )
        return EvalResult(metrics=metrics, records=records)

    def visualize(
        self,
        gt: str,
        pred: str | None,
        indices: list[int],
        out_dir: str,
        split: str,
        opts: SGGOptions,
        run: RunContext,
    ) -> list[Path]:
        """``r1vision viz``: one PNG per row, ground truth against the prediction."""

        return visualize_prediction(gt, pred, indices, out_dir, split=split, model_family=run.model_family)


class PSGTask(SGGTask):
    """The PSG variant: same pipeline, PSG's 133 object and 56 predicate categories by default."""

    name = "sgg_psg"
    description = "panoptic scene graphs (PSG): the sgg pipeline with PSG's 133 objects and 56 predicates"
    default_vocab = "psg"
