"""Print deploy/requirements.txt: exact pins of the services image's runtime dependencies.

The closure of pyproject.toml's `dependencies` and its `services` extra, with the versions
installed in the interpreter that runs this (the project's .venv), for Python 3.11 on Linux.
Test-only packages (pytest, hypothesis, ruff, numpy) are not in it because nothing at run
time asks for them.

    .venv/bin/python deploy/requirements.py > deploy/requirements.txt
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
HEADER = """\
# Exact pins for the services image (deploy/Dockerfile): the runtime closure of pyproject.toml's
# `dependencies` and `services` extra, as installed in the project's .venv. Regenerate with
#     scripts/venv.sh && .venv/bin/python deploy/requirements.py > deploy/requirements.txt
# deploy/prepare.sh downloads these wheels into deploy/wheels/ for images built offline.
"""


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def roots() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["services"]
    return [Requirement(r).name for r in reqs]


def closure(names: list[str]) -> dict[str, str]:
    """Every distribution `names` need at run time, by normalized name, with its version."""
    env = {
        "extra": "",
        "python_version": "3.11",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_python_implementation": "CPython",
    }
    pins: dict[str, str] = {}
    todo = list(names)
    while todo:
        name = norm(todo.pop())
        if name in pins:
            continue
        dist = md.distribution(name)
        pins[name] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                todo.append(req.name)
    return pins


def main() -> None:
    pins = closure(roots())
    sys.stdout.write(HEADER + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))


if __name__ == "__main__":
    main()
