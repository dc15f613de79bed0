"""`r1vision synth sgg`: procedurally drawn scenes with exact scene-graph ground truth.

Coloured shapes are drawn in order (later ones occlude earlier ones); every object's box is the bounding
box of its *visible* pixels and every relation is computed from the drawn geometry:

- ``left of`` / ``above``: the subject's box lies entirely left of / above the object's box;
- ``inside``: the subject's shape lies within the object's shape and was drawn over it;
- ``on``: the subject's shape overlaps the object's shape and was drawn over it (not inside);
- ``near``: boxes do not overlap and their gap is below ``near_factor`` x the mean object side (once per
  pair, lower index first);
- ``bigger than``: the subject's drawn area is at least ``bigger_ratio`` times the object's.

Rows follow the schema of ``JosephZ/vg150_*_sgg_prompt`` and are written to ``OUT/{split}.parquet`` (the
image embedded as ``datasets.Image``), with the scene vocabulary in ``OUT/vocab.json``.
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from r1vision.tasks.sgg.categories import SYNTH_COLORS, SYNTH_PREDICATES, SYNTH_SHAPES
from r1vision.tasks.sgg.prompts import build_prompt

COLOR_RGB = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (240, 220, 40),
    "purple": (140, 60, 180),
    "orange": (245, 140, 30),
    "white": (250, 250, 250),
    "black": (15, 15, 15),
}


@dataclass(frozen=True)
class SceneConfig:
    """Difficulty knobs of the generator. ``width``/``height`` are a fixed size or an inclusive range."""

    width: int | tuple[int, int] = (320, 640)
    height: int | tuple[int, int] = (320, 640)
    min_objects: int = 2
    max_objects: int = 5
    shapes: tuple[str, ...] = SYNTH_SHAPES
    colors: tuple[str, ...] = SYNTH_COLORS
    predicates: tuple[str, ...] = SYNTH_PREDICATES
    size_range: tuple[float, float] = (0.15, 0.4)  # object side as a fraction of the shorter image side
    grid: int | None = None  # place objects in distinct cells of a grid x grid layout
    cell_fill: tuple[float, float] = (0.85, 1.0)  # object side as a fraction of the cell side (grid mode)
    occlusion: bool = True
    inside_prob: float = 0.2  # chance to nest a new object inside an earlier, large one
    min_visible: float = 0.4  # minimum visible share of each object's drawn area
    name_style: str = "color_shape"  # or "shape"
    background: tuple[int, int, int] = (128, 128, 128)
    near_factor: float = 0.5
    bigger_ratio: float = 2.0
    # Compositional splits: names ("red triangle") never (or rarely: exclude_rate) drawn, and names of
    # which every scene has one.
    exclude_names: tuple[str, ...] = ()
    require_names: tuple[str, ...] = ()
    exclude_rate: float = 1.0  # <1: an excluded name is still drawn at (1 - rate) x its natural rate

    def __post_init__(self) -> None:
        if not 1 <= self.min_objects <= self.max_objects:
            raise ValueError(
                f"need 1 <= min_objects <= max_objects, got {self.min_objects}, {self.max_objects}"
            )
        if self.grid is not None and self.max_objects > self.grid * self.grid:
            raise ValueError(f"max_objects={self.max_objects} exceeds the {self.grid}x{self.grid} grid")
        bad = set(self.shapes) - set(SYNTH_SHAPES) or set(self.colors) - set(COLOR_RGB)
        bad = bad or set(self.predicates) - set(SYNTH_PREDICATES)
        if bad:
            raise ValueError(f"unknown shape/colour/predicate(s): {sorted(bad)}")
        if self.name_style not in ("color_shape", "shape"):
            raise ValueError("name_style must be 'color_shape' or 'shape'")
        names = set(self.object_names())
        for field_name in ("exclude_names", "require_names"):
            unknown = set(getattr(self, field_name)) - names
            if unknown:
                raise ValueError(f"{field_name}: {sorted(unknown)} are not object names of this scene config")
        if not 0.0 <= self.exclude_rate <= 1.0:
            raise ValueError(f"exclude_rate must be in [0, 1], got {self.exclude_rate}")
        if set(self.exclude_names) & set(self.require_names):
            raise ValueError("a name cannot be both excluded and required")
        if not names - set(self.exclude_names):
            raise ValueError("exclude_names leaves no object to draw")

    def name_of(self, color: str, shape: str) -> str:
        """An object's category name under ``name_style`` ("red triangle" or "triangle")."""
        return f"{color} {shape}" if self.name_style == "color_shape" else shape

    def pick(self, rng: random.Random, avoid_colors: set[str], required: bool) -> tuple[str, str]:
        """A (shape, colour) pair allowed by ``exclude_names`` (from ``require_names`` when ``required``)."""
        excluded = self.exclude_names
        if self.exclude_rate < 1.0 and rng.random() >= self.exclude_rate:
            excluded = ()
        pairs = [
            (s, c)
            for s in self.shapes
            for c in self.colors
            if self.name_of(c, s) not in excluded
            and (not required or self.name_of(c, s) in self.require_names)
        ]
        preferred = [(s, c) for s, c in pairs if c not in avoid_colors]
        return rng.choice(preferred or pairs)

    def object_names(self) -> list[str]:
        if self.name_style == "shape":
            return list(self.shapes)
        return [self.name_of(c, s) for c in self.colors for s in self.shapes]


PRESETS: dict[str, SceneConfig] = {
    "default": SceneConfig(),
    # 84x84 images, 1-3 shapes on a 3x3 grid filling >=85% of their cell: learnable by a ~0.6M-param model.
    "demo": SceneConfig(
        width=84,
        height=84,
        min_objects=1,
        max_objects=3,
        shapes=("circle", "square", "triangle"),
        colors=("red", "green", "blue"),
        predicates=("left of", "above"),
        grid=3,
        occlusion=False,
        inside_prob=0.0,
        background=(255, 255, 255),
    ),
    "hard": SceneConfig(min_objects=4, max_objects=8, size_range=(0.1, 0.45), inside_prob=0.3),
}


def _shape_points(shape: str, box: tuple[float, float, float, float]) -> list[tuple[float, float]] | None:
    x0, y0, x1, y1 = box
    cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    if shape == "triangle":
        return [(cx, y0), (x1, y1), (x0, y1)]
    if shape == "diamond":
        return [(cx, y0), (x1, cy), (cx, y1), (x0, cy)]
    if shape == "hexagon":
        return [(cx + rx * np.cos(a), cy + ry * np.sin(a)) for a in np.linspace(0, 2 * np.pi, 7)[:-1]]
    return None


def _draw(draw: ImageDraw.ImageDraw, shape: str, box: tuple[float, float, float, float], fill: Any) -> None:
    pts = _shape_points(shape, box)
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "square":
        draw.rectangle(box, fill=fill)
    else:
        draw.polygon(pts, fill=fill)


def _size(value: int | tuple[int, int], rng: random.Random) -> int:
    return value if isinstance(value, int) else rng.randint(value[0], value[1])


def _place(cfg: SceneConfig, rng: random.Random, w: int, h: int) -> list[tuple[float, float, float, float]]:
    k = rng.randint(cfg.min_objects, cfg.max_objects)
    boxes: list[tuple[float, float, float, float]] = []
    if cfg.grid:
        cw, ch = w / cfg.grid, h / cfg.grid
        for cell in rng.sample(range(cfg.grid * cfg.grid), k):
            r, c = divmod(cell, cfg.grid)
            side = min(cw, ch) * rng.uniform(*cfg.cell_fill)
            x0 = c * cw + rng.uniform(0, cw - side)
            y0 = r * ch + rng.uniform(0, ch - side)
            boxes.append((x0, y0, x0 + side, y0 + side))
        return boxes
    short = min(w, h)
    for _ in range(k):
        for _attempt in range(50):
            hosts = [b for b in boxes if b[2] - b[0] >= 0.25 * short]
            if hosts and rng.random() < cfg.inside_prob:
                hb = rng.choice(hosts)
                hs = hb[2] - hb[0]
                side = hs * rng.uniform(0.2, 0.3)
                cx = (hb[0] + hb[2]) / 2 + rng.uniform(-0.05, 0.05) * hs
                cy = (hb[1] + hb[3]) / 2 + rng.uniform(0.0, 0.1) * hs
                box = (cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2)
            else:
                side = short * rng.uniform(*cfg.size_range)
                x0, y0 = rng.uniform(0, w - side), rng.uniform(0, h - side)
                box = (x0, y0, x0 + side, y0 + side)
            overlaps = any(
                not (box[2] <= b[0] or b[2] <= box[0] or box[3] <= b[1] or b[3] <= box[1]) for b in boxes
            )
            if cfg.occlusion or not overlaps:
                boxes.append(box)
                break
    return boxes


def _relations(cfg: SceneConfig, objs: list[dict[str, Any]]) -> list[tuple[int, str, int]]:
    rels = []
    for i, a in enumerate(objs):
        for j, b in enumerate(objs):
            if i == j:
                continue
            ba, bb = a["box"], b["box"]
            found = set()
            if ba[2] <= bb[0]:
                found.add("left of")
            if ba[3] <= bb[1]:
                found.add("above")
            overlap = int(np.logical_and(a["mask"], b["mask"]).sum())
            if a["order"] > b["order"] and overlap > 0:
                found.add("inside" if overlap >= 0.98 * a["area"] else "on")
            boxes_overlap = not (ba[2] <= bb[0] or bb[2] <= ba[0] or ba[3] <= bb[1] or bb[3] <= ba[1])
            gap = max(bb[0] - ba[2], ba[0] - bb[2], bb[1] - ba[3], ba[1] - bb[3], 0)
            mean_side = np.mean([ba[2] - ba[0], ba[3] - ba[1], bb[2] - bb[0], bb[3] - bb[1]])
            if i < j and not boxes_overlap and gap < cfg.near_factor * mean_side:
                found.add("near")
            if a["area"] >= cfg.bigger_ratio * b["area"]:
                found.add("bigger than")
            rels.extend((i, p, j) for p in cfg.predicates if p in found)
    return rels


def generate_scene(cfg: SceneConfig, rng: random.Random) -> tuple[Image.Image, list[dict], list[dict]]:
    """One image with its objects (``id``, ``bbox`` in pixels) and relationships, as in the dataset schema."""
    w, h = _size(cfg.width, rng), _size(cfg.height, rng)
    for _attempt in range(100):
        boxes = _place(cfg, rng, w, h)
        image = Image.new("RGB", (w, h), cfg.background)
        ids = Image.new("L", (w, h), 0)
        draw, draw_ids = ImageDraw.Draw(image), ImageDraw.Draw(ids)
        objs = []
        colors: list[str] = []
        forced = rng.randrange(len(boxes)) if cfg.require_names else -1
        for order, box in enumerate(boxes):
            # Overlapping shapes get distinct colours when possible, so the picture stays unambiguous.
            touching = {
                c
                for b, c in zip(boxes, colors, strict=False)
                if not (box[2] <= b[0] or b[2] <= box[0] or box[3] <= b[1] or b[3] <= box[1])
            }
            if cfg.exclude_names or cfg.require_names:
                shape, color = cfg.pick(rng, touching, required=order == forced)
            else:  # the original draw order, so existing seeds give the same scenes
                shape = rng.choice(cfg.shapes)
                color = rng.choice([c for c in cfg.colors if c not in touching] or list(cfg.colors))
            colors.append(color)
            mask_img = Image.new("1", (w, h), 0)
            _draw(ImageDraw.Draw(mask_img), shape, box, 1)
            _draw(draw, shape, box, COLOR_RGB[color])
            _draw(draw_ids, shape, box, order + 1)
            mask = np.asarray(mask_img, dtype=bool)
            name = cfg.name_of(color, shape)
            objs.append({"name": name, "order": order, "mask": mask, "area": int(mask.sum())})
        id_map = np.asarray(ids)
        ok = True
        for o in objs:
            ys, xs = np.nonzero(id_map == o["order"] + 1)
            if o["area"] == 0 or len(xs) < cfg.min_visible * o["area"]:
                ok = False
                break
            o["box"] = [int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1]
        if ok:
            break
    else:
        raise RuntimeError("could not place visible objects; relax min_visible or the object count")
    # Reading order (top-to-bottom, left-to-right), so targets are canonical for a given picture.
    objs.sort(key=lambda o: (o["box"][1] // max(h // (cfg.grid or 8), 1), o["box"][0], o["order"]))
    counts: dict[str, int] = {}
    for o in objs:
        counts[o["name"]] = counts.get(o["name"], 0) + 1
        o["id"] = f"{o['name']}.{counts[o['name']]}"
    objects = [{"id": o["id"], "bbox": o["box"]} for o in objs]
    relationships = [
        {"subject": objs[i]["id"], "predicate": p, "object": objs[j]["id"]}
        for i, p, j in _relations(cfg, objs)
    ]
    return image, objects, relationships


def make_config(preset: str = "default", **overrides: Any) -> SceneConfig:
    """A preset (``default``, ``demo``, ``hard``) with field overrides (lists become tuples)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items() if v is not None}
    unknown = set(fields) - set(asdict(PRESETS[preset]))
    if unknown:
        raise ValueError(f"unknown scene option(s) {sorted(unknown)}")
    return replace(PRESETS[preset], **fields)


def synth_rows(
    n: int, seed: int = 0, split: str = "train", cfg: SceneConfig | None = None
) -> list[dict[str, Any]]:
    """``n`` rows in the dataset schema (image as PNG bytes). Row ``i`` depends only on (seed, split, i)."""
    cfg = cfg or SceneConfig()
    prompt_open = build_prompt()
    prompt_close = build_prompt(objects=cfg.object_names(), predicates=list(cfg.predicates))
    rows = []
    for i in range(n):
        rng = random.Random(f"r1vision-sgg/{seed}/{split}/{i}")
        image, objects, relationships = generate_scene(cfg, rng)
        buf = io.BytesIO()
        image.save(buf, format="PNG")
        rows.append(
            {
                "image_id": f"synth-{split}-{seed}-{i:06d}",
                "image": {"bytes": buf.getvalue(), "path": None},
                "prompt_open": prompt_open,
                "prompt_close": prompt_close,
                "objects": json.dumps(objects),
                "relationships": json.dumps(relationships),
            }
        )
    return rows


def synth_sgg(
    out_dir: str | Path, n: int, seed: int = 0, split: str = "train", preset: str = "default", **opts: Any
) -> Path:
    """Write ``OUT/{split}.parquet`` (+ ``OUT/vocab.json``) with ``n`` synthetic scenes; return ``OUT``."""
    import datasets

    cfg = make_config(preset, **opts)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    features = datasets.Features(
        {
            "image_id": datasets.Value("string"),
            "image": datasets.Image(),
            "prompt_open": datasets.Value("string"),
            "prompt_close": datasets.Value("string"),
            "objects": datasets.Value("string"),
            "relationships": datasets.Value("string"),
        }
    )
    rows = synth_rows(n, seed, split, cfg)
    columns = {k: [r[k] for r in rows] for k in features}
    datasets.Dataset.from_dict(columns, features=features).to_parquet(str(out / f"{split}.parquet"))
    vocab = {
        "benchmark": f"synth-{preset}",
        "objects": cfg.object_names(),
        "predicates": list(cfg.predicates),
    }
    (out / "vocab.json").write_text(json.dumps(vocab, indent=1), encoding="utf-8")
    return out
