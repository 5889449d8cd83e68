"""The shape docs/architecture.md promises (Code style), checked on the source itself: role
classes that wire in books instead of growing, no import cycle, and a core that reads no
clock. A change that breaks one of these fails here with the place at fault."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "services", "simulator", "loadgen", "inspection", "megha", "twin", "api")
MAX_CLASS_LINES = 450
# the role cores: each one state object, its mechanisms in books beside it
MAX_FILE_LINES = {"common/gm.py": 550, "common/lm.py": 600, "common/worker.py": 600}
CLOCKS = {("time", "time"), ("time", "perf_counter"), ("time", "monotonic"),
          ("time", "process_time"), ("time", "time_ns"), ("time", "monotonic_ns"),
          ("time", "perf_counter_ns"), ("datetime", "now"), ("datetime", "utcnow"),
          ("time", "sleep")}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _trees():
    for name, path in MODULES.items():
        yield name, path, ast.parse(path.read_text(), filename=str(path))


def test_no_class_is_over_the_line() -> None:
    over = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has "
            f"{node.end_lineno - node.lineno + 1} lines"
            for _, path, tree in _trees() for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES]
    assert not over, f"classes over {MAX_CLASS_LINES} lines (move a mechanism to a book):\n" \
                     + "\n".join(over)


def test_role_modules_stay_small() -> None:
    for file, limit in MAX_FILE_LINES.items():
        lines = len((ROOT / file).read_text().splitlines())
        assert lines < limit, f"{file} has {lines} lines, the line is {limit}"


def _imports(tree: ast.Module) -> set[str]:
    """Project modules a module imports, at any depth but under `if TYPE_CHECKING:`."""
    named: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named.add(node.module)
            named.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in named if name in MODULES}


def test_no_import_cycle() -> None:
    graph = {name: _imports(tree) - {name} for name, _, tree in _trees()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(module: str) -> None:  # Tarjan's strongly connected components
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                connect(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            connect(module)
    assert not cycles, "import cycles (type-only imports go under TYPE_CHECKING):\n" + \
        "\n".join(" <-> ".join(cycle) for cycle in cycles)


def test_the_core_reads_no_clock() -> None:
    """docs/architecture.md: the cores take `now` from their driver, and a time budget is
    passed in; what a step took is measured by the driver."""
    readers = []
    for name, path, tree in _trees():
        if not name.startswith("common"):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and (node.value.id, node.attr) in CLOCKS):
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno} "
                               f"{node.value.id}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno} from {node.module}")
    assert not readers, "common/ reads a clock:\n" + "\n".join(readers)


def test_the_core_holds_no_simulator_only_model() -> None:
    """Models only the simulator runs live under simulator/: nothing in common/ imports the
    simulator, inspection, or the services."""
    wrong = [f"{path.relative_to(ROOT)} imports {other}"
             for name, path, tree in _trees() if name.startswith("common")
             for other in sorted(_imports(tree))
             if other.split(".")[0] in ("simulator", "services", "inspection", "loadgen",
                                        "twin", "megha")]
    assert not wrong, "\n".join(wrong)
