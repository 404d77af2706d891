"""The real keyed frontier on a Flink MiniCluster in `thread` execution mode.

The source is unbounded (a FileSource that keeps monitoring a folder), because a bounded source ends
the job before processing-time timers fire (docs/architecture.md §4). The test plays the fetcher: it reads
FetchRequests as the job emits them and answers by dropping RobotsResult / Completion events into the
folder. It proves robots-first, one lease at a time, release after completion + delay, lease expiry
through a real timer, and that the operator's counters reach Flink's metrics (read through the
MiniCluster's REST API on loopback). The job is cancelled when the test ends.
"""
from __future__ import annotations

import queue
import time
import uuid

import pytest

from tests.integration.harness import frontier_counters, next_output
from tests.integration.harness import assert_quiet as quiet
from tests.integration.harness import frontier_job as start_frontier_job
from udfs.records import b64
from udfs.urls import url_fp

pytestmark = pytest.mark.integration

HOST = "shop.example"
DELAY_S = 1.0
LEASE_S = 3.0
BACKOFF_S = 1.0


@pytest.fixture(scope="module")
def frontier_job(tmp_path_factory):
    from operators.frontier import FrontierFunction
    from udfs.frontier.policy import FrontierPolicy
    from udfs.politeness import PolitenessPolicy

    frontier = FrontierFunction(
        FrontierPolicy(lease_timeout_s=LEASE_S),
        PolitenessPolicy(default_delay_s=DELAY_S, min_delay_s=0.1, backoff_initial_s=BACKOFF_S))
    with start_frontier_job(tmp_path_factory.mktemp("frontier"), frontier, "frontier-test") as job:
        yield job


def next_request(results: queue.Queue, timeout: float = 30.0) -> tuple[float, dict]:
    return next_output(results, timeout)


def assert_quiet(results: queue.Queue, seconds: float) -> None:
    quiet(results, seconds, "a lease was in flight or robots.txt unknown")


def discovered(*paths: str) -> dict:
    from udfs.urls import url_fp
    return {"v": 1, "type": "discovered", "host": HOST,
            "urls": [{"url": f"http://{HOST}{p}", "fp": url_fp(f"http://{HOST}{p}"), "depth": 1, "priority": 5,
                      "source": "seed"} for p in paths]}


def robots_result(request: dict, body: bytes) -> dict:
    return {"v": 1, "type": "robots", "host": HOST, "lease_id": request["lease_id"], "fetch_status": "ok",
            "http_status": 200, "fetched_at": time.time(), "fetch_ms": 5.0, "body_b64": b64(body)}


def completion(request: dict) -> dict:
    return {"v": 1, "type": "completion", "host": HOST, "lease_id": request["lease_id"], "url": request["url"],
            "fp": request["fp"], "fetch_status": "ok", "http_status": 200, "started_at": time.time(),
            "done_at": time.time(), "fetch_ms": 5.0, "bytes": 10, "content_hash": None, "simhash": None,
            "etag": None, "last_modified": None, "redirect": None, "retry_after": None}


def test_robots_first_one_lease_release_after_delay_and_expiry(frontier_job):
    feed, results, rest, _ = frontier_job
    feed.send(discovered("/one", "/private/no", "/two"))
    _, robots = next_request(results, timeout=120)  # the first job in a process takes a few seconds to start
    assert (robots["kind"], robots["url"]) == ("robots", f"http://{HOST}/robots.txt")
    feed.send(discovered("/three"))
    assert_quiet(results, 1.5)  # robots.txt first: nothing else until it is known

    sent = time.monotonic()
    feed.send(robots_result(robots, b"User-agent: *\nDisallow: /private\n"))
    at, first = next_request(results)
    assert (first["kind"], first["url"], first["attempt"]) == ("page", f"http://{HOST}/one", 1)
    assert at - sent >= DELAY_S - 0.05  # the robots fetch started the politeness clock
    assert_quiet(results, 1.5)  # one lease in flight per host

    sent = time.monotonic()
    feed.send(completion(first))
    at, second = next_request(results)
    assert second["url"] == f"http://{HOST}/two"  # /private/no dropped at release by the robots rules
    assert at - sent >= DELAY_S - 0.05

    # no completion for /two: the lease expires on its timer and /two goes back to the tail of its queue
    at_expiry, third = next_request(results, timeout=LEASE_S + BACKOFF_S + 10)
    assert (third["url"], third["attempt"]) == (f"http://{HOST}/three", 1)
    # measured from before the completion of /one, so collection latency cannot make it look shorter:
    # gap, then /two's lease runs to its deadline, then the backoff-raised gap
    assert at_expiry - sent >= DELAY_S + LEASE_S + BACKOFF_S - 0.05

    feed.send(completion(second))  # late answer to the expired lease: stale, ignored
    assert_quiet(results, 1.0)
    feed.send(completion(third))
    _, again = next_request(results)
    assert (again["url"], again["attempt"]) == (second["url"], 2)
    assert again["lease_id"] != second["lease_id"]

    expected = {"robots_leased": 1, "robots_fetched": 1, "admitted": 4, "dropped_robots_disallowed": 1,
                "released": 4, "leases_expired": 1, "requeued": 1, "completions_stale": 1}
    deadline = time.monotonic() + 20
    while True:  # counters reach the REST API on the metric fetcher's interval
        counters = frontier_counters(rest)
        if all(counters.get(k) == v for k, v in expected.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert {k: counters.get(k) for k in expected} == expected


def next_for(results: queue.Queue, host: str, timeout: float = 30.0) -> dict:
    """The next request for `host`, skipping what other hosts' leases (still running from earlier tests) emit."""
    deadline = time.monotonic() + timeout
    while True:
        _, request = next_request(results, timeout=max(0.1, deadline - time.monotonic()))
        if request["host"] == host:
            return request


def test_trap_rules_and_redirects_are_judged_and_counted_in_the_real_operator(frontier_job):
    from udfs.urls import url_fp
    feed, results, rest, _ = frontier_job
    host = "trap.example"

    def entry(path: str, depth: int, source: str, hops: int = 0) -> dict:
        url = f"http://{host}{path}"
        return {"url": url, "fp": url_fp(url), "depth": depth, "priority": 5, "source": source, "redirect_hops": hops}

    def send(*entries: dict) -> None:
        feed.send({"v": 1, "type": "discovered", "host": host, "urls": list(entries)})

    def answer(request: dict, http_status: int, target: str) -> None:
        feed.send(dict(completion(request), host=host, http_status=http_status, redirect=f"http://{host}{target}"))

    # a link past the depth limit and a looping path are dropped before they cost a state read
    send(entry("/", 0, "seed"), entry("/deep", 21, "link"), entry("/a/b/a/b/a/b", 1, "link"))
    robots = next_for(results, host)
    assert robots["kind"] == "robots"
    feed.send(dict(robots_result(robots, b""), host=host, http_status=404))
    home = next_for(results, host)
    assert (home["url"], home["redirect_hops"]) == (f"http://{host}/", 0)

    # / -301-> /new -302-> / : the second target was seen this cycle, so the loop ends there
    answer(home, 301, "/new")
    send(entry("/new", 1, "redirect", hops=1))
    moved = next_for(results, host)
    assert (moved["url"], moved["redirect_hops"]) == (f"http://{host}/new", 1)
    answer(moved, 302, "/")
    send(entry("/", 2, "redirect", hops=2), entry("/far", 2, "redirect", hops=6))

    expected = {"dropped_trap_crawl_depth_exceeded": 1, "dropped_trap_repeated_segments": 1,
                "moved_permanently": 1, "redirected": 1, "dropped_redirect_loop": 1, "dropped_redirect_chain": 1}
    deadline = time.monotonic() + 20
    while True:
        counters = frontier_counters(rest)
        if all(counters.get(k) == v for k, v in expected.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert {k: counters.get(k) for k in expected} == expected


def test_operator_controls_block_rate_limit_and_unblock_a_host_within_seconds(frontier_job):
    feed, results, _, controls = frontier_job
    host = "controlled.example"

    def event(kind: str, request: dict, **fields) -> dict:
        base = robots_result(request, b"") if kind == "robots" else completion(request)
        return base | {"host": host} | fields

    def host_control(**fields) -> dict:
        return {"v": 1, "type": "host", "host": host, "rate_limit_rps": None, "blocked": None,
                "id": uuid.uuid4().hex, "issued_at": time.time()} | fields

    feed.send(discovered("/1", "/2", "/3", "/4") | {"host": host,
              "urls": [{"url": f"http://{host}/{n}", "fp": url_fp(f"http://{host}/{n}"), "depth": 0, "priority": 5,
                        "source": "seed"} for n in range(1, 5)]})
    def next_for_host(timeout: float = 30.0) -> tuple[float, dict]:
        """The next request for `host`; the earlier tests' hosts may still be releasing (lease expiries)."""
        deadline = time.monotonic() + timeout
        while True:
            at, request = next_request(results, max(0.1, deadline - time.monotonic()))
            if request["host"] == host:
                return at, request

    def quiet_for_host(seconds: float) -> None:
        try:
            _, request = next_for_host(seconds)
        except queue.Empty:
            return
        pytest.fail(f"host {host} is blocked but got {request!r}")

    _, robots = next_for_host(timeout=60)
    assert robots["kind"] == "robots"
    feed.send(event("robots", robots))
    _, first = next_for_host()

    controls.send(host_control(blocked=True))
    time.sleep(1.0)  # the broadcast side and the events' side are separate inputs: let the block land first
    feed.send(event("completion", first))
    quiet_for_host(DELAY_S + 3.0)              # blocked: the queue waits

    controls.send(host_control(blocked=False, rate_limit_rps=0.25))
    _, second = next_for_host(timeout=15)      # picked up within the control poll (5 s)
    sent = time.monotonic()
    feed.send(event("completion", second))
    at, third = next_for_host(timeout=15)
    assert second["url"] == f"http://{host}/2"
    assert at - sent >= 4.0 - 0.05              # 1 / 0.25 rps, not the default 1 s
    assert third["url"] == f"http://{host}/3"


def test_a_batch_found_hours_ago_holds_every_release_until_a_fresh_one_is_read(frontier_job):
    """The brake on the discovery backlog (decision 1843), last in this module: it holds every host's
    releases while it is on (a reading counts 30 s, so the steps below stay well inside that)."""
    feed, results, rest, _ = frontier_job
    host = "backlog.example"

    def batch(target: str, found_at: float | None) -> dict:
        url = f"http://{target}/"
        event = {"v": 1, "type": "discovered", "host": target,
                 "urls": [{"url": url, "fp": url_fp(url), "depth": 1, "priority": 5, "source": "link"}]}
        return event if found_at is None else event | {"found_at": found_at}

    feed.send(batch(host, time.time() - 7_200))        # the frontier reads links two hours behind discovery
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:                 # a new host's robots.txt would go at once: it waits
        try:
            _, request = next_request(results, timeout=0.5)
        except queue.Empty:
            continue
        assert request["host"] != host, f"released while braked: {request!r}"
    # Levels are published on an event or a timer, at most once a second: a batch without a time (it says
    # nothing of the lag) makes the operator publish them; they reach REST on the metric fetcher's interval.
    feed.send(batch("nudge.example", None))
    deadline = time.monotonic() + 10
    while True:
        levels = frontier_counters(rest)
        if levels.get("backlog_braked") == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert levels.get("backlog_braked") == 1 and levels.get("discovery_lag_s", 0) >= 7_200

    feed.send(batch(host, time.time()))                # caught up: the brake lets go on this batch
    robots = next_for(results, host, timeout=15)
    assert (robots["kind"], robots["url"]) == ("robots", f"http://{host}/robots.txt")
