"""The registries: task names → ``Task`` classes (imported on first use, so optional dependencies stay
lazy) and reward names → functions for ``--reward_funcs``."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from r1vision import rewards
from r1vision.rewards import RewardFunc, RewardSpec, UnknownRewardError
from r1vision.tasks.base import Task

_REGISTRY: dict[str, type[Task] | str] = {}


class RewardWeightsError(ValueError):
    """``--reward_weights`` does not give one weight per selected reward."""


def check_reward_weights(weights: Sequence[float] | None, names: Sequence[str]) -> None:
    """Raise :class:`RewardWeightsError` unless ``weights`` is ``None`` or has one value per reward."""
    if weights is not None and len(weights) != len(names):
        raise RewardWeightsError(
            f"--reward_weights has {len(weights)} value(s) for {len(names)} reward(s) ({', '.join(names)})"
        )


class UnknownNameError(UnknownRewardError):
    """An unknown task or reward name, or a dotted path that cannot be imported; the message lists the names."""


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
def register_reward(
    name: str, func: RewardFunc, weight: float = 1.0, low: float = 0.0, high: float = 1.0
) -> None:
    """Make ``func`` selectable as ``--reward_funcs name`` for every task (TRL's reward convention): the
    text kind of :func:`r1vision.rewards.register_reward`."""
    rewards.register_reward(name, func, weight=weight, low=low, high=high, kind="text")


def list_rewards() -> list[str]:
    """Names registered for the vision-language trainers."""
    return rewards.registered("text")


def resolve_rewards(task: Task, names: Sequence[str] | None, specs: Sequence[RewardSpec]) -> list[RewardSpec]:
    """The rewards ``--reward_funcs`` names, like TRL's: a reward of the task (``specs``), a registered name,
    or a dotted path ``my_module.fn`` (:func:`r1vision.rewards.resolve`). ``None`` or empty keeps all of the
    task's rewards. Unknown names are an error that lists the valid ones."""
    return rewards.resolve(names, "text", specs, context=task.name)


def _on_path_cwd() -> None:
    """Put the working directory on ``sys.path``, as TRL's scripts do: a module beside the command is found."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
