"""docs/extending.md's "Add a reward" and "Add a task" sections run as written (on a tiny model, 1-2 steps)."""

from __future__ import annotations

import csv
import re
import shlex
import sys
from pathlib import Path

import pytest

from r1vision.cli import main
from tests.helpers.paths import ROOT

DOC = ROOT / "docs" / "extending.md"
# Fast settings appended to the documented training commands (the commands themselves stay as written).
FAST = {
    "sft": ["--max_steps", "1", "--per_device_train_batch_size", "4", "--max_pixels", "3136", "--use_cpu", "true",
            "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1"],
    "grpo": ["--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "4",
             "--max_completion_length", "6", "--max_pixels", "3136", "--use_cpu", "true", "--report_to", "none",
             "--save_strategy", "no", "--logging_steps", "1"],
}  # fmt: skip


def section(title: str) -> str:
    text = DOC.read_text() + "\n## "
    start = text.index(f"## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def run_section(title: str, tmp_path: Path, monkeypatch, env: dict[str, str]) -> list[list[str]]:
    """Write the section's Python files (first line ``# name.py``) and run its ``r1vision`` commands."""
    text = section(title)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader puts the working directory on it
    for code in blocks(text, "python"):
        name = code.splitlines()[0].lstrip("# ").split()[0]
        assert name.endswith(".py"), f"{title}: a python block must start with '# file.py', got {name!r}"
        (tmp_path / name).write_text(code)
        monkeypatch.delitem(sys.modules, name[:-3], raising=False)
    monkeypatch.chdir(tmp_path)
    ran = []
    for script in blocks(text, "bash"):
        for command in script.replace("\\\n", " ").splitlines():
            argv = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], a) for a in shlex.split(command)]
            assert argv[0] == "r1vision", command
            extra = FAST.get(argv[1], [])
            assert main(argv[1:] + extra) == 0, command
            ran.append(argv[1:])
    assert ran, f"no commands in the section {title!r} of {DOC}"
    return ran


def test_add_a_reward(tmp_path, monkeypatch, tiny_model, color_dir) -> None:
    out = tmp_path / "out"
    ran = run_section(
        "Add a reward",
        tmp_path,
        monkeypatch,
        {"MODEL": tiny_model("qwen2_vl"), "DATA": str(color_dir), "OUT": str(out)},
    )
    assert [r[0] for r in ran] == ["grpo"]
    with open(out / "metrics.csv") as f:
        row = next(csv.DictReader(f))
    assert "rewards/brevity/mean" in row and "rewards/color_accuracy/mean" in row
    assert 0.0 < float(row["rewards/brevity/mean"]) <= 1.0


def test_add_a_task(tmp_path, monkeypatch, tiny_model, capsys) -> None:
    out, data = tmp_path / "out", tmp_path / "data"
    ran = run_section(
        "Add a task",
        tmp_path,
        monkeypatch,
        {"MODEL": tiny_model("qwen2_vl"), "DATA": str(data), "OUT": str(out)},
    )
    assert [r[0] for r in ran] == ["tasks", "synth", "sft", "grpo"]
    assert "question" in capsys.readouterr().out  # `tasks --options` printed the option table
    assert (out / "grpo" / "model.safetensors").exists()
    with open(out / "grpo" / "metrics.csv") as f:
        assert "rewards/shape_accuracy/mean" in next(csv.DictReader(f))
    # the typed options guard the example task too
    from r1vision.tasks import TaskOptionError, get_task

    with pytest.raises(TaskOptionError, match="did you mean 'question'"):
        get_task("shape_task:ShapeTask").parse_options({"questoin": "?"})
