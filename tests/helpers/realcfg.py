"""Tiny random-weight models built from the *real* Hub files of Qwen2-VL, Qwen2.5-VL and Qwen3-VL.

``tests/fixtures/realcfg/`` (see its README for provenance) holds each checkpoint's ``config.json``,
tokenizer files, chat template and preprocessor config, byte for byte (``vocab.json`` and ``merges.txt``,
identical in the three families, once and gzipped). :func:`hub_folder` lays them out as a Hub checkpoint
without weights. :func:`make_realcfg_model`
copies them into a model folder unchanged except ``config.json``, whose *size* fields only (layers,
widths, heads, head_dim and the index lists that must fit inside the smaller depth) are shrunk; every
structural field and token id stays. The 151,936-token vocabulary is kept, so the hidden size stays
tiny to keep the embedding small. The folder is then what a user gets from the Hub, minus the size.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

REALCFG_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
HIDDEN, HEADS, LAYERS, VISION_WIDTH, VISION_DEPTH = 32, 2, 2, 32, 2


REALCFG = Path(__file__).resolve().parents[1] / "fixtures" / "realcfg"
# vocab.json / merges.txt are byte-identical across the families: one gzipped copy each.
_SHARED_GZ = ("vocab.json", "merges.txt")


def hub_folder(family: str, dest: str | Path) -> Path:
    """``dest`` filled with ``family``'s real Hub files (config, processor, tokenizer, chat template,
    generation config), as the checkpoint ships them minus the weights. Missing fixtures fail loudly."""
    src = REALCFG / family
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"real Hub config files for {family!r} are missing under {REALCFG}")
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        shutil.copyfile(path, out / path.name)
    for name in _SHARED_GZ:
        (out / name).write_bytes(gzip.decompress((REALCFG / "tokenizer" / f"{name}.gz").read_bytes()))
    return out


def shrink_config(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of a real ``config.json`` with only its size fields made tiny (structure and ids kept)."""
    cfg = json.loads(json.dumps(config))
    head_dim = HIDDEN // HEADS
    half = head_dim // 2
    # mrope_section splits head_dim/2 over (t, h, w); keep the real proportions, summing to the new half.
    text = cfg.get("text_config", cfg)
    rope = text.get("rope_scaling") or text.get("rope_parameters") or {}
    if "mrope_section" in rope:
        real = rope["mrope_section"]
        scaled = [max(1, round(s * half / sum(real))) for s in real]
        scaled[0] += half - sum(scaled)
        rope["mrope_section"] = scaled
    text.update(
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN * 2,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=1,
    )
    if "head_dim" in text:
        text["head_dim"] = head_dim
    if "max_window_layers" in text:
        text["max_window_layers"] = LAYERS
    vision = cfg["vision_config"]
    vision.update(depth=VISION_DEPTH, num_heads=HEADS)
    if "embed_dim" in vision:  # Qwen2-VL: embed_dim is the tower width, hidden_size the LM width
        vision.update(embed_dim=VISION_WIDTH, hidden_size=HIDDEN)
    else:
        vision.update(hidden_size=VISION_WIDTH, intermediate_size=VISION_WIDTH * 2, out_hidden_size=HIDDEN)
    if "fullatt_block_indexes" in vision:  # keep both window and full attention blocks
        vision["fullatt_block_indexes"] = [VISION_DEPTH - 1]
    if "deepstack_visual_indexes" in vision:
        vision["deepstack_visual_indexes"] = [0]
    return cfg


def _make_eos_likely(model, config: dict[str, Any], norm: float = 6.0) -> None:
    """Give the (tied) embedding row of the end-of-turn token a large norm, so sampled completions stop
    at random lengths (~5 % per token) instead of never: a uniform random 151k-token model otherwise
    always runs to the length limit, and rewards that judge stopping (geometry's ``no_eos``) have no
    spread in a group, hence no GRPO gradient. Weights only; the config is untouched."""
    import torch

    text = config.get("text_config", config)
    eos = text.get("eos_token_id", config.get("eos_token_id"))
    eos = eos[0] if isinstance(eos, list) else eos
    with torch.no_grad():
        row = model.get_input_embeddings().weight[eos]
        row.mul_(norm / row.norm())


def make_realcfg_model(family: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny random-weight ``family`` model with the real tokenizer/processor/chat template files."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    out = hub_folder(family, out_dir)
    small = shrink_config(json.loads((out / "config.json").read_text()))
    (out / "config.json").write_text(json.dumps(small, indent=2))
    config = AutoConfig.from_pretrained(out)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    _make_eos_likely(model, small)
    model.save_pretrained(out)
    # save_pretrained rewrote config.json (and generation_config.json) in transformers' own format; a Hub
    # user has the originals.
    (out / "config.json").write_text(json.dumps(small, indent=2))
    shutil.copyfile(REALCFG / family / "generation_config.json", out / "generation_config.json")
    return out


def realcfg_model_path(family: str, cache_dir: str | Path | None = None, seed: int = 0) -> Path:
    """Build once and cache (keyed by the real files and this module) a tiny real-config model folder."""
    from r1vision.testing.tiny import build_cached, default_cache_dir

    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted((REALCFG / family).iterdir()):
        digest.update(path.read_bytes())
    digest.update(str(seed).encode())
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    final = root / f"real-{family}-{digest.hexdigest()[:16]}"
    return build_cached(final, "model.safetensors", lambda tmp: make_realcfg_model(family, tmp, seed=seed))
