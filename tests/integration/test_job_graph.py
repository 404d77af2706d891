"""The crawl job's graph as PyFlink builds it (no job runs): which operators run at which width and in
which Python execution mode, and which edges shuffle records."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from pyflink.common import Configuration, Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.util.java_utils import get_j_env_configuration

from jobs.crawl import build_pipeline, configure_env, kafka_sinks, kafka_source
from operators.python_mode import python_mode, set_python_mode
from udfs.config import load_config


def _built(tmp_path: Path, connector_jar: Path, *settings: str,
           flink: Configuration | None = None) -> StreamExecutionEnvironment:
    """The job's graph built on an environment of its own (`flink`: the cluster's configuration)."""
    config = load_config("", [f'job.warc_root="{tmp_path / "warc"}"', *settings])
    env = StreamExecutionEnvironment.get_execution_environment(flink)
    configure_env(env, config, sys.executable)
    env.add_jars(connector_jar.as_uri())
    # Port 9 (discard): nothing connects while the graph is only built.
    build_pipeline(env, kafka_source("127.0.0.1:9", "graph-test"), kafka_sinks("127.0.0.1:9"), config)
    return env


def _plan(tmp_path: Path, connector_jar: Path, *settings: str) -> list[dict[str, Any]]:
    return json.loads(_built(tmp_path, connector_jar, *settings).get_execution_plan())["nodes"]


def _named(nodes: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [node for node in nodes if node["contents"].split(",")[0] == name]
    assert len(found) == 1, [node["contents"] for node in nodes]
    return found[0]


def test_parse_parallelism_widens_parse_and_its_probe_with_no_shuffle_between(tmp_path: Path,
                                                                             flink_connector_jar: Path) -> None:
    nodes = _plan(tmp_path, flink_connector_jar, "job.parse_parallelism=2")
    by_id = {node["id"]: node for node in nodes}
    parse, probe = _named(nodes, "parse"), _named(nodes, "dedup probe")
    assert parse["parallelism"] == 2 and probe["parallelism"] == 2
    assert [(by_id[edge["id"]]["contents"].split(",")[0], edge["ship_strategy"]) for edge in probe["predecessors"]] \
        == [("parse", "FORWARD")]
    assert _named(nodes, "frontier")["parallelism"] == 1 and _named(nodes, "warc writer")["parallelism"] == 1


def test_the_preflight_filter_runs_beside_each_fetch_subtask_with_no_shuffle_between(tmp_path: Path,
                                                                                      flink_connector_jar: Path) -> None:
    """Every fetch result, page bodies and all, passes the robots.txt, tdmrep.json and probe filter: it
    takes the fetcher's width, so it runs in each fetch subtask's worker."""
    nodes = _plan(tmp_path, flink_connector_jar, "job.fetch_parallelism=2")
    by_id = {node["id"]: node for node in nodes}
    preflight = _named(nodes, "robots events")
    assert preflight["parallelism"] == _named(nodes, "fetch")["parallelism"] == 2
    assert [(by_id[edge["id"]]["contents"].split(",")[0], edge["ship_strategy"])
            for edge in preflight["predecessors"]] == [("fetch", "FORWARD")]


def test_parse_runs_at_the_jobs_parallelism_by_default(tmp_path: Path, flink_connector_jar: Path) -> None:
    nodes = _plan(tmp_path, flink_connector_jar)
    assert _named(nodes, "parse")["parallelism"] == 1 and _named(nodes, "dedup probe")["parallelism"] == 1


def test_lease_ends_and_discoveries_reach_the_frontier_on_edges_of_their_own(tmp_path: Path,
                                                                            flink_connector_jar: Path) -> None:
    """Decision 1833: each side is keyed where it is decoded, so no union vertex merges them into one queue."""
    nodes = _plan(tmp_path, flink_connector_jar, "job.parallelism=2")
    by_id = {node["id"]: node for node in nodes}
    frontier = _named(nodes, "frontier")
    keyed = [by_id[edge["id"]]["contents"].split(",")[0] for edge in frontier["predecessors"]
             if edge["ship_strategy"] == "HASH"]
    assert sorted(keyed) == ["valid events", "valid outcomes"]
    assert not [node for node in nodes if node["contents"].startswith("_stream_key_by_map_operator")
                and any(by_id[edge["id"]]["contents"].startswith("valid") for edge in node["predecessors"])]


def test_gathered_discoveries_pass_a_window_keyed_by_host_between_the_frontier_source_and_the_decoder(
        tmp_path: Path, flink_connector_jar: Path) -> None:
    """Decision 3914: with `job.gather_discoveries_ms` (500 ms by default) the decoder reads the window's rows, not the source;
    off, it reads the source as before, and every other operator keeps its uid either way."""
    def upstream_of_decoder(*settings: str) -> list[str]:
        """What feeds the decoder, nearest first, up to the first node fed by none."""
        nodes = _plan(tmp_path, flink_connector_jar, *settings)
        by_id = {node["id"]: node for node in nodes}
        node, found = _named(nodes, "decode events"), []
        while node.get("predecessors"):
            (edge,) = node["predecessors"]
            node = by_id[edge["id"]]
            found.append(node["contents"])
        return found

    gathered = upstream_of_decoder("job.gather_discoveries_ms=500")
    assert gathered[-1] == "Source: crawl.frontier" and any(
        "Window" in step and "ARRAY_AGG" in step for step in gathered), gathered
    assert upstream_of_decoder("job.gather_discoveries_ms=0") == ["Source: crawl.frontier"]
    gathered_uids = _operators(_built(tmp_path, flink_connector_jar, "job.gather_discoveries_ms=500"))
    assert {uid: found for uid, found in gathered_uids.items() if not uid.startswith("gather-discoveries")} \
        == _operators(_built(tmp_path, flink_connector_jar, "job.gather_discoveries_ms=0"))


def test_network_buffers_wait_at_most_the_jobs_buffer_timeout(tmp_path: Path, flink_connector_jar: Path) -> None:
    """Decision 1835: the job sets Flink's buffer timeout itself (`job.buffer_timeout_ms`), whatever the cluster says."""
    assert _built(tmp_path, flink_connector_jar).get_buffer_timeout() == 100
    assert _built(tmp_path, flink_connector_jar, "job.buffer_timeout_ms=10").get_buffer_timeout() == 10


def test_checkpoints_stay_aligned_when_the_cluster_asks_for_unaligned_ones(tmp_path: Path,
                                                                           flink_connector_jar: Path) -> None:
    cluster = Configuration()
    cluster.set_string("execution.checkpointing.interval", "10 s")
    cluster.set_string("execution.checkpointing.unaligned.enabled", "true")
    asked = StreamExecutionEnvironment.get_execution_environment(cluster).get_checkpoint_config()
    assert asked.is_unaligned_checkpoints_enabled()
    built = _built(tmp_path, flink_connector_jar, flink=cluster).get_checkpoint_config()
    assert not built.is_unaligned_checkpoints_enabled()


def _operators(env: StreamExecutionEnvironment) -> dict[str, tuple[str, str | None, str]]:
    """uid → (name, Python execution mode or None for a Java operator, slot sharing group) of every
    operator with a uid, as the graph runs (PyFlink's fused operators keep the first one's uid), and
    under "" the sorted (mode, slot group) of the Python operators without one."""
    found: dict[str, Any] = {"": []}
    graph = env._generate_stream_graph(False)
    for node in graph.getStreamNodes().toArray():
        factory = node.getOperatorFactory()
        # Python operators come in simple factories; sources, sinks and the Table API's operators do not.
        simple = factory.getClass().getSimpleName() == "SimpleOperatorFactory"
        kind = factory.getOperator().getClass().getSimpleName() if simple else ""
        mode = ("thread" if kind.startswith("EmbeddedPython")
                else "process" if kind.startswith("ExternalPython") else None)
        uid, group = node.getTransformationUID(), node.getSlotSharingGroup()
        if uid is not None:
            # The Table API's names carry numbers ("Calc[32]", "source$19") that count every query
            # planned in the JVM so far.
            found[uid] = (re.sub(r"\[\d+\]|\$\d+", "", node.getOperatorName().split(",")[0]), mode, group)
        elif mode is not None:
            found[""].append((mode, group))
    found[""].sort()
    return found


# Every operator's uid, name, mode and slot group: a savepoint restores state by uid, and a stateful
# operator keeps its mode for the life of its state (docs/architecture.md §4, §9).
_FRONT_OPERATORS = {
    "frontier-source": ("Source: crawl.frontier", None, "default"),
    "outcomes-source": ("Source: crawl.outcomes", None, "default"),
    "control-source": ("Source: crawl.control", None, "default"),
    "decode-events": ("decode events", "thread", "default"),
    "decode-outcomes": ("decode outcomes", "thread", "default"),
    "decode-controls": ("decode controls", "thread", "default"),
    "rejects-to-status": ("rejects to status", "thread", "default"),
    "outcome-rejects-to-status": ("outcome rejects to status", "thread", "default"),
    "control-rejects-to-status": ("control rejects to status", "thread", "default"),
    "retention-gap-check": ("retention gap check", "thread", "default"),
    "valid-events": ("valid events", "thread", "default"),
    "valid-outcomes": ("valid outcomes", "thread", "default"),
    "valid-controls": ("valid controls", "thread", "default"),
    "frontier": ("frontier", "thread", "default"),
    "domain-census": ("domain census", "thread", "default"),
    "fetch-by-address": ("fetch", "process", "default"),
    "robots-events": ("robots events", "process", "default"),
    "parse": ("parse", "process", "parse"),
    "warc-writer-joined": ("warc writer", "process", "writer"),
}
# Each host's crawl.frontier records gathered over a window (decision 3914), as Flink SQL plans it.
_GATHER_OPERATORS = {
    "gather-discoveries-4": ("*anonymous_datastream_source*", None, "default"),
    "gather-discoveries-3": ("Calc", None, "default"),
    "gather-discoveries-2": ("WindowAggregate", None, "default"),
    "gather-discoveries-1": ("Calc", None, "default"),
    "gather-discoveries": ("TableToDataStream", None, "default"),
}
# The Kafka sink's operators as the Table API plans them, with uids of their own (decision 3915).
_SINK_OPERATORS = {
    "kafka-sink-2": ("SourceConversion", None, "default"),
    "kafka-sink-1": ("Calc", None, "default"),
    "kafka-sink": ("sink_kafka: Writer", None, "default"),
    "Sink Committer: kafka-sink": ("sink_kafka: Committer", None, "default"),
}
# The key-by and side-output maps PyFlink adds, named after the operator they read (decision 3915).
_KEY_AND_SIDE_OPERATORS = {
    "frontier:domain-census/Map": ("Map", "thread", "default"),      # census's side output, with its key
    "frontier:frontier-events/Map": ("Map", "thread", "default"),    # events for other hosts' frontiers
    "frontier/_stream_key_by_map_operator": ("_stream_key_by_map_operator", "process", "default"),  # fetch's key
    "parse/_stream_key_by_map_operator": ("_stream_key_by_map_operator", "process", "parse"),  # the writer's key
}
_DEDUP_OPERATORS = {
    "dedup-probe": ("dedup probe", "process", "parse"),
    "dedup-exact": ("dedup exact", "thread", "parse"),
    "dedup-settled": ("dedup settled", "thread", "parse"),
    "dedup-to-bands": ("dedup to bands", "thread", "parse"),
    **{f"dedup-band-{i}-of-4": (f"dedup band {i} of 4", "thread", "parse") for i in range(4)},
}


def test_every_operator_keeps_its_uid_name_mode_and_slot_group(tmp_path: Path, flink_connector_jar: Path) -> None:
    env = _built(tmp_path, flink_connector_jar)
    assert _operators(env) == {**_FRONT_OPERATORS, **_GATHER_OPERATORS, **_SINK_OPERATORS, **_KEY_AND_SIDE_OPERATORS,
                               **_DEDUP_OPERATORS, "dedup-settled/_stream_key_by_map_operator": (
                                   "_stream_key_by_map_operator", "thread", "parse"),   # the writer's key for verdicts
                               "": []}
    # The job-level mode at execute(): thread, which thread-mode operators need.
    assert Configuration(j_configuration=get_j_env_configuration(env._j_stream_execution_environment)) \
        .get_string("python.execution-mode", "") == "thread"
    without_dedup = _operators(_built(tmp_path, flink_connector_jar, "dedup.enabled=false"))
    assert without_dedup == {**_FRONT_OPERATORS, **_GATHER_OPERATORS, **_SINK_OPERATORS, **_KEY_AND_SIDE_OPERATORS,
                             "no-dedup": ("no dedup", "process", "parse"), "": []}


def test_python_mode_sets_the_mode_of_operators_added_inside_and_restores_the_one_before() -> None:
    env = StreamExecutionEnvironment.get_execution_environment()
    live = Configuration(j_configuration=get_j_env_configuration(env._j_stream_execution_environment))
    assert not live.contains_key("python.execution-mode")
    numbers = env.from_collection([1], type_info=Types.INT())

    def branch(uid: str) -> None:   # a branch of its own, so no two Python operators fuse
        numbers.map(lambda n: n, output_type=Types.INT()).uid(uid).print()

    with python_mode(env, "thread"):
        branch("thread")
        with python_mode(env, "process"):
            branch("process")
        branch("thread-again")
    assert not live.contains_key("python.execution-mode")   # restored to absent, not to a value
    set_python_mode(env, "thread")
    with pytest.raises(RuntimeError), python_mode(env, "process"):
        raise RuntimeError("a builder failed")
    assert live.get_string("python.execution-mode", "") == "thread"
    with pytest.raises(ValueError, match="unknown Python execution mode"), python_mode(env, "threads"):
        pass
    branch("thread-set")
    # The runtime is chosen as each operator is added: what was in force then, not at graph building.
    modes = {uid: found[1] for uid, found in _operators(env).items() if uid}
    assert modes == {"thread": "thread", "process": "process", "thread-again": "thread", "thread-set": "thread"}


def _table_operators(env: StreamExecutionEnvironment) -> dict[str, str]:
    """uid → name of every Java operator the Table API planned (no Python mode, not a Kafka source)."""
    return {uid: found[0] for uid, found in _operators(env).items()
            if uid and found[1] is None and not uid.endswith("-source")}


def test_the_table_apis_stateful_operators_have_uids_that_do_not_move_with_the_graph(
        tmp_path: Path, flink_connector_jar: Path) -> None:
    """Decision 3915: the Kafka sink's writer and committer, and the gathering window's aggregate, have
    uids of their own; adding the window before the frontier leaves the sink's uids as they were."""
    plain = _table_operators(_built(tmp_path, flink_connector_jar, "job.gather_discoveries_ms=0"))
    gathered = _table_operators(_built(tmp_path, flink_connector_jar, "job.gather_discoveries_ms=500"))
    sink = {uid: name for uid, name in plain.items() if uid.startswith(("kafka-sink", "Sink Committer: kafka-sink"))}
    assert sink == plain and "kafka-sink" in sink and "Sink Committer: kafka-sink" in sink, plain
    assert {uid: name for uid, name in gathered.items() if uid in sink} == sink
    window = {uid: name for uid, name in gathered.items() if uid not in sink}
    assert window and all(uid.startswith("gather-discoveries") for uid in window), window
    assert any("Window" in name for name in window.values()), window


@pytest.mark.parametrize("settings", [(), ("dedup.enabled=false", "job.gather_discoveries_ms=0"),
                                      ("budgets.enabled=false", "render.enabled=true")])
def test_every_operator_has_a_uid_so_none_is_known_by_its_place_in_the_graph(
        tmp_path: Path, flink_connector_jar: Path, settings: tuple[str, ...]) -> None:
    graph = _built(tmp_path, flink_connector_jar, *settings)._generate_stream_graph(False)
    nameless = [node.getOperatorName() for node in graph.getStreamNodes().toArray()
                if node.getTransformationUID() is None]
    assert not nameless, nameless
