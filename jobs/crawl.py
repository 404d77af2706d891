"""The crawl job: Kafka `crawl.frontier` → frontier (keyed by host) → fetch → parse → WARC → Kafka.

Submitted with `flink run -py jobs/crawl.py --bootstrap HOST:PORT ...` (see `crawler crawl`), or run
in process on a MiniCluster by tests through `build_pipeline`, which takes its sources and sinks so a
test can run the real graph (docs/architecture.md §1): the whole dataflow is testable in process.

Flink 2.x has no iterations, so the loop closes through Kafka: the WARC writer's discoveries go back
to `crawl.frontier`, and the ends of leases (completions, the fetcher's robots.txt and tdmrep.json
results) to `crawl.outcomes`, both keyed by host. Two topics, read by two sources, so that a backlog of
discoveries never holds back the end of a lease (decision 1610). The fetcher is keyed by server
address and keeps the per-address limit itself (decision 1612).
With `job.gather_discoveries_ms`, each host's `crawl.frontier` records reach the frontier gathered
over a short window, one element per host (decision 3914).
Operator commands on `crawl.control` are validated and broadcast to every frontier subtask. The stages
from the fetcher to the WARC writer are built in jobs/stages.py.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import site
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pyflink.common import Configuration, Row, Types, WatermarkStrategy
from pyflink.common.serialization import SimpleStringSchema
from pyflink.datastream import DataStream, StreamExecutionEnvironment
from pyflink.datastream.connectors.kafka import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaSource,
    KafkaTopicPartition,
)
from pyflink.datastream.functions import FlatMapFunction, RuntimeContext
from pyflink.table import DataTypes, Schema, StreamTableEnvironment, TableDescriptor
from pyflink.table.expressions import col

from bus.retention_gap import commit_offsets, start_offsets
from jobs import stages
from operators.census import CENSUS_TAG, attach_census
from operators.discovery_gather import gathered_by_host
from operators.frontier import FRONTIER_EVENTS_TAG, FrontierFunction, attach_frontier, broadcast_controls
from operators.keyed_union import keyed_row, keyed_row_type, keyed_union
from operators.python_mode import set_python_mode
from operators.retention_gap import RetentionGapCheck, restore_path
from operators.stable_uids import pin_remaining_uids, pin_uids, transformations_of
from operators.warc_writer import EVENT_TYPE as TRIPLE_TYPE
from udfs.config import CrawlConfig, ConfigError, load_config
from udfs.control import parse_control
from udfs.jobconfig import JOB_ARGS_KEY, JobPolicy
from udfs.records import (
    TOPIC_CONTROL,
    TOPIC_FRONTIER,
    TOPIC_OUTCOMES,
    TOPIC_PAGES,
    TOPIC_STATUS,
    ContractError,
    decode_frontier_event,
    encode,
)

# Events between Python operators (dicts); every branch ends in TRIPLE_TYPE: (topic, key, value bytes).
EVENT_TYPE = Types.PICKLED_BYTE_ARRAY()


@dataclasses.dataclass(frozen=True)
class Sources:
    """Builds the streams of raw `crawl.frontier`, `crawl.outcomes` and `crawl.control` values (JSON
    text); without a control source the job runs with no operator control (tests of the loop alone)."""

    frontier: Callable[[StreamExecutionEnvironment], DataStream]
    outcomes: Callable[[StreamExecutionEnvironment], DataStream]
    control: Callable[[StreamExecutionEnvironment], DataStream] | None = None


@dataclasses.dataclass(frozen=True)
class Sinks:
    """Takes the stream of (topic, key, value) triples and writes it out."""

    emit: Callable[[StreamExecutionEnvironment, DataStream], None]


# A reject carries at most this many characters of the record and of the reason it was refused for (which
# may quote the record): a record at the topic's size cap must not make a reject over the sink's.
REJECT_TEXT_CHARS = 1000


class DecodeEvents(FlatMapFunction):
    """Raw crawl.frontier values → event dicts; a malformed value becomes a `crawl.status` reject, never a crash."""

    topic, reject_type, metric = TOPIC_FRONTIER, "rejected_event", "events_rejected"

    def open(self, runtime_context: RuntimeContext) -> None:
        self.rejected = runtime_context.get_metrics_group().add_group("frontier").counter(self.metric)

    def decode(self, value: str) -> dict[str, Any]:
        return decode_frontier_event(value)

    def flat_map(self, value: str) -> Iterator[dict[str, Any]]:
        try:
            yield {"kind": "event", "event": self.decode(value)}
        except ContractError as exc:
            self.rejected.inc()
            yield {"kind": "reject", "reason": str(exc)[:REJECT_TEXT_CHARS], "raw": value[:REJECT_TEXT_CHARS],
                   "topic": self.topic, "type": self.reject_type}


class DecodeGathered(DecodeEvents):
    """Rows of one host's raw crawl.frontier values gathered over a window (operators.discovery_gather) →
    one item of the valid events together, and a reject for each malformed value."""

    def flat_map(self, value: Row) -> Iterator[dict[str, Any]]:
        events = []
        for raw in value[1] or ():
            for item in super().flat_map(raw):
                if item["kind"] == "event":
                    events.append(item["event"])
                else:
                    yield item
        if events:
            yield {"kind": "events", "events": events}


class DecodeOutcomes(DecodeEvents):
    """Raw crawl.outcomes values → event dicts (the same schema; a reject names this topic)."""

    topic = TOPIC_OUTCOMES


class DecodeControls(DecodeEvents):
    """Raw crawl.control values → validated control records (udfs.control); a bad command is a reject."""

    topic, reject_type, metric = TOPIC_CONTROL, "rejected_command", "controls_rejected"

    def decode(self, value: str) -> dict[str, Any]:
        return parse_control(value).to_record()


def _rejects_to_status(item: dict[str, Any]) -> list[tuple[str, str, bytes]]:
    if item["kind"] != "reject":
        return []
    body = {"v": 1, "type": item["type"], "topic": item["topic"], "reason": item["reason"], "raw": item["raw"]}
    return [(TOPIC_STATUS, "rejected", encode(body))]


def _valid_events(item: dict[str, Any]) -> list[dict[str, Any]]:
    return [item["event"]] if item["kind"] == "event" else []


def _frontier_events(item: dict[str, Any]) -> list[Row]:
    """Events for the frontier, keyed by host where they are decoded (operators.keyed_union, decision 1833):
    all valid ones but `ip_done`, which this job never writes (the fetcher keeps the per-address limit);
    a topic may still hold some that another job wrote. Gathered events go as one list per host."""
    if item["kind"] == "events":
        # Keyed again by each event's own host: the window grouped the raw text by what Flink's JSON
        # reader took for its host, and the frontier's key must be the host the decoder read.
        by_host: dict[str, list[dict[str, Any]]] = {}
        for event in item["events"]:
            if event["type"] != "ip_done":
                by_host.setdefault(event["host"], []).append(event)
        return [keyed_row(host, events) for host, events in by_host.items()]
    if item["kind"] != "event" or item["event"]["type"] == "ip_done":
        return []
    return [keyed_row(item["event"]["host"], item["event"])]


def build_pipeline(env: StreamExecutionEnvironment, sources: Sources, sinks: Sinks, config: CrawlConfig) -> None:
    """Add the whole crawl graph to `env`; every operator is named and has a stable uid."""
    job = config.job
    env.set_max_parallelism(job.max_parallelism)
    env.set_parallelism(job.parallelism)
    env.enable_checkpointing(job.checkpoint_interval_ms)
    # Aligned checkpoints whatever the cluster's configuration says: the WARC writer pairs a page with its
    # dedup verdict, and snapshots the captures it holds, on the barrier order that alignment gives
    # (decision 3780); an unaligned barrier would overtake records and lose such pairs.
    env.get_checkpoint_config().disable_unaligned_checkpoints()
    env.set_buffer_timeout(job.buffer_timeout_ms)

    # The job-level mode, in force at execute(), and that of every operator added outside a scoped
    # `python_mode` (operators/python_mode.py): thread. The stages that need Python workers scope
    # `process` mode around their own operators (jobs/stages.py).
    set_python_mode(env, "thread")
    frontier_records, decoder = sources.frontier(env), DecodeEvents()
    if job.gather_discoveries_ms:   # each host's records of a window as one element (decision 3914)
        frontier_records = gathered_by_host(frontier_records, job.gather_discoveries_ms)
        decoder = DecodeGathered()
    decoded = frontier_records.flat_map(decoder, output_type=EVENT_TYPE).uid("decode-events").name("decode events")
    # A second source, so the frontier's input alternates between the topics: the ends of leases wait
    # behind a few buffers of discoveries at most, never behind the topic's backlog.
    outcomes = (sources.outcomes(env)
                .flat_map(DecodeOutcomes(), output_type=EVENT_TYPE).uid("decode-outcomes").name("decode outcomes"))
    # flat_map, not filter + map: PyFlink fuses chained Python functions and keeps one uid of them.
    rejects = (decoded.flat_map(_rejects_to_status, output_type=TRIPLE_TYPE)
               .uid("rejects-to-status").name("rejects to status"))
    rejects = rejects.union(outcomes.flat_map(_rejects_to_status, output_type=TRIPLE_TYPE)
                            .uid("outcome-rejects-to-status").name("outcome rejects to status"))
    controls = control_stream(env, sources)
    rejects = rejects.union(controls.flat_map(_rejects_to_status, output_type=TRIPLE_TYPE)
                            .uid("control-rejects-to-status").name("control rejects to status"))
    valid_controls = (controls.flat_map(_valid_events, output_type=EVENT_TYPE)
                      .uid("valid-controls").name("valid controls"))
    soft404 = config.soft404 if config.soft404.enabled else None   # probes in the frontier, checks in parse
    frontier = FrontierFunction(config.frontier, config.politeness, config.robots, config.traps, config.fetch,
                                config.bloom, config.recrawl, config.host_quality, optout=config.optout,
                                soft404=soft404,
                                budgets=config.budgets if config.budgets.enabled else None,
                                census=config.budgets.enabled and config.budgets.domain_shares,
                                sitemaps=config.sitemaps if config.sitemaps.follow else None,
                                thread_nice=config.job.frontier_nice, control=config.control,
                                render=config.render)
    # Keyed on each side, where each is decoded: no key-by vertex after the union, one hop and one Python
    # call per event fewer; each kind reaches the frontier on channels of its own.
    keyed_event = keyed_row_type(Types.STRING(), EVENT_TYPE)
    events = keyed_union(
        decoded.flat_map(_frontier_events, output_type=keyed_event).uid("valid-events").name("valid events"),
        outcomes.flat_map(_frontier_events, output_type=keyed_event).uid("valid-outcomes").name("valid outcomes"),
        key_type=Types.STRING(), value_type=EVENT_TYPE)
    requests = attach_frontier(events, broadcast_controls(valid_controls), frontier, EVENT_TYPE)
    # Each host's share of its domain's budget (decision 1811): the census answers on crawl.outcomes.
    census = [attach_census(requests.get_side_output(CENSUS_TAG), TRIPLE_TYPE)] if frontier.config.census_on else []
    # A robots.txt that lists a sitemap on another host sends it to that host's key (decision 1812).
    for_other_hosts = requests.get_side_output(FRONTIER_EVENTS_TAG)

    # Host names sharing a server share its budget: the fetcher is keyed by server address and
    # holds each address's limit itself. Robots.txt, tdmrep.json and probe results go
    # straight to crawl.outcomes; a page goes to parse, then to the WARC writer, which pairs it with
    # the verdict dedup gives on a small probe of it (decision 1616). With `render.enabled`, parse picks
    # the pages that need their scripts run, the writer sends each to its host's frontier as a render
    # event, and the fetcher that owns the host's address renders the lease (decisions 3903, 3906).
    fetched = stages.fetch(requests, config.fetch, job.fetch_capacity, gate=config.ipgate,
                           parallelism=job.fetch_parallelism, render=config.render)
    preflight = stages.preflight_events(fetched, config.fetch, config.optout, config.extract,
                                        parallelism=job.fetch_parallelism)
    pages = stages.parse(fetched, config.extract, config.optout, soft404, config.sitemaps, config.warc,
                         slot_group=job.parse_slot_group, parallelism=job.parse_width, render=config.render)
    verdicts = stages.dedup_verdicts(pages, config.dedup, config.warc, parse_parallelism=job.parse_width)
    archived = stages.warc_writer(pages, verdicts, job.warc_root, warc=config.warc, storage=config.storage,
                                  discovery=config.discovery, dedup=config.dedup, slot_group=job.writer_slot_group,
                                  user_agent=config.fetch.user_agent)

    sinks.emit(env, preflight.union(archived).union(rejects, for_other_hosts, *census))
    # PyFlink's own key-by and side-output maps get uids too: an operator without one is known by its
    # place in the graph, which any change before it moves (decision 3915).
    pin_remaining_uids(env)


def control_stream(env: StreamExecutionEnvironment, sources: Sources) -> DataStream:
    """Decoded crawl.control items (valid records and rejects); an empty stream without a control source."""
    raw = (sources.control(env) if sources.control is not None
           else env.from_collection([], type_info=Types.STRING()).uid("no-controls").name("no controls"))
    return raw.flat_map(DecodeControls(), output_type=EVENT_TYPE).uid("decode-controls").name("decode controls")


def kafka_source(bootstrap: str, group_id: str, start_ms: int | None = None, job: JobPolicy = JobPolicy()) -> Sources:
    """`crawl.frontier`, `crawl.outcomes` and `crawl.control` from Kafka. A fresh job starts at `start_ms` (records
    produced from then on) or else at the group's committed offsets, else the earliest record; a job
    restored from a savepoint or checkpoint resumes at the offsets stored in it, whatever these say
    (so commands sent while the job was stopped apply when it comes back).

    Where Kafka no longer keeps the offset a source resumes at (a job down longer than the topic's
    retention), it goes on from the earliest record kept, never from the end; the job counts and reports
    the records it skipped that way (operators/retention_gap.py, hung off the control source). A fresh
    job from `start_ms` finds its starting offsets here, as the client builds the job, and commits them
    to the group: the group's committed offsets are then always where a restart resumes (the sources
    commit each checkpoint's), which is what the check compares with the broker (decision 3791)."""

    def reader(topic: str, uid: str, check: bool = False) -> Callable[[StreamExecutionEnvironment], DataStream]:
        def build(env: StreamExecutionEnvironment) -> DataStream:
            # The reset strategy is also what a source does with an offset the broker no longer keeps: EARLIEST
            # (Flink's timestamp initializer would use LATEST and skip every record not read yet).
            start = KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST)
            if start_ms is not None and restore_path(env) is None:
                offsets = start_offsets(bootstrap, topic, start_ms)
                if offsets:
                    commit_offsets(bootstrap, group_id, topic, offsets)
                    start = KafkaOffsetsInitializer.offsets(
                        {KafkaTopicPartition(topic, p): o for p, o in offsets.items()}, KafkaOffsetResetStrategy.EARLIEST)
            source = (KafkaSource.builder()
                      .set_bootstrap_servers(bootstrap)
                      .set_topics(topic)
                      .set_group_id(group_id)
                      .set_starting_offsets(start)
                      .set_value_only_deserializer(SimpleStringSchema())
                      .set_property("partition.discovery.interval.ms", "10000")
                      .set_property("fetch.min.bytes", str(job.kafka_fetch_min_bytes))
                      .set_property("fetch.max.wait.ms", str(job.kafka_fetch_max_wait_ms))
                      .build())
            stream = env.from_source(source, WatermarkStrategy.no_watermarks(), topic).uid(uid)
            if check:   # a branch that emits nothing: its open() checks the group against the retention
                (stream.flat_map(RetentionGapCheck(bootstrap, group_id), output_type=Types.STRING())
                 .uid("retention-gap-check").name("retention gap check"))
            return stream
        return build

    return Sources(frontier=reader(TOPIC_FRONTIER, "frontier-source"),
                   outcomes=reader(TOPIC_OUTCOMES, "outcomes-source"),
                   control=reader(TOPIC_CONTROL, "control-source", check=True))


# What the job writes. `crawl.control` is read by the job (operator commands), never written.
OUTPUT_TOPICS = (TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, TOPIC_STATUS)


def kafka_sinks(bootstrap: str, topics: Sequence[str] = OUTPUT_TOPICS, job: JobPolicy = JobPolicy()) -> Sinks:
    """One keyed Kafka sink for every output topic. The Table API's Kafka connector writes a chosen
    column as the record key (`key.fields`), which the DataStream KafkaSink cannot do from Python:
    `crawl.frontier` is keyed by host and `pages.parsed` by url_fp, so each topic's partitions follow
    its key. The record's topic is the writable `topic` metadata column. The (topic, key, value)
    triples are typed tuples, so the table is made from them in the JVM, with no Python operator
    between the job's last Python operators and the sink (a Python map to rows cost about 2 ms of the
    TaskManager's one interpreter per page, docs/perf/crawl-throughput-history.md step 4). Every topic a triple names is a
    constant of the job's code, one of `topics`."""

    def emit(env: StreamExecutionEnvironment, triples: DataStream) -> None:
        t_env = StreamTableEnvironment.create(env)
        t_env.create_temporary_table("sink_kafka", TableDescriptor.for_connector("kafka")
                                     .schema(Schema.new_builder()
                                             .column("k", DataTypes.STRING())
                                             .column("v", DataTypes.BYTES())
                                             .column_by_metadata("topic", DataTypes.STRING(), "topic")
                                             .build())
                                     .option("topic", ";".join(sorted(topics)))  # the metadata picks one
                                     .option("properties.bootstrap.servers", bootstrap)
                                     .option("properties.max.request.size", str(16 * 1024 * 1024))
                                     .option("properties.linger.ms", str(job.kafka_linger_ms))
                                     .option("properties.batch.size", str(job.kafka_batch_bytes))
                                     .option("key.format", "raw")
                                     .option("key.fields", "k")
                                     .option("value.format", "raw")
                                     .option("value.fields-include", "EXCEPT_KEY")
                                     .option("sink.delivery-guarantee", "at-least-once")
                                     .build())
        rows = t_env.from_data_stream(triples, col("topic"), col("k"), col("v"))
        statements = t_env.create_statement_set()
        statements.add_insert("sink_kafka", rows.select(col("k"), col("v"), col("topic")))
        ends_before = len(transformations_of(env))
        statements.attach_as_datastream()
        # The sink's writer and committer hold state: uids of their own, not ids from their place in
        # the graph (decision 3915).
        pin_uids(transformations_of(env)[ends_before:], [triples], "kafka-sink")

    return Sinks(emit=emit)


def python_worker_settings(python_executable: str = sys.executable) -> dict[str, str]:
    """Where the Python workers find their interpreter and our code. `thread`-mode operators run in an
    interpreter embedded in the JVM (pemja), which ignores the virtualenv it was pointed at: without the
    virtualenv's site-packages on `python.pythonpath` it fails with "No module named 'pemja'"."""
    project_root = str(Path(__file__).resolve().parents[1])
    return {
        "python.executable": python_executable,
        "python.client.executable": python_executable,
        "python.pythonpath": os.pathsep.join([*site.getsitepackages(), project_root]),
    }


def configure_env(env: StreamExecutionEnvironment, config: CrawlConfig, python_executable: str | None) -> None:
    """Settings the Python operators need whatever the cluster's own configuration says."""
    conf = Configuration()
    conf.set_string("python.fn-execution.bundle.time", str(config.job.bundle_time_ms))
    conf.set_string("python.fn-execution.bundle.size", str(config.job.bundle_size))
    # A local run's MiniCluster gets the slots the job takes (by default it has as many as the widest
    # operator, too few with the writers' own slot sharing group); a session cluster keeps its own.
    conf.set_string("taskmanager.numberOfTaskSlots", str(config.job.slots))
    if python_executable:
        for key, value in python_worker_settings(python_executable).items():
            conf.set_string(key, value)
    env.configure(conf)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="jobs/crawl.py", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, host:port")
    parser.add_argument("--config", type=Path, help="TOML file of overrides (see `crawler config`)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--job-name", default="crawl")
    parser.add_argument("--start-timestamp-ms", type=int,
                        help="a fresh job reads its input topics from this time on (ignored on restore)")
    parser.add_argument("--python", help="Python interpreter of the workers (default: the cluster's setting)")
    return parser.parse_args(argv)


def load_job_config(config_file: Path | None, overrides: list[str]) -> CrawlConfig:
    text = config_file.read_text(encoding="utf-8") if config_file else ""
    return load_config(text, overrides)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    try:
        config = load_job_config(args.config, args.overrides)
    except (ConfigError, OSError) as exc:
        print(f"crawl job: bad configuration: {exc}", file=sys.stderr)
        return 2
    env = StreamExecutionEnvironment.get_execution_environment()
    configure_env(env, config, args.python)
    env.get_config().set_global_job_parameters({JOB_ARGS_KEY: json.dumps(argv)})
    build_pipeline(env, kafka_source(args.bootstrap, config.job.group_id, args.start_timestamp_ms, config.job),
                   kafka_sinks(args.bootstrap, job=config.job), config)
    print(json.dumps({"submitting": args.job_name, "config": config.as_dict()["job"]}), flush=True)
    env.execute(args.job_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
