"""Rollouts: sample images with the SDE policy and record every transition, then replay them for the loss.

A rollout of ``steps`` transitions records the latents ``x_0 .. x_T`` and the log-density of each
transition under the policy that took it. Replaying transition ``j`` under the current weights (same
``x_j``, same ``x_{j+1}``) gives the new log-density the PPO ratio needs; with the weights unchanged the
replay equals the rollout exactly (logged every step as ``logprob_parity_max``). Steps outside the SDE
window (Flow-GRPO-Fast / MixGRPO) are deterministic ODE steps and are not trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from r1vision.diffusion.families import Conditioning
from r1vision.diffusion.sde import Step, sde_step


@dataclass
class Rollout:
    """What a rollout recorded (batch-first)."""

    latents: torch.Tensor  # (batch, steps + 1, C, H, W), float32
    log_probs: torch.Tensor  # (batch, steps)
    sigmas: torch.Tensor  # (steps + 1,)
    sde_steps: list[int]  # the stochastic transitions (the others are ODE steps)
    images: torch.Tensor  # (batch, 3, H, W) in [0, 1]

    @staticmethod
    def cat(parts: list[Rollout]) -> Rollout:
        """One rollout from batches sampled with the same schedule and SDE window (rows in order)."""
        if len(parts) == 1:
            return parts[0]
        return Rollout(
            torch.cat([r.latents for r in parts]),
            torch.cat([r.log_probs for r in parts]),
            parts[0].sigmas,
            parts[0].sde_steps,
            torch.cat([r.images for r in parts]),
        )


def sde_window(
    steps: int, window_size: int, window_range: tuple[int, int] | None, generator: torch.Generator
) -> list[int]:
    """The transitions sampled with the SDE: all (``window_size`` 0), else ``window_size`` consecutive steps
    starting at a random position inside ``window_range`` (the same window for the whole batch)."""
    if window_size <= 0:
        return list(range(steps))
    low, high = window_range or (0, steps)
    high = min(high, steps) - window_size
    start = low if high <= low else int(torch.randint(low, high + 1, (1,), generator=generator))
    return list(range(start, min(start + window_size, steps)))


@torch.no_grad()
def rollout(
    family: Any,
    transformer: Any,
    cond: Conditioning,
    *,
    steps: int,
    resolution: int,
    guidance_scale: float,
    noise_level: float,
    kind: str = "flow_grpo",
    window: list[int] | None = None,
    generator: torch.Generator,
    noise: torch.Tensor | None = None,
) -> Rollout:
    """Sample ``len(cond.embeds)`` images; ``noise``: the initial latents (default drawn from ``generator``;
    the trainer passes one noise per prompt for Flow-GRPO's ``same_latent``); ``window``: the SDE transitions
    (default all; ``noise_level`` 0 = ODE)."""
    batch = cond.embeds.shape[0]
    side = family.latent_size(resolution)
    device = family.device
    shape = (batch, family.channels, side, side)
    if noise is None:
        noise = torch.randn(shape, generator=generator, dtype=torch.float32)
    elif tuple(noise.shape) != shape:
        raise ValueError(f"initial noise of shape {tuple(noise.shape)} for latents of shape {shape}")
    x = noise.float().to(device)
    sigmas = family.sigmas(steps)
    sde = set(range(steps) if window is None else window)
    latents, log_probs = [x], []
    for i in range(steps):
        v = family.velocity(transformer, x, float(sigmas[i]), cond, guidance_scale)
        step = sde_step(
            v,
            x,
            sigmas[i],
            sigmas[i + 1],
            sigma_max=float(sigmas[1]),
            noise_level=noise_level,
            kind=kind if i in sde else "ode",
            generator=generator,
        )
        x = step.sample
        latents.append(x)
        log_probs.append(step.log_prob)
    images = family.decode(x)
    return Rollout(torch.stack(latents, dim=1), torch.stack(log_probs, dim=1), sigmas, sorted(sde), images)


def replay(
    family: Any,
    transformer: Any,
    cond: Conditioning,
    roll: Rollout,
    index: int,
    *,
    guidance_scale: float,
    noise_level: float,
    kind: str = "flow_grpo",
    rows: torch.Tensor | None = None,
) -> Step:
    """Transition ``index`` of ``roll`` re-scored under ``transformer`` (with gradients if enabled):
    the mean and log-density of the recorded next latent."""
    x = roll.latents[:, index] if rows is None else roll.latents[rows, index]
    prev = roll.latents[:, index + 1] if rows is None else roll.latents[rows, index + 1]
    sigmas = roll.sigmas
    v = family.velocity(transformer, x.to(family.device), float(sigmas[index]), cond, guidance_scale)
    return sde_step(
        v,
        x.to(family.device),
        sigmas[index],
        sigmas[index + 1],
        sigma_max=float(sigmas[1]),
        noise_level=noise_level,
        kind=kind,
        prev=prev.to(family.device),
    )


def encode_rows(family: Any, prompts: list[str], guidance: bool) -> Conditioning:
    """Conditioning of every row, each distinct prompt encoded once (a group shares its prompt)."""
    distinct = list(dict.fromkeys(prompts))
    where = {p: i for i, p in enumerate(distinct)}
    return family.encode(distinct, guidance=guidance).select(torch.tensor([where[p] for p in prompts]))


@torch.no_grad()
def sample_ode(
    family: Any,
    transformer: Any,
    prompts: list[str],
    *,
    steps: int,
    resolution: int,
    guidance_scale: float,
    seed: int,
    first_index: int = 0,
    batch_size: int = 8,
    progress: Any = None,
) -> torch.Tensor:
    """Deterministic images (ODE) for ``prompts``, ``batch_size`` at a time: image ``i`` starts from the noise
    of seed ``seed + first_index + i`` whatever the batch or process it falls in (the training evaluation,
    ``t2i-sample`` and ``t2i-eval`` give the same image for the same prompt and index). ``progress``: a
    callable told the number of images done after each batch."""
    side = family.latent_size(resolution)
    shape = (family.channels, side, side)
    out = []
    for low in range(0, len(prompts), max(1, batch_size)):
        batch = prompts[low : low + max(1, batch_size)]
        noise = torch.stack(
            [
                torch.randn(shape, generator=torch.Generator().manual_seed(seed + first_index + low + i))
                for i in range(len(batch))
            ]
        )
        roll = rollout(
            family,
            transformer,
            encode_rows(family, batch, guidance_scale > 1.0),
            steps=steps,
            resolution=resolution,
            guidance_scale=guidance_scale,
            noise_level=0.0,
            kind="ode",
            generator=torch.Generator(),
            noise=noise,
        )
        out.append(roll.images.cpu())
        if progress is not None:
            progress(len(batch))
    return torch.cat(out) if out else torch.empty(0, 3, resolution, resolution)


@dataclass
class Generation:
    """One generation batch of this process: what the rollout recorded and the micro-steps' sample rows."""

    index: int  # which generation of the run (micro-step // steps_per_generation)
    prompts: list[str]
    cond: Conditioning
    roll: Rollout
    rewards: torch.Tensor  # (samples,) weighted, NaN where no reward scored the sample
    advantages: torch.Tensor  # (samples,), from the statistics of every process's rewards
    trained: list[int]  # the transitions replayed
    chunks: list[torch.Tensor]  # sample rows of each micro-step (possibly empty)

    def state_dict(self) -> dict[str, Any]:
        roll = self.roll
        return {
            "index": self.index,
            "prompts": self.prompts,
            "cond": vars(self.cond),
            "rewards": self.rewards,
            "advantages": self.advantages,
            "trained": self.trained,
            "chunks": self.chunks,
            "roll": {
                "latents": roll.latents,
                "log_probs": roll.log_probs,
                "sigmas": roll.sigmas,
                "sde_steps": roll.sde_steps,
            },
        }

    @staticmethod
    def from_state(state: dict[str, Any], device: torch.device) -> Generation:
        cond = Conditioning(**{k: None if v is None else v.to(device) for k, v in state["cond"].items()})
        r = state["roll"]
        roll = Rollout(
            r["latents"].to(device), r["log_probs"], r["sigmas"], list(r["sde_steps"]), torch.empty(0)
        )
        return Generation(
            int(state["index"]),
            list(state["prompts"]),
            cond,
            roll,
            state["rewards"],
            state["advantages"],
            list(state["trained"]),
            list(state["chunks"]),
        )
