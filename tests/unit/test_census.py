"""The domain census (decision 1811, udfs.census): counting a domain's hosts once each and whom to tell."""
from __future__ import annotations

import json

import pytest

from udfs.budgets import share_for
from udfs.census import CensusStep, count_host, domain_hosts, host_seen, seen_domain
from udfs.records import ContractError, decode_frontier_event, encode


class Census:
    """udfs.census driven the way operators.census drives it: per domain, a count and the known hosts."""

    def __init__(self) -> None:
        self.known: dict[str, list[str]] = {}
        self.told: dict[str, int] = {}   # host → the count it was last told
        self.answers = 0

    def ask(self, host: str) -> CensusStep:
        question = host_seen(host)
        hosts = self.known.setdefault(seen_domain(question), [])
        step = count_host(len(hosts), host in hosts)
        if step.new:
            hosts.append(host)
        for name in (hosts if step.tell_all else [host]):
            self.told[name] = step.count
            self.answers += 1
        return step


def test_a_new_host_is_counted_once_however_often_it_asks():
    census = Census()
    assert census.ask("a.example.com") == CensusStep(1, True, False)
    assert census.ask("b.example.com") == CensusStep(2, True, True)      # 2 is a doubling: tell both
    assert census.ask("a.example.com") == CensusStep(2, False, False)    # a retry counts nothing
    assert census.ask("c.example.com") == CensusStep(3, True, False)
    assert census.told == {"a.example.com": 2, "b.example.com": 2, "c.example.com": 3}


def test_hosts_of_other_domains_are_counted_apart():
    census = Census()
    for host in ("www.example.com", "shop.example.com", "www.example.org", "h1.s0001.test", "h2.s0001.test"):
        census.ask(host)
    assert {domain: len(hosts) for domain, hosts in census.known.items()} == {
        "example.com": 2, "example.org": 1, "s0001.test": 2}


@pytest.mark.parametrize("hosts", [1, 7, 64, 1000])
def test_the_shares_a_domain_hands_out_stay_within_twice_its_budget(hosts):
    census = Census()
    most = 0.0
    for n in range(hosts):
        census.ask(f"h{n}.trap.example")
        most = max(most, sum(share_for(count) for count in census.told.values()))
    assert most <= 2.0                                                    # never more than 2x stale
    if hosts & (hosts - 1) == 0:                                          # just after a doubling: exact
        assert sum(share_for(count) for count in census.told.values()) == pytest.approx(1.0)
    assert census.answers <= 3 * hosts                                    # about 2n answers over a domain's life


def test_the_answer_is_a_valid_crawl_outcomes_event():
    event = decode_frontier_event(encode(dict(domain_hosts("www.example.com:8080", 5))))
    assert event == {"v": 1, "type": "domain_hosts", "host": "www.example.com:8080", "hosts": 5}
    for bad in (0, -1, True, "5", None):
        with pytest.raises(ContractError, match="host count"):
            decode_frontier_event(json.dumps({"v": 1, "type": "domain_hosts", "host": "a.example", "hosts": bad}))


def test_a_question_names_the_domain_of_the_frontier_key_without_its_port():
    assert host_seen("www.example.co.uk:8443") == {"type": "host_seen", "host": "www.example.co.uk:8443",
                                                   "domain": "example.co.uk"}
    assert seen_domain({"type": "completion", "domain": "x"}) == "" and seen_domain(None) == ""
