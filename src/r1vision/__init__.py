"""r1vision: TRL's GRPOTrainer as a first-class trainer for vision-language models."""

from r1vision.vision.processor import register_processors

__version__ = "0.1.0"

# AutoProcessor must map Qwen-VL configs to the torchvision-free processors in every process that
# imports r1vision (workers, accelerate ranks), otherwise it silently returns only the tokenizer.
register_processors()

__all__ = ["__version__"]
