"""The local stack: the Kafka broker and the Python Kafka helpers against a real broker, the pid-file
discipline, the Flink conf template, and `crawler up` / `status` / `down` on a real Flink session
cluster with a PyFlink job submitted through `bin/flink run -py`."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from bus import kafka_io
from crawler.cli import build_parser, main
from crawler.daemon import Daemon
from crawler.flink_cluster import FlinkCluster, flink_bin, render_conf
from crawler.kafka_broker import MAX_MESSAGE_BYTES, KafkaBroker
from bus.kafka_io import TopicSpec
from crawler.stack import DEFAULT_STATE_DIR, StackConfig
from tests.integration.harness import free_port
from udfs.records import ALL_TOPICS, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES

pytestmark = pytest.mark.integration


def _topic_config(bootstrap: str, topic: str, key: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return future.result(timeout=10)[key].value


# --- Kafka broker and kafka_io -------------------------------------------------------------------

def test_broker_creates_every_crawler_topic(kafka_bootstrap: str) -> None:
    topics = kafka_io.list_topics(kafka_bootstrap)
    assert set(ALL_TOPICS) <= set(topics)
    assert topics[TOPIC_FRONTIER] == topics[TOPIC_OUTCOMES] == 4


@pytest.mark.parametrize("topic", [TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES])
def test_big_topics_accept_16_mib_messages(kafka_bootstrap: str, topic: str) -> None:
    assert int(_topic_config(kafka_bootstrap, topic, "max.message.bytes")) == MAX_MESSAGE_BYTES


def test_broker_refuses_unknown_topics_instead_of_creating_them(kafka_bootstrap: str) -> None:
    with pytest.raises((TimeoutError, KafkaException)):
        kafka_io.produce(kafka_bootstrap, "no.such.topic", [(b"k", b"v")], timeout_s=2)
    assert "no.such.topic" not in kafka_io.list_topics(kafka_bootstrap)


def test_produce_consume_round_trip_keeps_keys_and_per_key_order(kafka_bootstrap: str) -> None:
    kafka_io.create_topics(kafka_bootstrap, [TopicSpec("t.roundtrip", 3)])
    sent = [(f"host{i % 5}".encode(), f"value-{i}".encode()) for i in range(200)]
    assert kafka_io.produce(kafka_bootstrap, "t.roundtrip", sent) == 200
    got = kafka_io.consume(kafka_bootstrap, "t.roundtrip", max_records=200, timeout_s=20)
    assert sorted(got) == sorted(sent)
    for key in {k for k, _ in sent}:
        assert [v for k, v in got if k == key] == [v for k, v in sent if k == key]


def test_consume_without_max_records_returns_at_the_end_of_the_topic(kafka_bootstrap: str) -> None:
    kafka_io.create_topics(kafka_bootstrap, [TopicSpec("t.drain", 2)])
    kafka_io.produce(kafka_bootstrap, "t.drain", [(None, b"a"), (None, b"b")])
    started = time.monotonic()
    got = kafka_io.consume(kafka_bootstrap, "t.drain", timeout_s=30)
    assert sorted(v for _, v in got) == [b"a", b"b"]
    assert time.monotonic() - started < 15  # stopped at the end, not at the timeout


def test_consume_not_from_beginning_skips_earlier_records(kafka_bootstrap: str) -> None:
    kafka_io.create_topics(kafka_bootstrap, [TopicSpec("t.latest", 1)])
    kafka_io.produce(kafka_bootstrap, "t.latest", [(None, b"old")])
    assert kafka_io.consume(kafka_bootstrap, "t.latest", from_beginning=False, timeout_s=2) == []


def test_a_large_message_fits_a_big_topic(kafka_bootstrap: str) -> None:
    kafka_io.create_topics(kafka_bootstrap, [TopicSpec("t.large", 1, MAX_MESSAGE_BYTES)])
    value = os.urandom(3 * 1024 * 1024)
    kafka_io.produce(kafka_bootstrap, "t.large", [(b"k", value)])
    assert kafka_io.consume(kafka_bootstrap, "t.large", max_records=1, timeout_s=20) == [(b"k", value)]


def test_create_topics_is_idempotent(kafka_bootstrap: str) -> None:
    spec = TopicSpec("t.twice", 2)
    assert kafka_io.create_topics(kafka_bootstrap, [spec]) == ["t.twice"]
    assert kafka_io.create_topics(kafka_bootstrap, [spec]) == []


def test_consume_of_a_missing_topic_raises(kafka_bootstrap: str) -> None:
    with pytest.raises(KafkaException, match="no.such.topic"):
        kafka_io.consume(kafka_bootstrap, "no.such.topic", timeout_s=3)


def test_second_start_of_a_running_broker_keeps_it(kafka_broker: KafkaBroker) -> None:
    pid = kafka_broker.pid()
    kafka_broker.start()
    assert kafka_broker.pid() == pid is not None


def test_broker_restart_keeps_formatted_storage_and_records(tmp_path: Path) -> None:
    broker = KafkaBroker(tmp_path / "kafka", free_port(), free_port(), topics=[TopicSpec("t.keep", 1)])
    try:
        broker.start()
        meta = (tmp_path / "kafka" / "data" / "meta.properties").read_text()
        kafka_io.produce(broker.bootstrap, "t.keep", [(b"k", b"kept")])
        first = broker.pid()
        assert broker.stop() is True
        assert broker.pid() is None and not _alive(first)
        assert broker.stop() is False
        broker.start()
        assert (tmp_path / "kafka" / "data" / "meta.properties").read_text() == meta  # not reformatted
        assert kafka_io.consume(broker.bootstrap, "t.keep", max_records=1, timeout_s=20) == [(b"k", b"kept")]
    finally:
        broker.stop()


def test_broker_start_fails_clearly_when_its_port_is_taken(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    other = KafkaBroker(tmp_path / "other", kafka_broker.port, free_port())
    with pytest.raises(RuntimeError, match="already taken"):
        other.start()


@pytest.mark.parametrize("kwargs, message", [
    ({"name": ""}, "name"),
    ({"name": "t", "partitions": 0}, "partitions"),
    ({"name": "t", "max_message_bytes": 10}, "max_message_bytes"),
])
def test_topic_spec_rejects_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TopicSpec(**kwargs)


# --- pid files: stop exactly what we started -----------------------------------------------------

def _alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_daemon_never_signals_a_process_that_reused_its_pid(tmp_path: Path) -> None:
    # A pid file naming a live process (this one) with another start time is stale: ignored, removed.
    pid_file = tmp_path / "x.pid"
    pid_file.write_text(f"{os.getpid()} 1\n")
    daemon = Daemon("x", pid_file, tmp_path / "x.log")
    assert daemon.pid() is None
    assert daemon.stop() is False
    assert not pid_file.exists()


def test_daemon_stops_its_process_group_and_is_idempotent(tmp_path: Path) -> None:
    daemon = Daemon("sleeper", tmp_path / "s.pid", tmp_path / "s.log")
    # The child ignores SIGTERM: stop must fall back to SIGKILL after its timeout.
    pid = daemon.spawn(["sh", "-c", "trap '' TERM; exec sleep 60"])
    time.sleep(0.3)
    assert daemon.pid() == pid
    assert daemon.stop(timeout_s=1.0) is True
    assert not _alive(pid)
    assert daemon.stop() is False


def test_daemon_ignores_garbage_in_its_pid_file(tmp_path: Path) -> None:
    (tmp_path / "g.pid").write_text("not a pid\n")
    assert Daemon("g", tmp_path / "g.pid", tmp_path / "g.log").pid() is None


# --- configuration -------------------------------------------------------------------------------

def test_rendered_flink_conf_has_absolute_paths_and_no_placeholders(tmp_path: Path) -> None:
    conf = render_conf(tmp_path / "conf", tmp_path / "state", rest_port=18081)
    text = (conf / "config.yaml").read_text()
    assert "{{" not in text
    assert f'executable: "{Path(sys.executable).absolute()}"' in text
    assert f'dir: "file://{(tmp_path / "state").resolve()}/checkpoints"' in text
    assert 'port: "18081"' in text
    assert (conf / "log4j-console.properties").is_file()


@pytest.mark.parametrize("kwargs, message", [
    ({"kafka_port": 0}, "kafka_port"),
    ({"rest_port": 70000}, "rest_port"),
    ({"kafka_port": 8081}, "differ"),
    ({"frontier_partitions": 0}, "frontier_partitions"),
])
def test_stack_config_rejects_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StackConfig(**kwargs)


def test_cluster_home_has_python_and_kafka_connector_jars_in_lib() -> None:
    lib = flink_bin().parent.parent / "lib"
    names = {p.name for p in lib.iterdir()}
    assert any(n.startswith("flink-python-") for n in names)
    assert any(n.startswith("flink-sql-connector-kafka-") for n in names)
    assert all((lib / n).exists() for n in names)  # no dangling links


# --- the command line ---------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["install", "up", "down", "status"])
def test_cli_registers_the_stack_subcommands(command: str) -> None:
    args = build_parser().parse_args([command])
    assert callable(args.func) and args.state_dir == DEFAULT_STATE_DIR


def test_status_of_a_stack_that_never_ran_reports_down_and_exits_non_zero(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["status", "--state-dir", str(tmp_path), "--kafka-port", str(free_port()),
               "--rest-port", str(free_port())])
    out = capsys.readouterr().out
    assert rc == 1
    assert "kafka        down" in out and "NOT (fully) UP" in out


def test_down_of_a_stack_that_never_ran_is_a_no_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["down", "--state-dir", str(tmp_path)]) == 0
    assert "nothing was running" in capsys.readouterr().out


def test_cli_reports_a_bad_option_value_in_one_line_with_exit_code_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--state-dir", str(tmp_path), "--kafka-port", "8081"]) == 2
    assert "must all differ" in capsys.readouterr().err


# --- the whole stack through the CLI -------------------------------------------------------------

# Reads crawl.status through the Kafka connector in the cluster's lib/, in thread mode: run twice on
# one TaskManager it also proves the pemja fix (flink-python in lib/, docs/architecture.md §4).
KAFKA_JOB = """
import sys
from pyflink.common import Configuration, WatermarkStrategy
from pyflink.common.serialization import SimpleStringSchema
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.kafka import KafkaOffsetsInitializer, KafkaSource
conf = Configuration()
conf.set_string("python.execution-mode", "thread")
env = StreamExecutionEnvironment.get_execution_environment(conf)
env.set_parallelism(1)
source = (KafkaSource.builder().set_bootstrap_servers(sys.argv[1]).set_topics("crawl.status")
          .set_group_id("stack-smoke").set_starting_offsets(KafkaOffsetsInitializer.earliest())
          .set_bounded(KafkaOffsetsInitializer.latest())
          .set_value_only_deserializer(SimpleStringSchema()).build())
env.from_source(source, WatermarkStrategy.no_watermarks(), "status").map(lambda s: "smoke:" + s.upper()).print()
env.execute("stack-smoke")
"""


def _crawler(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=Path(__file__).resolve().parents[2])


def _get_json(url: str) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as resp:
        return json.loads(resp.read())


def test_crawler_up_status_run_down_on_a_real_session_cluster(tmp_path: Path) -> None:
    """Slow (a minute or two on 2 cores): starts Kafka and a Flink session cluster, runs a job."""
    if FlinkCluster(rest_port=8081).overview(timeout_s=1.0) is not None:
        pytest.skip("a Flink cluster already answers on :8081 (another stack is up)")
    kafka_port = free_port()
    opts = ["--state-dir", str(tmp_path / "stack"), "--kafka-port", str(kafka_port),
            "--kafka-controller-port", str(free_port())]
    pids: list[int] = []
    try:
        up = _crawler("up", *opts)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "stack        UP" in up.stdout
        assert _get_json("http://localhost:8081/overview")["slots-total"] == 4

        status = _crawler("status", *opts)
        assert status.returncode == 0, status.stdout + status.stderr
        assert all(topic in status.stdout for topic in ALL_TOPICS)
        pids = _pids(status.stdout)
        assert len(pids) == 3

        again = _crawler("up", *opts)  # idempotent: reports, starts nothing
        assert again.returncode == 0 and _pids(again.stdout) == pids

        bootstrap = f"127.0.0.1:{kafka_port}"
        kafka_io.produce(bootstrap, "crawl.status", [(None, b"hello")])
        job = tmp_path / "job.py"
        job.write_text(KAFKA_JOB)
        cluster = FlinkCluster(tmp_path / "stack" / "flink")
        for _ in range(2):
            run = subprocess.run([str(flink_bin()), "run", "-py", str(job), bootstrap], env=cluster.env(),
                                 capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
            assert "has finished" in run.stdout
        jobs = _get_json("http://localhost:8081/jobs/overview")["jobs"]
        assert [j["state"] for j in jobs if j["name"] == "stack-smoke"] == ["FINISHED", "FINISHED"]
        printed = "".join(p.read_text() for p in (tmp_path / "stack" / "flink" / "log").glob("*taskexecutor*.out"))
        assert printed.count("smoke:HELLO") == 2
    finally:
        down = _crawler("down", *opts)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "kafka" in down.stdout and "flink-jobmanager" in down.stdout
    assert not any(_alive(pid) for pid in pids)
    assert _crawler("status", *opts).returncode != 0
    assert "nothing was running" in _crawler("down", *opts).stdout


def _pids(report: str) -> list[int]:
    return sorted(int(p) for p in re.findall(r"\(pid (\d+)\)", report))


def test_cluster_ids_never_start_with_a_dash_the_storage_tool_would_read_as_an_option():
    from crawler.kafka_broker import _cluster_id

    ids = [_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
