"""Typed task options: parsed once into the task's dataclass; typos and wrong types are errors naming the
valid ones; a recipe's options and the command line's merge option by option."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from r1vision.tasks import TaskOptionError, get_task
from r1vision.tasks.options import merge_options, option, options_mapping


def test_misspelt_option_names_fail_and_name_the_valid_ones(color_dir: Path) -> None:
    """``strict_fromat`` (sgg) and ``accuracy_weigth`` (geometry) used to be dropped silently."""
    with pytest.raises(
        TaskOptionError, match=r"no option 'strict_fromat'; did you mean 'strict_format'.*Valid"
    ):
        get_task("sgg").parse_options({"strict_fromat": False})
    with pytest.raises(TaskOptionError, match=r"did you mean 'accuracy_weight'.*format_weight"):
        get_task("geometry").parse_options('{"accuracy_weigth": 5.0}')
    with pytest.raises(TaskOptionError, match="task 'color' has no option 'prompt'"):
        get_task("color").parse_options({"prompt": "closed"})


@pytest.mark.parametrize(
    ("task", "options", "message"),
    [
        (
            "sgg",
            {"prompt": "clsed"},
            "option 'prompt' expects one of 'open', 'closed', 'compact', 'r1sgg', 'r1sgg_closed', got 'clsed'",
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
    assert get_task("sgg").parse_options(opts) is opts  # an Options instance is the value itself
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.prompt = "open"  # type: ignore[misc]
    with pytest.raises(TaskOptionError, match="has no option 'model_family'"):  # the run's, not the user's
        get_task("sgg").parse_options({"model_family": "qwen2_vl"})


def test_json_and_mappings_and_their_merge() -> None:
    assert options_mapping('{"a": 1}') == {"a": 1} and options_mapping(None) == {}
    with pytest.raises(TaskOptionError, match="--task_options must be a JSON object: Expecting"):
        options_mapping("{a: 1}")
    with pytest.raises(TaskOptionError, match="must be a JSON object, got"):
        options_mapping("[1, 2]")
    # the r1sgg preset of a recipe survives a command-line option that does not name it
    assert merge_options({"preset": "r1sgg"}, '{"think": true}') == {"preset": "r1sgg", "think": True}
    assert merge_options({"preset": "r1sgg", "think": False}, {"think": True})["think"] is True


def test_every_default_is_written_once_and_immutable() -> None:
    with pytest.raises(TypeError, match="mutable option defaults"):
        option({}, "a dict default would be shared by every instance")
    for name in ("sgg", "geometry", "svg", "color"):
        cls = get_task(name).Options
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{name}.{f.name} has no help"
            assert not isinstance(f.default, (dict, list, set)), f"{name}.{f.name}"
