"""Processor registration without importing transformers at ``import r1vision``.

AutoProcessor must map Qwen-VL configs to the torchvision-free processors (:mod:`r1vision.vision.processor`)
in every process that uses r1vision — workers and accelerate ranks included — or it silently returns only
the tokenizer. Registering at import time used to import transformers and torch (4-8 s) even for
``r1vision --help``. Instead: if transformers is already imported, register now; otherwise a meta-path
hook registers right after ``transformers`` itself is first imported, so the processors are in place
before anything can load one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any


def _register() -> None:
    # the processor module registers its classes as the last thing it does when imported: importing it is
    # the registration, and a module that is half-imported (it imported transformers itself, the hook fired
    # inside it) finishes and registers on its own
    import r1vision.vision.processor  # noqa: F401


class _RegisterAfterTransformers(importlib.abc.MetaPathFinder):
    """Finds ``transformers`` through the other finders and runs the registration after its module body."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "transformers":
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            uninstall()
            _register()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_HOOK = _RegisterAfterTransformers()


def uninstall() -> None:
    """Remove the hook (idempotent)."""
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def ensure_registration() -> None:
    """Register now if transformers is loaded, else when it is (idempotent, cheap)."""
    if "transformers" in sys.modules:
        uninstall()
        _register()
    elif _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
