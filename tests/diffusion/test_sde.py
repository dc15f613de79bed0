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


def _flow_grpo_step(v, x, sigma, sigma_prev, sigma_max, noise_level):
    """Flow-GRPO's sde_step_with_logprob (flow_grpo/diffusers_patch/sd3_sde_with_logprob.py) on fixed
    inputs: it returns the mean and ``std_dev_t`` (without the sqrt(-dt) of the transition's std)."""
    dt = sigma_prev - sigma
    std_dev_t = math.sqrt(sigma / (1 - (sigma_max if sigma == 1 else sigma))) * noise_level
    mean = x * (1 + std_dev_t**2 / (2 * sigma) * dt) + v * (1 + std_dev_t**2 * (1 - sigma) / (2 * sigma)) * dt
    return mean, std_dev_t


@pytest.mark.parametrize("sigma,sigma_prev", [(1.0, 0.94), (0.8, 0.6), (0.3, 0.1)])
def test_the_kl_term_is_flow_grpos_and_the_option_keeps_the_gaussian_kl(sigma, sigma_prev):
    """Flow-GRPO's train_sd3.py: kl = mean((mu - mu_ref)^2) / (2 std_dev_t^2), per sample, then averaged. The
    Gaussian KL of the transition (kl_use_dt) is that divided by |dt|: 3.7-25x larger at 10 steps."""
    g = torch.Generator().manual_seed(1)
    x, v, v_ref = (torch.randn(2, 4, 6, 6, generator=g) for _ in range(3))
    ours = sde_step(v, x, sigma, sigma_prev, sigma_max=0.94, noise_level=0.7)
    ref = sde_step(v_ref, x, sigma, sigma_prev, sigma_max=0.94, noise_level=0.7)
    mean, std_dev_t = _flow_grpo_step(v, x, sigma, sigma_prev, 0.94, 0.7)
    mean_ref, _ = _flow_grpo_step(v_ref, x, sigma, sigma_prev, 0.94, 0.7)
    want = ((mean - mean_ref) ** 2).mean(dim=(1, 2, 3)) / (2 * std_dev_t**2)
    got = latent_kl(ours.mean, ref.mean, ours.std_dev_t)
    assert torch.allclose(got, want, rtol=1e-5)
    gaussian = latent_kl(ours.mean, ref.mean, ours.std)
    assert torch.allclose(gaussian, want / (sigma - sigma_prev), rtol=1e-5)


def test_the_ema_follows_flow_grpos_schedule():
    """Flow-GRPO's EMAModuleWrapper.step, called after every micro-batch with the optimizer steps taken:
    it moves when (step + 1) % interval == 0, with decay min((1 + step) / (10 + step), decay)."""
    from r1vision.diffusion.ema import EMA

    def reference(values: list[float], steps: list[int], decay=0.9, interval=8) -> float:
        ema = values[0]
        for value, step in zip(values[1:], steps, strict=True):
            if (step + 1) % interval == 0:
                ema += (1 - min((1 + step) / (10 + step), decay)) * (value - ema)
        return ema

    p = torch.nn.Parameter(torch.zeros(1))
    ema = EMA([p], decay=0.9, update_interval=8)
    values, steps = [0.0], []
    for micro in range(64):  # 2 micro-batches per optimizer step: the step count after each micro-batch
        with torch.no_grad():
            p.fill_(float(micro + 1))
        step = (micro + 1) // 2
        ema.step(step)
        values.append(float(micro + 1))
        steps.append(step)
    assert float(ema.shadow[0]) == pytest.approx(reference(values, steps), rel=1e-6)
    assert ema.updates == 8  # steps 7, 15, 23, 31, each over 2 micro-batches
