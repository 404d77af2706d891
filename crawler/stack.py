"""The local stack: one Kafka broker (KRaft) and one Flink session cluster, started by `crawler up`,
reported by `crawler status`, stopped by `crawler down`, installed (without starting) by
`crawler install`.

Everything lives under one state folder (default .cache/stack): `kafka/` (config, log segments,
logs, pid), `flink/` (rendered conf, logs, pids, checkpoints) and `api-tokens/` (the control API's
credentials, one file per actor; `up` creates the OS user's if it is missing). `down` signals only the
processes recorded in those pid files, so it stops exactly what `up` started, and both are idempotent.
"""
from __future__ import annotations

import argparse
import os
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException

from bus import kafka_io
from crawler import maven
from crawler.flink_cluster import DEFAULT_REST_PORT, HOME, FlinkCluster, build_home
from crawler.kafka_broker import DEFAULT_FRONTIER_PARTITIONS, KafkaBroker, default_topics
from crawler.paths import CACHE, JAVA
from durable.audit_log import check_actor, os_actor

DEFAULT_STATE_DIR = CACHE / "stack"
API_TOKEN_DIR_NAME = "api-tokens"   # under the state folder: one token file per actor (crawler/control.py)
API_TOKEN_BYTES = 32                # random bytes of a new token (64 hex digits)


@dataclass(frozen=True)
class StackConfig:
    """Where the stack keeps its state and which loopback ports it uses.

    Defaults: state in .cache/stack, Kafka on 9092 (controller 9093), Flink REST/dashboard on 8081,
    4 partitions for crawl.frontier, crawl.outcomes and pages.parsed, one TaskManager. Thread-mode
    operators share one interpreter (one GIL) per TaskManager: a job of parallelism N gets N
    interpreters from N TaskManagers (decision 1611).
    """

    state_dir: Path = DEFAULT_STATE_DIR
    kafka_port: int = 9092
    kafka_controller_port: int = 9093
    rest_port: int = DEFAULT_REST_PORT
    frontier_partitions: int = DEFAULT_FRONTIER_PARTITIONS
    taskmanagers: int = 1

    def __post_init__(self) -> None:
        ports = {"kafka_port": self.kafka_port, "kafka_controller_port": self.kafka_controller_port,
                 "rest_port": self.rest_port}
        for name, port in ports.items():
            if not 1 <= port <= 65535:
                raise ValueError(f"StackConfig.{name} must be a TCP port (1-65535), got {port}")
        if len(set(ports.values())) != len(ports):
            raise ValueError(f"StackConfig ports must all differ, got {ports}")
        if self.frontier_partitions < 1:
            raise ValueError(f"StackConfig.frontier_partitions must be >= 1, got {self.frontier_partitions}")
        if self.taskmanagers < 1:
            raise ValueError(f"StackConfig.taskmanagers must be >= 1, got {self.taskmanagers}")


@dataclass(frozen=True)
class StackStatus:
    """What runs: pids (None = not running), topics and partition counts, the Flink overview."""

    config: StackConfig
    kafka_pid: int | None
    topics: dict[str, int] = field(default_factory=dict)
    jobmanager_pid: int | None = None
    taskmanager_pid: int | None = None
    flink_overview: dict[str, object] | None = None

    @property
    def missing_topics(self) -> list[str]:
        """Topics the crawler needs that the broker does not have."""
        return [t.name for t in default_topics() if t.name not in self.topics]

    @property
    def all_up(self) -> bool:
        """Kafka answers with every topic, both Flink processes run and the REST API answers."""
        return (self.kafka_pid is not None and not self.missing_topics
                and self.jobmanager_pid is not None and self.taskmanager_pid is not None
                and self.flink_overview is not None)

    def lines(self) -> list[str]:
        """A human-readable report, one fact per line."""
        c = self.config
        topics = " ".join(f"{name}({n})" for name, n in sorted(self.topics.items())) or "-"
        ov = self.flink_overview or {}
        dashboard = (f"http://localhost:{c.rest_port} ({ov.get('taskmanagers')} TaskManager(s), "
                     f"{ov.get('slots-available')}/{ov.get('slots-total')} slots free, "
                     f"{ov.get('jobs-running')} job(s) running)") if self.flink_overview else "not answering"
        return [
            f"kafka        {_state(self.kafka_pid)}  bootstrap 127.0.0.1:{c.kafka_port}",
            f"topics       {topics}" + (f"  MISSING {' '.join(self.missing_topics)}" if self.missing_topics else ""),
            f"jobmanager   {_state(self.jobmanager_pid)}",
            f"taskmanager  {_state(self.taskmanager_pid)}",
            f"dashboard    {dashboard}",
            f"flink cli    {HOME / 'bin' / 'flink'} (FLINK_CONF_DIR={Path(c.state_dir).resolve() / 'flink' / 'conf'})",
            f"state        {c.state_dir}",
            f"stack        {'UP' if self.all_up else 'NOT (fully) UP'}",
        ]


def _state(pid: int | None) -> str:
    return f"up (pid {pid})" if pid is not None else "down"


class Stack:
    """The broker and the cluster of one state folder."""

    def __init__(self, config: StackConfig = StackConfig()) -> None:
        self.config = config
        state = Path(config.state_dir).resolve()
        self.kafka = KafkaBroker(state / "kafka", config.kafka_port, config.kafka_controller_port,
                                 topics=default_topics(config.frontier_partitions, config.frontier_partitions))
        # With several TaskManagers, spread a job's slots over all of them (each brings its own interpreter).
        spread = {"taskmanager.load-balance.mode": "SLOTS"} if config.taskmanagers > 1 else None
        self.flink = FlinkCluster(state / "flink", rest_port=config.rest_port, taskmanagers=config.taskmanagers,
                                  settings=spread)

    def up(self) -> StackStatus:
        """Start what is not running (Kafka first: jobs need their topics), wait until ready."""
        self.kafka.start()
        self.flink.start()
        return self.status()

    def down(self) -> list[str]:
        """Stop Flink, then Kafka: exactly the processes in our pid files. Returns their names."""
        stopped = self.flink.stop()
        if self.kafka.stop():
            stopped.append("kafka")
        return stopped

    def status(self) -> StackStatus:
        """Ask each part whether it runs; never raises on a part that is down."""
        kafka_pid = self.kafka.pid()
        topics: dict[str, int] = {}
        if kafka_pid is not None and _accepts(self.config.kafka_port):
            try:
                topics = kafka_io.list_topics(self.kafka.bootstrap, timeout_s=5.0)
            except KafkaException:
                topics = {}
        return StackStatus(
            config=self.config, kafka_pid=kafka_pid, topics=topics,
            jobmanager_pid=self.flink.jobmanager.pid(), taskmanager_pid=self.flink.taskmanager.pid(),
            flink_overview=self.flink.overview(timeout_s=3.0),
        )


def api_token_dir(state_dir: Path | str = DEFAULT_STATE_DIR) -> Path:
    """The folder of the control API's token files for the stack in `state_dir`."""
    return Path(state_dir).resolve() / API_TOKEN_DIR_NAME


def ensure_api_token(token_dir: Path, actor: str) -> tuple[Path, bool]:
    """The token file of `actor` in `token_dir`, created with a new random token when it is missing:
    the folder 0700, the file 0600, written whole before it appears under its name (a link that fails
    if the name exists, so a token already there is never replaced). Returns (path, created)."""
    if check_actor(actor) != actor or "/" in actor or actor.startswith("."):
        raise ValueError(f"a token file's name is its actor and cannot be {actor[:80]!r}")
    token_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = token_dir / actor
    if path.exists():
        return path, False
    temp = token_dir / f".new-{secrets.token_hex(8)}"
    try:
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            os.fchmod(out.fileno(), 0o600)   # exactly 0600 whatever the umask
            out.write(f"{secrets.token_hex(API_TOKEN_BYTES)}\n".encode())
            out.flush()
            os.fsync(out.fileno())
        os.link(temp, path)
    except FileExistsError:   # another `up` or `api` created it meanwhile: keep theirs
        return path, False
    finally:
        temp.unlink(missing_ok=True)
    return path, True


def install() -> Path:
    """Fetch every jar set of crawler/java/*/pom.xml (Kafka broker, Flink connectors, jwarc) with Maven and build the Flink home, starting
    nothing: after this the stack and its tests need no network. Returns the Flink home."""
    for pom in sorted(JAVA.glob("*/pom.xml")):  # every jar set: broker, connectors, test validators
        maven.jar_dir(pom.parent.name)
    return build_home(HOME)


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# --- the `crawler` subcommands of this module (see crawler/cli.py) -----------------------------------

def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `install`, `up`, `down` and `status` to the `crawler` command line."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help="where the stack keeps config, data, logs and pids (default: %(default)s)")
    common.add_argument("--kafka-port", type=int, default=9092)
    common.add_argument("--kafka-controller-port", type=int, default=9093)
    common.add_argument("--rest-port", type=int, default=DEFAULT_REST_PORT, help="Flink REST/dashboard")
    common.add_argument("--frontier-partitions", type=int, default=DEFAULT_FRONTIER_PARTITIONS)
    common.add_argument("--taskmanagers", type=int, default=1,
                        help="TaskManagers to start (thread-mode Python gets one interpreter per TaskManager)")
    for name, func, text in (
        ("install", _cmd_install, "download the jars and build the Flink home; start nothing"),
        ("up", _cmd_up, "start Kafka and the Flink session cluster (idempotent)"),
        ("down", _cmd_down, "stop what `up` started (idempotent)"),
        ("status", _cmd_status, "report what runs; exit 0 only when everything is up"),
    ):
        parser = subparsers.add_parser(name, parents=[common], help=text, description=text)
        parser.set_defaults(func=func)


def _config(args: argparse.Namespace) -> StackConfig:
    return StackConfig(state_dir=args.state_dir, kafka_port=args.kafka_port,
                       kafka_controller_port=args.kafka_controller_port, rest_port=args.rest_port,
                       frontier_partitions=args.frontier_partitions, taskmanagers=args.taskmanagers)


def _cmd_install(args: argparse.Namespace) -> int:
    home = install()
    print(f"jars resolved, Flink home ready: {home}")
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    token, created = ensure_api_token(api_token_dir(args.state_dir), os_actor())
    status = Stack(_config(args)).up()
    print("\n".join(status.lines()))
    print(f"api token    {token} ({'created' if created else 'kept'}; `crawler api` takes "
          f"'Authorization: Bearer <its content>' as actor {token.name!r})")
    return 0 if status.all_up else 1


def _cmd_down(args: argparse.Namespace) -> int:
    stopped = Stack(_config(args)).down()
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    status = Stack(_config(args)).status()
    print("\n".join(status.lines()))
    return 0 if status.all_up else 1
