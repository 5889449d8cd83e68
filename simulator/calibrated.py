"""The simulator's deliveries under a calibrated model of time (simulator/timemodel.py): each
message arrives when its hop's network says (a drawn delay, or its outbox's batch), and the
task events of one outbox batch for one GM arrive together, as one broker message does in the
services. `FederatedSimulation` wires these in for every routed command when it has a time
model; without one its own constant-delay deliveries serve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from common.commands import PublishTaskEvent
from common.events import TaskEventsReceived
from common.routing import GM, LM, WORKER, Receiver, Route

if TYPE_CHECKING:  # the simulation imports this module
    from simulator.federated import FederatedSimulation

Delivery = Callable[[object, object, str, float, float], None]


def calibrated_delivery(sim: FederatedSimulation, kind: type, route: Route) -> Delivery:
    """The delivery of one command type: to its receivers, when the network says."""
    arrival = sim.network.for_kind(kind)
    if kind is PublishTaskEvent:
        return _task_event_batches(sim, route, arrival)
    make, tag, caused, timed = route.event, route.tag, sim.ids.caused, sim.timed
    at_fifo, last, network = sim.engine.at_fifo, sim.last_heartbeat, sim.network
    if route.to is Receiver.EVERY:
        def receivers(source, command):
            return sim.gms.values()
    elif route.to is Receiver.WORKERS_LM:
        def receivers(source, command):
            return (sim.lms[sim.worker_lm[source.svc]],)
    else:
        actors = {GM: sim.gms, LM: sim.lms, WORKER: sim.workers}[route.role]

        def receivers(source, command):
            return (actors[route.name_of(command)],)

    def deliver(source, command, cause: str, at: float, took: float) -> None:
        if route.to is Receiver.EVERY:  # an unchanged heartbeat changes nothing
            if last.get(source.svc) is command.snapshot:
                return
            last[source.svc] = command.snapshot
        event = make(source.svc, command, caused(tag, cause))
        for receiver in receivers(source, command):
            network.joined = False
            when = arrival(source.svc, receiver.svc, at, command)
            # an event that joined a batch on its way came in that batch's message
            at_fifo(when, receiver.receive, (event, at, not network.joined) if timed else event)

    return deliver


def _task_event_batches(sim: FederatedSimulation, route: Route, arrival: Callable) -> Delivery:
    """Task events through the LM's outbox, as the services carry them: the events of one
    batch for one GM arrive as one message, one `TaskEventsReceived` (one step of the GM,
    one scheduling pass)."""
    caused, timed, gms, engine = sim.ids.caused, sim.timed, sim.gms, sim.engine
    batches: dict[tuple[str, str, float], tuple[list, float, str]] = {}

    def arrive(key: tuple[str, str, float]) -> None:
        events, sent, cause = batches.pop(key)
        event = TaskEventsReceived(caused(route.tag, cause), tuple(events))
        receiver = gms[key[1]]
        receiver.receive((event, sent, True) if timed else event)  # one message

    def deliver(source, command: PublishTaskEvent, cause: str, at: float, took: float) -> None:
        key = (source.svc, command.gm, arrival(source.svc, command.gm, at, command))
        batch = batches.get(key)
        if batch is not None:  # it joined a batch on its way: one message
            batch[0].append(command.event)
            return
        batches[key] = ([command.event], at, cause)
        engine.at(key[2], arrive, key)

    return deliver
