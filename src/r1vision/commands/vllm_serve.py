"""Start N vLLM servers (one per training process), wait for health, stop them at exit."""

from __future__ import annotations

from collections.abc import Sequence

GROUP = "scale-out"
USAGE = "r1vision vllm-serve --model M --num-servers N --base-port P [--config RECIPE] [... ] [-- TRAINING COMMAND]"


def run(argv: Sequence[str]) -> int:
    from r1vision.generation.vllm_launch import vllm_serve_main
    from r1vision.trainer.merge import resolve_model

    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)  # the training command after -- keeps its own
    ours = []
    for arg in argv[:cut]:  # this parser spells flags with dashes; accept underscores too
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            arg = "--" + name[2:].replace("_", "-") + eq + value
        ours.append(arg)
    for i in range(len(ours) - 1):
        if ours[i] == "--model":  # a LoRA run's output_dir serves its merged stand-alone model
            ours[i + 1] = resolve_model(ours[i + 1])
    return vllm_serve_main(ours + argv[cut:])
