"""Command runners: ``train`` (``r1vision sft`` / ``grpo``), ``infer`` and ``evaluate`` (``r1vision eval``).

They join the lower layers (tasks, generation, trainer) into what a command does; nothing below imports
them.
"""
