"""The NetworkPolicies of deploy/k8s (base/network.yaml) let through exactly the flows of
docs/architecture.md, and DNS: checked offline, by a model of how Kubernetes applies them.

The model (`allowed`): a connection from pod S to port P of pod D passes when S may send it
(no policy of S's namespace selects S for Egress, or one of those that do has an egress rule
whose peers and ports match D and P) and D may take it (the same for Ingress). Peers are pod
and namespace selectors (matchLabels and matchExpressions; an ipBlock is refused, the model has
no addresses), ports numbers, ranges or names looked up in D's containers. The pods are the
rendered workloads (their labels and container ports), a client pod of the namespace, the
cluster's DNS pods in kube-system, and a pod of another namespace wearing a GM's labels. Every
pair of pods is tried on every port any of them listens on, and on ports none should reach,
and the set of what passes must be EXPECTED: the architecture's flows by role, DNS from every
pod of the namespace, nothing else. docs/kubernetes.md shows the same table; a test keeps them
equal.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.unit.test_k8s_manifests import (
    K8S,
    ROOT,
    containers,
    find,
    make_secrets,
    pod_labels,
    render,
    role_of,
    workloads,
)

NAMESPACE = "megha"
# docs/architecture.md, "Components" (the diagram: the client and `megha replay` submit to a
# GM; a GM sends launch, repartition, preempt and cancel requests to the LMs over HTTP, batched
# per LM, and reads their verdicts and snapshot from the answer; an LM starts and stops tasks
# on its worker agents over HTTP; the workers send their LM reports and heartbeats over HTTP;
# the LMs publish heartbeats and task events to RabbitMQ, which the GMs consume) and "Ownership
# and flows" ("Submission": the GM publishes each job to RabbitMQ and consumes it back;
# "Launch", "Heartbeats", "Task events"). A flow is who opens the connection, to which port
# (by its name in the manifests): answers travel back on it. The replay is the Job megha-replay
# (role loadgen); a client is any pod labelled app.kubernetes.io/component=client.
ARCHITECTURE_FLOWS = {
    ("loadgen", "gm", "http"),    # Submission: POST /v1/jobs, GET /v1/jobs/{id}
    ("client", "gm", "http"),     # the same, by hand
    ("gm", "lm", "http"),         # Launch, Repartition, Preemption, cancels, reprioritize
    ("lm", "worker", "http"),     # Launch: StartOnWorker (batched), stops
    ("worker", "lm", "http"),     # Heartbeats (worker to LM), Task events (reports)
    ("gm", "rabbitmq", "amqp"),   # Submission: publish and consume jobs; heartbeats; events
    ("lm", "rabbitmq", "amqp"),   # Heartbeats (LM to GMs, fanout), Task events
}
# Every pod of the namespace resolves Service names
DNS_PORTS = {(53, "UDP"), (53, "TCP")}
# Ports nothing listens on here, tried too: a policy that would open them is too wide
# (RabbitMQ's Prometheus endpoint, epmd, Erlang distribution, a port of nothing)
EXTRA_PORTS = {(15692, "TCP"), (4369, "TCP"), (25672, "TCP"), (9999, "TCP"), (8000, "UDP")}


@dataclass(frozen=True)
class Pod:
    name: str
    role: str
    namespace: str
    labels: Mapping[str, str]
    ports: tuple[tuple[str | None, int, str], ...] = field(default=())  # name, number, protocol


def pods_of(objects: list[dict]) -> list[Pod]:
    """One pod per workload (each runs one), and the pods around them."""
    pods = []
    for obj in workloads(objects):
        ports = tuple((port.get("name"), port["containerPort"], port.get("protocol", "TCP"))
                      for container in containers(obj) for port in container.get("ports", []))
        pods.append(Pod(obj["metadata"]["name"], role_of(obj),
                        obj["metadata"].get("namespace", ""), pod_labels(obj), ports))
    pods += [
        Pod("client", "client", NAMESPACE, {"app.kubernetes.io/component": "client"}),
        Pod("coredns", "dns", "kube-system", {"k8s-app": "kube-dns"},
            (("dns", 53, "UDP"), ("dns-tcp", 53, "TCP"))),
        # a pod of another namespace that claims to be a GM: labels do not cross namespaces
        Pod("impostor", "outsider", "default", {"app.kubernetes.io/component": "gm",
                                                "app.kubernetes.io/name": "megha"}),
    ]
    return pods


def namespace_labels(objects: list[dict], namespace: str) -> dict[str, str]:
    """A namespace's labels, with the name label Kubernetes sets on every namespace."""
    labels = {"kubernetes.io/metadata.name": namespace}
    declared = find(objects, "Namespace", namespace)
    if declared:
        labels.update(declared["metadata"].get("labels", {}))
    return labels


def matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector: {} matches everything."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get(
            "values", [])
        present = key in labels
        if not {"In": present and labels[key] in values,
                "NotIn": not present or labels[key] not in values,
                "Exists": present, "DoesNotExist": not present}[operator]:
            return False
    return True


def policy_types(policy: dict) -> set[str]:
    spec = policy["spec"]
    return set(spec.get("policyTypes") or ["Ingress"] + (["Egress"] if "egress" in spec else []))


def peer_matches(peer: dict, policy: dict, pod: Pod, objects: list[dict]) -> bool:
    assert "ipBlock" not in peer, "the model has no addresses: no ipBlock"
    if "namespaceSelector" in peer:
        in_namespace = matches(peer["namespaceSelector"], namespace_labels(objects,
                                                                           pod.namespace))
    else:
        in_namespace = pod.namespace == policy["metadata"].get("namespace", "")
    return in_namespace and ("podSelector" not in peer or matches(peer["podSelector"],
                                                                  pod.labels))


def port_matches(rule_port: dict, port: int, protocol: str, destination: Pod) -> bool:
    if rule_port.get("protocol", "TCP") != protocol:
        return False
    if "port" not in rule_port:
        return True
    wanted = rule_port["port"]
    if isinstance(wanted, str):
        return (wanted, port, protocol) in destination.ports
    return wanted <= port <= rule_port.get("endPort", wanted)


def direction_allows(objects: list[dict], policies: list[dict], subject: Pod, peer: Pod,
                     port: int, protocol: str, direction: str) -> bool:
    """Whether `subject` may send to (Egress) or take from (Ingress) `peer` on `port`."""
    selecting = [p for p in policies
                 if p["metadata"].get("namespace", "") == subject.namespace
                 and direction in policy_types(p) and matches(p["spec"]["podSelector"],
                                                              subject.labels)]
    if not selecting:
        return True
    destination = peer if direction == "Egress" else subject
    peers_key = "to" if direction == "Egress" else "from"
    for policy in selecting:
        for rule in policy["spec"].get(direction.lower(), []) or []:
            if rule.get(peers_key) and not any(peer_matches(p, policy, peer, objects)
                                               for p in rule[peers_key]):
                continue
            if rule.get("ports") and not any(port_matches(p, port, protocol, destination)
                                             for p in rule["ports"]):
                continue
            return True
    return False


def allowed(objects: list[dict], source: Pod, destination: Pod, port: int,
            protocol: str) -> bool:
    policies = [obj for obj in objects if obj["kind"] == "NetworkPolicy"]
    return (direction_allows(objects, policies, source, destination, port, protocol, "Egress")
            and direction_allows(objects, policies, destination, source, port, protocol,
                                 "Ingress"))


def named_port(objects: list[dict], role: str, name: str) -> tuple[int, str]:
    """The port a role's containers call `name` (all of them the same)."""
    found = {(number, protocol) for pod in pods_of(objects) if pod.role == role
             for port_name, number, protocol in pod.ports if port_name == name}
    assert len(found) == 1, f"{role}: port {name} is {found}"
    return found.pop()


def expected(objects: list[dict]) -> set[tuple[str, str, int, str]]:
    flows = set()
    for source, destination, name in ARCHITECTURE_FLOWS:
        flows.add((source, destination, *named_port(objects, destination, name)))
    for pod in pods_of(objects):
        if pod.namespace == NAMESPACE:
            flows |= {(pod.role, "dns", *port) for port in DNS_PORTS}
    return flows


def matrix(objects: list[dict]) -> set[tuple[str, str, int, str]]:
    """Every (source role, destination role, port, protocol) some pair of pods passes, over
    every pair with an end in the namespace."""
    pods = pods_of(objects)
    ports = {(number, protocol) for pod in pods for _, number, protocol in pod.ports}
    ports |= DNS_PORTS | EXTRA_PORTS
    passed = set()
    for source in pods:
        for destination in pods:
            if source is destination or NAMESPACE not in (source.namespace,
                                                           destination.namespace):
                continue
            for port, protocol in ports:
                if allowed(objects, source, destination, port, protocol):
                    passed.add((source.role, destination.role, port, protocol))
    return passed


def flow_problems(objects: list[dict]) -> list[str]:
    """The flows that pass but should not, and those that should but do not; empty when the
    policies are right. Every pod of a role must pass the same (gm-1 and gm-2 alike)."""
    passed, wanted = matrix(objects), expected(objects)
    found = [f"passes, not in docs/architecture.md: {flow}" for flow in sorted(passed - wanted)]
    found += [f"blocked, but docs/architecture.md has it: {flow}"
              for flow in sorted(wanted - passed)]
    pods = pods_of(objects)
    for source, destination, port, protocol in sorted(wanted & passed):
        for a in (p for p in pods if p.role == source):
            for b in (p for p in pods if p.role == destination):
                if a is not b and not allowed(objects, a, b, port, protocol):
                    found.append(f"{a.name} -> {b.name} {port}/{protocol} blocked, but its role "
                                 f"passes")
    return found


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    path = tmp_path_factory.mktemp("k8s") / "secrets"
    make_secrets(str(path))
    return render(K8S, path)


@pytest.fixture
def objects(rendered: list[dict]) -> list[dict]:
    return copy.deepcopy(rendered)


def test_the_policies_pass_exactly_the_architecture_flows(rendered: list[dict]) -> None:
    assert flow_problems(rendered) == []
    # the matrix, said plainly (8000 and 5672: the ports the manifests name http and amqp)
    services = {flow for flow in matrix(rendered) if flow[1] != "dns"}
    assert services == {("loadgen", "gm", 8000, "TCP"), ("client", "gm", 8000, "TCP"),
                        ("gm", "lm", 8000, "TCP"), ("lm", "worker", 8000, "TCP"),
                        ("worker", "lm", 8000, "TCP"), ("gm", "rabbitmq", 5672, "TCP"),
                        ("lm", "rabbitmq", 5672, "TCP")}


def test_every_pod_of_the_namespace_starts_denied(rendered: list[dict]) -> None:
    policies = [obj for obj in rendered if obj["kind"] == "NetworkPolicy"]
    deny = [p for p in policies if p["spec"]["podSelector"] == {}
            and policy_types(p) == {"Ingress", "Egress"} and not p["spec"].get("ingress")
            and not p["spec"].get("egress")]
    assert len(deny) == 1, "one default-deny policy, for Ingress and Egress"
    assert all(p["metadata"]["namespace"] == NAMESPACE for p in policies)


def test_the_docs_show_the_same_flows(rendered: list[dict]) -> None:
    # docs/kubernetes.md, "Network": one row per flow, `source` | `destination` | `port`
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    section = text.split("## Network", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(\w+)` \| `(\w+)` \| `(\w+)` \(", section, re.M))
    assert rows == ARCHITECTURE_FLOWS


def open_lm_to_all(objects: list[dict]) -> None:
    find(objects, "NetworkPolicy", "lm")["spec"]["ingress"][0].pop("from")


def open_worker_to_broker_one_way(objects: list[dict]) -> None:
    find(objects, "NetworkPolicy", "worker")["spec"]["egress"].append(
        {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "rabbitmq"}}}]})


def open_worker_to_broker(objects: list[dict]) -> None:
    open_worker_to_broker_one_way(objects)
    find(objects, "NetworkPolicy", "rabbitmq")["spec"]["ingress"][0]["from"].append(
        {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "worker"}}})


def any_namespace_to_gm(objects: list[dict]) -> None:
    find(objects, "NetworkPolicy", "gm")["spec"]["ingress"][0]["from"].append(
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {
            "app.kubernetes.io/component": "gm"}}})


def remove(name: str) -> Callable[[list[dict]], None]:
    def breakage(objects: list[dict]) -> None:
        objects.remove(find(objects, "NetworkPolicy", name))
    return breakage


def gm_port_range(objects: list[dict]) -> None:
    for name in ("gm", "lm"):
        rules = find(objects, "NetworkPolicy", name)["spec"]
        rules.setdefault("egress", [])
        for rule in rules["egress"] + rules.get("ingress", []):
            for port in rule.get("ports", []):
                if port["port"] == 8000:
                    port["endPort"] = 9999


def lm_port_by_wrong_name(objects: list[dict]) -> None:
    find(objects, "NetworkPolicy", "lm")["spec"]["ingress"][0]["ports"][0]["port"] = "amqp"


BREAKAGES: dict[str, tuple[Callable[[list[dict]], None], str]] = {
    "lm open to every pod": (open_lm_to_all, "passes, not in docs/architecture.md: "
                                             "('outsider', 'lm', 8000, 'TCP')"),
    "worker to broker, both ends": (open_worker_to_broker, "('worker', 'rabbitmq', 5672"),
    "a GM of any namespace": (any_namespace_to_gm, "('outsider', 'gm', 8000, 'TCP')"),
    # allow-dns still selects every pod for Egress: a GM without its policy reaches nothing
    "no gm policy": (remove("gm"), "blocked, but docs/architecture.md has it: ('gm', 'lm'"),
    # every pod of the namespace is held by its own egress rules, but not one outside it
    "gm open to every pod": (lambda o: find(o, "NetworkPolicy", "gm")["spec"]["ingress"][0]
                             .pop("from"), "('outsider', 'gm', 8000, 'TCP')"),
    "no dns": (remove("allow-dns"), "blocked, but docs/architecture.md has it: ('gm', 'dns'"),
    "no broker policy": (remove("rabbitmq"), "blocked, but docs/architecture.md has it: "
                                             "('gm', 'rabbitmq', 5672"),
    "port range": (gm_port_range, "('gm', 'lm', 9999, 'TCP')"),
    "named port": (lm_port_by_wrong_name, "blocked, but docs/architecture.md has it: "
                                          "('worker', 'lm', 8000"),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_the_flow_check_fails_wrong_policies(objects: list[dict], name: str) -> None:
    breakage, expected_problem = BREAKAGES[name]
    breakage(objects)
    found = flow_problems(objects)
    assert any(expected_problem in problem for problem in found), found


def test_a_flow_needs_both_ends(objects: list[dict]) -> None:
    # the worker may send to the broker, but the broker does not take it: nothing changes
    open_worker_to_broker_one_way(objects)
    assert flow_problems(objects) == []


def test_the_model_reads_selectors_as_kubernetes_does() -> None:
    labels = {"app": "x", "tier": "web"}
    assert matches({}, labels) and matches(None, {})
    assert matches({"matchLabels": {"app": "x"}}, labels)
    assert not matches({"matchLabels": {"app": "y"}}, labels)
    assert matches({"matchExpressions": [{"key": "tier", "operator": "In",
                                          "values": ["web", "db"]}]}, labels)
    assert not matches({"matchExpressions": [{"key": "tier", "operator": "NotIn",
                                              "values": ["web"]}]}, labels)
    assert matches({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert not matches({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)
    pod = Pod("p", "r", "n", {}, (("http", 8000, "TCP"),))
    assert port_matches({"port": "http"}, 8000, "TCP", pod)
    assert not port_matches({"port": "http"}, 8000, "UDP", pod)
    assert port_matches({"port": 7000, "endPort": 9000}, 8000, "TCP", pod)
    assert port_matches({}, 1, "TCP", pod) and not port_matches({}, 1, "SCTP", pod)
    assert policy_types({"spec": {"egress": []}}) == {"Ingress", "Egress"}
    assert policy_types({"spec": {}}) == {"Ingress"}


def test_the_fixture_is_the_testbed(rendered: list[dict]) -> None:
    roles = sorted(pod.role for pod in pods_of(rendered))
    assert roles == sorted(["rabbitmq", "gm", "gm", "lm", "lm", "lm", *["worker"] * 6,
                            "loadgen", "client", "dns", "outsider"])
    assert Path(K8S / "base" / "network.yaml").is_file()
