"""deploy/k8s/, the testbed on Kubernetes, checked offline: no cluster, and no kubectl needed.

`render` builds what `kubectl apply -k deploy/k8s` would send, as far as these manifests use
kustomize (resources, namespace, configMapGenerator, secretGenerator; anything else in the
kustomization fails the test, so nothing goes unchecked). Every object is validated against the
Kubernetes OpenAPI schemas that the `kubernetes-validate` package bundles, strictly (an unknown
field is an error), and `problems` checks what no schema can: that the services find each
other (MEGHA_ENDPOINTS, the broker URL), that every GM, LM and worker of the federation file
has its Deployment and Service, probes, resources, and that every secret key a pod asks for is
one make-secrets.sh writes. Broken copies prove that both checks can fail. Where kubectl is
installed, its own kustomize renders the directory too and must agree with `render`.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from api.endpoints import Endpoints
from common.federation import Federation, load_federation

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
# The schemas the manifests are checked against: what kind, maintained clouds and Debian's
# kubectl have run for a while; the manifests use nothing newer.
KUBERNETES_VERSION = "1.30"
# The contract with the services' authentication: exactly these variables, from make-secrets.sh
SECRET_KEYS = {"MEGHA_CLUSTER_TOKEN", "MEGHA_USER_TOKENS", "MEGHA_RABBITMQ_PASSWORD"}
BROKER_USER = "megha"
SUPPORTED = {"apiVersion", "kind", "namespace", "resources", "configMapGenerator",
             "secretGenerator"}
GENERATOR_KEYS = {"name", "files", "literals", "envs"}
CLUSTER_SCOPED = {"Namespace"}
WORKLOADS = {"Deployment", "StatefulSet", "Job"}
SERVICE_IMAGE_KINDS = {"Deployment", "StatefulSet"}


# -- rendering ------------------------------------------------------------------------------

def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as kustomize's `envs` reads them (blank lines and # comments skipped)."""
    pairs = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not KEY=VALUE: {line!r}"
        pairs[key.strip()] = value
    return pairs


def generated(generator: dict, directory: Path, secrets_env: Path) -> dict[str, str]:
    unknown = set(generator) - GENERATOR_KEYS
    assert not unknown, f"generator {generator.get('name')}: {unknown} not rendered by this test"
    data: dict[str, str] = {}
    for entry in generator.get("files", []):
        key, sep, name = entry.partition("=")
        name, key = (name, key) if sep else (key, Path(key).name)
        path = (directory / name).resolve()
        assert path.is_relative_to(directory.resolve()), f"{entry}: kustomize reads no file above"
        data[key] = path.read_text()
    for literal in generator.get("literals", []):
        key, sep, value = literal.partition("=")
        assert sep, f"literal {literal!r} is not KEY=VALUE"
        data[key] = value
    for name in generator.get("envs", []):
        data.update(read_env_file(secrets_env if name == "secrets.env" else directory / name))
    return data


def render(directory: Path, secrets_env: Path) -> list[dict]:
    """The objects `kubectl kustomize directory` makes, generator names without their hash."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED
    assert not unknown, f"kustomization.yaml uses {unknown}, which this test does not render"
    objects: list[dict] = []
    for resource in kustomization["resources"]:
        path = directory / resource
        assert path.is_file(), f"resource {resource} is not a file of {directory}"
        objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for generator in kustomization.get("configMapGenerator", []):
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": generator["name"]},
                        "data": generated(generator, directory, secrets_env)})
    for generator in kustomization.get("secretGenerator", []):
        data = generated(generator, directory, secrets_env)
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


def generator_names(kind: str) -> set[str]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    key = {"ConfigMap": "configMapGenerator", "Secret": "secretGenerator"}[kind]
    return {generator["name"] for generator in kustomization.get(key, [])}


# -- what the rendered objects hold -----------------------------------------------------------

def find(objects: list[dict], kind: str, name: str) -> dict | None:
    return next((obj for obj in objects
                 if obj["kind"] == kind and obj["metadata"]["name"] == name), None)


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


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


def object_name(service_id: str) -> str:
    """A worker id (`lm-1/w0`) as a Kubernetes name (`lm-1-w0`)."""
    return service_id.replace("/", "-")


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


# -- the checks no schema makes ----------------------------------------------------------------

def problems(objects: list[dict], secret_keys: set[str]) -> list[str]:
    """Everything wrong with the rendered testbed beyond its schema; empty when it is right."""
    found: list[str] = []
    fed = federation()
    ids = service_ids(fed)
    namespace = next((obj["metadata"].get("namespace") for obj in objects
                      if obj["kind"] != "Namespace"), None)
    compose_services = compose()["services"]
    megha_image = compose()["x-megha"]["image"]
    compose_commands = {service["environment"]["MEGHA_ID"]: service["command"]
                        for service in compose_services.values()
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
        deployment = find(objects, "Deployment", name) or find(objects, "StatefulSet", name)
        service = find(objects, "Service", name)
        if deployment is None:
            found.append(f"{role} {service_id}: no Deployment {name}")
        else:
            running = [env_value(c, "MEGHA_ID") for c in containers(deployment)]
            if running != [service_id]:
                found.append(f"{role} {service_id}: Deployment {name} runs MEGHA_ID {running}")
            command = [c.get("command") for c in containers(deployment)]
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
        if obj["kind"] in ("Deployment", "StatefulSet"):
            labels = obj["spec"]["template"]["metadata"].get("labels", {})
            if not selects(obj["spec"]["selector"].get("matchLabels", {}), labels):
                found.append(f"{obj['kind']} {obj['metadata']['name']}: selector misses its pods")
        if obj["kind"] == "Service":
            selector = obj["spec"].get("selector", {})
            if not any(selects(selector, w["spec"]["template"]["metadata"].get("labels", {}))
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
        spec = pod_spec(obj)
        volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
        for volume in volumes.values():
            if "configMap" in volume and volume["configMap"]["name"] not in generator_names(
                    "ConfigMap"):
                found.append(f"{where}: volume {volume['name']} names no generated ConfigMap")
            if "secret" in volume and volume["secret"]["secretName"] not in generator_names(
                    "Secret"):
                found.append(f"{where}: volume {volume['name']} names no generated Secret")
        for container in containers(obj):
            found += container_problems(objects, obj, container, volumes, secret_keys,
                                        megha_image)
    found += broker_problems(objects)
    found += replay_problems(objects)
    return found


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
    targets = [w for w in workloads(objects)
               if selects(selector, w["spec"]["template"]["metadata"].get("labels", {}))]
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


def container_problems(objects: list[dict], obj: dict, container: dict, volumes: dict,
                       secret_keys: set[str], megha_image: str) -> list[str]:
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
    if obj["kind"] in SERVICE_IMAGE_KINDS:
        for probe in ("readinessProbe", "livenessProbe"):
            spec = container.get(probe)
            if not spec:
                found.append(f"{where}: no {probe}")
            elif is_megha and (spec.get("httpGet", {}).get("path") != "/healthz"
                               or not port_numbers(container, spec["httpGet"].get("port"))):
                found.append(f"{where}: {probe} is not GET /healthz on a port it listens on")
    # variables from generated objects only, secret keys from make-secrets.sh only
    for source in container.get("envFrom", []):
        for kind, ref in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if ref in source and source[ref]["name"] not in generator_names(kind):
                found.append(f"{where}: envFrom {source[ref]['name']} is no generated {kind}")
    defined = set(environment(objects, {"envFrom": container.get("envFrom", [])}))
    for item in container.get("env", []):
        for kind, ref in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
            source = item.get("valueFrom", {}).get(ref)
            if source is None:
                continue
            if source["name"] not in generator_names(kind):
                found.append(f"{where}: {item['name']} from {source['name']}, no generated {kind}")
            elif kind == "Secret" and source["key"] not in secret_keys:
                found.append(f"{where}: {item['name']} from secret key {source['key']}, which "
                             f"make-secrets.sh does not write")
            elif kind == "ConfigMap" and source["key"] not in config_data(objects, source["name"]):
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
        directory, _, key = config_path.rpartition("/")
        mounted = [volumes.get(m["name"], {}) for m in container.get("volumeMounts", [])
                   if m["mountPath"].rstrip("/") == directory]
        names = [v["configMap"]["name"] for v in mounted if "configMap" in v]
        if not names or key not in config_data(objects, names[0]):
            found.append(f"{where}: MEGHA_CONFIG {config_path} is not a mounted ConfigMap key")
    return found


def broker_problems(objects: list[dict]) -> list[str]:
    """Every broker URL logs in as `megha` with the generated password, at the broker's
    Service; the broker creates that user with that password (never guest)."""
    found = []
    broker = find(objects, "Deployment", "rabbitmq") or find(objects, "StatefulSet", "rabbitmq")
    service = find(objects, "Service", "rabbitmq")
    if broker is None or service is None:
        return ["no rabbitmq workload and Service"]
    rabbit = containers(broker)[0]
    env = {item["name"]: item for item in rabbit.get("env", [])}
    if env.get("RABBITMQ_DEFAULT_USER", {}).get("value") != BROKER_USER:
        found.append(f"rabbitmq: RABBITMQ_DEFAULT_USER is not {BROKER_USER}")
    password = env.get("RABBITMQ_DEFAULT_PASS", {}).get("valueFrom", {}).get("secretKeyRef", {})
    if password.get("key") != "MEGHA_RABBITMQ_PASSWORD":
        found.append("rabbitmq: RABBITMQ_DEFAULT_PASS is not MEGHA_RABBITMQ_PASSWORD")
    amqp_ports = {item["port"] for item in service["spec"]["ports"]}
    for obj in workloads(objects):
        for container in containers(obj):
            url = env_value(container, "MEGHA_AMQP_URL")
            if url is None:
                continue
            parts = urlsplit(url)
            where = f"{obj['metadata']['name']}: MEGHA_AMQP_URL"
            if parts.username != BROKER_USER:
                found.append(f"{where} logs in as {parts.username}, not {BROKER_USER}")
            if parts.password != "$(MEGHA_RABBITMQ_PASSWORD)":
                found.append(f"{where}: the password is not $(MEGHA_RABBITMQ_PASSWORD)")
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


# -- fixtures ---------------------------------------------------------------------------------

def make_secrets(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(K8S / "make-secrets.sh"), *args], capture_output=True,
                          text=True, check=True, timeout=60)


@pytest.fixture(scope="module")
def secrets_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("k8s") / "secrets.env"
    make_secrets(str(path))
    return path


@pytest.fixture(scope="module")
def secret_keys(secrets_env: Path) -> set[str]:
    return set(read_env_file(secrets_env))


@pytest.fixture(scope="module")
def rendered(secrets_env: Path) -> list[dict]:
    return render(K8S, secrets_env)


@pytest.fixture
def objects(rendered: list[dict]) -> list[dict]:
    return copy.deepcopy(rendered)


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
    assert {"Namespace", "ConfigMap", "Secret", "Deployment", "Service", "Job"} <= kinds


def test_the_services_find_each_other_and_their_secrets(rendered: list[dict],
                                                        secret_keys: set[str]) -> None:
    assert problems(rendered, secret_keys) == []


def test_every_federation_id_has_a_deployment_and_a_service(rendered: list[dict]) -> None:
    # the same as problems() checks, said plainly: 2 GMs, 3 LMs, 6 worker agents
    ids = service_ids(federation())
    assert sorted(role for role in ids.values()) == ["gm"] * 2 + ["lm"] * 3 + ["worker"] * 6
    for service_id in ids:
        assert find(rendered, "Deployment", object_name(service_id)) is not None
        assert find(rendered, "Service", object_name(service_id)) is not None


def test_the_federation_file_is_deploy_federation_toml() -> None:
    copy_ = (K8S / "federation.toml").read_bytes()
    assert copy_ == (ROOT / "deploy" / "federation.toml").read_bytes(), (
        "deploy/k8s/federation.toml differs from deploy/federation.toml (kustomize reads no "
        "file outside deploy/k8s): cp deploy/federation.toml deploy/k8s/")


# -- the checks can fail -----------------------------------------------------------------------

def gm_deployment(objects: list[dict]) -> dict:
    return copy.deepcopy(find(objects, "Deployment", "gm-1"))


def drop_replicas_type(obj: dict) -> None:
    obj["spec"]["replicas"] = "one"


def drop_selector(obj: dict) -> None:
    del obj["spec"]["selector"]


def misspell_a_field(obj: dict) -> None:
    pod_spec(obj)["containers"][0]["imagePulPolicy"] = "Always"


def port_as_text(obj: dict) -> None:
    pod_spec(obj)["containers"][0]["ports"][0]["containerPort"] = "eight thousand"


@pytest.mark.parametrize("breakage", [drop_replicas_type, drop_selector, misspell_a_field,
                                      port_as_text])
def test_the_schema_check_fails_a_broken_object(rendered: list[dict],
                                                breakage: Callable[[dict], None]) -> None:
    obj = gm_deployment(rendered)
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    breakage(obj)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_schema_check_knows_no_misspelt_kind(rendered: list[dict]) -> None:
    obj = gm_deployment(rendered)
    obj["kind"] = "Deploymnet"
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def remove(kind: str, name: str) -> Callable[[list[dict]], None]:
    def breakage(objects: list[dict]) -> None:
        objects.remove(find(objects, kind, name))
    return breakage


def container_of(objects: list[dict], name: str) -> dict:
    return pod_spec(find(objects, "Deployment", name))["containers"][0]


def env_item(objects: list[dict], name: str, variable: str) -> dict:
    return next(item for item in container_of(objects, name)["env"]
                if item["name"] == variable)


def endpoints_typo(objects: list[dict]) -> None:
    data = config_data(objects, "megha-env")
    data["MEGHA_ENDPOINTS"] = data["MEGHA_ENDPOINTS"].replace("http://lm-2:", "http://lm2:")


BREAKAGES: dict[str, tuple[Callable[[list[dict]], None], str]] = {
    "lm service gone": (remove("Service", "lm-2"), "lm lm-2: no Service lm-2"),
    "worker gone": (remove("Deployment", "lm-3-w1"), "no Deployment lm-3-w1"),
    "lm not headless": (lambda o: find(o, "Service", "lm-1")["spec"].pop("clusterIP"),
                        "not headless"),
    "endpoint typo": (endpoints_typo, "no Service 'lm2'"),
    "wrong id": (lambda o: env_item(o, "lm-1", "MEGHA_ID").update(value="lm-2"),
                 "Deployment lm-1 runs MEGHA_ID ['lm-2']"),
    "no readiness": (lambda o: container_of(o, "lm-2-w0").pop("readinessProbe"),
                     "no readinessProbe"),
    "no liveness": (lambda o: container_of(o, "rabbitmq").pop("livenessProbe"),
                    "no livenessProbe"),
    "probe port": (lambda o: container_of(o, "gm-2")["livenessProbe"]["httpGet"].update(
        port=9000), "livenessProbe is not GET /healthz"),
    "no requests": (lambda o: container_of(o, "gm-1")["resources"].pop("requests"),
                    "no requests"),
    "secret key typo": (lambda o: env_item(o, "lm-3", "MEGHA_CLUSTER_TOKEN")["valueFrom"][
        "secretKeyRef"].update(key="MEGHA_CLUSTER_TOKN"), "MEGHA_CLUSTER_TOKN"),
    "guest broker": (lambda o: env_item(o, "gm-1", "MEGHA_AMQP_URL").update(
        value="amqp://guest:guest@rabbitmq:5672/%2F"), "logs in as guest"),
    "pull policy": (lambda o: container_of(o, "lm-1-w0").update(imagePullPolicy="Always"),
                    "not IfNotPresent"),
    "selector": (lambda o: find(o, "Deployment", "lm-1")["spec"]["selector"]["matchLabels"]
                 .update({"app.kubernetes.io/instance": "lm-9"}), "selector misses its pods"),
    "config not mounted": (lambda o: container_of(o, "gm-2").pop("volumeMounts"),
                           "MEGHA_CONFIG /etc/megha/federation.toml is not a mounted"),
    "other command": (lambda o: container_of(o, "lm-2").update(
        command=["python", "-m", "services.gm"]), "compose runs ['python', '-m', 'services.lm']"),
    "endpoint missing": (lambda o: config_data(o, "megha-env").update(
        MEGHA_ENDPOINTS=config_data(o, "megha-env")["MEGHA_ENDPOINTS"].replace(
            ",lm-3/w1=http://lm-3-w1:8000", "")), "ids ['lm-3/w1'] are in only one"),
    "no trace": (lambda o: pod_spec(find(o, "Job", "megha-replay"))["containers"][0].update(
        command=["python", "-m", "megha", "replay", "--trace", "/app/deploy/workloads/x.tr"]),
        "/app/deploy/workloads/x.tr is no workload"),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_the_cross_checks_fail_a_broken_testbed(objects: list[dict], secret_keys: set[str],
                                                name: str) -> None:
    breakage, expected = BREAKAGES[name]
    breakage(objects)
    found = problems(objects, secret_keys)
    assert any(expected in problem for problem in found), found


# -- the secrets ------------------------------------------------------------------------------

def test_make_secrets_writes_random_keys_for_every_queue(tmp_path: Path) -> None:
    first, second = tmp_path / "a.env", tmp_path / "b.env"
    make_secrets(str(first))
    make_secrets(str(second))
    values = read_env_file(first)
    assert set(values) == SECRET_KEYS
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    queues = dict(pair.split("=") for pair in values["MEGHA_USER_TOKENS"].split(","))
    assert sorted(queues) == sorted(queue.name for queue in federation().queues)
    tokens = [values["MEGHA_CLUSTER_TOKEN"], values["MEGHA_RABBITMQ_PASSWORD"], *queues.values()]
    assert all(re.fullmatch(r"[0-9a-f]{48,}", token) for token in tokens), tokens
    assert len(set(tokens)) == len(tokens)
    assert not set(tokens) & set(read_env_file(second).values())


def test_make_secrets_keeps_a_file_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "secrets.env"
    make_secrets(str(path))
    before = path.read_text()
    make_secrets(str(path))
    assert path.read_text() == before
    make_secrets("--force", str(path))
    assert path.read_text() != before


def test_the_secrets_file_stays_out_of_git() -> None:
    assert "secrets.env" in (K8S / ".gitignore").read_text().split()
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert [g["envs"] for g in kustomization["secretGenerator"]] == [["secrets.env"]]
    assert os.access(K8S / "make-secrets.sh", os.X_OK)


# -- kubectl's kustomize, where there is one ---------------------------------------------------

def comparable(obj: dict) -> dict:
    """Generated names lose the hash kustomize appends (`megha-env-4cfdm8b792`), and a
    Secret's values are decoded (kubectl folds long base64 lines)."""
    names = "|".join(re.escape(name) for name in
                     generator_names("ConfigMap") | generator_names("Secret"))
    obj = json.loads(re.sub(rf'"({names})-[a-z0-9]{{10}}"', r'"\1"', json.dumps(obj)))
    if obj["kind"] == "Secret":
        obj["data"] = {key: base64.b64decode(value).decode() for key, value in obj["data"].items()}
    return obj


def test_kubectl_kustomize_renders_the_same(tmp_path: Path, secrets_env: Path,
                                            rendered: list[dict]) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl here; render() stands in for it")
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree, ignore=shutil.ignore_patterns("secrets.env"))
    shutil.copy(secrets_env, tree / "secrets.env")
    result = subprocess.run([kubectl, "kustomize", str(tree)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    theirs = [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
    for obj in theirs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    key = lambda obj: (obj["kind"], obj["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, map(comparable, theirs))) == sorted(map(key, rendered))
    ours = {key(obj): comparable(obj) for obj in rendered}
    for obj in map(comparable, theirs):
        assert obj == ours[key(obj)], key(obj)


def test_render_refuses_what_it_cannot_render(tmp_path: Path, secrets_env: Path) -> None:
    tree = tmp_path / "k8s"
    shutil.copytree(K8S, tree, ignore=shutil.ignore_patterns("secrets.env"))
    path = tree / "kustomization.yaml"
    path.write_text(path.read_text() + "patches:\n  - path: more.yaml\n")
    with pytest.raises(AssertionError, match="patches"):
        render(tree, secrets_env)
