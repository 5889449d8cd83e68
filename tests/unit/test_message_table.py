"""common/message_table.py: the five declarations of every message between roles agree.

For each command that `ROUTES` sends to another role, the table has a row, and:

- the row's receiver and event are those of `ROUTES`;
- a sample command, encoded, sent as JSON and decoded, is the very event `ROUTES` delivers in
  memory (the services and the simulator see the same thing);
- the service that serves the row's routes has them, and the route documents the row's wire
  model in its request body; a row published on RabbitMQ names an exchange the broker has;
- no service takes a POST that no row (nor the short list of requests that are no core's
  command) accounts for.

The services' apps are built as their `main()` builds them, without starting them: no
RabbitMQ, no sockets.
"""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest
from bitarray import frozenbitarray
from fastapi.routing import APIRoute
from role_apps import role_apps

from common.cluster import ClusterTopology, LMSnapshot, RunningInfo
from common.commands import (
    CheckpointOnWorker,
    Command,
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
from common.message_table import BY_COMMAND, MESSAGES, Message
from common.messages import LaunchResult, Placement, RequestKind, TaskEvent
from common.models import NodeSpec, TaskSpec
from common.reasons import Reason
from common.resources import Resources
from common.routing import GM, LM, ROUTES, WORKER, Receiver
from common.wire import TopologyCache, snapshot_to_wire
from services.auth import AuthConfig
from services.broker import HEARTBEAT_EXCHANGE, TASK_EVENTS_EXCHANGE

SENDER_ID = {GM: "gm-1", LM: "lm-1", WORKER: "lm-1/w0"}
WORKER_LM = {"lm-1/w0": "lm-1"}

# POST routes that carry no core's command: a client's job, and the worker service's
# heartbeat, which it makes from its core's state (`WorkerHeartbeat` at the LM)
NOT_COMMANDS = {(GM, "POST /v1/jobs"), (LM, "POST /v1/worker/heartbeat")}

TASK = TaskSpec("j/0", "j", Resources(500, 512), frozenset({1, 4}), 2.0,
                frozenset({"lm-1/n0", "lm-1/n1"}))
PLACEMENT = Placement("j/0#0.1", TASK, "lm-1/n0", "gm-1", "u1", priority=math.inf, pilot=True)
TOPOLOGY = ClusterTopology("lm-1", [
    NodeSpec(f"lm-1/n{i}", "lm-1", "lm-1/w0", Resources(2000, 4096),
             frozenset({i, 20}) if i % 2 else frozenset())
    for i in range(5)], ["gm-1", "gm-2"])


def snapshot(running: tuple[RunningInfo, ...] | None) -> LMSnapshot:
    return LMSnapshot("lm-1", 3, 9, TOPOLOGY, (2000, 1500, 0, 2000, 100),
                      (4096, 3584, 0, 4096, 64), frozenbitarray("11011"), running,
                      queue_room=frozenbitarray("10001"))


SAMPLES: dict[type, tuple[Command, ...]] = {  # one or more of each command in the table
    SendLaunch: (SendLaunch("lm-1", "gm-1.0.1", RequestKind.LAUNCH, (PLACEMENT,), 3),
                 SendLaunch("lm-1", "gm-1.0.2", RequestKind.REPARTITION, (PLACEMENT,))),
    SendPreempt: (SendPreempt("lm-1", "gm-1.0.3", PLACEMENT, ("k/0#0.1", "k/1#0.1"), 3),),
    SendCancel: (SendCancel("lm-1", "j/0#0.1"),),
    SendReprioritize: (SendReprioritize("lm-1", "j", 12.5),
                       SendReprioritize("lm-1", "j", math.inf)),
    ReplyToGM: (ReplyToGM("gm-1", "gm-1.0.1", (
        LaunchResult("j/0#0.1", "j/0", "lm-1/n0", Reason.LAUNCHED),
        LaunchResult("j/1#0.1", "j/1", "lm-1/n1", Reason.STALE_VIEW)), snapshot(None)),),
    PublishTaskEvent: (PublishTaskEvent("gm-1", TaskEvent(
        Reason.FINISHED, "j/0#0.1", "j/0", "j", "gm-1", "lm-1", "lm-1/n0", runtime=2.5)),
                       PublishTaskEvent("gm-1", TaskEvent(
        Reason.STARTED, "j/0#0.1", "j/0", "j", "gm-1", "lm-1", "lm-1/n0", at=17.0))),
    PublishHeartbeat: (PublishHeartbeat(snapshot((
        RunningInfo("j/0#0.1", 0, "gm-1", "u1", 500, 512, False),
        RunningInfo("k/3#0.2", 3, "gm-2", "u2", 100, 64, True, True)))),),
    StartOnWorker: (StartOnWorker("lm-1/w0", PLACEMENT),),
    StopOnWorker: (StopOnWorker("lm-1/w0", "j/0#0.1", Reason.CANCELLED),
                   StopOnWorker("lm-1/w0", "j/0#0.1", Reason.PREEMPTED)),
    ReprioritizeOnWorker: (ReprioritizeOnWorker("lm-1/w0", "j", 3.5),),
    CheckpointOnWorker: (CheckpointOnWorker("lm-1/w0", ("j/0#0.1", "j/0#0.2")),),
    RestoreOnWorker: (RestoreOnWorker("lm-1/w0", "j/0#0.2", 1.25),),
    ReportToLM: (ReportToLM(Reason.STARTED, "j/0#0.1", at=5.0),
                 ReportToLM(Reason.FINISHED, "j/0#0.1", runtime=2.0, at=7.0),
                 ReportToLM(Reason.FAILED, "j/0#0.1", detail="exit 1"),
                 ReportToLM(Reason.CANCELLED, "j/0#0.1", detail="superseded", work=0.5),
                 ReportToLM(Reason.SUSPENDED, "j/0#0.1", at=6.0),
                 ReportToLM(Reason.CHECKPOINTED, "j/0#0.1", work=1.5)),
}

CASES = [pytest.param(message, sample, id=f"{message.command.__name__}-{index}")
         for message in MESSAGES for index, sample in enumerate(SAMPLES[message.command])]


def comparable(value: object) -> object:
    """Events as plain values; a snapshot as its wire form (a decoded one has a topology of
    its own, equal in content, not identical)."""
    if isinstance(value, LMSnapshot):
        return snapshot_to_wire(value).model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, {field.name: comparable(getattr(value, field.name))
                                       for field in dataclasses.fields(value)})
    if isinstance(value, tuple):
        return tuple(comparable(item) for item in value)
    return value


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """One app of each role, built and not started."""
    auth = AuthConfig(enabled=False)
    return role_apps(tmp_path_factory.mktemp("gm-state"), lambda role: auth)


def api_routes(app) -> dict[str, APIRoute]:
    """"POST /v1/launch" -> its route, for every route of the app."""
    return {f"{method} {route.path}": route for route in app.routes
            if isinstance(route, APIRoute) for method in route.methods}


def titles(schema: object) -> set[str]:
    """Every model's title in a JSON schema (the wire models' names)."""
    if isinstance(schema, dict):
        found = {schema["title"]} if isinstance(schema.get("title"), str) else set()
        return found.union(*(titles(value) for value in schema.values()))
    if isinstance(schema, list):
        return set().union(*(titles(value) for value in schema))
    return set()


# --- the table against routing -------------------------------------------------------------------


def test_every_command_for_another_role_has_exactly_one_row() -> None:
    between_roles = {command for command, route in ROUTES.items()
                     if route.to is not Receiver.SELF}
    commands = [message.command for message in MESSAGES]
    assert len(commands) == len(set(commands)), "a command has two rows"
    assert set(commands) == between_roles
    assert set(SAMPLES) == set(commands), "each row needs a sample here"
    assert set(commands) <= set(typing.get_args(Command))


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.command.__name__)
def test_the_row_agrees_with_routing_and_has_one_carrier(message: Message) -> None:
    assert bool(message.routes) != bool(message.exchange), "routes or an exchange, not both"
    assert message.sender != message.receiver
    assert ROUTES[message.command].role == message.receiver
    assert BY_COMMAND[message.command] is message


@pytest.mark.parametrize(("message", "sample"), CASES)
def test_the_wire_delivers_the_event_routing_delivers(message: Message,
                                                      sample: Command) -> None:
    source = SENDER_ID[message.sender]
    route = ROUTES[message.command]
    in_memory = route.event(source, sample, "s-1<c-1")
    assert isinstance(in_memory, message.event)
    if route.to is Receiver.WORKERS_LM:
        assert route.receiver(source, sample, WORKER_LM) == "lm-1"

    wire = message.encode(sample, source)
    assert isinstance(wire, message.wire)
    received = message.wire.model_validate_json(wire.model_dump_json())
    decoded = message.decode(received, "s-1<c-1", TopologyCache())
    assert comparable(decoded) == comparable(in_memory)


# --- the table against the services --------------------------------------------------------------


@pytest.mark.parametrize("message", [m for m in MESSAGES if m.routes],
                         ids=lambda m: m.command.__name__)
def test_the_service_serves_the_rows_routes(message: Message, apps: dict) -> None:
    served = api_routes(apps[message.server])
    missing = [path for path in message.routes if path not in served]
    assert not missing, f"the {message.server} service has no route {missing}"
    if message.answers:
        return
    for path in message.routes:
        body = served[path].openapi_extra["requestBody"]["content"]["application/json"]
        assert message.wire.__name__ in titles(body["schema"]), (
            f"{path} does not take {message.wire.__name__}")


def test_the_rows_on_rabbitmq_name_the_exchanges_the_lm_publishes_them_on() -> None:
    published = {command: message.exchange for command, message in BY_COMMAND.items()
                 if message.exchange}
    # services/lm.py: `_publish_heartbeat` and `_drain_task_events`
    assert published == {PublishHeartbeat: HEARTBEAT_EXCHANGE,
                         PublishTaskEvent: TASK_EVENTS_EXCHANGE}


@pytest.mark.parametrize("role", [GM, LM, WORKER])
def test_every_post_a_service_takes_is_a_row_or_no_command(role: str, apps: dict) -> None:
    declared = {(message.server, path) for message in MESSAGES for path in message.routes}
    posts = {(role, path) for path in api_routes(apps[role]) if path.startswith("POST ")}
    unaccounted = posts - declared - NOT_COMMANDS
    assert not unaccounted, (f"{sorted(unaccounted)}: add a row to common/message_table.py, or "
                             f"to NOT_COMMANDS if no core's command is carried")
    stale = {(owner, path) for owner, path in NOT_COMMANDS if owner == role} - posts
    assert not stale, f"{sorted(stale)} of NOT_COMMANDS is no route any more"
