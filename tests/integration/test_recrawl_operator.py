"""Recrawl in the real keyed frontier on a Flink MiniCluster (issue #6 wiring; decision 1110).

As in test_frontier_operator.py the source is an unbounded folder feed and the test plays the
fetcher. With revisit intervals of a few seconds and one-second due buckets, a fetched URL must come
back by itself, through a due-bucket processing-time timer in keyed state, carrying its validators
(If-None-Match / If-Modified-Since values) and the capture a 304 revisit refers to; a 304 keeps them.
The recrawl counters and the frontier gauges must reach Flink's metrics.
"""
from __future__ import annotations

import time

import pytest

from tests.integration.harness import frontier_counters, frontier_job, next_output
from udfs.records import b64
from udfs.urls import url_fp

pytestmark = pytest.mark.integration

HOST = "news.example"
URL = f"http://{HOST}/front"
MIN_S, MAX_S, BUCKET_S = 2.0, 4.0, 1.0
CAPTURE = {"record_id": "<urn:uuid:33333333-3333-4333-8333-333333333333>", "target_uri": URL,
           "date": "2026-12-01T00:00:00Z", "payload_digest": "sha1:AAAA"}
LAST_MODIFIED = "Mon, 30 Nov 2026 12:00:00 GMT"


@pytest.fixture(scope="module")
def recrawl_job(tmp_path_factory):
    from operators.frontier import FrontierFunction
    from udfs.frontier.policy import FrontierPolicy
    from udfs.politeness import PolitenessPolicy
    from udfs.recrawl import RecrawlPolicy

    frontier = FrontierFunction(
        FrontierPolicy(lease_timeout_s=20.0, due_bucket_s=BUCKET_S),
        PolitenessPolicy(default_delay_s=0.2, min_delay_s=0.1),
        recrawl=RecrawlPolicy(min_interval_s=MIN_S, max_interval_s=MAX_S, budget_interval_s=3.0))
    with frontier_job(tmp_path_factory.mktemp("recrawl"), frontier, "recrawl-test") as job:
        yield job


def completion(request: dict, http_status: int, **fields) -> dict:
    now = time.time()
    return {"v": 1, "type": "completion", "host": HOST, "lease_id": request["lease_id"], "url": request["url"],
            "fp": request["fp"], "fetch_status": "ok", "http_status": http_status, "started_at": now - 0.01,
            "done_at": now, "fetch_ms": 5.0, "bytes": 10, "content_hash": "sha256:1", "simhash": None,
            "etag": None, "last_modified": None, "redirect": None, "retry_after": None} | fields


def test_a_fetched_url_is_released_again_after_its_due_time_with_its_validators(recrawl_job):
    feed, results, rest, _ = recrawl_job
    feed.send({"v": 1, "type": "discovered", "host": HOST,
               "urls": [{"url": URL, "fp": url_fp(URL), "depth": 0, "priority": 5, "source": "seed"}]})
    _, robots = next_output(results, timeout=120)   # the first job in a process takes a few seconds to start
    assert robots["kind"] == "robots"
    feed.send({"v": 1, "type": "robots", "host": HOST, "lease_id": robots["lease_id"], "fetch_status": "ok",
               "http_status": 404, "fetched_at": time.time(), "fetch_ms": 5.0, "body_b64": b64(b"")})
    _, first = next_output(results)
    assert first["url"] == URL and first.get("etag") is None and "revisit_of" not in first

    sent = time.monotonic()
    feed.send(completion(first, 200, etag='"v1"', last_modified=LAST_MODIFIED, capture=CAPTURE))
    at, again = next_output(results, timeout=60)
    assert again["url"] == URL and again["lease_id"] != first["lease_id"]
    assert (again["etag"], again["last_modified"]) == ('"v1"', LAST_MODIFIED)   # If-None-Match, If-Modified-Since
    assert again["revisit_of"] == CAPTURE
    assert at - sent >= MIN_S - 0.05                      # not before its due time

    sent = time.monotonic()
    feed.send(completion(again, 304, content_hash="sha256:empty"))   # a 304 repeats no validator here
    at, third = next_output(results, timeout=60)
    assert (third["etag"], third["last_modified"], third["revisit_of"]) == ('"v1"', LAST_MODIFIED, CAPTURE)
    assert at - sent >= MIN_S - 0.05

    expected = {"recrawl_scheduled": 2, "recrawl_released": 2, "not_modified": 1, "recrawl_unchanged": 1}
    deadline = time.monotonic() + 20
    while True:   # counters reach the REST API on the metric fetcher's interval
        counters = frontier_counters(rest)
        if all(counters.get(k, 0) >= v for k, v in expected.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert all(counters.get(k, 0) >= v for k, v in expected.items()), counters
    for gauge in ("queue_depth_p0", "queue_depth_p9", "recrawl_depth_t0", "recrawl_depth_t9", "hosts_with_queue",
                  "oldest_due_age_s"):
        assert gauge in counters, gauge
