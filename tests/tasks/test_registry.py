"""The registries: task names and ``module:Class`` tasks, reward names and dotted reward paths."""

from __future__ import annotations

import sys

import pytest

from r1vision.tasks import get_task, register_reward, resolve_rewards
from r1vision.tasks.base import RunContext


def test_reward_funcs_take_task_names_registered_names_and_dotted_paths(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_rewards_mod.py").write_text(
        "def brevity(prompts, completions, **kw):\n    return [1.0 / (1 + len(str(c))) for c in completions]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "my_rewards_mod", raising=False)
    register_reward("always_one", lambda prompts, completions, **kw: [1.0] * len(completions))
    task = get_task("color")
    own = task.rewards(task.parse_options(), RunContext())
    specs = resolve_rewards(task, ["accuracy,always_one", "my_rewards_mod.brevity"], own)
    assert [s.name for s in specs] == ["accuracy", "always_one", "brevity"]
    assert specs[2].func(None, ["ab"]) == [1 / 3]
    assert [s.name for s in resolve_rewards(task, None, own)] == ["accuracy", "format"]
    with pytest.raises(
        KeyError, match=r"unknown reward 'acuracy'.*\(accuracy, format\), a registered one \(.*always_one"
    ):
        resolve_rewards(task, ["acuracy"], own)
    # TRL's spelling of a reward's name gets the task's one suggested
    with pytest.raises(KeyError, match=r"'accuracy_reward' for task 'color' \(did you mean 'accuracy'\?\)"):
        resolve_rewards(task, ["accuracy_reward"], own)
    with pytest.raises(KeyError, match="cannot import reward function 'my_rewards_mod.nope'"):
        resolve_rewards(task, ["my_rewards_mod.nope"], own)


def test_unknown_task_names_the_known_ones(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(KeyError, match="unknown task 'nope'; known tasks: color, geometry"):
        get_task("nope")
    with pytest.raises(KeyError, match="cannot import task 'no_such_module:Task'"):
        get_task("no_such_module:Task")
