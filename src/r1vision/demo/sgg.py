"""The scene-graph demo (the default): SGG rows, the F1 rewards, ``r1vision eval sgg`` and drawings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r1vision.demo import arms, report
from r1vision.demo.pipeline import DemoTask
from r1vision.tasks.sgg.task import SGGTask


class SGGDemo(DemoTask):
    """Synthetic scenes with rare colour-shape pairs (:class:`~r1vision.demo.config.DemoConfig`)."""

    name = "sgg"
    title = "SFT -> GRPO on synthetic scene graphs"
    headline = report.HEADLINE
    headline_label = "relation recall"
    reward_label = "mean reward (format + object F1 + relation F1)"
    columns = report.COLUMNS

    def make_data(self, root: Path, seed: int) -> Path:
        return arms.make_data(self.cfg, root, seed)

    def rows(self, data: Path, split: str, with_completion: bool = True) -> Any:
        return arms.load_rows(data, split, self.cfg, with_completion)

    def reward_specs(self, model_dir: str | Path) -> list[Any]:

        return SGGTask().rewards(arms.task_options(self.cfg), arms.run_context(self.cfg))

    def evaluate(self, model_dir: str, data: Path, split: str, pred_dir: Path) -> dict[str, float]:
        return report.evaluate_arm(model_dir, data, split, pred_dir, self.cfg)

    def describe(self, iid: dict[str, float], ood: dict[str, float]) -> str:
        return (
            f"i.i.d. object F1 {iid['object_f1']:.3f}, relation recall {iid['relation_recall']:.3f}, "
            f"OOD relation recall {ood['relation_recall']:.3f}"
        )

    def draw(self, out: Path, results: list[dict[str, Any]]) -> None:
        first = results[0]
        for split in ("test", "test_ood"):
            preds = {arm: Path(p) for arm, p in first["predictions"][split].items()}
            report.draw_predictions(
                out / "drawings", Path(first["data"]), preds, split, self.cfg.num_drawings, self.cfg
            )

    def write_tables(self, out: Path, results: list[dict[str, Any]]) -> str:
        return report.write_tables(out, results, self.cfg)
