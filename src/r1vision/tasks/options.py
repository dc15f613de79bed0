"""Typed task options: each task declares its options as a dataclass (cf. lm-evaluation-harness's
``TaskConfig``); what a user passes (``--task_options`` JSON, keyword arguments) is checked against it.

An unknown name is an error that lists the valid ones and suggests the closest (``strict_fromat`` →
``strict_format``); a value of the wrong type is an error naming the option, the expected type and the
value. ``r1vision tasks --options T`` prints the table from the same dataclass.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

# Values the command runners supply from the model and the trainer config, not from the user.
CONTEXT_KEYS = frozenset(
    {"model_family", "min_pixels", "max_pixels", "eos_token_id", "max_completion_length"}
)


class TaskOptionError(ValueError):
    """An option a task does not have, or a value of the wrong type; the message names the valid ones."""


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A task without options."""


def option_fields(options_cls: type) -> dict[str, tuple[Any, Any, str]]:
    """``name -> (type, default, help)`` of an options dataclass (``help`` from the field metadata)."""
    hints = typing.get_type_hints(options_cls)
    out = {}
    for f in dataclasses.fields(options_cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out[f.name] = (hints[f.name], default, str(f.metadata.get("help", "")))
    return out


def type_name(tp: Any) -> str:
    """A short readable name of a type annotation (``int | None``, ``one of 'open', 'closed'``)."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    return "None" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _matches(value: Any, tp: Any) -> bool:
    if tp is Any:
        return True
    origin = typing.get_origin(tp)
    if origin is Literal:
        return value in typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (list, tuple, cabc.Sequence):
        args = typing.get_args(tp)
        item = args[0] if args else Any
        return isinstance(value, (list, tuple)) and all(_matches(v, item) for v in value)
    if origin in (dict, cabc.Mapping):
        return isinstance(value, Mapping)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True  # an annotation we cannot check (e.g. a callable type) accepts anything


def check_options(
    task_name: str, options_cls: type, given: Mapping[str, Any], allow: frozenset[str] = CONTEXT_KEYS
) -> dict[str, Any]:
    """Validate ``given`` against ``options_cls`` (plus the runner's ``allow`` keys); return it as a dict."""
    fields = option_fields(options_cls)
    for name, value in given.items():
        if name in fields:
            tp = fields[name][0]
            if not _matches(value, tp):
                raise TaskOptionError(
                    f"task {task_name!r}: option {name!r} expects {type_name(tp)}, got {value!r}"
                )
        elif name not in allow:
            close = difflib.get_close_matches(name, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            valid = ", ".join(sorted(fields)) or "(none)"
            raise TaskOptionError(f"task {task_name!r} has no option {name!r}{hint} Valid options: {valid}")
    return dict(given)


def parse_options(task_name: str, options_cls: type, given: Mapping[str, Any] | None) -> Any:
    """An ``options_cls`` instance from the user's options (validated; runner keys are not allowed)."""
    given = dict(given or {})
    check_options(task_name, options_cls, given, allow=frozenset())
    return options_cls(**given)


def describe(task_name: str, options_cls: type) -> str:
    """The options table printed by ``r1vision tasks --options T``."""
    fields = option_fields(options_cls)
    if not fields:
        return f"task {task_name!r} has no options"
    rows = [
        (n, type_name(t), "(required)" if d is dataclasses.MISSING else repr(d), h)
        for n, (t, d, h) in fields.items()
    ]
    widths = [max(len(r[i]) for r in rows + [("option", "type", "default", "")]) for i in range(3)]
    head = f"{'option':<{widths[0]}}  {'type':<{widths[1]}}  {'default':<{widths[2]}}  help"
    lines = [f"options of task {task_name!r} (--task_options '{{\"name\": value}}'):", head]
    lines += [f"{n:<{widths[0]}}  {t:<{widths[1]}}  {d:<{widths[2]}}  {h}" for n, t, d, h in rows]
    return "\n".join(lines)
