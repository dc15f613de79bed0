"""The SDE policy step: its density is the Gaussian it samples from, it tends to the Euler ODE step as the
noise vanishes, and replaying a rollout gives exactly the recorded log-densities."""

from __future__ import annotations

import math

import pytest
import torch

from r1vision.diffusion.sde import gaussian_log_prob, latent_kl, sde_step


@pytest.mark.parametrize("kind", ["flow_grpo", "cps"])
def test_density_is_the_sampling_gaussian(kind):
    g = torch.Generator().manual_seed(0)
    x, v = torch.randn(3, 4, 5, 5, generator=g), torch.randn(3, 4, 5, 5, generator=g)
    step = sde_step(v, x, 0.8, 0.6, sigma_max=0.95, noise_level=0.7, kind=kind, generator=g)
    normal = torch.distributions.Normal(step.mean, step.std)
    want = normal.log_prob(step.sample).mean(dim=(1, 2, 3))
    assert torch.allclose(step.log_prob, want, atol=1e-5)
    # replaying the same transition gives the same density, exactly
    again = sde_step(v, x, 0.8, 0.6, sigma_max=0.95, noise_level=0.7, kind=kind, prev=step.sample)
    assert torch.equal(again.log_prob, step.log_prob) and torch.equal(again.mean, step.mean)


def test_flow_grpo_mean_and_std_by_hand_and_the_noise_free_limit():
    x, v = torch.full((1, 1, 1, 1), 0.5), torch.full((1, 1, 1, 1), -1.0)
    sigma, nxt, noise = 0.8, 0.6, 0.7
    std_t = noise * math.sqrt(sigma / (1 - sigma))
    dt = nxt - sigma
    mean = 0.5 * (1 + std_t**2 / (2 * sigma) * dt) - 1.0 * (1 + std_t**2 * (1 - sigma) / (2 * sigma)) * dt
    step = sde_step(v, x, sigma, nxt, sigma_max=0.95, noise_level=noise)
    assert float(step.mean) == pytest.approx(mean) and float(step.std) == pytest.approx(
        std_t * math.sqrt(-dt)
    )
    ode = 0.5 + (-1.0) * dt  # Euler step of the flow ODE
    gaps = [
        abs(float(sde_step(v, x, sigma, nxt, sigma_max=0.95, noise_level=n).mean) - ode)
        for n in (0.5, 0.1, 1e-3)
    ]
    assert gaps[0] > gaps[1] > gaps[2] < 1e-6
    assert float(sde_step(v, x, sigma, nxt, sigma_max=0.95, noise_level=0.0).sample) == pytest.approx(ode)
    # sigma = 1 (the first step) uses sigmas[1] in the denominator instead of dividing by zero
    first = sde_step(v, x, 1.0, 0.9, sigma_max=0.95, noise_level=noise)
    assert torch.isfinite(first.mean).all() and float(first.std) == pytest.approx(
        noise * math.sqrt(1 / 0.05) * math.sqrt(0.1)
    )


def test_kl_is_zero_for_equal_means_and_matches_the_closed_form():
    mean = torch.randn(2, 3, 4, 4)
    assert torch.equal(latent_kl(mean, mean, torch.tensor(0.3)), torch.zeros(2))
    ref = mean + 0.1
    assert torch.allclose(latent_kl(mean, ref, torch.tensor(0.5)), torch.full((2,), 0.01 / (2 * 0.25)))
    assert gaussian_log_prob(mean, mean, torch.tensor(1.0)).shape == (2,)
