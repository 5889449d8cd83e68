"""A model of time fitted from the services' own event logs (simulator/timemodel.py).

Every line of one step of a service has the same `ts` (the moment its core returned), and the
lines in `HANDLED_EVENTS` (common/startlog.py) carry `handle_s`, the core's time on that step,
so a step that wrote one of them started at `ts - handle_s`. A hop's delay is the time from
the end of the step that sent a message to the start of the step that took it in:

| hop | sent (end of the step that wrote) | taken in (start of the step that wrote) |
|---|---|---|
| submit | the job's `arrival` (its POST at the GM) | `job_arrived` (GM) |
| gm_to_lm | `request_sent` (GM) | `task_launched` / `launch_refused` of its attempts (LM) |
| lm_reply | that LM step | `request_answered` (GM) |
| lm_to_worker | `task_launched` (LM) | its first `task_queued` / `task_started` (worker) |
| worker_to_lm | `task_finished` (worker) | `task_finished` (LM) |
| task_event | `task_finished` (LM) | `task_done` (GM) |

For the hops that leave through a paced outbox (`OUTBOXES`), the delay under load is mostly
the wait for the outbox, which the simulator plays itself; the model keeps their *transit*: the
delays of the messages that found their channel idle, or of all, if fewer than MIN_SAMPLES did
(`source.transit_from` says which). Idle: nothing was sent on the channel in the two paces
before (a worker's start reports count, they share its outbox, and so do its LM's start
events, taken at the worker's start), and the message before had arrived a pace before.

Heartbeats leave no line at either end (one per LM, GM and interval would flood the log);
their hop takes the task events' distribution, the same path through RabbitMQ, and the model's
`source` says so.

Processing costs are fitted per role by non-negative least squares of each step's `handle_s`
on what the step's lines show it did (a GM: tasks placed, jobs admitted, task events applied,
answers and their verdicts; an LM: items judged, reports taken; a worker: tasks started), with
the slowest 0.5% of steps left out (host hiccups). The costs no line shows (a heartbeat's
nodes and running list) are the default model's, scaled as the role's fitted decision cost
is to the default's. The CPU each role spends outside its core, per message and per event, is
measured on the processes, not in the logs (twin/services.py), and passed in.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from common.errors import InvalidInput
from common.federation import Timing
from simulator.processing import CALIBRATED, ProcessingCosts
from simulator.timemodel import HOPS, OUTBOXES, QUANTILES, HopDelay, TimeModel, channel_of

MIN_SAMPLES = 5  # messages a hop needs before its distribution means anything
TRIM = 0.995  # steps above this quantile of handle_s are left out of the cost fits
BATCHED = ("gm_to_lm", "lm_reply")  # hops whose messages carry a batch of items
SLOPE_QUANTILE = 0.1  # of each batch size's delays, for the per-item slope (see fit_hop)


@dataclass(slots=True)
class _Step:
    """One step of one service, from its lines: when it started and ended, and counts."""

    end: float
    handle: float | None = None
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def start(self) -> float | None:
        return None if self.handle is None else self.end - self.handle


@dataclass
class Observations:
    """What a log shows: per hop, (delay, items) pairs; per role, steps with their counts."""

    # per hop, (delay, items, channel, sent): the channel and the time sent for OUTBOXES' hops
    hops: dict[str, list[tuple]] = field(default_factory=lambda: defaultdict(list))
    steps: dict[str, list[_Step]] = field(default_factory=lambda: defaultdict(list))
    lines: int = 0
    other_sends: dict[str, list[float]] = field(default_factory=dict)  # see _Reader


class _Reader:
    """Lines in, in any order; `observations()` joins them by id at the end."""

    def __init__(self) -> None:
        self.steps: dict[tuple[str, float], _Step] = {}
        self.role: dict[str, str] = {}  # svc -> gm, lm, worker
        self.sent: dict[str, tuple[float, int]] = {}  # request -> (sent, items)
        self.answered: dict[str, tuple[_Step, int]] = {}  # request -> (GM step, items)
        self.request_of: dict[str, str] = {}  # attempt -> request
        self.lm_step: dict[str, _Step] = {}  # attempt -> the LM step that judged it
        self.launched: dict[str, tuple[float, str]] = {}  # attempt -> (task_launched ts, LM)
        self.received: dict[str, tuple[_Step, str]] = {}  # attempt -> first worker step, worker
        self.worker_done: dict[str, tuple[float, str]] = {}  # attempt -> (worker's ts, worker)
        self.lm_done: dict[str, tuple[_Step, str]] = {}  # attempt -> LM's task_finished step
        self.gm_done: dict[str, _Step] = {}  # attempt -> GM's task_done step
        # channel -> when other messages left through it (a worker's start reports)
        self.other_sends: dict[str, list[float]] = defaultdict(list)
        self.arrivals: list[tuple[float, _Step]] = []  # (arrival, job_arrived step)
        self.lines = 0

    def step(self, e: dict) -> _Step:
        key = (e["svc"], float(e["ts"]))
        step = self.steps.get(key)
        if step is None:
            step = self.steps[key] = _Step(float(e["ts"]))
        handle = e.get("handle_s")
        if handle is not None:
            step.handle = float(handle)
        return step

    def feed(self, e: dict) -> None:
        kind = e.get("event")
        if kind not in _ROLE_OF:
            return
        self.lines += 1
        svc = e["svc"]
        role = _ROLE_OF[kind]
        if kind == "task_finished":
            role = "worker" if "worker" in e else "lm"
        elif kind == "task_started" or kind == "task_queued":
            role = "worker"
        self.role.setdefault(svc, role)
        step = self.step(e)
        step.counts[kind] += 1
        attempt = e.get("attempt")
        if kind == "request_sent":
            self.sent[e["request"]] = (step.end, int(e.get("items", 1)))
        elif kind == "request_answered":
            items = int(e.get("items", 1))
            step.counts["answer_items"] += items
            self.answered[e["request"]] = (step, items)
        elif kind in ("task_placed", "preemption_requested"):
            self.request_of[attempt] = e["request"]
        elif kind in ("task_launched", "launch_refused", "preemption_refused"):
            self.lm_step.setdefault(attempt, step)
            if kind == "task_launched":
                self.launched[attempt] = (step.end, svc)
        elif kind in ("task_queued", "task_started"):
            if kind == "task_started":  # its start report leaves through the outbox, and
                # its LM's task event a report's way later (there is no line for that)
                self.other_sends[channel_of("worker_to_lm", svc, "")].append(step.end)
                if e.get("lm"):
                    self.other_sends[channel_of("task_event", e["lm"], "")].append(step.end)
            if not e.get("resumed") and not e.get("copy_of"):
                known = self.received.get(attempt)
                if known is None or step.end < known[0].end:
                    self.received[attempt] = (step, svc)
        elif kind == "task_finished":
            if role == "worker":
                self.worker_done[attempt] = (step.end, svc)
            else:
                self.lm_done[attempt] = (step, svc)
        elif kind == "task_done":
            self.gm_done[attempt] = step
        elif kind == "job_arrived":
            self.arrivals.append((float(e.get("arrival", e["ts"])), step))

    def observations(self) -> Observations:
        out = Observations(lines=self.lines)
        hops = out.hops
        for arrival, step in self.arrivals:
            _add(hops["submit"], arrival, step.start)
        judged: dict[str, _Step] = {}  # request -> the LM step that judged it (earliest)
        for attempt, request in self.request_of.items():
            step = self.lm_step.get(attempt)
            if step is not None and step.start is not None:
                known = judged.get(request)
                if known is None or step.start < known.start:
                    judged[request] = step
        for request, step in judged.items():
            sent = self.sent.get(request)
            if sent is not None:
                _add(hops["gm_to_lm"], sent[0], step.start, sent[1])
            answered = self.answered.get(request)
            if answered is not None:
                _add(hops["lm_reply"], step.end, answered[0].start, answered[1])
        for attempt, (launched, lm) in self.launched.items():
            received = self.received.get(attempt)
            if received is not None:
                _add(hops["lm_to_worker"], launched, received[0].start, 1,
                     channel_of("lm_to_worker", lm, received[1]))
        for attempt, (finished, worker) in self.worker_done.items():
            taken = self.lm_done.get(attempt)
            if taken is not None:
                _add(hops["worker_to_lm"], finished, taken[0].start, 1,
                     channel_of("worker_to_lm", worker, taken[1]))
        for attempt, (step, lm) in self.lm_done.items():
            done = self.gm_done.get(attempt)
            if done is not None:
                _add(hops["task_event"], step.end, done.start, 1,
                     channel_of("task_event", lm, ""))
        for (svc, _), step in self.steps.items():
            if step.handle is not None:
                out.steps[self.role[svc]].append(step)
        out.other_sends = self.other_sends
        return out


_ROLE_OF = {"job_arrived": "gm", "task_placed": "gm", "preemption_requested": "gm",
            "request_sent": "gm", "request_answered": "gm", "task_done": "gm",
            "task_launched": "lm", "launch_refused": "lm", "preemption_refused": "lm",
            "task_queued": "worker", "task_started": "worker", "task_finished": "lm"}


def _add(samples: list, sent: float | None, taken: float | None, items: int = 1,
         channel: str = "") -> None:
    if sent is None or taken is None:
        return
    # one clock on one machine, stamps rounded to the microsecond: a hair below zero is zero
    samples.append((max(0.0, taken - sent), items, channel, sent))


def idle(samples: list[tuple], pace: float,
         other_sends: Mapping[str, list[float]] | None = None) -> list[tuple]:
    """The messages that found their outbox idle: nothing was sent on their channel in the
    two paces before (the samples' own and `other_sends`), and the sample before had arrived
    a pace before."""
    by_channel: dict[str, list[tuple]] = defaultdict(list)
    for sample in samples:
        by_channel[sample[2]].append(sample)
    out = []
    for channel, messages in by_channel.items():
        messages.sort(key=lambda m: m[3])
        sends = np.sort(np.array([m[3] for m in messages] +
                                 list((other_sends or {}).get(channel, ()))))
        for before, message in zip(messages, messages[1:], strict=False):
            sent = message[3]
            earlier = np.searchsorted(sends, sent - 2 * pace, side="left")
            last = np.searchsorted(sends, sent, side="left")  # sends strictly before it
            if last == earlier and before[3] + before[0] <= sent - pace:
                out.append(message)
    return out


def observe(events: Iterable[dict]) -> Observations:
    reader = _Reader()
    for event in events:
        reader.feed(event)
    return reader.observations()


# -- the fits ----------------------------------------------------------------------------------


def fit_hop(samples: list[tuple], batched: bool = False) -> HopDelay:
    """A hop's distribution; where messages carry batches, less a per-item slope: the
    non-negative least-squares line through the `SLOPE_QUANTILE` of each batch size's
    delays, weighted by how many messages had it, up to the largest batch seen.

    A low quantile, not the median: under load a GM sends fuller batches (its request window
    holds them back), so the median grows with the batch for the congestion's sake, not the
    items'; a quiet message's delay is what an item adds to the transfer (measured: a median
    slope of 0.65 ms an item at 5,000 nodes, which made a 600-item batch of a centralized
    GM 0.4 s late where the services took 2.5 ms)."""
    delays = np.array([sample[0] for sample in samples], dtype=float)
    items = np.array([sample[1] for sample in samples], dtype=float)
    per_item, max_items = 0.0, 0
    if batched and len(set(items.tolist())) > 1:
        sizes = np.unique(items)
        lows = np.array([np.quantile(delays[items == n], SLOPE_QUANTILE) for n in sizes])
        weights = np.sqrt([np.count_nonzero(items == n) for n in sizes])
        design = np.column_stack([np.ones_like(sizes), sizes]) * weights[:, None]
        (_, per_item), _ = nnls(design, lows * weights)
        per_item, max_items = float(per_item), int(sizes.max())
    base = delays - per_item * items
    quantiles = np.quantile(base, np.linspace(0.0, 1.0, QUANTILES))
    return HopDelay(tuple(float(q) for q in np.maximum.accumulate(quantiles)), per_item,
                    len(samples), max_items)


def _nnls(steps: list[_Step], columns: list[tuple[str, ...]]) -> np.ndarray:
    """Per column (a sum of line counts; () is the constant), the cost that best explains
    the steps' handle_s, non-negative, the slowest TRIM of steps left out.

    Where every step is of a kind with a column of its own (a GM whose timed steps all
    admitted a job, applied task events or took an answer), the constant cannot be told from
    those columns: it is then left at 0 and each kind's column carries its step's fixed cost,
    which gives every kind of step the same total."""
    handles = np.array([step.handle for step in steps])
    keep = handles <= np.quantile(handles, TRIM) if len(handles) > 20 else np.ones(
        len(handles), bool)
    design = np.array([[1.0 if not column else float(sum(step.counts.get(k, 0) for k in column))
                        for column in columns] for step in steps])[keep]
    if np.linalg.matrix_rank(design) < design.shape[1]:
        design[:, 0] = 0.0
    solution, _ = nnls(design, handles[keep])
    return solution


GM_COLUMNS = {"gm_event": (), "gm_decision": ("task_placed", "preemption_requested"),
              "gm_job": ("job_arrived",), "gm_task_event": ("task_done",),
              "gm_snapshot": ("request_answered",), "gm_reply_result": ("answer_items",)}
LM_COLUMNS = {"lm_event": (), "lm_item": ("task_launched", "launch_refused",
                                          "preemption_refused"),
              "lm_report": ("task_finished",)}
WORKER_COLUMNS = {"worker_event": (), "worker_start": ("task_started", "task_queued")}


def fit_costs(steps: dict[str, list[_Step]]) -> ProcessingCosts:
    """Per role, the costs its steps' handle_s show; the rest scaled from the default."""
    fitted: dict[str, float] = {}
    for role, columns in (("gm", GM_COLUMNS), ("lm", LM_COLUMNS), ("worker", WORKER_COLUMNS)):
        role_steps = steps.get(role, [])
        if len(role_steps) < MIN_SAMPLES:
            raise InvalidInput("log", f"has {len(role_steps)} timed step(s) of a {role}, "
                                      f"needs {MIN_SAMPLES}: is it a services' log of a run "
                                      f"that placed tasks?")
        solution = _nnls(role_steps, list(columns.values()))
        fitted.update(zip(columns, (float(x) for x in solution), strict=True))
    # a worker's event in the simulator starts one task: its constant and one start
    fitted["worker_event"] += fitted.pop("worker_start")
    gm_ratio = fitted["gm_decision"] / CALIBRATED.gm_decision if fitted["gm_decision"] else 1.0
    lm_ratio = fitted["lm_item"] / CALIBRATED.lm_item if fitted["lm_item"] else 1.0
    unseen = {"gm_task_admitted": gm_ratio, "gm_node_viewed": gm_ratio,
              "gm_running_listed": gm_ratio, "lm_node_shown": lm_ratio,
              "lm_running_listed": lm_ratio}
    for name, ratio in unseen.items():
        fitted[name] = getattr(CALIBRATED, name) * ratio
    return dataclasses.replace(CALIBRATED, **fitted)


def fit(events: Iterable[dict], source: dict | None = None,
        paces: Mapping[str, float] | None = None,
        overheads: Mapping[str, tuple[float, float]] | None = None) -> TimeModel:
    """The model of time a services' log shows, its outboxes paced by `paces` ([timing]'s
    settings; default: the federation file's defaults); `overheads`: per role, the CPU
    outside the core per message and per core event, measured on the processes
    (twin/services.py; none: 0). Refuses a log that lacks a hop or steps."""
    paces = paces or Timing().model_dump()
    seen = observe(events)
    if not seen.lines:
        raise InvalidInput("log", "has no scheduling events (task_placed, task_launched, ...)")
    measured = [hop for hop in HOPS if hop != "heartbeat"]
    short = [f"{hop} ({len(seen.hops.get(hop, []))})" for hop in measured
             if len(seen.hops.get(hop, [])) < MIN_SAMPLES]
    if short:
        raise InvalidInput("log", f"too few messages to fit hop(s) {', '.join(short)}: each "
                                  f"needs {MIN_SAMPLES}; a log of this version's services, "
                                  f"with handle_s on {', '.join(_anchors(short))}, of a run "
                                  f"that finished tasks")
    hops, transit_from = {}, {}
    for hop in measured:
        samples = seen.hops[hop]
        if hop in OUTBOXES:
            quiet = idle(samples, paces[OUTBOXES[hop][1]], seen.other_sends)
            transit_from[hop] = (f"{len(quiet)} messages that found the outbox idle"
                                 if len(quiet) >= MIN_SAMPLES else
                                 f"all {len(samples)} messages (only {len(quiet)} found the "
                                 f"outbox idle)")
            samples = quiet if len(quiet) >= MIN_SAMPLES else samples
        hops[hop] = fit_hop(samples, hop in BATCHED)
    hops["heartbeat"] = fit_hop(seen.hops["task_event"])  # whole delays: heartbeats are not
    # batched in an outbox
    costs = fit_costs(seen.steps)
    for role, (per_message, per_event) in (overheads or {}).items():
        costs = dataclasses.replace(costs, **{f"{role}_overhead": per_message,
                                              f"{role}_event_overhead": per_event})
    provenance = {"lines": seen.lines,
                  "samples": {hop: len(seen.hops[hop]) for hop in measured},
                  "steps": {role: len(steps) for role, steps in seen.steps.items()},
                  "transit_from": transit_from,
                  "paces": {OUTBOXES[hop][1]: paces[OUTBOXES[hop][1]] for hop in OUTBOXES},
                  "heartbeat": "the task events' delays through RabbitMQ (not measured)"}
    return TimeModel(hops, costs, provenance | (source or {}))


def _anchors(short: list[str]) -> list[str]:
    names = {"submit": "job_arrived", "gm_to_lm": "request_sent and task_launched",
             "lm_reply": "request_answered", "lm_to_worker": "task_launched and task_started",
             "worker_to_lm": "task_finished", "task_event": "task_finished and task_done"}
    return [names[item.split(" ")[0]] for item in short]
