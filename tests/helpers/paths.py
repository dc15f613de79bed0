"""Where things are in the checkout, for tests in any folder."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
CONFIGS = ROOT / "configs"
RECIPES = CONFIGS / "recipes"
RECIPE_FILES = [
    p for p in sorted(RECIPES.glob("*.yaml")) if not p.name.startswith("t2i_")
]  # VLM recipes (t2i_*: t2i-grpo)
FIXTURES = ROOT / "tests" / "fixtures"
SCRIPTS = ROOT / "tests" / "scripts"


def env_with_src(**extra: str) -> dict[str, str]:
    """This process's environment with the checkout's ``src`` first on ``PYTHONPATH`` (for subprocesses)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env
