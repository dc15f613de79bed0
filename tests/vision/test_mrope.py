"""Qwen2/2.5-VL positions after a video: Qwen's reference M-RoPE, not transformers 5's shortcut."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoProcessor

from r1vision.vision.mrope import reference_positions
from r1vision.vision.video import Clip


def _reference(ids: list[int], grids: list[tuple[str, list[int], float]], config, image_id, video_id) -> list:
    """Qwen's published algorithm, written out: text positions count on from the previous block's largest
    position + 1; a block's temporal index is ``step x interval``, its spatial ones ``row``/``column``."""
    merge = config.vision_config.spatial_merge_size
    out: list[list[int]] = [[], [], []]
    i, block, next_pos = 0, 0, 0
    while i < len(ids):
        if ids[i] in (image_id, video_id):
            _, (t, h, w), interval = grids[block]
            block += 1
            h, w = h // merge, w // merge
            for s in range(t):
                for r in range(h):
                    for c in range(w):
                        out[0].append(next_pos + int(s * interval))
                        out[1].append(next_pos + r)
                        out[2].append(next_pos + c)
            i += t * h * w
            next_pos = max(max(row[-t * h * w :]) for row in out) + 1
        else:
            for row in out:
                row.append(next_pos)
            next_pos += 1
            i += 1
    return out


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_text_after_a_video_follows_qwens_reference(tiny_model, family):
    from transformers import AutoModelForImageTextToText

    path = tiny_model(family)
    processor = AutoProcessor.from_pretrained(path)
    config = AutoConfig.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path).model
    rng = np.random.default_rng(0)
    clip = Clip(rng.integers(0, 255, (8, 28, 28, 3), dtype=np.uint8), 2.0, 8, range(8), (28, 28))  # 4 steps
    image = rng.integers(0, 255, (56, 56, 3), dtype=np.uint8)
    text = "<|vision_start|><|video_pad|><|vision_end|>a b<|vision_start|><|image_pad|><|vision_end|>c d e"
    short = "<|vision_start|><|video_pad|><|vision_end|>f"
    enc = processor(
        text=[text, short], videos=[clip, clip], images=[image], padding=True, return_tensors="pt"
    )
    args = {k: enc[k] for k in ("mm_token_type_ids", "image_grid_thw", "video_grid_thw", "attention_mask")}
    if "second_per_grid_ts" in enc:
        args["second_per_grid_ts"] = enc["second_per_grid_ts"]
    positions, deltas = model.get_rope_index(enc["input_ids"], **args)

    tps = getattr(config.vision_config, "tokens_per_second", None)
    interval = tps * float(enc["second_per_grid_ts"][0]) if family == "qwen2_5_vl" else 1.0
    video, picture = enc["video_grid_thw"][0].tolist(), enc["image_grid_thw"][0].tolist()
    for row, grids in ((0, [("v", video, interval), ("i", picture, 1.0)]), (1, [("v", video, interval)])):
        keep = enc["attention_mask"][row].bool()
        ids = enc["input_ids"][row][keep].tolist()
        want = _reference(ids, grids, config, processor.image_token_id, processor.video_token_id)
        assert positions[:, row, keep].tolist() == want
        assert int(deltas[row]) == max(max(r) for r in want) + 1 - len(ids)  # where generation goes on
    # the clip's 4 temporal steps reach past its 1x1 merged frame: transformers alone starts the text early
    original = type(model).get_rope_index.__wrapped__
    unfixed, _ = original(model, enc["input_ids"], **args)
    assert not torch.equal(unfixed, positions)


def test_images_only_keep_transformers_positions():
    """One temporal step: the reference and transformers agree, so nothing moves."""
    types = torch.tensor([[0, 0, 1, 1, 1, 1, 0, 0]])
    positions = torch.tensor([[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]])
    fixed, deltas = reference_positions(positions.unsqueeze(1), types)
    assert torch.equal(fixed[:, 0], positions) and deltas.tolist() == [[-2]]
