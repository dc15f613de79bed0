"""``r1vision t2i-grpo ARGS`` in this process, instrumented; run under ``accelerate launch`` by
``tests/diffusion/test_distributed.py`` (not a test module itself).

    t2i_grpo.py DUMP -- T2I-GRPO ARGS...

Before the CLI ends the worker, writes ``DUMP/rank{R}.json``: world size, trainer steps, DeepSpeed's engine
steps and how often the LR scheduler stepped, and every generation this process sampled (its prompts,
weighted rewards, advantages and the rows of each micro-step); and ``DUMP/rank{R}.pt``: the trainable
weights after training.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: tests.helpers for the rewards


def main(dump: Path, argv: list[str]) -> int:
    import torch

    import r1vision.diffusion.trainer as module
    from r1vision.cli import main as cli

    generations: list[dict] = []
    generate, train = module.DiffusionGRPOTrainer._generate, module.DiffusionGRPOTrainer.train

    def recorded_generate(self, model, rows, index):
        gen = generate(self, model, rows, index)
        generations.append({"index": index, "prompts": gen.prompts, "rewards": gen.rewards.tolist(),
                            "advantages": gen.advantages.tolist(), "chunks": [c.tolist() for c in gen.chunks]})  # fmt: skip
        return gen

    def recorded_train(self, *args, **kwargs):
        out = train(self, *args, **kwargs)
        rank = self.accelerator.process_index
        engine = self.deepspeed if self.is_deepspeed_enabled else None
        scheduler = getattr(self.lr_scheduler, "scheduler", self.lr_scheduler)  # accelerate's wrapper, if any
        record = {"rank": rank, "world_size": self.accelerator.num_processes, "global_step": self.state.global_step,
                  "engine_global_steps": getattr(engine, "global_steps", None),
                  "scheduler_steps": getattr(scheduler, "last_epoch", None),
                  "lrs": [h["learning_rate"] for h in self.state.log_history if "learning_rate" in h],
                  "generations": generations}  # fmt: skip
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"rank{rank}.json").write_text(json.dumps(record))
        model = self.accelerator.unwrap_model(self.model)
        weights = {
            n: p.detach().float().cpu().clone() for n, p in model.named_parameters() if p.requires_grad
        }
        torch.save(weights, dump / f"rank{rank}.pt")
        return out

    module.DiffusionGRPOTrainer._generate = recorded_generate
    module.DiffusionGRPOTrainer.train = recorded_train
    return cli(["t2i-grpo", *argv])


if __name__ == "__main__":
    split = sys.argv.index("--")
    raise SystemExit(main(Path(sys.argv[1]), sys.argv[split + 1 :]))
