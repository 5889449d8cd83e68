"""The GM/LM/worker protocol under message loss and LM crashes, with durable task events.

The machine of tests/unit/test_invariants.py (real GlobalMaster, LocalMaster and WorkerAgent
cores through tests/harness.py: messages delivered in any order, some twice, workers killed
and revived, the same invariants after every step and the same drain at the end) gains what
the real transports lose, and only that:

- a heartbeat may be lost (GMs read them from a bounded fanout queue; an LM drops them while
  RabbitMQ is away); a cancel or a reprioritization may be lost (best effort); a start, stop
  or other call to a worker may be lost (the LM's worker outbox gives up after a few tries;
  the LM's dispatch timeout and the worker's heartbeats cover it);
- a launch or preemption request, or its answer, may be lost: the GM's shell then reports the
  request failed (`LMRequestFailed`), not knowing whether the LM acted on it;
- a task event is never lost (the LM's task-event log and RabbitMQ's durable queue), but may
  arrive twice, also long after its first delivery (a restarted LM publishes again an event
  whose `published` mark it had not written);
- an LM crashes: its calls to workers that had not left die with it, requests in flight to
  it either reach the new incarnation (the shell retried) or fail; its task events survive.
  Worker reports in flight reach the new incarnation (workers retry until answered).

After every step: no node over-committed, no task DONE twice, no attempt started twice (the
audit of test_invariants). At the end, everything is delivered without loss and time runs
until the federation is quiet: every accepted job ended once, nothing holds resources and
every GM's view equals every LM's truth.

`LossyRestartMachine` is the rule without the log: a crashed LM's undelivered task events are
lost. The GMs' attempt leases must still end every job (a task whose finish was lost runs
again), which is what kept the federation correct before the log; it runs too.
"""

from __future__ import annotations

from collections import Counter

from harness import Message  # tests/ and this folder are on the path (pyproject, pytest)
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule
from test_invariants import (
    MACHINE_SETTINGS,
    FederationMachine,
    drain_and_check,
    federation_of,
    make_job,
    restart_lm,
)

from common.events import (
    CancelRequested,
    HeartbeatReceived,
    LaunchRequested,
    LMReplied,
    LMRequestFailed,
    PreemptRequested,
    ReprioritizeRequested,
    TaskEventReceived,
    WorkerTaskCheckpointed,
    WorkerTaskFailed,
    WorkerTaskFinished,
    WorkerTaskStarted,
    WorkerTaskSuspended,
)
from common.reasons import Reason
from common.resources import Resources

# requests whose loss (or their answer's) the GM's shell reports as a failed request
REQUESTS = (LaunchRequested, PreemptRequested)
# messages a real transport may lose outright (best effort, or covered by a timeout)
LOSSY_TO_LM = (CancelRequested, ReprioritizeRequested)
# a worker's reports: its outbox retries until the LM answers, whichever incarnation
WORKER_REPORTS = (WorkerTaskStarted, WorkerTaskFinished, WorkerTaskFailed, WorkerTaskSuspended,
                  WorkerTaskCheckpointed)


def is_task_event(message: Message) -> bool:
    return message.role == "gm" and isinstance(message.event, TaskEventReceived)


class DurableProtocolMachine(FederationMachine):
    """test_invariants' federation with lossy transports, LM crashes and durable task events."""

    durable_task_events = True

    def __init__(self) -> None:
        super().__init__()
        self.delivered_events: list[Message] = []  # task events delivered, for republishing

    # -- loss ------------------------------------------------------------------------------------

    @precondition(lambda self: self.fed is not None and self.fed.network)
    @rule(pick=st.integers(0, 1000))
    def drop_one(self, pick: int) -> None:
        """One message lost the way its transport loses it (task events never are)."""
        network = self.fed.network
        message = network[pick % len(network)]
        if is_task_event(message) or isinstance(message.event, WORKER_REPORTS):
            return  # durable, or retried by the worker until the LM answers
        if message.role == "gm" and not isinstance(message.event, (HeartbeatReceived,
                                                                   LMReplied)):
            return  # a GM's own pass continuation: not a message on any wire
        network.remove(message)
        if isinstance(message.event, REQUESTS):
            self._request_failed(message.event.gm, message.target, message.event.request_id)
        elif isinstance(message.event, LMReplied):
            self._request_failed(message.target, message.event.lm, message.event.request_id)

    @precondition(lambda self: self.fed is not None and self.delivered_events)
    @rule(pick=st.integers(0, 1000))
    def republish_delivered_event(self, pick: int) -> None:
        """A task event the GM already took arrives again, at any later time: the LM crashed
        after RabbitMQ confirmed it but before its `published` mark reached the disk."""
        message = self.delivered_events[pick % len(self.delivered_events)]
        self.fed.network.append(Message(message.role, message.target, message.event))

    @precondition(lambda self: self.fed is not None)
    @rule(pick=st.integers(0, 1), requests_fail=st.booleans())
    def crash_an_lm(self, pick: int, requests_fail: bool) -> None:
        """The LM process dies and a new one starts on the same state folder."""
        fed = self.fed
        lm_id = sorted(fed.lms)[pick % len(fed.lms)]
        workers = {w for w, lm in fed.worker_lm.items() if lm == lm_id}
        kept = []
        for message in fed.network:
            sent = message.event
            if message.role == "worker" and message.target in workers:
                continue  # its outbox to the workers was in memory
            if (message.role == "gm" and isinstance(sent, TaskEventReceived)
                    and sent.event.lm == lm_id and not self.durable_task_events):
                continue  # the stricter rule: no log, the outbox dies with the process
            if message.role == "lm" and message.target == lm_id:
                if isinstance(sent, REQUESTS) and requests_fail:
                    self._request_failed(sent.gm, lm_id, sent.request_id)
                    continue
                if isinstance(sent, LOSSY_TO_LM) and requests_fail:
                    continue
            kept.append(message)
        held = sum(1 for m in kept if is_task_event(m) and m.event.event.lm == lm_id)
        event(f"an LM crashed with task events unpublished: {'yes' if held else 'no'}")
        fed.network[:] = kept
        restart_lm(fed, lm_id)
        self.audit.lm_restarted(lm_id)

    @precondition(lambda self: self.fed is not None and any(map(is_task_event,
                                                                self.fed.network)))
    @rule(pick=st.integers(0, 1000), requests_fail=st.booleans())
    def crash_an_lm_holding_task_events(self, pick: int, requests_fail: bool) -> None:
        """The case the log is for, made common: an LM dies with events not yet out."""
        held = [m.event.event.lm for m in self.fed.network if is_task_event(m)]
        lm_id = held[pick % len(held)]
        self.crash_an_lm(sorted(self.fed.lms).index(lm_id), requests_fail)

    # -- mechanics -------------------------------------------------------------------------------

    def _request_failed(self, gm: str, lm: str, request_id: str) -> None:
        failed = LMRequestFailed(self.fed.stimulus("failed"), lm, request_id)
        self.fed.network.append(Message("gm", gm, failed))

    def _deliver(self, index: int) -> None:
        message = self.fed.network[index]
        super()._deliver(index)
        if is_task_event(message):
            self.delivered_events.append(message)



class LossyRestartMachine(DurableProtocolMachine):
    """The stricter LM-loss rule: a crashed LM's undelivered task events are gone."""

    durable_task_events = False


# About 10 s and 4 s on one core; a failure prints the steps that reproduce it.
PROTOCOL_SETTINGS = settings(MACHINE_SETTINGS, max_examples=250)
TestDurableProtocol = DurableProtocolMachine.TestCase
TestDurableProtocol.settings = PROTOCOL_SETTINGS
TestLossyRestart = LossyRestartMachine.TestCase
TestLossyRestart.settings = settings(PROTOCOL_SETTINGS, max_examples=100)


# -- plain cases -------------------------------------------------------------------------------


def run_recording(fed, delivered: list[Message]) -> None:
    """`fed.run_until_quiet`, keeping every task event delivered to a GM."""
    while fed.network:
        message = fed.network[0]
        fed.deliver(0)
        if is_task_event(message):
            delivered.append(message)


def test_every_task_event_delivered_again_changes_nothing_at_the_gm() -> None:
    """A restarted LM may publish again what its GMs already took (its `published` marks are
    not fsynced; RabbitMQ redelivers too). The GM takes task events idempotently by attempt
    and kind: started, finished, preempted and lost ones, again and in any order, start
    nothing, requeue nothing and complete nothing a second time."""
    fed = federation_of({"lm-1": [frozenset(), frozenset()]}, capacity=Resources(1000, 1024))
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, frozenset())] * 3))
    fed.submit("gm-2", make_job("b", "u2", [(1000, 1024, frozenset())]))
    delivered: list[Message] = []
    for _ in range(30):
        run_recording(fed, delivered)
        if {end.job_id for end in fed.ended_jobs} == {"a", "b"}:
            break
        fed.finish_all()
        fed.tick(fed.heartbeat_interval)
        fed.heartbeat_workers()
    kinds = {m.event.event.kind for m in delivered}
    assert {Reason.STARTED, Reason.FINISHED} <= kinds
    logged = len(fed.logs)
    for message in delivered + delivered[::-1]:
        fed.network.append(Message(message.role, message.target, message.event))
    fed.run_until_quiet()
    again = [record.event for _, record in fed.logs[logged:]]
    assert set(again) == {"task_event_ignored"}, again
    assert not fed.executing
    drain_and_check(fed, ["a", "b"])


def test_a_finish_from_the_log_after_the_gms_lease_expired_completes_the_task_once() -> None:
    """lm-1 hears a/0 finish but cannot publish it, and dies. Its successor publishes the
    event from its log, but only after the GM has waited `attempt_grace` for the new
    incarnation to list the attempt and requeued a/0 as lost (RabbitMQ slow, say). The late
    finish still completes the task, once; the rerun is cancelled or its end ignored."""
    fed = federation_of({"lm-1": [frozenset(), frozenset()]})
    fed.submit("gm-1", make_job("a", "u1", [(1000, 1024, frozenset())]))
    fed.run_until_quiet()
    first = "a/0#0.1"
    fed.finish(first)
    held = []  # the finish, in lm-1's log: not published before it dies
    while fed.network:
        message = fed.network.pop(0)
        if is_task_event(message):
            held.append(message)
        else:
            fed._run(message.role, message.target, message.event)
    assert [m.event.event.kind for m in held] == [Reason.FINISHED]
    restart_lm(fed, "lm-1")
    for _ in range(int(fed.gms["gm-1"].config.attempt_grace / fed.heartbeat_interval) + 3):
        fed.tick(fed.heartbeat_interval)
        fed.heartbeat_workers()
        fed.run_until_quiet()
    requeued = [r.fields for s, r in fed.logs if r.event == "task_requeued"]
    assert [(f["task"], f["reason"]) for f in requeued] == [("a/0", "lost")]
    fed.network.extend(held)  # the new incarnation publishes what the old one held
    fed.run_until_quiet()
    done = [r.fields for s, r in fed.logs if r.event == "task_done"]
    assert [(f["task"], f["attempt"]) for f in done] == [("a/0", first)]
    audit = drain_and_check(fed, ["a"])
    assert audit.task_done == Counter({"a/0": 1})


def test_an_lm_holding_a_launch_whose_worker_call_was_lost_frees_it_at_its_dispatch_timeout(
) -> None:
    """Hypothesis's case: lm-1 takes j1/0 and its call to the worker is lost, and so is its
    answer to the GM, which places the task again on lm-2, where it ends the job. lm-1 holds
    the attempt its worker never heard of until `dispatch_timeout` (four worker timeouts),
    then ends it as lost. The drain used to give up after two worker timeouts and report
    the attempt still held; it now waits as long as an LM may hold one."""

    class Quiet(DurableProtocolMachine):
        def _report_coverage(self) -> None:  # hypothesis's `event` needs a running test
            pass

    machine = Quiet()
    machine.build(num_gms=2, workers_per_lm=1, best_fit=False, seed=0)
    for _ in range(4):
        machine.deliver_in_order(count=1)
    machine.submit(gm_pick=0, tasks=[(500, 512, 0, 0)])
    machine.deliver_in_order(count=1)
    assert [type(m.event).__name__ for m in machine.fed.network] == ["TaskAssigned",
                                                                     "LMReplied"]
    machine.drop_one(pick=0)  # lm-1's call to its worker
    machine.drop_one(pick=0)  # lm-1's answer to gm-1
    machine.teardown()
    lost = [(source, r.fields["attempt"]) for source, r in machine.fed.logs
            if r.event == "task_lost"]
    assert lost == [("lm-1", "j1/0#0.1")]
