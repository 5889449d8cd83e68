"""The modelled processing time of the simulator's cores (`--processing model`): what one
event costs a GM, an LM or a worker agent, as a sum of calibrated per-operation costs.

`--processing measured` charges each core's real CPU time on an event to virtual time:
faithful to this machine at that moment, but no two runs alike. The model charges instead a
cost computed from what the event made the core do, counted from the event and the commands
the core returned (and, for a GM, its `decisions_total` counter), so the same seed gives the
same run. The services are single servers either way: an event that arrives while its
service is busy waits for it (simulator/federated.py).

The constants are this machine's (2 cores, CPython 3.11), fitted by non-negative least
squares to the CPU time of every `handle` call of 10,000-node runs of YH1_sub's first 1,000
jobs, megha (4 GMs, 25 LMs) and centralized (1 GM, 1 LM), slot mode, and checked against
benchmarks/bench_core.py; docs/processing.md gives the method and the figures. Only the
driver charges them: the cores (common/) know nothing of time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

from common.commands import PublishHeartbeat, ReplyToGM
from common.errors import InvalidInput
from common.events import (
    HeartbeatReceived,
    JobSubmitted,
    LaunchRequested,
    LMReplied,
    TaskEventsReceived,
    WorkerTaskFailed,
    WorkerTaskFinished,
    WorkerTaskStarted,
)
from common.gm import GlobalMaster
from common.lm import LocalMaster

US = 1e-6
_WORKER_REPORTS = (WorkerTaskStarted, WorkerTaskFinished, WorkerTaskFailed)


@dataclass(frozen=True, slots=True)
class ProcessingCosts:
    """Seconds per operation. "fit": the least-squares fit of docs/processing.md, with the
    mean it reproduces for the steps that cost most."""

    # A GM, any event: the step, the pass's checks, the dispatch of what the window lets
    # out. fit (a Tick costs 1.9 us, a lone task event 4.4 us)
    gm_event: float = 1.9 * US
    # one scheduling decision: a task tried in a pass, placed or finding no room (search of
    # the view, reservation, attempt id, request batch, log line). fit; bench_core.py, with
    # 21 constraints and admission, measures 19 to 21 us per decision
    gm_decision: float = 7.4 * US
    # a submitted job's own work besides its tasks' decisions (admission's checks of every
    # task, records, the backlog's index). fit (YH1_sub's jobs: 426 us a job, 46 tasks)
    gm_job: float = 65.0 * US
    gm_task_admitted: float = 0.0  # fit: nothing beyond gm_job and the decisions
    # one snapshot (a heartbeat's or a reply's) taken into the view. fit, federated (10.9 us
    # a heartbeat of 400 nodes)
    gm_snapshot: float = 2.2 * US
    # each node of that snapshot's LM: the centralized fit's snapshot cost, 27.6 us at
    # 10,000 nodes, less the federated 2.2 us at 400, over the 9,600 nodes between
    gm_node_viewed: float = 0.0026 * US
    gm_reply_result: float = 2.4 * US  # one verdict of a reply applied. fit
    gm_task_event: float = 2.4 * US  # one task event (started, finished) applied. fit
    gm_running_listed: float = 0.03 * US  # one running attempt of a heartbeat's list. fit
    # An LM, any event (a worker's report, a tick). fit
    lm_event: float = 3.3 * US
    # one placement validated and, if accepted, started (its worker's start, its log line).
    # fit; bench_core.py measures 7.5 us a validation, replies included
    lm_item: float = 6.0 * US
    # one node of a snapshot the LM builds (a reply's or a heartbeat's free resources and
    # liveness). fit: 0, below the noise even at 10,000 nodes (centralized: 247 us a launch
    # request of 47 items, all in lm_item)
    lm_node_shown: float = 0.0
    lm_running_listed: float = 0.013 * US  # one running attempt listed in a heartbeat. fit
    # one worker report (started, finished) taken, beyond lm_event: 0 in this fit (in
    # lm_event); a time model fitted on the services' logs measures it (twin/fit.py)
    lm_report: float = 0.0
    worker_event: float = 6.1 * US  # a worker agent, any event (a start, an end). fit
    # Each message's cost outside the core, per role (an HTTP request or a broker message; a
    # batch of reports is one): the HTTP server and client, JSON and the wire models, the
    # broker's client, the event log. 0 here (this fit timed the cores alone); a time model
    # fitted on the services measures it from their processes' CPU time less their cores'
    # (twin/services.py). Not an operation: the driver charges it per message it delivers
    gm_overhead: float = 0.0
    lm_overhead: float = 0.0
    worker_overhead: float = 0.0
    # and each core event's (an item of a message: a start, a report), beyond its message's
    gm_event_overhead: float = 0.0
    lm_event_overhead: float = 0.0
    worker_event_overhead: float = 0.0


    def scaled(self, factor: float) -> ProcessingCosts:
        """Every cost times `factor`: the same services `1 / factor` times faster (or
        slower), to ask how fast they must be for a figure's shares to change."""
        return ProcessingCosts(**{name: getattr(self, name) * factor for name in OPERATIONS})


CALIBRATED = ProcessingCosts()
OPERATIONS = tuple(f.name for f in fields(ProcessingCosts))
PROCESSING_KINDS = ("none", "measured", "model")


def parse_processing(text: str) -> tuple[str, float]:
    """`--processing`'s value: none, measured, model, or model:SCALE (the calibrated costs
    times SCALE, a positive number: model:0.1 is services ten times faster)."""
    kind, sep, scale_text = text.partition(":")
    if kind not in PROCESSING_KINDS or (sep and kind != "model"):
        raise InvalidInput("--processing", f"{text!r} is not one of none, measured, model, "
                                           f"model:SCALE")
    if not sep:
        return kind, 1.0
    try:
        scale = float(scale_text)
    except ValueError:
        scale = math.nan
    if not (scale > 0 and math.isfinite(scale)):
        raise InvalidInput("--processing", f"model:SCALE needs a positive number as SCALE, "
                                           f"got {scale_text!r}")
    return kind, scale


class ProcessingModel:
    """The cost of one step of a core, and the part of it that is one task's own work."""

    def __init__(self, costs: ProcessingCosts = CALIBRATED) -> None:
        self.costs = costs
        # whether any overhead is charged at all (only a time model fitted on the services
        # has one): the driver skips `overhead` per event otherwise
        self.has_overhead = any(getattr(costs, name) for name in OPERATIONS
                                if name.endswith("overhead"))

    def cost(self, core: object, event: object, commands: Sequence[object],
             decisions: int) -> float:
        """Seconds `core` took on `event`, which returned `commands` after `decisions`
        scheduling decisions (GMs only)."""
        costs = self.costs
        return sum(getattr(costs, name) * count
                   for name, count in operations(core, event, commands, decisions).items())

    def overhead(self, core: object, message: bool) -> float:
        """What one event costs `core`'s service outside the core: its own part, and its
        message's if it came in one of its own (`message`)."""
        costs = self.costs
        if isinstance(core, GlobalMaster):
            return costs.gm_event_overhead + (costs.gm_overhead if message else 0.0)
        if isinstance(core, LocalMaster):
            return costs.lm_event_overhead + (costs.lm_overhead if message else 0.0)
        return costs.worker_event_overhead + (costs.worker_overhead if message else 0.0)

    def own_work(self, line: str, event: object) -> float | None:
        """The part of a step's cost that is one task's own work, for its log line `line`
        (one of TIMED_EVENTS), the rest being work for other tasks or events; None: the
        step's cost is shared evenly by its lines of that kind (a worker's step starts one
        task)."""
        costs = self.costs
        if line == "task_placed":
            admitted = costs.gm_task_admitted if type(event) is JobSubmitted else 0.0
            return costs.gm_decision + admitted
        if line == "task_launched":
            return costs.lm_item
        return None


def operations(core: object, event: object, commands: Sequence[object],
               decisions: int) -> dict[str, int]:
    """How many of each operation (a ProcessingCosts field) one step did: what the constants
    multiply, and what the calibration fits them to."""
    if isinstance(core, GlobalMaster):
        return _gm_operations(event, decisions)
    if isinstance(core, LocalMaster):
        return _lm_operations(core, event, commands)
    return {"worker_event": 1}


def _gm_operations(event: object, decisions: int) -> dict[str, int]:
    out = {"gm_event": 1, "gm_decision": decisions}
    kind = type(event)
    if kind is JobSubmitted:
        out["gm_job"] = 1
        out["gm_task_admitted"] = len(event.job.tasks)
    elif kind is TaskEventsReceived:
        out["gm_task_event"] = len(event.events)
    elif kind is LMReplied or kind is HeartbeatReceived:
        snapshot = event.snapshot
        out["gm_snapshot"] = 1
        out["gm_node_viewed"] = len(snapshot.topology)
        if kind is LMReplied:
            out["gm_reply_result"] = len(event.results)
        elif snapshot.running is not None:
            out["gm_running_listed"] = len(snapshot.running)
    elif hasattr(event, "event"):  # TaskEventReceived: one task event
        out["gm_task_event"] = 1
    return out


def _lm_operations(core: LocalMaster, event: object,
                   commands: Sequence[object]) -> dict[str, int]:
    out = {"lm_event": 1}
    if type(event) in _WORKER_REPORTS:
        out["lm_report"] = 1
    elif type(event) is LaunchRequested:
        out["lm_item"] = len(event.placements)
    elif hasattr(event, "victims"):  # PreemptRequested: one item
        out["lm_item"] = 1
    nodes = len(core.topology)
    shown = listed = 0
    for command in commands:
        kind = type(command)
        if kind is ReplyToGM:
            shown += nodes
        elif kind is PublishHeartbeat:
            shown += nodes
            listed += len(command.snapshot.running or ())
    if shown:
        out["lm_node_shown"] = shown
    if listed:
        out["lm_running_listed"] = listed
    return out
