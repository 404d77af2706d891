"""Retention gaps: records of the job's input topics that Kafka deleted before the job read them.

Kafka deletes a topic's oldest records after its retention (7 days on the local broker, 30 in
`k8s/base/kafka-topics.yaml`) whether anyone read them or not. A job restored from a checkpoint or a
savepoint resumes each partition at the offset stored there; if the broker no longer keeps that
offset, the Kafka source resumes at the earliest offset it does keep (`auto.offset.reset`, which
`jobs.crawl.kafka_source` sets to earliest) and the records between were never read: discoveries,
ends of leases, operator commands. Nothing in Flink or Kafka says so.

The job's Kafka sources commit the offsets of each completed checkpoint (and of the savepoint a
`flink stop` takes) to their consumer group, `job.group_id` (Flink's `commit.offsets.on.checkpoint`,
on by default), and a fresh job commits the offsets it starts from: so the group's committed offsets
are where a restore resumes. A gap is a committed offset below the partition's low watermark; its
size, low watermark minus committed offset, is the number of records lost.

`read_report` reads both from the broker. `crawler upgrade`, `crawler rescale` and `crawler restore`
refuse to start a job over a gap unless told `--accept-retention-gap` (crawler/ops.py); the job itself
checks at every start and reports what it finds (operators/retention_gap.py). Decision 3791; what to
do about a gap: docs/runbook.md, "A job down past the topics' retention".

The gap arithmetic and the report's record are pure; `read_report`, `start_offsets`, `commit_offsets`
and `report_status` talk to Kafka (confluent-kafka, decision 0601).
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from bus.kafka_io import produce
from udfs.records import TOPIC_CONTROL, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_STATUS, encode

# The topics the crawl job reads (jobs/crawl.py kafka_source), in the order reports list them.
INPUT_TOPICS = (TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_CONTROL)
# The key of the `crawl.status` record a gap leaves.
STATUS_KEY = "retention_gap"
# librdkafka's own log lines, routed as bus.kafka_io routes them.
_KAFKA_LOG = logging.getLogger("crawler.kafka")


class RetentionGapError(RuntimeError):
    """A job would resume past records Kafka has deleted; the message says how many, where, and what to do."""


@dataclass(frozen=True)
class PartitionOffsets:
    """Where the consumer group stands in one partition, and what the broker still keeps of it."""

    topic: str
    partition: int
    committed: int | None   # the group's committed offset: where a restore resumes (None: never committed)
    earliest: int           # the low watermark: the oldest offset the broker still keeps
    latest: int             # the high watermark: the offset the next record will get
    kept_from_ms: int | None = None  # the timestamp of the record at `earliest`, read only for a gap

    @property
    def lost(self) -> int:
        """Records between the committed offset and the oldest kept one: deleted before the group read them."""
        if self.committed is None or self.committed >= self.earliest:
            return 0
        return self.earliest - self.committed

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "restored": self.committed,
                "earliest": self.earliest, "latest": self.latest, "lost": self.lost,
                "kept_from_ms": self.kept_from_ms}


@dataclass(frozen=True)
class RetentionReport:
    """The consumer group's position against the broker's retention, over every partition of the topics."""

    group: str
    partitions: tuple[PartitionOffsets, ...]
    checked_at: float   # epoch seconds

    @property
    def lost(self) -> int:
        return sum(p.lost for p in self.partitions)

    @property
    def gaps(self) -> tuple[PartitionOffsets, ...]:
        """The partitions with records lost, in topic and partition order."""
        return tuple(p for p in self.partitions if p.lost)

    def lost_by_topic(self, topics: Iterable[str] = INPUT_TOPICS) -> dict[str, int]:
        """Records lost per topic, every topic of `topics` (and any other the report covers) named, 0 included."""
        lost = {topic: 0 for topic in topics}
        for p in self.partitions:
            lost[p.topic] = lost.get(p.topic, 0) + p.lost
        return lost

    def summary(self) -> str:
        """One line for a terminal or a log: the records lost, per topic and partition."""
        if not self.lost:
            return f"no retention gap for consumer group {self.group!r}"
        parts = []
        for topic, lost in self.lost_by_topic().items():
            if lost:
                where = ", ".join(f"{p.partition}: {p.lost} (offsets {p.committed}-{p.earliest - 1})"
                                  for p in self.gaps if p.topic == topic)
                parts.append(f"{topic} {lost} (partition {where})")
        return (f"consumer group {self.group!r} resumes past {self.lost} record(s) Kafka has deleted "
                f"(retention): {'; '.join(parts)}")

    def status_record(self, source: str) -> dict[str, Any]:
        """The `crawl.status` record of a gap (key STATUS_KEY); `source` is who found it: "job" or "cli"."""
        return {"v": 1, "type": STATUS_KEY, "source": source, "group": self.group, "lost": self.lost,
                "topics": self.lost_by_topic(), "partitions": [p.to_dict() for p in self.gaps],
                "checked_at": round(self.checked_at, 3)}


def refuse_gap(report: RetentionReport, accept: bool, doing: str) -> None:
    """Raise RetentionGapError for a gap unless `accept`: `doing` says what was about to happen and what
    has happened so far (e.g. "nothing was stopped")."""
    if report.lost and not accept:
        raise RetentionGapError(
            f"{report.summary()}. {doing}. Recover what was lost (docs/runbook.md, \"A job down past the "
            f"topics' retention\"), then run the command again with --accept-retention-gap")


# --- Kafka ----------------------------------------------------------------------------------------

def group_consumer(bootstrap: str, group: str) -> Consumer:
    """A client of `group` that reads offsets and records but never joins the group or commits on its own."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "enable.partition.eof": True, "logger": _KAFKA_LOG})


# Errors of a broker still settling (a partition's leader or the group's coordinator not where the client
# asked yet, as right after the broker or a topic starts): asked again until the call's timeout.
_SETTLING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
             KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)
T = TypeVar("T")


def _settled(call: Callable[[], T], timeout_s: float) -> T:
    """`call()`, asked again while it fails with a retriable error, until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in _SETTLING) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def watermark_offsets(consumer: Consumer, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
    """The partition's (low, high) watermarks, from its leader."""
    return _settled(lambda: consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s,
                                                           cached=False), timeout_s)


def _partitions(consumer: Consumer, topics: Sequence[str], timeout_s: float) -> list[tuple[str, int]]:
    meta = consumer.list_topics(timeout=timeout_s)
    found = []
    for topic in topics:
        described = meta.topics.get(topic)
        if described is None or described.error is not None and \
                described.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            continue   # a topic that does not exist has nothing to lose
        if described.error is not None:
            raise KafkaException(described.error)
        found += [(topic, p) for p in sorted(described.partitions)]
    return found


def read_report(bootstrap: str, group: str, topics: Sequence[str] = INPUT_TOPICS, *, timeout_s: float = 10.0,
                clock: Callable[[], float] = time.time) -> RetentionReport:
    """The group's committed offsets against the low and high watermarks of every partition of `topics`
    (topics that do not exist are left out); for each partition with a gap, the timestamp of the oldest
    record kept. Raises KafkaException (or TimeoutError) when the broker does not answer."""
    consumer = group_consumer(bootstrap, group)
    try:
        partitions = _partitions(consumer, topics, timeout_s)
        asked = [TopicPartition(t, p) for t, p in partitions]
        committed = {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 else None)
                     for tp in _settled(lambda: consumer.committed(asked, timeout=timeout_s), timeout_s)}
        rows = []
        for topic, partition in partitions:
            low, high = watermark_offsets(consumer, topic, partition, timeout_s)
            rows.append(PartitionOffsets(topic, partition, committed.get((topic, partition)), low, high))
        kept_from = _timestamps_at(consumer, [p for p in rows if p.lost], timeout_s)
        rows = [PartitionOffsets(p.topic, p.partition, p.committed, p.earliest, p.latest,
                                 kept_from.get((p.topic, p.partition))) for p in rows]
    finally:
        consumer.close()
    return RetentionReport(group, tuple(rows), clock())


def _timestamps_at(consumer: Consumer, gaps: Sequence[PartitionOffsets], timeout_s: float) -> dict[tuple[str, int], int]:
    """The timestamp (ms) of the record at each gap's low watermark: the lost records are older than it."""
    wanted = {(p.topic, p.partition) for p in gaps if p.earliest < p.latest}
    if not wanted:
        return {}
    consumer.assign([TopicPartition(p.topic, p.partition, p.earliest) for p in gaps if (p.topic, p.partition) in wanted])
    found: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + timeout_s
    while wanted - found.keys() and time.monotonic() < deadline:
        msg = consumer.poll(min(0.5, max(0.0, deadline - time.monotonic())))
        if msg is None:
            continue
        key = (msg.topic(), msg.partition())
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                wanted.discard(key)
            continue
        found.setdefault(key, msg.timestamp()[1])
    consumer.unassign()
    return found


def start_offsets(bootstrap: str, topic: str, start_ms: int, *, timeout_s: float = 10.0) -> dict[int, int]:
    """Per partition of `topic`, the offset of its first record at or after `start_ms` (the partition's
    end when there is none): where a fresh job that reads from `start_ms` starts. {} for no such topic."""
    consumer = group_consumer(bootstrap, f"crawler-start-{uuid.uuid4().hex}")
    try:
        partitions = [p for _, p in _partitions(consumer, [topic], timeout_s)]
        if not partitions:
            return {}
        asked = [TopicPartition(topic, p, start_ms) for p in partitions]
        found = _settled(lambda: consumer.offsets_for_times(asked, timeout=timeout_s), timeout_s)
        offsets = {}
        for tp in found:
            if tp.offset < 0:   # nothing at or after start_ms yet: the end
                tp.offset = watermark_offsets(consumer, topic, tp.partition, timeout_s)[1]
            offsets[tp.partition] = tp.offset
        return offsets
    finally:
        consumer.close()


def commit_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int], *, timeout_s: float = 10.0) -> None:
    """Set the group's committed offsets of `topic` (a fresh job's start): until the job commits its own at
    its first checkpoint, a restart of the job resumes there, and the job's check compares with these."""
    if not offsets:
        return
    consumer = group_consumer(bootstrap, group)
    try:
        commit = [TopicPartition(topic, p, o) for p, o in sorted(offsets.items())]
        _settled(lambda: consumer.commit(offsets=commit, asynchronous=False), timeout_s)
    finally:
        consumer.close()


def report_status(bootstrap: str, report: RetentionReport, source: str, *, timeout_s: float = 10.0) -> None:
    """Put the report's record on `crawl.status` (key STATUS_KEY)."""
    produce(bootstrap, TOPIC_STATUS, [(STATUS_KEY, encode(report.status_record(source)))], timeout_s=timeout_s)
