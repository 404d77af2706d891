"""The real frontier operator after a failure: a lease that the failed run held is not charged.

A thread-mode MiniCluster runs the keyed frontier from a folder feed with checkpoints every 300 ms and
a fixed-delay restart strategy. The test plays the fetcher. Once a page is leased (the collect sink
delivers a record only after a checkpoint that covers it, so the lease is in the checkpoint), the
decoder is made to fail once: the job restarts from that checkpoint with a new frontier run, and the
page's lease comes back only through its expiry. That expiry must re-queue the URL with the attempt
it had, raise no backoff, and count `frontier.leases_orphaned` rather than `leases_expired`
(decision 3790).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.harness import FolderFeed, collected, free_port, frontier_counters, next_output, thread_mode_env
from udfs.records import decode_frontier_event
from udfs.urls import url_fp

pytestmark = pytest.mark.integration

HOST = "orphan.example"
DELAY_S = 1.0
LEASE_S = 4.0
BACKOFF_S = 3.0


class DecodeOrFailOnce:
    """Decodes feed lines; a `{"crash": true}` line fails the task the first time it is read (a flag
    file remembers it across the restart, when the line is read again from the checkpointed source)."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __call__(self, raw: str) -> dict:
        if json.loads(raw).get("crash"):
            flag = Path(self.flag)
            if not flag.exists():
                flag.write_text("failed once")
                raise RuntimeError("the test fails the job here, once")
            return {"type": "crash-replayed", "host": HOST}
        return decode_frontier_event(raw)


def discovered(*paths: str) -> dict:
    return {"v": 1, "type": "discovered", "host": HOST,
            "urls": [{"url": f"http://{HOST}{p}", "fp": url_fp(f"http://{HOST}{p}"), "depth": 1, "priority": 5,
                      "source": "seed"} for p in paths]}


def robots_404(request: dict) -> dict:
    return {"v": 1, "type": "robots", "host": HOST, "lease_id": request["lease_id"], "fetch_status": "ok",
            "http_status": 404, "fetched_at": time.time(), "fetch_ms": 5.0, "body_b64": ""}


def completion(request: dict) -> dict:
    return {"v": 1, "type": "completion", "host": HOST, "lease_id": request["lease_id"], "url": request["url"],
            "fp": request["fp"], "fetch_status": "ok", "http_status": 200, "started_at": time.time(),
            "done_at": time.time(), "fetch_ms": 5.0, "bytes": 10, "content_hash": None, "simhash": None,
            "etag": None, "last_modified": None, "redirect": None, "retry_after": None}


def test_a_lease_of_the_failed_run_expires_uncharged_after_the_restore(tmp_path: Path) -> None:
    from pyflink.common import Types

    from operators.frontier import FrontierFunction, attach_frontier, broadcast_controls
    from udfs.frontier.policy import FrontierPolicy
    from udfs.politeness import PolitenessPolicy

    (tmp_path / "events").mkdir()
    (tmp_path / "controls").mkdir()
    feed, control_feed = FolderFeed(tmp_path / "events"), FolderFeed(tmp_path / "controls")
    rest_port = free_port()
    env = thread_mode_env({"rest.bind-address": "127.0.0.1", "rest.port": str(rest_port),
                           "metrics.fetcher.update-interval": "300",
                           "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "3",
                           "restart-strategy.fixed-delay.delay": "1 s"})
    env.enable_checkpointing(300)
    frontier = FrontierFunction(FrontierPolicy(lease_timeout_s=LEASE_S),
                                PolitenessPolicy(default_delay_s=DELAY_S, min_delay_s=0.1, backoff_initial_s=BACKOFF_S))
    events = feed.source(env).map(DecodeOrFailOnce(str(tmp_path / "failed-once"))).uid("decode").name("decode")
    controls = control_feed.source(env, uid="controls").map(json.loads).uid("decode-controls").name("controls")
    requests = attach_frontier(events.key_by(lambda e: e["host"], key_type=Types.STRING()),
                               broadcast_controls(controls), frontier)
    rest = f"http://127.0.0.1:{rest_port}"

    def next_request(timeout: float = 30.0) -> dict:
        return next_output(results, timeout)[1]

    with collected(requests, "frontier-orphaned-leases") as results:
        feed.send(discovered("/a", "/b"))
        robots = next_request(timeout=120)   # the first job in a process takes a while to start
        assert robots["kind"] == "robots"
        feed.send(robots_404(robots))
        first = next_request()
        assert (first["url"], first["attempt"]) == (f"http://{HOST}/a", 1)

        feed.send({"crash": True})           # /a is in flight: the run fails, the job restores its checkpoint
        second = next_request(timeout=LEASE_S + 60)
        # the orphaned lease ended without backoff: the next page waits the ordinary delay, /a the queue's tail
        assert (second["url"], second["attempt"]) == (f"http://{HOST}/b", 1)
        assert second["lease_id"].split("/")[1].split("-")[0] != first["lease_id"].split("/")[1].split("-")[0]
        feed.send(completion(second))
        third = next_request()
        assert (third["url"], third["attempt"]) == (first["url"], 1)   # not 2: the URL was not charged
        feed.send(completion(first))         # the failed run's answer, if it ever came: stale
        feed.send(completion(third))

        expected = {"leases_orphaned": 1, "leases_expired": 0, "completions_stale": 1, "released": 2}
        deadline = time.monotonic() + 20
        while True:   # counters of the restored run reach the REST API on the metric fetcher's interval
            counters = frontier_counters(rest)
            if all(counters.get(k, 0) == v for k, v in expected.items()) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert {k: counters.get(k, 0) for k in expected} == expected
