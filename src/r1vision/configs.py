"""The shipped recipes and launcher configs (``configs/``), found from any directory.

``configs/`` ships with the package: in a source checkout or editable install it is the checkout's own
folder; a wheel installs it under ``<prefix>/share/r1vision/configs`` (pyproject ``data-files``).
``--config`` takes a path, a recipe name (``sgg_grpo``), a path inside ``configs/``
(``recipes/sgg_grpo.yaml``) or ``r1vision://recipes/sgg_grpo.yaml``; ``r1vision configs`` prints where
each file is.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

SCHEME = "r1vision://"


def config_dirs() -> list[Path]:
    """Folders that may hold the shipped ``configs/`` tree, most specific first."""
    dirs = [Path(__file__).resolve().parents[2] / "configs"]  # source checkout / editable install
    for prefix in {sys.prefix, sysconfig.get_path("data")}:
        dirs.append(Path(prefix) / "share" / "r1vision" / "configs")  # wheel install (data-files)
    return [d for d in dirs if d.is_dir()]


def resolve_config(name: str) -> Path:
    """The file ``name`` means: an existing path, else a shipped config by relative path or recipe name."""
    if not name.startswith(SCHEME) and Path(name).expanduser().is_file():
        return Path(name).expanduser()
    rel = name[len(SCHEME) :] if name.startswith(SCHEME) else name
    rel = rel.removeprefix("configs/")
    candidates = [rel, f"{rel}.yaml", f"recipes/{rel}", f"recipes/{rel}.yaml"]
    for base in config_dirs():
        for cand in candidates:
            if (base / cand).is_file():
                return base / cand
    shipped = sorted(p.stem for d in config_dirs() for p in (d / "recipes").glob("*.yaml"))
    raise FileNotFoundError(
        f"config {name!r} is neither a file nor a shipped config; shipped recipes: {', '.join(shipped)} "
        "(`r1vision configs` lists every file with its path)"
    )


def resolve_config_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of ``--config`` (or ``--config=X``) resolved to an absolute path, always as the
    two words ``--config PATH``: TRL's parser only looks for that form and would otherwise ignore the recipe."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            out += [arg, str(resolve_config(argv[i + 1]).resolve())]
            i += 2
            continue
        if arg.startswith("--config="):
            out += ["--config", str(resolve_config(arg.split("=", 1)[1]).resolve())]
        else:
            out.append(arg)
        i += 1
    return out


def recipe_path(argv: Sequence[str]) -> str | None:
    """The value of ``--config`` (or ``--config=X``), if any."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def flag_values(argv: Sequence[str]) -> dict[str, str | None]:
    """``{name: value}`` of the ``--flags`` in ``argv`` (dashes as underscores; ``None`` for a bare flag)."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(argv):
        if not arg.startswith("--") or arg == "--":
            continue
        name, eq, value = arg[2:].partition("=")
        name = name.replace("-", "_")
        if eq:
            out[name] = value
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[name] = argv[i + 1]
        else:
            out[name] = None
    return out


def shipped_files() -> list[tuple[str, Path]]:
    """(path inside ``configs/``, absolute path) of every shipped config file."""
    dirs = config_dirs()
    if not dirs:
        return []
    return [(str(p.relative_to(dirs[0])), p) for p in sorted(dirs[0].rglob("*")) if p.is_file()]


def read_recipe(name: str | Path) -> dict[str, Any]:
    """The one reader of a recipe: ``name`` resolved as ``--config`` resolves it (a path, a shipped recipe
    name, ``r1vision://...``), read as YAML. Raises ``FileNotFoundError`` (what exists instead) or
    ``ValueError`` (not YAML, or not a mapping of option: value), each naming the file."""
    import yaml

    path = resolve_config(str(name))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"--config {path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: a recipe is a mapping of option: value")
    return data


@dataclass(frozen=True)
class CommandLine:
    """One reading of a command line and its recipe, for everything that looks at flags before (or besides)
    TRL's parser: ``--a_b`` and ``--a-b`` are one flag, ``--flag=value`` and ``--flag value`` one value, a bare
    flag is ``"true"`` (as TRL reads a boolean), and ``--config`` names a path or a shipped recipe."""

    argv: tuple[str, ...]

    @classmethod
    def of(cls, argv: Sequence[str]) -> CommandLine:
        return cls(tuple(argv))

    @cached_property
    def flags(self) -> dict[str, str | None]:
        """``{name: value}`` of the flags given (underscored names; ``None`` for a bare flag)."""
        return flag_values(self.argv)

    @cached_property
    def recipe(self) -> dict[str, Any]:
        """The ``--config`` recipe's options (``{}`` without one)."""
        name = recipe_path(self.argv)
        return read_recipe(name) if name else {}

    def value(self, key: str) -> Any:
        """``key``'s value: the command line's (a bare flag is ``"true"``), else the recipe's, else ``None``."""
        if key in self.flags:
            return "true" if self.flags[key] is None else self.flags[key]
        return self.recipe.get(key)

    def without(self, *names: str) -> list[str]:
        """The command line without the flags ``names`` (any spelling) and their values."""
        drop = {n.replace("-", "_") for n in names}
        out, skip = [], False
        for arg in self.argv:
            name = arg[2:].split("=", 1)[0].replace("-", "_") if arg.startswith("--") else ""
            if skip:
                skip = False
                if not arg.startswith("--"):
                    continue
            if name in drop:
                skip = "=" not in arg
                continue
            out.append(arg)
        return out


# What each training command must be given, in the order it is checked, and what it names.
_REQUIRED = {
    "t2i": {
        "model": "a diffusers pipeline folder or Hub id",
        "dataset": "a prompt-file folder, a .txt file or a dataset",
    },
    "vlm": {
        "task": "a task name from `r1vision tasks`, or module:Class",
        "model": "a Hub id or a local model folder",
        "dataset": "a Hub id, a local folder or file",
    },
}


def required_fields(kind: str) -> dict[str, str]:
    """``{field: refusal}`` of what a ``kind`` run (``t2i``, else a VLM kind) cannot start without: the one
    wording of the runners' check and of the check before a launch."""
    wanted = _REQUIRED["t2i" if kind == "t2i" else "vlm"]
    return {name: f"--{name} is required ({what})" for name, what in wanted.items()}
