"""A robots.txt or tdmrep.json redirect hop to another server goes through the frontier (decision 3909).

The fetcher follows such a file's redirects only on its request's own server address; a hop to another
ends the lease as `handed_on`, naming the hop. The host keeps the hop and leases it next, gated and
routed by the hop's address, with the redirects already followed; the hop's answer ends the host's
robots.txt lease as its own would, without taking the other server's address for the host's. Pure
logic first, then the operator's glue (`HostFrontier`).
"""
from __future__ import annotations

from tests.unit.test_frontier_logic import HOST, NOW, known, robots_event, robots_leased
from tests.unit.test_frontier_orphaned_leases import Subtask, discovered
from udfs.frontier.preflight import MAX_HANDED_ON_HOPS, on_handed_on, on_robots
from udfs.frontier.release import Step, lease_robots, pin_ip, plan
from udfs.frontier.rows import HandedOnHop, HostState, Robots
from udfs.politeness import PolitenessPolicy

HOP_URL, HOP_IP = "http://cdn.example.net/robots.txt", "127.0.0.42"


def handed_on(event: dict, url: str = HOP_URL, ip: str = HOP_IP, hops: int = 1) -> dict:
    return dict(event, fetch_status="handed_on", http_status=301, hop_url=url, hop_ip=ip, hops=hops,
                ip="127.0.0.7", redirected=False)


def test_the_host_keeps_the_hop_and_leases_it_next_under_its_address():
    state, req = robots_leased(known(robots=Robots.NONE))
    after, out = on_handed_on(state, handed_on(robots_event(req)), NOW + 0.1)
    assert out.matched and out.orphaned and after.lease is None
    assert after.hop == HandedOnHop("robots", HOP_URL, HOP_IP, 1)
    assert after.robots is Robots.NONE and after.robots_failures == 0 and after.backoff_s == 0.0
    at = after.next_allowed_at
    assert plan(after, at).step is Step.FETCH_ROBOTS
    _, again = lease_robots(after, HOST, 1, at)
    assert (again["url"], again["ip"], again["hops"], again["kind"]) == (HOP_URL, HOP_IP, 1, "robots")


def test_a_malformed_or_overlong_hop_is_dropped_and_the_hosts_own_file_comes_next():
    for bad in (dict(url="ftp://cdn.example.net/robots.txt"), dict(ip=""), dict(hops=0),
                dict(hops=MAX_HANDED_ON_HOPS + 1)):
        state, req = robots_leased(known(robots=Robots.NONE))
        after, out = on_handed_on(state, handed_on(robots_event(req), **bad), NOW)
        assert out.matched and after.hop is None, bad
        _, again = lease_robots(after, HOST, 1, after.next_allowed_at)
        assert "hops" not in again and again["url"].endswith("/robots.txt"), bad


def test_a_handed_on_outcome_of_another_lease_is_stale():
    state, req = robots_leased(known(robots=Robots.NONE))
    after, out = on_handed_on(state, dict(handed_on(robots_event(req)), lease_id=f"{HOST}/other"), NOW)
    assert not out.matched and after == state


def test_the_hop_survives_the_host_row():
    state = HostState(hop=HandedOnHop("tdmrep", "https://x.test/.well-known/tdmrep.json", "127.0.0.9", 2))
    assert HostState.from_row(state.to_row()).hop == state.hop
    assert HostState.from_row(HostState().to_row()).hop is None
    assert "hop" not in HostState().to_row()   # rows of hosts without one stay as they were


def test_the_host_map_never_pins_a_hop_to_the_hosts_own_address():
    hop = {"host": HOST, "url": HOP_URL, "kind": "robots", "ip": HOP_IP, "hops": 1}
    assert pin_ip(dict(hop), {HOST: "127.0.0.7"})["ip"] == HOP_IP
    assert pin_ip({"host": HOST, "url": f"http://{HOST}/robots.txt", "kind": "robots"}, {HOST: "127.0.0.7"})["ip"] \
        == "127.0.0.7"


def test_the_frontier_leases_the_hop_then_keeps_its_answer_as_the_hosts_robots_txt():
    sub = Subtask(PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0))
    sub.open(epoch=0xA)
    (robots,) = sub.event(discovered("/a"))
    assert sub.event(handed_on(robots_event(robots))) == []   # the host's gap: its own server was asked
    assert sub.counts["preflight_hops_handed_on"] == 1 and sub.state.hop is not None
    (hop,) = sub.fire()
    assert (hop["url"], hop["ip"], hop["hops"]) == (HOP_URL, HOP_IP, 1)
    answer = dict(robots_event(hop, body=""), ip=HOP_IP, fetched_at=sub.now)   # "" = an empty robots.txt
    (page,) = sub.event(answer) or sub.fire()
    assert page["kind"] == "page" and page["url"].endswith("/a")
    assert sub.state.robots is Robots.PARSED and sub.state.hop is None
    assert sub.state.ip is None   # the hop's server is not the host's
    assert sub.counts["robots_fetched"] == 1


def test_the_hops_answer_ends_the_hosts_robots_lease_without_teaching_it_the_hops_address():
    state, req = robots_leased(known(robots=Robots.NONE))
    state, _ = on_handed_on(state, handed_on(robots_event(req)), NOW)
    state, hop = lease_robots(state, HOST, 1, state.next_allowed_at)
    after, out = on_robots(state, dict(robots_event(hop, body=""), ip=HOP_IP), None, NOW + 5)
    assert out.matched and out.robots_ok and after.robots is Robots.PARSED
    assert after.hop is None and after.ip is None and after.lease is None
