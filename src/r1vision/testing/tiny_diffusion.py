"""Tiny random-weight SD3 pipelines built offline, for tests, the smoke recipe and the demo.

``make_tiny_sd3`` writes a folder that ``diffusers.StableDiffusion3Pipeline.from_pretrained`` loads with no
network: both CLIP text encoders and the T5 encoder (tiny, one locally trained byte-level BPE tokenizer in
all three slots), an SD3 MMDiT transformer, a VAE and the flow-matching scheduler (shift 3.0, as SD3.5).
The SD3 contract it follows: ``joint_attention_dim`` = T5's width = the two CLIP widths together,
``pooled_projection_dim`` = the two CLIP projections together.

``pixel_space=True`` makes the transformer work on 3 channels decoded as pixels (``r1vision_diffusion.json``
says ``"decode": "identity"``): a random VAE is almost insensitive to its latents (a latent shift of +-3
moved mean luminance by 0.01), so only a pixel-space model can show a reward being learned on a CPU.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

MARKER = "r1vision_diffusion.json"
_CORPUS = [
    "a bright photo",
    "a dark photo",
    'a sign that says "OPEN"',
    'a poster with the words "Hello World"',
    "a red square on the left",
    "a blue circle on the right",
    'a neon sign reading "Cafe 24"',
    'the text "SALE" written on a wall',
    'a book cover titled "Forever Yours"',
    "bright dark red blue green",
    "0 1 2 3 4 5 6 7 8 9",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
]


def _tokenizer(max_length: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|startoftext|>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        tok.save(str(path))
        fast = PreTrainedTokenizerFast(
            tokenizer_file=str(path),
            bos_token="<|startoftext|>",
            eos_token="<|endoftext|>",
            pad_token="<pad>",
            unk_token=None,
        )
    fast.model_max_length = max_length
    return fast


def make_tiny_sd3(out_dir: str | Path, pixel_space: bool = False, seed: int = 0) -> Path:
    """Write a tiny random SD3 pipeline to ``out_dir`` (64x64 images through a VAE, or 16x16 pixels with
    ``pixel_space``); return the folder."""
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, T5Config, T5EncoderModel

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    tok = _tokenizer(max_length=16)
    clip = CLIPTextConfig(
        vocab_size=len(tok),
        hidden_size=16,
        intermediate_size=32,
        projection_dim=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=32,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    t5 = T5Config(
        vocab_size=len(tok),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=1,
        num_heads=4,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    channels = 3 if pixel_space else 16
    transformer = SD3Transformer2DModel(
        sample_size=16 if pixel_space else 8,
        patch_size=2,
        in_channels=channels,
        out_channels=channels,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=4,
        joint_attention_dim=32,
        caption_projection_dim=32,
        pooled_projection_dim=32,
        pos_embed_max_size=32,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=channels,
        block_out_channels=(8, 8, 16, 16),
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        layers_per_block=1,
        norm_num_groups=8,
        sample_size=64,
        scaling_factor=1.5305,
        shift_factor=0.0609,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=vae,
        text_encoder=CLIPTextModelWithProjection(clip),
        tokenizer=tok,
        text_encoder_2=CLIPTextModelWithProjection(clip),
        tokenizer_2=tok,
        text_encoder_3=T5EncoderModel(t5),
        tokenizer_3=tok,
    )
    pipe.save_pretrained(out)
    marker = {
        "family": "sd3",
        "decode": "identity" if pixel_space else "vae",
        "max_sequence_length": 16,
        "seed": seed,
    }
    (out / MARKER).write_text(json.dumps(marker, indent=2))
    return out


def tiny_sd3_path(pixel_space: bool = False, seed: int = 0) -> Path:
    """A cached tiny SD3 folder (built once per source version, like ``testing.tiny.tiny_model_path``)."""
    key = hashlib.sha256((Path(__file__).read_text() + f"{pixel_space}{seed}").encode()).hexdigest()[:16]
    root = Path(os.environ.get("R1VISION_CACHE", Path.home() / ".cache" / "r1vision")) / "tiny-diffusion"
    target = root / f"sd3-{'pixel' if pixel_space else 'vae'}-{key}"
    if not (target / MARKER).is_file():
        tmp = Path(tempfile.mkdtemp(dir=root if root.is_dir() or root.mkdir(parents=True) is None else None))
        make_tiny_sd3(tmp, pixel_space=pixel_space, seed=seed)
        try:
            tmp.rename(target)
        except OSError:  # another process built it first
            pass
    return target
