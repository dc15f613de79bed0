"""The scene-graph-generation task: wires data, prompts, rewards, synthesis and evaluation together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from r1vision.tasks.base import EvalResult, RewardSpec, Task
from r1vision.tasks.sgg.categories import Vocabulary, load_vocabulary
from r1vision.tasks.sgg.data import image_size, load_raw, sft_target, to_trainer_format, validate_rows
from r1vision.tasks.sgg.evaluate import evaluate_sgg
from r1vision.tasks.sgg.prompts import compact_prompt


def _local_vocab(source: str | Path) -> Path | None:
    """``vocab.json`` next to a local dataset (written by ``r1vision synth sgg``), if any."""
    path = Path(source)
    for candidate in (path / "vocab.json", path.parent / "vocab.json"):
        if path.exists() and candidate.is_file():
            return candidate
    return None


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True)
class SGGOptions:
    """Options of the ``sgg`` / ``sgg_psg`` tasks (``--task_options``)."""

    prompt: Literal["open", "closed", "compact"] = field(
        default="open", metadata=_help("open vocabulary, closed (lists the categories) or a one-line prompt")
    )
    think: bool = field(default=False, metadata=_help("ask for <think>...</think> before the answer"))
    system: str | None = field(default=None, metadata=_help("system prompt"))
    vocab: str | None = field(
        default=None, metadata=_help("vg150, psg, synth or a JSON path (default: vocab.json beside the data)")
    )
    validate: bool = field(default=True, metadata=_help("check every row before training"))
    limit: int | None = field(default=None, metadata=_help("use the first N rows"))
    with_completion: bool | None = field(
        default=None, metadata=_help("add SFT targets (default: when the family is known)")
    )
    weights: dict[str, float] | None = field(default=None, metadata=_help("reward name -> weight"))
    strict_format: bool = field(default=True, metadata=_help("format reward: strict (True) or lenient"))
    require_think: bool = field(default=False, metadata=_help("format reward: require <think>"))
    group_size: int | None = field(
        default=None, metadata=_help("per-reward group normalisation over groups of N")
    )
    warmup_steps: int = field(default=0, metadata=_help("linear warm-up of warmup_rewards over N steps"))
    warmup_rewards: tuple[str, ...] = field(
        default=("node", "box", "edge", "edge_hard"), metadata=_help("rewards that warm up")
    )
    w_label: float = field(default=1.0, metadata=_help("node matching: label-similarity weight"))
    w_giou: float = field(default=1.0, metadata=_help("node matching: GIoU weight"))
    w_l1: float = field(default=1.0, metadata=_help("node matching: L1 weight"))
    iou_threshold: float = field(default=0.5, metadata=_help("IoU for a box to count as found"))
    object_similarity: Any = field(default=None, metadata=_help("label similarity for objects (Python API)"))
    predicate_similarity: Any = field(
        default=None, metadata=_help("label similarity for predicates (Python API)")
    )
    compat: Literal["r1sgg"] | None = field(
        default=None, metadata=_help("eval: reproduce R1-SGG's evaluator")
    )
    preset: Literal["default", "r1sgg"] | None = field(
        default=None,
        metadata=_help("reward settings by name: r1sgg = R1-SGG's weights 1/2/2/5, matching 1/2/5"),
    )
    reward_set: Literal["graph", "f1"] = field(
        default="graph", metadata=_help("graph: format/node/box/edge/edge_hard; f1: format/node_f1/edge_f1")
    )
    box_iou_weight: float | None = field(default=None, metadata=_help("box reward: IoU weight (default 1)"))
    box_l1_weight: float | None = field(
        default=None, metadata=_help("box reward: exp(-L1) weight (default 1)")
    )
    export_r1sgg: str | None = field(
        default=None, metadata=_help("eval: also write the predictions as R1-SGG's sgg_pred_results.json")
    )


_REWARD_OPTIONS = (
    "weights", "strict_format", "require_think", "group_size", "warmup_steps", "warmup_rewards",
    "w_label", "w_giou", "w_l1", "iou_threshold", "object_similarity", "predicate_similarity",
    "min_pixels", "max_pixels", "preset", "box_iou_weight", "box_l1_weight",
)  # fmt: skip
_F1_OPTIONS = ("weights", "strict_format", "require_think", "iou_threshold", "min_pixels", "max_pixels")


class SGGTask(Task):
    """Scene graphs on VG150 (default), PSG (``vocab="psg"``) or synthetic scenes (``vocab.json``).

    Options shared by :meth:`load`, :meth:`rewards`, :meth:`completion_text` and :meth:`evaluate`:
    ``model_family`` (box frame), ``min_pixels``/``max_pixels`` (pixel budget), ``vocab`` (``"vg150"``,
    ``"psg"``, ``"synth"`` or a JSON path).
    """

    name = "sgg"
    description = "scene-graph generation (VG150 / PSG / synthetic shapes): objects with boxes + relations"
    default_vocab = "vg150"
    Options = SGGOptions

    def _vocab(self, source: str | Path | None, vocab: str | None) -> Vocabulary:
        if vocab is not None:
            return load_vocabulary(str(vocab))
        local = _local_vocab(source) if source is not None else None
        return load_vocabulary(str(local)) if local else load_vocabulary(self.default_vocab)

    def synth(self, out_dir: str | Path, n: int, seed: int = 0, split: str = "train", **kwargs: Any) -> Path:
        """Synthetic shapes scenes (see :mod:`r1vision.tasks.sgg.synth`; ``preset="demo"`` for 84x84 grids)."""
        from r1vision.tasks.sgg.synth import synth_sgg

        return synth_sgg(out_dir, n, seed=seed, split=split, **kwargs)

    def load(self, source: str | Path, split: str = "train", **kwargs: Any):
        """Trainer rows; ``prompt="closed"`` lists the vocabulary, ``prompt="compact"`` is a one-line
        instruction (:func:`compact_prompt`), ``think=True`` asks for <think> first."""
        self.check_options(kwargs)
        ds, root = load_raw(source, split)
        if kwargs.get("validate", True):
            validate_rows(ds)
        if kwargs.get("limit"):
            ds = ds.select(range(min(int(kwargs["limit"]), len(ds))))
        style = kwargs.get("prompt", "open")
        if style not in ("open", "closed", "compact"):
            raise ValueError(f"prompt={style!r}; choose 'open', 'closed' or 'compact'")
        closed = style == "closed"
        return to_trainer_format(
            ds,
            root,
            model_family=kwargs.get("model_family"),
            vocabulary=self._vocab(source, kwargs.get("vocab")) if closed else None,
            think=bool(kwargs.get("think", False)),
            system=kwargs.get("system"),
            with_completion=kwargs.get("with_completion"),
            min_pixels=kwargs.get("min_pixels"),
            max_pixels=kwargs.get("max_pixels"),
            prompt_text=compact_prompt(kwargs.get("model_family")) if style == "compact" else None,
        )

    def rewards(self, **kwargs: Any) -> list[RewardSpec]:
        """``format``, ``node``, ``box``, ``edge``, ``edge_hard`` (options of :func:`make_rewards`, e.g.
        ``preset="r1sgg"``), or with ``reward_set="f1"`` the F1 set ``format``, ``node_f1``, ``edge_f1``
        (:func:`f1_rewards`). From the CLI: ``--task_options '{"preset": "r1sgg"}'``."""
        self.check_options(kwargs)
        family = kwargs.pop("model_family", None)
        if family is None:
            raise ValueError("SGG rewards need model_family (it fixes the box frame the model answers in)")
        if kwargs.pop("reward_set", "graph") == "f1":
            from r1vision.tasks.sgg.f1 import f1_rewards

            return f1_rewards(family, **{k: v for k, v in kwargs.items() if k in _F1_OPTIONS})
        from r1vision.tasks.sgg.rewards import make_rewards  # (scipy: not needed to evaluate)

        return make_rewards(family, **{k: v for k, v in kwargs.items() if k in _REWARD_OPTIONS})

    def completion_text(self, row: dict[str, Any], **kwargs: Any) -> str:
        """SFT target of a raw row (needs ``model_family``; size from ``original_image_sizes`` or the image)."""
        family = kwargs.get("model_family")
        if family is None:
            raise ValueError("SGG SFT targets need model_family")
        size = row.get("original_image_sizes")
        if size is not None:
            size = size[0] if isinstance(size[0], (list, tuple)) else size
        else:
            image = row.get("image", (row.get("images") or [None])[0])
            size = image_size(image, kwargs.get("image_root"))
        return sft_target(
            row["objects"],
            row["relationships"],
            tuple(size),
            family,
            kwargs.get("min_pixels"),
            kwargs.get("max_pixels"),
        )

    def evaluate(
        self, rows: Sequence[dict[str, Any]], completions: Sequence[str], **kwargs: Any
    ) -> EvalResult:
        """VG150 metrics (:func:`evaluate_sgg`); ``compat="r1sgg"`` reproduces R1-SGG's evaluator."""
        records: list[dict[str, Any]] = []
        vocab = kwargs.get("vocab")
        vocab = vocab if vocab is not None else (str(_local_vocab(kwargs["gt_source"]) or self.default_vocab)
                                                 if kwargs.get("gt_source") else self.default_vocab)  # fmt: skip
        metrics = evaluate_sgg(
            list(rows),
            list(completions),
            kwargs.get("compat"),
            model_family=kwargs.get("model_family"),
            min_pixels=kwargs.get("min_pixels"),
            max_pixels=kwargs.get("max_pixels"),
            vocab=vocab,
            records=records,
        )
        return EvalResult(metrics=metrics, records=records)

    def evaluate_files(self, gt: str, pred: str, split: str = "val", **kwargs: Any) -> EvalResult:
        """``r1vision eval sgg``: GT by Hub id or local copy (no images needed); predictions from
        ``r1vision infer`` (folder or jsonl) or R1-SGG's ``sgg_pred_results.json``. Option
        ``export_r1sgg=PATH`` (``--options '{"export_r1sgg": "preds.json"}'``) also writes the predictions
        in R1-SGG's format (:mod:`export`)."""
        records: list[dict[str, Any]] = []
        vocab = kwargs.get("vocab") or str(_local_vocab(gt) or self.default_vocab)
        metrics = evaluate_sgg(
            gt,
            pred,
            kwargs.get("compat"),
            model_family=kwargs.get("model_family"),
            min_pixels=kwargs.get("min_pixels"),
            max_pixels=kwargs.get("max_pixels"),
            vocab=vocab,
            split=split,
            records=records,
        )
        if kwargs.get("export_r1sgg"):
            from r1vision.tasks.sgg.export import export_r1sgg

            export_r1sgg(gt, pred, kwargs["export_r1sgg"], vocab=vocab, model_family=kwargs.get("model_family"),
                         min_pixels=kwargs.get("min_pixels"), max_pixels=kwargs.get("max_pixels"), split=split)  # fmt: skip
        return EvalResult(metrics=metrics, records=records)


class PSGTask(SGGTask):
    """The PSG variant: same pipeline, PSG's 133 object and 56 predicate categories by default."""

    name = "sgg_psg"
    default_vocab = "psg"
