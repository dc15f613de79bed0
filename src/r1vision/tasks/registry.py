"""The registries: task names → ``Task`` classes (imported on first use, so optional dependencies stay
lazy) and reward names → functions for ``--reward_funcs``."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from r1vision.tasks.base import RewardFunc, RewardSpec, Task

_REGISTRY: dict[str, type[Task] | str] = {}


class RewardWeightsError(ValueError):
    """``--reward_weights`` does not give one weight per selected reward."""


def check_reward_weights(weights: Sequence[float] | None, names: Sequence[str]) -> None:
    """Raise :class:`RewardWeightsError` unless ``weights`` is ``None`` or has one value per reward."""
    if weights is not None and len(weights) != len(names):
        raise RewardWeightsError(
            f"--reward_weights has {len(weights)} value(s) for {len(names)} reward(s) ({', '.join(names)})"
        )


class UnknownNameError(KeyError):
    """An unknown task or reward name, or a dotted path that cannot be imported; the message lists the names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def register_task(name: str, target: type[Task] | str) -> None:
    """Register a task class, or a ``"module:Class"`` path imported on first use (keeps optional deps lazy)."""
    _REGISTRY[name] = target


def task_class(name: str) -> type[Task]:
    """The class registered under ``name`` (imported now if registered by path), or ``"module:Class"`` for
    a task defined outside r1vision (imported from the working directory or the Python path, as
    ``--reward_funcs`` does); the error lists the known names."""
    if name not in _REGISTRY and ":" in name:
        _on_path_cwd()
        module, _, cls_name = name.partition(":")
        try:
            target = getattr(importlib.import_module(module), cls_name)
        except (ImportError, AttributeError) as exc:
            raise UnknownNameError(f"cannot import task {name!r}: {exc}") from exc
        register_task(name, target)
    if name not in _REGISTRY:
        raise UnknownNameError(
            f"unknown task {name!r}; known tasks: {', '.join(sorted(_REGISTRY))} (or module:Class)"
        )
    target = _REGISTRY[name]
    if isinstance(target, str):
        module, _, cls_name = target.partition(":")
        target = getattr(importlib.import_module(module), cls_name)
        _REGISTRY[name] = target
    return target


def get_task(name: str) -> Task:
    """Instantiate the task registered under ``name``; the error lists the known names."""
    return task_class(name)()


def list_tasks() -> list[str]:
    """Names of all registered tasks."""
    return sorted(_REGISTRY)


# ------------------------------------------------------------------------------------------ rewards
_REWARDS: dict[str, RewardSpec] = {}


def register_reward(
    name: str, func: RewardFunc, weight: float = 1.0, low: float = 0.0, high: float = 1.0
) -> None:
    """Make ``func`` selectable as ``--reward_funcs name`` for every task (TRL's reward convention)."""
    _REWARDS[name] = RewardSpec(name, func, weight, low, high)


def list_rewards() -> list[str]:
    """Names registered with :func:`register_reward`."""
    return sorted(_REWARDS)


def resolve_rewards(task: Task, names: Sequence[str] | None, specs: Sequence[RewardSpec]) -> list[RewardSpec]:
    """The rewards ``--reward_funcs`` names, like TRL's: a reward of the task (``specs``), a name registered
    with :func:`register_reward`, or a dotted path ``my_module.fn`` imported from the working directory or
    the Python path. ``None`` or empty keeps all of the task's rewards. Unknown names are an error that
    lists the valid ones."""
    wanted = [n.strip() for item in names or () for n in str(item).split(",") if n.strip()]
    if not wanted:
        return list(specs)
    own = {s.name: s for s in specs}
    out = []
    for name in wanted:
        if name in own:
            out.append(own[name])
        elif name in _REWARDS:
            out.append(_REWARDS[name])
        elif "." in name:
            out.append(_import_reward(name))
        else:
            raise UnknownNameError(_unknown_reward(name, task.name, sorted(own)))
    return out


def _unknown_reward(name: str, task: str, own: list[str]) -> str:
    """The refusal of an unknown reward name: a suggestion (TRL's ``accuracy_reward`` spelling included), then
    every valid choice."""
    from r1vision.suggest import closest

    valid = own + list_rewards()
    bare = name.removesuffix("_reward")  # TRL's spelling (accuracy_reward) of our `accuracy`
    close = (bare if bare in valid else None) or closest(bare, valid) or next(
        (v for v in valid if bare in v.split("_")), None)  # fmt: skip
    hint = f" (did you mean {close!r}?)" if close else ""
    registered = f", a registered one ({', '.join(list_rewards())})" if list_rewards() else ""
    return (
        f"unknown reward {name!r} for task {task!r}{hint}; valid: the task's ({', '.join(own)})"
        f"{registered}, or a dotted path module.function"
    )


def _import_reward(path: str) -> RewardSpec:
    module_name, _, attr = path.rpartition(".")
    _on_path_cwd()
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UnknownNameError(f"cannot import reward function {path!r}: {exc}") from exc
    if not callable(func):
        raise UnknownNameError(f"reward {path!r} is not callable")
    # The range of an outside function is not known: nothing is assumed about it.
    return RewardSpec(attr, func, 1.0, float("-inf"), float("inf"))


def _on_path_cwd() -> None:
    """Put the working directory on ``sys.path``, as TRL's scripts do: a module beside the command is found."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
