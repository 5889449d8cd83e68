"""The simulator's model of time, as a file: how long each kind of message takes to go from
one service to the next (per hop), and what each role's core costs per operation.

`megha twin calibrate` fits one from the services' own event logs (twin/fit.py), and
`megha simulate --calibration FILE` (and every experiment) runs with it instead of the
default, a constant one-way delay for every message and no processing time.

A hop's delay is measured in the services from the end of the step that sent a message to the
start of the step that received it (`ts - handle_s`): serialization, HTTP or RabbitMQ, the
receiving process's parsing and its event loop's queue are all in it. It is kept as an
empirical distribution (its quantiles, drawn from by inverse transform) of the delay less a
per-item slope, where the message carries a batch (a launch request's placements, a reply's
verdicts): `delay = draw + per_item * items`.

The hops, and the messages of the simulator that take each (`HOP_OF`):

| hop | from, to | messages |
|---|---|---|
| `submit` | a job's POST at the GM to its step there (RabbitMQ, the GM's store) | a job's arrival |
| `gm_to_lm` | GM to LM, HTTP | launch, preemption, cancel, reprioritize requests |
| `lm_reply` | LM to GM, the answer to a request | verdicts with a snapshot |
| `lm_to_worker` | LM to worker agent, HTTP | starts, stops, checkpoints, restores |
| `worker_to_lm` | worker agent to LM, HTTP | reports (started, finished, ...) |
| `task_event` | LM to GM through RabbitMQ | task events |
| `heartbeat` | LM to every GM through RabbitMQ | snapshots |

Three hops leave through an outbox (`OUTBOXES`): the next batch no sooner than the [timing]
pace after the last one, and for the HTTP ones not before the batch in flight is answered
(services/batching.py; the LM's task event drain waits for RabbitMQ's confirms, not for the
GMs), whatever was offered meanwhile joining it. Their delay under load is
mostly that wait, which depends on the load; so for them the model keeps only the *transit*,
fitted on the messages that found their channel idle, and `CalibratedNetwork` plays the
outbox: a message sent while a batch waits to leave joins it; otherwise it leaves when the
pace and the batch in flight allow (a batch is in flight until it arrives). The other hops
draw each message's whole delay.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from common.commands import (
    CheckpointOnWorker,
    PublishHeartbeat,
    PublishTaskEvent,
    ReplyToGM,
    ReportToLM,
    ReprioritizeOnWorker,
    RestoreOnWorker,
    SendCancel,
    SendLaunch,
    SendPreempt,
    SendReprioritize,
    StartOnWorker,
    StopOnWorker,
)
from common.errors import InvalidInput
from simulator.processing import ProcessingCosts

VERSION = 1
FORMAT = "megha-time-model"
HOPS = ("submit", "gm_to_lm", "lm_reply", "lm_to_worker", "worker_to_lm", "task_event",
        "heartbeat")
# the simulator's messages, by the hop they take; a message type routed between cores that is
# missing here is an error at start-up (tests/unit/test_timemodel.py keeps this complete)
HOP_OF: dict[type, str] = {
    SendLaunch: "gm_to_lm", SendPreempt: "gm_to_lm", SendCancel: "gm_to_lm",
    SendReprioritize: "gm_to_lm", ReplyToGM: "lm_reply",
    StartOnWorker: "lm_to_worker", StopOnWorker: "lm_to_worker",
    CheckpointOnWorker: "lm_to_worker", RestoreOnWorker: "lm_to_worker",
    ReprioritizeOnWorker: "lm_to_worker", ReportToLM: "worker_to_lm",
    PublishTaskEvent: "task_event", PublishHeartbeat: "heartbeat",
}
QUANTILES = 101  # stored points of each hop's distribution: every percentile
# hop -> (who shares one outbox: "pair" of sender and receiver, or the "sender" alone; the
# [timing] setting that paces it; whether a batch waits for the one in flight to arrive)
OUTBOXES = {"lm_to_worker": ("pair", "worker_launch_pace", True),
            "worker_to_lm": ("sender", "report_pace", True),
            "task_event": ("sender", "task_event_pace", False)}


def channel_of(hop: str, sender: str, receiver: str) -> str:
    """The outbox a message of `hop` leaves through."""
    return f"{sender}>{receiver}" if OUTBOXES[hop][0] == "pair" else sender


def items_of(command: object) -> int:
    """How many items a message carries, for a hop whose delay grows with its batch."""
    kind = type(command)
    if kind is SendLaunch:
        return len(command.placements)
    if kind is ReplyToGM:
        return len(command.results)
    return 1


@dataclass(frozen=True, slots=True)
class HopDelay:
    """One hop's delay: `quantiles` of (delay - per_item * items) at evenly spaced
    probabilities from 0 to 1, seconds."""

    quantiles: tuple[float, ...]
    per_item: float = 0.0
    samples: int = 0  # how many messages it was fitted on (0: set by hand)
    # the largest batch it was fitted on: a larger one is charged as that (0: no bound); the
    # slope is not extrapolated beyond what was measured
    max_items: int = 0

    def __post_init__(self) -> None:
        q = self.quantiles
        if len(q) < 2 or any(not math.isfinite(v) for v in q) or any(
                b < a for a, b in zip(q, q[1:], strict=False)):
            raise InvalidInput("quantiles", "need at least two finite, non-decreasing values")
        if not (math.isfinite(self.per_item) and self.per_item >= 0):
            raise InvalidInput("per_item", f"must be a finite number >= 0, got {self.per_item}")

    @classmethod
    def constant(cls, seconds: float) -> HopDelay:
        return cls((seconds, seconds))

    def at(self, probability: float, items: int = 1) -> float:
        """The delay at `probability` (0 to 1) for a message of `items` items."""
        q = self.quantiles
        x = min(max(probability, 0.0), 1.0) * (len(q) - 1)
        i = min(int(x), len(q) - 2)
        return max(0.0, q[i] + (q[i + 1] - q[i]) * (x - i) + self.per_item * self._bounded(items))

    def _bounded(self, items: int) -> int:
        return min(items, self.max_items) if self.max_items else items

    def sampler(self, rng: random.Random) -> Callable[[int], float]:
        """Draws of the delay for a message of so many items."""
        q, last, per_item = self.quantiles, len(self.quantiles) - 1, self.per_item
        if q[0] == q[-1] and per_item == 0.0:
            value = max(0.0, q[0])
            return lambda items=1: value
        bounded = self._bounded

        def draw(items: int = 1) -> float:
            x = rng.random() * last
            i = int(x)
            return max(0.0, q[i] + (q[i + 1] - q[i]) * (x - i) + per_item * bounded(items))

        return draw

    def to_json(self) -> dict:
        return {"quantiles": list(self.quantiles), "per_item": self.per_item,
                "samples": self.samples, "max_items": self.max_items}


@dataclass(frozen=True, slots=True)
class TimeModel:
    """Per hop a delay, per operation a processing cost, and where they were measured."""

    hops: Mapping[str, HopDelay]
    costs: ProcessingCosts
    source: dict = field(default_factory=dict)  # what it was fitted on: workload, shape, ...

    def __post_init__(self) -> None:
        missing = [hop for hop in HOPS if hop not in self.hops]
        if missing:
            raise InvalidInput("hops", f"the model lacks hop(s) {', '.join(missing)}")

    def describe(self) -> str:
        """One line: each hop's median and the costs that matter most."""
        hops = ", ".join(f"{hop} {self.hops[hop].at(0.5) * 1e3:.2f}" for hop in HOPS)
        c = self.costs
        return (f"hop medians ms: {hops}; GM decision {c.gm_decision * 1e6:.1f} us, LM item "
                f"{c.lm_item * 1e6:.1f} us, worker event {c.worker_event * 1e6:.1f} us")

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "source": self.source,
                "hops": {hop: self.hops[hop].to_json() for hop in HOPS},
                "costs": asdict(self.costs)}

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def from_json(cls, data: object, where: str = "calibration") -> TimeModel:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InvalidInput(where, f"is not a time model (no \"format\": \"{FORMAT}\")")
        version = data.get("version")
        if version != VERSION:
            raise InvalidInput(where, f"is a time model of version {version!r}; this "
                                      f"megha reads version {VERSION}: fit it again with "
                                      f"`megha twin calibrate`")
        hops_data, costs_data = data.get("hops"), data.get("costs")
        if not isinstance(hops_data, dict) or not isinstance(costs_data, dict):
            raise InvalidInput(where, "needs \"hops\" and \"costs\" objects")
        missing = [hop for hop in HOPS if hop not in hops_data]
        if missing:
            raise InvalidInput(where, f"lacks hop(s) {', '.join(missing)}")
        hops = {}
        for hop in HOPS:
            entry = hops_data[hop]
            try:
                hops[hop] = HopDelay(tuple(float(v) for v in entry["quantiles"]),
                                     float(entry.get("per_item", 0.0)),
                                     int(entry.get("samples", 0)),
                                     int(entry.get("max_items", 0)))
            except (KeyError, TypeError, ValueError) as error:
                raise InvalidInput(f"{where}: hops.{hop}", str(error)) from None
        known = {f.name for f in fields(ProcessingCosts)}
        unknown = sorted(set(costs_data) - known)
        if unknown:
            raise InvalidInput(f"{where}: costs", f"unknown operation(s) {', '.join(unknown)}")
        costs = {}
        for name, value in costs_data.items():
            if not isinstance(value, int | float) or not (math.isfinite(value) and value >= 0):
                raise InvalidInput(f"{where}: costs.{name}",
                                   f"must be a number >= 0, got {value!r}")
            costs[name] = float(value)
        return cls(hops, ProcessingCosts(**costs), dict(data.get("source") or {}))

    @classmethod
    def load(cls, path: Path) -> TimeModel:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidInput("--calibration", f"cannot read {path}: {error.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidInput("--calibration", f"{path} is not JSON: {error}") from None
        return cls.from_json(data, f"--calibration {path}")


class _Outbox:
    """One channel's outbox: the last batch's departure and arrival, and when the next may
    leave."""

    __slots__ = ("depart", "arrive", "next_at")

    def __init__(self) -> None:
        self.depart = -math.inf
        self.arrive = 0.0
        self.next_at = 0.0


class CalibratedNetwork:
    """When a message sent at `at` arrives: its hop's drawn delay, or, through an outbox, its
    batch's departure and drawn transit. `paces`: the [timing] settings of OUTBOXES."""

    def __init__(self, model: TimeModel, rng: random.Random,
                 paces: Mapping[str, float]) -> None:
        self.draw = {hop: model.hops[hop].sampler(rng) for hop in HOPS}
        self.paces = paces
        self._outboxes: dict[str, _Outbox] = {}
        # whether the last message given an arrival joined a batch on its way (it then shares
        # that batch's message: one request, one price at the receiver)
        self.joined = False

    def for_kind(self, kind: type) -> Callable[[str, str, float, object], float]:
        """The arrival time of one message type: (sender, receiver, sent at, command)."""
        hop = HOP_OF.get(kind)
        if hop is None:
            raise InvalidInput("time model", f"no hop for message {kind.__name__}")
        draw = self.draw[hop]
        if hop not in OUTBOXES:
            if kind is SendLaunch or kind is ReplyToGM:
                return lambda sender, receiver, at, command: at + draw(items_of(command))
            return lambda sender, receiver, at, command: at + draw()
        _, setting, one_in_flight = OUTBOXES[hop]
        pace, boxes = self.paces[setting], self._outboxes

        def arrival(sender: str, receiver: str, at: float, command: object) -> float:
            key = channel_of(hop, sender, receiver)
            box = boxes.get(key)
            if box is None:
                box = boxes[key] = _Outbox()
            if box.depart >= at:  # a batch still waits to leave: this joins it
                self.joined = True
                return box.arrive
            self.joined = False
            depart = max(at, box.next_at, box.arrive if one_in_flight else at)
            box.depart, box.next_at = depart, depart + pace
            box.arrive = depart + draw()
            return box.arrive

        return arrival

    def submit_delay(self) -> float:
        return self.draw["submit"]()
