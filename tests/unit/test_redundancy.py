"""The SRPT+R paper's allocation policies (simulator/models/machines.py), machine speed
(common/speed.py) and the slotted cluster that runs them (simulator/redundancy.py): hand-worked
allocations and checkpoints, invariants on random inputs, exactly-once completion."""

from __future__ import annotations

import argparse
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
from simulator.redundancy import Entries, RedundancySim, Workload, place

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


def test_fair_serves_the_latest_arrivals_when_jobs_outnumber_machines() -> None:
    """The paper's Fair+R with n > m: the floor(n/m) m latest arrivals run, floor(n/m) on
    every machine; the n mod m earliest wait."""
    assert allocate("fair+r", [1, 1, 1], arrival=[0, 2, 1]) == ([3, 4, 3], [False] * 3)
    # 5 jobs on 3 machines: floor(5/3) = 1, the 3 latest (arrivals 2, 3, 4) alone on a
    # machine each, the 2 earliest wait; with redundancy the same (no machine is spare)
    for name in ("fair", "fair+r"):
        assert allocate(name, [1] * 5, arrival=[4, 0, 3, 1, 2], machines=3) == \
            ([1, 0, 1, 0, 1], [False] * 5)
    # 7 on 3: floor(7/3) = 2, the 6 latest share the machines two by two, the earliest waits
    assert allocate("fair", [1] * 7, machines=3) == ([0] + [1] * 6, [False] + [True] * 6)


def test_laps_serves_the_latest_beta_share_and_laps_r_gives_the_latest_the_spare_shares() -> None:
    # beta 0.5 of 6 on 10 machines: the 3 latest, one machine each or 3, 3 and 4 copies
    assert allocate("laps", [1] * 6) == ([0, 0, 0, 1, 1, 1], [False] * 6)
    assert allocate("laps+r", [1] * 6) == ([0, 0, 0, 3, 3, 4], [False] * 6)
    # 8 jobs on 3 machines: the 4 latest run; 4 shares on 3 machines is 2 per machine, so 6
    # shares of 1/2: one for each of the 3 earlier, 3 (one per machine) for the latest
    assert allocate("laps", [1] * 8, machines=3) == ([0] * 4 + [1] * 4, [False] * 4 + [True] * 4)
    assert allocate("laps+r", [1] * 8, machines=3) == ([0] * 4 + [1, 1, 1, 3],
                                                       [False] * 4 + [True] * 4)
    assert allocate("laps", [1] * 30, beta=0.1)[0] == [0] * 27 + [1] * 3  # ceil(3.000...04)
    with pytest.raises(InvalidInput, match="beta"):
        MACHINE_ALLOCATIONS.make("laps", AllocationOptions(beta=0))


NONE = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def placed(copies, kept=NONE, machines: int = 5, seed: int = 0) -> dict[int, set[int]]:
    """Each job's machines, as `place` hands them out."""
    position, machine, _ = place(np.asarray(copies), kept, machines,
                                 np.random.default_rng(seed))
    return {job: set(machine[position == job].tolist()) for job in range(len(copies))}


def test_kept_machines_stay_with_their_jobs_and_new_copies_take_freed_ones() -> None:
    # jobs 0, 1, 2 on machines 3, 0, 4 (job 0's best copy first, on 3, then on 1)
    kept = (np.array([0, 0, 1, 2]), np.array([3, 1, 0, 4]))
    for seed in range(20):
        # a fourth job arrives; job 0 drops to one copy: its best, on 3; the new job takes
        # one of the free machines, 1 (job 0 gave it up) or 2
        now = placed([1, 1, 1, 1], kept, seed=seed)
        assert now[0] == {3} and now[1] == {0} and now[2] == {4} and now[3] <= {1, 2}
        # job 1 left (no copies now): job 2 gains a copy on a machine freed, 0, 1 or 2
        now = placed([2, 0, 2], kept, seed=seed)
        assert now[0] == {3, 1} and now[1] == set() and {4} < now[2] <= {4, 0, 2}
    # reshuffled (no kept layout): the same allocation lands anywhere
    assert len({frozenset(placed([1, 1, 1, 1], seed=seed)[0]) for seed in range(20)}) > 1


def test_a_shared_machine_keeps_its_jobs_and_the_latest_spreads_its_shares() -> None:
    # laps+r, 8 jobs on 3 machines: 3 single shares and 3 for the latest (job 3 here)
    kept = (np.array([0, 1, 2, 3]), np.array([2, 0, 1, 0]))  # job 3 had one share, on 0
    for seed in range(20):
        now = placed([1, 1, 1, 3], kept, machines=3, seed=seed)
        assert now[3] == {0, 1, 2}  # its shares on distinct machines, its old one kept
        assert now[0] == {2} and now[1] == {0} and now[2] == {1}  # 2 per machine: all stay


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(MACHINE_ALLOCATIONS.names()),
       st.lists(st.floats(0.01, 1000), min_size=0, max_size=40),
       st.integers(1, 20), st.floats(0.05, 1.0), st.integers(0, 2**16))
def test_allocations_fit_the_machines_and_copies_only_use_spare_ones(name, remaining, machines,
                                                                     beta, seed):
    n = len(remaining)
    rng = np.random.default_rng(seed)
    arrival = rng.permutation(n).astype(float)
    policy = MACHINE_ALLOCATIONS.make(name, AllocationOptions(beta))
    copies, shared = policy.allocate(np.asarray(remaining), arrival, machines)
    assert (copies >= 0).all() and copies.max(initial=0) <= machines
    assert shared.any() == (copies.sum() > machines) and not (shared & (copies == 0)).any()
    if shared.any():
        assert policy.multitasking
    running = int((copies > 0).sum())
    if copies.max(initial=0) > 1:  # redundancy only with machines (or shares) to spare
        assert name.endswith("+r")
        assert running < machines or copies.sum() % machines == 0  # every machine as full
    if name in ("srpt", "srpt+r"):
        assert running == min(n, machines)
    # placed from scratch, then again keeping what a random earlier layout had
    earlier = Entries.of(*place(rng.permutation(copies), NONE, machines, rng))
    for kept in (NONE, earlier.layout()):
        entries = Entries.of(*place(copies, kept, machines, rng))
        entries.check(machines)  # shares at most 1 a machine, a job's copies apart
        assert np.bincount(entries.running[entries.job], minlength=n).tolist() == \
            copies.tolist()
        load = np.bincount(entries.machine, weights=entries.share, minlength=machines)
        assert np.allclose(load[load > 0], 1.0)  # a used machine's whole rate is used
        if copies.sum() >= machines:
            assert (load > 0).all()  # no machine idles while copies wait for one


def scripted(policy: str, machines: int, arrivals, sizes, speed="constant",
             assignment: str = "kept") -> RedundancySim:
    sim = RedundancySim(policy, machines, Workload(1.0, horizon=20), SpeedModel(kind=speed),
                        seed=0, assignment=assignment)
    sim.arrivals, sim.sizes = np.asarray(arrivals, float), np.asarray(sizes, float)
    return sim


def machines_over_time(sim: RedundancySim) -> list[dict[int, set[int]]]:
    """Run `sim`; each allocation's machines per running job (by job id)."""
    seen: list[dict[int, set[int]]] = []
    allocate = sim._allocate

    def recording(active, base, previous):
        entries = allocate(active, base, previous)
        jobs = active[entries.running[entries.job]]
        seen.append({int(job): set(entries.machine[jobs == job].tolist()) for job in jobs})
        return entries

    sim._allocate = recording
    sim.run()
    return seen


def test_in_the_paper_s_model_a_job_keeps_its_machine_until_it_ends() -> None:
    """srpt on 6 machines, four jobs of size 10 arriving a slot apart: each keeps one machine
    through the other jobs' arrivals and departures (7 checkpoints); reshuffled, a job's
    machine changes at some checkpoint (for every one of 5 seeds)."""
    arrivals, sizes = [0.5, 1.5, 2.5, 3.5], [10.0] * 4

    def jobs_moved(assignment: str, seed: int) -> bool:
        sim = scripted("srpt", 6, arrivals, sizes, assignment=assignment)
        sim.rng = np.random.default_rng(seed)
        seen = machines_over_time(sim)
        assert len(seen) == 7  # 4 arrivals, 3 departures leaving jobs behind
        return any(seen[i][job] != later[job] for i in range(len(seen))
                   for later in seen[i + 1:] for job in seen[i] if job in later)

    for seed in range(5):
        assert not jobs_moved("kept", seed)
        assert jobs_moved("reshuffled", seed)


def test_a_job_that_gives_up_copies_keeps_its_best_one() -> None:
    """srpt+r on 2 machines: A alone runs on both; B arrives and A keeps the copy that had
    done more, on machine 1 (twice as fast), while B takes machine 0."""
    for seed in range(10):  # whatever the draws of free machines
        sim = scripted("srpt+r", 2, [0.0, 3.5], [20.0, 1.0])
        sim._rate_chunks = [np.array([[1.0, 2.0]] * 20)]
        sim.rng = np.random.default_rng(seed)
        seen = machines_over_time(sim)
        assert seen[0] == {0: {0, 1}} and seen[1] == {0: {1}, 1: {0}}


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


def mean_flowtimes(policy: str, rate: float, horizon: int, seeds) -> list[float]:
    """The paper's model at its size (100 machines, two-state rates, machines kept)."""
    return [float(RedundancySim(policy, 100, Workload(rate, horizon), SpeedModel(), seed=seed)
                  .run().flowtimes.mean()) for seed in seeds]


def test_srpt_r_is_well_below_srpt_at_lambda_1() -> None:
    """The paper's Figures 5 and 6: at lambda 1 (load 0.4), redundancy cuts SRPT's mean
    flowtime. Measured at this size (horizon 1,000, seeds 0-5): SRPT+R / SRPT between 0.68
    and 0.71 (about 30 against 43); 0.69 at horizon 20,000."""
    with_copies, without = (mean_flowtimes(policy, 1.0, 1000, (0, 1))
                            for policy in ("srpt+r", "srpt"))
    assert all(a < 0.8 * b for a, b in zip(with_copies, without, strict=True))


def test_srpt_r_is_well_below_fair_r_in_heavy_traffic() -> None:
    """The paper's Figure 7: at the heavy-traffic limit (lambda 2.5, load 1) SRPT+R's mean
    flowtime stays low while Fair+R's grows. Measured at this size (horizon 5,000, seeds
    0-5): SRPT+R / Fair+R between 0.62 and 0.84 per seed, 0.76 over seeds 0-2; 0.43 at
    horizon 20,000 (64 against 149), the queue having longer to grow."""
    srpt_r, fair_r = (mean_flowtimes(policy, 2.5, 5000, (0, 1, 2))
                      for policy in ("srpt+r", "fair+r"))
    assert all(a < b for a, b in zip(srpt_r, fair_r, strict=True))
    assert sum(srpt_r) < 0.9 * sum(fair_r)


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
         "--betas", "0.25,1", "--assignment", "reshuffled", "--html", str(tmp_path / "r.html")],
        capture_output=True, text=True, cwd=ROOT,
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
    page = (tmp_path / "r.html").read_text()
    assert "flowtime cdf 0.1" in page and "flowtime cdf 0.25" in page  # every policy's CDF
    # the beta sweep (Figures 8 and 9): laps and laps+r at each beta, in betas/
    swept = json.loads((tmp_path / "betas" / "results.json").read_text())
    assert {run["name"] for run in swept["runs"]} == {
        f"{policy} β={beta} λ={rate}" for policy in ("laps", "laps+r") for beta in ("0.25", "1")
        for rate in ("0.1", "0.25")}
    assert all(run["beta"] in (0.25, 1.0) and 0 <= run["counts"]["done_within_200"] <= 1
               for run in swept["runs"])
    assert "laps+r β=0.25" in (tmp_path / "betas" / "table.txt").read_text()
    assert (tmp_path / "r-betas.html").stat().st_size > 20_000
    refused = subprocess.run([sys.executable, "-m", "megha", "experiment", "redundancy",
                              "--values", "srpt,edf"], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)
    assert refused.returncode == 2 and "'edf' is not an allocation policy" in refused.stderr


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--betas", "0.5,0", "must be in (0, 1]"),
    ("--betas", "0.5,most", "expected numbers separated by commas"),
    ("--beta", 1.5, "must be in (0, 1]"),
    ("--rates", "1,-2", "an arrival rate must be > 0"),
    ("--horizon", 5, "must be at least 10"),
    ("--assignment", "sticky", "must be one of kept, reshuffled"),
])
def test_the_redundancy_experiment_refuses_bad_input_naming_the_option(option, value,
                                                                       message) -> None:
    from simulator.experiments.redundancy import Redundancy

    def refused(**given) -> str:
        args = argparse.Namespace(values=None, machines=10, rates="1,2", horizon=100, seeds=1,
                                  assignment="kept", betas=None, beta=0.5, speed="two-state",
                                  seed=0)
        vars(args).update(given)
        with pytest.raises(InvalidInput) as refusal:
            Redundancy().options(args)
        return str(refusal.value)

    assert refused(**{option[2:]: value}).startswith(f"{option}: {message}")
    assert refused(betas="0.5", values="srpt,fair+r").startswith(  # nothing to sweep
        "--betas: sweeps laps and laps+r")


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
