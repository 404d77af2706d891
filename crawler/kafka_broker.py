"""A single-node Kafka 4.x broker in KRaft mode (combined broker + controller), for the local stack
and the integration tests: `KafkaBroker(data_dir, port, controller_port).start()` / `.stop()`.

The jars come from Maven Central through `crawler/java/kafka/pom.xml`; everything the broker writes (config,
log segments, its own logs, the pid file) lives under `data_dir`, so a test can use a tmp dir and the
stack uses `.cache/stack/kafka`.
"""
from __future__ import annotations

import base64
import shutil
import socket
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path

from confluent_kafka import KafkaException

from bus import kafka_io
from crawler import maven
from crawler.daemon import Daemon
from bus.kafka_io import TopicSpec
from udfs.records import ALL_TOPICS, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES

# Pages and batches of outlinks can be large; the broker and the two big topics accept 16 MiB.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_FRONTIER_PARTITIONS = 4


class KafkaBrokerError(RuntimeError):
    """The broker could not be formatted, started or reached; the message points at its log."""


def default_topics(frontier_partitions: int = DEFAULT_FRONTIER_PARTITIONS,
                   pages_partitions: int = DEFAULT_FRONTIER_PARTITIONS) -> tuple[TopicSpec, ...]:
    """The crawler's topics (udfs.records.ALL_TOPICS): the frontier, outcomes and pages topics partitioned
    and allowed large messages (outcomes like the frontier: both keyed by host), control and status with
    one partition (their order matters)."""
    big = {TOPIC_FRONTIER: frontier_partitions, TOPIC_OUTCOMES: frontier_partitions, TOPIC_PAGES: pages_partitions}
    return tuple(
        TopicSpec(name, big[name], MAX_MESSAGE_BYTES) if name in big else TopicSpec(name)
        for name in ALL_TOPICS
    )


class KafkaBroker:
    """One broker JVM owned through a pid file under `data_dir`; start/stop are idempotent."""

    def __init__(self, data_dir: Path, port: int = 9092, controller_port: int = 9093, *,
                 heap: str = "512m", topics: Sequence[TopicSpec] = default_topics()) -> None:
        if port == controller_port:
            raise ValueError(f"port and controller_port must differ, both are {port}")
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.topics = tuple(topics)
        self.config_file = self.data_dir / "server.properties"
        self.log_dir = self.data_dir / "data"
        self.daemon = Daemon(
            name="kafka",
            pid_file=self.data_dir / "kafka.pid",
            log_file=self.data_dir / "logs" / "kafka.out",
        )

    @property
    def bootstrap(self) -> str:
        """The `host:port` clients connect to."""
        return f"127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The broker's pid if it runs (and is the one we started), else None."""
        return self.daemon.pid()

    def start(self, timeout_s: float = 90.0) -> None:
        """Write the config, format storage on first start, start the JVM, wait until the cluster
        answers and create the topics. Does nothing but check the topics if the broker already runs."""
        if self.pid() is None:
            if _port_in_use(self.port) or _port_in_use(self.controller_port):
                raise KafkaBrokerError(
                    f"port {self.port} or {self.controller_port} is already taken by another process")
            self._write_config()
            classpath = maven.classpath("kafka")
            if not (self.log_dir / "meta.properties").is_file():
                self._format(classpath)
            self.daemon.spawn(self._java("kafka.Kafka", classpath, str(self.config_file)),
                              cwd=self.data_dir)
        try:
            kafka_io.wait_ready(self.bootstrap, timeout_s=timeout_s, alive=lambda: self.pid() is not None)
        except (TimeoutError, RuntimeError) as exc:
            raise KafkaBrokerError(f"{exc}; see {self.daemon.log_file} and {self.data_dir / 'logs'}") from exc
        try:
            kafka_io.create_topics(self.bootstrap, self.topics)
        except KafkaException as exc:
            raise KafkaBrokerError(f"creating topics on {self.bootstrap} failed: {exc}") from exc

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM the broker we started (SIGKILL after `timeout_s`); True if one was running."""
        return self.daemon.stop(timeout_s)

    def _java(self, main_class: str, classpath: str, *args: str, short_lived: bool = False) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise KafkaBrokerError("`java` (17+) is not on PATH")
        # A one-shot tool starts faster with the quick JIT tier only and the simplest collector.
        tuning = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"] if short_lived else [
            f"-Xms{self.heap}", "-XX:+UseG1GC"]
        return [
            java, f"-Xmx{self.heap}", *tuning, "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self._write_log4j()}",
            f"-Dkafka.logs.dir={self.data_dir / 'logs'}",
            "-cp", classpath, main_class, *args,
        ]

    def _format(self, classpath: str) -> None:
        cmd = self._java("kafka.tools.StorageTool", classpath, "format", "--standalone",
                         "--cluster-id", _cluster_id(), "--config", str(self.config_file), short_lived=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=self.data_dir)
        if proc.returncode != 0:
            raise KafkaBrokerError(f"formatting {self.log_dir} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            # Topics are created on purpose, with their partitions and limits: a typo must fail.
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "message.max.bytes": str(MAX_MESSAGE_BYTES),
            "replica.fetch.max.bytes": str(MAX_MESSAGE_BYTES),
            # One node: internal topics cannot have more than one replica.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Consumers in tests join at once instead of waiting 3 s for more members.
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.hours": "168",
            "num.network.threads": "2",
            "num.io.threads": "4",
        }
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _write_log4j(self) -> Path:
        path = self.data_dir / "log4j2.properties"
        log = self.data_dir / "logs" / "server.log"
        path.write_text(
            "status = warn\n"
            "appender.file.type = RollingFile\n"
            "appender.file.name = FILE\n"
            f"appender.file.fileName = {log}\n"
            f"appender.file.filePattern = {log}.%i\n"
            "appender.file.layout.type = PatternLayout\n"
            "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
            "appender.file.policies.type = Policies\n"
            "appender.file.policies.size.type = SizeBasedTriggeringPolicy\n"
            "appender.file.policies.size.size = 20MB\n"
            "appender.file.strategy.type = DefaultRolloverStrategy\n"
            "appender.file.strategy.max = 3\n"
            "rootLogger.level = INFO\n"
            "rootLogger.appenderRef.file.ref = FILE\n"
        )
        return path


def _cluster_id() -> str:
    """Kafka's own format: 16 random bytes, URL-safe base64 without padding (22 characters). Like
    Kafka's Uuid.randomUuid, never one starting with '-', which the storage tool would read as an
    option (1 start in 64 failed with "argument --cluster-id/-t: expected one argument")."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0

