"""Text-to-image tests run with one torch thread (two threads on a busy 2-core machine measured 20x slower)."""

from __future__ import annotations

import pytest

from tests.helpers.threads import one_thread  # noqa: F401 - autouse fixture


@pytest.fixture(scope="session")
def tiny_sd3():
    """``tiny_sd3(pixel_space)`` -> a cached tiny SD3 pipeline folder."""
    from r1vision.testing.tiny_diffusion import tiny_sd3_path

    return lambda pixel_space=False: str(tiny_sd3_path(pixel_space=pixel_space))
