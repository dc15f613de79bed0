"""Synthetic SVG figures (determinism, VFig schema), loading into trainer format, evaluation and contact sheets."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from r1vision.tasks.base import RunContext
from r1vision.tasks.loading import DatasetLoadError
from r1vision.tasks.svg.sanitize import sanitize
from r1vision.tasks.svg.task import SVGTask
from tests.helpers.tasks import task_rows


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("svgsynth")
    return SVGTask().synth(root / "a", 4, seed=3), SVGTask().synth(root / "b", 4, seed=3), root


def test_synth_is_deterministic_and_follows_vfig_schema(synth):
    a, b, root = synth
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.to_pylist() == tb.to_pylist()
    for row in ta.to_pylist():
        png = row["reward_model"]["ground_truth"]
        assert (a.parent / png).read_bytes() == (b.parent / png).read_bytes()
        assert row["images"] == [png]
        with Image.open(a.parent / png) as im:
            assert list(im.size) == row["extra_info"]["png_size"]
            assert len(np.unique(np.asarray(im.convert("L")))) > 2  # something was drawn
        assert "<image>" in row["prompt"][0]["content"]
        assert sanitize(row["response"]).ok
        assert "marker-end" in row["response"] and "<text" in row["response"]
    assert set(ta.column_names) >= {"prompt", "response", "images", "reward_model", "extra_info"}
    other = SVGTask().synth(root / "c", 4, seed=4)
    assert pq.read_table(other).column("response").to_pylist() != ta.column("response").to_pylist()


def test_load_vfig_rows_into_trainer_format(synth):
    a, _, _ = synth
    ds = task_rows("svg", a.parent, "train", family="qwen3_vl")
    assert len(ds) == 4
    row = ds[0]
    raw = pq.read_table(a).to_pylist()[0]
    assert row["prompt"][0]["role"] == "user"
    assert [p["type"] for p in row["prompt"][0]["content"]] == ["image", "text"]
    assert row["completion"][0]["content"][0]["text"] == raw["response"] == row["svg_gt"]
    assert row["gt_image"] == str((a.parent / raw["reward_model"]["ground_truth"]).resolve())
    assert row["png_size"] == raw["extra_info"]["png_size"]
    assert SVGTask().sft_target(row, SVGTask.Options(), RunContext()) == raw["response"]


def test_load_with_column_mapping_and_image_root(tmp_path, synth):
    a, _, _ = synth
    raw = pq.read_table(a).to_pylist()
    with (tmp_path / "train.jsonl").open("w") as f:
        for r in raw:
            f.write(
                json.dumps(
                    {"figure": r["images"][0], "code": r["response"], "key": f"k{r['extra_info']['index']}"}
                )
                + "\n"
            )
    ds = task_rows(
        "svg",
        tmp_path / "train.jsonl",
        columns={"image": "figure", "svg": "code", "id": "key"},
        image_root=str(a.parent),
    )
    assert ds[1]["id"] == "k1" and ds[1]["svg_gt"] == raw[1]["response"]
    assert ds[1]["gt_image"] == str(a.parent / raw[1]["images"][0])


def test_bad_rows_name_the_row_and_field(tmp_path, synth):
    a, _, _ = synth
    rows = pq.read_table(a).to_pylist()[:2]
    rows[1]["response"] = "not an svg"
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    with pytest.raises(DatasetLoadError, match=r"row 1: 'response'"):
        task_rows("svg", tmp_path)
    with pytest.raises(DatasetLoadError, match="missing column"):
        task_rows("svg", tmp_path, columns={"image": "nope", "svg": "response"})


def test_evaluate_and_contact_sheet(tmp_path, synth):
    a, _, _ = synth
    ds = task_rows("svg", a.parent)
    rows = [ds[i] for i in range(4)]
    completions = [rows[0]["svg_gt"], rows[1]["svg_gt"], "no svg", rows[3]["svg_gt"].replace("</svg>", "")]
    opts = SVGTask.parse_options({"contact_sheet": str(tmp_path / "sheet.png"), "sheet_n": 4})
    result = SVGTask().evaluate(rows, completions, opts, RunContext())
    m = result.metrics
    assert m["render_rate"] == 0.5 and m["fail_no_svg"] == 0.25 and m["fail_truncated"] == 0.25
    # the ground-truth PNG is resampled to the comparison canvas, the prediction rendered at it: near 1, not 1
    for key in ("ssim_standard", "ssim_reward"):
        assert m[f"{key}_rendered"] == pytest.approx(1.0, abs=2e-2) and m[key] == pytest.approx(0.5, abs=1e-2)
    assert m["edge_rendered"] > 0.95 and m["mse"] < 1e-3
    assert [r["rendered"] for r in result.records] == [True, True, False, False]
    with Image.open(tmp_path / "sheet.png") as sheet:
        assert sheet.size == (2 * (2 * 256 + 12), 40 + 2 * (256 + 34 + 8))
