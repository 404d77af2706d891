"""Small Kafka helpers for the CLI, scripts and tests: produce, consume, create and list topics, wait
for a broker. The job itself talks to Kafka through Flink's Java connector, not through this module.

Client: confluent-kafka (librdkafka), chosen by measurement over kafka-python
(docs/decisions/0601-python-kafka-client.md, bench/kafka_clients.py).
"""
from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

Key = bytes | str | None
Record = tuple[bytes | None, bytes]

# Producer batches up to this size; the broker and the big topics accept 16 MiB (kafka_broker.py).
_MAX_REQUEST_BYTES = 16 * 1024 * 1024
# librdkafka writes its own log lines to stderr unless given a logger; route them to `logging`.
# (A library's logger: silent until the application configures logging.)
_LOG = logging.getLogger("crawler.kafka")
_LOG.addHandler(logging.NullHandler())


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partition count and an optional `max.message.bytes`."""

    name: str
    partitions: int = 1
    max_message_bytes: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("TopicSpec.name must not be empty")
        if self.partitions < 1:
            raise ValueError(f"TopicSpec.partitions must be >= 1, got {self.partitions} for {self.name}")
        if self.max_message_bytes is not None and self.max_message_bytes < 1024:
            raise ValueError(f"TopicSpec.max_message_bytes must be >= 1024, got {self.max_message_bytes}")


def produce(bootstrap: str, topic: str, records: Iterable[tuple[Key, bytes]], *,
            timeout_s: float = 30.0) -> int:
    """Send `(key, value)` records to `topic` (acks=all, idempotent) and wait until every one is
    acknowledged; returns how many were sent, raises KafkaException on the first failed delivery."""
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "logger": _LOG,
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.max.bytes": _MAX_REQUEST_BYTES,
    })
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    sent = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
        sent += 1
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if errors:
        raise KafkaException(errors[0])
    if remaining:
        raise TimeoutError(f"{remaining} of {sent} records to {topic} not acknowledged after {timeout_s} s")
    return sent


def consume(bootstrap: str, topic: str, *, from_beginning: bool = True, max_records: int | None = None,
            timeout_s: float = 10.0, since_ms: int | None = None) -> list[Record]:
    """Read `(key, value)` records from every partition of `topic` without joining a consumer group.

    Reads from the earliest offsets (or only records produced after the call when `from_beginning` is
    False, or those written at or after `since_ms`, broker time, when it is given) and returns after
    `max_records` records or `timeout_s` seconds, whichever comes first; with `max_records=None` it
    returns as soon as every partition has been read to its current end.
    """
    partitions = list_topics(bootstrap, timeout_s=timeout_s).get(topic)
    if partitions is None:
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, f"no topic {topic!r}"))
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "logger": _LOG,
        "group.id": f"crawler-io-{uuid.uuid4().hex}",  # required by the client; never committed
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.message.max.bytes": _MAX_REQUEST_BYTES,
    })
    start = -2 if from_beginning else -1  # OFFSET_BEGINNING / OFFSET_END
    assignment = [TopicPartition(topic, p, start) for p in range(partitions)]
    if since_ms is not None:
        # offsets_for_times answers -1 (OFFSET_END) for a partition with nothing at or after since_ms
        assignment = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in range(partitions)],
                                                timeout=timeout_s)
    consumer.assign(assignment)
    out: list[Record] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and (max_records is None or len(out) < max_records):
            msg = consumer.poll(min(0.2, max(0.0, deadline - time.monotonic())))
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(err)
                at_end.add(msg.partition())
                if max_records is None and len(at_end) == partitions:
                    break
                continue
            at_end.discard(msg.partition())
            out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out if max_records is None else out[:max_records]


def create_topics(bootstrap: str, specs: Sequence[TopicSpec], *, timeout_s: float = 30.0) -> list[str]:
    """Create the topics that do not exist yet (replication factor 1); returns the names created."""
    admin = _admin(bootstrap)
    existing = list_topics(bootstrap, timeout_s=timeout_s)
    wanted = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=1,
                 config={"max.message.bytes": str(s.max_message_bytes)} if s.max_message_bytes else {})
        for s in specs if s.name not in existing
    ]
    if not wanted:
        return []
    created = []
    for name, future in admin.create_topics(wanted, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a concurrent `up`
                raise
    return created


def list_topics(bootstrap: str, *, timeout_s: float = 10.0) -> dict[str, int]:
    """The cluster's non-internal topics and their partition counts; raises KafkaException if the
    cluster does not answer within `timeout_s`."""
    admin = _admin(bootstrap)
    meta = admin.list_topics(timeout=timeout_s)
    return {name: len(t.partitions) for name, t in meta.topics.items() if not name.startswith("__")}


def wait_ready(bootstrap: str, *, timeout_s: float = 60.0,
               alive: Callable[[], bool] | None = None) -> None:
    """Return once the cluster at `bootstrap` answers a metadata request with a live broker; raise
    TimeoutError after `timeout_s`, or RuntimeError at once if `alive()` says the process died."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError(f"the broker for {bootstrap} exited while starting")
        if not _accepts(bootstrap):
            time.sleep(0.2)
            continue
        try:
            meta = _admin(bootstrap).list_topics(timeout=2.0)
            if meta.brokers:
                return
        except KafkaException as exc:
            last = exc
        time.sleep(0.2)
    raise TimeoutError(f"Kafka at {bootstrap} not ready after {timeout_s} s (last error: {last})")


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "logger": _LOG})


def _accepts(bootstrap: str) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False
