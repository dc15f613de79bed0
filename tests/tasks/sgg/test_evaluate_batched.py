"""The batched SGG evaluation: maximum matching, entry spans of R1-SGG's file, light imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from r1vision.tasks.sgg import recall
from r1vision.tasks.sgg.evaluate import evaluate_sgg
from r1vision.tasks.sgg.prediction_files import LazyEntries
from tests.helpers.paths import ROOT
from tests.helpers.sgg_rows import obj, rel, row


def _lsa_count(hit: np.ndarray, k: int) -> int:
    top = hit[:k]
    if not top.size:
        return 0
    rows, cols = linear_sum_assignment(-top.astype(np.float64))
    return int(top[rows, cols].sum())


@pytest.mark.parametrize("seed", range(20))
def test_first_recalled_is_a_maximum_matching_of_every_top_k(seed: int) -> None:
    rng = np.random.default_rng(seed)
    hits, gt_group = [], []
    for image in range(3):
        hit = rng.random((int(rng.integers(1, 12)), int(rng.integers(1, 8)))) < 0.35
        hits.append(hit)
        gt_group += [image] * hit.shape[1]
    pairs_c, pairs_g, n_c, n_g = [], [], 0, 0
    for hit in hits:
        c, g = np.nonzero(hit)
        pairs_c.append(c + n_c)
        pairs_g.append(g + n_g)
        n_c, n_g = n_c + hit.shape[0], n_g + hit.shape[1]
    rank = np.concatenate([np.arange(h.shape[0]) for h in hits])
    first = recall.first_recalled(
        n_g, np.concatenate(pairs_c), np.concatenate(pairs_g), rank, np.array(gt_group), exclusive=True
    )
    start = 0
    for hit in hits:
        mine = first[start : start + hit.shape[1]]
        for k in (1, 2, 3, 5, 8, 12):
            assert int((mine < k).sum()) == _lsa_count(hit, k)
        start += hit.shape[1]


def test_a_later_candidate_can_take_over_a_relation_through_an_augmenting_path() -> None:
    # candidate 0 hits both GT relations, candidate 1 only the first: a greedy first-come rule recalls
    # one relation, the one-to-one matching two (candidate 0 moves to the second relation)
    gt = [
        row(
            "a",
            [
                obj("man.1", [100, 100, 110, 110]),
                obj("horse.1", [0, 0, 10, 10]),
                obj("horse.2", [0, 0, 10, 16]),
            ],
            [rel("man.1", "riding", "horse.1"), rel("man.1", "riding", "horse.2")],
        )
    ]
    preds = {
        "a": {
            "relation_tuples": [
                ["man.1", [100, 100, 110, 110], "horse.1", [0, 0, 10, 13], "riding"],  # IoU .77 and .81
                ["man.1", [100, 100, 110, 110], "horse.2", [0, 0, 10, 7], "riding"],  # IoU .7 and .44
            ]
        }
    }
    assert evaluate_sgg(gt, preds)["R@20"] == 1.0
    assert evaluate_sgg(gt, preds, compat="r1sgg")["R@20"] == 1.0


def test_lazy_entries_find_every_entry_whatever_its_text() -> None:
    data = {
        "img1": {
            "names": ["man.1"],
            "relation_tuples": [["man.1", [0, 0, 1, 1], 'hat}, "x": {', [0, 0, 1, 1], "on"]],
        },
        "img2": {"graph": {"all_node_pairs": [[0, 1]], "all_relation": [[0, 1]]}, "names": ["a}", "b},"]},
        "img3": {"nested": {"a": {"b": {"c": {}}}}, "n": 12345678901234567890},
        "img4": {"s": "\\u00e9 } }, {"},
        "meta": [1, 2, {"x": "}"}],
        "img5": {},
    }
    for text in (json.dumps(data), json.dumps(data, indent=2), json.dumps(data, separators=(",", ":"))):
        lazy = LazyEntries(text, "x.json")
        assert lazy.other_keys == {"meta"}
        assert list(lazy) == ["img1", "img2", "img3", "img4", "img5"]
        for key in lazy:
            assert lazy[key] == dict(data[key], image_id=key)
        assert type(lazy["img3"]["n"]) is int


def test_lazy_entries_still_reject_a_changed_duplicate_and_bad_syntax() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        LazyEntries('{"a": {"x": 1}, "a": {"x": 2}}', "x.json")
    assert len(LazyEntries('{"a": {"x": 1}, "a": {"x": 1}}', "x.json")) == 1
    with pytest.raises(ValueError):
        LazyEntries('{"a": {"x": 1} "b": {}}', "x.json")
    with pytest.raises(ValueError):
        LazyEntries('{"a": {"x": 1}, "b": {"y": }}', "x.json")


def test_evaluation_imports_neither_scipy_nor_the_rewards() -> None:
    rows = [
        row("a", [obj("man.1", [0, 0, 9, 9]), obj("hat.1", [0, 0, 4, 4])], [rel("man.1", "wearing", "hat.1")])
    ]
    preds = {"a": {"relation_tuples": [["man.1", [0, 0, 9, 9], "hat.1", [0, 0, 4, 4], "wearing"]]}}
    code = (
        "import sys\nfrom r1vision.tasks import registry\nimport r1vision.tasks.sgg.task\n"
        "from r1vision.tasks.sgg.evaluate import evaluate_sgg\n"
        f"assert evaluate_sgg({rows!r}, {preds!r})['R@20'] == 1.0\n"
        "print(sorted(m for m in ('scipy', 'r1vision.tasks.sgg.rewards', 'datasets') if m in sys.modules))\n"
        "from r1vision.tasks.sgg import make_rewards, SGGScorer\nprint(callable(make_rewards))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["[]", "True"]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_lazy_entries_from_a_file_read_in_small_blocks(tmp_path, monkeypatch, newline) -> None:
    """The file is scanned a block at a time (blocks and window of a few bytes here, so entries, keys and
    multi-byte characters straddle block ends) and only byte spans are kept: the same entries as the text."""
    from r1vision.tasks.sgg import prediction_files as predictions

    data = {
        "img1": {"names": ["é}", "人"], "relation_tuples": [["a", [0, 0, 1, 1], "b", [1, 1, 2, 2], "on"]]},
        "im\u00e9 2": {"s": "😀 } }, {", "n": 12345678901234567890},
        "meta": [1, 2, {"x": "}"}],
        "img3": {},
    }
    text = json.dumps(data, indent=2, ensure_ascii=False).replace("\n", newline)
    (tmp_path / "p.json").write_bytes(text.encode("utf-8"))
    monkeypatch.setattr(predictions._Window, "BLOCK", 7)
    monkeypatch.setattr(predictions.LazyEntries, "WINDOW", 5)
    lazy = LazyEntries.from_file(tmp_path / "p.json")
    assert lazy._text is None and list(lazy) == ["img1", "im\u00e9 2", "img3"] and lazy.other_keys == {"meta"}
    for key in lazy:
        assert lazy[key] == dict(data[key], image_id=key)
    (tmp_path / "dup.json").write_text('{"a": {"x": 1},\n "a": {"x": 2}}')
    with pytest.raises(ValueError, match="appears twice"):
        LazyEntries.from_file(tmp_path / "dup.json")


@pytest.mark.parametrize("compat", [None, "r1sgg"])
def test_chunked_evaluation_gives_the_same_metrics(monkeypatch, compat) -> None:
    """Recall and box AP are computed a chunk of images at a time (memory flat in the dataset size); the
    chunk boundaries change nothing: chunks of 1 and 3 images give exactly the metrics of one chunk."""
    from r1vision.tasks.sgg import bbox_ap
    from r1vision.tasks.sgg import evaluate as ev
    from tests.helpers.paths import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from bench_sgg_eval import PREDICATES, make_set

    rows, preds = make_set(40, seed=3)
    got = []
    for chunk in (10**6, 3, 1):
        monkeypatch.setattr(ev.Collector, "CHUNK", chunk)
        monkeypatch.setattr(bbox_ap.BoxAP, "CHUNK", chunk)
        records: list = []
        got.append((evaluate_sgg(rows, preds, compat, split="train", predicates=PREDICATES, records=records),
                    records))  # fmt: skip
    assert got[0][0]["R@50"] > 0 and got[0][0]["AP"] > 0
    assert got[1] == got[0] and got[2] == got[0]
