"""The real IP gate operator on a Flink MiniCluster in `thread` execution mode: two host names on one
address are never released together, an `ip_done` frees the slot, another address is not held up, and
a lease with no `ip_done` is freed by a real processing-time timer.

The source is unbounded (a monitored folder) because a bounded source ends the job before timers fire
(ARCHITECTURE.md §4). The test plays the frontier and the fetcher: it drops FetchRequests and ip_done
events into the folder and reads what the gate releases.
"""
from __future__ import annotations

import json
import queue

import pytest

from operators.warc_writer import ip_done_output
from tests.integration.harness import FolderFeed, collected, next_output, thread_mode_env
from tests.integration.harness import assert_quiet as quiet

pytestmark = pytest.mark.integration

SHARED, OTHER = "127.0.0.7", "127.0.0.8"
LEASE_S = 2.0


@pytest.fixture(scope="module")
def gate_job(tmp_path_factory):
    from pyflink.common import Types

    from operators.ip_gate import IpGateFunction
    from udfs.ip_gate import IpGatePolicy, routing_key

    feed = FolderFeed(tmp_path_factory.mktemp("gate-events"))
    env = thread_mode_env()
    released = (feed.source(env).map(json.loads).uid("decode").name("decode")
                .key_by(routing_key, key_type=Types.STRING())
                .process(IpGateFunction(IpGatePolicy(lease_timeout_s=LEASE_S))).uid("ip-gate").name("ip gate"))
    with collected(released, "ip-gate-test") as results:
        yield feed, results


def request(host: str, ip: str, seq: int = 1) -> dict:
    return {"host": host, "url": f"http://{host}/", "fp": seq, "kind": "page", "lease_id": f"{host}/{seq}",
            "depth": 0, "attempt": 1, "ip": ip}


def ip_done(req: dict) -> dict:
    return json.loads(ip_done_output({"request": req, "fetch_status": "ok"})[2])


def next_host(results: queue.Queue, timeout: float = 30.0) -> tuple[float, str]:
    at, item = next_output(results, timeout)
    return at, item["host"]


def assert_quiet(results: queue.Queue, seconds: float) -> None:
    quiet(results, seconds, "released while its address was busy")


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
