"""``import r1vision`` and ``r1vision --help`` import neither torch nor transformers, and the
image-only processors are still registered before any processor loads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT

SRC = str(ROOT / "src")


def run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


HEAVY = "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))"


def test_import_and_help_stay_light() -> None:
    assert run(f"import sys, r1vision\n{HEAVY}").strip() == "[]"
    out = run(f"import sys\nfrom r1vision.cli import main\nassert main(['--help']) == 0\n{HEAVY}")
    assert out.strip().endswith("[]") and "training:" in out
    # the task list and a task's options need no model stack either
    out = run(
        f"import sys\nfrom r1vision.cli import main\nassert main(['tasks', '--options', 'sgg']) == 0\n{HEAVY}"
    )
    assert "strict_format" in out and "'torch'" not in out and "'transformers'" not in out


CHECK = """
from transformers import AutoProcessor, Qwen2VLConfig, Qwen3VLConfig
from transformers.models.auto import processing_auto
assert processing_auto.PROCESSOR_MAPPING[Qwen2VLConfig].__name__ == "ImageOnlyQwen2VLProcessor"
assert processing_auto.PROCESSOR_MAPPING[Qwen3VLConfig].__name__ == "ImageOnlyQwen3VLProcessor"
print(type(AutoProcessor.from_pretrained(MODEL)).__name__)
"""


@pytest.mark.slow
def test_processors_registered_before_any_load(tiny_model) -> None:
    model = tiny_model("qwen2_vl")
    # r1vision first, transformers later (the hook registers right after transformers is imported) ...
    assert run(f"MODEL = {model!r}\nimport r1vision\n{CHECK}").strip() == "ImageOnlyQwen2VLProcessor"
    # ... and transformers first (registered at once)
    assert (
        run(f"MODEL = {model!r}\nimport transformers, r1vision\n{CHECK}").strip()
        == "ImageOnlyQwen2VLProcessor"
    )
