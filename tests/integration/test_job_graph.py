"""The crawl job's graph as PyFlink builds it (no job runs): which operators run at which width, and
which edges shuffle records."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyflink.common import Configuration
from pyflink.datastream import StreamExecutionEnvironment

from jobs.crawl import build_pipeline, configure_env, kafka_sinks, kafka_source
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
