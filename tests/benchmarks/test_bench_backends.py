"""The backend benchmark's workload and its shaped models: fixed-length rollouts, real configs, offline."""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers.launch import run_command, warm_python
from tests.helpers.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "bench_backends.py"


@pytest.mark.slow
def test_benchmark_runs_fixed_length_rollouts(tmp_path):
    """Every completion is exactly --max-completion tokens (EOS suppressed), so backends do equal work."""
    out = tmp_path / "rows.json"
    # the script and the runs it starts fork from the tests' warm interpreter (tests/helpers/launch.py)
    cmd = [warm_python(), str(SCRIPT), "--backends", "hf", "--steps", "2", "--warmup", "1", "--prompts", "2"]
    cmd += ["--generations", "2", "--max-completion", "6", "--workdir", str(tmp_path), "--json-out", str(out)]
    proc = run_command(cmd, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| hf | 0 |" in proc.stdout and "1.00x" in proc.stdout
    raw = json.loads((tmp_path / "hf-zero0" / "result.json").read_text())
    assert raw["gen_tokens"] == [2 * 2 * 6, 2 * 2 * 6]  # prompts x generations x max-completion, every step
    assert len(raw["step_seconds"]) == 2 and all(s > 0 for s in raw["step_seconds"])
    row = json.loads(out.read_text())["rows"][0]
    assert row["tokens_per_s"] > 0 and row["step_s"] >= row["gen_s"] > 0


@pytest.mark.slow
def test_shaped_model_has_the_configs_shape_and_the_processors_tokens(tmp_path):
    """A shaped model from a config: parameter count as the config implies, token ids wired to the processor."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from r1vision.estimate import load_model_config, shape_of
    from r1vision.testing.shaped import make_shaped_model

    # The real Qwen2.5-VL-3B config with fewer/narrower layers, so it builds in seconds on CPU.
    cfg = json.loads((ROOT / "src/r1vision/data/model_shapes/qwen2.5-vl-3b.json").read_text())
    cfg["text_config"].update(
        num_hidden_layers=2, hidden_size=256, intermediate_size=512, num_attention_heads=4
    )
    cfg["text_config"]["rope_parameters"]["mrope_section"] = [8, 12, 12]
    cfg["vision_config"].update(
        depth=2, hidden_size=128, intermediate_size=256, num_heads=2, out_hidden_size=256
    )
    cfg["vision_config"]["fullatt_block_indexes"] = [1]
    (tmp_path / "shape.json").write_text(json.dumps(cfg))

    path = make_shaped_model(
        str(tmp_path / "shape.json"), tmp_path / "m", dtype="float32", max_pixels=56 * 56
    )
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)
    processor = AutoProcessor.from_pretrained(path)
    expected = shape_of(load_model_config(str(tmp_path / "shape.json"))).total_params
    assert sum(p.numel() for p in model.parameters()) == expected
    assert model.config.text_config.vocab_size == 151936  # the real embedding size, not the tokenizer's
    tok = processor.tokenizer
    assert model.config.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")

    from PIL import Image

    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "describe"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True)
    inputs = processor(text=[text], images=[Image.new("RGB", (56, 56), "red")], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 3
