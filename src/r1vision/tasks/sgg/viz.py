"""Picture of one SGG prediction: GT and predicted boxes on the image, and both relation graphs (networkx)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image

from r1vision.tasks.sgg.boxes import box_frame
from r1vision.tasks.sgg.data import load_raw
from r1vision.tasks.sgg.parse import parse_scene_graph
from r1vision.tasks.sgg.prediction_files import read_predictions
from r1vision.vision.budget import PixelBudget
from r1vision.vision.images import load_image


def _graph_parts(objects: list[dict], relations: list[dict]) -> tuple[list[str], list[tuple[str, str, str]]]:
    return [o["id"] for o in objects], [(r["subject"], r["object"], r["predicate"]) for r in relations]


def _draw_boxes(ax: Any, image: Image.Image, objects: list[dict], color: str, title: str) -> None:
    from matplotlib.patches import Rectangle

    ax.imshow(image)
    for o in objects:
        x1, y1, x2, y2 = o["bbox"]
        ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=color, linewidth=2))
        ax.text(
            x1,
            y1,
            o["id"],
            color="white",
            fontsize=7,
            va="bottom",
            bbox={"facecolor": color, "pad": 1, "lw": 0},
        )
    ax.set_title(title)
    ax.axis("off")


def _draw_graph(ax: Any, nodes: list[str], edges: list[tuple[str, str, str]], color: str, title: str) -> None:
    import networkx as nx

    g = nx.MultiDiGraph()
    g.add_nodes_from(nodes)
    for s, o, p in edges:
        g.add_edge(s, o, label=p)
    pos = nx.spring_layout(g, seed=0) if nodes else {}
    nx.draw_networkx(g, pos, ax=ax, node_color=color, font_size=7, node_size=600, arrows=True, alpha=0.9)
    labels: dict[tuple[str, str], str] = {}
    for s, o, p in edges:  # several predicates of one pair share a label
        labels[(s, o)] = f"{labels[(s, o)]} / {p}" if (s, o) in labels else p
    nx.draw_networkx_edge_labels(nx.DiGraph(list(labels)), pos, edge_labels=labels, ax=ax, font_size=6)
    ax.set_title(title)
    ax.axis("off")


def render_sgg(
    image: Image.Image,
    gt_objects: Any,
    gt_relationships: Any,
    completion: str | None,
    out_path: str | Path,
    model_family: str = "qwen2_vl",
    budget: PixelBudget | None = None,
) -> Path:
    """Write a 2x2 PNG: GT boxes, predicted boxes (mapped back to original pixels), GT and predicted graphs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gt_objs = json.loads(gt_objects) if isinstance(gt_objects, str) else list(gt_objects)
    gt_rels = json.loads(gt_relationships) if isinstance(gt_relationships, str) else list(gt_relationships)
    image = image.convert("RGB")
    pred_objs: list[dict] = []
    pred_rels: list[dict] = []
    title = "prediction"
    if completion is not None:
        parsed = parse_scene_graph(completion)
        if parsed.ok:
            frame = box_frame(model_family, image.size, None, budget)
            pred_objs = [
                {"id": o.id, "bbox": frame.to_original(frame.clip(o.box))} for o in parsed.graph.objects
            ]
            pred_rels = [
                {"subject": r.subject, "predicate": r.predicate, "object": r.object}
                for r in parsed.graph.relations
            ]
        else:
            title = f"prediction (parse failed: {parsed.error})"
    fig, axes = plt.subplots(2, 2, figsize=(12, 11))
    _draw_boxes(axes[0][0], image, gt_objs, "tab:green", "ground truth")
    _draw_boxes(axes[0][1], image, pred_objs, "tab:red", title)
    _draw_graph(
        axes[1][0], *_graph_parts(gt_objs, gt_rels), "#9be39b", f"GT graph ({len(gt_rels)} relations)"
    )
    _draw_graph(
        axes[1][1], *_graph_parts(pred_objs, pred_rels), "#f4a3a3", f"predicted graph ({len(pred_rels)})"
    )
    fig.tight_layout()
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def visualize_prediction(
    gt: str | Path,
    pred: str | Path | None,
    indices: list[int],
    out_dir: str | Path,
    split: str = "val",
    model_family: str | None = None,
) -> list[Path]:
    """``r1vision viz sgg``: one PNG per requested GT row, with the matching prediction when given."""

    rows, root = load_raw(gt, split)
    preds = read_predictions(pred) if pred is not None else {}
    out: list[Path] = []
    for i in indices:
        if not 0 <= i < len(rows):
            raise IndexError(f"row {i} is outside {gt} ({len(rows)} rows in split {split!r})")
        row = rows[i]
        record = preds.get(str(row["image_id"]))
        family = model_family or (record or {}).get("model_family") or "qwen2_vl"
        image = load_image(row["image"], root)
        completion = record.get("completion") if record else None
        out.append(
            render_sgg(
                image,
                row["objects"],
                row["relationships"],
                completion,
                Path(out_dir) / f"sgg_{row['image_id']}.png",
                model_family=family,
            )
        )
    return out
