"""A GM's bounded pass (`[limits] gm_pass_tasks`): a step places at most that many tasks, asks
to go on (`ContinuePass`, one at a time), and what it placed leaves at once; the pass goes on
where it stopped, in the job policy's order, until everything that fits is placed."""

from __future__ import annotations

import dataclasses

import pytest
from harness import Federation
from one_gm_federation import one_gm_file

from common.commands import ContinuePass
from common.errors import InvalidInput
from common.events import PassContinued
from common.federation import load_federation
from common.models import JobSpec, Resources, TaskSpec
from simulator.cluster import shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation


def job(job_id: str, width: int, arrival: float = 0.0, duration: float = 1.0) -> JobSpec:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(1000, 1024), frozenset(),
                           duration) for i in range(width))
    return JobSpec(job_id, "u1", tasks, arrival)


def bounded(fed: Federation, tasks: int) -> None:
    gm = fed.gms["gm-1"]
    gm.config = dataclasses.replace(gm.config, pass_tasks=tasks)


def placed(fed: Federation) -> list[str]:
    return [log.fields["task"] for _, log in fed.logs if log.event == "task_placed"]


def test_a_bounded_step_places_its_share_and_asks_once_to_go_on() -> None:
    fed = Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=4, constraints=frozenset())
    fed.tick()
    fed.run_until_quiet()
    bounded(fed, 2)
    fed.submit("gm-1", job("wide", 7))
    assert placed(fed) == ["wide/0", "wide/1"]
    continues = [m for m in fed.network if isinstance(m.event, PassContinued)]
    assert len(continues) == 1 and continues[0].target == "gm-1"
    fed.submit("gm-1", job("other", 1))  # another step: the continuation is already out
    assert len([m for m in fed.network if isinstance(m.event, PassContinued)]) == 1
    fed.run_until_quiet()
    # in order, two by two, the later job after the first: the index kept its place
    assert placed(fed) == [f"wide/{i}" for i in range(7)] + ["other/0"]
    fed.drain()
    assert {ended.job_id for ended in fed.ended_jobs} == {"wide", "other"}


def test_an_unbounded_pass_places_the_whole_job_in_one_step() -> None:
    fed = Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=4, constraints=frozenset())
    fed.tick()
    fed.run_until_quiet()
    fed.submit("gm-1", job("wide", 7))
    assert len(placed(fed)) == 7
    assert not any(isinstance(m.event, PassContinued) for m in fed.network)


def test_the_continuation_is_routed_back_to_the_gm_itself() -> None:
    from common.routing import ROUTES

    route = ROUTES[ContinuePass]
    assert route.receiver("gm-2", ContinuePass(), {}) == "gm-2"


def simulate(pass_tasks: int) -> dict:
    federation = shaped_federation(40, 2, 2, slots=True, heartbeat_interval=1.0, seed=3)
    federation = dataclasses.replace(federation, limits=federation.limits.model_copy(
        update={"gm_pass_tasks": pass_tasks}))
    # a burst past capacity, then recovery: 30 jobs of 6 tasks on 40 slots in 3 s
    jobs = [JobSpec(f"j{k}", "q1" if k % 2 else "q2",
                    tuple(TaskSpec(f"j{k}/{i}", f"j{k}", Resources(1000, 1024), frozenset(),
                                   2.0 + (k * i) % 5) for i in range(6)), 0.1 * k)
            for k in range(30)]
    log = SimLog(f"pass-{pass_tasks}", None)
    sim = FederatedSimulation(federation, jobs, log, processing="model")
    sim.run()
    sim.check_invariants()
    log.close()
    return log.report()


def test_a_saturated_simulation_with_a_bounded_pass_ends_every_job() -> None:
    unbounded, small = simulate(0), simulate(3)
    for report in (unbounded, small):
        assert report["counts"]["jobs_done"] == 30
    # a step's placements leave before its job's last decision: less waiting for the batch
    assert (small["breakdown"]["components"]["mean_s"]["batch_wait"]
            < unbounded["breakdown"]["components"]["mean_s"]["batch_wait"])
    assert simulate(3)["allocation"] == small["allocation"]  # repeatable


@pytest.mark.parametrize(("value", "expected"), [("0", None), ("16", 16)])
def test_the_federation_file_sets_the_bound(value: str, expected: int | None) -> None:
    federation = load_federation(limits_file(f"gm_pass_tasks = {value}"))
    assert federation.gm_config("g1").pass_tasks == expected


def test_a_negative_bound_is_refused_by_name() -> None:
    with pytest.raises(InvalidInput, match="gm_pass_tasks"):
        load_federation(limits_file("gm_pass_tasks = -1"))


def limits_file(line: str) -> str:
    return one_gm_file(f"[limits]\n{line}")
