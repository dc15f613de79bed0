"""HF generation takes every decoding value from ``SamplingOptions``, never from the checkpoint's
``generation_config.json`` (the real Qwen2/2.5-VL files set ``top_k: 1``, ``top_p: 0.001``: sampling there
would silently be greedy)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from r1vision.generation.hf import generate, generation_config
from r1vision.generation.sampling import SamplingOptions
from r1vision.vision.budget import PixelBudget
from tests.helpers.realcfg import REALCFG, realcfg_model_path


@pytest.fixture(scope="module")
def qwen25():
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = realcfg_model_path("qwen2_5_vl")
    return AutoModelForImageTextToText.from_pretrained(path).eval(), AutoProcessor.from_pretrained(path)


def test_the_real_generation_configs_would_make_sampling_greedy() -> None:
    """The premise: what the Hub files set, byte for byte (the fixture is the checkpoint's own file)."""
    for family in ("qwen2_vl", "qwen2_5_vl"):
        cfg = json.loads((REALCFG / family / "generation_config.json").read_text())
        assert (cfg["top_k"], cfg["top_p"]) == (1, 0.001)
    assert (
        json.loads((REALCFG / "qwen2_5_vl" / "generation_config.json").read_text())["repetition_penalty"]
        == 1.05
    )


def test_every_decoding_value_comes_from_the_options(qwen25) -> None:
    model, processor = qwen25
    assert (model.generation_config.top_k, model.generation_config.top_p) == (1, 0.001)
    cfg = generation_config(model, processor, SamplingOptions(temperature=1.0))
    assert (cfg.do_sample, cfg.temperature, cfg.top_k, cfg.top_p, cfg.repetition_penalty) == (
        True,
        1.0,
        0,
        1.0,
        1.0,
    )
    cfg = generation_config(model, processor, SamplingOptions(temperature=0.6, top_k=20, top_p=0.9))
    assert (cfg.temperature, cfg.top_k, cfg.top_p) == (0.6, 20, 0.9)
    greedy = generation_config(model, processor, SamplingOptions())
    assert greedy.do_sample is False and greedy.repetition_penalty == 1.0
    assert set(greedy.eos_token_id) == {151645, 151643}  # the stop tokens are the model's


def test_sampling_at_temperature_one_differs_between_samples(qwen25) -> None:
    model, processor = qwen25
    row = {
        "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]}]
    }
    budget = PixelBudget.for_family("qwen2_5_vl", max_pixels=56 * 56)
    image = [[Image.new("RGB", (56, 56), "red")]]
    samples = generate(
        model, processor, [row], budget, SamplingOptions(12, 1.0, num_samples=4, seed=3), images=image
    )
    assert len(set(samples[0])) > 1  # with the checkpoint's top_k=1 all four were the same text
    again = generate(
        model, processor, [row], budget, SamplingOptions(12, 1.0, num_samples=4, seed=3), images=image
    )
    assert again == samples  # seeded
    greedy = generate(model, processor, [row], budget, SamplingOptions(12), images=image)
    assert greedy == generate(model, processor, [row], budget, SamplingOptions(12, seed=9), images=image)


def test_greedy_decoding_on_the_real_config_warns_nothing(qwen25, caplog) -> None:
    """Greedy configs hold only values transformers' validation accepts for greedy decoding (it printed
    "generation flags are not valid ... ['min_p', 'top_k']" on every greedy infer and evaluation), and still
    decode as before: greedy ignores the sampling filters."""
    import logging

    from transformers.utils import logging as hf_logging

    model, processor = qwen25
    row = {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi."}]}]}
    budget = PixelBudget.for_family("qwen2_5_vl", max_pixels=56 * 56)
    image = [[Image.new("RGB", (56, 56), "blue")]]
    hf_logging.enable_propagation()
    try:
        with caplog.at_level(logging.WARNING):
            text = generate(model, processor, [row], budget, SamplingOptions(6), images=image)
    finally:
        hf_logging.disable_propagation()
    assert not [r for r in caplog.records if "generation flags" in r.getMessage()]
    # what greedy means: the argmax continuation, the same as plain generate with do_sample off
    cfg = generation_config(model, processor, SamplingOptions(6))
    assert cfg.do_sample is False and cfg.num_beams == 1
    assert text == generate(model, processor, [row], budget, SamplingOptions(6, seed=1), images=image)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1.0}, "temperature must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_k": -2}, "top_k must be >= 0"),
        ({"num_samples": 0}, "num_samples must be >= 1"),
        ({"num_samples": 4}, "greedy samples are identical"),
        ({"repetition_penalty": 0.0}, "repetition_penalty must be > 0"),
    ],
)
def test_out_of_range_values_are_refused(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingOptions(**kwargs)
