"""r1vision: TRL's GRPOTrainer as a first-class trainer for vision-language models."""

from r1vision.vision.registration import ensure_registration

__version__ = "0.1.0"

# AutoProcessor must map Qwen-VL configs to the torchvision-free processors in every process that
# imports r1vision (workers, accelerate ranks). This does it without importing transformers now (that
# costs seconds, even for `r1vision --help`): at once if transformers is loaded, else right after it is.
ensure_registration()

__all__ = ["__version__"]
