"""The package layout: every import in ``src/r1vision`` runs down the layers (``LAYERS``, described in the
architecture doc's "Layout"), task packages never import each other, and no two modules import each other, directly or
through others, not even inside one folder."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

PACKAGE = ROOT / "src" / "r1vision"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# The shared task modules are the plain modules of tasks/; its sub-packages are the tasks.
TASK_SHARED = {p.stem for p in (PACKAGE / "tasks").glob("*.py") if p.stem != "__init__"}


# The layers, lowest first, by top-level name below ``r1vision`` (packages, modules, the C extension). A module
# imports from its own layer or lower ones. The architecture doc's "Layout" section describes them.
LAYERS: list[list[str]] = [
    [
        "vision",
        "versions",
        "import_hooks",
        "compiled",
        "_speedups",
        "configs",
        "parent_watch",
        "hub",
        "suggest",
        "rewards",
        "checkpoints",
    ],
    ["tasks"],
    ["generation"],
    ["trainer", "diffusion"],
    ["runners"],
    ["testing", "model_shapes", "estimate", "dry_run", "report"],
    ["demo", "selftest", "commands", "cli"],
]


def documented_layers() -> list[list[str]]:
    return LAYERS


def layer_of(layers: list[list[str]], module: str) -> int:
    """Index of the layer holding ``module`` (dotted name below ``r1vision``)."""
    top = module.split(".")[1] if "." in module else "vision"  # the package root registers processors
    for index, names in enumerate(layers):
        if top in names:
            return index
    raise AssertionError(
        f"{module}: its top-level name {top!r} is in no layer of the architecture doc's layout"
    )


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str) -> list[tuple[int, str]]:
    """(line, module) of every ``r1vision`` import in ``path`` (module ``name``), including function-level
    and relative ones."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, t) for line, t in found if t == "r1vision" or t.startswith("r1vision.")]


def violations(layers: list[list[str]], modules: list[tuple[Path, str]]) -> list[str]:
    out = []
    for path, source in modules:
        here = layer_of(layers, source)
        for line, target in imports_of(path, source):
            if target == "r1vision":
                continue
            there = layer_of(layers, target)
            where = f"{path}:{line}"
            if there > here:
                out.append(f"{where}: {source} (layer {here + 1}) imports {target} (layer {there + 1})")
            out.extend(_task_package_violation(source, target, where))
    return out


def _task_package_violation(source: str, target: str, where: str) -> list[str]:
    """Task packages use the shared task modules, never each other; the shared modules use no task."""
    src, dst = source.split("."), target.split(".")
    if len(dst) < 3 or dst[1] != "tasks" or len(src) < 2 or src[1] != "tasks":
        return []
    src_pkg = src[2] if len(src) > 2 else None
    if dst[2] in TASK_SHARED or src_pkg == dst[2]:
        return []
    if src_pkg is None or src_pkg in TASK_SHARED:
        return [f"{where}: shared task module {source} imports the task package {target}"]
    return [f"{where}: task package {source} imports another task package {target}"]


def test_layers_name_every_top_level_name_and_the_docs_describe_them() -> None:
    layers = documented_layers()
    documented = {name for names in layers for name in names}
    section = ARCHITECTURE.read_text().split("## Layout\n", 1)[1].split("\n## ", 1)[0]
    described = set(re.findall(r"`([\w.]+?)(?:/|\.py|\.c)`", section))
    assert documented <= described, (
        f"the architecture doc's layout does not describe {sorted(documented - described)}"
    )
    actual = {p.stem for p in PACKAGE.iterdir() if p.suffix in (".py", ".c") and p.stem != "__init__"}
    actual |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert actual <= documented, f"not in the architecture doc's layout: {sorted(actual - documented)}"
    assert documented <= actual, f"documented but absent: {sorted(documented - actual)}"


def test_every_import_runs_downward() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    found = violations(documented_layers(), [(f, module_name(f)) for f in files])
    assert not found, "imports running up the layers:\n" + "\n".join(found)


def test_checker_catches_an_upward_import(tmp_path: Path) -> None:
    """The walker sees function-level and relative imports, so the test above can fail."""
    fake = tmp_path / "probe.py"
    fake.write_text(
        "def f():\n    from r1vision.trainer.grpo import VisionGRPOTrainer\n\nfrom ..runners import train\n"
    )
    found = violations(documented_layers(), [(fake, "r1vision.vision.probe")])
    assert len(found) == 2
    assert any("imports r1vision.trainer.grpo" in f for f in found)
    assert any("imports r1vision.runners" in f for f in found)


@pytest.mark.parametrize(
    ("source", "target", "bad"),
    [
        ("r1vision.tasks.sgg.task", "r1vision.tasks.geometry.verify", True),
        ("r1vision.tasks.loading", "r1vision.tasks.sgg.data", True),
        ("r1vision.tasks.sgg.task", "r1vision.tasks.common", False),
        ("r1vision.tasks.sgg.task", "r1vision.tasks.sgg.data", False),
    ],
)
def test_task_packages_stay_apart(source: str, target: str, bad: bool) -> None:
    assert bool(_task_package_violation(source, target, "x")) is bad


@pytest.mark.parametrize(
    "package", sorted(p.name for p in (PACKAGE / "tasks").iterdir() if (p / "task.py").is_file())
)
def test_task_packages_have_the_same_parts(package: str) -> None:
    """A newcomer finds any part of any task in one guess: the same files in every task package."""
    folder = PACKAGE / "tasks" / package
    missing = [
        f
        for f in ("task.py", "data.py", "prompts.py", "rewards.py", "synth.py")
        if not (folder / f).is_file()
    ]
    assert not missing, f"tasks/{package} lacks {missing}"
    overrides_evaluate = "    def evaluate(" in (folder / "task.py").read_text()
    if overrides_evaluate:  # its own evaluation lives in evaluate.py; task.py only delegates
        assert (folder / "evaluate.py").is_file(), f"tasks/{package} evaluates in task.py, not evaluate.py"


def import_graph() -> dict[str, set[str]]:
    """module -> the r1vision modules it imports (any level, inside functions too); ``from pkg import name``
    counts as importing ``pkg.name`` when that is a module, else ``pkg``."""
    modules = {module_name(f): f for f in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(
                        parts[: len(parts) - node.level + 1] + ([node.module] if node.module else [])
                    )
                else:
                    base = node.module or ""
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    edges.add(full if full in modules else base)
            elif isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only: not imported at run time)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", None) == "TYPE_CHECKING":
                stack.extend(child.orelse)
                continue
            stack.append(child)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles() -> None:
    """A package's ``__init__`` may re-export its modules; no module imports one that imports it back."""
    graph = import_graph()
    faces = {m for m in graph if (PACKAGE.parent / m.replace(".", "/") / "__init__.py").is_file()}
    # Edges into a package face are imports of what it re-exports, not of the folder's modules.
    inner = {m: {e for e in edges if e not in faces} for m, edges in graph.items() if m not in faces}
    assert cycles(inner) == []


def test_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
