"""R1-SGG parity of the evaluator: an independent reference computation of R1-SGG's
R/mR/zR on a crafted case with its edge cases, coverage and duplicate rules, box AP, ng-mR/ng-zR, export.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest

from r1vision.tasks.sgg.categories import load_vocabulary
from r1vision.tasks.sgg.evaluate import evaluate_sgg
from r1vision.tasks.sgg.export import export_r1sgg
from r1vision.tasks.sgg.prediction_files import read_predictions
from tests.helpers.sgg_rows import obj, rel, row

PREDICATES = list(load_vocabulary("vg150").predicates)


# Boxes whose +1-pixel IoU is 0.5 in float64 but 0.49999997 in float32 (a), and 0.49999999999999994 in
# float64 but 0.50000006 in float32 (b): R1-SGG computes on float32 tensors.
A_GT, A_PRED = [12.3, 12.3, 530.0, 448.3], [12.3, 12.3, 270.65, 448.3]
B_GT, B_PRED = [12.3, 12.3, 1519.0, 1870.6], [12.3, 12.3, 765.15, 1870.6]
HORSE = [600, 20, 900, 400]
GT = [
    row("a", [obj("man.1", A_GT), obj("horse.1", HORSE)],
        [rel("man.1", "riding", "horse.1"), rel("man.1", "near", "horse.1")]),
    row("b", [obj("man.1", B_GT), obj("horse.1", HORSE)],
        [rel("man.1", "riding", "horse.1"), rel("horse.1", "under", "man.1")]),
    row("c", [obj("dog.1", [0, 0, 10, 10]), obj("cat.1", [10, 10, 20, 20])], [rel("dog.1", "near", "cat.1")]),
    row("d", [obj("kid.1", [0, 0, 5, 5]), obj("kite.1", [5, 5, 50, 50])], [rel("kid.1", "holding", "kite.1")]),
    row("e", [obj("car.1", [0, 0, 10, 10]), obj("tree.1", [20, 0, 30, 10])], [rel("car.1", "near", "tree.1")]),
    row("f", [obj("cup.1", [0, 0, 5, 5]), obj("table.1", [0, 0, 50, 50])], [rel("cup.1", "on", "table.1")]),
]  # fmt: skip
PREDS = {
    "a": {"relation_tuples": [
        ["man.1", A_PRED, "horse.1", HORSE, "riding"],  # float64 hit, float32 miss
        ["man.1", A_GT, "horse.1", HORSE, "near"],  # hit
    ]},
    "b": {"relation_tuples": [
        ["man.1", B_PRED, "horse.1", HORSE, "riding"],  # float64 miss, float32 hit
        ["horse.1", HORSE, "man.1", B_GT, "under"],  # hit
    ]},
    "c": {"boxes": [[0.1, 0.2, 0.3, 0.4]], "labels": [0], "scores": [0], "names": ["unknown"]},  # placeholder
    "d": {"relation_tuples": [["kid.1", [30, 30, 40, 40], "kite.1", [5, 5, 50, 50], "holding"]]},  # box miss
    # "e" is absent; "f" parsed but no relation survived
    "f": {"relation_tuples": []},
}  # fmt: skip
ZERO_SHOT = {("horse", "under", "man")}


def _iou32(a, b):
    """+1-pixel IoU in float32 scalar arithmetic, written out independently of r1vision."""
    a, b = [np.float32(v) for v in a], [np.float32(v) for v in b]
    one, zero = np.float32(1), np.float32(0)
    iw = max(min(a[2], b[2]) - max(a[0], b[0]) + one, zero)
    ih = max(min(a[3], b[3]) - max(a[1], b[1]) + one, zero)
    inter = iw * ih
    union = (a[2] - a[0] + one) * (a[3] - a[1] + one) + (b[2] - b[0] + one) * (b[3] - b[1] + one) - inter
    return inter / union


def _reference(gt_rows, preds, k):
    """R1-SGG's R@K, mR@K (all 50 predicates), zR@K: placeholder images score 0, absent or relation-less
    predictions are not evaluated, any prediction may recall any GT relation."""
    recalls, zs, per_pred = [], [], defaultdict(list)
    for r in gt_rows:
        entry = preds.get(r["image_id"])
        if entry is None:
            continue
        is_placeholder = entry.get("names") == ["unknown"]
        tuples = entry.get("relation_tuples") or []
        if not tuples and not is_placeholder:
            continue
        boxes = {o["id"]: o["bbox"] for o in json.loads(r["objects"])}
        rels = json.loads(r["relationships"])
        hit = []
        for g in rels:
            ok = False
            for t in tuples[:k]:
                if (t[0].split(".")[0], t[4], t[2].split(".")[0]) != (
                    g["subject"].split(".")[0], g["predicate"], g["object"].split(".")[0]
                ):  # fmt: skip
                    continue
                if _iou32(boxes[g["subject"]], t[1]) >= 0.5 and _iou32(boxes[g["object"]], t[3]) >= 0.5:
                    ok = True
            hit.append(ok)
        recalls.append(sum(hit) / len(hit))
        for g, h in zip(rels, hit, strict=True):
            per_pred[g["predicate"]].append(h)
        z = [h for g, h in zip(rels, hit, strict=True)
             if (g["subject"].split(".")[0], g["predicate"], g["object"].split(".")[0]) in ZERO_SHOT]  # fmt: skip
        if z:
            zs.append(sum(z) / len(z))
    # per image and predicate, then the mean over images, then over all vocabulary predicates
    by_image = defaultdict(list)
    for r in gt_rows:
        entry = preds.get(r["image_id"])
        if entry is None or (not entry.get("relation_tuples") and entry.get("names") != ["unknown"]):
            continue
        rels = json.loads(r["relationships"])
        boxes = {o["id"]: o["bbox"] for o in json.loads(r["objects"])}
        tuples = entry.get("relation_tuples") or []
        cats = defaultdict(list)
        for g in rels:
            cats[g["predicate"]].append(
                any(
                    (t[0].split(".")[0], t[4], t[2].split(".")[0])
                    == (g["subject"].split(".")[0], g["predicate"], g["object"].split(".")[0])
                    and _iou32(boxes[g["subject"]], t[1]) >= 0.5
                    and _iou32(boxes[g["object"]], t[3]) >= 0.5
                    for t in tuples[:k]
                )
            )
        for p, v in cats.items():
            by_image[p].append(sum(v) / len(v))
    mr = sum(float(np.mean(by_image[p])) if by_image.get(p) else 0.0 for p in PREDICATES) / len(PREDICATES)
    return float(np.mean(recalls)), mr, float(np.mean(zs)) if zs else 0.0


def test_compat_recalls_equal_an_independent_r1sgg_computation_to_4_decimals():
    m = evaluate_sgg(GT, PREDS, compat="r1sgg", zero_shot=ZERO_SHOT)
    for k in (20, 50, 100):
        r, mr, zr = _reference(GT, PREDS, k)
        assert round(m[f"R@{k}"], 4) == round(r, 4)
        assert round(m[f"mR@{k}"], 4) == round(mr, 4)
        assert round(m[f"zR@{k}"], 4) == round(zr, 4)
    # a 1/2, b 2/2, c 0 (placeholder), d 0; e absent and f relation-less are not evaluated
    assert m["R@50"] == pytest.approx((0.5 + 1 + 0 + 0) / 4) and m["num_images"] == 4
    assert m["zR@50"] == 1.0  # horse under man (zero-shot) is recalled in b


def test_float32_decides_the_boxes_at_iou_one_half():
    assert _iou32(A_GT, A_PRED) < 0.5 <= _iou32(B_GT, B_PRED)
    a = evaluate_sgg(GT[:1], {"a": PREDS["a"]}, compat="r1sgg")
    b = evaluate_sgg(GT[1:2], {"b": PREDS["b"]}, compat="r1sgg")
    assert a["R@50"] == 0.5 and b["R@50"] == 1.0  # float64 would give 1.0 and 0.5


def test_ids_that_match_no_ground_truth_fail_loudly():
    wrong = {f"train_{k}": v for k, v in PREDS.items()}
    with pytest.raises(ValueError, match="none of the 5 prediction ids"):
        evaluate_sgg(GT, wrong)
    with pytest.raises(ValueError, match="no predictions"):
        evaluate_sgg(GT, {})
    with pytest.warns(UserWarning, match="cover 5 of 6"):
        m = evaluate_sgg(GT, PREDS)
    assert m["coverage"] == pytest.approx(5 / 6) and m["unmatched_predictions"] == 0


def test_cli_exits_non_zero_on_mismatched_ids(tmp_path):
    gt = tmp_path / "gt.jsonl"
    gt.write_text("".join(json.dumps(r) + "\n" for r in GT))
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps({f"x{k}": v for k, v in PREDS.items()}))
    proc = subprocess.run(
        [sys.executable, "-m", "r1vision.cli", "eval", "--task", "sgg", "--dataset", str(gt), "--pred", str(pred)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0 and "none of the 5 prediction ids" in proc.stderr


def _completion(objects, relations):
    return "<answer>" + json.dumps({"objects": objects, "relationships": relations}) + "</answer>"


def test_duplicates_follow_one_rule_for_folder_and_single_file(tmp_path):
    good = _completion(
        [obj("dog.1", [0, 0, 10, 10]), obj("cat.1", [10, 10, 20, 20])], [rel("dog.1", "near", "cat.1")]
    )
    bad = _completion([obj("dog.1", [50, 50, 60, 60])], [])
    recs = [
        {"index": 0, "image_id": "c", "completion": good},
        {"index": 1, "image_id": "c", "completion": bad},
    ]
    folder = tmp_path / "preds"
    folder.mkdir()
    (folder / "shard-00000.jsonl").write_text(json.dumps(recs[0]) + "\n")
    (folder / "shard-00001.jsonl").write_text(json.dumps(recs[1]) + "\n")
    single = tmp_path / "preds.jsonl"
    single.write_text("".join(json.dumps(r) + "\n" for r in recs))
    for path in (folder, single):
        with pytest.raises(ValueError, match="image id 'c' has two different prediction records"):
            read_predictions(path)
    r1 = tmp_path / "sgg_pred_results.json"  # R1-SGG's map: a repeated key is the same case
    r1.write_text(
        '{"c": {"relation_tuples": []}, "c": {"relation_tuples": [["a.1", [0, 0, 1, 1], "b.1", [0, 0, 1, 1], "on"]]}}'
    )
    with pytest.raises(ValueError, match="image id 'c' appears twice"):
        read_predictions(r1)
    r1.write_text('{"c": {"relation_tuples": []}, "d": {"relation_tuples": []}}')
    lazy = read_predictions(r1)
    assert sorted(lazy) == ["c", "d"] and lazy["c"] == {"relation_tuples": [], "image_id": "c"}
    same = tmp_path / "same.jsonl"  # an identical re-write is harmless and collapses
    same.write_text("".join(json.dumps(dict(recs[0], index=i)) + "\n" for i in range(2)))
    assert list(read_predictions(same)) == ["c"]


def _ap_reference(images, threshold):
    """COCO AP at one IoU threshold, straight from its definition (pycocotools' loops, scores all 1)."""
    cats = sorted({c for _, gts, _ in images for c, _ in gts})
    aps = []
    for cat in cats:
        npig = sum(1 for _, gts, _ in images for c, _ in gts if c == cat)
        flags = []
        for _, gts, dets in sorted(images, key=lambda x: x[0]):
            g = [b for c, b in gts if c == cat]
            used = [False] * len(g)
            for c, d in dets:
                if c != cat:
                    continue
                best, m = min(threshold, 1 - 1e-10), -1
                for j, gb in enumerate(g):
                    if used[j]:
                        continue
                    iw = min(d[2], gb[2]) - max(d[0], gb[0])
                    ih = min(d[3], gb[3]) - max(d[1], gb[1])
                    inter = iw * ih if iw > 0 and ih > 0 else 0.0
                    u = (d[2] - d[0]) * (d[3] - d[1]) + (gb[2] - gb[0]) * (gb[3] - gb[1]) - inter
                    iou = inter / u if u > 0 else 0.0
                    if iou >= best:
                        best, m = iou, j
                if m >= 0:
                    used[m] = True
                flags.append(m >= 0)
        tp = np.cumsum(flags)
        fp = np.cumsum([not f for f in flags])
        rc = tp / npig
        pr = list(tp / (tp + fp + np.spacing(1)))
        for i in range(len(pr) - 1, 0, -1):
            pr[i - 1] = max(pr[i - 1], pr[i])
        q = []
        for r in np.linspace(0, 1, 101):
            idx = int(np.searchsorted(rc, r, side="left"))
            q.append(pr[idx] if idx < len(pr) else 0.0)
        aps.append(np.mean(q))
    return float(np.mean(aps))


def test_box_ap_matches_the_coco_definition():
    from r1vision.tasks.sgg.bbox_ap import box_ap

    rng = np.random.default_rng(3)
    images = []
    for i in range(12):
        gts = [(str(rng.choice(["man", "dog", "car"])), _rand_box(rng)) for _ in range(rng.integers(1, 5))]
        dets = [(c, [v + rng.normal(0, 6) for v in b]) for c, b in gts if rng.random() < 0.8]
        dets += [(str(rng.choice(["man", "dog", "tree"])), _rand_box(rng)) for _ in range(rng.integers(0, 3))]
        dets = [(c, [min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])]) for c, b in dets]
        images.append((f"img{i:02d}", gts, dets))
    got = box_ap(images)
    ref = [_ap_reference(images, t) for t in np.linspace(0.5, 0.95, 10)]
    assert got["AP50"] == pytest.approx(ref[0], abs=1e-12) and got["AP75"] == pytest.approx(ref[5], abs=1e-12)
    assert got["AP"] == pytest.approx(np.mean(ref), abs=1e-12)
    assert 0 < got["AP"] < got["AP50"] <= 1


def _rand_box(rng):
    x, y = rng.uniform(0, 200, 2)
    return [float(x), float(y), float(x + rng.uniform(10, 80)), float(y + rng.uniform(10, 80))]


def test_eval_reports_box_ap_and_no_graph_constraint_mean_and_zero_shot_recall():
    m = evaluate_sgg(GT, PREDS, compat="r1sgg", zero_shot=ZERO_SHOT)
    for key in ("AP", "AP50", "AP75", "ng-mR@50", "ng-zR@50"):
        assert key in m
    # b recalls horse-under-man (zero-shot); the no-graph-constraint list only adds candidates
    assert m["ng-zR@50"] == 1.0 and m["ng-mR@100"] >= m["mR@100"]


def test_exported_predictions_read_back_to_the_same_metrics(tmp_path):
    rows = [
        row("1", [obj("man.1", [0, 0, 100, 200]), obj("horse.1", [100, 0, 300, 200])], [rel("man.1", "riding", "horse.1")]),
        row("2", [obj("dog.1", [0, 0, 50, 50]), obj("car.1", [60, 0, 90, 50])], [rel("dog.1", "near", "car.1")]),
        row("3", [obj("tree.1", [0, 0, 50, 50])], []),
    ]  # fmt: skip
    size = [[300, 200]]
    preds = {
        "1": {"completion": _completion([obj("man.1", [0, 0, 333, 1000]), obj("horse.1", [333, 0, 1000, 1000])],
                                        [rel("man.1", "riding", "horse.1")]), "original_image_size": size[0]},
        "2": {"completion": "sorry", "original_image_size": [90, 50]},
        "3": {"completion": _completion([obj("tree.1", [0, 0, 555, 1000])], []), "original_image_size": [90, 50]},
    }  # fmt: skip
    out = export_r1sgg(rows, preds, tmp_path / "sgg_pred_results.json", model_family="qwen2_vl")
    data = json.loads(out.read_text())
    assert data["2"]["names"] == ["unknown"] and data["2"]["graph"]["all_node_pairs"] == [[0, 0]]
    assert data["1"]["relation_tuples"][0][0] == "man" and data["1"]["relation_tuples"][0][4] == "riding"
    assert data["1"]["names"] == ["man.1", "horse.1"]
    assert data["1"]["boxes"][0] == pytest.approx([0.0, 0.0, 99.9, 200.0])  # 333 * 300 / 1000, as R1-SGG maps
    onehot = data["1"]["graph"]["all_relation"][0]
    assert len(onehot) == 51 and onehot[PREDICATES.index("riding") + 1] == 1
    ours = evaluate_sgg(rows, preds, compat="r1sgg", model_family="qwen2_vl")
    theirs = evaluate_sgg(rows, read_predictions(out), compat="r1sgg")
    for key in ("R@50", "mR@50", "ngR@50", "AP50", "num_images"):
        assert theirs[key] == pytest.approx(ours[key]), key
    assert ours["num_images"] == 2  # image 1 (recall 1) and the unparsable image 2 (recall 0)


def test_cli_exports_r1sgg_format_through_task_options(tmp_path):
    from r1vision.cli import main

    gt = tmp_path / "gt.jsonl"
    gt.write_text("".join(json.dumps(r) + "\n" for r in GT))
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps(PREDS))
    out = tmp_path / "export" / "sgg_pred_results.json"
    args = ["eval", "--task", "sgg", "--dataset", str(gt), "--pred", str(pred), "--split", "train"]
    with pytest.warns(UserWarning, match="cover 5 of 6"):
        assert main([*args, "--task_options", json.dumps({"export_r1sgg": str(out)})]) == 0
    data = json.loads(out.read_text())
    assert sorted(data) == ["a", "b", "c", "d", "f"] and data["c"]["names"] == ["unknown"]


# ------------------------------------------------------------------------- R1-SGG's gatherer (HEAD)
_SIZE = [1000, 1000]  # 0-1000 boxes map to the same pixels
_TWO = [obj("man.1", [0, 0, 500, 1000]), obj("horse.1", [500, 0, 1000, 1000])]


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ('<answer>{"objects": [{"id": "man.1", "bbox": [0, 0, 5, 5]}], "relationships": []}</answer>', True),
        ('<answer>```json\n{"objects": [{"id": "man.1", "bbox": [0, 0, 5, 5]}], "relationships": []}\n```</answer>', True),
        ('<answer>{"objects": [{"id": "man.1", "bbox": [0, 0, 5, true]}], "relationships": []}</answer> trailing', True),
        ('<answer>{"objects": [{"id": "man.1", "bbox": [0, 0, 5, NaN]}], "relationships": []}', True),
        ('<answer>{"objects": [{"id": "man.1", "bbox": [0, 0, 5]}], "relationships": []}</answer>', False),
        ('<answer>{"objects": [{"id": 7, "bbox": [0, 0, 5, 5]}], "relationships": []}</answer>', False),
        ('<answer>{"objects": [{"id": "man.1", "bbox": [0, 0, 5, 5]}], "relationships": ["man.1 -> on -> man.1"]}</answer>', False),
        ('<answer>{"objects": [{"id": "man.1", "bbox": [0, 0, 5, 5]}]}</answer>', False),
        ('<answer>{"objects": [{"id": "man.1", "bbox": [0, 0, 5, 5]}], "relationships": [', False),
        ('<answer>{"objects": [{"id": "unicorn.1", "bbox": [0, 0, 5, 5]}], "relationships": []}</answer>', False),
    ],
)  # fmt: skip
def test_the_answer_shapes_r1sggs_gatherer_accepts_and_no_others(text, accepted):
    from r1vision.tasks.sgg.boxes import box_frame
    from r1vision.tasks.sgg.r1sgg import gather

    vocab = load_vocabulary("vg150")
    got = gather(text, box_frame("qwen2_vl", _SIZE), vocab.objects, vocab.predicates)
    assert (got is not None) is accepted


def test_objects_with_an_empty_relation_list_are_left_out_of_recall_and_kept_in_box_ap():
    """R1-SGG's evaluator skips an image without predicted relations (its gatherer keeps the objects); an
    image whose answer it rejects is a placeholder with recall 0."""
    gt = [
        row("1", _TWO, [rel("man.1", "riding", "horse.1")]),
        row("2", _TWO, [rel("man.1", "riding", "horse.1")]),
    ]
    hit = _completion(_TWO, [rel("man.1", "riding", "horse.1")])
    empty = _completion(_TWO, [])
    size = {"original_image_size": _SIZE}
    m = evaluate_sgg(gt, {"1": {"completion": hit, **size}, "2": {"completion": empty, **size}},
                     compat="r1sgg", model_family="qwen2_vl")  # fmt: skip
    assert m["R@50"] == 1.0 and m["num_images"] == 1  # image 2: no predicted relation, not counted
    # image 2's objects are detections too; R1-SGG numbers the dataset's first box (image 1's man) 0, which
    # pycocotools reads as "unmatched": that detection is a false positive (man: 0.5 precision to recall 0.5)
    assert m["AP50"] == pytest.approx((1.0 + 0.5 * 51 / 101) / 2)
    right = evaluate_sgg(gt, {"1": {"completion": hit, **size}, "2": {"completion": empty, **size}},
                         model_family="qwen2_vl")  # fmt: skip
    assert right["AP50"] == 1.0  # the default mode counts the first box right
    rejected = evaluate_sgg(gt, {"1": {"completion": hit, **size}, "2": {"completion": "sorry", **size}},
                            compat="r1sgg", model_family="qwen2_vl")  # fmt: skip
    assert rejected["R@50"] == 0.5 and rejected["num_images"] == 2
    # COCO: horse precision 1 at recall 0 to 0.5 of 101 points; man only the uncredited first box: 0
    assert rejected["AP50"] == pytest.approx(51 / 101 / 2)


def test_no_graph_constraint_ranks_ties_as_r1sggs_argsort():
    """R1-SGG ranks each (pair, predicate) of the one-hot scores with numpy's unstable argsort: the zero-score
    entries fill the top K after the emitted ones, in the order that sort gives, and can recall a GT
    relation the answer never stated."""
    gt = [row("1", _TWO, [rel("man.1", "riding", "horse.1")])]
    said = ["on", "near", "has"]
    answer = _completion(_TWO, [rel("man.1", p, "horse.1") for p in said])
    m = evaluate_sgg(gt, {"1": {"completion": answer, "original_image_size": _SIZE}}, compat="r1sgg",
                     model_family="qwen2_vl")  # fmt: skip
    scores = np.zeros((len(said), len(PREDICATES)))
    scores[np.arange(len(said)), [PREDICATES.index(p) for p in said]] = 1.0
    _, cols = np.unravel_index(np.argsort(-scores.ravel())[:100], scores.shape)  # R1-SGG's argsort_desc
    riding = PREDICATES.index("riding")
    first = next(rank for rank, c in enumerate(cols.tolist()) if c == riding)
    assert m["R@100"] == 0.0  # the graph-constrained ranking holds the stated predicates only
    for k in (20, 50, 100):
        assert m[f"ngR@{k}"] == float(first < k), k


def test_our_records_are_read_lazily_from_their_files(tmp_path, caplog):
    """A folder of shards or a .jsonl is indexed (file, byte offset, length), not held: a record is decoded
    from its file when asked for, with non-ASCII text, a torn last line skipped and the first of two equal
    records kept."""
    import logging

    from r1vision.tasks.sgg.prediction_files import LazyRecords

    recs = [{"index": i, "image_id": f"im{i}", "completion": f"<answer>é 人 {i}</answer>"} for i in range(3)]
    folder = tmp_path / "preds"
    folder.mkdir()
    (folder / "shard-00000.jsonl").write_text(json.dumps(recs[0], ensure_ascii=False) + "\n"
                                              + json.dumps(recs[2]) + "\n", encoding="utf-8")  # fmt: skip
    (folder / "shard-00001.jsonl").write_text(
        json.dumps(recs[1]) + "\n" + json.dumps(dict(recs[2], index=7)) + "\n" + '{"index": 9, "ima'
    )
    with caplog.at_level(logging.WARNING):
        lazy = read_predictions(folder)
    assert isinstance(lazy, LazyRecords) and "torn last line" in caplog.text
    assert sorted(lazy) == ["im0", "im1", "im2"] and lazy["im2"]["index"] == 2
    assert [lazy[f"im{i}"] for i in range(3)] == recs
    # decoded from the file on access: a record rewritten in place (same length) reads the new text
    shard = folder / "shard-00001.jsonl"
    shard.write_text(shard.read_text().replace(" 1</answer>", " X</answer>"))
    assert lazy["im1"]["completion"] == "<answer>é 人 X</answer>"
