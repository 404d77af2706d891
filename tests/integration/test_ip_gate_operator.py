"""The real IP gate operator on a Flink MiniCluster in `thread` execution mode: two host names on one
address are never released together, an `ip_done` frees the slot, another address is not held up, and
a lease with no `ip_done` is freed by a real processing-time timer.

The source is unbounded (a monitored folder) because a bounded source ends the job before timers fire
(ARCHITECTURE.md §4). The test plays the frontier and the fetcher: it drops FetchRequests and ip_done
events into the folder and reads what the gate releases.
"""
from __future__ import annotations

import itertools
import json
import os
import queue
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest

from operators.warc_writer import ip_done_output
from tests.paths import ROOT

pytestmark = pytest.mark.integration

SHARED, OTHER = "127.0.0.7", "127.0.0.8"
LEASE_S = 2.0


class FolderFeed:
    def __init__(self, folder: Path) -> None:
        self.folder, self.seq = folder, itertools.count()

    def send(self, *items: dict) -> None:
        n = next(self.seq)
        tmp = self.folder / f".{n}.tmp"
        tmp.write_text("".join(json.dumps(i) + "\n" for i in items))
        tmp.rename(self.folder / f"{n:05d}.jsonl")


@pytest.fixture(scope="module")
def gate_job(tmp_path_factory):
    from pyflink.common import Configuration, Duration, Types, WatermarkStrategy
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.datastream.connectors.file_system import FileSource, StreamFormat

    from operators.ip_gate import IpGateFunction
    from udfs.ip_gate import IpGatePolicy, routing_key

    folder = tmp_path_factory.mktemp("gate-events")
    config = Configuration()
    config.set_string("python.executable", sys.executable)
    config.set_string("python.client.executable", sys.executable)
    config.set_string("python.execution-mode", "thread")
    config.set_string("python.pythonpath", os.pathsep.join([sysconfig.get_paths()["purelib"], str(ROOT)]))
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(1)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(folder)) \
        .monitor_continuously(Duration.of_millis(100)).build()
    released = (env.from_source(source, WatermarkStrategy.no_watermarks(), "gate-events").uid("events")
                .map(json.loads).uid("decode").name("decode")
                .key_by(routing_key, key_type=Types.STRING())
                .process(IpGateFunction(IpGatePolicy(lease_timeout_s=LEASE_S))).uid("ip-gate").name("ip gate"))
    results: queue.Queue = queue.Queue()
    iterator = released.execute_and_collect("ip-gate-test")

    def pump() -> None:
        try:
            for request in iterator:
                results.put((time.monotonic(), request))
        except Exception as exc:  # noqa: BLE001 - surfaced to the test through the queue
            results.put((time.monotonic(), exc))

    threading.Thread(target=pump, daemon=True).start()
    yield FolderFeed(folder), results
    iterator.close()


def request(host: str, ip: str, seq: int = 1) -> dict:
    return {"host": host, "url": f"http://{host}/", "fp": seq, "kind": "page", "lease_id": f"{host}/{seq}",
            "depth": 0, "attempt": 1, "ip": ip}


def ip_done(req: dict) -> dict:
    return json.loads(ip_done_output({"request": req, "fetch_status": "ok"})[2])


def next_host(results: queue.Queue, timeout: float = 30.0) -> tuple[float, str]:
    at, item = results.get(timeout=timeout)
    if isinstance(item, Exception):
        raise item
    return at, item["host"]


def assert_quiet(results: queue.Queue, seconds: float) -> None:
    try:
        _, item = results.get(timeout=seconds)
    except queue.Empty:
        return
    pytest.fail(f"released while its address was busy: {item!r}")


def test_hosts_sharing_an_address_take_turns_and_a_lost_ip_done_expires(gate_job):
    feed, results = gate_job
    a, b, c = request("a.test", SHARED), request("b.test", SHARED), request("c.test", OTHER)
    feed.send(a, b, c)
    released = {next_host(results, timeout=120)[1], next_host(results)[1]}
    assert released == {"a.test", "c.test"}   # b.test waits: a.test holds its server
    assert_quiet(results, 1.0)

    feed.send(ip_done(a))
    at_b, host = next_host(results)
    assert host == "b.test"

    feed.send(request("d.test", SHARED))
    # no ip_done for b.test: its slot is freed at the lease deadline by the gate's timer
    at_d, host = next_host(results, timeout=LEASE_S + 10)
    assert host == "d.test" and at_d - at_b >= LEASE_S - 0.5  # tolerance: collection latency of b
