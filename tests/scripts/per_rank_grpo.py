"""GRPO with one r1vision vLLM server per training process; run under ``accelerate launch`` by
``tests/generation/test_vllm_server.py`` (not a test module itself).

    per_rank_grpo.py MODEL DATA OUT BASE_PORT [adapters|videos]

Each rank trains 3 steps with a reward that has spread (so the weights move), pushes the final weights,
then decodes two image prompts greedily through its own server and with HF ``generate`` on the trained
model, and writes ``OUT/rank{R}.json`` with what it saw (server port/pid/counters, log-prob gaps, texts).
With ``adapters``: LoRA r 8, the syncs send the adapter to the server's LoRA support (``vllm_lora_adapters``).
With ``videos``: DATA is a motion (video) dataset; the rollouts send clips, and only the counters and
log-prob gaps are recorded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch  # noqa: E402
from PIL import Image  # noqa: E402

# Run as a file: the checkout's root on the path, for the tests' helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.helpers.tasks import task_rows  # noqa: E402
from tests.helpers.training import grpo_args, varied_reward  # noqa: E402

MAX_NEW_TOKENS = 10


def rows_and_images(budget: Any) -> tuple[list[dict], list[list[Any]]]:
    """Two one-image prompts, images already resized to ``budget`` (as the trainer sends them)."""
    rows, images = [], []
    for i, (w, h) in enumerate([(140, 84), (56, 112)]):
        text = "what colour?" if i == 0 else "describe"
        rows.append(
            {"prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]}
        )
        img = Image.new("RGB", (w, h), (200, 30 * i, 10))
        images.append([img.resize(budget.resized_size(*img.size))])
    return rows, images


def server_generate(client: Any, processor: Any, rows: list[dict], images: list[list[Any]]) -> list[str]:
    """Greedy completions through an r1vision server from the processor's (expanded) prompt IDs."""
    from r1vision.generation.vllm_engine import check_prompt_ids, collapse_image_runs

    image_token = int(processor.image_token_id)
    expanded, requests = [], []
    for row, imgs in zip(rows, images, strict=True):
        text = processor.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        ids = processor(text=[text], images=imgs, return_tensors="pt")["input_ids"][0].tolist()
        expanded.append(ids)
        requests.append({"prompt_token_ids": collapse_image_runs(ids, image_token), "images": imgs, "n": 1})
    sampling = {"temperature": 0.0, "max_tokens": MAX_NEW_TOKENS, "logit_bias": {image_token: -100.0}}
    results = client.generate(requests, sampling)
    for i, (result, ids) in enumerate(zip(results, expanded, strict=True)):
        check_prompt_ids(result["prompt_token_ids"], ids, image_token, f"prompt {i}")
    return [processor.decode(r["completions"][0]["token_ids"], skip_special_tokens=True) for r in results]


def hf_generate(
    model: Any, processor: Any, budget: Any, rows: list[dict], images: list[list[Any]]
) -> list[str]:
    from r1vision.generation.hf import generate
    from r1vision.generation.sampling import SamplingOptions

    options = SamplingOptions(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
    return [texts[0] for texts in generate(model, processor, rows, budget, options, images=images)]


def main(model_path: str, data: str, out: str, base_port: int, mode: str = "") -> None:
    from transformers import AutoModelForImageTextToText

    from r1vision.tasks.motion.data import load_motion_dataset
    from r1vision.trainer.grpo import VisionGRPOTrainer

    adapters, videos = mode == "adapters", mode == "videos"
    if videos:
        dataset = load_motion_dataset(data, "train").remove_columns(["completion"])
    else:
        dataset = task_rows("color", data).remove_columns(["completion"])
    args = grpo_args(
        Path(out) / "run",
        generation_backend="vllm_server",
        vllm_server_per_rank=True,
        vllm_server_host="127.0.0.1",
        vllm_server_port=base_port,
        vllm_server_timeout=900,
        max_steps=3,
        learning_rate=2e-1 if adapters else 5e-2,
        freeze_vision_tower=True,
        **(dict(lora_r=8, lora_alpha=16, vllm_lora_adapters=True) if adapters else {}),
        **(dict(video_max_frame_pixels=28 * 28) if videos else {}),
    )
    trainer = VisionGRPOTrainer(model_path, [varied_reward], args=args, train_dataset=dataset)
    trainer.train()
    gen = trainer.vllm_generation
    gaps = [
        h["sampling/sampling_logp_difference/mean"]
        for h in trainer.state.log_history
        if "sampling/sampling_logp_difference/mean" in h
    ]
    rank = trainer.accelerator.process_index
    if videos:
        info = gen.vllm_client.get_server_info()
        result = {"rank": rank, "stats": info["stats"], "gaps": gaps, "info": info}
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(result, indent=1))
        return
    gen.sync_weights()  # the last optimizer step reaches the server only with the next generation
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    processor, budget = trainer.processing_class, trainer.pixel_budget
    rows, images = rows_and_images(budget)
    with torch.no_grad():
        trained = hf_generate(model, processor, budget, rows, images)
        initial_model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32).eval()
        initial = hf_generate(initial_model, processor, budget, rows, images)
    info = gen.vllm_client.get_server_info()
    result = {
        "rank": rank,
        "url": gen.vllm_client.base_url,
        "server_pid": info["pid"],
        "stats": info["stats"],
        "gaps": gaps,
        "server_text": server_generate(gen.vllm_client, processor, rows, images),
        "hf_text": trained,
        "initial_text": initial,
    }
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    from r1vision.trainer.distributed import finish_process

    main(
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]),
        sys.argv[5] if len(sys.argv) > 5 else "",
    )
    sys.exit(finish_process(0))  # as `r1vision grpo` ends a launched worker (no shutdown abort)
