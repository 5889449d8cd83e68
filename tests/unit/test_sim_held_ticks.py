"""Ticks that would do nothing wait for the next event (issue 38): a simulated GM's, which only
time out LMs, and a quiet LM's, which would repeat its last heartbeat. A run is the same, byte
for byte, with fewer engine steps; the cores say when their ticks may wait."""

from __future__ import annotations

import math
import random

import pytest

from common.events import LaunchRequested, Tick
from common.gm import GlobalMaster
from common.gm_config import GMConfig
from common.lm import LocalMaster
from common.messages import RequestKind
from common.models import JobSpec, TaskSpec
from common.policies.fairness import UserQueue
from common.resources import Resources
from simulator.cluster import SLOT, shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation
from simulator.run_settings import Overrides
from tests.sim_runs import recorded_run
from tests.unit.test_lm import item, topology


def _jobs(seed: int, count: int) -> list[JobSpec]:
    """Bursts of jobs with quiet gaps between them, as a trace has: LMs go idle in the gaps,
    and some tasks run on long after their burst."""
    rng = random.Random(seed)
    jobs = []
    for j in range(count):
        durations = [rng.choice((0.5, 1.0, 2.0, 7.0, 40.0)) for _ in range(rng.randint(1, 12))]
        burst = 30.0 * (j // 10)
        jobs.append(JobSpec(f"j{j}", f"q{1 + j % 2}", tuple(
            TaskSpec(f"j{j}/{i}", f"j{j}", Resources(*SLOT), duration=d)
            for i, d in enumerate(durations)), round(burst + rng.uniform(0, 3), 1)))
    return jobs


@pytest.mark.parametrize("overrides", [
    Overrides(), Overrides(queue_depth=2),
    Overrides(redundancy="srpt+r", variability="two-state"), Overrides(report_ends=True)],
    ids=["plain", "local-queues", "copies", "report-ends"])
def test_a_run_is_the_same_with_its_idle_ticks_held(tmp_path, overrides):
    runs = []
    for hold in (False, True):
        federation = overrides.apply(
            shaped_federation(24, 2, 3, slots=True, nodes_per_worker=4, heartbeat_interval=1.0))

        def setup(sim, hold=hold):
            sim.hold_ticks = hold

        runs.append(recorded_run(tmp_path / f"{hold}.log", federation, _jobs(7, 60), 3, setup))
    (log_off, *rest_off, steps_off), (log_on, *rest_on, steps_on) = runs
    assert log_on == log_off and rest_on == rest_off
    assert steps_on < steps_off


def test_with_processing_time_every_tick_is_taken():
    """An idle tick takes a service's time: with a processing model none is held."""
    federation = shaped_federation(24, 2, 3, slots=True, heartbeat_interval=1.0)
    sim = FederatedSimulation(federation, _jobs(7, 5), SimLog("megha"), processing="model")
    assert not sim.hold_ticks
    sim.run()
    assert all(actor.held_tick is None for actor in (*sim.gms.values(), *sim.lms.values()))


def test_an_lm_waits_only_while_its_last_heartbeat_shows_its_state():
    lm = LocalMaster(topology(), worker_timeout=math.inf)
    lm.handle(Tick("t1"), 0.0)
    assert lm.waits_for_events
    lm.handle(LaunchRequested("s", "gm-1", "r1", RequestKind.LAUNCH, (item("j/0#0", "n0"),)), 0.1)
    assert not lm.waits_for_events  # its next heartbeat shows the launch
    lm.handle(Tick("t2"), 1.0)
    assert lm.waits_for_events


def test_an_lm_on_the_clock_never_waits():
    """A finite worker timeout (the services') or a recovery: time alone changes it."""
    watched = LocalMaster(topology(), worker_timeout=3.0)
    recovering = LocalMaster(topology(), worker_timeout=math.inf, recovering=True)
    for lm in (watched, recovering):
        lm.handle(Tick("t1"), 0.0)
        assert not lm.waits_for_events


def test_a_gm_waits_only_without_an_lm_timeout():
    queues = (UserQueue("u1", 1.0, "gm-1"),)
    assert GlobalMaster(GMConfig("gm-1", queues, lm_timeout=math.inf)).waits_for_events
    assert not GlobalMaster(GMConfig("gm-1", queues, lm_timeout=5.0)).waits_for_events
