"""deploy/k8s/, the testbed on Kubernetes, checked offline: no cluster, and no kubectl needed.

`render` builds what `kubectl apply -k deploy/k8s` would send (deploy/k8s/kustomization.yaml
and base/, as far as they use kustomize: resources, files or folders, namespace,
configMapGenerator, secretGenerator; anything else fails the test, so nothing goes unchecked)
with the secrets make-secrets.sh writes. Every object is validated against the Kubernetes
OpenAPI schemas that the `kubernetes-validate` package bundles, strictly (an unknown field is an
error), and each check below returns what is wrong (empty when right), so that broken copies
prove it can fail:

- `problems`: the services find each other (MEGHA_ENDPOINTS, the broker), every GM, LM and
  worker of the federation file has its workload and Service, probes, resources;
- `state_problems`: the broker, each GM and each LM is a StatefulSet of one pod whose state
  folder is a PersistentVolumeClaim; worker agents are Deployments with nothing to lose;
- `security_problems`: Pod Security `restricted` on the namespace and met by every pod, a
  read-only root file system, writable volumes only where the process writes;
- `disruption_problems`: a PodDisruptionBudget of maxUnavailable 0 for each stateful id;
- `secret_problems`: no secret in any environment; each role mounts its own Secret as files,
  holding exactly what it needs (ROLE_SECRETS, which services/auth.py agrees with), and the
  services' own readers accept those files.

tests/unit/test_k8s_flows.py checks the NetworkPolicies. Where kubectl is installed, its
kustomize renders deploy/k8s, which must agree with `render`, and the TLS overlay
deploy/k8s/tls, which must pass the same checks and give each service its own certificate.
docs/kubernetes.md says what these checks stand for.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import shutil
import ssl
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from api.auth import AMQP_URL_ENV, DIGEST_SUFFIX, FILE_SUFFIX, ROLE_TOKEN_ENVS, SECRET_ENVS
from api.endpoints import Endpoints
from common.federation import Federation, load_federation

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BASE = K8S / "base"
TLS = K8S / "tls"
# The schemas the manifests are checked against: what kind, maintained clouds and Debian's
# kubectl have run for a while; the manifests use nothing newer.
KUBERNETES_VERSION = "1.30"
BROKER_USER = "megha"
SUPPORTED = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator",
             "secretGenerator"}
GENERATOR_KEYS = {"name", "files", "literals"}
CLUSTER_SCOPED = {"Namespace"}
WORKLOADS = {"Deployment", "StatefulSet", "Job"}
SERVICE_KINDS = {"Deployment", "StatefulSet"}
# base/kustomization.yaml's Secrets come from make-secrets.sh's folder, base/secrets/
SECRETS_PREFIX = "secrets/"
# What make-secrets.sh writes there, one value a file
SECRET_FILES = {"cluster-token", "cluster-token.sha256", "gm-token", "gm-token.sha256",
                "lm-token", "lm-token.sha256", "worker-token", "worker-token.sha256",
                "user-tokens", "rabbitmq-password", "amqp-url", "rabbitmq-credentials.conf"}
TOKENS = ("cluster-token", "gm-token", "lm-token", "worker-token")
# The least each role needs, as NAME_FILE variables (api/auth.py reads them): its own role
# token; the digests of the cluster token and of the tokens of the roles that call it (it
# checks them, never sends them); the user queues' tokens where jobs are submitted (the GM
# checks them, the replay sends them); the broker URL, which holds the broker's password, where
# AMQP is spoken. test_the_role_secrets_are_what_the_services_need holds services/auth.py to it.
ROLE_SECRETS = {
    "gm": {"MEGHA_GM_TOKEN", "MEGHA_CLUSTER_TOKEN_SHA256", "MEGHA_USER_TOKENS",
           "MEGHA_AMQP_URL"},
    "lm": {"MEGHA_LM_TOKEN", "MEGHA_GM_TOKEN_SHA256", "MEGHA_WORKER_TOKEN_SHA256",
           "MEGHA_CLUSTER_TOKEN_SHA256", "MEGHA_AMQP_URL"},
    "worker": {"MEGHA_WORKER_TOKEN", "MEGHA_LM_TOKEN_SHA256", "MEGHA_CLUSTER_TOKEN_SHA256"},
    "loadgen": {"MEGHA_USER_TOKENS"},
}
AMQP_ROLES = {"gm", "lm"}
# The Secret each role mounts (and no other but its own TLS one)
ROLE_SECRET = {"gm": "megha-gm", "lm": "megha-lm", "worker": "megha-worker",
               "loadgen": "megha-replay", "rabbitmq": "megha-rabbitmq"}
# Variables that would hold a secret's value themselves
SECRET_VALUES = set(SECRET_ENVS) | {"RABBITMQ_DEFAULT_PASS", "MEGHA_RABBITMQ_PASSWORD"}
BROKER_DATA = "/var/lib/rabbitmq"
BROKER_CONF_D = "/etc/rabbitmq/conf.d"
TLS_MOUNT = "/etc/megha/tls"
# Pod Security Standard `restricted` (kubernetes.io/docs/concepts/security/pod-security-standards)
PSS_MODES = ("enforce", "audit", "warn")
PSS_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                    "persistentVolumeClaim", "projected", "secret"}


# -- rendering ------------------------------------------------------------------------------

def generated(generator: dict, directory: Path, secrets: Path) -> dict[str, str]:
    unknown = set(generator) - GENERATOR_KEYS
    assert not unknown, f"generator {generator.get('name')}: {unknown} not rendered by this test"
    data: dict[str, str] = {}
    for entry in generator.get("files", []):
        key, sep, name = entry.partition("=")
        name, key = (name, key) if sep else (key, Path(key).name)
        if name.startswith(SECRETS_PREFIX):
            path = secrets / name.removeprefix(SECRETS_PREFIX)
        else:
            path = (directory / name).resolve()
            assert path.is_relative_to(directory.resolve()), f"{entry}: kustomize reads no " \
                                                             f"file above"
        data[key] = path.read_text()
    for literal in generator.get("literals", []):
        key, sep, value = literal.partition("=")
        assert sep, f"literal {literal!r} is not KEY=VALUE"
        data[key] = value
    return data


def render(directory: Path, secrets: Path) -> list[dict]:
    """The objects `kubectl kustomize directory` makes, generator names without their hash;
    `secrets` stands for base/secrets/."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED
    assert not unknown, f"kustomization.yaml uses {unknown}, which this test does not render"
    objects: list[dict] = []
    for resource in kustomization.get("resources", []):
        path = directory / resource
        if path.is_dir():
            objects += render(path, secrets)
            continue
        assert path.is_file(), f"resource {resource} is not a file of {directory}"
        objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for generator in kustomization.get("configMapGenerator", []):
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": generator["name"]},
                        "data": generated(generator, directory, secrets)})
    for generator in kustomization.get("secretGenerator", []):
        data = generated(generator, directory, secrets)
        objects.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": generator["name"]},
                        "data": {key: base64.b64encode(value.encode()).decode()
                                 for key, value in data.items()}})
    namespace = kustomization.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace
    return objects


def kustomization_of(directory: Path) -> dict:
    return yaml.safe_load((directory / "kustomization.yaml").read_text())


def generator_names() -> set[str]:
    """Every ConfigMap and Secret a kustomization of deploy/k8s generates (base/ and tls/)."""
    return {generator["name"] for directory in (BASE, TLS)
            for key in ("configMapGenerator", "secretGenerator")
            for generator in kustomization_of(directory).get(key, [])}


# -- what the rendered objects hold -----------------------------------------------------------

def find(objects: list[dict], kind: str, name: str) -> dict | None:
    return next((obj for obj in objects
                 if obj["kind"] == kind and obj["metadata"]["name"] == name), None)


def find_workload(objects: list[dict], name: str) -> dict | None:
    return next((obj for obj in workloads(objects) if obj["metadata"]["name"] == name), None)


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def pod_labels(obj: dict) -> dict[str, str]:
    return obj["spec"]["template"]["metadata"].get("labels", {})


def role_of(obj: dict) -> str:
    return pod_labels(obj).get("app.kubernetes.io/component", "")


def containers(obj: dict) -> list[dict]:
    spec = pod_spec(obj)
    return spec.get("initContainers", []) + spec["containers"]


def workloads(objects: list[dict]) -> Iterator[dict]:
    return (obj for obj in objects if obj["kind"] in WORKLOADS)


def env_value(container: dict, name: str) -> str | None:
    return next((item.get("value") for item in container.get("env", [])
                 if item["name"] == name), None)


def config_data(objects: list[dict], name: str) -> dict[str, str]:
    config = find(objects, "ConfigMap", name)
    return config["data"] if config else {}


def secret_data(objects: list[dict], name: str) -> dict[str, str] | None:
    secret = find(objects, "Secret", name)
    if secret is None:
        return None
    return {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}


def environment(objects: list[dict], container: dict) -> dict[str, str | None]:
    """The container's variables, literal ones with their value (envFrom's first)."""
    variables: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            variables.update(config_data(objects, source["configMapRef"]["name"]))
    for item in container.get("env", []):
        variables[item["name"]] = item.get("value")
    return variables


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def port_numbers(container: dict, port: int | str) -> set[int]:
    """The container ports that `port` (a number or a port's name) means."""
    return {item["containerPort"] for item in container.get("ports", [])
            if port in (item["containerPort"], item.get("name"))}


def volumes_of(obj: dict) -> dict[str, dict]:
    return {volume["name"]: volume for volume in pod_spec(obj).get("volumes", [])}


def claim_templates(obj: dict) -> dict[str, dict]:
    return {claim["metadata"]["name"]: claim
            for claim in obj["spec"].get("volumeClaimTemplates", [])}


def mount_at(container: dict, path: str) -> dict | None:
    return next((m for m in container.get("volumeMounts", [])
                 if m["mountPath"].rstrip("/") == path.rstrip("/")), None)


def mounted_file(objects: list[dict], obj: dict, container: dict,
                 path: str) -> tuple[dict, str, str | None] | None:
    """What the file `path` of the container is: (its volume, the key, the text), from the
    mount that holds it; None when no ConfigMap or Secret volume holds it."""
    volumes = volumes_of(obj)
    for mount in sorted(container.get("volumeMounts", []), key=lambda m: -len(m["mountPath"])):
        volume = volumes.get(mount["name"], {})
        where = mount["mountPath"].rstrip("/")
        if mount.get("subPath"):
            if path != where:
                continue
            key = mount["subPath"]
        elif path.startswith(where + "/"):
            key = path[len(where) + 1:]
        else:
            continue
        if "secret" in volume:
            data = secret_data(objects, volume["secret"]["secretName"])
        elif "configMap" in volume:
            data = config_data(objects, volume["configMap"]["name"])
        else:
            return None
        return volume, key, (data or {}).get(key)
    return None


def federation() -> Federation:
    path = ROOT / "deploy" / "federation.toml"
    return load_federation(path.read_text(), str(path))


def service_ids(fed: Federation) -> dict[str, str]:
    """Every GM, LM and worker id -> the role that runs it."""
    ids = {gm: "gm" for gm in fed.gms}
    for lm in fed.lms:
        ids[lm.id] = "lm"
        ids.update({worker: "worker" for worker in lm.workers})
    return ids


def stateful_ids(fed: Federation) -> dict[str, str]:
    """The objects that keep state -> their role: the broker, every GM, every LM."""
    ids = {"rabbitmq": "rabbitmq"}
    ids.update({object_name(i): role for i, role in service_ids(fed).items() if role != "worker"})
    return ids


def object_name(service_id: str) -> str:
    """A worker id (`lm-1/w0`) as a Kubernetes name (`lm-1-w0`)."""
    return service_id.replace("/", "-")


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


# -- the checks no schema makes ----------------------------------------------------------------

def problems(objects: list[dict]) -> list[str]:
    """Everything wrong with the wiring of the rendered testbed; empty when it is right."""
    found: list[str] = []
    ids = service_ids(federation())
    namespace = next((obj["metadata"].get("namespace") for obj in objects
                      if obj["kind"] != "Namespace"), None)
    megha_image = compose()["x-megha"]["image"]
    compose_commands = {service["environment"]["MEGHA_ID"]: service["command"]
                        for service in compose()["services"].values()
                        if isinstance(service.get("environment"), dict)
                        and "MEGHA_ID" in service["environment"]}

    seen: set[tuple[str, str]] = set()
    for obj in objects:
        key = (obj["kind"], obj["metadata"]["name"])
        if key in seen:
            found.append(f"{key[0]} {key[1]} is defined twice")
        seen.add(key)

    # every id of the federation file: a workload running it, a Service of its name
    for service_id, role in ids.items():
        name = object_name(service_id)
        workload = find_workload(objects, name)
        service = find(objects, "Service", name)
        if workload is None:
            found.append(f"{role} {service_id}: no workload {name}")
        else:
            where = f"{workload['kind']} {name}"
            running = [env_value(c, "MEGHA_ID") for c in containers(workload)]
            if running != [service_id]:
                found.append(f"{role} {service_id}: {where} runs MEGHA_ID {running}")
            if role_of(workload) != role:
                found.append(f"{role} {service_id}: {where} is labelled {role_of(workload)}")
            command = [c.get("command") for c in containers(workload)]
            if compose_commands.get(service_id) and command != [compose_commands[service_id]]:
                found.append(f"{role} {service_id}: command {command}, compose runs "
                             f"{compose_commands[service_id]}")
        if service is None:
            found.append(f"{role} {service_id}: no Service {name}")
        elif role in ("lm", "worker") and service["spec"].get("clusterIP") != "None":
            found.append(f"{role} {service_id}: Service {name} is not headless (clusterIP: None)")
        elif role == "gm" and service["spec"].get("clusterIP") == "None":
            found.append(f"gm {service_id}: Service {name} should have a cluster IP")

    # selectors: every workload selects its own pods, every Service at least one workload
    for obj in objects:
        if obj["kind"] in SERVICE_KINDS and not selects(
                obj["spec"]["selector"].get("matchLabels", {}), pod_labels(obj)):
            found.append(f"{obj['kind']} {obj['metadata']['name']}: selector misses its pods")
        if obj["kind"] == "Service":
            selector = obj["spec"].get("selector", {})
            if not any(selects(selector, pod_labels(w))
                       for w in workloads(objects) if w["kind"] != "Job"):
                found.append(f"Service {obj['metadata']['name']}: selects no pods")

    # MEGHA_ENDPOINTS: the services' own parser; each entry a Service that reaches the pod
    # running that id, on a port the pod listens on
    for config in (obj for obj in objects if obj["kind"] == "ConfigMap"):
        text = config["data"].get("MEGHA_ENDPOINTS")
        if text is None:
            continue
        table = Endpoints.parse(text).table
        if set(table) != set(ids):
            found.append(f"MEGHA_ENDPOINTS: ids {sorted(set(table) ^ set(ids))} are in only one "
                         f"of it and the federation file")
        for service_id, url in table.items():
            found += endpoint_problems(objects, service_id, url, namespace)

    for obj in workloads(objects):
        where = f"{obj['kind']} {obj['metadata']['name']}"
        for volume in volumes_of(obj).values():
            if "configMap" in volume and not find(objects, "ConfigMap",
                                                  volume["configMap"]["name"]):
                found.append(f"{where}: volume {volume['name']} names no generated ConfigMap")
            # a Secret the base does not make: only the optional one of the pod's certificate
            if "secret" in volume and not find(objects, "Secret", volume["secret"]["secretName"]) \
                    and (not volume["secret"].get("optional")
                         or volume["secret"]["secretName"] != tls_secret_name(obj)):
                found.append(f"{where}: volume {volume['name']} names no generated Secret")
        for container in containers(obj):
            found += container_problems(objects, obj, container, megha_image)
    found += broker_problems(objects)
    found += replay_problems(objects)
    return found


def tls_secret_name(obj: dict) -> str:
    """The Secret of a workload's own certificate (tls/kustomization.yaml makes them)."""
    name = "replay" if obj["kind"] == "Job" else obj["metadata"]["name"]
    return f"megha-tls-{name}"


def endpoint_problems(objects: list[dict], service_id: str, url: str,
                      namespace: str | None) -> list[str]:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    name, _, domain = host.partition(".")
    if domain and not re.fullmatch(rf"{re.escape(namespace or '')}\.svc(\.cluster\.local)?",
                                   domain):
        return [f"MEGHA_ENDPOINTS {service_id}: {host} is not a Service of namespace {namespace}"]
    service = find(objects, "Service", name)
    if service is None:
        return [f"MEGHA_ENDPOINTS {service_id}: no Service {name!r}"]
    selector = service["spec"].get("selector", {})
    targets = [w for w in workloads(objects) if selects(selector, pod_labels(w))]
    if len(targets) != 1:
        return [f"MEGHA_ENDPOINTS {service_id}: Service {name} selects {len(targets)} workloads"]
    container = next((c for c in containers(targets[0])
                      if env_value(c, "MEGHA_ID") == service_id), None)
    if container is None:
        return [f"MEGHA_ENDPOINTS {service_id}: Service {name} reaches "
                f"{targets[0]['metadata']['name']}, which does not run {service_id}"]
    if service["spec"].get("clusterIP") == "None":
        # a headless name resolves to the pod: the URL's port is the container's own
        listening = port_numbers(container, port)
    else:
        listening = set().union(*(port_numbers(container, item.get("targetPort", item["port"]))
                                  for item in service["spec"]["ports"] if item["port"] == port))
    if not listening:
        return [f"MEGHA_ENDPOINTS {service_id}: port {port} of {name} reaches no container port"]
    return []


def container_problems(objects: list[dict], obj: dict, container: dict,
                       megha_image: str) -> list[str]:
    found = []
    where = f"{obj['kind']} {obj['metadata']['name']} container {container['name']}"
    resources = container.get("resources", {})
    for bound in ("requests", "limits"):
        missing = {"cpu", "memory"} - set(resources.get(bound, {}))
        if missing:
            found.append(f"{where}: no {bound} for {sorted(missing)}")
    if container.get("imagePullPolicy") != "IfNotPresent":
        found.append(f"{where}: imagePullPolicy {container.get('imagePullPolicy')}, "
                     "not IfNotPresent")
    is_megha = container["image"].startswith("megha/services:")
    if is_megha and container["image"] != megha_image:
        found.append(f"{where}: image {container['image']}, compose builds {megha_image}")
    # A Job's replay serves nothing: probes are for the long-running services
    if obj["kind"] in SERVICE_KINDS:
        for probe in ("readinessProbe", "livenessProbe"):
            spec = container.get(probe)
            if not spec:
                found.append(f"{where}: no {probe}")
            elif is_megha and (spec.get("httpGet", {}).get("path") != "/healthz"
                               or not port_numbers(container, spec["httpGet"].get("port"))):
                found.append(f"{where}: {probe} is not GET /healthz on a port it listens on")
    for source in container.get("envFrom", []):
        if "configMapRef" in source and not find(objects, "ConfigMap",
                                                 source["configMapRef"]["name"]):
            found.append(f"{where}: envFrom {source['configMapRef']['name']} is no generated "
                         f"ConfigMap")
    defined = set(environment(objects, {"envFrom": container.get("envFrom", [])}))
    for item in container.get("env", []):
        source = item.get("valueFrom", {}).get("configMapKeyRef")
        if source and source["key"] not in config_data(objects, source["name"]):
            found.append(f"{where}: {item['name']} from a missing key {source['key']}")
        # $(VAR) expands only a variable defined before, else stays literally in the value
        for reference in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                                    item.get("value") or ""):
            if reference not in defined:
                found.append(f"{where}: {item['name']} refers to $({reference}), not defined "
                             f"before it")
        defined.add(item["name"])
    # the federation file: where MEGHA_CONFIG says, mounted from the generated ConfigMap
    config_path = environment(objects, container).get("MEGHA_CONFIG")
    if config_path:
        held = mounted_file(objects, obj, container, config_path)
        if held is None or "configMap" not in held[0] or held[2] is None:
            found.append(f"{where}: MEGHA_CONFIG {config_path} is not a mounted ConfigMap key")
    return found


def conf_lines(text: str | None) -> dict[str, str]:
    """RabbitMQ's `key = value` lines (the new-style configuration format)."""
    pairs = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#"):
            pairs[key.strip()] = value.strip()
    return pairs


def broker_problems(objects: list[dict]) -> list[str]:
    """Every broker URL logs in as `megha` with the generated password, at the broker's
    Service; the broker creates that user with that password (never guest), from its conf.d,
    the password from a Secret."""
    found = []
    broker = find_workload(objects, "rabbitmq")
    service = find(objects, "Service", "rabbitmq")
    if broker is None or service is None:
        return ["no rabbitmq workload and Service"]
    rabbit = containers(broker)[0]
    settings: dict[str, tuple[str, dict]] = {}
    for mount in rabbit.get("volumeMounts", []):
        if mount["mountPath"].startswith(BROKER_CONF_D + "/"):
            volume, _, text = mounted_file(objects, broker, rabbit, mount["mountPath"]) or (
                {}, "", None)
            for key, value in conf_lines(text).items():
                settings[key] = (value, volume)
    if settings.get("default_user", ("",))[0] != BROKER_USER:
        found.append(f"rabbitmq: default_user is {settings.get('default_user', ('none',))[0]},"
                     f" not {BROKER_USER}")
    password, volume = settings.get("default_pass", ("", {}))
    if not password or "secret" not in volume:
        found.append("rabbitmq: default_pass does not come from a mounted Secret")
    amqp_ports = {item["port"] for item in service["spec"]["ports"]}
    for obj in workloads(objects):
        for container in containers(obj):
            path = environment(objects, container).get(AMQP_URL_ENV + FILE_SUFFIX)
            if path is None:
                continue
            where = f"{obj['metadata']['name']}: {AMQP_URL_ENV}{FILE_SUFFIX}"
            held = mounted_file(objects, obj, container, path)
            if held is None or held[2] is None:
                found.append(f"{where} {path} is no mounted file")
                continue
            parts = urlsplit(held[2].strip())
            if parts.username != BROKER_USER:
                found.append(f"{where} logs in as {parts.username}, not {BROKER_USER}")
            if not password or parts.password != password:
                found.append(f"{where}: the password is not the broker's default_pass")
            if parts.hostname != "rabbitmq" or parts.port not in amqp_ports:
                found.append(f"{where} does not name the rabbitmq Service's port")
    return found


def replay_problems(objects: list[dict]) -> list[str]:
    """The Job replays a workload of the image (deploy/workloads), as compose's loadgen."""
    job = find(objects, "Job", "megha-replay")
    if job is None:
        return ["no Job megha-replay"]
    command = containers(job)[0].get("command", [])
    if command[:4] != ["python", "-m", "megha", "replay"]:
        return [f"Job megha-replay runs {command[:4]}, not `python -m megha replay`"]
    if "--trace" not in command:
        return ["Job megha-replay: no --trace"]
    trace = command[command.index("--trace") + 1]
    if not trace.startswith("/app/deploy/workloads/") or not (
            ROOT / trace.removeprefix("/app/")).is_file():
        return [f"Job megha-replay: {trace} is no workload the image carries"]
    return []


def state_problems(objects: list[dict]) -> list[str]:
    """The broker, every GM and every LM: a StatefulSet of one pod (never two of one id at
    once), its state folder on a PersistentVolumeClaim of its own (kept when the pod moves);
    every worker agent: a Deployment of one pod that writes nothing but /tmp."""
    found = []
    fed = federation()
    for name, role in stateful_ids(fed).items():
        obj = find(objects, "StatefulSet", name)
        if obj is None:
            other = find_workload(objects, name)
            found.append(f"{role} {name} is no StatefulSet"
                         + (f" (a {other['kind']})" if other else ""))
            continue
        if obj["spec"].get("replicas") != 1:
            found.append(f"StatefulSet {name}: replicas {obj['spec'].get('replicas')}, not 1")
        service = find(objects, "Service", obj["spec"].get("serviceName", ""))
        if obj["spec"].get("serviceName") != name or service is None:
            found.append(f"StatefulSet {name}: serviceName is not its Service {name}")
        container = containers(obj)[0]
        path = BROKER_DATA if role == "rabbitmq" else environment(objects, container).get(
            "MEGHA_STATE_DIR")
        mount = mount_at(container, path or "")
        claims = claim_templates(obj)
        if mount is None:
            found.append(f"StatefulSet {name}: nothing is mounted at its state folder {path}")
        elif mount["name"] not in claims:
            found.append(f"StatefulSet {name}: its state folder {path} is not a "
                         f"PersistentVolumeClaim (volume {mount['name']})")
        else:
            spec = claims[mount["name"]]["spec"]
            if spec.get("accessModes") != ["ReadWriteOnce"]:
                found.append(f"StatefulSet {name}: claim {mount['name']} is not ReadWriteOnce")
            if not spec.get("resources", {}).get("requests", {}).get("storage"):
                found.append(f"StatefulSet {name}: claim {mount['name']} requests no storage")
        if role == "rabbitmq":
            home = environment(objects, container).get("HOME") or ""
            if not home.startswith(BROKER_DATA):
                found.append(f"rabbitmq: HOME {home} (the Erlang cookie) is not on its volume")
    for service_id, role in service_ids(fed).items():
        if role != "worker":
            continue
        name = object_name(service_id)
        obj = find(objects, "Deployment", name)
        if obj is None:
            continue  # problems() says it is missing
        if obj["spec"].get("replicas") != 1 or obj["spec"].get("strategy", {}).get(
                "type") != "Recreate":
            found.append(f"Deployment {name}: not one replica with strategy Recreate")
        for mount in containers(obj)[0].get("volumeMounts", []):
            if not mount.get("readOnly") and mount["mountPath"] != "/tmp":
                found.append(f"worker {name} writes {mount['mountPath']}: a worker keeps no "
                             f"state, so a Deployment may replace it anywhere")
    expected = set(stateful_ids(fed)) | {object_name(i) for i, r in service_ids(fed).items()
                                         if r == "worker"}
    for obj in objects:
        if obj["kind"] in SERVICE_KINDS and obj["metadata"]["name"] not in expected:
            found.append(f"{obj['kind']} {obj['metadata']['name']} is no id of the federation")
    return found


def security_problems(objects: list[dict]) -> list[str]:
    """Pod Security `restricted` enforced (and audited, and warned of) on the namespace, and
    met by every pod; besides: a read-only root file system, writable volumes (emptyDir or the
    pod's claims) only where the process writes, no service account token."""
    found = []
    namespace = next((obj for obj in objects if obj["kind"] == "Namespace"), None)
    labels = (namespace or {}).get("metadata", {}).get("labels", {})
    for mode in PSS_MODES:
        if labels.get(f"pod-security.kubernetes.io/{mode}") != "restricted":
            found.append(f"namespace: pod-security.kubernetes.io/{mode} is not restricted")
        if not labels.get(f"pod-security.kubernetes.io/{mode}-version"):
            found.append(f"namespace: no pod-security.kubernetes.io/{mode}-version")
    for obj in workloads(objects):
        spec = pod_spec(obj)
        where = f"{obj['kind']} {obj['metadata']['name']}"
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(host):
                found.append(f"{where}: {host}")
        if spec.get("automountServiceAccountToken") is not False:
            found.append(f"{where}: the service account token is mounted")
        volumes = volumes_of(obj)
        for volume in volumes.values():
            kinds = set(volume) - {"name"}
            if not kinds <= PSS_VOLUME_TYPES:
                found.append(f"{where}: volume {volume['name']} is {sorted(kinds)}")
        pod = spec.get("securityContext", {})
        for container in containers(obj):
            found += container_security_problems(obj, container, pod, volumes)
    return found


def container_security_problems(obj: dict, container: dict, pod: dict,
                                volumes: dict[str, dict]) -> list[str]:
    found = []
    where = f"{obj['kind']} {obj['metadata']['name']} container {container['name']}"
    own = container.get("securityContext", {})

    def effective(key: str):
        return own.get(key, pod.get(key))

    if effective("runAsNonRoot") is not True:
        found.append(f"{where}: runAsNonRoot is not true")
    if effective("runAsUser") in (None, 0):
        found.append(f"{where}: runAsUser {effective('runAsUser')}: no uid of its own")
    if (effective("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
        found.append(f"{where}: no RuntimeDefault seccomp profile")
    if own.get("allowPrivilegeEscalation") is not False:
        found.append(f"{where}: allowPrivilegeEscalation is not false")
    if own.get("privileged"):
        found.append(f"{where}: privileged")
    capabilities = own.get("capabilities", {})
    if "ALL" not in capabilities.get("drop", []) or capabilities.get("add"):
        found.append(f"{where}: capabilities are not drop ALL, add none")
    if own.get("readOnlyRootFilesystem") is not True:
        found.append(f"{where}: the root file system is writable")
    claims = claim_templates(obj)
    for mount in container.get("volumeMounts", []):
        if mount.get("readOnly"):
            continue
        volume = volumes.get(mount["name"], {})
        if "emptyDir" not in volume and mount["name"] not in claims:
            found.append(f"{where}: {mount['mountPath']} is writable, and neither an emptyDir "
                         f"nor a claim")
    if container["image"].startswith("megha/services:"):
        tmp = mount_at(container, "/tmp")
        if tmp is None or tmp.get("readOnly") or "emptyDir" not in volumes.get(tmp["name"], {}):
            found.append(f"{where}: no writable emptyDir at /tmp (SQLite's and Python's "
                         f"temporary files)")
    return found


def disruption_problems(objects: list[dict]) -> list[str]:
    """One PodDisruptionBudget per stateful id, maxUnavailable 0 (no voluntary eviction: a
    move is an outage and a recovery, the operator's call), unhealthy pods evictable; none for
    worker agents, which keep nothing."""
    found = []
    budgets = [obj for obj in objects if obj["kind"] == "PodDisruptionBudget"]
    fed = federation()
    for name in stateful_ids(fed):
        obj = find_workload(objects, name)
        if obj is None:
            continue
        covering = [b for b in budgets
                    if selects(b["spec"]["selector"].get("matchLabels", {}), pod_labels(obj))]
        if len(covering) != 1:
            found.append(f"{name}: {len(covering)} PodDisruptionBudgets, not 1")
            continue
        spec = covering[0]["spec"]
        if spec.get("maxUnavailable") != 0 or "minAvailable" in spec:
            found.append(f"{name}: its PodDisruptionBudget is not maxUnavailable 0 "
                         f"({ {k: v for k, v in spec.items() if k != 'selector'} })")
        if spec.get("unhealthyPodEvictionPolicy") != "AlwaysAllow":
            found.append(f"{name}: a pod that is not ready would hold a drain")
    for obj in workloads(objects):
        if obj["metadata"]["name"] in stateful_ids(fed):
            continue
        if any(selects(b["spec"]["selector"].get("matchLabels", {}), pod_labels(obj))
               for b in budgets):
            found.append(f"{obj['metadata']['name']}: a PodDisruptionBudget holds a workload "
                         f"without state")
    for budget in budgets:
        if not any(selects(budget["spec"]["selector"].get("matchLabels", {}), pod_labels(w))
                   for w in workloads(objects)):
            found.append(f"PodDisruptionBudget {budget['metadata']['name']} selects no pods")
    return found


def secret_problems(objects: list[dict]) -> list[str]:
    """No secret in any environment; each role's pods mount their role's Secret (and their own
    certificate's, when there is one) as files, read-only, not world-readable, holding exactly
    the values ROLE_SECRETS lists, each named by its NAME_FILE variable."""
    found = []
    for obj in workloads(objects):
        role = role_of(obj)
        for container in containers(obj):
            where = f"{obj['kind']} {obj['metadata']['name']} container {container['name']}"
            for item in container.get("env", []):
                if "secretKeyRef" in item.get("valueFrom", {}):
                    found.append(f"{where}: {item['name']} comes from a Secret into the "
                                 f"environment")
            for source in container.get("envFrom", []):
                if "secretRef" in source:
                    found.append(f"{where}: envFrom a Secret")
            variables = environment(objects, container)
            for name in sorted(set(variables) & SECRET_VALUES):
                found.append(f"{where}: {name} holds a secret itself, not as {name}{FILE_SUFFIX}")
            if role in ROLE_SECRETS:
                found += file_variable_problems(objects, obj, container, variables, where)
        found += secret_volume_problems(objects, obj)
    found += digest_problems(objects)
    return found


def file_variable_problems(objects: list[dict], obj: dict, container: dict,
                           variables: dict, where: str) -> list[str]:
    found = []
    role = role_of(obj)
    files = {name.removesuffix(FILE_SUFFIX): path for name, path in variables.items()
             if name.endswith(FILE_SUFFIX) and name.startswith("MEGHA_")}
    if set(files) != ROLE_SECRETS[role]:
        missing, extra = ROLE_SECRETS[role] - set(files), set(files) - ROLE_SECRETS[role]
        found.append(f"{where}: a {role} gets {sorted(extra)} too much, {sorted(missing)} "
                     f"too little")
    named = set()
    for name, path in files.items():
        held = mounted_file(objects, obj, container, path or "")
        if held is None or "secret" not in held[0] or held[2] is None:
            found.append(f"{where}: {name}{FILE_SUFFIX} {path} is no file of a mounted Secret")
            continue
        if held[0]["secret"]["secretName"] != ROLE_SECRET[role]:
            found.append(f"{where}: {name}{FILE_SUFFIX} reads Secret "
                         f"{held[0]['secret']['secretName']}, not {ROLE_SECRET[role]}")
        named.add(held[1])
    own = secret_data(objects, ROLE_SECRET[role]) or {}
    if set(own) != named:
        found.append(f"{where}: Secret {ROLE_SECRET[role]} holds {sorted(set(own) - named)} that"
                     f" no variable names")
    return found


def secret_volume_problems(objects: list[dict], obj: dict) -> list[str]:
    found = []
    role = role_of(obj)
    where = f"{obj['kind']} {obj['metadata']['name']}"
    secrets = {volume["name"]: volume["secret"] for volume in volumes_of(obj).values()
               if "secret" in volume}
    expected = {ROLE_SECRET.get(role)}
    if role != "rabbitmq":
        expected.add(tls_secret_name(obj))
    names = {secret["secretName"] for secret in secrets.values()}
    if names != expected:
        found.append(f"{where}: mounts the Secrets {sorted(names)}, not "
                     f"{sorted(expected - {None})}")
    for volume, secret in secrets.items():
        if secret.get("defaultMode", 0o644) & 0o007:
            found.append(f"{where}: Secret volume {volume} is readable by every user")
        if secret.get("optional") and secret["secretName"] != tls_secret_name(obj):
            found.append(f"{where}: Secret volume {volume} is optional")
        for container in containers(obj):
            for mount in container.get("volumeMounts", []):
                if mount["name"] == volume and not mount.get("readOnly"):
                    found.append(f"{where}: Secret volume {volume} is mounted writable")
    return found


def digest_problems(objects: list[dict]) -> list[str]:
    """Every `NAME.sha256` a Secret holds is the SHA-256 of the token NAME another holds."""
    found = []
    values: dict[str, set[str]] = {}
    for obj in objects:
        if obj["kind"] == "Secret":
            for key, value in secret_data(objects, obj["metadata"]["name"]).items():
                values.setdefault(key, set()).add(value.strip())
    for key, digests in values.items():
        if not key.endswith(".sha256"):
            continue
        tokens = values.get(key.removesuffix(".sha256"), set())
        expected = {hashlib.sha256(token.encode()).hexdigest() for token in tokens}
        if len(digests) != 1 or (tokens and digests != expected):
            found.append(f"{key}: not the digest of the token the other Secrets hold")
    return found


# -- fixtures ---------------------------------------------------------------------------------

def make_secrets(*args: str, script: Path = K8S / "make-secrets.sh",
                 env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(script), *args], capture_output=True, text=True, check=True,
                          timeout=120, env=None if env is None else {**os.environ, **env})


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("k8s") / "secrets"
    make_secrets(str(path))
    return path


@pytest.fixture(scope="module")
def rendered(secrets_dir: Path) -> list[dict]:
    return render(K8S, secrets_dir)


@pytest.fixture
def objects(rendered: list[dict]) -> list[dict]:
    return copy.deepcopy(rendered)


CHECKS = (problems, state_problems, security_problems, disruption_problems, secret_problems)


# -- the manifests -----------------------------------------------------------------------------

def test_every_object_is_valid_for_kubernetes(rendered: list[dict]) -> None:
    failures = []
    for obj in rendered:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            failures.append(f"{obj['kind']} {obj['metadata']['name']}: {error}")
    assert not failures, "\n".join(failures)
    kinds = {obj["kind"] for obj in rendered}
    assert {"Namespace", "ConfigMap", "Secret", "StatefulSet", "Deployment", "Service", "Job",
            "PodDisruptionBudget", "NetworkPolicy"} <= kinds


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__)
def test_the_testbed_passes_every_check(rendered: list[dict],
                                        check: Callable[[list[dict]], list[str]]) -> None:
    assert check(rendered) == []


def test_every_federation_id_has_its_workload_and_service(rendered: list[dict]) -> None:
    # the same as the checks say, plainly: 2 GMs and 3 LMs in StatefulSets with a claim each,
    # 6 worker agents in Deployments, and the broker in a StatefulSet with a claim
    ids = service_ids(federation())
    assert sorted(role for role in ids.values()) == ["gm"] * 2 + ["lm"] * 3 + ["worker"] * 6
    for service_id, role in ids.items():
        kind = "Deployment" if role == "worker" else "StatefulSet"
        obj = find(rendered, kind, object_name(service_id))
        assert obj is not None, (kind, service_id)
        assert find(rendered, "Service", object_name(service_id)) is not None
        assert bool(claim_templates(obj)) == (role != "worker")
    assert set(claim_templates(find(rendered, "StatefulSet", "rabbitmq"))) == {"data"}


def test_the_federation_file_is_deploy_federation_toml() -> None:
    copy_ = (BASE / "federation.toml").read_bytes()
    assert copy_ == (ROOT / "deploy" / "federation.toml").read_bytes(), (
        "deploy/k8s/base/federation.toml differs from deploy/federation.toml (kustomize reads "
        "no file outside deploy/k8s/base): cp deploy/federation.toml deploy/k8s/base/")


def test_the_role_secrets_are_what_the_services_need() -> None:
    # services/auth.py: a service sends its own role's token and checks its callers' and the
    # operator's; ROLE_SECRETS must say the same, and every name must be one the services read
    # as NAME_FILE
    from services.auth import callers_of

    for role, variable in ROLE_TOKEN_ENVS.items():
        needed = {variable, "MEGHA_CLUSTER_TOKEN" + DIGEST_SUFFIX}
        needed |= {ROLE_TOKEN_ENVS[caller] + DIGEST_SUFFIX for caller in callers_of(role)}
        if role == "gm":
            needed.add("MEGHA_USER_TOKENS")
        if role in AMQP_ROLES:
            needed.add(AMQP_URL_ENV)
        assert ROLE_SECRETS[role] == needed, role
    assert set().union(*ROLE_SECRETS.values()) <= set(SECRET_ENVS)


def materialize(objects: list[dict], obj: dict, container: dict, root: Path) -> dict[str, str]:
    """The container's environment with its Secret volumes written under `root` as the kubelet
    mounts them (one file per key), and every path into them moved there."""
    moved = {}
    for mount in container.get("volumeMounts", []):
        volume = volumes_of(obj).get(mount["name"], {})  # not a claim's
        if "secret" not in volume:
            continue
        data = secret_data(objects, volume["secret"]["secretName"]) or {}
        folder = root / mount["mountPath"].lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        for key, value in data.items():
            (folder / key).write_text(value)
        moved[mount["mountPath"]] = str(folder)
    env = {}
    for name, value in environment(objects, container).items():
        for mount_path, folder in moved.items():
            if value and value.startswith(mount_path + "/"):
                value = folder + value[len(mount_path):]
        env[name] = value or ""
    return env


def test_each_role_starts_with_the_secrets_it_mounts(rendered: list[dict],
                                                     tmp_path: Path) -> None:
    # the services' own readers (services/auth.py, api/auth.py, loadgen/credentials.py) take
    # what each pod mounts, and nothing else: a GM, LM and worker send their role's token
    from api.auth import read_secret
    from loadgen.credentials import user_tokens
    from services.auth import AuthConfig

    fed = federation()
    queues = [queue.name for queue in fed.queues]
    for obj in workloads(rendered):
        role = role_of(obj)
        if role not in ROLE_SECRETS:
            continue
        environ = materialize(rendered, obj, containers(obj)[0], tmp_path / obj["metadata"][
            "name"])
        if role == "loadgen":
            assert sorted(user_tokens(None, environ, root=tmp_path)) == sorted(queues)
            continue
        own = [q.name for q in fed.queues if q.gm == environ["MEGHA_ID"]]
        config = AuthConfig.from_env(environ, role=role,
                                     queues=queues if role == "gm" else None, own_queues=own)
        assert config.enabled and config.sends_env == ROLE_TOKEN_ENVS[role] + FILE_SUFFIX
        if role in AMQP_ROLES:
            assert read_secret(AMQP_URL_ENV, environ).value.startswith("amqp://megha:")


# -- the checks can fail -----------------------------------------------------------------------

def gm_statefulset(objects: list[dict]) -> dict:
    return copy.deepcopy(find(objects, "StatefulSet", "gm-1"))


def drop_replicas_type(obj: dict) -> None:
    obj["spec"]["replicas"] = "one"


def drop_selector(obj: dict) -> None:
    del obj["spec"]["selector"]


def misspell_a_field(obj: dict) -> None:
    pod_spec(obj)["containers"][0]["imagePulPolicy"] = "Always"


def port_as_text(obj: dict) -> None:
    pod_spec(obj)["containers"][0]["ports"][0]["containerPort"] = "eight thousand"


def claim_mode_as_text(obj: dict) -> None:
    obj["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] = "ReadWriteOnce"


@pytest.mark.parametrize("breakage", [drop_replicas_type, drop_selector, misspell_a_field,
                                      port_as_text, claim_mode_as_text])
def test_the_schema_check_fails_a_broken_object(rendered: list[dict],
                                                breakage: Callable[[dict], None]) -> None:
    obj = gm_statefulset(rendered)
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    breakage(obj)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_knows_no_misspelt_kind(rendered: list[dict]) -> None:
    obj = gm_statefulset(rendered)
    obj["kind"] = "StatefullSet"
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def remove(kind: str, name: str) -> Callable[[list[dict]], None]:
    def breakage(objects: list[dict]) -> None:
        objects.remove(find(objects, kind, name))
    return breakage


def container_of(objects: list[dict], name: str) -> dict:
    return pod_spec(find_workload(objects, name))["containers"][0]


def env_item(objects: list[dict], name: str, variable: str) -> dict:
    return next(item for item in container_of(objects, name)["env"]
                if item["name"] == variable)


def endpoints_typo(objects: list[dict]) -> None:
    data = config_data(objects, "megha-env")
    data["MEGHA_ENDPOINTS"] = data["MEGHA_ENDPOINTS"].replace("http://lm-2:", "http://lm2:")


def set_secret(objects: list[dict], name: str, key: str, value: str) -> None:
    find(objects, "Secret", name)["data"][key] = base64.b64encode(value.encode()).decode()


def as_deployment(name: str) -> Callable[[list[dict]], None]:
    def breakage(objects: list[dict]) -> None:
        obj = find(objects, "StatefulSet", name)
        obj["kind"] = "Deployment"
        obj["spec"]["strategy"] = {"type": "Recreate"}
        for key in ("serviceName", "volumeClaimTemplates"):
            obj["spec"].pop(key)
        pod_spec(obj)["volumes"].append({"name": "state", "emptyDir": {}})
    return breakage


def state_on_empty_dir(objects: list[dict]) -> None:
    obj = find(objects, "StatefulSet", "lm-2")
    obj["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] = "spare"
    pod_spec(obj)["volumes"].append({"name": "state", "emptyDir": {}})


def budget(name: str) -> Callable[[list[dict]], dict]:
    return lambda objects: find(objects, "PodDisruptionBudget", name)["spec"]


def security(name: str) -> Callable[[list[dict]], dict]:
    return lambda objects: container_of(objects, name)["securityContext"]


def pod_security(name: str) -> Callable[[list[dict]], dict]:
    return lambda objects: pod_spec(find_workload(objects, name))["securityContext"]


def namespace_labels(objects: list[dict]) -> dict:
    return find(objects, "Namespace", "megha")["metadata"]["labels"]


def token_in_env(objects: list[dict]) -> None:
    container_of(objects, "lm-3")["env"].append({"name": "MEGHA_LM_TOKEN", "valueFrom": {
        "secretKeyRef": {"name": "megha-lm", "key": "lm-token"}}})


def worker_with_gm_secrets(objects: list[dict]) -> None:
    volume = volumes_of(find_workload(objects, "lm-1-w1"))["secrets"]
    volume["secret"]["secretName"] = "megha-gm"


def lm_with_cluster_token(objects: list[dict]) -> None:
    config_data(objects, "megha-lm-env")["MEGHA_CLUSTER_TOKEN_FILE"] = \
        "/etc/megha/secrets/cluster-token"


def gm_secret_with_more(objects: list[dict]) -> None:
    set_secret(objects, "megha-gm", "lm-token", "0" * 64)


def wrong_digest(objects: list[dict]) -> None:
    set_secret(objects, "megha-worker", "lm-token.sha256", "0" * 64)


def writable_secrets(objects: list[dict]) -> None:
    mount = mount_at(container_of(objects, "gm-2"), "/etc/megha/secrets")
    mount.pop("readOnly")


def wrong_amqp_password(objects: list[dict]) -> None:
    set_secret(objects, "megha-lm", "amqp-url", "amqp://megha:other@rabbitmq:5672/%2F")


def guest_broker(objects: list[dict]) -> None:
    config_data(objects, "megha-rabbitmq-conf")["90-megha.conf"] = "default_user = guest\n"


def password_in_config_map(objects: list[dict]) -> None:
    volume = volumes_of(find_workload(objects, "rabbitmq"))["credentials"]
    volume.pop("secret")
    volume["configMap"] = {"name": "megha-rabbitmq-conf"}
    config_data(objects, "megha-rabbitmq-conf")["91-credentials.conf"] = "default_pass = x\n"


def write_the_federation(objects: list[dict]) -> None:
    mount_at(container_of(objects, "lm-2-w0"), "/etc/megha/config").pop("readOnly")
    volumes_of(find_workload(objects, "lm-2-w0"))["federation"]["configMap"]["name"] = "x"


BREAKAGES: dict[str, tuple[Callable[[list[dict]], None], Callable, str]] = {
    # the wiring
    "lm service gone": (remove("Service", "lm-2"), problems, "lm lm-2: no Service lm-2"),
    "worker gone": (remove("Deployment", "lm-3-w1"), problems, "no workload lm-3-w1"),
    "lm not headless": (lambda o: find(o, "Service", "lm-1")["spec"].pop("clusterIP"),
                        problems, "not headless"),
    "endpoint typo": (endpoints_typo, problems, "no Service 'lm2'"),
    "wrong id": (lambda o: env_item(o, "lm-1", "MEGHA_ID").update(value="lm-2"), problems,
                 "StatefulSet lm-1 runs MEGHA_ID ['lm-2']"),
    "no readiness": (lambda o: container_of(o, "lm-2-w0").pop("readinessProbe"), problems,
                     "no readinessProbe"),
    "no liveness": (lambda o: container_of(o, "rabbitmq").pop("livenessProbe"), problems,
                    "no livenessProbe"),
    "probe port": (lambda o: container_of(o, "gm-2")["livenessProbe"]["httpGet"].update(
        port=9000), problems, "livenessProbe is not GET /healthz"),
    "no requests": (lambda o: container_of(o, "gm-1")["resources"].pop("requests"), problems,
                    "no requests"),
    "pull policy": (lambda o: container_of(o, "lm-1-w0").update(imagePullPolicy="Always"),
                    problems, "not IfNotPresent"),
    "selector": (lambda o: find(o, "StatefulSet", "lm-1")["spec"]["selector"]["matchLabels"]
                 .update({"app.kubernetes.io/instance": "lm-9"}), problems,
                 "selector misses its pods"),
    "config not mounted": (lambda o: container_of(o, "gm-2")["volumeMounts"].pop(0), problems,
                           "MEGHA_CONFIG /etc/megha/config/federation.toml is not a mounted"),
    "other command": (lambda o: container_of(o, "lm-2").update(
        command=["python", "-m", "services.gm"]), problems,
        "compose runs ['python', '-m', 'services.lm']"),
    "endpoint missing": (lambda o: config_data(o, "megha-env").update(
        MEGHA_ENDPOINTS=config_data(o, "megha-env")["MEGHA_ENDPOINTS"].replace(
            ",lm-3/w1=http://lm-3-w1:8000", "")), problems, "ids ['lm-3/w1'] are in only one"),
    "no trace": (lambda o: pod_spec(find(o, "Job", "megha-replay"))["containers"][0].update(
        command=["python", "-m", "megha", "replay", "--trace", "/app/deploy/workloads/x.tr"]),
        problems, "/app/deploy/workloads/x.tr is no workload"),
    "unknown config map": (write_the_federation, problems, "names no generated ConfigMap"),
    "guest broker": (guest_broker, problems, "default_user is guest"),
    "password in a config map": (password_in_config_map, problems,
                                 "default_pass does not come from a mounted Secret"),
    "amqp password": (wrong_amqp_password, problems, "the password is not the broker's"),
    # the state
    "gm as a deployment": (as_deployment("gm-2"), state_problems,
                           "gm gm-2 is no StatefulSet (a Deployment)"),
    "lm state on an emptyDir": (state_on_empty_dir, state_problems,
                                "lm-2: its state folder /app/state is not a Persistent"),
    "two replicas": (lambda o: find(o, "StatefulSet", "lm-3")["spec"].update(replicas=2),
                     state_problems, "StatefulSet lm-3: replicas 2"),
    "broker without a claim": (lambda o: container_of(o, "rabbitmq")["volumeMounts"].pop(0),
                               state_problems, "nothing is mounted at its state folder"),
    "cookie off the volume": (lambda o: env_item(o, "rabbitmq", "HOME").update(value="/tmp"),
                              state_problems, "HOME /tmp (the Erlang cookie)"),
    "worker rolling": (lambda o: find(o, "Deployment", "lm-2-w1")["spec"].update(
        strategy={"type": "RollingUpdate"}), state_problems, "strategy Recreate"),
    "worker writes state": (lambda o: container_of(o, "lm-1-w0")["volumeMounts"].append(
        {"name": "tmp", "mountPath": "/app/state"}), state_problems, "writes /app/state"),
    # the hardening
    "namespace not enforced": (lambda o: namespace_labels(o).pop(
        "pod-security.kubernetes.io/enforce"), security_problems, "enforce is not restricted"),
    "runs as root": (lambda o: pod_security("lm-1")(o).update(runAsUser=0), security_problems,
                     "runAsUser 0"),
    "broker may be root": (lambda o: security("rabbitmq")(o).update(runAsNonRoot=False),
                           security_problems, "rabbitmq container rabbitmq: runAsNonRoot"),
    "writable root": (lambda o: security("gm-1")(o).update(readOnlyRootFilesystem=False),
                      security_problems, "the root file system is writable"),
    "escalation": (lambda o: security("lm-2-w1")(o).pop("allowPrivilegeEscalation"),
                   security_problems, "allowPrivilegeEscalation is not false"),
    "capabilities kept": (lambda o: security("rabbitmq")(o)["capabilities"].update(drop=[]),
                          security_problems, "capabilities are not drop ALL"),
    "no seccomp": (lambda o: pod_security("gm-2")(o).pop("seccompProfile"), security_problems,
                   "no RuntimeDefault seccomp profile"),
    "host path": (lambda o: volumes_of(find_workload(o, "lm-3"))["tmp"].update(
        hostPath={"path": "/tmp"}), security_problems, "volume tmp is ['emptyDir', 'hostPath']"),
    "no /tmp": (lambda o: container_of(o, "megha-replay")["volumeMounts"].pop(),
                security_problems, "no writable emptyDir at /tmp"),
    "token mounted": (lambda o: pod_spec(find_workload(o, "lm-1-w0")).update(
        automountServiceAccountToken=True), security_problems, "service account token"),
    # the disruption budgets
    "budget gone": (remove("PodDisruptionBudget", "lm-1"), disruption_problems,
                    "lm-1: 0 PodDisruptionBudgets"),
    "budget min available": (lambda o: budget("gm-1")(o).update(
        minAvailable=1) or budget("gm-1")(o).pop("maxUnavailable"), disruption_problems,
        "gm-1: its PodDisruptionBudget is not maxUnavailable 0"),
    "budget lets one go": (lambda o: budget("rabbitmq")(o).update(maxUnavailable=1),
                           disruption_problems, "rabbitmq: its PodDisruptionBudget is not"),
    "budget on a worker": (lambda o: budget("lm-2")(o)["selector"]["matchLabels"].update(
        {"app.kubernetes.io/instance": "lm-2-w0"}), disruption_problems,
        "lm-2-w0: a PodDisruptionBudget holds a workload without state"),
    # the secrets
    "token in the environment": (token_in_env, secret_problems,
                                 "MEGHA_LM_TOKEN comes from a Secret into the environment"),
    "worker mounts the gm's secret": (worker_with_gm_secrets, secret_problems,
                                      "lm-1-w1: mounts the Secrets ['megha-gm'"),
    "lm gets the cluster token": (lm_with_cluster_token, secret_problems,
                                  "a lm gets ['MEGHA_CLUSTER_TOKEN'] too much"),
    "unused secret": (gm_secret_with_more, secret_problems,
                      "Secret megha-gm holds ['lm-token'] that no variable names"),
    "wrong digest": (wrong_digest, secret_problems, "lm-token.sha256: not the digest"),
    "writable secrets": (writable_secrets, secret_problems, "is mounted writable"),
    "world readable": (lambda o: volumes_of(find_workload(o, "lm-3-w0"))["secrets"][
        "secret"].update(defaultMode=0o644), secret_problems, "readable by every user"),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_the_checks_fail_a_broken_testbed(objects: list[dict], name: str) -> None:
    breakage, check, expected = BREAKAGES[name]
    breakage(objects)
    found = check(objects)
    assert any(expected in problem for problem in found), found


# -- the secrets ------------------------------------------------------------------------------

def read_dir(path: Path) -> dict[str, str]:
    return {file.name: file.read_text() for file in path.iterdir() if file.name != ".gitignore"}


def test_make_secrets_writes_random_values_for_every_role(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_secrets(str(first))
    make_secrets(str(second))
    values = read_dir(first)
    assert set(values) == SECRET_FILES
    assert (first / ".gitignore").read_text().split() == ["*"]
    for name in values:
        assert stat.S_IMODE((first / name).stat().st_mode) == 0o600, name
    queues = dict(pair.split("=") for pair in values["user-tokens"].split(","))
    assert sorted(queues) == sorted(queue.name for queue in federation().queues)
    tokens = [values[name] for name in TOKENS] + [values["rabbitmq-password"], *queues.values()]
    assert all(re.fullmatch(r"[0-9a-f]{48,}", token) for token in tokens), tokens
    assert len(set(tokens)) == len(tokens)
    assert not set(tokens) & set(read_dir(second).values())
    for name in TOKENS:
        # the digest api/auth.py describes: printf %s "$TOKEN" | sha256sum
        assert values[f"{name}.sha256"] == hashlib.sha256(values[name].encode()).hexdigest()
        if shutil.which("sha256sum"):
            shell = subprocess.run(["sha256sum"], input=values[name], capture_output=True,
                                   text=True, check=True).stdout.split()[0]
            assert values[f"{name}.sha256"] == shell
    password = values["rabbitmq-password"]
    assert values["amqp-url"] == f"amqp://megha:{password}@rabbitmq:5672/%2F"
    assert conf_lines(values["rabbitmq-credentials.conf"]) == {"default_pass": password}


def test_make_secrets_keeps_values_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "secrets"
    make_secrets(str(path))
    before = read_dir(path)
    make_secrets(str(path))
    assert read_dir(path) == before
    # a value gone is made again, and what is made of it with it; the rest stays
    (path / "lm-token").unlink()
    make_secrets(str(path))
    after = read_dir(path)
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"lm-token", "lm-token.sha256"}
    assert after["lm-token.sha256"] == hashlib.sha256(after["lm-token"].encode()).hexdigest()
    make_secrets("--force", str(path))
    forced = read_dir(path)
    assert all(forced[name] != after[name] for name in SECRET_FILES)


def test_make_secrets_refuses_tokens_of_other_queues(tmp_path: Path) -> None:
    path = tmp_path / "secrets"
    path.mkdir()
    (path / "user-tokens").write_text("qx=" + "a" * 48)
    with pytest.raises(subprocess.CalledProcessError) as failure:
        make_secrets(str(path))
    assert "names the queues ['qx']" in failure.value.stderr


def k8s_tree(tmp_path: Path, tls: bool) -> Path:
    """A copy of deploy/k8s with its secrets (and certificates) made by its make-secrets.sh."""
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree, ignore=shutil.ignore_patterns("secrets", "certs"))
    make_secrets(*(["--tls"] if tls else []), script=tree / "make-secrets.sh",
                 env={"MEGHA_MAKE_CERTS": str(ROOT / "scripts" / "make-certs.sh")})
    return tree


def endpoint_hosts() -> list[str]:
    table = Endpoints.parse(literal(BASE, "megha-env", "MEGHA_ENDPOINTS")).table
    return [urlsplit(url).hostname for url in table.values()]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="make-certs.sh needs openssl")
def test_make_secrets_tls_makes_a_certificate_per_endpoint(tmp_path: Path) -> None:
    tree = k8s_tree(tmp_path, tls=True)
    certs = tree / "tls" / "certs"
    names = {path.name for path in certs.iterdir()}
    for host in endpoint_hosts():
        assert {f"{host}.pem", f"{host}.key"} <= names, host
    assert "ca.pem" in names
    assert set(read_dir(tree / "base" / "secrets")) == SECRET_FILES


def test_the_secrets_stay_out_of_git() -> None:
    ignored = (K8S / ".gitignore").read_text().split()
    assert {"base/secrets/", "tls/certs/"} <= set(ignored)
    for directory, prefix in ((BASE, SECRETS_PREFIX), (TLS, "certs/")):
        for generator in kustomization_of(directory)["secretGenerator"]:
            for entry in generator["files"]:
                assert entry.rpartition("=")[2].startswith(prefix), (generator["name"], entry)
    assert os.access(K8S / "make-secrets.sh", os.X_OK)


# -- the TLS overlay ---------------------------------------------------------------------------

def literal(directory: Path, generator: str, key: str) -> str:
    entries = next(g for g in kustomization_of(directory)["configMapGenerator"]
                   if g["name"] == generator)["literals"]
    return next(entry.partition("=")[2] for entry in entries if entry.startswith(key + "="))


def test_the_tls_overlay_covers_every_endpoint() -> None:
    # tls/kustomization.yaml: the base's table with https://, and a certificate Secret for
    # each of its hosts (the name peers verify), each with its own certificate and key
    base = literal(BASE, "megha-env", "MEGHA_ENDPOINTS")
    assert literal(TLS, "megha-env", "MEGHA_ENDPOINTS") == base.replace("=http://", "=https://")
    secrets = {g["name"]: g["files"] for g in kustomization_of(TLS)["secretGenerator"]}
    expected = {f"megha-tls-{host}": [f"tls.crt=certs/{host}.pem", f"tls.key=certs/{host}.key",
                                      "ca.pem=certs/ca.pem"] for host in endpoint_hosts()}
    expected["megha-tls-replay"] = ["ca.pem=certs/ca.pem"]
    assert secrets == expected


def strip_hashes(obj: dict, names: set[str]) -> dict:
    """Generated names lose the hash kustomize appends (`megha-env-4cfdm8b792`), and a
    Secret's values are decoded (kubectl folds long base64 lines)."""
    pattern = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
    obj = json.loads(re.sub(rf'"({pattern})-[a-z0-9]{{10}}"', r'"\1"', json.dumps(obj)))
    if obj["kind"] == "Secret":
        obj["data"] = {key: base64.b64encode(base64.b64decode(value)).decode()
                       for key, value in obj["data"].items()}
    return obj


def kubectl_render(directory: Path) -> list[dict]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here; render() stands in for it")
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    theirs = [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
    for obj in theirs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    return [strip_hashes(obj, generator_names()) for obj in theirs]


def test_kubectl_kustomize_renders_the_same(tmp_path: Path) -> None:
    tree = k8s_tree(tmp_path, tls=False)
    theirs = kubectl_render(tree)
    ours = render(tree, tree / "base" / "secrets")
    key = lambda obj: (obj["kind"], obj["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, theirs)) == sorted(map(key, ours))
    mine = {key(obj): strip_hashes(obj, set()) for obj in ours}
    for obj in theirs:
        assert obj == mine[key(obj)], key(obj)


def handshake(cert: Path, key: Path, ca: Path, hostname: str) -> None:
    """A TLS handshake in memory: a server with `cert` and `key`, a client that trusts `ca`
    alone and expects `hostname`, as a peer of the service verifies it (api/peers.py)."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(ca))
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    ends = {"client": client.wrap_bio(to_client, to_server, server_hostname=hostname),
            "server": server.wrap_bio(to_server, to_client, server_side=True)}
    done: set[str] = set()
    for _ in range(10):
        for name, end in ends.items():
            if name not in done:
                try:
                    end.do_handshake()
                    done.add(name)
                except ssl.SSLWantReadError:
                    pass
        if len(done) == 2:
            return
    raise AssertionError(f"no TLS handshake with {hostname}")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="make-certs.sh needs openssl")
def test_the_tls_overlay_gives_each_service_its_own_certificate(tmp_path: Path) -> None:
    from services.http import check_scheme, server_tls_from_env

    tree = k8s_tree(tmp_path, tls=True)
    objects = kubectl_render(tree / "tls")
    # everything the plain testbed promises holds with TLS too
    for check in CHECKS:
        assert check(objects) == [], check.__name__
    table = Endpoints.parse(config_data(objects, "megha-env")["MEGHA_ENDPOINTS"]).table
    assert all(url.startswith("https://") for url in table.values())
    for obj in workloads(objects):
        role = role_of(obj)
        if role not in ROLE_SECRETS:
            continue
        container = containers(obj)[0]
        tls = volumes_of(obj)[mount_at(container, TLS_MOUNT)["name"]]["secret"]
        assert tls["secretName"] == tls_secret_name(obj)
        environ = materialize(objects, obj, container, tmp_path / "pods" / obj["metadata"][
            "name"])
        tls_variables = {name for name in environ if name.startswith("MEGHA_TLS_")}
        if role == "loadgen":
            # the replay verifies the GMs; it serves nothing
            assert tls_variables == {"MEGHA_TLS_CA"}
            assert set(secret_data(objects, tls["secretName"])) == {"ca.pem"}
            continue
        assert tls_variables == {"MEGHA_TLS_CERT", "MEGHA_TLS_KEY", "MEGHA_TLS_CA"}
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["scheme"] == "HTTPS", (obj["metadata"], probe)
        # the service's own start-up checks accept its files and its address
        service_id = environ["MEGHA_ID"]
        server = server_tls_from_env(environ)
        check_scheme(service_id, table[service_id], server)
        handshake(Path(server.cert), Path(server.key), Path(server.ca),
                  urlsplit(table[service_id]).hostname)
