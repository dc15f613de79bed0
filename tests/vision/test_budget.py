"""One pixel-budget rule for SFT targets, trainers, vLLM and infer, on the real Hub processor configs.

With Qwen3-VL's real preprocessor (``shortest_edge`` 65536) a max-only budget failed, and
with Qwen2.5-VL's real processor and ``max_pixels`` unset the SFT targets were written in a 1148x840 frame
while the model saw 1596x1204 (two resolvers with different fallbacks).
"""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from r1vision.vision.budget import (
    PixelBudget,
    apply_budget_to_processor,
    processor_pixels,
    resized_size,
    resolve_budget,
)
from tests.helpers.paths import ROOT
from tests.helpers.realcfg import hub_folder


def _model_folder(tmp_path: Path, family: str) -> Path:
    """A folder with the real Hub config / processor / tokenizer files of ``family`` (no weights needed)."""
    return hub_folder(family, tmp_path / family)


def test_processor_pixels_reads_both_hub_spellings(tmp_path: Path) -> None:
    assert processor_pixels(_model_folder(tmp_path, "qwen3_vl")) == (65536, 16777216)
    assert processor_pixels(_model_folder(tmp_path, "qwen2_5_vl")) == (3136, 12845056)
    assert processor_pixels(tmp_path / "nothing-here") == (None, None)
    assert processor_pixels({"size": {"min_pixels": 10, "max_pixels": 20}}) == (10, 20)


def test_explicit_values_win_and_inherited_bounds_give_way() -> None:
    qwen3 = {"size": {"shortest_edge": 65536, "longest_edge": 16777216}}
    budget = resolve_budget("qwen3_vl", None, 3136, processor=qwen3)  # color_smoke.yaml's max-only budget
    assert (budget.min_pixels, budget.max_pixels, budget.factor) == (32 * 32, 3136, 32)
    assert resolve_budget("qwen3_vl", processor=qwen3) == PixelBudget(65536, 16777216, 32)
    assert resolve_budget("qwen2_vl", 10**8, None, processor={"max_pixels": 1000}).max_pixels == 10**8
    assert resolve_budget("qwen2_vl") == PixelBudget.for_family("qwen2_vl")  # no processor: defaults
    with pytest.raises(ValueError, match="min_pixels"):  # two explicit values that contradict still fail
        resolve_budget("qwen2_vl", 5000, 4000)


def test_real_qwen3_processor_takes_a_max_only_budget(tmp_path: Path) -> None:
    from transformers import AutoProcessor

    folder = _model_folder(tmp_path, "qwen3_vl")
    processor = AutoProcessor.from_pretrained(folder)
    budget = resolve_budget("qwen3_vl", None, 3136, processor)
    apply_budget_to_processor(processor, budget)
    image = Image.new("RGB", (300, 200), "red")
    out = processor.image_processor(images=[image.resize(budget.resized_size(300, 200))])
    t, h, w = (int(v) for v in out["image_grid_thw"][0])
    assert (w * 16, h * 16) == budget.resized_size(300, 200)  # the processor's own resize is the identity


def test_sft_targets_are_written_in_the_frame_the_model_sees(tmp_path: Path) -> None:
    """Qwen2.5-VL (pixel boxes), real processor, ``max_pixels`` unset: targets in the 1596x1204 frame."""
    from transformers import AutoProcessor

    from r1vision.runners.train import ScriptArguments, prepare
    from r1vision.tasks.sgg.parse import parse_scene_graph

    model = _model_folder(tmp_path, "qwen2_5_vl")
    data = tmp_path / "data"
    data.mkdir()
    Image.new("RGB", (1596, 1204), "white").save(data / "a.png")
    row = {
        "image_id": "a",
        "image": "a.png",
        "objects": json.dumps([{"id": "box.1", "bbox": [0, 0, 1596, 1204]}]),
        "relationships": "[]",
    }
    (data / "train.jsonl").write_text(json.dumps(row) + "\n")
    config = types.SimpleNamespace(min_pixels=None, max_pixels=None)
    script = ScriptArguments(model=str(model), dataset=str(data), task="sgg")
    prepared = prepare(script, config)
    text = prepared.train[0]["completion"][0]["content"][0]["text"]
    assert parse_scene_graph(text).ok
    answer = json.loads(text[text.index("<answer>") + 8 : text.index("</answer>")])
    assert answer["objects"][0]["bbox"] == [0, 0, 1596, 1204]  # was [0, 0, 1148, 840]
    # The trainer resolves from the loaded processor and the values the runner handed it: same frame.
    seen = resolve_budget(
        "qwen2_5_vl", config.min_pixels, config.max_pixels, AutoProcessor.from_pretrained(model)
    )
    assert seen.resized_size(1596, 1204) == (1596, 1204)
    assert prepared.run.budget == seen and (seen.min_pixels, seen.max_pixels) == (3136, 12845056)


def test_saved_folders_are_read_too(tiny_model) -> None:
    """transformers 5 saves the image processor inside ``processor_config.json`` (r1vision's SFT output)."""
    from transformers import AutoProcessor

    folder = tiny_model("qwen2_vl")
    assert not (Path(folder) / "preprocessor_config.json").exists()
    assert processor_pixels(folder) == processor_pixels(AutoProcessor.from_pretrained(folder)) != (None, None)


def test_color_smoke_recipe_on_a_qwen3_processor_with_a_large_minimum(
    tmp_path, tiny_model, color_dir
) -> None:
    """color_smoke.yaml sets only max_pixels (3136); Qwen3-VL's real processor asks for >= 65536 pixels."""
    from r1vision.cli import main

    model = tmp_path / "model"
    shutil.copytree(tiny_model("qwen3_vl"), model)
    config = json.loads((model / "processor_config.json").read_text())
    config["image_processor"]["size"] = {"shortest_edge": 65536, "longest_edge": 16777216}  # the Hub's values
    (model / "processor_config.json").write_text(json.dumps(config))
    recipe = ROOT / "configs" / "recipes" / "color_smoke.yaml"
    out = tmp_path / "out"
    argv = ["grpo", "--config", str(recipe), "--model", str(model), "--dataset", str(color_dir),
            "--output_dir", str(out), "--max_steps", "1"]  # fmt: skip
    assert main(argv) == 0
    saved = json.loads((out / "processor_config.json").read_text())["image_processor"]["size"]
    assert saved == {"shortest_edge": 32 * 32, "longest_edge": 3136}


@pytest.mark.parametrize("factor", [28, 32])
@pytest.mark.parametrize(
    "size", [(84, 84), (640, 480), (1999, 37), (37, 1999), (28, 28), (10, 10), (4000, 3000), (333, 777)]
)
def test_matches_transformers_smart_resize(size, factor):
    w, h = size
    lo, hi = 56 * 56, 28 * 28 * 256
    expected_h, expected_w = smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)
    assert resized_size(w, h, lo, hi, factor) == (expected_w, expected_h)


def test_budget_bounds_and_tokens():
    budget = PixelBudget.for_family("qwen2_vl", min_pixels=28 * 28, max_pixels=28 * 28 * 4)
    w, h = budget.resized_size(1000, 1000)
    assert w * h <= budget.max_pixels and w % 28 == 0 and h % 28 == 0
    assert budget.num_tokens(1000, 1000) == 4
    assert PixelBudget.for_family("qwen3_vl").factor == 32


def test_invalid_budget_is_rejected():
    with pytest.raises(ValueError, match="min_pixels"):
        PixelBudget(min_pixels=1000, max_pixels=10)


def test_a_hub_id_that_is_missing_or_unreachable_falls_back_without_retries(fake_hub, monkeypatch) -> None:
    """Reading a Hub model's own budget: a repo the Hub does not have, or a Hub that cannot be reached, gives
    the family default at once (the client's retries cost ~55 s per file on a machine without network)."""
    import time

    from r1vision.trainer.distributed import _free_port
    from r1vision.vision.budget import processor_pixels

    start = time.perf_counter()
    assert processor_pixels("org/typo") == (None, None)
    assert [path for path, _ in fake_hub.seen] == ["/api/models/org/typo"]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_free_port()}")
    assert processor_pixels("org/elsewhere") == (None, None)
    assert time.perf_counter() - start < 5.0
