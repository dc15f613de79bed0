"""The built-in ``color`` task: name the colour of the shape. Small enough to train in seconds on CPU."""

from r1vision.tasks.color.rewards import color_accuracy, color_format
from r1vision.tasks.color.task import ColorTask

__all__ = ["ColorTask", "color_accuracy", "color_format"]
