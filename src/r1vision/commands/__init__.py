"""The ``r1vision`` commands, one module per command (cf. TRL's ``trl/cli/commands``).

Each module's docstring first line is the command's one-line help, ``GROUP`` the heading it is listed
under, ``build_parser()`` its parser (``sft``/``grpo``: TRL's ``TrlParser``) and ``run(argv)`` what it
does. Modules import only the standard library at top level, so ``r1vision --help`` stays instant.
"""

from __future__ import annotations

# name -> module, in the order ``r1vision --help`` lists them
COMMANDS: dict[str, str] = {
    "sft": "sft",
    "grpo": "grpo",
    "t2i-grpo": "t2i_grpo",
    "infer": "infer",
    "eval": "eval",
    "score": "score",
    "t2i-sample": "t2i_sample",
    "t2i-eval": "t2i_eval",
    "viz": "viz",
    "report": "report",
    "synth": "synth",
    "configs": "configs",
    "merge": "merge",
    "make-tiny-model": "make_tiny_model",
    "tasks": "tasks",
    "estimate-memory": "estimate_memory",
    "vllm-serve": "vllm_serve",
    "selftest": "selftest",
    "demo": "demo",
}
GROUPS = ("training", "inference and evaluation", "data and models", "scale-out", "checks and demos")
