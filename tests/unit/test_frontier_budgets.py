"""Host budgets in the frontier (decision 1805): URLs admitted per round and pages released per day,
each a token bucket of udfs.budgets scaled by the host's importance, in the state machine and the glue."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.frontier_harness import HOST, T0, Harness
from udfs.frontier import release, rows
from udfs.frontier.rows import HostState, QueueItem, Robots, STATE_VERSION
from udfs.frontier.host_budget import (MAX_INLINK_HOSTS, census_due, host_importance, note_inlink, on_domain_hosts,
                                       spend_page)
from udfs.frontier.admission import Verdict, admit
from udfs.frontier.release import Step, timer_ms, wake_ms
from udfs.budgets import DAY_S, BudgetPolicy
from udfs.politeness import PolitenessPolicy
from udfs.urls import registrable_domain, url_fp

BUDGETS = BudgetPolicy(host_pages_per_day=3.0, host_urls_per_round=4.0, round_s=100.0)
POLITENESS = PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0)


def _item(n: int, depth: int = 0) -> QueueItem:
    url = f"http://{HOST}/p{n}"
    return QueueItem(url, url_fp(url), depth)


def _admit_many(state: HostState, count: int, source: str = "link", now: float = T0,
                depth: int = 0) -> tuple[HostState, list[Verdict]]:
    verdicts = []
    for n in range(count):
        state, admission = admit(state, _item(n + int(now), depth), None, None, now, source=source, budgets=BUDGETS)
        verdicts.append(admission.verdict)
    return state, verdicts


def test_a_host_admits_its_urls_per_round_then_drops_until_the_round_refills():
    state, verdicts = _admit_many(HostState(), 6)
    assert verdicts == [Verdict.ADMITTED] * 4 + [Verdict.ROUND_BUDGET] * 2   # importance 1 at depth 0
    state, verdicts = _admit_many(state, 2, now=T0 + 50.0)                        # half a round: 2 tokens back
    assert verdicts == [Verdict.ADMITTED] * 2


def test_seeds_are_never_dropped_and_make_the_host_more_important():
    state, verdicts = _admit_many(HostState(), 6, source="seed")
    assert set(verdicts) == {Verdict.ADMITTED} and state.seeded and state.min_depth == 0
    assert host_importance(state, BUDGETS) == 2.0                    # seed_bonus: one doubling
    _, verdicts = _admit_many(state, 10, now=T0 + 1.0)
    assert verdicts.count(Verdict.ADMITTED) == 8                      # 4 URLs/round × 2


def test_deep_hosts_matter_less():
    state, _ = _admit_many(HostState(), 1, depth=4)
    assert state.min_depth == 4 and host_importance(state, BUDGETS) == pytest.approx(2 ** -1.0)


def test_pages_wait_for_the_day_budget_and_robots_txt_is_never_budgeted():
    state, _ = _admit_many(HostState(), 4)
    assert release.plan(state, T0, budgets=BUDGETS).step is Step.FETCH_ROBOTS
    state = rows.replace(state, robots=Robots.ALLOW_ALL, robots_expires_at=T0 + 10 * DAY_S)
    now = T0
    for _ in range(3):   # 3 pages a day at importance 1
        assert release.plan(state, now, budgets=BUDGETS).step is Step.POP
        state = spend_page(state, now, BUDGETS)
        now += 1.0
    plan = release.plan(state, now, budgets=BUDGETS)
    assert plan.step is Step.WAIT and plan.at == pytest.approx(T0 + DAY_S / 3, abs=5.0)
    assert wake_ms(state, now, budgets=BUDGETS) == timer_ms(plan.at)
    assert release.plan(state, plan.at + 0.01, budgets=BUDGETS).step is Step.POP
    assert release.plan(state, now).step is Step.POP                       # no policy: no budget


def test_host_rows_keep_the_budget_and_rows_before_it_read_full():
    state, _ = _admit_many(HostState(), 2, source="seed", depth=0)
    state = spend_page(state, T0, BUDGETS)
    row = state.to_row()
    assert json.loads(row)["v"] == STATE_VERSION == 6
    assert HostState.from_row(row) == state
    old = json.loads(row)
    for key in ("budget", "seeded", "min_depth"):
        del old[key]
    old["v"] = 5
    read = HostState.from_row(json.dumps(old))
    assert (read.budget, read.seeded, read.min_depth) == (None, False, None)


def test_the_frontier_spends_both_budgets_and_counts_the_dropped_urls():
    h = Harness(politeness=POLITENESS, budgets=BUDGETS)
    # the first URL finds a fresh bucket of 4; from then on depth 1 caps it at 4 × 2^-0.25 = 3.4
    (robots,) = h.discover(*(f"/p{n}" for n in range(7)))
    assert h.counts["admitted"] == 4 and h.counts["dropped_round_budget"] == 3
    h.robots(robots, http_status=404, body=b"")
    released = []
    for _ in range(3):
        released += h.advance(1.0)
        if released and released[-1]["kind"] == "page":
            h.complete(released[-1])
    pages = [r for r in released if r["kind"] == "page"]
    assert len(pages) == 2                                               # 3 × 0.84 = 2.5 pages a day
    assert h.state.queued == 2 and h.advance(60.0) == []                 # the third waits for its token


def test_other_hosts_linking_in_raise_importance_up_to_a_bound():
    state = HostState()
    for n in range(100):
        state = note_inlink(state, HOST, f"site{n}.example")
    assert len(state.inlinks) == MAX_INLINK_HOSTS
    assert host_importance(state, BUDGETS) == pytest.approx(2 ** (0.5 * 6.022), rel=1e-3)   # log2(65) = 6.02
    same = note_inlink(HostState(), HOST, HOST)
    again = note_inlink(note_inlink(HostState(), HOST, "a.example"), HOST, "a.example")
    assert same.inlinks == () and len(again.inlinks) == 1
    assert note_inlink(HostState(), HOST, None).inlinks == ()
    assert HostState.from_row(state.to_row()) == state


def test_the_frontier_counts_the_host_a_discovery_came_from():
    h = Harness(politeness=POLITENESS, budgets=BUDGETS)
    urls = [{"url": f"http://{HOST}/x", "fp": url_fp(f"http://{HOST}/x"), "depth": 1, "priority": 5, "source": "link"}]
    for n in range(3):
        h.event({"v": 1, "type": "discovered", "host": HOST, "urls": urls, "from_host": f"s{n}.example"})
    assert len(h.state.inlinks) == 3


def test_writers_say_which_host_the_links_were_found_on():
    from udfs.page_events import discovered_batches
    from tests.unit.test_canonical import _bundle
    batches = discovered_batches(_bundle(None))
    assert batches and {b["from_host"] for b in batches} == {"shop.example.com"}


def test_writers_say_when_the_page_the_links_were_found_on_was_fetched():
    from udfs.page_events import discovered_batches
    from tests.unit.test_canonical import _bundle
    bundle = _bundle(None)
    batches = discovered_batches(bundle)
    assert batches and {b["found_at"] for b in batches} == {bundle["result"]["done_at"]}   # decision 1843


# --- domain shares (decision 1811) ----------------------------------------------------------------

DOMAIN = BudgetPolicy(host_pages_per_day=3.0, host_urls_per_round=4.0, domain_pages_per_day=4.0,
                      domain_urls_per_round=6.0, round_s=100.0, census_retry_s=50.0)


def test_a_host_spends_its_share_of_the_domain_round_once_the_census_has_answered():
    state, got = on_domain_hosts(HostState(), 3), []
    for n in range(4):
        state, admission = admit(state, _item(n), None, None, T0, budgets=DOMAIN)
        got.append(admission.verdict)
    # 6 URLs a round for 3 hosts: 2 each, before the host's own 4
    assert got == [Verdict.ADMITTED] * 2 + [Verdict.DOMAIN_ROUND_BUDGET] * 2
    assert state.budget.url_tokens == pytest.approx(2.0)     # a refused URL costs the host's own round nothing


def test_pages_wait_for_the_domain_share_too():
    state = rows.replace(on_domain_hosts(HostState(), 4), robots=Robots.ALLOW_ALL, robots_expires_at=T0 + 10 * DAY_S)
    state, _ = _admit_many(state, 1)
    assert release.plan(state, T0, budgets=DOMAIN).step is Step.POP
    state = spend_page(state, T0, DOMAIN)                  # 4 pages a day for 4 hosts: 1 each
    plan = release.plan(state, T0 + 1.0, budgets=DOMAIN)
    assert plan.step is Step.WAIT and plan.at == pytest.approx(T0 + DAY_S, abs=1.0)
    assert state.budget.page_tokens == pytest.approx(2.0, abs=0.01)


def test_a_smaller_share_cuts_the_tokens_a_host_already_holds():
    state, first = admit(on_domain_hosts(HostState(), 1), _item(1), None, None, T0, budgets=DOMAIN)
    assert state.domain.url_tokens == pytest.approx(5.0)     # the share row started full: 6 URLs
    state = on_domain_hosts(state, 6)                      # now 1 URL a round
    state, second = admit(state, _item(2), None, None, T0 + 1.0, budgets=DOMAIN)
    state, third = admit(state, _item(3), None, None, T0 + 1.0, budgets=DOMAIN)
    assert [a.verdict for a in (first, second, third)] == [Verdict.ADMITTED, Verdict.ADMITTED,
                                                           Verdict.DOMAIN_ROUND_BUDGET]


def test_the_host_row_keeps_the_domain_share_and_older_rows_ask_again():
    state = spend_page(on_domain_hosts(HostState(census_at=T0), 5), T0, DOMAIN)
    row = state.to_row()
    assert HostState.from_row(row) == state and state.domain.share == pytest.approx(0.2)
    old = json.loads(row)
    del old["domain"], old["census_at"]
    read = HostState.from_row(json.dumps(old))
    assert read.domain is None and census_due(read, T0, DOMAIN)


def test_a_host_asks_the_census_once_and_again_only_when_no_answer_came():
    assert census_due(HostState(), T0, DOMAIN)
    asked = HostState(census_at=T0)
    assert not census_due(asked, T0 + 49.0, DOMAIN) and census_due(asked, T0 + 50.0, DOMAIN)
    assert not census_due(on_domain_hosts(asked, 2), T0 + 1e6, DOMAIN)


def test_the_frontier_asks_the_census_for_a_new_host_and_spends_the_share_it_is_told():
    h = Harness(politeness=POLITENESS, budgets=replace(DOMAIN, host_urls_per_round=40.0), census=True)
    (robots,) = h.discover("/a", "/b")
    assert [q for _, q in h.census] == [{"type": "host_seen", "host": HOST, "domain": registrable_domain(HOST)}]
    h.discover("/c")                                          # asked already: no second question
    assert len(h.census) == 1 and h.counts["census_asked"] == 1
    h.event({"v": 1, "type": "domain_hosts", "host": HOST, "hosts": 3})
    assert h.counts["domain_shares_heard"] == 1 and h.state.domain.share == pytest.approx(1 / 3)
    h.discover(*(f"/d{n}" for n in range(4)))   # 6 / 3 × 0.84 (depth 1) = 1.7 URLs of the domain's round
    assert h.counts["dropped_domain_round_budget"] == 3
    h.now += 60.0
    h.discover("/e")                                          # answered: never asks again
    assert len(h.census) == 1


def test_a_frontier_without_the_census_never_asks():
    h = Harness(politeness=POLITENESS, budgets=DOMAIN)
    h.discover("/a")
    assert h.census == [] and h.state.domain is None
