"""The one reward registry: every reward a command line names, for the vision-language trainers and the
text-to-image trainer alike.

A reward is TRL's callable ``f(prompts, outputs, **columns) -> list[float | None]``: ``outputs`` are the
sampled completions (``grpo``: TRL's ``completions``) or images (``t2i-grpo``: PIL images), every other
dataset column arrives by name, and ``None`` means "no signal for this sample". Each one is registered with
its default weight and the range its values lie in, and a trainer only ever calls it through
:func:`guard_reward`: a raising reward scores its fallback, non-finite or out-of-range values are clipped.

``--reward_funcs`` names, in this order: the task's own rewards (``grpo``), a name registered here for the
trainer's kind (``register_reward``; ``kind="image"`` for image rewards), or a dotted path ``my_module.fn``
imported from the working directory or the Python path (a range it does not declare is not assumed).
Rewards built with options (an OCR engine, a local model path) register a factory:
``factory(**options) -> reward``, given ``--reward_options '{"name": {...}}'``. An unknown name is refused
with the nearest valid one.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from r1vision.suggest import closest

logger = logging.getLogger(__name__)

RewardFunc = Callable[..., list]
KINDS = ("text", "image")


@dataclass(frozen=True)
class RewardSpec:
    """A named reward function with its default weight and the range its values lie in."""

    name: str
    func: RewardFunc
    weight: float = 1.0
    low: float = 0.0
    high: float = 1.0


@dataclass(frozen=True)
class _Entry:
    kind: str
    make: Callable[..., RewardFunc]  # options -> the reward
    weight: float
    low: float
    high: float
    takes_options: bool


class UnknownRewardError(KeyError):
    """A reward name that is not the task's, not registered and not importable; the message lists the valid
    ones and the nearest."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


_REGISTRY: dict[str, _Entry] = {}


def register_reward(
    name: str,
    func: RewardFunc | None = None,
    *,
    weight: float = 1.0,
    low: float = 0.0,
    high: float = 1.0,
    kind: str = "text",
    factory: Callable[..., RewardFunc] | None = None,
) -> None:
    """Make ``name`` selectable in ``--reward_funcs``: ``func`` itself, or ``factory(**options)`` for a reward
    built with ``--reward_options``; ``kind`` is ``"text"`` (completions) or ``"image"``."""
    if kind not in KINDS:
        raise ValueError(f"reward kind {kind!r}; choose one of {', '.join(KINDS)}")
    if (func is None) == (factory is None):
        raise ValueError("register_reward takes a reward function or a factory, not both")
    make = factory if factory is not None else (lambda **_: func)
    _REGISTRY[name] = _Entry(kind, make, float(weight), float(low), float(high), factory is not None)


def registered(kind: str = "text") -> list[str]:
    """The names registered for ``kind``."""
    return sorted(n for n, e in _REGISTRY.items() if e.kind == kind)


def resolve(
    names: Sequence[str] | None,
    kind: str = "text",
    own: Sequence[RewardSpec] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    context: str = "",
) -> list[RewardSpec]:
    """The rewards ``names`` selects (comma-separated items allowed; none: all of ``own``), each as a
    :class:`RewardSpec` not yet guarded (:func:`guarded`). ``context`` names the task in the refusal."""
    wanted = [n.strip() for item in names or () for n in str(item).split(",") if n.strip()]
    if not wanted:
        return list(own)
    options = dict(options or {})
    mine = {s.name: s for s in own}
    out = []
    for name in wanted:
        given = dict(options.get(name) or {})
        if name in mine:
            out.append(mine[name])
        elif name in _REGISTRY and _REGISTRY[name].kind == kind:
            entry = _REGISTRY[name]
            if given and not entry.takes_options:
                raise UnknownRewardError(
                    f"reward {name!r} takes no options (--reward_options gave {sorted(given)})"
                )
            try:
                func = entry.make(**given)
            except TypeError as exc:  # a factory's missing or unknown option, named in one line
                raise UnknownRewardError(
                    f"reward {name!r}: {exc}; give its options as --reward_options '{{\"{name}\": {{...}}}}'"
                ) from None
            out.append(RewardSpec(name, func, entry.weight, entry.low, entry.high))
        elif "." in name:
            out.append(_import(name, given))
        else:
            raise UnknownRewardError(_unknown(name, kind, sorted(mine), context))
    return out


def _import(path: str, options: dict[str, Any]) -> RewardSpec:
    """A reward named by dotted path (a factory when options are given); its range is not known."""
    module_name, _, attr = path.rpartition(".")
    if os.getcwd() not in sys.path:  # as TRL's scripts: a module beside the command is found
        sys.path.insert(0, os.getcwd())
    try:
        func = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UnknownRewardError(f"cannot import reward function {path!r}: {exc}") from exc
    if not callable(func):
        raise UnknownRewardError(f"reward {path!r} is not callable")
    func = func(**options) if options else func
    return RewardSpec(getattr(func, "__name__", attr), func, 1.0, float("-inf"), float("inf"))


def _unknown(name: str, kind: str, own: list[str], context: str) -> str:
    """The refusal of an unknown name: a suggestion (TRL's ``accuracy_reward`` spelling of ``accuracy``
    included), then every valid choice."""

    valid = own + registered(kind)
    bare = name.removesuffix("_reward")
    close = (
        (bare if bare in valid else None)
        or closest(bare, valid)
        or next((v for v in valid if bare in v.split("_")), None)
    )
    hint = f" (did you mean {close!r}?)" if close else ""
    where = f" for task {context!r}" if context else ""
    choices = f"the task's ({', '.join(own)}), " if own else ""
    others = registered(kind)
    registered_text = (
        (f"a registered one ({', '.join(others)}), " if own else f"{', '.join(others)}, ") if others else ""
    )
    return f"unknown reward {name!r}{where}{hint}; valid: {choices}{registered_text}or a dotted path module.function"


def guard_reward(func: RewardFunc, low: float, high: float) -> RewardFunc:
    """``func`` held to [``low``, ``high``]: a raising reward scores 0 for the batch (``low`` if 0 is out of
    range) and logs the traceback; non-finite values score the same fallback, others are clipped; ``None``
    (no signal) stays ``None``. The wrapper keeps ``__name__`` and ``__wrapped__``."""
    fallback = 0.0 if low <= 0.0 <= high else low

    def wrapped(*args: Any, **kwargs: Any) -> list[float | None]:
        # called as the trainer calls the reward: positionally or by TRL's names (completions=, images=)
        outputs = args[1] if len(args) > 1 else kwargs.get("completions", kwargs.get("images", ()))
        try:
            values = func(*args, **kwargs)
        except Exception:  # noqa: BLE001
            logger.exception("reward %s failed; scoring %s", getattr(func, "__name__", func), fallback)
            return [fallback] * len(outputs)
        out: list[float | None] = []
        for v in values:
            if v is None:
                out.append(None)
                continue
            try:
                v = float(v)
            except (TypeError, ValueError):  # not a number at all: a bug in the reward, scored as one
                v = math.nan
            out.append(min(high, max(low, v)) if math.isfinite(v) else fallback)
        return out

    wrapped.__name__ = getattr(func, "__name__", type(func).__name__)
    wrapped.__wrapped__ = func  # type: ignore[attr-defined]
    return wrapped


def guarded(specs: Sequence[RewardSpec]) -> list[RewardSpec]:
    """``specs`` with every function held to its declared range (:func:`guard_reward`)."""
    return [RewardSpec(s.name, guard_reward(s.func, s.low, s.high), s.weight, s.low, s.high) for s in specs]
