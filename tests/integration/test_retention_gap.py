"""A job down longer than its topics' retention (decision 3791), on a real broker whose retention deletes.

The broker of this module checks retention every 300 ms; while "the job is down", a test sets
`crawl.frontier`'s retention to 1 s, writes records nobody reads, waits until Kafka has deleted them
and sets the retention back. Then:
- the retention report counts the records deleted before the consumer group read them, per
  partition, and `crawler restore` refuses to start over them (nothing is started) unless
  `--accept-retention-gap` (the upgrade and rescale commands share the check);
- the real job's Kafka sources (jobs/crawl.py `kafka_source`), restored on a MiniCluster from the
  savepoint a `stop` took, count the gap under the metric group `kafka` (read over REST), put a
  `retention_gap` record with per-partition counts on `crawl.status`, and read on from the oldest
  record Kafka still keeps (those written after the deletion), not from the end of the topic.
"""
from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from bus import kafka_io
from crawler.cli import main as crawler_main
from crawler.kafka_broker import KafkaBroker
from crawler.ops import UpgradeError, check_retention
from bus.retention_gap import INPUT_TOPICS, STATUS_KEY, group_consumer, read_report, watermark_offsets
from tests.integration.harness import free_port, read_metrics
from udfs.config import load_config
from udfs.records import TOPIC_CONTROL, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, TOPIC_STATUS

pytestmark = pytest.mark.integration

WEEK_MS = 7 * 24 * 3600 * 1000


class ShortRetentionBroker(KafkaBroker):
    """The crawler's broker, but its log cleaner looks for expired segments every 300 ms."""

    def _write_config(self) -> None:
        super()._write_config()
        with self.config_file.open("a") as fh:
            fh.write("log.retention.check.interval.ms=300\nlog.segment.delete.delay.ms=0\n")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    kafka = ShortRetentionBroker(tmp_path_factory.mktemp("kafka-retention"), free_port(), free_port(), heap="384m")
    kafka.start()
    try:
        yield kafka.bootstrap
    finally:
        kafka.stop()


def set_retention(bootstrap: str, topic: str, retention_ms: int, segment_ms: int) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.ms", str(segment_ms), incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})   # kept until the answer: its end cancels the request
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    consumer = group_consumer(bootstrap, f"probe-{uuid.uuid4().hex}")
    try:
        partitions = kafka_io.list_topics(bootstrap)[topic]
        return {p: watermark_offsets(consumer, topic, p, 30.0) for p in range(partitions)}
    finally:
        consumer.close()


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = group_consumer(bootstrap, group)
    try:
        partitions = kafka_io.list_topics(bootstrap)[topic]
        return {tp.partition: tp.offset for tp in consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = group_consumer(bootstrap, group)
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def frontier_records(tag: str, n: int) -> list[tuple[str, bytes]]:
    """`n` records for crawl.frontier, spread over its partitions by their keys."""
    return [(f"host-{tag}-{i}.example", json.dumps({"tag": tag, "i": i}).encode()) for i in range(n)]


def delete_while_down(bootstrap: str, records: list[tuple[str, bytes]]) -> dict[int, tuple[int, int]]:
    """Write `records` to crawl.frontier under a 1 s retention and wait until Kafka has deleted every one
    of them; the retention is a week again on return. Returns the watermarks (low, high) before they were written."""
    before = watermarks(bootstrap, TOPIC_FRONTIER)
    set_retention(bootstrap, TOPIC_FRONTIER, 1000, 200)
    try:
        kafka_io.produce(bootstrap, TOPIC_FRONTIER, records)
        high = {p: hw for p, (_, hw) in watermarks(bootstrap, TOPIC_FRONTIER).items()}
        deadline = time.monotonic() + 90
        while any(low < high[p] for p, (low, _) in watermarks(bootstrap, TOPIC_FRONTIER).items()):
            assert time.monotonic() < deadline, f"Kafka kept the records: {watermarks(bootstrap, TOPIC_FRONTIER)}"
            time.sleep(0.5)
    finally:
        set_retention(bootstrap, TOPIC_FRONTIER, WEEK_MS, WEEK_MS)
    time.sleep(1.0)   # the broker applies the restored retention before anything else is written
    return before


def status_records(bootstrap: str, group: str) -> list[dict]:
    found = [json.loads(v) for k, v in kafka_io.consume(bootstrap, TOPIC_STATUS) if k == STATUS_KEY.encode()]
    return [r for r in found if r["group"] == group]


def test_the_report_counts_what_retention_deleted_and_restore_refuses_to_start_over_it(
        broker: str, capsys: pytest.CaptureFixture[str]) -> None:
    group = f"gap-cli-{uuid.uuid4().hex[:8]}"
    for topic in INPUT_TOPICS:   # the group has read everything written so far
        commit(broker, group, topic, {p: hw for p, (_, hw) in watermarks(broker, topic).items()})
    before = delete_while_down(broker, frontier_records("deleted", 12))
    kafka_io.produce(broker, TOPIC_FRONTIER, frontier_records("kept", 3))   # written after: still kept

    report = read_report(broker, group)
    after = watermarks(broker, TOPIC_FRONTIER)
    assert report.lost == 12 and report.lost_by_topic() == {TOPIC_FRONTIER: 12, TOPIC_OUTCOMES: 0, TOPIC_CONTROL: 0}
    assert {(p.partition, p.committed, p.earliest) for p in report.gaps} == {
        (p, before[p][1], after[p][0]) for p in after if after[p][0] > before[p][1]}
    # the lost records are older than the oldest one kept, where one is kept
    assert all(p.kept_from_ms is not None and p.kept_from_ms > time.time() * 1000 - 120_000
               for p in report.gaps if p.earliest < p.latest)

    args = ["--bootstrap", broker, "--set", f'job.group_id="{group}"']
    config = load_config("", [f'job.group_id="{group}"'])
    with pytest.raises(UpgradeError, match=r"resumes past 12 record\(s\) Kafka has deleted .* nothing was started"):
        check_retention(args, config, accept=False, doing="nothing was started")
    assert check_retention(args, config, accept=True, doing="nothing was started").lost == 12

    code = crawler_main(["restore", "/nowhere/savepoint-1", "--rest-port", str(free_port()),
                         "--job-args", json.dumps(args)])
    err = capsys.readouterr().err
    assert code == 2 and "crawler restore: consumer group" in err and "--accept-retention-gap" in err
    assert "no Flink cluster" not in err   # refused before it looked for a cluster to start on
    code = crawler_main(["restore", "/nowhere/savepoint-1", "--rest-port", str(free_port()), "--accept-retention-gap",
                         "--job-args", json.dumps(args)])
    assert code == 2 and "no Flink cluster answers" in capsys.readouterr().err   # accepted: it went on


def echo_job(broker: str, group: str, start_ms: int, connector_jar: Path, rest_port: int,
             restore_from: str | None):
    """The real Kafka sources of the crawl job (with the job's retention check), each record read echoed
    to pages.parsed through the job's Kafka sink: the test sees what the job read."""
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment

    from jobs.crawl import kafka_sinks, kafka_source, python_worker_settings
    from operators.warc_writer import EVENT_TYPE as TRIPLE_TYPE

    conf = Configuration()
    settings = {**python_worker_settings(sys.executable), "python.execution-mode": "thread",
                "rest.bind-address": "127.0.0.1", "rest.port": str(rest_port), "metrics.fetcher.update-interval": "300"}
    if restore_from is not None:
        settings["execution.state-recovery.path"] = restore_from
    for key, value in settings.items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    env.enable_checkpointing(500)
    env.add_jars(connector_jar.as_uri())
    sources = kafka_source(broker, group, start_ms)
    read = sources.frontier(env).union(sources.outcomes(env), sources.control(env))
    echoed = read.map(lambda raw: (TOPIC_PAGES, group, raw.encode()), output_type=TRIPLE_TYPE).uid("echo").name("echo")
    kafka_sinks(broker).emit(env, echoed)
    return env.execute_async(f"retention-echo-{'restored' if restore_from else 'fresh'}")


def job_metrics(rest_port: int, timeout_s: float = 90.0) -> dict[str, float]:
    """The running job's `kafka.*` metrics, once its retention check has run (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            metrics = read_metrics(f"http://127.0.0.1:{rest_port}", ("kafka",))
        except OSError:   # the REST endpoint comes up with the job
            metrics = {}
        if metrics.get("kafka.retention_checks") or metrics.get("kafka.retention_check_failures") \
                or time.monotonic() > deadline:
            return metrics
        time.sleep(0.5)


def echoed(broker: str, group: str, since_ms: int, tag: str, n: int, job, timeout_s: float = 90.0) -> list[int]:
    """The `i` of the records tagged `tag` that `job` echoed since `since_ms`, once `n` have come (or the
    timeout); fails with the job's error if it stopped."""
    deadline = time.monotonic() + timeout_s
    while True:
        if job.get_job_status().result().name in ("FAILED", "CANCELED", "FINISHED"):
            job.get_job_execution_result().result()   # raises the job's failure
            pytest.fail("the job ended")
        found = sorted(json.loads(v)["i"] for k, v in kafka_io.consume(broker, TOPIC_PAGES, since_ms=since_ms)
                       if k == group.encode() and json.loads(v).get("tag") == tag)
        if len(found) >= n or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def test_a_job_restored_past_the_retention_counts_reports_and_reads_on_from_the_oldest_kept_record(
        broker: str, flink_connector_jar: Path, tmp_path: Path) -> None:
    from pyflink.java_gateway import get_gateway

    group = f"gap-job-{uuid.uuid4().hex[:8]}"
    start_ms = int(time.time() * 1000)
    fresh = echo_job(broker, group, start_ms, flink_connector_jar, free_port(), None)
    try:
        kafka_io.produce(broker, TOPIC_FRONTIER, frontier_records("before", 5))
        assert echoed(broker, group, start_ms, "before", 5, fresh) == list(range(5))
        end = {p: hw for p, (_, hw) in watermarks(broker, TOPIC_FRONTIER).items()}
        deadline = time.monotonic() + 60
        while committed(broker, group, TOPIC_FRONTIER) != end:   # a checkpoint committed what the job read
            assert time.monotonic() < deadline, (committed(broker, group, TOPIC_FRONTIER), end)
            time.sleep(0.5)
        formats = get_gateway().jvm.org.apache.flink.core.execution.SavepointFormatType
        savepoint = fresh._j_job_client.stopWithSavepoint(False, (tmp_path / "savepoints").as_uri(),
                                                          formats.CANONICAL).get()
    except BaseException:
        fresh.cancel().result()
        raise
    # Nothing was read after that checkpoint: the group's offsets are the savepoint's.
    assert committed(broker, group, TOPIC_FRONTIER) == end

    delete_while_down(broker, frontier_records("deleted", 7))
    restored_at = int(time.time() * 1000)
    kafka_io.produce(broker, TOPIC_FRONTIER, frontier_records("kept", 3))
    rest_port = free_port()
    restored = echo_job(broker, group, start_ms, flink_connector_jar, rest_port, savepoint)
    try:
        # read on from the oldest record kept: those written after the deletion, none of the deleted
        assert echoed(broker, group, restored_at, "kept", 3, restored) == [0, 1, 2]
        metrics = job_metrics(rest_port)
    finally:
        restored.cancel().result()
    assert metrics["kafka.retention_checks"] == 1 and metrics["kafka.retention_check_failures"] == 0
    assert metrics["kafka.retention_gap_records"] == 7
    assert metrics["kafka.retention_gap_records_crawl_frontier"] == 7
    assert metrics["kafka.retention_gap_records_crawl_outcomes"] == 0
    (record,) = status_records(broker, group)
    assert record["source"] == "job" and record["lost"] == 7 and record["topics"][TOPIC_FRONTIER] == 7
    assert sum(p["lost"] for p in record["partitions"]) == 7
    assert all(p["restored"] == end[p["partition"]] for p in record["partitions"])


def test_a_fresh_job_after_an_old_run_of_its_group_reports_no_gap(broker: str, flink_connector_jar: Path) -> None:
    """A fresh job from `start_ms` starts at its own offsets, whatever an older run of its group left behind."""
    group = f"gap-fresh-{uuid.uuid4().hex[:8]}"
    commit(broker, group, TOPIC_FRONTIER, {p: hw for p, (_, hw) in watermarks(broker, TOPIC_FRONTIER).items()})
    delete_while_down(broker, frontier_records("old-run", 4))   # an old run of the group, long stopped
    assert read_report(broker, group).lost == 4
    rest_port = free_port()
    job = echo_job(broker, group, int(time.time() * 1000), flink_connector_jar, rest_port, None)
    try:
        metrics = job_metrics(rest_port)
    finally:
        job.cancel().result()
    assert metrics["kafka.retention_checks"] == 1 and metrics["kafka.retention_gap_records"] == 0
    assert status_records(broker, group) == []
