"""A fixture that pins torch to one thread for a test (two threads on a busy 2-core machine measured 20x
slower for the text-to-image tests)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
