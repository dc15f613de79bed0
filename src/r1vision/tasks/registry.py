"""The task registry: names → ``Task`` classes, imported on first use so optional dependencies stay lazy."""

from __future__ import annotations

import importlib

from r1vision.tasks.base import Task

_REGISTRY: dict[str, type[Task] | str] = {}


def register_task(name: str, target: type[Task] | str) -> None:
    """Register a task class, or a ``"module:Class"`` path imported on first use (keeps optional deps lazy)."""
    _REGISTRY[name] = target


def task_class(name: str) -> type[Task]:
    """The class registered under ``name`` (imported now if registered by path); the error lists the names."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(sorted(_REGISTRY))}")
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
