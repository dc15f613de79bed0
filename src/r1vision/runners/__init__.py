"""Command runners: ``train`` (``r1vision sft`` / ``grpo``) and ``infer``.

They join the lower layers (tasks, generation, trainer) into what a command does; nothing below imports
them. (``r1vision eval`` needs no runner: it is :meth:`r1vision.tasks.base.Task.evaluate_files`.)
"""
