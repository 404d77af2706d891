"""A lease a fetch subtask hands back unsent, because the host's address it resolved is another
subtask's to gate, is leased again with that address, nothing charged (decision 3907).

Pure logic first (`udfs.frontier.outcomes.on_misrouted`), then the operator's glue (`HostFrontier`):
a DNS host's robots.txt comes back `misrouted`, and the next request carries the address at once.
"""
from __future__ import annotations

from tests.unit.test_frontier_logic import HOST, NOW, completion, item, known, leased, robots_event, robots_leased
from tests.unit.test_frontier_orphaned_leases import Subtask, discovered
from udfs.frontier.outcomes import on_misrouted
from udfs.frontier.release import Step, plan
from udfs.frontier.rows import Robots
from udfs.politeness import PolitenessPolicy

ADDRESS = "127.0.0.9"


def misrouted(event: dict) -> dict:
    return dict(event, fetch_status="misrouted", http_status=None, ip=ADDRESS)


def test_a_misrouted_robots_lease_is_leased_again_at_once_with_the_address():
    state, req = robots_leased()
    after, out = on_misrouted(state, misrouted(robots_event(req)), NOW + 0.01)
    assert out.matched and out.orphaned
    assert after.lease is None and after.ip == ADDRESS
    assert after.robots is Robots.NONE and after.robots_failures == 0 and after.backoff_s == 0.0
    assert after.next_allowed_at == state.next_allowed_at   # nothing was sent: the clock stands
    assert plan(after, NOW + 0.01).step is Step.FETCH_ROBOTS


def test_a_misrouted_page_goes_back_with_the_attempt_it_had_and_no_charge():
    state, req = leased(known(crawl_delay=2.0), item("/a", attempt=1))
    after, out = on_misrouted(state, misrouted(completion(req)), NOW + 0.01)
    assert out.orphaned and not out.parked and out.record is None
    assert out.requeue.url == req["url"] and out.requeue.attempt == 1
    assert after.ip == ADDRESS and after.backoff_s == 0.0 and after.next_allowed_at == state.next_allowed_at


def test_a_misrouted_outcome_of_another_lease_is_stale():
    state, req = robots_leased()
    after, out = on_misrouted(state, dict(misrouted(robots_event(req)), lease_id=f"{HOST}/other"), NOW)
    assert not out.matched and after == state


def test_without_a_usable_address_the_host_waits_its_gap_before_trying_again():
    state, req = leased(known(crawl_delay=2.0))
    after, out = on_misrouted(state, dict(misrouted(completion(req)), ip="not an address"), NOW + 1)
    assert out.matched and after.ip is None and after.next_allowed_at == NOW + 1 + 2.0


def test_the_frontier_sends_the_robots_request_again_with_the_address_and_counts_it():
    sub = Subtask(PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0))
    sub.open(epoch=0xA)
    (robots,) = sub.event(discovered("/a"))
    assert "ip" not in robots   # a host resolved by DNS: the frontier has no address for it yet
    (again,) = sub.event(misrouted(robots_event(robots)))
    assert again["kind"] == "robots" and again["ip"] == ADDRESS and again["attempt"] == 1
    assert sub.counts["leases_misrouted"] == 1 and sub.counts["robots_failed"] == 0
    assert sub.state.robots is Robots.NONE and sub.state.backoff_s == 0.0
