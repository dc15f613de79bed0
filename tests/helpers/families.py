"""Tiny random-weight models of VLM families outside the Qwen-VL ones (LLaVA-NeXT, Gemma 3), with real
processors built offline from the tiny Qwen tokenizer: what TRL's own VLM tests train, for the drop-in tests."""

from __future__ import annotations

from pathlib import Path

# A chat template that writes the family's image marker for each image part.
_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}MARKER{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_llava_next(out: Path) -> Path:
    """LLaVA-NeXT: CLIP tower (2 layers, 28 px, patch 14), Qwen2 text model, one grid pinpoint."""
    import torch
    import transformers
    from transformers import (
        AutoTokenizer,
        CLIPVisionConfig,
        LlavaNextConfig,
        LlavaNextForConditionalGeneration,
        LlavaNextProcessor,
        Qwen2Config,
    )

    from r1vision.testing.tiny import tiny_model_path

    tok = AutoTokenizer.from_pretrained(tiny_model_path("qwen2_vl"))
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    template = _TEMPLATE.replace("MARKER", "<image>")
    images = transformers.LlavaNextImageProcessor(
        size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}, image_grid_pinpoints=[[28, 28]]
    )
    processor = LlavaNextProcessor(image_processor=images, tokenizer=tok, patch_size=14, chat_template=template,
                                   vision_feature_select_strategy="default", image_token="<image>",
                                   num_additional_image_tokens=1)  # fmt: skip
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              image_size=28, patch_size=14)  # fmt: skip
    text = Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, vocab_size=len(tok), max_position_embeddings=512)  # fmt: skip
    config = LlavaNextConfig(vision_config=vision, text_config=text, image_grid_pinpoints=[[28, 28]],
                             image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_layer=-1)  # fmt: skip
    torch.manual_seed(0)
    LlavaNextForConditionalGeneration(config).save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_gemma3(out: Path) -> Path:
    """Gemma 3: SigLIP tower (1 layer, 28 px, patch 7), 4 soft tokens per image, Gemma 3 text model."""
    import torch
    import transformers
    from transformers import (
        AutoTokenizer,
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3Processor,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    from r1vision.testing.tiny import tiny_model_path

    names = {
        "boi_token": "<start_of_image>",
        "image_token": "<image_soft_token>",
        "eoi_token": "<end_of_image>",
    }
    tok = AutoTokenizer.from_pretrained(tiny_model_path("qwen2_vl"), extra_special_tokens=names)
    template = _TEMPLATE.replace("MARKER", "<start_of_image>")
    images = transformers.Gemma3ImageProcessor(size={"height": 28, "width": 28})
    processor = Gemma3Processor(
        image_processor=images, tokenizer=tok, chat_template=template, image_seq_length=4
    )
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=7)  # fmt: skip
    text = Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=1, head_dim=16, vocab_size=len(tok), max_position_embeddings=512,
                            sliding_window=64)  # fmt: skip
    config = Gemma3Config(vision_config=vision, text_config=text, mm_tokens_per_image=4,
                          boi_token_index=tok.boi_token_id, eoi_token_index=tok.convert_tokens_to_ids(names["eoi_token"]),
                          image_token_index=tok.image_token_id)  # fmt: skip
    torch.manual_seed(0)
    Gemma3ForConditionalGeneration(config).save_pretrained(out)
    processor.save_pretrained(out)
    return out


BUILDERS = {"llava_next": build_llava_next, "gemma3": build_gemma3}
