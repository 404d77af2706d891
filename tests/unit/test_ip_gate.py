"""The per-IP gate (udfs/ip_gate.py; docs/architecture.md §2 invariant 1, "and per IP"): never more than the
limit in flight per address, releases at least the gap apart, a lost ip_done frees its slot at the
deadline, CDN ranges are looser. The fetcher's loop keeps it (operators/fetch_loop.py, decision 1612)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY
from udfs.frontier.rows import HostState, QueueItem, Robots
from udfs.frontier.release import lease_page, lease_robots, pin_ip
from udfs.frontier.outcomes import learned_ip
from udfs.frontier.preflight import on_robots
from udfs import ip_gate as ig
from udfs.config import load_config
from udfs.records import SCHEMA_VERSION

IP = "127.0.0.7"
NOW = 1_000_000.0


def request(host: str, seq: int = 1, ip: str | None = IP) -> dict:
    req = {"host": host, "url": f"http://{host}/p{seq}", "fp": seq, "kind": "page",
           "lease_id": f"{host}/{seq}", "depth": 0, "attempt": 1}
    if ip is not None:
        req["ip"] = ip
    return req


def done(req: dict, fetch_status: str = "ok") -> dict:
    """The ip_done the fetcher's loop hands its gate when a fetch ends (operators/fetch_loop.py)."""
    return ig.ip_done_event(req, SCHEMA_VERSION, fetch_status)


@pytest.mark.parametrize("field, value", [
    ("max_in_flight", 0), ("max_in_flight", 1.5), ("max_in_flight", True), ("cdn_max_in_flight", -1),
    ("min_gap_s", -0.1), ("min_gap_s", float("nan")), ("cdn_min_gap_s", float("inf")),
    ("lease_timeout_s", 0.0), ("max_wait_s", -1.0), ("max_queue", 0), ("abandoned_hold_s", -1.0),
    ("cdn_cidrs", ("not-a-range",)), ("cdn_cidrs", ["10.0.0.0/8"]),
])
def test_policy_rejects_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        ig.IpGatePolicy(**{field: value})


def test_the_ipgate_config_section_is_registered_with_its_defaults() -> None:
    config = load_config("", ["ipgate.max_in_flight=2", 'ipgate.cdn_cidrs=["151.101.0.0/16"]'])
    assert config.ipgate == ig.IpGatePolicy(max_in_flight=2, cdn_cidrs=("151.101.0.0/16",))
    assert load_config("").ipgate == ig.DEFAULT_IP_GATE_POLICY


@pytest.mark.parametrize("item, key", [
    (request("a.test"), IP),
    (request("a.test", ip=None), "host:a.test"),
    (dict(request("a.test"), ip=""), "host:a.test"),
    ({}, "host:"),
    ({"host": 5, "ip": 9}, "host:"),
])
def test_the_gate_key_is_the_address_else_the_host_and_never_raises(item: dict, key: str) -> None:
    assert ig.gate_key(item) == key


def test_two_hosts_on_one_address_are_never_in_flight_together() -> None:
    state = ig.GateState()
    a, b = request("a.test"), request("b.test")
    step = ig.on_event(state, IP, a, NOW)
    assert [r["lease_id"] for r in step.released] == ["a.test/1"]
    step = ig.on_event(step.state, IP, b, NOW + 0.1)
    assert step.released == () and step.queued == 1 and len(step.state.queue) == 1
    step = ig.on_event(step.state, IP, done(a), NOW + 0.5)
    assert step.done == 1 and [r["lease_id"] for r in step.released] == ["b.test/1"]


def test_a_pinned_address_puts_two_host_names_under_one_key() -> None:
    pins = {"a.test": IP, "b.test": IP}
    keys = {ig.gate_key(pin_ip(request(h, ip=None), pins)) for h in ("a.test", "b.test:8080")}
    assert keys == {IP}
    assert pin_ip(request("c.test", ip=None), pins).get("ip") is None


def test_unknown_addresses_degenerate_to_one_key_per_host() -> None:
    a, b = request("a.test", ip=None), request("b.test", ip=None)
    assert ig.gate_key(a) != ig.gate_key(b)
    step = ig.on_event(ig.GateState(), ig.gate_key(a), a, NOW)
    assert len(step.released) == 1


def test_the_gap_holds_the_next_release_and_the_timer_lets_it_go() -> None:
    policy = ig.IpGatePolicy(max_in_flight=2, min_gap_s=2.0)
    step = ig.on_event(ig.GateState(), IP, request("a.test"), NOW, policy)
    step = ig.on_event(step.state, IP, request("b.test"), NOW + 0.5, policy)
    assert step.released == ()
    assert ig.wake_at(step.state, IP, policy) == NOW + 2.0
    assert ig.on_timer(step.state, IP, NOW + 1.9, policy).released == ()
    assert len(ig.on_timer(step.state, IP, NOW + 2.0, policy).released) == 1


def test_an_expired_deadline_frees_the_slot_and_is_counted() -> None:
    policy = ig.IpGatePolicy(lease_timeout_s=30.0, max_wait_s=60.0)
    step = ig.on_event(ig.GateState(), IP, request("a.test"), NOW, policy)
    step = ig.on_event(step.state, IP, request("b.test"), NOW + 1, policy)
    assert ig.wake_at(step.state, IP, policy) == NOW + 30.0
    late = ig.on_timer(step.state, IP, NOW + 30.0, policy)
    assert late.expired == 1 and [r["host"] for r in late.released] == ["b.test"]
    # The late ip_done of the expired lease frees nothing.
    after = ig.on_event(late.state, IP, done(request("a.test")), NOW + 31, policy)
    assert after.done == 0 and len(after.state.leases) == 1


@pytest.mark.parametrize("fetch_status, hold", [("ok", False), ("conn_error", False), ("timeout", True),
                                                 ("too_slow", True), ("too_large", True)])
def test_an_abandoned_fetch_keeps_its_address_busy_for_the_hold(fetch_status: str, hold: bool) -> None:
    # The server notices a hang-up only at its next write; until then it still serves the request.
    policy = ig.IpGatePolicy(abandoned_hold_s=1.0)
    step = ig.on_event(ig.GateState(), IP, request("a.test"), NOW, policy)
    step = ig.on_event(step.state, IP, request("b.test"), NOW + 0.5, policy)
    step = ig.on_event(step.state, IP, done(request("a.test"), fetch_status), NOW + 4, policy)
    assert step.done == 1 and len(step.released) == int(not hold)
    if hold:
        assert ig.wake_at(step.state, IP, policy) == NOW + 5
        assert ig.on_timer(step.state, IP, NOW + 4.9, policy).released == ()
        later = ig.on_timer(step.state, IP, NOW + 5, policy)
        assert [r["host"] for r in later.released] == ["b.test"]


def test_cdn_ranges_take_more_in_flight_than_other_addresses() -> None:
    policy = ig.IpGatePolicy(cdn_cidrs=("151.101.0.0/16", "2a04:4e42::/32"), cdn_max_in_flight=3)
    for ip, want in (("151.101.1.1", 3), ("2a04:4e42::1", 3), ("151.102.1.1", 1), (IP, 1)):
        state, released = ig.GateState(), 0
        for n in range(5):
            step = ig.on_event(state, ip, request(f"h{n}.test", ip=ip), NOW, policy)
            state, released = step.state, released + len(step.released)
        assert released == want, ip
    assert policy.limits("host:151.101.1.1") == (1, 0.0)


def test_a_full_queue_refuses_new_requests_and_counts_them() -> None:
    policy = ig.IpGatePolicy(max_queue=2)
    state = ig.GateState()
    refused = 0
    for n in range(5):
        step = ig.on_event(state, IP, request(f"h{n}.test"), NOW, policy)
        state, refused = step.state, refused + step.refused
    assert len(state.queue) == 2 and len(state.leases) == 1 and refused == 2


def test_a_newer_request_of_a_host_supersedes_its_queued_one() -> None:
    # a.test's first request waits behind b.test; the frontier's lease on it expires and a.test's
    # next request arrives: releasing both would put them back to back, under a.test's crawl delay.
    step = ig.on_event(ig.GateState(), IP, request("b.test"), NOW)
    step = ig.on_event(step.state, IP, request("a.test", 1), NOW + 1)
    step = ig.on_event(step.state, IP, request("a.test", 2), NOW + 20)
    assert step.stale == 1 and len(step.state.queue) == 1
    step = ig.on_event(step.state, IP, done(request("b.test")), NOW + 21)
    assert [r["lease_id"] for r in step.released] == ["a.test/2"] and step.state.queue == ()


def test_max_wait_follows_the_frontier_lease_and_the_fetch_timeout_unless_set() -> None:
    assert load_config("").ipgate.max_wait_s == ig.max_wait_for(60.0, 10.0) == ig.DEFAULT_IP_GATE_POLICY.max_wait_s
    derived = load_config("", ["frontier.lease_timeout_s=20.0", "fetch.total_timeout_s=5.0"]).ipgate.max_wait_s
    assert derived == 20.0 - 5.0 - ig.RELEASE_MARGIN_S
    assert load_config("", ["ipgate.max_wait_s=3.0", "frontier.lease_timeout_s=20.0"]).ipgate.max_wait_s == 3.0
    assert ig.max_wait_for(5.0, 10.0) == 1.0


def test_a_request_that_waited_past_max_wait_is_dropped_as_stale() -> None:
    policy = ig.IpGatePolicy(max_wait_s=10.0, lease_timeout_s=60.0)
    step = ig.on_event(ig.GateState(), IP, request("a.test"), NOW, policy)
    step = ig.on_event(step.state, IP, request("b.test"), NOW, policy)
    step = ig.on_event(step.state, IP, request("c.test"), NOW + 15, policy)
    step = ig.on_event(step.state, IP, done(request("a.test")), NOW + 16, policy)
    assert step.stale == 1 and [r["host"] for r in step.released] == ["c.test"]


def test_a_request_that_is_not_a_mapping_is_refused_and_counted_never_raised() -> None:
    step = ig.on_event(ig.GateState(), IP, ["not", "a", "request"], NOW)   # type: ignore[arg-type]
    assert step.refused == 1 and step.released == () and step.state.queue == ()


def test_an_idle_key_drops_its_row_once_the_gap_has_passed() -> None:
    policy = ig.IpGatePolicy(min_gap_s=5.0)
    step = ig.on_event(ig.GateState(), IP, request("a.test"), NOW, policy)
    step = ig.on_event(step.state, IP, done(request("a.test")), NOW + 1, policy)
    assert ig.keep_row(step.state, IP, NOW + 1, policy)
    assert ig.wake_at(step.state, IP, policy) == NOW + 5  # a timer comes back to drop it
    assert not ig.keep_row(step.state, IP, NOW + 5, policy)
    assert ig.wake_at(ig.GateState(), IP, policy) is None


def test_the_frontier_learns_the_address_of_a_fetch_for_the_next_request() -> None:
    state, req = lease_robots(HostState(), "a.test", 1, NOW)
    assert "ip" not in req
    event = {"v": SCHEMA_VERSION, "type": "robots", "host": "a.test", "lease_id": req["lease_id"],
             "fetch_status": "ok", "http_status": 404, "fetched_at": NOW, "fetch_ms": 5.0, "body_b64": "", "ip": IP}
    state, outcome = on_robots(state, event, None, NOW + 1)
    assert outcome.matched and state.ip == IP
    assert HostState.from_row(state.to_row()).ip == IP
    item = QueueItem("http://a.test/", 2, 0, 0)
    _, page, _ = lease_page(state, item, None, "a.test", NOW + 2)
    assert page is not None and page["ip"] == IP


@pytest.mark.parametrize("bad", [None, 7, "", "not-an-ip", "x" * 500])
def test_a_bad_address_in_an_event_keeps_the_known_one(bad: object) -> None:
    assert learned_ip(HostState(ip=IP), {"ip": bad}) == IP


_OPS = st.lists(st.tuples(st.sampled_from(["offer", "done", "tick"]), st.integers(0, 5),
                          st.floats(0.0, 3.0, allow_nan=False)), max_size=60)


@settings(max_examples=250, deadline=None)
@given(ops=_OPS, limit=st.integers(1, 3), gap=st.sampled_from([0.0, 0.5, 2.0]))
def test_in_flight_never_exceeds_the_limit_and_releases_keep_the_gap(ops, limit: int, gap: float) -> None:
    policy = ig.IpGatePolicy(max_in_flight=limit, min_gap_s=gap, lease_timeout_s=5.0, max_queue=8)
    state, now, seq = ig.GateState(), NOW, 0
    in_flight: dict[str, float] = {}   # lease_id -> deadline, as the server would see the fetches
    releases: list[float] = []
    for op, pick, dt in ops:
        now += dt
        if op == "offer":
            seq += 1
            step = ig.on_event(state, IP, request(f"h{pick}.test", seq), now, policy)
        elif op == "done" and in_flight:
            lease_id = sorted(in_flight)[pick % len(in_flight)]
            step = ig.on_event(state, IP, {"type": "ip_done", "gate_key": IP, "lease_id": lease_id}, now, policy)
            in_flight.pop(lease_id)
        else:
            step = ig.on_timer(state, IP, now, policy)
        in_flight = {k: d for k, d in in_flight.items() if d > now}
        for released in step.released:
            in_flight[released["lease_id"]] = now + policy.lease_timeout_s
            releases.append(now)
        state = step.state
        assert len(in_flight) <= limit and len(state.leases) <= limit
        assert len(state.queue) <= policy.max_queue
    assert all(b - a >= gap - 1e-9 for a, b in zip(releases, releases[1:]))


@pytest.mark.parametrize("deadline, late", [
    (NOW + 30.0, False),           # a fresh lease: 10 s of fetch and 5 s of margin fit
    (NOW + 15.0, False),           # exactly fits
    (NOW + 14.9, True),            # the completion could come back after the lease expired
    (NOW - 1.0, True),             # already expired
    (None, False), ("soon", False), (True, False),   # no usable deadline: an older job's request
])
def test_a_request_is_too_late_to_start_when_its_fetch_could_outlive_its_lease(deadline: object, late: bool) -> None:
    req = request("a.test")
    if deadline is not None:
        req["lease_deadline"] = deadline
    assert ig.too_late_to_start(req, NOW, total_timeout_s=10.0) is late


def test_every_leased_request_carries_its_lease_deadline() -> None:
    state, robots = lease_robots(HostState(), "a.test", 1, NOW)
    assert robots["lease_deadline"] == pytest.approx(state.lease.deadline) == NOW + DEFAULT_FRONTIER_POLICY.lease_timeout_s
    item = QueueItem("http://a.test/", 2, 0, 0)
    state = dataclasses.replace(state, lease=None, robots=Robots.ALLOW_ALL)
    _, page, _ = lease_page(state, item, None, "a.test", NOW + 2)
    assert page is not None and page["lease_deadline"] == pytest.approx(NOW + 2 + DEFAULT_FRONTIER_POLICY.lease_timeout_s)
    assert not ig.too_late_to_start(page, NOW + 2, total_timeout_s=10.0)
