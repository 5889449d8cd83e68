"""The SRPT+R paper's allocation policies (simulator/models/machines.py), machine speed
(common/speed.py) and the slotted cluster that runs them (simulator/redundancy.py): hand-worked
allocations and checkpoints, invariants on random inputs, exactly-once completion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import InvalidInput
from common.speed import SpeedModel
from simulator.models.machines import MACHINE_ALLOCATIONS, AllocationOptions
from simulator.redundancy import Entries, RedundancySim, Workload

ROOT = Path(__file__).resolve().parents[2]


def allocate(name: str, remaining, arrival=None, machines: int = 10, beta: float = 0.5):
    remaining = np.asarray(remaining, dtype=float)
    arrival = np.arange(len(remaining), dtype=float) if arrival is None else np.asarray(arrival)
    policy = MACHINE_ALLOCATIONS.make(name, AllocationOptions(beta))
    copies, shared = policy.allocate(remaining, arrival, machines)
    return copies.tolist(), shared.tolist()


def test_srpt_r_gives_spare_machines_as_copies_the_smallest_job_the_most() -> None:
    assert allocate("srpt", [5, 1, 3]) == ([1, 1, 1], [False] * 3)
    assert allocate("srpt+r", [5, 1, 3]) == ([3, 4, 3], [False] * 3)  # 10 - 2 x floor(10/3)
    twelve = list(range(12, 0, -1))  # remaining 12 .. 1: the ten smallest run, no copies
    copies, _ = allocate("srpt+r", twelve)
    assert copies == [0, 0] + [1] * 10


def test_fair_and_laps_share_among_the_latest_arrivals() -> None:
    assert allocate("fair+r", [1, 1, 1], arrival=[0, 2, 1]) == ([3, 4, 3], [False] * 3)
    assert allocate("fair", [1] * 15) == ([0] * 15, [True] * 15)  # more jobs than machines
    # laps, beta 0.5: the 3 latest of 6 run; with redundancy 3 copies each, the latest 4
    assert allocate("laps", [1] * 6) == ([0, 0, 0, 1, 1, 1], [False] * 6)
    assert allocate("laps+r", [1] * 6) == ([0, 0, 0, 3, 3, 4], [False] * 6)
    assert allocate("laps", [1] * 30)[1] == [False] * 15 + [True] * 15
    with pytest.raises(InvalidInput, match="beta"):
        MACHINE_ALLOCATIONS.make("laps", AllocationOptions(beta=0))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(MACHINE_ALLOCATIONS.names()),
       st.lists(st.floats(0.01, 1000), min_size=0, max_size=40),
       st.integers(1, 20), st.floats(0.05, 1.0), st.integers(0, 2**16))
def test_allocations_fit_the_machines_and_copies_only_use_spare_ones(name, remaining, machines,
                                                                     beta, seed):
    n = len(remaining)
    arrival = np.random.default_rng(seed).permutation(n).astype(float)
    policy = MACHINE_ALLOCATIONS.make(name, AllocationOptions(beta))
    copies, shared = policy.allocate(np.asarray(remaining), arrival, machines)
    assert copies.sum() <= machines and (copies >= 0).all()
    assert not (copies[shared] > 0).any()
    if shared.any():
        assert policy.multitasking and copies.sum() == 0
    running = int(((copies > 0) | shared).sum())
    if copies.max(initial=0) > 1:  # redundancy only while fewer jobs run than machines
        assert name.endswith("+r") and running < machines and copies.sum() == machines
    if name in ("srpt", "srpt+r", "fair", "fair+r"):
        assert running == n or (running == machines and not shared.any()) or shared.all()
    entries = Entries.build(copies, shared, machines, np.random.default_rng(seed), check=True)
    load = np.zeros(machines)
    np.add.at(load, entries.machine, entries.share)
    assert (load <= 1 + 1e-9).all()  # a machine's shares never exceed its rate
    dedicated = entries.machine[entries.share == 1]
    assert len(set(dedicated.tolist())) == len(dedicated)


def scripted(policy: str, machines: int, arrivals, sizes, speed="constant") -> RedundancySim:
    sim = RedundancySim(policy, machines, Workload(1.0, horizon=20), SpeedModel(kind=speed),
                        seed=0)
    sim.arrivals, sim.sizes = np.asarray(arrivals, float), np.asarray(sizes, float)
    return sim


def test_checkpoints_happen_at_arrivals_and_departures_only() -> None:
    # A (size 3) arrives at 0.5, B (size 1) at 1.5, on 2 machines at rate 1. A joins at 1 with
    # both machines; B joins at 2 (a checkpoint), takes one, ends at 3 (a checkpoint); A ends
    # at 4. A went through 4 checkpoints (joining, B's arrival, B's end, its own end).
    result = scripted("srpt+r", 2, [0.5, 1.5], [3.0, 1.0]).run()
    assert result.flowtimes.tolist() == [3.5, 1.5]
    assert result.checkpoints.tolist() == [4, 2]
    # A's second copy did the same slot of work as the first before B came: wasted
    assert result.wasted_work == pytest.approx(1.0 + 1.0)


def test_a_copy_on_a_faster_machine_carries_its_job() -> None:
    sim = scripted("srpt+r", 2, [0.0], [4.0])
    sim._rate_chunks = [np.array([[0.0, 2.0]] * 20)]  # machine 1 twice as fast, 0 stopped
    result = sim.run()
    assert result.flowtimes.tolist() == [3.0]  # joins at 1 (after slot 0), done at the end
    outcomes = set()
    for seed in range(8):  # without copies the job gets whichever machine it is handed
        plain = scripted("srpt", 2, [0.0], [4.0])
        plain._rate_chunks = [np.array([[0.0, 2.0]] * 20)]  # then rate 1 from slot 20
        plain.rng = np.random.default_rng(seed)
        outcomes.add(float(plain.run().flowtimes[0]))
    assert outcomes == {3.0, 24.0}  # the fast machine, or stopped until slot 20, then 4 slots


def test_without_variability_redundancy_changes_nothing() -> None:
    """The paper's Remark 4: with constant machine rates SRPT+R is SRPT."""
    workload = Workload(2.0, horizon=400)
    a = RedundancySim("srpt", 20, workload, SpeedModel(kind="constant"), seed=3).run()
    b = RedundancySim("srpt+r", 20, workload, SpeedModel(kind="constant"), seed=3).run()
    assert np.array_equal(a.flowtimes, b.flowtimes)


@pytest.mark.parametrize("policy", MACHINE_ALLOCATIONS.names())
def test_every_job_completes_exactly_once(policy) -> None:
    sim = RedundancySim(policy, 10, Workload(0.3, horizon=300), SpeedModel(), seed=4)
    result = sim.run()
    assert result.unfinished == 0 and len(result.flowtimes) == len(sim.sizes)
    assert (result.flowtimes > 0).all() and (result.checkpoints >= 2).all()


def test_speed_models_have_mean_one_and_repeat_with_their_seed() -> None:
    for model in (SpeedModel(), SpeedModel(kind="gamma", shape=4, interval=5)):
        rates = model.sample(50, 4000, 7)
        assert rates.shape == (4000, 50) and (rates >= 0).all()
        assert rates.mean() == pytest.approx(1.0, abs=0.05)
        assert np.array_equal(rates, model.sample(50, 4000, 7))
    assert (SpeedModel().sample(20, 5000, 1) < 0.2).mean() > 0.1  # unavailable spells
    with pytest.raises(InvalidInput, match="speed.up_rate"):
        SpeedModel(up_rate=(0.5, 0.1))


def test_the_redundancy_experiment_runs_every_policy_at_every_rate(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "megha", "experiment", "redundancy", "--machines", "10",
         "--rates", "0.1,0.25", "--horizon", "200", "--seeds", "2", "--out", str(tmp_path),
         "--html", str(tmp_path / "r.html")], capture_output=True, text=True, cwd=ROOT,
        timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results["runs"]) == 12
    for run in results["runs"]:
        assert run["jct"]["overall"]["count"] > 0 and len(run["seed_means"]) == 2
        assert run["counts"]["unfinished"] == 0
        # the interval every experiment states: Student's t over the seeds' means (two
        # seeds: t = 12.706 with one degree of freedom, not the normal's 1.96)
        means = run["seed_means"]
        spread = abs(means[0] - means[1]) / 2 ** 0.5
        assert run["jct"]["overall"]["ci95"] == pytest.approx(12.706 * spread / 2 ** 0.5,
                                                              rel=1e-4)
    assert "/ srpt" in (tmp_path / "table.txt").read_text()
    assert (tmp_path / "r.html").stat().st_size > 20_000
    refused = subprocess.run([sys.executable, "-m", "megha", "experiment", "redundancy",
                              "--values", "srpt,edf"], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)
    assert refused.returncode == 2 and "'edf' is not an allocation policy" in refused.stderr


def test_redundancy_cluster_runs_every_copy_policy_at_every_load(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "megha", "experiment", "redundancy-cluster",
         "--jobs", "20", "--nodes", "40", "--lms", "2", "--loads", "0.5,1.2", "--seeds", "2",
         "--workers", "1", "--logs", "--out", str(tmp_path)], capture_output=True, text=True,
        cwd=ROOT,
        timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("redundancy-cluster: the first 20 jobs")
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["experiment"] == "redundancy-cluster"
    runs = {(run["policy"], run["load"]): run for run in results["runs"]}
    assert set(runs) == {(policy, load) for policy in ("none", "srpt+r", "fair+r", "laps+r")
                         for load in (0.5, 1.2)}
    for (policy, load), run in runs.items():
        assert run["name"] == f"{policy} load={load:g}"
        assert run["jct"]["overall"]["mean"] > 0 and len(run["seed_means"]) == 2
        assert run["counts"]["jobs_done"] == 2 * 20
    assert all(runs[("none", load)]["redundancy"]["copies_launched"] == 0 for load in (0.5, 1.2))
    assert all(runs[("srpt+r", load)]["redundancy"]["copies_launched"] > 0 for load in (0.5, 1.2))
    assert "/ none" in (tmp_path / "table.txt").read_text()
    assert (tmp_path / "srpt+r-load0.5-seed1.log").stat().st_size > 0


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--values", "none,srpt", "'srpt' is not a copy policy"),
    ("--loads", "0.5,high", "expected numbers separated by commas"),
    ("--loads", "0.5,0", "must be a positive number"),
])
def test_redundancy_cluster_refuses_a_bad_sweep_naming_the_option(option, value,
                                                                   message) -> None:
    refused = subprocess.run([sys.executable, "-m", "megha", "experiment", "redundancy-cluster",
                              option, value], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)
    assert refused.returncode == 2
    assert f"{option}: " in refused.stderr and message in refused.stderr
