"""Typed task options: each task declares its options as a frozen dataclass (cf. lm-evaluation-harness's
``TaskConfig``); what a user passes (``--task_options`` JSON, a recipe's ``task_options`` mapping) is parsed
once into that dataclass, and the instance is what the task's methods receive.

An unknown name is an error that lists the valid ones and suggests the closest (``strict_fromat`` →
``strict_format``); a value of the wrong type is an error naming the option, the expected type and the
value. ``r1vision tasks --options T`` prints the table from the same dataclass.
"""

from __future__ import annotations

import collections.abc as cabc
import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from r1vision.suggest import closest


class TaskOptionError(ValueError):
    """An option a task does not have, or a value of the wrong type; the message names the valid ones."""


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """A task without options."""


def option(default: Any, help: str) -> Any:  # noqa: A002 - the word argparse and TRL use
    """A field of an options dataclass: its default (written once, here) and its help text."""
    if isinstance(default, (dict, list, set)):
        raise TypeError("mutable option defaults are not allowed: use None or a tuple")
    return dataclasses.field(default=default, metadata={"help": help})


def options_mapping(raw: str | Mapping[str, Any] | None, what: str = "--task_options") -> dict[str, Any]:
    """The user's options as a dict: ``raw`` is a JSON object (the command line), a mapping (a YAML
    recipe) or empty. Anything else is a :class:`TaskOptionError` naming ``what``."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TaskOptionError(f"{what} must be a JSON object: {exc}") from None
    if not isinstance(raw, Mapping):
        raise TaskOptionError(f"{what} must be a JSON object, got {raw!r}")
    return dict(raw)


def merge_options(*layers: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Options of several sources, later ones winning per option (a recipe's, then the command line's):
    ``--task_options '{"think": true}'`` on a recipe with ``{"preset": "r1sgg"}`` keeps the preset."""
    out: dict[str, Any] = {}
    for layer in layers:
        out.update(options_mapping(layer))
    return out


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


def check_options(task_name: str, options_cls: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``given`` against ``options_cls``; return it as a dict."""
    fields = option_fields(options_cls)
    for name, value in given.items():
        if name in fields:
            tp = fields[name][0]
            if not _matches(value, tp):
                raise TaskOptionError(
                    f"task {task_name!r}: option {name!r} expects {type_name(tp)}, got {value!r}"
                )
        else:
            close = closest(name, fields)
            hint = f"; did you mean {close!r}?" if close else ""
            valid = ", ".join(sorted(fields)) or "(none)"
            raise TaskOptionError(f"task {task_name!r} has no option {name!r}{hint} Valid options: {valid}")
    return dict(given)


def parse_options(task_name: str, options_cls: type, given: str | Mapping[str, Any] | None) -> Any:
    """An ``options_cls`` instance from the user's options (a mapping or a JSON object), validated."""
    given = options_mapping(given)
    check_options(task_name, options_cls, given)
    try:
        return options_cls(**given)
    except (TypeError, ValueError) as exc:  # a dataclass's own __post_init__ check
        raise TaskOptionError(f"task {task_name!r}: {exc}") from None


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
