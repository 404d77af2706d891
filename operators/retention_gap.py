"""The job's own retention-gap check: at every start, one subtask compares where the job's Kafka
sources resume with what the broker still keeps, counts the records lost and reports them
(bus/retention_gap.py explains the gap; decision 3791).

The check hangs off the `crawl.control` source (jobs/crawl.py `kafka_source`) as a branch that emits
nothing: that source is the quietest, so the branch costs a Python call per operator command and none
per discovery. Flink opens the operator before the task runs and triggers no checkpoint until every
task runs, so `open()` reads the group's offsets as the restore left them, before the job commits new
ones. It never fails the job (the records are gone whatever the job does): the gap shows as counters
under the metric group `kafka`, a `retention_gap` record on `crawl.status` and a warning in the
TaskManager's log.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from confluent_kafka import KafkaException
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import FlatMapFunction, RuntimeContext

from bus.retention_gap import INPUT_TOPICS, read_report, report_status
from operators.context import subtask_index

_LOG = logging.getLogger(__name__)

# Counters under the metric group `kafka` (docs/metrics.md): checks made, checks that could not read the
# broker, records lost in all; and records lost per input topic, `retention_gap_records_<topic>`.
METRICS = ("retention_checks", "retention_check_failures", "retention_gap_records")


def topic_metric(topic: str) -> str:
    """The counter of records lost on `topic`: `retention_gap_records_crawl_frontier` for crawl.frontier."""
    return "retention_gap_records_" + topic.replace(".", "_").replace("-", "_")


# The configuration keys under which `flink run -s PATH` (and a restore by the Kubernetes operator, or a
# test's MiniCluster) name the savepoint or checkpoint the job starts from; the second is the older name.
RESTORE_KEYS = ("execution.state-recovery.path", "execution.savepoint.path")


def restore_path(env: StreamExecutionEnvironment) -> str | None:
    """The savepoint or checkpoint the job being built will start from (None: a fresh start)."""
    conf = env._j_stream_execution_environment.getConfiguration().toMap()
    return next((str(conf.get(key)) for key in RESTORE_KEYS if conf.get(key)), None)


class RetentionGapCheck(FlatMapFunction):
    """At `open()` of subtask 0: the retention report of `group` over `topics` (the job's input topics)."""

    def __init__(self, bootstrap: str, group: str, topics: Sequence[str] = INPUT_TOPICS,
                 timeout_s: float = 10.0) -> None:
        self.bootstrap, self.group, self.topics, self.timeout_s = bootstrap, group, tuple(topics), timeout_s

    def open(self, runtime_context: RuntimeContext) -> None:
        metrics = runtime_context.get_metrics_group().add_group("kafka")
        counters = {name: metrics.counter(name) for name in METRICS + tuple(map(topic_metric, self.topics))}
        if subtask_index(runtime_context) != 0:
            return
        try:
            report = read_report(self.bootstrap, self.group, self.topics, timeout_s=self.timeout_s)
        except (KafkaException, TimeoutError) as exc:
            # Kafka down: the sources fail too and the job restarts; the next start checks again.
            counters["retention_check_failures"].inc()
            _LOG.warning("retention gap check: Kafka at %s did not answer: %s", self.bootstrap, exc)
            return
        counters["retention_checks"].inc()
        if not report.lost:
            return
        counters["retention_gap_records"].inc(report.lost)
        for topic, lost in report.lost_by_topic(self.topics).items():
            if lost:
                counters[topic_metric(topic)].inc(lost)
        _LOG.warning("retention gap: %s", report.summary())
        try:
            report_status(self.bootstrap, report, "job", timeout_s=self.timeout_s)
        except (KafkaException, TimeoutError) as exc:
            _LOG.warning("retention gap: the crawl.status record was not written: %s", exc)

    def flat_map(self, value: Any) -> Iterator[Any]:
        return iter(())
