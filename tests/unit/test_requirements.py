"""deploy/requirements.txt pins every runtime dependency that pyproject.toml names.

The services image installs deploy/requirements.txt and nothing else (offline, from wheels),
so a dependency added to pyproject.toml but not pinned there would be missing in containers.
"""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = project["dependencies"] + project["optional-dependencies"]["services"]
    return [Requirement(t) for t in texts]


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (ROOT / "deploy" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version.strip(), f"not an exact pin (name==version): {line!r}"
        out[norm(name.strip())] = version.strip()
    return out


def test_every_line_is_an_exact_pin():
    assert pins()


@pytest.mark.parametrize("req", declared(), ids=lambda r: r.name)
def test_declared_dependency_is_pinned(req):
    pinned = pins()
    assert norm(req.name) in pinned, (
        f"{req.name} is in pyproject.toml but not in deploy/requirements.txt"
    )
    assert Version(pinned[norm(req.name)]) in req.specifier, (
        f"{req.name}=={pinned[norm(req.name)]} does not satisfy pyproject.toml's {req}"
    )


def test_the_services_and_the_load_generator_import_without_the_extras():
    """The image has no numpy, scipy or matplotlib (the simulator's and inspect's extras):
    nothing a service or `megha replay` imports may need them, even indirectly."""
    import subprocess
    import sys

    blocked = ("import sys\n"
               "for name in ('numpy', 'scipy', 'matplotlib'):\n"
               "    sys.modules[name] = None\n")
    imports = "import services.gm, services.lm, services.worker, loadgen.command, loadgen.replay"
    done = subprocess.run([sys.executable, "-c", blocked + imports], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
