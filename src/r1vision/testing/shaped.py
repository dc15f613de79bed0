"""Random-weight models with the exact shape of a real Qwen-VL checkpoint, built offline.

For benchmarks of step time and memory at real scale without downloading weights: the architecture
comes from a config (a built-in shape such as ``qwen2.5-vl-7b``, a ``config.json`` or a model folder,
see :func:`r1vision.estimate.load_model_config`); the processor and tokenizer are the offline tiny ones
(same patch and merge sizes as the real family). The token ids of the config are rewired to that
tokenizer, so prompts, image placeholders and EOS behave as with a real checkpoint, only with a small
vocabulary in the tokenizer and the real embedding size in the model.
"""

from __future__ import annotations

from pathlib import Path

from r1vision.estimate import load_model_config
from r1vision.testing.tiny import FAMILIES, make_tiny_model


def make_shaped_model(
    shape: str,
    out_dir: str | Path,
    seed: int = 0,
    dtype: str = "bfloat16",
    device: str | None = None,
    max_pixels: int | None = None,
) -> Path:
    """Write a random-weight model of ``shape`` plus an offline processor to ``out_dir``; return the path.

    ``device``: where the weights are initialised (default: ``cuda`` when available — initialising a
    7B model on a GPU takes seconds, on a CPU minutes).
    """
    import torch
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    config = load_model_config(shape)
    family = config.model_type
    if family not in FAMILIES:
        raise ValueError(f"{shape}: model_type {family!r} is not one of {', '.join(FAMILIES)}")
    out = Path(out_dir)
    # The tiny model supplies the processor, tokenizer and chat template; its weights are replaced below.
    make_tiny_model(family, out, seed=seed, max_pixels=max_pixels)
    for stale in list(out.glob("*.safetensors")) + list(out.glob("*.safetensors.index.json")):
        stale.unlink()
    tok = AutoTokenizer.from_pretrained(out)
    ids = {name: tok.convert_tokens_to_ids(token) for name, token in _TOKENS.items()}
    for name in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        setattr(config, name, ids[name])
    text = config.text_config
    text.eos_token_id, text.pad_token_id, text.bos_token_id = ids["eos"], ids["pad"], None
    if len(tok) > text.vocab_size:
        raise ValueError(
            f"tokenizer has {len(tok)} tokens, more than the model's vocab_size {text.vocab_size}"
        )

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = ids["eos"], ids["pad"]
    model.generation_config.bos_token_id = None
    model.save_pretrained(out)
    del model
    return out


_TOKENS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
    "eos": "<|im_end|>",
    "pad": "<|endoftext|>",
}
