"""Image-only processors: saved folders name only stock classes."""

from __future__ import annotations

import json

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
