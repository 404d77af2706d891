"""The Kubernetes manifests of k8s/base against the real CRD schemas (Strimzi 1.2.0, Flink Kubernetes
Operator 1.15.0, Prometheus Operator 0.93.0) in ../shared/k8s-schemas, validated strictly (SOURCE.md
there: unknown fields are errors, as Kubernetes prunes or rejects them), core kinds (Deployment, Service,
ConfigMap, Secret...) against their required fields and the fields this project uses, and against the
code they deploy: topic names, key groups, parallelism, the crawl configuration, the job's command line
and the image. The workloads (tests/unit/test_k8s_workloads.py), the monitoring
(tests/unit/test_k8s_monitoring.py) and the rendered kustomizations (tests/unit/test_k8s_kustomize.py)
have files of their own; they use the loading and validation helpers of this one."""
from __future__ import annotations

import copy
import functools
import importlib.metadata
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from crawler.kafka_broker import MAX_MESSAGE_BYTES
from tests.paths import ROOT, SHARED
from udfs.config import load_config
from udfs.jobconfig import JobPolicy
from udfs.records import ALL_TOPICS, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES

K8S = ROOT / "k8s"
BASE = K8S / "base"
# Files of a kustomization directory that are kustomize's own, not resources.
KUSTOMIZE_FILES = {"kustomization.yaml", "kustomizeconfig.yaml"}
DOCKERFILE = ROOT / "docker" / "Dockerfile"
CRD_FILES = (
    "040-Crd-kafka.yaml",
    "043-Crd-kafkatopic.yaml",
    "045-Crd-kafkanodepool.yaml",
    "flinkdeployments.flink.apache.org-v1.yml",
    "flinksessionjobs.flink.apache.org-v1.yml",
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
)
# Kinds of the Kubernetes core API: no CRD to validate against, so checked for their required fields
# and, for the pod templates, against the fields this project uses (core_shape_errors).
CORE_KINDS = {"Namespace": "v1", "ConfigMap": "v1", "PersistentVolumeClaim": "v1", "ServiceAccount": "v1",
              "Secret": "v1", "Service": "v1", "Deployment": "apps/v1"}
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# ---------------------------------------------------------------------------------------------------
# Loading and strict validation


def _strict(schema: Any) -> Any:
    """SOURCE.md: an object schema with `properties`, no `additionalProperties` and no
    `x-kubernetes-preserve-unknown-fields` accepts no other field (Kubernetes would drop or reject it).
    Returns a new schema; walks only subschemas, so a field named like a keyword is left alone."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("pattern"), str):
        out["pattern"] = _python_pattern(out["pattern"])
    if "properties" in out:
        out["properties"] = {name: _strict(sub) for name, sub in out["properties"].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in out:
            out[key] = [_strict(sub) for sub in out[key]]
    if ("properties" in out and out.get("type", "object") == "object" and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _python_pattern(pattern: str) -> str:
    """A CRD's `pattern` (Go RE2 syntax, as Kubernetes evaluates it) in a form Python's re compiles:
    RE2 accepts an inline flag group such as `(?i)` after `^` (the PrometheusRule CRD's
    partial_response_strategy), Python only at the start of the expression."""
    if pattern.startswith("^(?i)"):
        pattern = "(?i)^" + pattern[len("^(?i)"):]
    re.compile(pattern)
    return pattern


@functools.cache
def validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) → a validator of the whole resource, for every version the CRDs serve."""
    found: dict[tuple[str, str], jsonschema.protocols.Validator] = {}
    for name in CRD_FILES:
        crd = yaml.load((SHARED / "k8s-schemas" / name).read_text(encoding="utf-8"), Loader=Loader)
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served"):
                continue
            api_version = f"{group}/{version['name']}"
            schema = _strict(version["schema"]["openAPIV3Schema"])
            schema.setdefault("properties", {}).update({
                "apiVersion": {"type": "string", "enum": [api_version]},
                "kind": {"type": "string", "enum": [kind]},
                "metadata": {"type": "object"},  # not described by CRDs: see metadata_errors
            })
            schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
            jsonschema.Draft7Validator.check_schema(schema)
            found[(api_version, kind)] = jsonschema.Draft7Validator(schema)
    return found


def manifest_docs(folder: Path = BASE) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Every document of the resource files of a kustomization folder (k8s/base)."""
    for path in sorted(folder.glob("*.yaml")):
        if path.name in KUSTOMIZE_FILES:
            continue
        for index, doc in enumerate(yaml.load_all(path.read_text(encoding="utf-8"), Loader=Loader)):
            if doc is not None:
                yield path.name, index, doc


DOCS = list(manifest_docs())


def doc_id(item: tuple[str, int, dict[str, Any]]) -> str:
    name, index, doc = item
    return f"{name}#{index}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def metadata_errors(doc: dict[str, Any]) -> list[str]:
    """What Kubernetes' API server checks of metadata and the CRD schemas leave out."""
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return ["metadata must be a mapping"]
    errors = []
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(f"metadata.name {name!r} is not a DNS-1123 subdomain")
    namespace = meta.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or len(namespace) > 63
                                  or not DNS1123_LABEL.fullmatch(namespace)):
        errors.append(f"metadata.namespace {namespace!r} is not a DNS-1123 label")
    for field in ("labels", "annotations"):
        values = meta.get(field, {})
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            errors.append(f"metadata.{field} values must be strings")
    unknown = set(meta) - {"name", "namespace", "labels", "annotations"}
    if unknown:
        errors.append(f"metadata has unexpected fields {sorted(unknown)}")
    return errors


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every reason the API server (with the operators' CRDs installed) would refuse `doc`."""
    errors = metadata_errors(doc)
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key in validators():
        errors += [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                   for e in validators()[key].iter_errors(doc)]
    elif doc.get("kind") in CORE_KINDS:
        errors += core_shape_errors(doc)
    else:
        errors.append(f"no schema for apiVersion {key[0]!r} kind {key[1]!r}")
    return errors


def core_shape_errors(doc: dict[str, Any]) -> list[str]:
    kind = doc["kind"]
    if doc.get("apiVersion") != CORE_KINDS[kind]:
        return [f"{kind} must be apiVersion {CORE_KINDS[kind]}"]
    if kind == "ConfigMap":
        data = doc.get("data", {})
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            return ["ConfigMap data must map keys to strings"]
    if kind == "Secret":
        return secret_errors(doc)
    if kind == "PersistentVolumeClaim":
        spec = doc.get("spec", {})
        if not spec.get("accessModes") or not spec.get("resources", {}).get("requests", {}).get("storage"):
            return ["PersistentVolumeClaim needs spec.accessModes and spec.resources.requests.storage"]
    if kind == "Deployment":
        return deployment_errors(doc)
    if kind == "Service":
        return service_errors(doc)
    return []


# The fields of the core API's objects that these manifests may use. Kubernetes knows more; a field
# outside these sets is most likely a misspelling (the API server would drop or refuse it), and a new
# one is added here on purpose.
DEPLOYMENT_SPEC = {"replicas", "selector", "template", "strategy", "minReadySeconds", "revisionHistoryLimit",
                   "progressDeadlineSeconds", "paused"}
POD_SPEC = {"containers", "initContainers", "volumes", "securityContext", "serviceAccountName",
            "automountServiceAccountToken", "nodeSelector", "affinity", "tolerations", "topologySpreadConstraints",
            "terminationGracePeriodSeconds", "priorityClassName", "imagePullSecrets", "enableServiceLinks",
            "restartPolicy"}
CONTAINER = {"name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "ports", "resources",
             "securityContext", "livenessProbe", "readinessProbe", "startupProbe", "volumeMounts", "workingDir",
             "lifecycle", "terminationMessagePolicy"}
PROBE_HANDLERS = {"exec", "httpGet", "tcpSocket", "grpc"}
PROBE = PROBE_HANDLERS | {"initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold",
                          "successThreshold", "terminationGracePeriodSeconds"}
POD_SECURITY = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "fsGroupChangePolicy", "seccompProfile",
                "supplementalGroups", "sysctls", "seLinuxOptions", "appArmorProfile"}
CONTAINER_SECURITY = {"allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities", "runAsNonRoot",
                      "runAsUser", "runAsGroup", "privileged", "seccompProfile", "seLinuxOptions", "appArmorProfile"}
VOLUME_SOURCES = {"configMap", "secret", "persistentVolumeClaim", "emptyDir", "projected", "downwardAPI"}
VOLUME_MOUNT = {"name", "mountPath", "readOnly", "subPath", "subPathExpr", "mountPropagation", "recursiveReadOnly"}
CONTAINER_PORT = {"name", "containerPort", "protocol", "hostPort", "hostIP"}
ENV_VAR = {"name", "value", "valueFrom"}
RESOURCES = {"requests", "limits"}
SERVICE_SPEC = {"type", "selector", "ports", "clusterIP", "sessionAffinity", "internalTrafficPolicy",
                "externalTrafficPolicy", "ipFamilyPolicy", "publishNotReadyAddresses"}
SERVICE_PORT = {"name", "port", "targetPort", "protocol", "appProtocol", "nodePort"}
IANA_SVC_NAME = re.compile(r"(?=.{1,15}$)[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def _unknown(where: str, value: Any, allowed: set[str]) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where} must be a mapping"]
    return [f"{where}: {name!r} was unexpected" for name in sorted(set(value) - allowed)]


def _probe_errors(where: str, probe: dict[str, Any], port_names: set[str]) -> list[str]:
    errors = _unknown(where, probe, PROBE)
    handlers = sorted(PROBE_HANDLERS & set(probe))
    if len(handlers) != 1:
        return errors + [f"{where} needs exactly one of {sorted(PROBE_HANDLERS)}, has {handlers}"]
    handler = probe[handlers[0]]
    if handlers[0] == "exec" and not (isinstance(handler.get("command"), list) and handler["command"]):
        errors.append(f"{where}.exec needs a command list")
    port = handler.get("port") if isinstance(handler, dict) else None
    if handlers[0] in {"tcpSocket", "httpGet", "grpc"}:
        if port is None:
            errors.append(f"{where}.{handlers[0]} needs a port")
        elif isinstance(port, str) and port not in port_names:
            errors.append(f"{where}.{handlers[0]}.port {port!r} names no port of the container")
    return errors


def _container_errors(where: str, container: dict[str, Any], volumes: set[str]) -> list[str]:
    errors = _unknown(where, container, CONTAINER)
    if not isinstance(container.get("name"), str) or not DNS1123_LABEL.fullmatch(container.get("name", "")):
        errors.append(f"{where}.name must be a DNS-1123 label")
    if not isinstance(container.get("image"), str) or not container["image"]:
        errors.append(f"{where}.image is required")
    for key in ("command", "args"):
        if key in container and not all(isinstance(arg, str) for arg in container[key]):
            errors.append(f"{where}.{key} must be a list of strings")
    port_names = set()
    for port in container.get("ports", []):
        errors += _unknown(f"{where}.ports", port, CONTAINER_PORT)
        if not isinstance(port.get("containerPort"), int) or not 0 < port["containerPort"] < 65536:
            errors.append(f"{where}.ports: containerPort must be an integer port")
        if "name" in port:
            if not IANA_SVC_NAME.fullmatch(port["name"]):
                errors.append(f"{where}.ports: name {port['name']!r} is not an IANA service name (<= 15 characters)")
            port_names.add(port["name"])
    for env in container.get("env", []):
        errors += _unknown(f"{where}.env", env, ENV_VAR)
        if "value" in env and not isinstance(env["value"], str):
            errors.append(f"{where}.env {env.get('name')}: value must be a string")
    errors += _unknown(f"{where}.resources", container.get("resources", {}), RESOURCES)
    errors += _unknown(f"{where}.securityContext", container.get("securityContext", {}), CONTAINER_SECURITY)
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        if key in container:
            errors += _probe_errors(f"{where}.{key}", container[key], port_names)
    for mount in container.get("volumeMounts", []):
        errors += _unknown(f"{where}.volumeMounts", mount, VOLUME_MOUNT)
        if mount.get("name") not in volumes:
            errors.append(f"{where}.volumeMounts: {mount.get('name')!r} names no volume of the pod")
        if not str(mount.get("mountPath", "")).startswith("/"):
            errors.append(f"{where}.volumeMounts: mountPath must be absolute")
    return errors


def pod_spec_errors(where: str, spec: dict[str, Any]) -> list[str]:
    """A pod template's spec: known fields, volumes with one source each, containers that mount them."""
    errors = _unknown(where, spec, POD_SPEC)
    volumes: set[str] = set()
    for volume in spec.get("volumes", []):
        sources = sorted(VOLUME_SOURCES & set(volume))
        errors += _unknown(f"{where}.volumes", volume, VOLUME_SOURCES | {"name"})
        if len(sources) != 1:
            errors.append(f"{where}.volumes: {volume.get('name')!r} needs exactly one source, has {sources}")
        volumes.add(volume.get("name"))
    if len(volumes) != len(spec.get("volumes", [])):
        errors.append(f"{where}.volumes: names must be unique")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return errors + [f"{where}.containers is required"]
    names = [c.get("name") for c in containers + spec.get("initContainers", [])]
    if len(set(names)) != len(names):
        errors.append(f"{where}: container names must be unique")
    for key in ("initContainers", "containers"):
        for container in spec.get(key, []):
            errors += _container_errors(f"{where}.{key}[{container.get('name')}]", container, volumes)
    errors += _unknown(f"{where}.securityContext", spec.get("securityContext", {}), POD_SECURITY)
    return errors


def deployment_errors(doc: dict[str, Any]) -> list[str]:
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return ["Deployment needs spec"]
    errors = _unknown("spec", spec, DEPLOYMENT_SPEC)
    selector = spec.get("selector", {}).get("matchLabels")
    template = spec.get("template", {})
    labels = template.get("metadata", {}).get("labels", {})
    if not selector:
        errors.append("spec.selector.matchLabels is required")
    elif any(labels.get(k) != v for k, v in selector.items()):
        errors.append("spec.selector.matchLabels must match spec.template.metadata.labels")
    errors += _unknown("spec.template", template, {"metadata", "spec"})
    return errors + pod_spec_errors("spec.template.spec", template.get("spec", {}))


def service_errors(doc: dict[str, Any]) -> list[str]:
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return ["Service needs spec"]
    errors = _unknown("spec", spec, SERVICE_SPEC)
    ports = spec.get("ports")
    if not isinstance(ports, list) or not ports:
        return errors + ["spec.ports is required"]
    for port in ports:
        errors += _unknown("spec.ports", port, SERVICE_PORT)
        if not isinstance(port.get("port"), int) or not 0 < port["port"] < 65536:
            errors.append("spec.ports: port must be an integer port")
        if len(ports) > 1 and "name" not in port:
            errors.append("spec.ports: every port needs a name when there are several")
    if not spec.get("selector"):
        errors.append("spec.selector is required (these manifests have no selector-less Service)")
    return errors


def secret_errors(doc: dict[str, Any]) -> list[str]:
    errors = _unknown("<root>", doc, {"apiVersion", "kind", "metadata", "type", "data", "stringData", "immutable"})
    for key in ("data", "stringData"):
        values = doc.get(key, {})
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            errors.append(f"Secret {key} must map keys to strings")
            continue
        errors += [f"Secret {key}: key {name!r} is not a valid key" for name in values
                   if not re.fullmatch(r"[-._a-zA-Z0-9]+", name)]
    for name, value in doc.get("data", {}).items() if isinstance(doc.get("data"), dict) else ():
        if not re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", value) or len(value) % 4:
            errors.append(f"Secret data: {name!r} is not base64")
    return errors


# ---------------------------------------------------------------------------------------------------
# Every manifest is valid


def test_manifests_exist_for_every_operator_kind():
    kinds = {doc["kind"] for _, _, doc in DOCS}
    assert {"Kafka", "KafkaNodePool", "KafkaTopic", "FlinkDeployment", "ConfigMap", "Deployment", "Service",
            "PodMonitor", "PrometheusRule"} <= kinds


def test_the_base_kustomization_lists_every_resource_file():
    kustomization = yaml.load((BASE / "kustomization.yaml").read_text(encoding="utf-8"), Loader=Loader)
    files = sorted(p.name for p in BASE.glob("*.yaml") if p.name not in KUSTOMIZE_FILES)
    assert sorted(kustomization["resources"]) == files
    assert not list(K8S.glob("*.yaml")), "manifests live in k8s/base and k8s/overlays/*"


@pytest.mark.parametrize("item", DOCS, ids=doc_id)
def test_manifest_is_accepted_by_its_strict_schema(item):
    assert schema_errors(item[2]) == []


# ---------------------------------------------------------------------------------------------------
# The strict validation rejects what Kubernetes would reject


def _first(kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(doc for _, _, doc in DOCS if doc["kind"] == kind))


def _misspell_upgrade_mode(doc):
    doc["spec"]["job"]["upgradeMod"] = doc["spec"]["job"].pop("upgradeMode")


def _misspell_pod_template_field(doc):
    doc["spec"]["podTemplate"]["spec"]["containers"][0]["volumeMount"] = []


def _bad_flink_version(doc):
    doc["spec"]["flinkVersion"] = "v2_9"


def _bad_upgrade_mode(doc):
    doc["spec"]["job"]["upgradeMode"] = "checkpoint"


def _string_parallelism(doc):
    doc["spec"]["job"]["parallelism"] = "16"


def _bad_listener_type(doc):
    doc["spec"]["kafka"]["listeners"][0]["type"] = "clusterip"


def _misspelled_kafka_field(doc):
    doc["spec"]["kafka"]["listener"] = doc["spec"]["kafka"].pop("listeners")


def _bad_role(doc):
    doc["spec"]["roles"] = ["brokers"]


def _zero_partitions(doc):
    doc["spec"]["partitions"] = 0


def _misspelled_topic_field(doc):
    doc["spec"]["replica"] = doc["spec"].pop("replicas")


def _wrong_api_version(doc):
    doc["apiVersion"] = "kafka.strimzi.io/v1beta2"  # no longer served by Strimzi 1.2


def _bad_name(doc):
    doc["metadata"]["name"] = "Crawl_Frontier"


def _misspelt_pod_monitor_endpoint(doc):
    doc["spec"]["podMetricsEndpoints"][0]["intervall"] = doc["spec"]["podMetricsEndpoints"][0].pop("interval")


def _bad_rule_duration(doc):
    doc["spec"]["groups"][0]["rules"][0]["for"] = "30 minutes"


def _misspelt_rule_field(doc):
    doc["spec"]["groups"][0]["rules"][0]["annotation"] = doc["spec"]["groups"][0]["rules"][0].pop("annotations")


def _misspelt_probe(doc):
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["readinessprobe"] = container.pop("readinessProbe")


def _two_probe_handlers(doc):
    doc["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["tcpSocket"] = {"port": 8787}


def _selector_not_matching(doc):
    doc["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "other"


def _mount_of_no_volume(doc):
    doc["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["name"] = "nowhere"


def _misspelt_security_context(doc):
    doc["spec"]["template"]["spec"]["securityContext"]["runAsNonroot"] = True


def _service_without_port(doc):
    doc["spec"]["ports"] = []


# (kind, breakage, words of the error it must cause)
BROKEN = [
    ("FlinkDeployment", _misspell_upgrade_mode, "'upgradeMod' was unexpected"),
    ("FlinkDeployment", _misspell_pod_template_field, "'volumeMount' was unexpected"),
    ("FlinkDeployment", _bad_flink_version, "'v2_9' is not one of"),
    ("FlinkDeployment", _bad_upgrade_mode, "'checkpoint' is not one of"),
    ("FlinkDeployment", _string_parallelism, "is not of type 'integer'"),
    ("Kafka", _bad_listener_type, "'clusterip' is not one of"),
    ("Kafka", _misspelled_kafka_field, "'listener' was unexpected"),
    ("KafkaNodePool", _bad_role, "'brokers' is not one of"),
    ("KafkaTopic", _zero_partitions, "less than the minimum of 1"),
    ("KafkaTopic", _misspelled_topic_field, "'replica' was unexpected"),
    ("KafkaTopic", _wrong_api_version, "no schema for apiVersion 'kafka.strimzi.io/v1beta2'"),
    ("KafkaTopic", _bad_name, "is not a DNS-1123 subdomain"),
    ("PodMonitor", _misspelt_pod_monitor_endpoint, "'intervall' was unexpected"),
    ("PrometheusRule", _bad_rule_duration, "does not match"),
    ("PrometheusRule", _misspelt_rule_field, "'annotation' was unexpected"),
    ("Deployment", _misspelt_probe, "'readinessprobe' was unexpected"),
    ("Deployment", _two_probe_handlers, "needs exactly one of"),
    ("Deployment", _selector_not_matching, "must match spec.template.metadata.labels"),
    ("Deployment", _mount_of_no_volume, "'nowhere' names no volume of the pod"),
    ("Deployment", _misspelt_security_context, "'runAsNonroot' was unexpected"),
    ("Service", _service_without_port, "spec.ports is required"),
]


@pytest.mark.parametrize(("kind", "breakage", "expected"), BROKEN, ids=[b.__name__.strip("_") for _, b, _ in BROKEN])
def test_a_broken_manifest_is_rejected_for_its_fault(kind, breakage, expected):
    doc = _first(kind)
    breakage(doc)
    errors = schema_errors(doc)
    assert any(expected in error for error in errors), errors


def test_strictness_is_not_added_where_the_crd_preserves_unknown_fields():
    doc = _first("FlinkDeployment")
    doc["spec"]["flinkConfiguration"]["any.flink.option"] = "1"
    topic = _first("KafkaTopic")
    topic["spec"]["config"]["segment.bytes"] = 1073741824
    assert schema_errors(doc) == [] and schema_errors(topic) == []


# ---------------------------------------------------------------------------------------------------
# The manifests agree with the code they deploy and with each other


def _all(kind: str) -> list[dict[str, Any]]:
    return [doc for _, _, doc in DOCS if doc["kind"] == kind]


@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    (found,) = _all("FlinkDeployment")
    return found


@pytest.fixture(scope="module")
def crawl_toml() -> str:
    (config_map,) = [doc for doc in _all("ConfigMap") if doc["metadata"]["name"] == "crawl-config"]
    return config_map["data"]["crawl.toml"]


@pytest.fixture(scope="module")
def job_args(deployment):
    from jobs.crawl import parse_args  # imports pyflink: only where needed

    args = deployment["spec"]["job"]["args"]
    assert args[:2] == ["-py", "/opt/crawler/jobs/crawl.py"], "PythonDriver runs the job script"
    return parse_args(args[2:])


def _topic_name(doc: dict[str, Any]) -> str:
    return doc["spec"].get("topicName", doc["metadata"]["name"])


def test_kafka_topics_are_exactly_the_topics_of_the_records_module():
    names = [_topic_name(doc) for doc in _all("KafkaTopic")]
    assert sorted(names) == sorted(ALL_TOPICS)


def test_big_topics_accept_the_brokers_largest_message_and_the_frontier_is_never_compacted():
    topics = {_topic_name(doc): doc["spec"] for doc in _all("KafkaTopic")}
    for name in (TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES):
        assert topics[name]["config"]["max.message.bytes"] == MAX_MESSAGE_BYTES
    for name in (TOPIC_FRONTIER, TOPIC_OUTCOMES):
        assert topics[name]["config"]["cleanup.policy"] == "delete"
    assert topics[TOPIC_OUTCOMES]["partitions"] == topics[TOPIC_FRONTIER]["partitions"]
    (kafka,) = _all("Kafka")
    assert kafka["spec"]["kafka"]["config"]["message.max.bytes"] >= MAX_MESSAGE_BYTES
    assert kafka["spec"]["kafka"]["config"]["replica.fetch.max.bytes"] >= MAX_MESSAGE_BYTES


def test_topics_and_node_pools_belong_to_the_kafka_cluster_and_fit_its_brokers():
    (kafka,) = _all("Kafka")
    cluster = kafka["metadata"]["name"]
    pools = _all("KafkaNodePool")
    assert all(doc["metadata"]["labels"]["strimzi.io/cluster"] == cluster for doc in pools + _all("KafkaTopic"))
    roles = {role for pool in pools for role in pool["spec"]["roles"]}
    assert roles == {"broker", "controller"}
    brokers = sum(pool["spec"]["replicas"] for pool in pools if "broker" in pool["spec"]["roles"])
    for topic in _all("KafkaTopic"):
        assert topic["spec"]["replicas"] <= brokers
        assert int(topic["spec"]["config"]["min.insync.replicas"]) < topic["spec"]["replicas"]


def test_max_parallelism_is_the_same_everywhere(deployment, crawl_toml):
    configured = int(deployment["spec"]["flinkConfiguration"]["pipeline.max-parallelism"])
    assert configured == JobPolicy().max_parallelism == load_config(crawl_toml).job.max_parallelism


def test_crawl_config_loads_and_sizes_the_deployment(deployment, crawl_toml):
    job = load_config(crawl_toml).job
    # With slot sharing the job needs as many slots as its widest operator, plus the WARC writers' and parse's own.
    assert deployment["spec"]["job"]["parallelism"] == max(job.parallelism, job.fetch_parallelism)
    slots = int(deployment["spec"]["flinkConfiguration"]["taskmanager.numberOfTaskSlots"])
    assert job.slots == 3 * job.parallelism and job.slots % slots == 0, "writers' and parse's slots, whole TaskManagers"
    partitions = {_topic_name(doc): doc["spec"]["partitions"] for doc in _all("KafkaTopic")}
    assert partitions[TOPIC_FRONTIER] >= job.parallelism, "every source reader needs a partition"
    mounts = [m["mountPath"] for m in deployment["spec"]["podTemplate"]["spec"]["containers"][0]["volumeMounts"]]
    assert any(Path(job.warc_root).is_relative_to(mount) for mount in mounts), "WARC root on a volume"


def test_job_command_line_points_at_the_kafka_service_the_config_map_and_the_interpreter(deployment, job_args):
    (kafka,) = _all("Kafka")
    plain = next(l for l in kafka["spec"]["kafka"]["listeners"] if not l["tls"])
    namespace = kafka["metadata"]["namespace"]
    assert job_args.bootstrap == f"{kafka['metadata']['name']}-kafka-bootstrap.{namespace}.svc:{plain['port']}"
    pod = deployment["spec"]["podTemplate"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "crawl-config")
    volume = next(v for v in pod["volumes"] if v["name"] == "crawl-config")
    assert job_args.config == Path(mount["mountPath"]) / "crawl.toml"
    assert volume["configMap"]["name"] == "crawl-config"
    conf = deployment["spec"]["flinkConfiguration"]
    assert job_args.python == conf["python.executable"] == conf["python.client.executable"]


def test_everything_the_pods_mount_or_read_is_declared_or_optional(deployment):
    namespace = deployment["metadata"]["namespace"]
    declared = {(doc["kind"], doc["metadata"]["name"]) for _, _, doc in DOCS
                if doc["metadata"].get("namespace") == namespace}
    pod = deployment["spec"]["podTemplate"]["spec"]
    for volume in pod["volumes"]:
        if "configMap" in volume:
            assert ("ConfigMap", volume["configMap"]["name"]) in declared
        if "persistentVolumeClaim" in volume:
            assert ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]) in declared
    mounted = {m["name"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounted == {v["name"] for v in pod["volumes"]}
    for env in pod["containers"][0].get("env", []):
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if ref and ("Secret", ref["name"]) not in declared:
            assert ref.get("optional") is True, f"{env['name']} needs a Secret the manifests do not declare"
    assert ("Namespace", namespace) in {(doc["kind"], doc["metadata"]["name"]) for _, _, doc in DOCS}
    assert all(doc["metadata"].get("namespace") == namespace for _, _, doc in DOCS if doc["kind"] != "Namespace")


def test_deployment_runs_the_pinned_pyflink_with_durable_rocksdb_state(deployment):
    spec = deployment["spec"]
    flink = importlib.metadata.version("apache-flink")
    assert spec["flinkVersion"] == "v" + "_".join(flink.split(".")[:2])
    assert spec["job"]["jarURI"] == f"local:///opt/flink/opt/flink-python-{flink}.jar"
    assert spec["job"]["entryClass"] == "org.apache.flink.client.python.PythonDriver"
    assert spec["job"]["upgradeMode"] == "savepoint"
    conf = spec["flinkConfiguration"]
    assert conf["state.backend.type"] == "rocksdb"
    for key in ("execution.checkpointing.dir", "execution.checkpointing.savepoint-dir",
                "high-availability.storageDir"):
        assert conf[key].startswith("s3://"), key
    assert "PrometheusReporterFactory" in conf["metrics.reporter.prom.factory.class"]


def _dockerfile_instructions() -> list[list[str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_image_matches_the_pinned_flink_python_and_kafka_connector(deployment):
    flink = importlib.metadata.version("apache-flink")
    instructions = _dockerfile_instructions()
    stages = [words[1:] for words in instructions if words[0] == "FROM"]
    assert stages == [["${BASE_IMAGE}", "AS", "build"], ["${BASE_IMAGE}"]]   # the compilers stay in `build`
    build_args = dict(words[1].split("=", 1) for words in instructions if words[0] == "ARG" and "=" in words[1])
    assert build_args["FLINK_VERSION"] == flink
    # The Maven projects moved from java/ into the package (crawler/java/, issue 38 item 1): either place.
    pom = next(path for path in (ROOT / "crawler" / "java" / "flink-connectors" / "pom.xml",
                                 ROOT / "java" / "flink-connectors" / "pom.xml") if path.exists()).read_text(encoding="utf-8")
    connector = re.search(r"flink-sql-connector-kafka</artifactId><version>([^<]+)<", pom).group(1)
    assert build_args["KAFKA_CONNECTOR_VERSION"] == connector
    assert re.fullmatch(r"[0-9a-f]{64}", build_args["KAFKA_CONNECTOR_SHA256"])
    assert re.fullmatch(r"[0-9a-f]{64}", build_args["S3_PLUGIN_SHA256"])
    text = " ".join(" ".join(words) for words in instructions)
    assert "--require-hashes" in text and "requirements.lock" in text   # built from the lock
    last_from = max(i for i, words in enumerate(instructions) if words[0] == "FROM")
    final = " ".join(" ".join(words) for words in instructions[last_from:])
    assert not {"gcc", "g++", "make", "python3.11-dev"} & set(final.split())
    assert ["USER", "10000:10000"] in instructions
    python = deployment["spec"]["flinkConfiguration"]["python.executable"]
    assert python == "/opt/venv/bin/python"
    assert deployment["spec"]["podTemplate"]["spec"]["securityContext"]["runAsUser"] == 10000
