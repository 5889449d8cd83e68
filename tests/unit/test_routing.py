"""common/routing.py: where each command goes and what it becomes, the one reading of a
worker's report, and stimulus ids by which a task's story is followed from core to core."""

from __future__ import annotations

import json
import typing

import pytest
from harness import Federation

from common.commands import (
    Command,
    PublishHeartbeat,
    PublishTaskEvent,
    ReplyToGM,
    ReportToLM,
    ReprioritizeOnWorker,
    SendCancel,
    SendLaunch,
    SendPreempt,
    SendReprioritize,
    StartOnWorker,
    StopOnWorker,
)
from common.events import (
    CancelRequested,
    HeartbeatReceived,
    JobReprioritized,
    LaunchRequested,
    LMReplied,
    PreemptRequested,
    ReprioritizeRequested,
    TaskAssigned,
    TaskCancelled,
    TaskEventReceived,
    WorkerTaskFailed,
    WorkerTaskFinished,
    WorkerTaskStarted,
)
from common.messages import Placement, RequestKind, TaskEvent
from common.models import JobSpec, TaskSpec
from common.reasons import Reason
from common.resources import Resources
from common.routing import (
    GM,
    LM,
    OWN_EFFECTS,
    ROUTES,
    WORKER,
    StimulusIds,
    cause_of,
    own_part,
    worker_report_event,
)
from common.wire import WorkerReport, report_to_wire, worker_report_to_event
from simulator.cluster import shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation

TASK = TaskSpec("j/0", "j", Resources(500, 512), frozenset(), 2.0)
PLACEMENT = Placement("j/0#0.1", TASK, "lm-1/n0", "gm-1", "u1")
SNAPSHOT = object()  # routing passes a snapshot along without looking into it
EVENT = TaskEvent(Reason.STARTED, "j/0#0.1", "j/0", "j", "gm-1", "lm-1", "lm-1/n0")
WORKER_LM = {"lm-1/w0": "lm-1"}


def test_every_command_either_reaches_another_core_or_is_the_drivers_own() -> None:
    kinds = set(typing.get_args(Command))
    assert set(ROUTES) | OWN_EFFECTS == kinds
    assert not set(ROUTES) & OWN_EFFECTS


@pytest.mark.parametrize(
    ("source", "command", "role", "receiver", "event"),
    [
        ("gm-1", SendLaunch("lm-2", "gm-1.0.1", RequestKind.LAUNCH, (PLACEMENT,)), LM, "lm-2",
         LaunchRequested("launch-1<x-9", "gm-1", "gm-1.0.1", RequestKind.LAUNCH, (PLACEMENT,))),
        ("gm-1", SendPreempt("lm-1", "gm-1.0.2", PLACEMENT, ("k/0#0.1",)), LM, "lm-1",
         PreemptRequested("preempt-1<x-9", "gm-1", "gm-1.0.2", PLACEMENT, ("k/0#0.1",))),
        ("gm-1", SendCancel("lm-1", "j/0#0.1"), LM, "lm-1",
         CancelRequested("cancel-1<x-9", "gm-1", "j/0#0.1")),
        ("gm-1", SendReprioritize("lm-2", "j", 12.5), LM, "lm-2",
         ReprioritizeRequested("reprio-1<x-9", "gm-1", "j", 12.5)),
        ("lm-1", ReplyToGM("gm-2", "gm-2.0.1", (), SNAPSHOT), GM, "gm-2",
         LMReplied("reply-1<x-9", "lm-1", "gm-2.0.1", (), SNAPSHOT)),
        ("lm-1", PublishTaskEvent("gm-1", EVENT), GM, "gm-1",
         TaskEventReceived("taskev-1<x-9", EVENT)),
        ("lm-1", PublishHeartbeat(SNAPSHOT), GM, None,  # None: every GM
         HeartbeatReceived("hb-1<x-9", SNAPSHOT)),
        ("lm-1", StartOnWorker("lm-1/w0", PLACEMENT), WORKER, "lm-1/w0",
         TaskAssigned("assign-1<x-9", PLACEMENT)),
        ("lm-1", StopOnWorker("lm-1/w0", "j/0#0.1", Reason.PREEMPTED), WORKER, "lm-1/w0",
         TaskCancelled("stop-1<x-9", "j/0#0.1", Reason.PREEMPTED)),
        ("lm-1", ReprioritizeOnWorker("lm-1/w0", "j", 12.5), WORKER, "lm-1/w0",
         JobReprioritized("reprio-1<x-9", "j", 12.5)),
        ("lm-1/w0", ReportToLM(Reason.STARTED, "j/0#0.1", at=4.5), LM, "lm-1",
         WorkerTaskStarted("report-1<x-9", "lm-1/w0", "j/0#0.1", 4.5)),
    ],
)
def test_each_command_becomes_its_event_for_its_receiver(source, command, role, receiver,
                                                         event) -> None:
    route = ROUTES[type(command)]
    assert route.role == role
    assert route.receiver(source, command, WORKER_LM) == receiver
    assert route.deliver(source, command, "x-9<y-3", StimulusIds()) == event


# --- a worker's report --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("report", "expected"),
    [
        (ReportToLM(Reason.STARTED, "a#1", at=2.0), WorkerTaskStarted("s", "w0", "a#1", 2.0)),
        (ReportToLM(Reason.FINISHED, "a#1", 3.25), WorkerTaskFinished("s", "w0", "a#1", 3.25)),
        (ReportToLM(Reason.FAILED, "a#1", detail="exit 1"),
         WorkerTaskFailed("s", "w0", "a#1", "exit 1")),
        (ReportToLM(Reason.CANCELLED, "a#1", detail="preempted"),
         WorkerTaskFailed("s", "w0", "a#1", "cancelled: preempted")),
        (ReportToLM(Reason.CANCELLED, "a#1"), WorkerTaskFailed("s", "w0", "a#1", "cancelled")),
    ],
)
def test_a_report_is_the_same_event_to_the_lm_in_every_driver(report: ReportToLM,
                                                              expected: object) -> None:
    # the harness and the simulator route the command; the LM service decodes it off the wire
    assert worker_report_event("w0", report, "s") == expected
    wire = WorkerReport.model_validate(json.loads(report_to_wire(report, "w0")
                                                  .model_dump_json()))
    assert worker_report_to_event(wire, "s") == expected


# --- stimulus ids -------------------------------------------------------------------------------


def test_an_id_names_its_cause_and_stays_short_along_a_chain() -> None:
    ids = StimulusIds()
    hb = ids.new("hb")
    assert hb == "hb-1" and cause_of(hb) is None and own_part(hb) == "hb-1"
    launch = ids.caused("launch", hb)
    assert launch == "launch-2<hb-1" and cause_of(launch) == "hb-1"
    reply = ids.caused("reply", launch)
    assert reply == "reply-3<launch-2" and own_part(reply) == "reply-3"
    current = reply
    for _ in range(10_000):  # heartbeat -> launch -> reply -> launch ...
        current = ids.caused("launch", ids.caused("reply", current))
    assert current == "launch-20003<reply-20002"


def test_a_command_of_no_known_cause_gets_an_id_of_its_own() -> None:
    # as when a test hands a core's command to the harness itself
    event = ROUTES[SendCancel].deliver("gm-1", SendCancel("lm-1", "a#1"), None, StimulusIds())
    assert event == CancelRequested("cancel-1", "gm-1", "a#1")


def test_a_services_ids_carry_its_name() -> None:
    ids = StimulusIds("lm-1:")
    assert ids.new("tick") == "lm-1:tick-1"
    assert ids.caused("assign", "gm-1:launch-4<gm-1:job-2") == "lm-1:assign-2<gm-1:launch-4"


# --- a task's story, from GM to LM to worker and back -------------------------------------------


def follow(cores: dict[str, object], job_id: str, stimulus_id: str) -> list[tuple]:
    """The chain of causes from `stimulus_id` back to a stimulus from outside the cores: for
    each stimulus its tag, the core that handled it and what it changed in the job's story
    (the job's, its tasks' and its attempts' transitions)."""
    handled: dict[str, tuple[str, str, set[str]]] = {}  # own part -> core, its id, changes
    for name, core in cores.items():
        for entry in core.story(job_id):
            whole = entry["stimulus_id"]
            handled.setdefault(own_part(whole), (name, whole, set()))[2].add(
                f"{entry['entity']} {entry['new']}")
    chain = []
    current: str | None = stimulus_id
    while current is not None:
        name, whole, changes = handled[own_part(current)]
        chain.append((own_part(whole).partition("-")[0], name, changes))
        current = cause_of(whole)
    return chain


def test_a_tasks_story_is_followed_across_gm_lm_and_worker_by_stimulus_ids() -> None:
    fed = Federation.simple(num_gms=2, num_lms=2, nodes_per_lm=2)
    fed.tick()
    fed.run_until_quiet()
    fed.submit("gm-1", JobSpec("j", "u1", (TASK,), 0.0))
    fed.drain()
    [attempt] = fed.finished_reports
    worker = next(w for w, agent in fed.workers.items() if agent.story(attempt))
    lm = fed.worker_lm[worker]
    cores = {"gm-1": fed.gms["gm-1"], lm: fed.lms[lm], worker: fed.workers[worker]}
    gm_story = fed.gms["gm-1"].story("j/0")

    running = next(e["stimulus_id"] for e in gm_story if e["new"] == "running")
    assert follow(cores, "j", running) == [
        ("taskev", "gm-1", {"j/0 running", "j running"}),  # the LM's task event at the GM,
        ("report", lm, {f"{attempt} running"}),  # caused by the worker's report to its LM,
        ("assign", worker, {f"{attempt} running"}),  # caused by the LM's start on the worker,
        ("launch", lm, {f"{attempt} launched"}),  # caused by the GM's launch request,
        ("submit", "gm-1", {"j pending", "j/0 pending", "j/0 placing"}),  # by the submission
    ]
    done = next(e["stimulus_id"] for e in gm_story if e["new"] == "done")
    assert follow(cores, "j", done) == [
        ("taskev", "gm-1", {"j/0 done", "j done"}),
        ("report", lm, {f"{attempt} finished"}),
        ("ran", worker, {f"{attempt} finished"}),  # the run's end, from outside the cores
    ]


def simulated(jobs: int = 20) -> dict[str, object]:
    """Every core of a small simulated run, by name."""
    specs = [JobSpec(f"j{n}", "q1", tuple(TaskSpec(f"j{n}/{i}", f"j{n}", Resources(1, 1),
                                                   duration=1.0 + i) for i in range(3)),
                     arrival=0.1 * n) for n in range(jobs)]
    sim = FederatedSimulation(shaped_federation(8, 2, 2, slots=True), specs, SimLog("megha"))
    sim.run()
    return {actor.svc: actor.core
            for actor in (*sim.gms.values(), *sim.lms.values(), *sim.workers.values())}


def test_the_simulator_repeats_its_stimulus_ids_and_they_stay_short() -> None:
    def stories() -> list[dict]:
        # a job's story has its tasks' and attempts'
        return [entry for core in simulated().values()
                for entry in core.story(*(f"j{n}" for n in range(20)))]

    first = stories()
    assert first == stories()
    ids = {entry["stimulus_id"] for entry in first}
    assert len(ids) > 100 and max(map(len, ids)) < 30
    assert {own_part(i).partition("-")[0] for i in ids} >= {"submit", "launch", "reply",
                                                            "assign", "report", "taskev"}


def test_a_simulated_tasks_story_is_followed_the_same_way() -> None:
    cores = simulated(jobs=1)
    gm_story = next(core.story("j0/0") for core in cores.values() if core.story("j0/0"))
    done = next(e["stimulus_id"] for e in gm_story if e["new"] == "done")
    assert [tag for tag, _, _ in follow(cores, "j0", done)] == ["taskev", "report", "ran"]
    running = next(e["stimulus_id"] for e in gm_story if e["new"] == "running")
    assert [tag for tag, _, _ in follow(cores, "j0", running)] == [
        "taskev", "report", "assign", "launch", "submit"]
