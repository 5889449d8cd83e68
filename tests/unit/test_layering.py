"""Which package may import which: the client (`loadgen/`) never imports the server
(`services/`), what both share (`api/`) imports neither, and the pure cores (`common/`) import
nothing that does I/O (docs/architecture.md, One core, three drivers).

Every import counts, at the top of a module or inside a function: the file's whole syntax tree
is walked, so a lazy import cannot slip through.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# package -> the top-level packages its modules may not import
FORBIDDEN = {
    "loadgen": {"services"},
    "api": {"services", "loadgen"},
    "common": {"api", "services", "loadgen"},
}


def imported_packages(path: Path) -> set[tuple[int, str]]:
    """(line, top-level package) of every absolute import in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update((node.lineno, alias.name.partition(".")[0]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.lineno, node.module.partition(".")[0]))
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_imports_a_package_its_layer_may_not(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no modules"
    offences = [f"{path.relative_to(ROOT)}:{line} imports {name}"
                for path in files for line, name in sorted(imported_packages(path))
                if name in FORBIDDEN[package]]
    assert not offences, "\n".join(offences)


def test_the_check_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    from services.peers import PeerClient\n    import services\n")
    assert imported_packages(module) == {(2, "services"), (3, "services")}
