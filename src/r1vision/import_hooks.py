"""Patch a third-party module right after it is imported, without importing it early.

Some of r1vision's fixes to upstream internals (:data:`r1vision.versions.PATCHES`) live in modules that are
heavy to import (a model's code, vLLM's model stack) or must not load before their package has set
itself up. :func:`patch_on_import` runs a callback on such a module as soon as anything imports it, or
at once if it is already loaded.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

Patcher = Callable[[types.ModuleType], None]


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Meta-path hook: finds the module through the other finders and runs the patchers after its body."""

    def __init__(self) -> None:
        self.patchers: dict[str, list[Patcher]] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.patchers:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            original_exec(module)
            for patcher in self.patchers.get(fullname, []):
                patcher(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _hook() -> _PatchOnImport:
    for finder in sys.meta_path:
        if isinstance(finder, _PatchOnImport):
            return finder
    finder = _PatchOnImport()
    sys.meta_path.insert(0, finder)
    return finder


def patch_on_import(name: str, patcher: Patcher) -> None:
    """Run ``patcher(module)`` on module ``name`` now if it is loaded, and whenever it is (re)imported.
    Patchers must be idempotent; registering the same one twice runs it once."""
    hook = _hook()
    patchers = hook.patchers.setdefault(name, [])
    if patcher not in patchers:
        patchers.append(patcher)
    if name in sys.modules:
        patcher(sys.modules[name])
