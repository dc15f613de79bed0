"""The command line: one module per command, help generated from them, one flag style (``--max_pixels``
= ``--max-pixels``), TRL's names for model and dataset, and refusals as one line with exit code 2."""

from __future__ import annotations

import importlib
import json
import re
import sys

import pytest

from r1vision.cli import main, usage
from r1vision.commands import COMMANDS
from r1vision.runners.train import ScriptArguments
from tests.helpers.tasks import task_rows


def test_help_lists_every_command_from_its_module(capsys) -> None:
    text = usage()
    for name, module in COMMANDS.items():
        doc = importlib.import_module(f"r1vision.commands.{module}").__doc__.strip().splitlines()[0]
        assert f"  {name}" in text and doc in text
    assert main(["--help"]) == 0 and capsys.readouterr().out.strip() == text.strip()
    assert main(["--version"]) == 0 and capsys.readouterr().out.startswith("r1vision 0.")


def test_unknown_command_suggests_the_closest(capsys) -> None:
    assert main(["infr"]) == 2
    assert "unknown command 'infr'; did you mean 'infer'?" in capsys.readouterr().err


def test_train_commands_accept_trl_names_and_both_spellings(tmp_path) -> None:
    from r1vision.commands._train import parse

    argv = ["--task", "color", "--model_name_or_path", "m", "--dataset-name", "d", "--output_dir", str(tmp_path),
            "--dataset_split=val", "--max-pixels", "3136", "--reward_funcs", "accuracy", "mod.fn",
            "--task_options", "{}", "--use_cpu", "true"]  # fmt: skip
    script, config = parse("grpo", argv)
    assert (script.model, script.dataset, script.dataset_split) == ("m", "d", "val")
    assert config.output_dir == str(tmp_path) and config.max_pixels == 3136
    assert script.reward_funcs == ["accuracy", "mod.fn"] and script.task_options == "{}"
    with pytest.raises(ValueError, match="name the same thing"):
        ScriptArguments(task="color", model="m", model_name_or_path="n", dataset="d")
    with pytest.raises(ValueError, match="--task is required"):
        ScriptArguments(model="m", dataset="d")


def test_recipe_task_options_merge_with_the_command_line(tmp_path) -> None:
    from r1vision.commands._train import parse

    argv = ["--config", "sgg_grpo", "--model", "m", "--dataset", "d", "--output_dir", str(tmp_path),
            "--use_cpu", "true", "--task_options", '{"think": true}']  # fmt: skip
    script, _ = parse("grpo", argv)
    assert script.task_options == {"preset": "r1sgg", "think": True}
    script, _ = parse("grpo", argv[:-2])
    assert script.task_options == {"preset": "r1sgg"}


@pytest.mark.parametrize("old", [["--out", "x"], ["--gt", "x"], ["--options", "{}"], ["color"]])
def test_older_aliases_are_gone(tmp_path, old) -> None:
    argv = ["synth", "--task", "color", "--output_dir", str(tmp_path), "--n", "1"]
    with pytest.raises(SystemExit):
        main([*argv, *old])


def test_synth_spellings(tmp_path) -> None:
    for i, spelling in enumerate(
        (
            ["--task", "color", "--output_dir", "{out}", "--n", "2", "--split", "test"],
            ["--task=color", "--output-dir", "{out}", "--n=2", "--synth_options", "{{}}"],
        )
    ):
        out = tmp_path / f"d{i}"
        assert main(["synth", *[s.format(out=out) for s in spelling]]) == 0
        assert any(out.glob("*.jsonl"))


def test_infer_and_eval_share_names(tmp_path, monkeypatch, color_dir, capsys) -> None:
    import r1vision.runners.infer as infer_module

    seen: dict = {}
    monkeypatch.setattr(infer_module, "run_inference", lambda *a, **k: seen.update(args=a, kwargs=k) or "x")
    for flags in (
        ["--task", "color", "--model", "M", "--dataset", "D", "--output_dir", "O", "--max-pixels", "3136",
         "--batch-size", "2"],
        ["--task=color", "--model", "M", "--dataset", "D", "--output-dir", "O", "--max_pixels", "3136",
         "--batch_size", "2"],
    ):  # fmt: skip
        seen.clear()
        assert main(["infer", *flags]) == 0
        assert seen["args"][2:] == ("M", "D", "O") and seen["kwargs"]["max_pixels"] == 3136
        assert seen["kwargs"]["batch_size"] == 2
    # a typo in a task option is refused before any model loads, with the valid names and no traceback
    seen.clear()
    code = main(["infer", "--task", "sgg", "--model", "M", "--dataset", "D", "--output_dir", "O",
                 "--task_options", '{"promt": "closed"}'])  # fmt: skip
    assert code == 2 and "did you mean 'prompt'" in capsys.readouterr().err and not seen

    from r1vision.vision.records import RecordWriter

    rows = task_rows("color", color_dir, split="test")
    writer = RecordWriter(tmp_path / "pred")
    for i in range(len(rows)):
        writer.write({"index": i, "id": rows[i]["id"], "completion": f"<answer>{rows[i]['answer']}</answer>"})
    for k, flag in enumerate(("--json-out", "--json_out")):
        argv = ["eval", "--task", "color", "--dataset", str(color_dir), flag, str(tmp_path / f"m{k}.json")]
        assert main([*argv, "--pred", str(tmp_path / "pred")]) == 0
        assert json.loads((tmp_path / f"m{k}.json").read_text())["reward/accuracy"] == 1.0
    out = capsys.readouterr().out
    assert f"color on {color_dir} (test)" in out
    assert re.search(rf"num_items +{len(rows)}\n", out) and ".0000" not in out  # counts print as integers


def test_dash_style_tools_take_underscores_too(capsys) -> None:
    from r1vision.estimate import builtin_shapes

    shape = builtin_shapes()[0]
    outputs = []
    for flag in ("--max-pixels", "--max_pixels"):
        assert main(["estimate-memory", "--model", shape, "--gpus", "2", flag, "200704", "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]


def test_command_modules_import_nothing_heavy() -> None:
    """``r1vision --help`` imports every command module: none may pull torch, TRL or transformers."""
    import subprocess

    code = ("import sys, r1vision.cli as c; c.usage(); "
            "print(sorted(m for m in ('torch', 'trl', 'transformers', 'datasets') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
def test_no_deepspeed_accelerator_warning_on_a_cpu_machine(tiny_model, color_dir, tmp_path):
    """DeepSpeed's "Setting accelerator to CPU" warning used to appear on every command importing transformers."""
    import shutil
    import subprocess
    import sys

    from tests.helpers.paths import env_with_src

    if shutil.which("nvidia-smi"):
        pytest.skip("an NVIDIA driver is present: DeepSpeed detects the GPU itself")
    env = {k: v for k, v in env_with_src().items() if k != "DS_ACCELERATOR"}
    argv = [sys.executable, "-m", "r1vision.cli", "infer", "--task", "color", "--model", tiny_model("qwen2_vl"),
            "--dataset", str(color_dir), "--split", "test", "--output_dir", str(tmp_path / "p"), "--limit", "1"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Setting accelerator to CPU" not in done.stderr
