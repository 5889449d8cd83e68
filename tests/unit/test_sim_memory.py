"""What keeps a simulation's memory down (issue 38) without changing a run: the simulated
cores' stories bounded by `--story-entries`, one object per distinct demand, constraint set,
placement set and task shape, and the run's objects collected before its report."""

from __future__ import annotations

import gc
import inspect
import random
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from common.errors import InvalidInput
from common.gm import GlobalMaster
from common.gm_records import JobRecord, TaskRecord
from common.lm import LocalMaster
from common.messages import Placement
from common.models import JobSpec, TaskSpec
from common.policies.job import JOB_POLICIES, NO_PILOTS, JobProgress
from common.policies.local_queue import LOCAL_QUEUE_POLICIES
from common.resources import Resources
from common.worker import WorkerAgent
from loadgen.workload import ReplayJob, ReplayTask
from megha.cli import main
from simulator import command
from simulator.cluster import SLOT, shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import DEFAULT_STORY_ENTRIES, FederatedSimulation, job_specs
from simulator.run_settings import RunSettings, workload_defaults

ROOT = Path(__file__).resolve().parents[2]
SMALL_TRACE = ROOT / "deploy" / "workloads" / "YH_small.tr"


def workload(jobs: int = 30, width: int = 5) -> list[JobSpec]:
    return [JobSpec(f"j{k}", f"q{1 + k % 2}", tuple(
                TaskSpec(f"j{k}/{i}", f"j{k}", Resources(*SLOT), duration=1.0 + (k + i) % 3)
                for i in range(width)), 0.25 * k)
            for k in range(jobs)]


def simulate(story_entries: int | None, path: Path | None = None):
    federation = shaped_federation(8, 2, 2, slots=True, nodes_per_worker=2,
                                   heartbeat_interval=1.0)
    log = SimLog("megha", path)
    options = {} if story_entries is None else {"story_entries": story_entries}
    sim = FederatedSimulation(federation, workload(), log, **options)
    outcome = sim.run()
    sim.check_invariants()
    log.close()
    return sim, outcome


def stories(sim: FederatedSimulation) -> dict[str, object]:
    """Every simulated core's transition log, by service."""
    logs = {gm.svc: gm.core.log for gm in sim.gms.values()}
    logs |= {lm.svc: lm.core.log for lm in sim.lms.values()}
    logs |= {worker.svc: worker.core._log for worker in sim.workers.values()}
    return logs


# --- the stories ------------------------------------------------------------------------------


def test_the_story_length_reaches_every_simulated_core_and_bounds_it() -> None:
    sim, _ = simulate(7)
    logs = stories(sim)
    assert len(logs) == 2 + 2 + 4  # GMs, LMs, workers
    assert {log._entries.maxlen for log in logs.values()} == {7}
    assert all(len(log) <= 7 for log in logs.values())
    # bounded, not merely short: 30 jobs fill every core's story
    assert all(len(log) == 7 for log in logs.values())


def test_a_simulations_cores_keep_the_default_story_length_the_services_keep_theirs() -> None:
    sim, _ = simulate(None)
    assert {log._entries.maxlen for log in stories(sim).values()} == {DEFAULT_STORY_ENTRIES}
    assert RunSettings(workload_defaults()).story_entries == DEFAULT_STORY_ENTRIES
    # the services' cores are built without the option: their defaults are the services'
    defaults = {kind: inspect.signature(kind).parameters["story_len"].default
                for kind in (GlobalMaster, LocalMaster, WorkerAgent)}
    assert defaults == {GlobalMaster: 100_000, LocalMaster: 100_000, WorkerAgent: 10_000}


@pytest.mark.parametrize("short", [0, 3])
def test_a_short_story_changes_nothing_in_the_run(tmp_path: Path, short: int) -> None:
    _, long_outcome = simulate(100_000, tmp_path / "long.log")
    sim, short_outcome = simulate(short, tmp_path / "short.log")
    assert all(len(log) <= short for log in stories(sim).values())
    assert short_outcome == long_outcome and len(short_outcome.ended) == 30
    short_log = (tmp_path / "short.log").read_bytes()
    assert short_log == (tmp_path / "long.log").read_bytes()
    assert b'"event":"task_started"' in short_log


@pytest.mark.parametrize("bad", [-1, 1.5, "10"])
def test_a_simulation_refuses_a_bad_story_length_naming_the_option(bad) -> None:
    federation = shaped_federation(2, 1, 1, slots=True)
    with pytest.raises(InvalidInput, match="--story-entries"):
        FederatedSimulation(federation, [], SimLog("megha"), story_entries=bad)


@pytest.mark.parametrize("bad", ["-1", "1.5", "many", ""])
def test_the_command_line_refuses_a_bad_story_length_naming_the_option(capsys, bad) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--nodes", "10", "--story-entries", bad])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert "argument --story-entries: must be a whole number >= 0" in error


def test_help_explains_the_story_length(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--story-entries N" in help_text
    assert f"default {DEFAULT_STORY_ENTRIES:,}" in help_text and "0 keeps none" in help_text


def test_the_first_line_names_a_story_length_only_if_not_the_default(tmp_path: Path) -> None:
    def first_line(*extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "megha", "simulate", "--nodes", "20", "--gms", "1", "--lms",
             "2", "--slots", "--trace", str(SMALL_TRACE), "--jobs", "5", "--no-log", *extra],
            capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()[0]

    assert "stor" not in first_line()
    assert ", stories of 50 entries per core;" in first_line("--story-entries", "50")


# --- ended jobs ---------------------------------------------------------------------------------


def test_a_simulated_gm_forgets_an_ended_job_at_once_and_leaves_no_cycle() -> None:
    """A simulated GM keeps no ended job (nobody asks it about one): each is freed when it
    ends, its task records with it, though the collector is paused for the run."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        sim, outcome = simulate(None)
        assert len(outcome.ended) == 30
        assert {gm.core._ended.kept for gm in sim.gms.values()} == {0}
        assert all(not gm.core.jobs for gm in sim.gms.values())
        # no JobRecord or TaskRecord of the run is left, not even as uncollected garbage
        ours = {f"j{k}" for k in range(30)}
        left = [o for o in gc.get_objects()
                if isinstance(o, (JobRecord, TaskRecord)) and o.spec.job_id in ours]
        assert left == []
    finally:
        if was_enabled:
            gc.enable()


def test_a_simulation_keeps_no_ended_jobs_specs_its_caller_dropped(tmp_path: Path) -> None:
    """Given the only list of the specs, a run frees a job's and its tasks' as it ends (the
    agenda and the job's GM held them), and the end's checks still know every job."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        federation = shaped_federation(8, 2, 2, slots=True, nodes_per_worker=2,
                                       heartbeat_interval=1.0)
        sim = FederatedSimulation(federation, workload(), SimLog("megha"))
        outcome = sim.run()
        sim.check_invariants()
        assert len(outcome.ended) == 30 and len(sim.job_ids) == 30
        left = [o for o in gc.get_objects() if isinstance(o, (JobSpec, TaskSpec))
                and o.job_id in set(sim.job_ids)]
        assert left == []
    finally:
        if was_enabled:
            gc.enable()


def test_simulate_hands_its_only_list_of_specs_to_the_simulation(monkeypatch) -> None:
    """`simulate_once` keeps no list of the jobs while they run (the specs of ended jobs
    would live to the end)."""
    holders: list[set[int]] = []
    run = FederatedSimulation.run

    def counted(self):
        holders.append({id(holder) for spec in self._arriving
                        for holder in gc.get_referrers(spec) if type(holder) is list})
        holders.append({id(self._arriving)})
        return run(self)

    monkeypatch.setattr(FederatedSimulation, "run", counted)
    settings = RunSettings(workload_defaults(), slots=True).with_workload(trace=SMALL_TRACE,
                                                                          jobs=5)
    try:
        result = command.simulate_once(settings, "megha", shaped_federation(20, 1, 2, slots=True),
                                       "20 nodes", None)
    finally:
        gc.unfreeze()
    assert result["jct"]["overall"]["count"] == 5
    mine, its_own = holders
    assert mine == its_own  # no list but the simulation's own holds a spec


def test_the_services_gm_still_keeps_its_ended_jobs_to_answer_about_them() -> None:
    assert inspect.signature(GlobalMaster).parameters["ended_jobs_kept"].default == 100_000
    gm = GlobalMaster(shaped_federation(8, 1, 2, slots=True).gm_config("gm-1"))
    assert gm._ended.kept == 100_000


# --- shared objects -----------------------------------------------------------------------------


def test_tasks_that_ask_the_same_share_one_demand_constraint_set_and_placement_set() -> None:
    def task(cpu: int, constraints: tuple, nodes: tuple | None = None) -> ReplayTask:
        return ReplayTask(cpu, 64, 1.0, constraints, nodes=nodes)

    jobs = [ReplayJob("a", "q1", 0.0, (task(500, (4, 20), ("n1", "n2")), task(500, ()),
                                       task(700, (4, 20)))),
            ReplayJob("b", "q2", 1.0, (task(500, (4, 20), ("n1", "n2")), task(700, (),
                                                                              ("n3",))))]
    a, b = job_specs(jobs)
    a0, a1, a2 = a.tasks
    b0, b1 = b.tasks
    # equal values, as each task's own would be
    assert a0.demand == Resources(500, 64) and a0.constraints == frozenset({4, 20})
    assert a0.nodes == frozenset({"n1", "n2"}) and a1.nodes is None
    assert b1.constraints == frozenset() and b1.nodes == frozenset({"n3"})
    # one object per distinct value, across jobs
    assert a0.demand is a1.demand is b0.demand and a2.demand is b1.demand
    assert a0.demand is not a2.demand
    assert a0.constraints is a2.constraints is b0.constraints
    assert a1.constraints is b1.constraints and a1.constraints is not a0.constraints
    assert a0.nodes is b0.nodes and b1.nodes is not a0.nodes
    # in slot mode every task shares the one slot
    slotted = job_specs(jobs, SLOT)
    assert len({id(t.demand) for job in slotted for t in job.tasks}) == 1


def test_job_specs_takes_constraints_it_cannot_hash_too() -> None:
    [spec] = job_specs([ReplayJob("a", "q1", 0.0, (ReplayTask(500, 64, 1.0, [3, 1]),
                                                   ReplayTask(500, 64, 1.0, [3, 1])))])
    assert [t.constraints for t in spec.tasks] == [frozenset({1, 3})] * 2


@pytest.mark.parametrize("policy", ["oracle", "las"])
def test_ladder_policies_give_every_job_without_pilots_the_one_empty_set(policy: str) -> None:
    made = JOB_POLICIES.make(policy)
    jobs = [JobProgress.of(job, k, 0.0) for k, job in enumerate(workload(2), 1)]
    for job in jobs:
        made.admit(job, random.Random(0))
    assert all(job.pilots is NO_PILOTS for job in jobs)


def test_a_jobs_tasks_of_one_shape_share_one_shape_tuple() -> None:
    slot, big = Resources(*SLOT), Resources(2 * SLOT[0], SLOT[1])
    tasks = (TaskSpec("j/0", "j", slot), TaskSpec("j/1", "j", big),
             TaskSpec("j/2", "j", Resources(*SLOT)),  # equal, not the same object
             TaskSpec("j/3", "j", slot, frozenset({2})))
    job = JobSpec("j", "q1", tasks, 0.0)
    records = JobRecord(job, JobProgress.of(job, 1, 0.0)).add_tasks()
    assert [record.shape for record in records] == [spec.shape for spec in tasks]
    assert records[0].shape is records[2].shape
    assert len({id(record.shape) for record in records}) == 3


def test_a_simulation_of_a_trace_imports_no_job_file_or_alibaba_reader() -> None:
    """They pull in common.wire's pydantic models, MBs of every run's peak: a .tr trace is
    read without them."""
    code = ("import sys; from megha.cli import main; "
            f"main(['simulate', '--nodes', '20', '--gms', '1', '--lms', '2', '--slots', "
            f"'--trace', {str(SMALL_TRACE)!r}, '--jobs', '3', '--no-log']); "
            "print(sorted(m for m in ('loadgen.jobfile', 'loadgen.alibaba', 'common.wire') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_a_nodes_local_queue_makes_its_sorted_list_only_when_it_queues() -> None:
    """Every node has a local queue and most never queue: an empty SortedList each is 3 MB
    of a 10,000-node simulation."""
    queue = LOCAL_QUEUE_POLICIES.make("srpt")
    assert queue._entries is None and list(queue) == [] and len(queue) == 0
    assert queue.remove("a#0.1") is None and queue.reprioritize("a", 1.0) == 0
    [spec] = workload(1, 1)
    placement = Placement("j0/0#0.1", spec.tasks[0], "n1", "gm-1", "q1", 1.0)
    queue.push(placement, 1, 0.0)
    assert list(queue) == [placement]
    assert queue.remove("j0/0#0.1") is placement and list(queue) == []


def test_a_run_fixes_glibcs_mmap_threshold_and_any_other_libc_is_left_alone(
        monkeypatch) -> None:
    """By default glibc raises its mmap threshold to the size of each mapped block freed, and
    a run's growing tables then leave holes in its heap: fixed, YH1_sub's peak is 13 MB lower.
    """
    calls: list[tuple[int, int]] = []

    class Libc:
        def mallopt(self, parameter: int, value: int) -> int:
            calls.append((parameter, value))
            return 1

    monkeypatch.setattr(command.ctypes, "CDLL", lambda name: Libc())
    command._fix_mmap_threshold()
    assert calls == [(-3, 128 * 1024)]  # M_MMAP_THRESHOLD, glibc's initial value
    monkeypatch.setattr(command.ctypes, "CDLL", lambda name: object())  # no mallopt
    command._fix_mmap_threshold()
    assert len(calls) == 1


# --- the report's peak ----------------------------------------------------------------------------


def test_a_run_passes_its_story_length_and_is_collected_before_its_report(monkeypatch) -> None:
    """`simulate_once` gives the cores the settings' story length; and they are garbage by the
    report, which needs memory of its own: a simulation still alive then (its cycles never
    collected) would add the report's peak to the run's."""
    sims: list[weakref.ref] = []
    lengths: set[int] = set()
    at_report: list[bool] = []
    made = FederatedSimulation.__init__

    def remembered(self, *args, **kwargs) -> None:
        made(self, *args, **kwargs)
        sims.append(weakref.ref(self))
        lengths.update(log._entries.maxlen for log in stories(self).values())

    report = SimLog.report

    def checked(self) -> dict:
        at_report.append(all(sim() is None for sim in sims))
        return report(self)

    monkeypatch.setattr(FederatedSimulation, "__init__", remembered)
    monkeypatch.setattr(SimLog, "report", checked)
    settings = RunSettings(workload_defaults(), slots=True, story_entries=5)
    settings = settings.with_workload(trace=SMALL_TRACE, jobs=5)
    federation = shaped_federation(20, 1, 2, slots=True)
    try:
        result = command.simulate_once(settings, "megha", federation, "20 nodes", None)
    finally:
        gc.unfreeze()  # simulate_once leaves its survivors frozen for the process's exit
    assert result["jct"]["overall"]["count"] == 5
    assert lengths == {5}
    assert len(sims) == 1 and at_report == [True]
