"""Generated clusters' machine-constraint profiles: A everywhere by default, or drawn per LM
(`--profile random`), as the Megha paper draws a cluster per LM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from simulator.cluster import shaped_federation

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_is_profile_a_and_random_draws_per_lm_from_the_seed() -> None:
    assert {lm.profile for lm in shaped_federation(300, 2, 3).lms} == {"A"}
    drawn = [lm.profile for lm in shaped_federation(300, 2, 6, profile="random").lms]
    assert set(drawn) <= {"A", "B", "C"} and len(set(drawn)) > 1, drawn
    assert drawn == [lm.profile for lm in shaped_federation(300, 2, 6, profile="random").lms]
    other = [lm.profile for lm in shaped_federation(300, 2, 6, profile="random", seed=5).lms]
    assert other != drawn or len(set(other)) > 1
    # a profile is what the nodes carry: B's and A's nodes differ in their constraints
    a = shaped_federation(100, 1, 1, profile="A").lms[0].nodes
    b = shaped_federation(100, 1, 1, profile="B").lms[0].nodes
    assert [node.constraints for node in a] != [node.constraints for node in b]


def test_simulate_names_the_profiles_and_refuses_an_unknown_one() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "300", "--gms", "2", "--lms",
         "3", "--profile", "random", "--jobs", "5", "--no-log"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "profiles lm-1 " in done.stdout.splitlines()[0]
    refused = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "300", "--profile", "Z"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--profile" in refused.stderr
