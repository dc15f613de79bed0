"""Which parameters a weight sync sends, with and without sleep mode: simulated on CPU (no vLLM needed).

TRL sleeps the colocated engine at level 2 after every rollout, which discards every weight. Under LoRA
or a frozen vision tower only some parameters change, and a sync that re-pushes only those leaves the
rest of the engine as garbage. The fake engine below drops its weights the way level 2 does (NaN), so a
partial sync after a sleep is caught.
"""

from __future__ import annotations

import pytest
import torch

from r1vision.generation import vllm_colocate
from r1vision.generation.vllm_colocate import ColocateVLLMGeneration
from r1vision.generation.vllm_plan import sleep_plan
from r1vision.generation.vllm_select import backend_class
from r1vision.generation.vllm_trl import sync_summary


class FakeSleepingEngine:
    """Stands in for ``vllm.LLM``: a dict of weights that ``sleep(level=2)`` discards."""

    def __init__(self, weights: dict[str, torch.Tensor]) -> None:
        self.weights = {k: v.clone() for k, v in weights.items()}
        self.loaded: list[str] = []
        self.awake = True

    def sleep(self, level: int = 1) -> None:
        self.awake = False
        if level == 2:  # the weights are freed; what is mapped back on wake-up is garbage
            for tensor in self.weights.values():
                tensor.fill_(float("nan"))

    def wake_up(self, tags: list[str] | None = None) -> None:
        self.awake = True

    def reset_prefix_cache(self) -> None:
        pass


def _fake_load(llm: FakeSleepingEngine, weights, names=None) -> int:
    assert llm.awake, "weights pushed into a sleeping engine"
    assert names is not None, "the sync must be streamed: names known before the tensors are made"
    n = 0
    for name, tensor in weights:
        assert name == names[n], "the tensors arrive in the announced order"
        assert name in llm.weights, name
        assert llm.weights[name].shape == tensor.shape, name
        llm.weights[name].copy_(tensor)
        llm.loaded.append(name)
        n += 1
    return n


@pytest.fixture
def lora_generation(tiny_model, monkeypatch):
    """A colocate backend over a LoRA model with a frozen vision tower, wired to the fake engine."""
    from accelerate import Accelerator
    from peft import get_peft_model
    from transformers import AutoModelForImageTextToText
    from trl.distributed import DistributedBackend

    from r1vision.trainer.setup import freeze_vision_tower, lora_config

    model = AutoModelForImageTextToText.from_pretrained(tiny_model("qwen2_vl"), dtype=torch.float32)
    freeze_vision_tower(model)
    model = get_peft_model(model, lora_config(4, 8, 0.0, "all-linear-lm"))
    accelerator = Accelerator(cpu=True)
    gen = ColocateVLLMGeneration.__new__(ColocateVLLMGeneration)
    gen.model, gen.accelerator, gen._dist = model, accelerator, DistributedBackend(accelerator)
    gen.enable_sleep_mode = True
    gen._llm_weights_sleeping = False
    start = {name: t.detach().clone() for name, t in gen._iter_named_params(full=True)}
    gen.llm = FakeSleepingEngine(start)
    monkeypatch.setattr(vllm_colocate, "load_weights_inplace", _fake_load)
    return gen


def _train_a_step(model: torch.nn.Module) -> None:
    """Move every trainable tensor (LoRA B starts at zero: the merged weights change only through it)."""
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.add_(0.01 * torch.randn_like(param))


def test_sync_after_level2_sleep_restores_every_parameter(lora_generation):
    gen = lora_generation
    _train_a_step(gen.model)
    # What TRL's generate() does after a rollout, and what the next step's sync finds.
    gen.llm.sleep(level=2)
    gen._llm_weights_sleeping = True
    gen.sync_weights()
    assert gen._llm_weights_sleeping is False
    want = {name: t.detach().clone() for name, t in gen._iter_named_params(full=True)}
    assert set(gen.llm.loaded) == set(want)  # frozen vision tower, embeddings and norms included
    assert any(name.startswith("model.visual.") or ".visual." in name for name in gen.llm.loaded)
    for name, tensor in gen.llm.weights.items():
        assert torch.isfinite(tensor).all(), f"{name} was dropped by the sleep and never restored"
        assert torch.equal(tensor, want[name]), name  # the merged (trained) weights, not the start


def test_sync_without_sleep_sends_only_changing_parameters(lora_generation):
    gen = lora_generation
    gen.enable_sleep_mode = False
    _train_a_step(gen.model)
    gen.sync_weights()
    sent = set(gen.llm.loaded)
    assert sent and all("visual" not in n and "embed_tokens" not in n and "norm" not in n for n in sent)
    assert all(n.rsplit(".", 2)[-2] in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                         "down_proj") for n in sent)  # fmt: skip
    summary = sync_summary(gen.model)
    assert summary["tensors"] == len(sent) < summary["total_tensors"]
    assert sync_summary(gen.model, full=True)["tensors"] == summary["total_tensors"]
    # the engine still holds the start weights for everything not sent, and the trained ones for the rest
    for name, tensor in gen.llm.weights.items():
        assert torch.isfinite(tensor).all(), name


def test_sleep_plan_and_backend_classes():
    assert sleep_plan(False).level == 0 and sleep_plan(False).sync_after_sleep == "changing"
    assert sleep_plan(True).level == 2 and sleep_plan(True).sync_after_sleep == "all"
    from r1vision.generation.vllm_per_rank import PerRankVLLMGeneration
    from r1vision.generation.vllm_trl import VisionVLLMBase

    assert backend_class("colocate", False) is ColocateVLLMGeneration
    assert backend_class("server", True) is PerRankVLLMGeneration
    assert backend_class("server", False) is VisionVLLMBase


def test_engine_budget_is_the_trainers_budget_read_back_from_its_processor(tiny_model):
    """The engine's pixel budget is resolved from the processor the trainer applied its budget to, not
    carried as a second copy: whatever the trainer resizes to, the engine resizes to as well."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from r1vision.vision.budget import PixelBudget, apply_budget_to_processor

    path = tiny_model("qwen2_5_vl")
    processor = AutoProcessor.from_pretrained(path)
    trainer_budget = PixelBudget.for_family("qwen2_5_vl", min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 40)
    apply_budget_to_processor(processor, trainer_budget)
    engine = ColocateVLLMGeneration.__new__(ColocateVLLMGeneration)
    engine.model = AutoModelForImageTextToText.from_pretrained(path)
    engine.processing_class = processor
    assert engine.budget == trainer_budget
