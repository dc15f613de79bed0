"""Seeded SGG reward cases and the values the rewards gave before they were vectorised.

``python -m tests.helpers.sgg_golden`` rewrote ``tests/fixtures/sgg_reward_golden.json`` from the pre-vectorisation
code (commit 8605a90); ``tests/tasks/sgg/test_scorer.py`` checks today's rewards against it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "sgg_reward_golden.json"
NAMES = ["man", "horse", "hat", "tree", "car", "dog", "shirt", "table", "cup", "window", "red circle", "men"]
PREDS = ["on", "near", "riding", "wearing", "has", "under", "next to", "on top of"]
# (family, original size, image size the trainer recorded or None)
FRAMES = [
    ("qwen2_vl", (800, 600), None),
    ("qwen2_5_vl", (640, 480), (644, 476)),
    ("qwen3_vl", (300, 900), None),
]


def _box(rng: random.Random, w: float, h: float) -> list[float]:
    x, y = rng.uniform(0, w * 0.8), rng.uniform(0, h * 0.8)
    return [
        round(x, 1),
        round(y, 1),
        round(min(w, x + rng.uniform(5, w / 2)), 1),
        round(min(h, y + rng.uniform(5, h / 2)), 1),
    ]


def make_cases(n: int = 60, seed: int = 7) -> list[dict]:
    """Completions with label noise, jitter, drops, extras, plurals/synonyms, fences and failures."""
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        family, (w, h), resized = FRAMES[i % len(FRAMES)]
        n_obj = rng.randint(0, 12)
        objs = [{"id": f"{rng.choice(NAMES)}.{k}", "bbox": _box(rng, w, h)} for k in range(n_obj)]
        rels = []
        for _ in range(rng.randint(0, 2 * n_obj)):
            s, o = rng.choice(objs)["id"], rng.choice(objs)["id"]
            rels.append({"subject": s, "predicate": rng.choice(PREDS), "object": o})
        fw, fh = (1000, 1000) if family != "qwen2_5_vl" else resized
        pred_objs = []
        for o in objs:
            if rng.random() < 0.15:
                continue  # dropped
            name = o["id"] if rng.random() > 0.2 else f"{rng.choice(NAMES)}.{rng.randint(0, 9)}"
            jit = rng.choice([0, 0, 5, 40])
            b = [o["bbox"][0] * fw / w, o["bbox"][1] * fh / h, o["bbox"][2] * fw / w, o["bbox"][3] * fh / h]
            b = [round(v + rng.uniform(-jit, jit)) for v in b]
            b = [min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])]
            pred_objs.append({"id": name, "bbox": b})
        for k in range(rng.randint(0, 3)):  # hallucinated extras
            pred_objs.append({"id": f"{rng.choice(NAMES)}s.{50 + k}", "bbox": _box(rng, fw, fh)})
        rng.shuffle(pred_objs)
        ids = [o["id"] for o in pred_objs]
        pred_rels = []
        for r in rels:
            if ids and rng.random() < 0.8:
                s = r["subject"] if r["subject"] in ids else rng.choice(ids)
                o = r["object"] if r["object"] in ids else rng.choice(ids)
                p = r["predicate"] if rng.random() < 0.7 else rng.choice(PREDS)
                pred_rels.append({"subject": s, "predicate": p, "object": o})
        body = json.dumps({"objects": pred_objs, "relationships": pred_rels})
        shape = rng.random()
        if shape < 0.6:
            text = "<answer>" + body + "</answer>"
        elif shape < 0.7:
            text = "<think>look</think> <answer>```json\n" + body + "\n```</answer>"
        elif shape < 0.8:
            text = body[: rng.randint(1, len(body))]  # truncated, untagged
        elif shape < 0.9:
            text = [{"role": "assistant", "content": "<answer>" + body + "</answer> thanks"}]
        else:
            text = rng.choice(["", "no idea", "<answer>[]</answer>", '<answer>{"objects": 3}</answer>'])
        cases.append(
            {
                "family": family,
                "completion": text,
                "objects": json.dumps(objs),
                "relationships": json.dumps(rels),
                "original_image_sizes": [[w, h]],
                "image_sizes": [list(resized)] if resized else None,
            }
        )
    return cases


def reward_values(cases: list[dict]) -> dict[str, list[float]]:
    """Every SGG reward (default set, lenient format, F1 set) on ``cases``, grouped by family."""
    from r1vision.tasks.sgg.f1 import f1_rewards
    from r1vision.tasks.sgg.rewards import make_rewards

    out: dict[str, list[float]] = {}
    for family in sorted({c["family"] for c in cases}):
        sub = [c for c in cases if c["family"] == family]
        cols = {
            k: [c[k] for c in sub]
            for k in ("objects", "relationships", "original_image_sizes", "image_sizes")
        }
        comps = [c["completion"] for c in sub]
        specs = [("", s) for s in make_rewards(family, weights={"edge_hard": 1.0})]
        specs += [("lenient_", s) for s in make_rewards(family, strict_format=False) if s.name == "format"]
        specs += [("f1_", s) for s in f1_rewards(family)]
        for prefix, spec in specs:
            out[f"{family}/{prefix}{spec.name}"] = [
                float(v) for v in spec.func([None] * len(sub), comps, **cols)
            ]
    return out


if __name__ == "__main__":
    cases = make_cases()
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(
        json.dumps({"seed": 7, "n": len(cases), "values": reward_values(cases)}, indent=0) + "\n"
    )
    print(f"wrote {GOLDEN}")
