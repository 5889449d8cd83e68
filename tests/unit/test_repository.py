"""What git records about the repository itself: a script the README or CI names is run as
written (`scripts/testbed.sh`, not `bash scripts/testbed.sh`) only if git keeps its executable
bit, and a fresh clone gets exactly what git records, whatever the working copy says."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXECUTABLE = "100755"


def git_modes() -> dict[str, str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listing = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
    modes = {}
    for line in listing.splitlines():
        meta, _, path = line.partition("\t")
        modes[path] = meta.split()[0]
    return modes


def test_every_script_the_readme_or_ci_runs_is_executable_in_git() -> None:
    modes = git_modes()
    scripts = sorted(path for path in modes
                     if path == ".ci/run"
                     or (path.endswith(".sh") and path.startswith(("scripts/", "deploy/"))))
    assert ".ci/run" in scripts and "scripts/testbed.sh" in scripts and "scripts/test.sh" in scripts
    not_executable = [path for path in scripts if modes[path] != EXECUTABLE]
    assert not not_executable, (
        f"mode {EXECUTABLE} missing in git for {not_executable}; "
        f"fix with: git update-index --chmod=+x {' '.join(not_executable)}")


def test_the_readme_quick_start_runs_those_scripts_as_written() -> None:
    readme = (ROOT / "README.md").read_text()
    for command in ("    scripts/testbed.sh", "    scripts/test.sh"):
        assert command in readme, f"the README's quick start no longer reads {command.strip()!r}"
