"""The federated design in simulation: the services' GM, LM and worker cores (common/), driven
by a virtual clock instead of HTTP, RabbitMQ and timers (docs/architecture.md, One core,
three drivers).

Every command a core returns becomes what the services would do, one network delay later:
a launch request reaches its LM, an LM's answer its GM, a task event or heartbeat (through
the broker in the testbed) every GM concerned; common/routing.py says which event, for whom,
and gives it a stimulus id naming its cause. A worker's `RunTask` ends after the task's
duration. LMs and GMs tick at the heartbeat interval, as in the services; without processing
time, the ticks of a core that says they would do nothing until its next event
(`waits_for_events`: a GM's, which only time out LMs, and a quiet LM's, which would repeat its
last heartbeat) are held, and resume on their own beat once an event changes that: a third of
a saturated run's engine steps were such ticks (issue 38).

Processing time (`processing="measured"` or `"model"`): each service is a single server, as a
service's one event loop is. Events wait in its inbox, in arrival order, until it is free; it
takes the core's CPU time on the event (measured), or the calibrated cost of what the core did
(modelled: simulator/processing.py, docs/processing.md, repeatable), and whatever the core
sends leaves when it is done. The event log stamps a line then, with `handle_s`, exactly as
the services do; the lines of TIMED_EVENTS also carry what only the driver knows, for the
allocation time's components (inspection/analysis.py): `wait_s`, how long the event waited in
the inbox, `flight_s`, how long it was on the network, and `work_s`, the part of `handle_s`
that was the line's own task's work (its decision, its validation) rather than the other
tasks' of the same step. With `processing="none"` (the default) cores take no virtual time,
and the same seed gives the same event log.

No failures are modelled: worker agents send no heartbeats and LMs never time them out,
GMs never time out an LM, and an LM's heartbeat goes out only when its state changed.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from common.commands import (
    JobEnded,
    KillTask,
    Log,
    PublishHeartbeat,
    PublishTaskEvent,
    RunTask,
)
from common.errors import InvalidInput
from common.events import HeartbeatReceived, JobSubmitted, TaskRunEnded, Tick
from common.federation import Federation
from common.gm import GlobalMaster
from common.lm import LocalMaster
from common.models import JobSpec, TaskSpec
from common.reasons import Reason
from common.resources import Resources
from common.routing import GM, LM, ROUTES, WORKER, Receiver, Route, StimulusIds
from common.startlog import HANDLED_EVENTS, TIMED_EVENTS, gm_starting, lm_capacity
from common.worker import WorkerAgent
from simulator.calibrated import calibrated_delivery
from simulator.engine import DelayModel, Engine
from simulator.eventlog import SimLog
from simulator.processing import CALIBRATED, ProcessingModel, parse_processing
from simulator.timemodel import CalibratedNetwork, TimeModel

# Entries of each simulated core's story (common/story.py): the services keep 100,000 per GM
# and LM and 10,000 per worker for GET /v1/debug/story. Nobody asks a simulated core for its
# story; what is left of it is the history an impossible transition's error carries. The
# last 200 transitions of a core are its last steps (a GM records 5 to 7 per task), which
# covers a move that goes wrong soon after the one before it; a run repeats with its seed,
# so a longer story is one rerun away (`--story-entries`). At the services' lengths,
# YH1_sub on 10,000 nodes kept over a million entries and the stimulus ids they hold: 150 MB
# of its 555 MB peak RSS (issue 38); at 1,000 entries, 129,000 entries and 20 MB of 162.
DEFAULT_STORY_ENTRIES = 200


class InvariantBroken(AssertionError):
    """An invariant (docs/architecture.md, Invariants) failed at the end of a run."""


@dataclass(slots=True)
class _Actor:
    svc: str
    core: object
    receive: Callable[[object], None] | None = None  # an event's delivery to this actor
    # with processing time: the events waiting for it, (event, sent, arrived), and whether
    # it is busy (handling one, or until the end of the last one's processing)
    inbox: deque = field(default_factory=deque)
    busy: bool = False
    held_tick: float | None = None  # the time of its next tick, while held (`_tick`)


@dataclass(slots=True)
class RunOutcome:
    jobs: int
    rejected: dict[str, str] = field(default_factory=dict)  # job id -> reason
    ended: dict[str, str] = field(default_factory=dict)  # job id -> state
    # task id -> the finishes of it its LMs published: the runs that completed it. A run
    # that ended while its LM was stopping it (a preemption, a cancel, a losing copy, all
    # crossing its end on the way) ran, but its LM had given it up and discards its end;
    # only the LM's acceptance makes a completion, and there must be one per task
    completions: dict[str, int] = field(default_factory=dict)
    virtual_s: float = 0.0
    steps: int = 0


class FederatedSimulation:
    def __init__(self, federation: Federation, jobs: Sequence[JobSpec], log: SimLog, *,
                 delay: DelayModel | None = None, processing: str = "none", seed: int = 0,
                 progress: Callable[[float, int, int], None] | None = None,
                 time_model: TimeModel | None = None,
                 story_entries: int = DEFAULT_STORY_ENTRIES) -> None:
        """`story_entries`: the transitions each core keeps for its story (see
        DEFAULT_STORY_ENTRIES), 0 for none."""
        kind, scale = parse_processing(processing)
        check_story_entries(story_entries)
        self.federation = federation
        # the specs until `run` hands them to the agenda; their ids for the end's checks
        self._arriving = sorted(jobs, key=lambda job: job.arrival)
        self.job_ids = tuple(job.job_id for job in self._arriving)
        self.log = log
        self.engine = Engine()
        if time_model is not None and delay is not None:
            raise InvalidInput("--delay", "a calibrated time model has its own delays per hop")
        # a time model (simulator/timemodel.py): each message's delay drawn for its hop, or
        # played through its outbox; else one delay for every message
        self.network = (CalibratedNetwork(time_model, random.Random(f"{seed}/net"),
                                          federation.timing.model_dump())
                        if time_model is not None else None)
        self.delay = (delay or DelayModel.parse(None)).sampler(random.Random(f"{seed}/net"))
        self.measured = kind == "measured"
        costs = CALIBRATED if time_model is None else time_model.costs
        self.model = ProcessingModel(costs.scaled(scale)) if kind == "model" else None
        # with processing time, deliveries carry (event, when sent) into the services' inboxes
        self.timed = kind != "none"
        # whether a core's ticks may wait for its next event: without processing time an idle
        # tick takes no time, and it sends nothing a receiver would take (`_tick`)
        self.hold_ticks = not self.timed
        self._step_stamps: tuple = ()  # the step being handled: see `_stamps`
        self.progress = progress
        self.rng = random.Random(f"{seed}/phases")
        timing = federation.timing
        topologies = federation.topologies()
        # No failures are modelled, so no LM is ever left out for silence, and an LM repeats a
        # heartbeat only when its state changed (an unchanged one would change nothing but
        # the GM's last-heard time): most of a long run's heartbeats cost nothing.
        # No client asks a simulated GM about a job once it has ended (the run learns of its
        # end from JobEnded), so a GM forgets its records then, not 100,000 jobs later.
        # A simulated GM never restarts either: no attempts of an earlier incarnation to seek.
        self.gms = {gm: _Actor(gm, GlobalMaster(replace(federation.gm_config(gm),
                                                        lm_timeout=math.inf,
                                                        earlier_incarnations=False),
                                                topologies=topologies, story_len=story_entries,
                                                ended_jobs_kept=0))
                    for gm in federation.gms}
        self.last_heartbeat: dict[str, object] = {}
        lm_options = federation.lm_options()
        self.lms = {t.lm: _Actor(t.lm, LocalMaster(t, heartbeat_interval=timing.heartbeat_interval,
                                                   worker_timeout=math.inf,
                                                   story_len=story_entries, **lm_options))
                    for t in topologies}
        options = federation.worker_options()
        self.workers = {worker: _Actor(worker, WorkerAgent(
            worker, federation.worker_nodes(worker), story_len=story_entries, **options))
            for worker in federation.workers()}
        self.worker_lm = federation.workers()
        self.queue_gm = {queue.name: queue.gm for queue in federation.queues}
        self.outcome = RunOutcome(jobs=len(self.job_ids))
        # attempt -> its run (worker, duration) and the seq of the run's end in the engine
        self._running: dict[str, tuple[tuple[_Actor, float], int]] = {}
        self.ids = StimulusIds()
        # command type -> what this driver does with it: its own effects, and the deliveries
        # to other cores that common/routing.py describes
        self._routes: dict[type, Callable[[_Actor, object, str, float, float], None]] = {
            Log: self._log, RunTask: self._run_task, KillTask: self._kill,
            JobEnded: self._job_ended}
        self._routes.update((kind, self._delivery(kind, route))
                            for kind, route in ROUTES.items())
        self._routes[PublishTaskEvent] = partial(self._task_event,
                                                 self._routes[PublishTaskEvent])
        self._finished_reports = 0
        # the agenda's action: without processing time an event never waits, so it goes
        # straight to `_handle` (no tuple, one call less on each of a million deliveries)
        receive = self._arrive if self.timed else self._handle
        for actor in (*self.gms.values(), *self.lms.values(), *self.workers.values()):
            actor.receive = partial(receive, actor)

    # -- the run -----------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        self._log_start()
        # Every GM knows every LM before the first job, as `megha replay` waits for in the
        # testbed: allocation times are the scheduler's, not a cold start's.
        for lm in self.lms.values():
            heartbeat = HeartbeatReceived(self.ids.new("hb"), lm.core.snapshot())
            for gm in self.gms.values():
                self._handle(gm, heartbeat)
        interval = self.federation.timing.heartbeat_interval
        for actor in (*self.lms.values(), *self.gms.values()):
            self.engine.at(self.rng.uniform(0, interval), self._tick, actor)
        # The agenda holds a job's spec until it is submitted and its GM until it ends
        # (a simulated GM forgets an ended job): kept nowhere else, the specs of a job and
        # its 1,000s of tasks go when it ends, their memory reused by the run's later ones
        # (unless the caller keeps its own list, as `simulator/command.py` does not).
        arriving, self._arriving = self._arriving, []
        for job in arriving:
            self.engine.at(job.arrival, self._submit, job)
        del arriving
        total = len(self.job_ids)
        report = None
        if self.progress is not None:
            def report(now: float) -> None:
                self.progress(now, len(self.outcome.ended) + len(self.outcome.rejected), total)
        self._stop_when_all_ended()  # no jobs at all
        self.engine.run(report)
        self.outcome.virtual_s = self.engine.now
        self.outcome.steps = self.engine.steps
        if self.progress is not None:
            self.progress(self.engine.now, total, total)
        return self.outcome

    def _all_ended(self) -> bool:
        return len(self.outcome.ended) + len(self.outcome.rejected) >= self.outcome.jobs

    def _submit(self, job: JobSpec) -> None:
        if self.network is not None:  # the way from the client's POST to the GM's core
            self.engine.at(self.engine.now + self.network.submit_delay(), self._submitted, job)
        else:
            self._submitted(job)

    def _submitted(self, job: JobSpec) -> None:
        self._now_to(self.gms[self.queue_gm[job.user]], JobSubmitted(self.ids.new("submit"),
                                                                     job), message=True)

    def _reject(self, gm: _Actor, job: JobSpec, error: InvalidInput) -> None:
        self.outcome.rejected[job.job_id] = str(error)
        self.log.emit(self.engine.now, gm.svc, "job_rejected",
                      {"job": job.job_id, "user": job.user, "reason": str(error)})
        self._stop_when_all_ended()

    def _tick(self, actor: _Actor) -> None:
        if self._all_ended():
            return  # the run is over: no more heartbeats keep the agenda alive
        self._now_to(actor, Tick(self.ids.new("tick")))
        at = self.engine.now + self.federation.timing.heartbeat_interval
        if self.hold_ticks and actor.core.waits_for_events:
            # until an event changes that, its ticks would change nothing and send nothing a
            # receiver takes (an unchanged heartbeat: `to_every_gm`); `_handle` resumes them
            actor.held_tick = at
        else:
            self.engine.at(at, self._tick, actor)

    def _resume_ticks(self, actor: _Actor) -> None:
        """An event gave a held core's ticks something to do: the next on its own beat, the
        first after now, at the time the ticks it skipped would have scheduled it."""
        at, interval, now = actor.held_tick, self.federation.timing.heartbeat_interval, \
            self.engine.now
        while at <= now:
            at += interval  # the same sums as `_tick`'s, so the same floats
        actor.held_tick = None
        self.engine.at(at, self._tick, actor)

    def _now_to(self, actor: _Actor, event, message: bool = False) -> None:
        """An event from outside the cores (a submission, a tick, a task's end) for `actor`
        now: with processing time it joins the inbox, as a service's timer or request does
        (`message`: a request, which costs a time model's overhead)."""
        if self.timed:
            self._arrive(actor, (event, self.engine.now, message))
        else:
            self._handle(actor, event)

    # -- one event at one service --------------------------------------------------------------

    def _arrive(self, actor: _Actor, delivery: tuple) -> None:
        """With processing time: an event reaches its service's inbox; a free service takes
        it at once, a busy one when it is done with those before it. `delivery`: (event,
        sent, message): whether it came in a message of its own (not: a timer, the GM's own
        pass, or the second event of a batch), which costs a time model's overhead."""
        actor.inbox.append((*delivery, self.engine.now))
        if not actor.busy:
            self._serve(actor)

    def _serve(self, actor: _Actor) -> None:
        event, sent, message, arrived = actor.inbox.popleft()
        now = self.engine.now
        actor.busy = True
        took = self._handle(actor, event, now - arrived, arrived - sent)
        if self.model is not None and self.model.has_overhead:
            # the service's framework takes the event (and its message) in: a time model's
            # overhead; the hops' delays already hold it for this event, so it holds up the
            # next one
            took += self.model.overhead(actor.core, message)
        self.engine.at(now + took, self._next, actor)

    def _next(self, actor: _Actor) -> None:
        if actor.inbox:
            self._serve(actor)
        else:
            actor.busy = False

    def _handle(self, actor: _Actor, event, wait: float = 0.0, flight: float = 0.0) -> float:
        """One event through its core now; its commands leave when its processing is done.
        Returns the processing time (0 without a processing model)."""
        now = self.engine.now
        core = actor.core
        try:
            if self.measured:
                started = time.perf_counter()
                commands = core.handle(event, now)
                took = time.perf_counter() - started
            elif self.model is not None:
                counters = getattr(core, "counters", None)  # a GM's counts its decisions
                decided = counters["decisions_total"] if counters is not None else 0
                commands = core.handle(event, now)
                decisions = counters["decisions_total"] - decided if counters else 0
                took = self.model.cost(core, event, commands, decisions)
            else:
                commands = core.handle(event, now)
                took = 0.0
        except InvalidInput as error:
            if type(event) is not JobSubmitted:
                raise
            self._reject(actor, event.job, error)  # the GM refused the job: nothing changed
            return 0.0
        if actor.held_tick is not None and not core.waits_for_events:
            self._resume_ticks(actor)
        if self.timed:
            self._step_stamps = self._stamps(event, commands, took, wait, flight)
        # what the core sent leaves when the core is done; at once without processing time,
        # stamped with `now` itself: a float of its own per step would live on in the report
        done = now + took if took else now
        routes, cause = self._routes, event.stimulus_id
        for command in commands:
            route = routes.get(type(command))
            if route is None:
                raise InvariantBroken(f"{actor.svc}: no route for {command!r}")
            route(actor, command, cause, done, took)
        return took

    def _stamps(self, event, commands: list, took: float, wait: float,
                flight: float) -> dict[str, dict]:
        """The fields the step's TIMED_EVENTS lines get, per line kind: the event's wait in
        the inbox and flight, and each line's own share of the processing (`work_s`): the
        model's cost of its own operation, else an even share of the step's time."""
        lines: dict[str, int] = {}
        for command in commands:
            if type(command) is Log and command.event in TIMED_EVENTS:
                lines[command.event] = lines.get(command.event, 0) + 1
        stamps = {}
        for line, count in lines.items():
            own = self.model.own_work(line, event) if self.model is not None else None
            stamps[line] = {"wait_s": wait, "flight_s": flight,
                            "work_s": min(took, own) if own is not None else took / count}
        return stamps

    # -- deliveries: the event common/routing.py makes of a command, one delay later ----------

    def _delivery(self, kind: type,
                  route: Route) -> Callable[[_Actor, object, str, float, float], None]:
        """The delivery of one command type, its route's pieces looked up once: the
        simulator routes millions of commands."""
        if self.network is not None and route.to is not Receiver.SELF:
            return calibrated_delivery(self, kind, route)
        make, tag, caused, timed = route.event, route.tag, self.ids.caused, self.timed
        # each event goes one network delay later to its receiver's `receive`, in the engine's
        # FIFO lane (simulator/engine.py)
        at_fifo, delay = self.engine.at_fifo, self.delay
        if route.to is Receiver.NAMED:
            actors = {GM: self.gms, LM: self.lms, WORKER: self.workers}[route.role]
            name_of = route.name_of

            def to_named(source: _Actor, command, cause: str, at: float, took: float) -> None:
                event = make(source.svc, command, caused(tag, cause))
                at_fifo(at + delay(), actors[name_of(command)].receive,
                        (event, at, True) if timed else event)

            return to_named
        if route.to is Receiver.WORKERS_LM:
            lms, worker_lm = self.lms, self.worker_lm

            def to_workers_lm(source: _Actor, command, cause: str, at: float,
                              took: float) -> None:
                svc = source.svc
                event = make(svc, command, caused(tag, cause))
                at_fifo(at + delay(), lms[worker_lm[svc]].receive,
                        (event, at, True) if timed else event)

            return to_workers_lm
        if route.to is Receiver.SELF:  # a GM's bounded pass: on at once, behind its inbox

            def to_self(source: _Actor, command, cause: str, at: float, took: float) -> None:
                event = make(source.svc, command, caused(tag, cause))
                at_fifo(at, source.receive, (event, at, False) if timed else event)

            return to_self
        # Receiver.EVERY: the one route to every actor of a role, an LM's heartbeat to the GMs
        gms, last = self.gms.values(), self.last_heartbeat

        def to_every_gm(source: _Actor, command: PublishHeartbeat, cause: str, at: float,
                        took: float) -> None:
            # an LM's heartbeat: its snapshot is cached until the LM's state changes, and an
            # unchanged one would change nothing but the GM's last-heard time
            if last.get(source.svc) is command.snapshot:
                return
            last[source.svc] = command.snapshot
            event = make(source.svc, command, caused(tag, cause))
            delivery = (event, at, True) if timed else event
            for gm in gms:
                at_fifo(at + delay(), gm.receive, delivery)

        return to_every_gm

    # -- the driver's own effects: what the services do with these commands ------------------

    def _log(self, source: _Actor, command: Log, cause: str, at: float, took: float) -> None:
        event = command.event
        if event not in TIMED_EVENTS:
            self.log.emit(at, source.svc, event, command.fields,
                          took if event in HANDLED_EVENTS else None)
            return
        fields = command.fields
        if self.timed:
            fields = {**fields, **self._step_stamps[event]}
        self.log.emit(at, source.svc, event, fields, took)

    def _run_task(self, source: _Actor, c: RunTask, cause: str, at: float, took: float) -> None:
        run = (source, c.duration or 0.0)
        self._stop_run(c.attempt_id)  # a run of it before (suspended, restored) stops
        # the end carries its run, checked when it comes (`_task_ran`)
        self._running[c.attempt_id] = (run, self.engine.at(at + run[1], self._task_ran,
                                                           (c.attempt_id, run)))

    def _kill(self, source: _Actor, c: KillTask, cause: str, at: float, took: float) -> None:
        self._stop_run(c.attempt_id)

    def _stop_run(self, attempt_id: str) -> None:
        """The attempt's run, if any, stops: its end is called off."""
        running = self._running.pop(attempt_id, None)
        if running is not None:
            self.engine.cancel(running[1])

    def _task_event(self, deliver: Callable, source: _Actor, c: PublishTaskEvent, cause: str,
                    at: float, took: float) -> None:
        event = c.event
        if event.kind is Reason.FINISHED:
            completions = self.outcome.completions
            completions[event.task_id] = completions.get(event.task_id, 0) + 1
        deliver(source, c, cause, at, took)

    def _job_ended(self, source: _Actor, c: JobEnded, cause: str, at: float,
                   took: float) -> None:
        self.outcome.ended[c.job_id] = c.state
        self._stop_when_all_ended()

    def _stop_when_all_ended(self) -> None:
        if self._all_ended():
            self.engine.stopped = True

    def _task_ran(self, scheduled: tuple[str, tuple]) -> None:
        attempt, run = scheduled
        running = self._running.pop(attempt, None)
        if running is None or running[0] is not run:  # `_kill` calls off the end of a run
            raise InvariantBroken(f"the end of a run of {attempt} that is not its current one")
        worker, duration = run
        self._now_to(worker, TaskRunEnded(self.ids.new("ran"), attempt, duration))

    # -- the log's first lines, as the services write them ------------------------------------

    def _log_start(self) -> None:
        for gm in self.gms:
            self.log.emit(0.0, gm, "gm_starting", gm_starting(self.federation, gm, 0))
        for lm in self.federation.lms:
            self.log.emit(0.0, lm.id, "lm_started", {
                "lm": lm.id, "epoch": 0, "recovering": False, "workers": list(lm.workers)}
                | lm_capacity(self.federation, lm.id))

    # -- the invariants (docs/architecture.md, Invariants), at the end of a run ----------------

    def check_invariants(self) -> None:
        """Every core's own checks, and what only the driver sees: no accepted job dropped,
        no task run to completion twice, and each GM's view equal to the LMs' truth once
        the heartbeats after the last event have arrived."""
        for actor in (*self.gms.values(), *self.lms.values(), *self.workers.values()):
            actor.core.validate()
        accepted = set(self.job_ids) - set(self.outcome.rejected)
        dropped = accepted - set(self.outcome.ended)
        if dropped:
            raise InvariantBroken(f"{len(dropped)} accepted job(s) never ended, e.g. "
                                  f"{sorted(dropped)[0]}")
        twice = [task for task, runs in self.outcome.completions.items() if runs > 1]
        if twice:
            raise InvariantBroken(f"{len(twice)} task(s) ran to completion twice, e.g. "
                                  f"{twice[0]}")
        self._settle()
        for gm in self.gms.values():
            view = gm.core.view
            for lm in self.lms.values():
                seen, truth = view.slots[lm.svc].snapshot, lm.core.snapshot()
                if (seen.free_cpu, seen.free_mem, seen.up) != (truth.free_cpu, truth.free_mem,
                                                               truth.up):
                    raise InvariantBroken(f"{gm.svc}'s view of {lm.svc} differs from its "
                                          f"truth after the last heartbeat")

    def _settle(self) -> None:
        """One heartbeat from every LM, delivered: 'within one heartbeat interval'."""
        for lm in self.lms.values():
            lm.core.beat_now()
            self._handle(lm, Tick(self.ids.new("tick")))
        self.engine.stopped = False
        self.engine.run()


def check_story_entries(entries: int) -> None:
    if not (type(entries) is int and entries >= 0):
        raise InvalidInput("--story-entries", f"must be a whole number >= 0, got {entries!r}")


def job_specs(replay_jobs, slot: tuple[int, int] | None = None) -> list[JobSpec]:
    """The workload tools' jobs as the core's: task ids `{job}/{i}`; in slot mode every task
    asks for exactly one node's `slot`.

    A workload has 100,000s of tasks and few distinct demands, constraint sets and placement
    sets: tasks that ask the same share one (immutable) object of each, made from the first
    such task's own value (an empty frozenset alone is 216 bytes, more than its task's spec).
    """
    specs = []
    one_slot = Resources(*slot) if slot else None  # immutable: every task may share it
    demands: dict = {}
    constraint_sets: dict = {}
    placement_sets: dict = {}
    for job in replay_jobs:
        tasks = []
        for i, t in enumerate(job.tasks):
            tasks.append(TaskSpec(
                f"{job.job_id}/{i}", job.job_id,
                one_slot or _shared(demands, (t.cpu_m, t.mem_mib), _demand),
                _shared(constraint_sets, t.constraints, frozenset), t.duration,
                None if t.nodes is None else _shared(placement_sets, t.nodes, frozenset)))
        specs.append(JobSpec(job.job_id, job.user, tuple(tasks), job.arrival, job.weight,
                             job.estimate, name=job.name))
    return specs


def _demand(pair: tuple[int, int]) -> Resources:
    return Resources(*pair)


def _shared(made: dict, value, make: Callable):
    """`make(value)`, made once per distinct `value` in `made` (each time if unhashable)."""
    try:
        found = made.get(value)
    except TypeError:
        return make(value)
    if found is None:
        found = made[value] = make(value)
    return found
