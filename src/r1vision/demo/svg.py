"""``r1vision demo --task svg``: SFT -> GRPO on image -> SVG, with the svg task's own rewards (sandboxed
render; validity, pixel, SSIM and edge terms with the default weights, plus its opt-in colour term) and
evaluation (render rate, the reward's similarity, standard SSIM), plus a contact sheet of the arms' renders.

Data (:mod:`r1vision.tasks.svg.synth_shapes`): one or two filled shapes (rect, circle, ellipse in red, green,
blue) in the cells of a 3x3 grid on an 84 px canvas. SFT and the i.i.d. test draw the ``held_out`` colour-shape pairs at
``held_out_sft_rate`` x their natural rate; GRPO prompts draw every pair; every OOD figure has one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r1vision.demo.config import DemoConfig
from r1vision.demo.pipeline import DemoTask
from r1vision.generation.sampling import SamplingOptions
from r1vision.vision.records import read_predictions

ARM_ORDER = ("sft", "sft_matched", "sft+grpo")


@dataclass(frozen=True)
class SVGDemoConfig(DemoConfig):
    """The scene-graph demo's model and arms with the shape figures; ``held_out`` names colour-shape pairs."""

    held_out: tuple[str, ...] = ("red circle", "green ellipse", "blue rect")
    held_out_sft_rate: float = 0.02
    max_completion_length: int = 96
    max_new_tokens: int = 96
    # 800 steps (cosine) ended before the model read the image: loss sat at the figures' marginal entropy
    # (~0.13 nats/token) until ~step 400 at full learning rate; 1600 steps reached 0.035 (docs/demo.md)
    sft_steps: int = 1400
    # 1e-4 (chosen while the SFT model ignored the image) pulled a policy that reads it apart: OOD reward
    # 0.882 and colour agreement 0.734 (seed 0), against 0.905 and 0.835 at 3e-5 (docs/demo.md)
    grpo_lr: float = 3e-5
    num_drawings: int = 8  # figures per split on the contact sheet
    # the svg task's opt-in colour term: the ink terms cannot see a wrong fill colour, and a wrong colour
    # is what separates the held-out pairs; 0 gives GRPO only the default (colour-blind) terms
    colour_weight: float = 0.3


class SVGDemo(DemoTask):
    """Shape figures; metrics of ``r1vision eval svg``."""

    name = "svg"
    title = "SFT -> GRPO on image -> SVG (svg task)"
    headline = "reward"
    headline_label = "reward similarity"
    reward_label = "mean reward (svg valid + pixel + SSIM + edge + colour)"
    columns = (
        ("render_rate", "renders", True),
        ("reward", "reward similarity", False),
        ("ssim_standard", "SSIM (standard)", False),
        ("pixel", "pixel", False),
        ("edge", "edge", False),
        ("colour", "colour", False),
        ("distinct", "distinct outputs", True),
    )

    config_class = SVGDemoConfig

    def synth(self, root: Path, split: str, n: int, seed: int, **pairs: Any) -> None:
        from r1vision.tasks.svg.synth import synth_svg

        synth_svg(root / split, n, seed=seed, split=split, preset="demo", size=self.cfg.image_side, **pairs)

    def _source(self, data: Path, split: str) -> str:
        return str(data / split / f"{split}.parquet")

    def rows(self, data: Path, split: str, with_completion: bool = True) -> Any:
        from r1vision.tasks.svg.task import SVGOptions, SVGTask

        rows = SVGTask().load(self._source(data, split), split, SVGOptions(), self.run_context())
        return rows if with_completion else rows.remove_columns(["completion"])

    def reward_specs(self, model_dir: str | Path) -> list[Any]:
        from r1vision.tasks.svg.task import SVGOptions, SVGTask

        weights = {"colour": self.cfg.colour_weight} if self.cfg.colour_weight else None
        return SVGTask().rewards(SVGOptions(weights=weights), self.run_context())

    def evaluate(self, model_dir: str, data: Path, split: str, pred_dir: Path) -> dict[str, float]:
        """``r1vision infer`` (greedy) and ``r1vision eval svg`` on ``split``."""
        from r1vision.demo.report import distinct_share
        from r1vision.runners.infer import run_inference
        from r1vision.tasks.svg.task import SVGOptions, SVGTask

        cfg, task, opts = self.cfg, SVGTask(), SVGOptions()
        source = self._source(data, split)
        run_inference(
            task,
            opts,
            model_dir,
            source,
            pred_dir,
            split=split,
            batch_size=cfg.eval_batch,
            options=SamplingOptions(max_new_tokens=cfg.max_new_tokens),
            max_pixels=cfg.max_pixels,
            progress=False,
        )
        metrics = task.evaluate_files(source, str(pred_dir), split, opts, self.run_context()).metrics
        keys = (
            "render_rate",
            "reward",
            "ssim_standard",
            "pixel",
            "edge",
            "colour",
            "ssim_reward",
            "mse",
            "num_items",
        )
        out = {k: float(metrics[k]) for k in keys if k in metrics}
        # the reward can rise with one figure drawn for every image: say how image-dependent the SVGs are
        out["distinct"] = distinct_share(pred_dir)
        return out

    def describe(self, iid: dict[str, float], ood: dict[str, float]) -> str:
        return (
            f"i.i.d. renders {iid['render_rate']:.3f}, reward {iid['reward']:.3f}, SSIM "
            f"{iid['ssim_standard']:.3f}; OOD reward {ood['reward']:.3f}"
        )

    def intro(self, results: list[dict[str, Any]]) -> list[str]:
        colour = self.cfg.colour_weight
        terms = (
            f"valid + pixel + SSIM + edge at the default weights + colour x {colour:g}"
            if colour
            else ("valid + pixel + SSIM + edge, default weights")
        )
        rewards = f"the svg task's shipped rewards (sandboxed render; {terms})"
        return [
            self.design("figures of one or two shapes", "colour-shape", rewards)
            + " Greedy decoding; metrics of `r1vision eval svg` (renders in percent; the others in [0, 1]; a figure that "
            "does not render scores 0)" + (", mean ± std over seeds." if len(results) > 1 else ".")
        ]

    def split_titles(self) -> dict[str, str]:
        return {
            "test": "i.i.d. test (drawn like the SFT data)",
            "test_ood": "OOD test (every figure has a held-out pair)",
        }

    def draw(self, out: Path, results: list[dict[str, Any]]) -> None:
        """``contact_sheet.png``: per split, the target and each arm's render for the first figures."""
        first = results[0]
        contact_sheet(
            out / "contact_sheet.png", Path(first["data"]), first["predictions"], self.cfg.num_drawings
        )


def contact_sheet(path: Path, data: Path, predictions: dict[str, dict[str, str]], n: int) -> Path:
    """Columns: target, SFT, SFT continued, SFT + GRPO; one row per figure (i.i.d. then OOD)."""
    import pyarrow.parquet as pq
    from PIL import Image, ImageDraw

    from r1vision.tasks.svg.render import default_pool

    cell, pad, head = 96, 4, 14
    titles = ("target", "SFT", "SFT cont.", "SFT+GRPO")
    rows: list[list[Image.Image | None]] = []
    labels = []
    pool = default_pool()
    for split in ("test", "test_ood"):
        table = pq.read_table(data / split / f"{split}.parquet").to_pylist()[:n]
        texts = {
            arm: {int(r["index"]): r.get("completion", "") for r in read_predictions(predictions[split][arm])}
            for arm in ARM_ORDER
        }
        for i, row in enumerate(table):
            svgs = [row["response"]] + [texts[arm].get(i, "") for arm in ARM_ORDER]
            w, h = row["extra_info"]["png_size"]
            renders = pool.render_many(svgs, [w] * len(svgs), [h] * len(svgs))
            rows.append([Image.fromarray(r.image) if r.ok else None for r in renders])
            labels.append(f"{'OOD' if split == 'test_ood' else 'iid'} {i}")
    sheet = Image.new("RGB", (len(titles) * (cell + pad) + 40, head + len(rows) * (cell + pad)), "white")
    draw = ImageDraw.Draw(sheet)
    for c, t in enumerate(titles):
        draw.text((40 + c * (cell + pad), 1), t, fill="black")
    for r, (images, label) in enumerate(zip(rows, labels, strict=True)):
        y = head + r * (cell + pad)
        draw.text((2, y + cell // 2), label, fill="black")
        for c, image in enumerate(images):
            x = 40 + c * (cell + pad)
            if image is None:  # did not render: a red cross
                draw.rectangle([x, y, x + cell, y + cell], outline="red")
                draw.line([x, y, x + cell, y + cell], fill="red")
                draw.line([x + cell, y, x, y + cell], fill="red")
            else:
                sheet.paste(image.convert("RGB").resize((cell, cell)), (x, y))
                draw.rectangle([x, y, x + cell, y + cell], outline=(200, 200, 200))
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path)
    return path
