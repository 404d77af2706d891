"""The Deployments of k8s/base (the corpus and search-index consumers, the control API) and the control
API's Service, against the code they run: each container's command line is parsed by the real
`crawler` parser (crawler.cli.build_parser) and must point at the Kafka service; every path the command
writes is on a writable volume (the root file system is read-only); the Service reaches the API's port
and names only hosts the API's Host check accepts (crawler.control.loopback_host); the init container
turns a Kubernetes Secret volume into a token folder the API's ApiTokens accepts (run here on a copy of
a Secret volume's layout); the pods run as the image's user, non-root, with requests, limits and
probes. Also the remote seeding command k8s/README.md documents."""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from crawler.control import PROBE_PATHS
from tests.unit.test_k8s_manifests import DOCS, K8S, _dockerfile_instructions

README = K8S / "README.md"
IMAGE_USER = 10000
# The Deployment → the `crawler` sub-command it runs.
COMMANDS = {"crawl-corpus": "corpus", "crawl-index": "index", "crawl-control": "api"}
# Secrets the pods need that the manifests do not declare (no credential in git): each must be optional
# or created by a command k8s/README.md gives.
OPERATOR_SECRETS = {"crawl-api-tokens"}


def _all(kind: str) -> list[dict[str, Any]]:
    return [doc for _, _, doc in DOCS if doc["kind"] == kind]


def _deployment(name: str) -> dict[str, Any]:
    (found,) = [doc for doc in _all("Deployment") if doc["metadata"]["name"] == name]
    return found


def _main(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def kafka_bootstrap() -> str:
    (kafka,) = _all("Kafka")
    plain = next(listener for listener in kafka["spec"]["kafka"]["listeners"] if not listener["tls"])
    return f"{kafka['metadata']['name']}-kafka-bootstrap.{kafka['metadata']['namespace']}.svc:{plain['port']}"


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    from crawler.cli import build_parser   # imports every command module: only here

    return build_parser()


def parsed(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    assert argv[0] == "crawler", "the image's entry point runs `crawler ...` as given"
    return parser.parse_args(argv[1:])


def test_every_deployment_is_known_and_runs_the_jobs_image():
    assert {doc["metadata"]["name"] for doc in _all("Deployment")} == set(COMMANDS)
    (flink,) = _all("FlinkDeployment")
    for deployment in _all("Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        for container in spec["containers"] + spec.get("initContainers", []):
            assert container["image"] == flink["spec"]["image"], "one image for the job, consumers and API"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_line_parses_and_reads_the_crawls_kafka(parser, name):
    args = parsed(parser, _main(_deployment(name))["args"])
    assert args.command == COMMANDS[name]
    assert args.bootstrap == kafka_bootstrap()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_pods_run_as_the_images_user_without_privileges(name):
    instructions = _dockerfile_instructions()
    assert ["USER", f"{IMAGE_USER}:{IMAGE_USER}"] in instructions
    spec = _deployment(name)["spec"]["template"]["spec"]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == IMAGE_USER and pod["runAsGroup"] == IMAGE_USER
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    for container in spec["containers"] + spec.get("initContainers", []):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"]["drop"] == ["ALL"]
        assert "runAsUser" not in context or context["runAsUser"] == IMAGE_USER


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_containers_have_requests_a_memory_limit_and_probes(name):
    spec = _deployment(name)["spec"]["template"]["spec"]
    for container in spec["containers"] + spec.get("initContainers", []):
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]
    for container in spec["containers"]:
        assert "livenessProbe" in container and "readinessProbe" in container


def _mounts(deployment: dict[str, Any], container: dict[str, Any]) -> list[tuple[PurePosixPath, bool]]:
    """(mount path, writable) of a container."""
    return [(PurePosixPath(m["mountPath"]), not m.get("readOnly", False)) for m in container.get("volumeMounts", [])]


def _on_writable_mount(path: PurePosixPath, mounts: list[tuple[PurePosixPath, bool]]) -> bool:
    return any(path.is_relative_to(mount) and writable for mount, writable in mounts)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_everything_the_command_writes_is_on_a_writable_volume(parser, name):
    """The root file system is read-only: the outputs, the audit log, the dead-letter file, the token
    folder and the temporary directory must be volumes (the defaults point into the image)."""
    deployment = _deployment(name)
    container = _main(deployment)
    mounts = _mounts(deployment, container)
    args = parsed(parser, container["args"])
    paths = {key: PurePosixPath(value) for key, value in vars(args).items() if isinstance(value, Path)}
    assert "audit_log" in paths, "the default audit log (out/ of the working directory) is on the read-only root"
    if args.command == "corpus":
        paths["dead_letter"] = paths["out"] / "_deadletter.jsonl"
    if args.command == "index":
        paths["dead_letter"] = PurePosixPath(f"{paths['db']}-deadletter.jsonl")
    for key, path in paths.items():
        assert path.is_absolute() and _on_writable_mount(path, mounts), f"--{key.replace('_', '-')} {path}"
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert _on_writable_mount(PurePosixPath(env["TMPDIR"]), mounts)


@pytest.mark.parametrize("name", ["crawl-corpus", "crawl-index"])
def test_consumer_groups_and_probes(parser, name):
    deployment = _deployment(name)
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    container = _main(deployment)
    args = parsed(parser, container["args"])
    assert args.group == {"corpus": "corpus", "index": "search-index"}[args.command]
    assert args.idle_timeout is None and args.max_records is None, "a Deployment follows the crawl until stopped"
    # Readiness: a connection to the bootstrap service the command reads from.
    probe = " ".join(container["readinessProbe"]["exec"]["command"])
    host, port = re.search(r"create_connection\(\('([^']+)', (\d+)\)", probe).groups()
    assert f"{host}:{port}" == args.bootstrap
    # Liveness: the output folder answers and is writable, and the heartbeat the command touches is fresh.
    liveness = " ".join(container["livenessProbe"]["exec"]["command"])
    folder = str(args.out if args.command == "corpus" else args.db.parent)
    assert f"test -w {folder}" in liveness
    assert args.health_file is not None and f"stat -c %Y {args.health_file})" in liveness


@pytest.fixture(scope="module")
def control() -> dict[str, Any]:
    return _deployment("crawl-control")


def test_control_api_listens_where_the_service_sends(parser, control):
    container = _main(control)
    args = parsed(parser, container["args"])
    assert args.bind == "0.0.0.0", "loopback would refuse the Service's connections"
    (port,) = container["ports"]
    assert port["containerPort"] == args.port
    (service,) = _all("Service")
    assert service["metadata"]["name"] == control["metadata"]["name"]
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] in (port["name"], args.port)
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"]["port"] in (port["name"], args.port)
        assert container[probe]["httpGet"]["path"] == path and path in PROBE_PATHS   # open to the kubelet
    # The Service selects the API's pods and no other pod of the namespace.
    selector = service["spec"]["selector"]
    assert selector.items() <= control["spec"]["template"]["metadata"]["labels"].items()
    (flink,) = _all("FlinkDeployment")
    others = [d["spec"]["template"]["metadata"]["labels"] for d in _all("Deployment") if d is not control]
    others.append(flink["spec"]["podTemplate"]["metadata"]["labels"])
    assert not any(selector.items() <= labels.items() for labels in others)


def test_cli_commands_run_in_the_control_pod_audit_to_the_apis_log(parser, control):
    from durable.audit_log import AUDIT_ENV

    container = _main(control)
    args = parsed(parser, container["args"])
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert PurePosixPath(env[AUDIT_ENV]) == PurePosixPath(args.audit_log)


def test_control_api_accepts_the_services_names_as_host(parser, control):
    from crawler.control import loopback_host

    args = parsed(parser, _main(control)["args"])
    (service,) = _all("Service")
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    port = service["spec"]["ports"][0]["port"]
    for host in (name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"):
        assert loopback_host(host, args.allow_host) and loopback_host(f"{host}:{port}", args.allow_host), host
    assert loopback_host("localhost:8787", args.allow_host), "kubectl port-forward"
    assert not loopback_host("crawler.example.org", args.allow_host)


def _volume(spec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in spec["volumes"] if v["name"] == name)


def test_control_api_token_folder_comes_from_the_secret_through_the_init_container(parser, control):
    spec = control["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    args = parsed(parser, _main(control)["args"])
    token_dir = PurePosixPath(args.token_dir)
    secret_mount = next(m for m in init["volumeMounts"] if "secret" in _volume(spec, m["name"]))
    secret = _volume(spec, secret_mount["name"])["secret"]
    assert secret["secretName"] in OPERATOR_SECRETS and not secret.get("optional")
    # Readable by the image's group only: fsGroup gives the files group 10000.
    assert secret["defaultMode"] == 0o440 and spec["securityContext"]["fsGroup"] == IMAGE_USER
    # The folder the API reads is a volume the init container writes and the API mounts too.
    shared = [m for m in init["volumeMounts"] if token_dir.is_relative_to(m["mountPath"]) and not m.get("readOnly")]
    (mount,) = shared
    assert "emptyDir" in _volume(spec, mount["name"])
    assert any(m["name"] == mount["name"] and token_dir.is_relative_to(m["mountPath"])
               for m in _main(control)["volumeMounts"])
    script = init["command"][-1]
    assert str(token_dir) in script and secret_mount["mountPath"] in script


def _secret_volume(folder: Path, tokens: dict[str, str]) -> None:
    """The layout the kubelet gives a Secret volume: a timestamped folder, `..data` linking to it and
    one symbolic link per key into `..data`."""
    stamped = folder / "..2026_12_06_12_00_00.000000001"
    stamped.mkdir(parents=True)
    for key, token in tokens.items():
        (stamped / key).write_text(token + "\n", encoding="ascii")
        (stamped / key).chmod(0o440)
    (folder / "..data").symlink_to(stamped.name)
    for key in tokens:
        (folder / key).symlink_to(f"..data/{key}")


def test_the_init_container_makes_token_files_the_api_accepts(tmp_path, parser, control):
    """Runs the init container's script (paths moved under tmp_path) on a copy of a Secret volume's
    layout, then reads the result with the API's own ApiTokens: every key becomes an actor. The
    Secret volume itself is refused (symbolic links, group-readable), which is why the copy exists."""
    from crawler.control import ApiTokens

    spec = control["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    assert init["command"][:2] == ["/bin/sh", "-c"]
    script = init["command"][2]
    mount_paths = [m["mountPath"] for m in init["volumeMounts"]]
    for path in re.findall(r"(?<![\w$}])/[\w./-]+", script):
        assert any(path.startswith(mount + "/") or path == mount for mount in mount_paths), \
            f"the script writes or reads {path}, on no volume"
    tokens = {"ops": "a" * 64, "legal.team": "b" * 64}
    for mount in init["volumeMounts"]:
        local = tmp_path / mount["name"]
        if "secret" in _volume(spec, mount["name"]):
            _secret_volume(local, tokens)
        else:
            local.mkdir()
        script = script.replace(mount["mountPath"], str(local))
    subprocess.run(["/bin/sh", "-c", script], check=True, timeout=30)
    args = parsed(parser, _main(control)["args"])
    run_mount = next(m for m in init["volumeMounts"] if PurePosixPath(args.token_dir).is_relative_to(m["mountPath"]))
    folder = tmp_path / run_mount["name"] / PurePosixPath(args.token_dir).relative_to(run_mount["mountPath"])
    assert sorted(ApiTokens(folder).actors()) == sorted(tokens)
    assert ApiTokens(folder).actor_for("a" * 64) == "ops"
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    assert all(os.stat(folder / key).st_mode & 0o777 == 0o600 for key in tokens)
    secret_folder = tmp_path / next(m["name"] for m in init["volumeMounts"] if "secret" in _volume(spec, m["name"]))
    assert ApiTokens(secret_folder).actors() == [], "a Secret volume as such is not a token folder"


def test_every_secret_the_pods_need_is_declared_optional_or_created_by_the_readme():
    declared = {doc["metadata"]["name"] for doc in _all("Secret")}
    readme = README.read_text(encoding="utf-8")
    needed: dict[str, bool] = {}
    pods = [d["spec"]["template"]["spec"] for d in _all("Deployment")]
    pods += [f["spec"]["podTemplate"]["spec"] for f in _all("FlinkDeployment")]
    for pod in pods:
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                needed[volume["secret"]["secretName"]] = bool(volume["secret"].get("optional"))
        for container in pod["containers"] + pod.get("initContainers", []):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    needed[ref["name"]] = needed.get(ref["name"], True) and bool(ref.get("optional"))
    for name, optional in needed.items():
        if name in declared or optional:
            continue
        assert name in OPERATOR_SECRETS, name
        assert f"kubectl -n crawler create secret generic {name}" in readme, f"k8s/README.md: how to create {name}"


def _readme_commands(word: str) -> list[list[str]]:
    """The `crawler WORD ...` command lines of k8s/README.md's code blocks run in a pod
    (`kubectl ... -- crawler WORD ...`), without a shell redirection."""
    text = README.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if f"-- crawler {word}" in line:
                argv = shlex.split(line.split(" -- ", 1)[1].split(" < ")[0])
                found.append(argv)
    return found


def test_readme_seeds_the_crawl_from_a_pod_with_a_command_the_cli_accepts(parser):
    from crawler import control as control_module

    commands = _readme_commands("seed")
    assert len(commands) >= 2, "k8s/README.md shows remote seeding: URLs and a file"
    for argv in commands:
        args = parsed(parser, argv)
        assert args.func is control_module._cmd_seed
        assert args.bootstrap == kafka_bootstrap()
        assert args.urls or args.file is not None
    assert "no `crawler`\nsub-command for a remote cluster" not in README.read_text(encoding="utf-8")
