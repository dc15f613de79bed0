"""Image-only processors: saved folders name only stock classes."""

from __future__ import annotations

import json

import pytest

from tests.helpers.paths import ROOT

RECIPES = sorted((ROOT / "configs" / "recipes").glob("*.yaml"))


def test_saved_processor_names_stock_classes(tiny_model, tmp_path):
    """tokenizer_config.json named ImageOnlyQwen2VLProcessor, which stock transformers cannot load."""
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model("qwen2_5_vl"))
    processor.save_pretrained(tmp_path)
    text = "".join(p.read_text() for p in tmp_path.glob("*.json"))
    assert "ImageOnly" not in text
    assert (
        json.loads((tmp_path / "tokenizer_config.json").read_text())["processor_class"]
        == "Qwen2_5_VLProcessor"
    )


@pytest.mark.parametrize(
    "family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"]
)
def test_saved_processor_folders_carry_a_video_config_for_torchvision_installs(family, tiny_model, tmp_path):
    """With torchvision present (every GPU install), AutoProcessor loads the stock Qwen-VL processor, which
    builds a video processor from the folder's video config; r1vision's folders had none (OSError at start).
    transformers' own resolution step is what raised: it must find a config with the image settings."""
    from transformers import AutoProcessor
    from transformers.video_processing_utils import BaseVideoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model(family))
    processor.save_pretrained(tmp_path)
    config, _ = BaseVideoProcessor.get_video_processor_dict(str(tmp_path))
    image = processor.image_processor
    assert config["video_processor_type"] == (
        "Qwen3VLVideoProcessor" if family.startswith("qwen3") else "Qwen2VLVideoProcessor"
    )
    stock = {
        "qwen2_vl": "Qwen2VLProcessor",
        "qwen2_5_vl": "Qwen2_5_VLProcessor",
        "qwen3_vl": "Qwen3VLProcessor",
        # Qwen3-VL-MoE and Qwen3.5 ship Qwen3-VL's processor
        "qwen3_vl_moe": "Qwen3VLProcessor",
        "qwen3_5": "Qwen3VLProcessor",
        "qwen3_5_moe": "Qwen3VLProcessor",
    }
    assert config["processor_class"] == stock[family]
    assert (config["patch_size"], config["merge_size"], config["size"]) == (
        image.patch_size,
        image.merge_size,
        image.size,
    )
    assert config["image_mean"] == list(image.image_mean)
