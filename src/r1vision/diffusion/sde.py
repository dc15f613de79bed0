"""One stochastic sampling step of a flow-matching model with its Gaussian log-density (Flow-GRPO's policy).

A flow model predicts a velocity ``v`` at noise level ``sigma``; the ODE step is ``x + v * dt`` with
``dt = sigma_next - sigma < 0``. GRPO needs a stochastic policy with a density, so the step is the
Euler-Maruyama step of an SDE with the same marginals (Flow-GRPO, arXiv 2505.05470, eq. 9-12):

    std_t = noise_level * sqrt(sigma / (1 - sigma))          (sigma = 1 replaced by the second sigma)
    mean  = x * (1 + std_t**2 / (2 sigma) * dt) + v * (1 + std_t**2 * (1 - sigma) / (2 sigma)) * dt
    x'    = mean + std_t * sqrt(-dt) * eps

``kind="cps"`` is coefficient-preserving sampling (Flow-GRPO-Fast): ``s = sigma_next * sin(noise_level * pi/2)``,
``mean = (1 - sigma_next) x0 + sqrt(sigma_next**2 - s**2) * eps_hat`` with ``x0 = x - sigma v`` and
``eps_hat = x + (1 - sigma) v``, ``x' = mean + s * eps``. ``kind="ode"`` is the deterministic Euler step (log
density 0). All the math runs in float32 whatever the model's dtype (bf16 overflows in ``mean``), and the
log-density is averaged over the sample's dimensions (per-sample, as Flow-GRPO), so its scale does not depend
on the resolution.

diffusers' ``FlowMatchEulerDiscreteScheduler`` provides the sigmas; none of its schedulers returns a
log-probability, so this step is r1vision's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

KINDS = ("flow_grpo", "cps", "ode")


@dataclass
class Step:
    """The result of one step: the next sample, its log-density per sample, the mean and the std used.

    ``std_dev_t`` is what Flow-GRPO's step returns and its KL divides by: ``noise_level * sqrt(sigma / (1 -
    sigma))`` for ``flow_grpo`` (the transition's std without its ``sqrt(|dt|)``), the transition's std for
    ``cps``."""

    sample: torch.Tensor
    log_prob: torch.Tensor  # (batch,)
    mean: torch.Tensor
    std: torch.Tensor  # scalar tensor: the step's standard deviation (0 for "ode")
    std_dev_t: torch.Tensor | None = None


def sde_step(
    velocity: torch.Tensor,
    x: torch.Tensor,
    sigma: float | torch.Tensor,
    sigma_next: float | torch.Tensor,
    *,
    sigma_max: float,
    noise_level: float = 0.7,
    kind: str = "flow_grpo",
    prev: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Step:
    """One step from noise level ``sigma`` to ``sigma_next`` (see the module docstring).

    ``prev``: the next sample already taken (a replay: only its log-density under the current model is
    computed). ``sigma_max``: the first sigma below 1 (``sigmas[1]``), used where ``sigma == 1``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}; choose one of {', '.join(KINDS)}")
    v, x = velocity.float(), x.float()
    sigma = torch.as_tensor(sigma, dtype=torch.float32, device=x.device)
    sigma_next = torch.as_tensor(sigma_next, dtype=torch.float32, device=x.device)
    dt = sigma_next - sigma
    if kind == "ode" or noise_level == 0:
        mean = x + v * dt
        sample = mean if prev is None else prev.float()
        return Step(sample, torch.zeros(x.shape[0], device=x.device), mean, torch.zeros((), device=x.device))
    if kind == "flow_grpo":
        denominator = 1 - torch.where(sigma == 1, torch.as_tensor(sigma_max, device=x.device), sigma)
        std_t = torch.sqrt(sigma / denominator) * noise_level
        mean = x * (1 + std_t**2 / (2 * sigma) * dt) + v * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt
        std = std_t * torch.sqrt(-dt)
        std_dev_t = std_t
    else:  # cps
        std = sigma_next * math.sin(noise_level * math.pi / 2)
        x0, eps_hat = x - sigma * v, x + (1 - sigma) * v
        mean = (1 - sigma_next) * x0 + torch.sqrt(torch.clamp(sigma_next**2 - std**2, min=0.0)) * eps_hat
        std_dev_t = torch.as_tensor(std, dtype=torch.float32, device=x.device)
    if prev is None:
        # drawn where the generator lives (a CPU generator keeps GPU runs reproducible), then moved
        where = generator.device if generator is not None else x.device
        noise = torch.randn(x.shape, generator=generator, device=where, dtype=torch.float32).to(x.device)
        sample = mean + std * noise
    else:
        sample = prev.float()
    log_prob = gaussian_log_prob(sample.detach(), mean, std)
    return Step(sample, log_prob, mean, torch.as_tensor(std, device=x.device), std_dev_t)


def gaussian_log_prob(sample: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Log-density of ``sample`` under N(mean, std^2), averaged over all but the batch dimension."""
    std = torch.clamp(std, min=1e-12)
    density = -((sample - mean) ** 2) / (2 * std**2) - torch.log(std) - 0.5 * math.log(2 * math.pi)
    return density.mean(dim=tuple(range(1, density.ndim)))


def latent_kl(mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``mean((mu - mu_ref)^2) / (2 std^2)`` per sample: the KL between two Gaussian steps of std ``std``
    (the transition's std), or Flow-GRPO's KL term with ``std = Step.std_dev_t`` (its scripts divide by the
    step's ``std_dev_t``, i.e. ``|dt|`` times the Gaussian KL for ``flow_grpo`` steps)."""
    std = torch.clamp(std, min=1e-12)
    diff = (mean.float() - ref_mean.float()) ** 2
    return diff.mean(dim=tuple(range(1, diff.ndim))) / (2 * std**2)
