"""Property-based fuzzing of every HTTP endpoint of running GMs, LMs and worker agents, with
schemathesis: what each service's OpenAPI document (`GET /openapi.json`) says is what is sent
and what the answers are checked against.

For every operation of every service, hypothesis draws cases from the document, half valid
(positive) and half invalid (negative). Half the positive ones are steered towards the
federation's real ids (GM ids, queues, nodes, workers: random strings would be refused at the
first check, and the code behind it never reached) with small resources and short durations,
so that jobs are accepted, launches reach workers and reports reach LMs. Each request carries
the token a real caller would (the cluster token; for the GM's user routes the token of the
job's queue) half of the time, and otherwise none, an unknown one, a malformed header or a
user token where only the cluster token will do. Checked:

- no answer is a 5xx, and no request fails to get an answer; every service still answers
  `/healthz` afterwards and no process has exited;
- every answer has a status the document lists for its operation, and a body that fits the
  schema documented for that status (schemathesis' `status_code_conformance` and
  `response_schema_conformance`);
- no accepted job is lost: every job answered 202 is found by `GET /v1/jobs/{id}` afterwards,
  in a state of the job lifecycle (done or failed, or still pending or running when its tasks
  are long: a fuzzed duration may be a year);
- a job id belongs to its queue: after the fuzzing, each accepted job's id is submitted again
  with the same body (202, the same job), with another body (409), and by every other queue
  of its GM (409); a 202 where a 409 is due counts in `fuzz_id_reuse_violations`.

Prints one `name=value` line per figure: fuzz_requests, fuzz_5xx, fuzz_schema_violations,
fuzz_transport_errors, fuzz_accepted_jobs, fuzz_lost_jobs, fuzz_unfinished_jobs,
fuzz_id_reuses, fuzz_id_reuse_violations, fuzz_seconds.

    python benchmarks/fuzz_api.py [--requests 10000] [--seed S]

It starts a federation of its own (services/local.py, deploy/federation-small.toml) on the
project's RabbitMQ. tests/integration/test_fuzz_api.py runs the same at a small size.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common.federation import Federation  # noqa: E402
from services.auth import USER_PATHS  # noqa: E402
from services.local import LocalFederation  # noqa: E402

SCHEMA_CHECKS = [status_code_conformance, response_schema_conformance]
TERMINAL_JOB_STATES = frozenset({"done", "failed"})
LIVE_JOB_STATES = frozenset({"accepted", "pending", "running"})
REQUEST_TIMEOUT = 10.0
FAILURES_KEPT = 20  # failures described in full, for the report


@dataclass(frozen=True, slots=True)
class Service:
    """One running service: its id, role ("gm", "lm" or "worker") and base URL."""

    id: str
    role: str
    url: str


@dataclass(frozen=True, slots=True)
class Tokens:
    cluster: str
    users: dict[str, str]  # queue -> token


@dataclass
class FuzzTally:
    """What the fuzzer sent and what came back."""

    requests: int = 0
    server_errors: int = 0
    schema_violations: int = 0
    transport_errors: int = 0
    statuses: Counter = field(default_factory=Counter)
    accepted_jobs: dict[tuple[str, str], str] = field(default_factory=dict)  # (gm, job) -> url
    job_bodies: dict[tuple[str, str], str] = field(default_factory=dict)  # ... as sent
    job_sent: dict[tuple[str, str], dict] = field(default_factory=dict)  # ... as JSON
    id_reuses: int = 0  # submissions of an accepted job's id again (same, changed, other queue)
    id_reuse_violations: int = 0  # of those, answered otherwise than due
    failures: list[str] = field(default_factory=list)

    def record(self, case: schemathesis.Case, response, service: Service | None = None) -> None:
        """Count one answer and run the schema checks on it (a 5xx counts as a server error,
        not also as a schema violation)."""
        self.requests += 1
        self.statuses[response.status_code] += 1
        label = f"{service.id if service else ''} {case.operation.label}"
        if response.status_code >= 500:
            self.server_errors += 1
            self._keep(f"{label}: HTTP {response.status_code}: {response.text[:500]}", case)
            return
        try:
            case.validate_response(response, checks=SCHEMA_CHECKS)
        except FailureGroup as group:
            self.schema_violations += 1
            titles = "; ".join(f"{failure.title}: {failure.message[:300]}"
                               for failure in group.exceptions)
            self._keep(f"{label}: HTTP {response.status_code}: {titles}", case)

    def transport_error(self, case: schemathesis.Case, error: Exception,
                        service: Service | None = None) -> None:
        self.requests += 1
        self.transport_errors += 1
        self._keep(f"{service.id if service else ''} {case.operation.label}: no answer: "
                   f"{error!r}"[:500], case)

    def _keep(self, text: str, case: schemathesis.Case) -> None:
        if len(self.failures) < FAILURES_KEPT:
            self.failures.append(f"{text}\n    body: {str(case.body)[:300]}"
                                 f"\n    path: {case.path_parameters} query: {case.query}")


def server_error_check(case: schemathesis.Case, response) -> bool:
    """schemathesis' own 5xx check, for a test that our counting agrees with it."""
    try:
        case.validate_response(response, checks=[not_a_server_error])
    except FailureGroup:
        return False
    return True


# -- steering: valid cases towards the federation's real ids ----------------------------------


@dataclass(frozen=True, slots=True)
class FederationIds:
    gms: tuple[str, ...]
    queues: dict[str, str]  # queue -> its GM
    nodes: dict[str, str]  # node -> its worker
    workers: dict[str, str]  # worker -> its LM

    @classmethod
    def of(cls, federation: Federation) -> FederationIds:
        nodes = {node.node_id: node.worker for topology in federation.topologies()
                 for node in topology.nodes}
        workers = {node.worker: topology.lm for topology in federation.topologies()
                   for node in topology.nodes}
        return cls(tuple(federation.gms), {q.name: q.gm for q in federation.queues}, nodes,
                   workers)


def steer(body: object, service: Service, ids: FederationIds, rng: random.Random) -> object:
    """`body` with names replaced by real ones of the federation (nodes of `service`'s own
    workers or LM, queues of `service`'s GM), resources small and durations short: still
    valid, and now able to get past the first check."""
    def own_nodes() -> list[str]:
        if service.role == "worker":
            return [n for n, w in ids.nodes.items() if w == service.id]
        if service.role == "lm":
            return [n for n, w in ids.nodes.items() if ids.workers[w] == service.id]
        return list(ids.nodes)

    replace: dict[str, Callable[[], object]] = {
        "gm": lambda: rng.choice(ids.gms),
        "user": lambda: rng.choice([q for q, gm in ids.queues.items()
                                    if service.role != "gm" or gm == service.id]),
        "node_id": lambda: rng.choice(own_nodes()),
        "worker": lambda: rng.choice([w for w, lm in ids.workers.items()
                                      if service.role != "lm" or lm == service.id]),
        "cpu_m": lambda: rng.randint(1, 1000),
        "mem_mib": lambda: rng.randint(1, 512),
        "duration": lambda: round(rng.uniform(0, 0.5), 3),
        "runtime": lambda: round(rng.uniform(0, 0.5), 3),
        "constraints": list,
        "nodes": lambda: None,
    }

    def walk(node: object) -> object:
        if isinstance(node, dict):
            if "cpu_m" in node:  # a task: one of no duration would run until it is killed
                node = {"duration": None, **node}
            return {key: replace[key]() if key in replace else walk(value)
                    for key, value in node.items()}
        if isinstance(node, list):
            return [walk(value) for value in node]
        return node

    return walk(body)


# -- tokens -----------------------------------------------------------------------------------


def authorization(case: schemathesis.Case, service: Service, tokens: Tokens,
                  rng: random.Random) -> dict[str, str]:
    """Half the time the header a legitimate caller sends; else a wrong one, or none."""
    path = case.operation.path
    user_route = service.role == "gm" and path in USER_PATHS
    roll = rng.random()
    if roll < 0.5:
        if user_route and rng.random() < 0.7:
            queue = case.body.get("user") if isinstance(case.body, dict) else None
            if queue not in tokens.users:
                queue = rng.choice(sorted(tokens.users))
            return {"Authorization": f"Bearer {tokens.users[queue]}"}
        return {"Authorization": f"Bearer {tokens.cluster}"}
    if roll < 0.65:
        return {}
    if roll < 0.8:
        return {"Authorization": f"Bearer {rng.randbytes(18).hex()}"}
    if roll < 0.9:
        return {"Authorization": rng.choice(["Basic dXNlcjpwYXNz", "Bearer", "Bearer  ",
                                             tokens.cluster])}
    return {"Authorization": f"Bearer {rng.choice(sorted(tokens.users.values()))}"}


# -- the fuzzer -------------------------------------------------------------------------------


def load_schema(service: Service, tokens: Tokens):
    return schemathesis.openapi.from_url(
        service.url + "/openapi.json", headers={"Authorization": f"Bearer {tokens.cluster}"},
        timeout=REQUEST_TIMEOUT)


def operations(schema) -> Iterator:
    for result in schema.get_all_operations():
        yield result.ok()


def has_inputs(operation) -> bool:
    return bool(operation.body) or any(True for _ in operation.iter_parameters())


def draw_cases(operation, mode: GenerationMode, count: int, seed: int) -> list:
    """Up to `count` cases of `operation` drawn by hypothesis (fewer when the operation has
    fewer distinct inputs: hypothesis stops when it has tried them all)."""
    cases: list[schemathesis.Case] = []

    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), verbosity=hypothesis.Verbosity.quiet)
    @hypothesis.seed(seed)
    @given(operation.as_strategy(generation_mode=mode))
    def each(case: schemathesis.Case) -> None:
        cases.append(case)

    with contextlib.suppress(hypothesis.errors.Unsatisfiable):
        each()
    return cases


@dataclass
class Fuzzer:
    services: list[Service]
    tokens: Tokens
    ids: FederationIds
    seed: int = 0
    log: Callable[[str], None] = lambda line: None
    tally: FuzzTally = field(default_factory=FuzzTally)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.session = requests.Session()

    def run(self, total: int) -> FuzzTally:
        """At least `total` requests, shared evenly over every operation of every service."""
        plan = [(service, operation) for service in self.services
                for operation in operations(load_schema(service, self.tokens))]
        per_operation = -(-total // len(plan))
        self.log(f"{len(plan)} operations on {len(self.services)} services, "
                 f"{per_operation} requests each")
        for service, operation in plan:
            self.fuzz_operation(service, operation, per_operation)
        return self.tally

    def fuzz_operation(self, service: Service, operation, count: int) -> None:
        """`count` requests, half of valid cases and half of invalid ones (when the
        operation takes any input); cases are sent again, with other tokens, when hypothesis
        found fewer distinct ones."""
        modes = ([GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if has_inputs(operation)
                 else [GenerationMode.POSITIVE])
        drawn = {mode: draw_cases(operation, mode, count, self.seed * 10 + number)
                 for number, mode in enumerate(modes)}
        modes = [mode for mode in modes if drawn[mode]]  # none invalid: all valid
        for number, mode in enumerate(modes):
            quota = count // len(modes) + (count % len(modes) if number == 0 else 0)
            cases = drawn[mode]
            for index in range(quota):
                self.send(service, cases[index % len(cases)], mode)

    def send(self, service: Service, case: schemathesis.Case, mode: GenerationMode) -> None:
        drawn = case.body
        if (mode is GenerationMode.POSITIVE and isinstance(drawn, dict | list)
                and self.rng.random() < 0.5):
            case.body = steer(drawn, service, self.ids, self.rng)
        headers = authorization(case, service, self.tokens, self.rng)
        sent = case.body
        try:
            response = case.call(base_url=service.url, session=self.session, headers=headers,
                                 timeout=REQUEST_TIMEOUT)
        except requests.RequestException as error:
            self.tally.transport_error(case, error, service)
            return
        finally:
            case.body = drawn  # the case may be sent again, steered otherwise
        self.tally.record(case, response, service)
        if (service.role == "gm" and case.operation.method.upper() == "POST"
                and case.operation.path == "/v1/jobs" and response.status_code == 202):
            key = (service.id, response.json()["job_id"])
            self.tally.accepted_jobs[key] = service.url
            self.tally.job_bodies[key] = str(sent)[:300]
            if isinstance(sent, dict):  # the id as the GM answered: chosen by it or not
                self.tally.job_sent[key] = {**sent, "job_id": key[1]}

    def reuse_ids(self, queues_of_gm: dict[str, list[str]], limit: int = 20) -> None:
        """Submit accepted jobs' ids again: the same body from its queue is the same job
        (202); another body, or another queue of the same GM, is a conflict (409)."""
        tally = self.tally
        for (gm, job_id), body in list(tally.job_sent.items())[:limit]:
            url = f"{tally.accepted_jobs[(gm, job_id)]}/v1/jobs"
            queue = body["user"]
            changed = {**body, "weight": float(body.get("weight", 1.0)) / 2 or 0.5}
            trials = [(queue, body, 202), (queue, changed, 409)] + [
                (other, {**body, "user": other}, 409)
                for other in queues_of_gm.get(gm, []) if other != queue]
            for as_queue, sent, due in trials:
                token = self.tokens.users.get(as_queue, self.tokens.cluster)
                response = self.session.post(url, json=sent, timeout=REQUEST_TIMEOUT,
                                             headers={"Authorization": f"Bearer {token}"})
                tally.id_reuses += 1
                if response.status_code in (429, 503):
                    continue  # not accepted either way: nothing to judge
                if response.status_code != due:
                    tally.id_reuse_violations += 1
                    tally.failures.append(
                        f"{gm} job {job_id!r} sent again as {as_queue!r}: HTTP "
                        f"{response.status_code}, expected {due}: {response.text[:200]}")


# -- afterwards -------------------------------------------------------------------------------


def unhealthy(services: list[Service]) -> list[str]:
    """Services that do not answer `/healthz` with 200."""
    bad = []
    for service in services:
        try:
            status = requests.get(service.url + "/healthz", timeout=REQUEST_TIMEOUT).status_code
        except requests.RequestException as error:
            bad.append(f"{service.id}: {error!r}")
            continue
        if status != 200:
            bad.append(f"{service.id}: HTTP {status}")
    return bad


def job_states(tally: FuzzTally, tokens: Tokens, wait: float) -> dict[tuple[str, str], str]:
    """The state of every accepted job, waiting up to `wait` seconds for each to end;
    "lost" for a job its GM does not know."""
    headers = {"Authorization": f"Bearer {tokens.cluster}"}
    states: dict[tuple[str, str], str] = {}
    deadline = time.monotonic() + wait
    while True:
        for key, url in tally.accepted_jobs.items():
            if states.get(key) in TERMINAL_JOB_STATES:
                continue
            response = requests.get(f"{url}/v1/jobs/{requests.utils.quote(key[1], safe='')}",
                                    headers=headers, timeout=REQUEST_TIMEOUT)
            states[key] = ("lost" if response.status_code == 404 else
                           response.json().get("state", "?") if response.status_code == 200
                           else f"HTTP {response.status_code}")
        if (all(state in TERMINAL_JOB_STATES or state == "lost" for state in states.values())
                or time.monotonic() > deadline):
            return states
        time.sleep(0.5)


@dataclass(frozen=True, slots=True)
class FuzzResult:
    tally: FuzzTally
    unhealthy: list[str]
    job_states: dict[tuple[str, str], str]
    seconds: float

    @property
    def lost_jobs(self) -> list[tuple[str, str]]:
        return [key for key, state in self.job_states.items()
                if state not in TERMINAL_JOB_STATES | LIVE_JOB_STATES]

    def figures(self) -> dict[str, float]:
        tally = self.tally
        return {
            "fuzz_requests": tally.requests, "fuzz_5xx": tally.server_errors,
            "fuzz_schema_violations": tally.schema_violations,
            "fuzz_transport_errors": tally.transport_errors,
            "fuzz_unhealthy_services": len(self.unhealthy),
            "fuzz_accepted_jobs": len(tally.accepted_jobs),
            "fuzz_lost_jobs": len(self.lost_jobs),
            "fuzz_id_reuses": tally.id_reuses,
            "fuzz_id_reuse_violations": tally.id_reuse_violations,
            "fuzz_unfinished_jobs": sum(state in LIVE_JOB_STATES
                                        for state in self.job_states.values()),
            "fuzz_seconds": round(self.seconds, 1),
        }


def services_of(fed: LocalFederation) -> list[Service]:
    return [Service(service, role, fed.endpoints.url(service))
            for service, role in fed.roles.items()]


def fuzz_federation(fed: LocalFederation, total: int, seed: int = 0, job_wait: float = 60.0,
                    log: Callable[[str], None] = lambda line: None) -> FuzzResult:
    """Fuzz every service of a running local federation; then check health and jobs."""
    started = time.monotonic()
    services = services_of(fed)
    tokens = Tokens(fed.cluster_token, dict(fed.user_tokens))
    fuzzer = Fuzzer(services, tokens, FederationIds.of(fed.federation), seed, log)
    tally = fuzzer.run(total)
    fuzzer.reuse_ids({gm: [q.name for q in fed.federation.queues if q.gm == gm]
                      for gm in fed.federation.gms})
    log(f"sent {tally.requests} requests in {time.monotonic() - started:.1f} s; statuses "
        f"{dict(sorted(tally.statuses.items()))}")
    bad = unhealthy(services) + [f"{service}: exited with {process.returncode}"
                                 for service, process in fed.processes.items()
                                 if process.poll() is not None]
    states = job_states(tally, tokens, job_wait)
    return FuzzResult(tally, bad, states, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", type=Path, default=ROOT / "deploy" / "federation-small.toml")
    parser.add_argument("--base-port", type=int, default=18600)
    parser.add_argument("--amqp-url", default=None)
    parser.add_argument("--job-wait", type=float, default=60.0,
                        help="seconds to wait for accepted jobs to end (default 60)")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep the services' event logs here (default: a temporary folder)")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(f"# {line}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="megha-fuzz-") as logs, LocalFederation(
            args.config, args.logs or Path(logs), base_port=args.base_port,
            amqp_url=args.amqp_url) as fed:
        result = fuzz_federation(fed, args.requests, args.seed, args.job_wait, log)
        for failure in result.tally.failures:
            log(failure)
        for line in result.unhealthy:
            log(f"unhealthy: {line}")
        for key, state in result.job_states.items():
            if state not in TERMINAL_JOB_STATES:
                log(f"job {key} {state}: {result.tally.job_bodies.get(key)}")
    for name, value in result.figures().items():
        print(f"{name}={value}")
    failed = (result.tally.server_errors or result.tally.schema_violations
              or result.tally.transport_errors or result.unhealthy or result.lost_jobs
              or result.tally.id_reuse_violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
