"""Typed task options (typos and wrong types are errors naming the valid ones) and one CLI flag style."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from r1vision.cli import _train_argv, main
from r1vision.recipes.train import ScriptArguments, task_options
from r1vision.tasks import TaskOptionError, get_task, register_reward, resolve_rewards


# ------------------------------------------------------------------------------------------ options
def test_misspelt_option_names_fail_and_name_the_valid_ones(color_dir: Path) -> None:
    """``strict_fromat`` (sgg) and ``accuracy_weigth`` (geometry) used to be dropped silently."""
    with pytest.raises(
        TaskOptionError, match=r"no option 'strict_fromat'; did you mean 'strict_format'.*Valid"
    ):
        get_task("sgg").rewards(model_family="qwen2_vl", strict_fromat=False)
    with pytest.raises(TaskOptionError, match=r"did you mean 'accuracy_weight'.*format_weight"):
        get_task("geometry").rewards(accuracy_weigth=5.0)
    with pytest.raises(TaskOptionError, match="task 'color' has no option 'prompt'"):
        get_task("color").load(color_dir, prompt="closed")
    # The runner checks --task_options before any data or model is read.
    with pytest.raises(TaskOptionError, match="did you mean 'strict_format'"):
        task_options(get_task("sgg"), '{"strict_fromat": false}')


@pytest.mark.parametrize(
    ("task", "options", "message"),
    [
        (
            "sgg",
            {"prompt": "clsed"},
            "option 'prompt' expects one of 'open', 'closed', 'compact', got 'clsed'",
        ),
        ("sgg", {"think": "yes"}, "option 'think' expects bool, got 'yes'"),
        ("geometry", {"accuracy_weight": "high"}, "option 'accuracy_weight' expects float, got 'high'"),
        ("geometry", {"limit": 2.5}, r"option 'limit' expects int \| None, got 2.5"),
        ("svg", {"weights": [1, 2]}, "option 'weights' expects dict"),
    ],
)
def test_mistyped_values_fail(task: str, options: dict, message: str) -> None:
    with pytest.raises(TaskOptionError, match=message):
        get_task(task).parse_options(options)


def test_valid_options_parse_into_the_dataclass() -> None:
    opts = get_task("sgg").parse_options({"prompt": "closed", "iou_threshold": 1, "warmup_rewards": ["node"]})
    assert opts.prompt == "closed" and opts.iou_threshold == 1 and opts.strict_format is True
    assert get_task("geometry").parse_options(None).accuracy_weight == 1.0
    with pytest.raises(TaskOptionError, match="has no option 'model_family'"):  # runner context, not user's
        get_task("sgg").parse_options({"model_family": "qwen2_vl"})


def test_unknown_task_is_a_message_not_a_traceback(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert main(["tasks", "--options", "nope"]) == 2
    assert "unknown task 'nope'; known tasks: color, geometry" in capsys.readouterr().err
    assert main(["tasks", "--options", "no_such_module:Task"]) == 2
    assert "cannot import task 'no_such_module:Task'" in capsys.readouterr().err


def test_tasks_lists_options_with_defaults(capsys) -> None:
    assert main(["tasks", "--options", "geometry"]) == 0
    out = capsys.readouterr().out
    assert "accuracy_weight" in out and "no_eos_weight" in out and "1.0" in out
    assert main(["tasks", "--options", "color"]) == 0
    assert "has no options" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ rewards
def test_reward_funcs_take_task_names_registered_names_and_dotted_paths(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_rewards_mod.py").write_text(
        "def brevity(prompts, completions, **kw):\n    return [1.0 / (1 + len(str(c))) for c in completions]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "my_rewards_mod", raising=False)
    register_reward("always_one", lambda prompts, completions, **kw: [1.0] * len(completions))
    task = get_task("color")
    specs = resolve_rewards(task, ["accuracy,always_one", "my_rewards_mod.brevity"], task.rewards())
    assert [s.name for s in specs] == ["accuracy", "always_one", "brevity"]
    assert specs[2].func(None, ["ab"]) == [1 / 3]
    assert [s.name for s in resolve_rewards(task, None, task.rewards())] == ["accuracy", "format"]
    with pytest.raises(KeyError, match=r"unknown reward 'acuracy'.*\['accuracy', 'format'\]"):
        resolve_rewards(task, ["acuracy"], task.rewards())
    with pytest.raises(KeyError, match="cannot import reward function 'my_rewards_mod.nope'"):
        resolve_rewards(task, ["my_rewards_mod.nope"], task.rewards())


# ------------------------------------------------------------------------------------------ CLI
def test_train_commands_accept_trl_names_and_both_spellings(tmp_path) -> None:
    from trl import TrlParser

    from r1vision.trainer.config import VisionGRPOConfig

    argv = _train_argv(
        ["--model_name_or_path", "m", "--dataset-name", "d", "--out", str(tmp_path), "--split=val",
         "--max-pixels", "3136", "--reward_funcs", "accuracy", "mod.fn", "--options", "{}", "--use_cpu", "true"]
    )  # fmt: skip
    script, config = TrlParser((ScriptArguments, VisionGRPOConfig)).parse_args_and_config(argv)
    assert (script.model, script.dataset, script.dataset_split) == ("m", "d", "val")
    assert config.output_dir == str(tmp_path) and config.max_pixels == 3136
    assert script.reward_funcs == ["accuracy", "mod.fn"] and script.task_options == "{}"
    old = ScriptArguments(model="m", dataset="d", rewards="accuracy,format")  # the older --rewards
    assert old.reward_funcs == ["accuracy,format"]
    with pytest.raises(ValueError, match="name the same thing"):
        ScriptArguments(model="m", model_name_or_path="n", dataset="d")


@pytest.mark.parametrize(
    "spelling",
    [
        ["color", "--out", "{out}", "--n", "2"],
        ["--task", "color", "--output_dir", "{out}", "--n", "2", "--split", "test"],
        ["--task=color", "--output-dir", "{out}", "--n=2", "--options", "{{}}"],
    ],
)
def test_synth_spellings(tmp_path, spelling) -> None:
    out = tmp_path / "d"
    assert main(["synth", *[s.format(out=out) for s in spelling]]) == 0
    assert any(out.glob("*.jsonl"))


def test_infer_eval_viz_share_names(tmp_path, monkeypatch, color_dir, capsys) -> None:
    import r1vision.recipes.infer as infer_module

    seen = {}
    monkeypatch.setattr(infer_module, "run_inference", lambda *a, **k: seen.update(args=a, kwargs=k) or "x")
    for flags in (
        ["--task", "color", "--model", "M", "--dataset", "D", "--out", "O", "--max-pixels", "3136", "--batch-size", "2"],
        ["color", "--model_name_or_path", "M", "--dataset_name", "D", "--output_dir", "O", "--max_pixels", "3136",
         "--batch_size", "2"],
    ):  # fmt: skip
        seen.clear()
        assert main(["infer", *flags]) == 0
        assert seen["args"][1:] == ("M", "D", "O") and seen["kwargs"]["max_pixels"] == 3136
        assert seen["kwargs"]["batch_size"] == 2
    # a typo in a task option is refused before any model loads, with the valid names and no traceback
    seen.clear()
    code = main(["infer", "--task", "sgg", "--model", "M", "--dataset", "D", "--out", "O",
                 "--task_options", '{"promt": "closed"}'])  # fmt: skip
    assert code == 2 and "did you mean 'prompt'" in capsys.readouterr().err and not seen

    # eval: --gt / --dataset / --dataset_name, positional or --task, --json-out / --json_out
    from r1vision.vision.records import RecordWriter

    rows = get_task("color").load(color_dir, split="test")
    writer = RecordWriter(tmp_path / "pred")
    for i in range(len(rows)):
        writer.write({"index": i, "id": rows[i]["id"], "completion": f"<answer>{rows[i]['answer']}</answer>"})
    for k, flags in enumerate(
        (
            ["color", "--gt", str(color_dir), "--json-out", str(tmp_path / "m0.json")],
            ["--task", "color", "--dataset", str(color_dir), "--json_out", str(tmp_path / "m1.json")],
            ["--task", "color", "--dataset_name", str(color_dir), "--json_out", str(tmp_path / "m2.json")],
        )
    ):
        assert main(["eval", *flags, "--pred", str(tmp_path / "pred")]) == 0
        assert json.loads((tmp_path / f"m{k}.json").read_text())["reward/accuracy"] == 1.0
    with pytest.raises(SystemExit):
        main(["eval", "color", "--task", "sgg", "--dataset", "D", "--pred", "P"])  # two different tasks
    assert "two tasks given" in capsys.readouterr().err


def test_dash_style_commands_take_underscores_too(capsys) -> None:
    from r1vision.cli import _kebab_argv
    from r1vision.estimate import builtin_shapes

    shape = builtin_shapes()[0]
    outputs = []
    for flag in ("--max-pixels", "--max_pixels"):
        assert main(["estimate-memory", "--model", shape, "--gpus", "2", flag, "200704", "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]
    assert _kebab_argv(["--num_servers", "2", "--", "accelerate", "--num_processes", "2"]) == [
        "--num-servers", "2", "--", "accelerate", "--num_processes", "2"
    ]  # fmt: skip
    assert _kebab_argv(["--output_dir=x", "--quick"], {"--output-dir": "--out"}) == ["--out=x", "--quick"]
