"""The Kafka side of the consumers: a bounded read loop with a consumer group.

`consume_batches` subscribes a consumer group to topics, hands each batch of messages to a handler
and commits the batch's offsets only once the handler returned, i.e. once the consumer's output is
durable: a crash replays at most the batch in hand (at-least-once, decision 1204). It stops after
`max_records` messages, after `idle_timeout_s` seconds without one, or never.

The records a handler cannot handle do not stop the loop: the consumers send them to their
dead-letter file (consumers/deadletter.py) and return, so the batch commits past them. A handler
that raises (a full disk, a broken database) stops the loop before the commit: that batch is read
again by the next run.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

_LOG = logging.getLogger("consumers")
_LOG.addHandler(logging.NullHandler())
# Consumed messages are handled in batches of at most this many by default.
DEFAULT_BATCH = 500
# The largest pages.parsed value the broker accepts (crawler/kafka_broker.py: 16 MiB).
_MAX_FETCH_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Message:
    """One consumed Kafka record: where it came from, its key and value."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class ReadLimits:
    """When a consumer stops, and how much it handles at once.

    max_records: stop after this many messages (None: no limit).
    idle_timeout_s: stop once no message arrived for this long, seconds (None: run until stopped).
    batch_size: messages handed to the handler at most at once (500); offsets are committed per batch.
    poll_s: how long one poll waits for messages (0.5 s): the latency of a partial batch.
    heartbeat: a file whose modification time is set after every poll (None: none), so a liveness
        probe can tell a consumer that reads from one stuck in a poll or in handling a batch.
    """

    max_records: int | None = None
    idle_timeout_s: float | None = None
    batch_size: int = DEFAULT_BATCH
    poll_s: float = 0.5
    heartbeat: Path | None = None

    def __post_init__(self) -> None:
        if self.max_records is not None and (not isinstance(self.max_records, int) or self.max_records < 1):
            raise ValueError(f"max_records must be a positive integer, got {self.max_records!r}")
        if self.idle_timeout_s is not None and not (isinstance(self.idle_timeout_s, (int, float))
                                                    and math.isfinite(self.idle_timeout_s) and self.idle_timeout_s > 0):
            raise ValueError(f"idle_timeout_s must be a positive number of seconds, got {self.idle_timeout_s!r}")
        if not isinstance(self.batch_size, int) or not 1 <= self.batch_size <= 100_000:
            raise ValueError(f"batch_size must be an integer in [1, 100000], got {self.batch_size!r}")
        if not isinstance(self.poll_s, (int, float)) or not 0 < self.poll_s <= 60:
            raise ValueError(f"poll_s must be in (0, 60] seconds, got {self.poll_s!r}")


def consume_batches(bootstrap: str, topics: Sequence[str], group_id: str, limits: ReadLimits,
                    handle: Callable[[list[Message]], None], *, clock: Callable[[], float] = time.monotonic) -> int:
    """Feed `topics` to `handle` in batches as consumer group `group_id`; returns the messages handled.

    A new group starts at the earliest offsets; offsets are committed (synchronously) after each
    batch `handle` returned without raising. Errors the client recovers from are logged; a fatal
    client error raises KafkaException.
    """
    if not topics:
        raise ValueError("at least one topic is needed")
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.message.max.bytes": _MAX_FETCH_BYTES,
        "logger": _LOG,
    })
    handled = 0
    last_seen = clock()
    try:
        consumer.subscribe(list(topics))
        while limits.max_records is None or handled < limits.max_records:
            want = limits.batch_size if limits.max_records is None else min(limits.batch_size,
                                                                             limits.max_records - handled)
            batch = [_message(m) for m in consumer.consume(num_messages=want, timeout=limits.poll_s)
                     if _usable(m)]
            beat(limits.heartbeat)
            if not batch:
                if limits.idle_timeout_s is not None and clock() - last_seen >= limits.idle_timeout_s:
                    break
                continue
            last_seen = clock()
            handle(batch)
            consumer.commit(asynchronous=False)
            handled += len(batch)
    finally:
        consumer.close()
    return handled


def beat(heartbeat: Path | None) -> None:
    """Set the heartbeat file's modification time to now (creating it); nothing without one."""
    if heartbeat is not None:
        heartbeat.touch()


def _usable(msg: Any) -> bool:
    err = msg.error()
    if err is None:
        return True
    if err.fatal():
        raise KafkaException(err)
    if err.code() != KafkaError._PARTITION_EOF:
        _LOG.warning("kafka: %s", err)
    return False


def _message(msg: Any) -> Message:
    return Message(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
