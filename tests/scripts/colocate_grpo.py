"""GRPO with one colocated vLLM engine per training process; run by ``tests/generation/test_vllm_colocate.py``
(directly or under ``accelerate launch``; not a test module itself).

    colocate_grpo.py MODEL DATA OUT [LORA_R [adapters]]

Trains 3 steps with a reward that has spread and a large learning rate (so the weights move far), then
writes ``OUT/rank{R}.json``: world size, ZeRO stage, the engine this process holds, the per-step gap
between vLLM's and the trainer's log-probs of the sampled tokens, how far the trainable weights moved,
and (without ZeRO-3, where the model is whole) greedy decodings of two image prompts by this process's
engine and by HF ``generate`` on the trained model. With ``adapters`` the syncs send the LoRA adapter to
vLLM's LoRA support (``vllm_lora_adapters``) instead of merged weights.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch  # noqa: E402

# Run as a file: the checkout's root on the path, for the tests' helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.helpers.tasks import task_rows  # noqa: E402
from tests.helpers.training import grpo_args, varied_reward  # noqa: E402


def main(model_path: str, data: str, out: str, lora_r: int, adapters: bool = False) -> None:
    from tests.scripts.per_rank_grpo import MAX_NEW_TOKENS, hf_generate, rows_and_images

    from r1vision.generation.sampling import SamplingOptions
    from r1vision.generation.vllm_engine import VLLMGenerator
    from r1vision.trainer.grpo import VisionGRPOTrainer

    dataset = task_rows("color", data).remove_columns(["completion"])
    args = grpo_args(
        Path(out) / "run",
        generation_backend="vllm_colocate",
        max_steps=3,
        learning_rate=5e-2 if lora_r == 0 else 2e-1,
        freeze_vision_tower=True,
        lora_r=lora_r,
        lora_alpha=2 * max(lora_r, 1),
        vllm_lora_adapters=adapters,
    )
    trainer = VisionGRPOTrainer(model_path, [varied_reward], args=args, train_dataset=dataset)
    zero3 = trainer.vllm_generation._dist.is_zero3
    before = {n: _full(p, zero3).clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    moved = max(
        float((_full(p, zero3) - before[n]).abs().max())
        for n, p in trainer.model.named_parameters()
        if n in before
    )
    gaps = [h["sampling/sampling_logp_difference/mean"] for h in trainer.state.log_history if "loss" in h]
    rank = trainer.accelerator.process_index
    record = {
        "world_size": trainer.accelerator.num_processes,
        "rank": rank,
        "pid": os.getpid(),
        "zero3": zero3,
        "fsdp": bool(trainer.vllm_generation._dist.is_fsdp),
        "engine": f"{type(trainer.vllm_generation.llm).__name__}@{id(trainer.vllm_generation.llm):x}",
        "lora": getattr(trainer.model, "peft_config", None) is not None,
        "gaps": gaps,
        "moved": moved,
        "syncs": len(gaps),
    }
    if not zero3:
        # The weights the engine now holds decode exactly like the trained model (adapters active for LoRA).
        gen = trainer.vllm_generation
        gen.sync_weights()  # the trainer syncs before each rollout; the last update has not been sent yet
        model, processor, budget = trainer.model.eval(), trainer.processing_class, trainer.pixel_budget
        rows, images = rows_and_images(budget)
        wrapper = VLLMGenerator.__new__(VLLMGenerator)  # this process's engine, as the trainer left it
        wrapper.llm, wrapper.processor, wrapper.budget = gen.llm, processor, budget
        wrapper.image_token_id = int(processor.image_token_id)
        greedy = SamplingOptions(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
        record["vllm_text"] = [texts[0] for texts in wrapper.generate(rows, images, greedy)]
        record["hf_text"] = hf_generate(model, processor, budget, rows, images)
        if gen._adapters is not None:  # what the last adapter sync wrote and sent
            record["adapter"] = {"version": gen._adapters.version, "bytes": gen._adapters.bytes_sent,
                                 "files": sorted(p.name for p in gen._adapters.root.iterdir())}  # fmt: skip
    Path(out, f"rank{rank}.json").write_text(json.dumps(record, default=str))


def _full(param: torch.Tensor, zero3: bool) -> torch.Tensor:
    """The whole tensor (gathered under ZeRO-3 and FSDP2: collective, every rank in the same order), as a
    float32 copy."""
    if hasattr(param, "full_tensor"):  # an FSDP2 DTensor
        return param.full_tensor().detach().float()
    if zero3 and hasattr(param, "ds_id"):
        import deepspeed

        with deepspeed.zero.GatheredParameters([param]):
            return param.data.detach().float().clone()
    return param.data.detach().float()


if __name__ == "__main__":
    from r1vision.trainer.distributed import finish_process

    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0,
         len(sys.argv) > 5 and sys.argv[5] == "adapters")  # fmt: skip
    # End as `r1vision grpo` ends a launched worker: without it, interpreter shutdown with live vLLM/triton
    # threads sometimes aborts (SIGABRT, "terminate called without an active exception") after the record
    # is written, and the launcher reports the whole run as failed.
    sys.exit(finish_process(0))
