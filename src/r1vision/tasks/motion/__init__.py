"""The built-in ``motion`` task: which way does the shape move? Video rows in Video-R1's schema, small
enough to learn on a CPU; it proves the video path (decode, budget, tokens, training, eval) end to end."""

from r1vision.tasks.motion.rewards import motion_accuracy, motion_format
from r1vision.tasks.motion.task import MotionTask

__all__ = ["MotionTask", "motion_accuracy", "motion_format"]
