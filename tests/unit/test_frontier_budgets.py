"""Host budgets in the frontier (decision 1805): URLs admitted per round and pages released per day,
each a token bucket of udfs.budgets scaled by the host's importance, in the state machine and the glue."""
from __future__ import annotations

import json

import pytest

from tests.unit.test_frontier_logic_host import HOST, T0, Harness
from udfs import frontier_logic as fl
from udfs.budgets import DAY_S, BudgetPolicy
from udfs.politeness import PolitenessPolicy
from udfs.urls import url_fp

BUDGETS = BudgetPolicy(host_pages_per_day=3.0, host_urls_per_round=4.0, round_s=100.0)
POLITENESS = PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0)


def _item(n: int, depth: int = 0) -> fl.QueueItem:
    url = f"http://{HOST}/p{n}"
    return fl.QueueItem(url, url_fp(url), depth)


def _admit_many(state: fl.HostState, count: int, source: str = "link", now: float = T0,
                depth: int = 0) -> tuple[fl.HostState, list[fl.Verdict]]:
    verdicts = []
    for n in range(count):
        state, admission = fl.admit(state, _item(n + int(now), depth), None, None, now, source=source, budgets=BUDGETS)
        verdicts.append(admission.verdict)
    return state, verdicts


def test_a_host_admits_its_urls_per_round_then_drops_until_the_round_refills():
    state, verdicts = _admit_many(fl.HostState(), 6)
    assert verdicts == [fl.Verdict.ADMITTED] * 4 + [fl.Verdict.ROUND_BUDGET] * 2   # importance 1 at depth 0
    state, verdicts = _admit_many(state, 2, now=T0 + 50.0)                        # half a round: 2 tokens back
    assert verdicts == [fl.Verdict.ADMITTED] * 2


def test_seeds_are_never_dropped_and_make_the_host_more_important():
    state, verdicts = _admit_many(fl.HostState(), 6, source="seed")
    assert set(verdicts) == {fl.Verdict.ADMITTED} and state.seeded and state.min_depth == 0
    assert fl.host_importance(state, BUDGETS) == 2.0                    # seed_bonus: one doubling
    _, verdicts = _admit_many(state, 10, now=T0 + 1.0)
    assert verdicts.count(fl.Verdict.ADMITTED) == 8                      # 4 URLs/round × 2


def test_deep_hosts_matter_less():
    state, _ = _admit_many(fl.HostState(), 1, depth=4)
    assert state.min_depth == 4 and fl.host_importance(state, BUDGETS) == pytest.approx(2 ** -1.0)


def test_pages_wait_for_the_day_budget_and_robots_txt_is_never_budgeted():
    state, _ = _admit_many(fl.HostState(), 4)
    assert fl.plan(state, T0, budgets=BUDGETS).step is fl.Step.FETCH_ROBOTS
    state = fl.replace(state, robots=fl.Robots.ALLOW_ALL, robots_expires_at=T0 + 10 * DAY_S)
    now = T0
    for _ in range(3):   # 3 pages a day at importance 1
        assert fl.plan(state, now, budgets=BUDGETS).step is fl.Step.POP
        state = fl.spend_page(state, now, BUDGETS)
        now += 1.0
    plan = fl.plan(state, now, budgets=BUDGETS)
    assert plan.step is fl.Step.WAIT and plan.at == pytest.approx(T0 + DAY_S / 3, abs=5.0)
    assert fl.wake_ms(state, now, budgets=BUDGETS) == fl.timer_ms(plan.at)
    assert fl.plan(state, plan.at + 0.01, budgets=BUDGETS).step is fl.Step.POP
    assert fl.plan(state, now).step is fl.Step.POP                       # no policy: no budget


def test_host_rows_keep_the_budget_and_rows_before_it_read_full():
    state, _ = _admit_many(fl.HostState(), 2, source="seed", depth=0)
    state = fl.spend_page(state, T0, BUDGETS)
    row = state.to_row()
    assert json.loads(row)["v"] == fl.STATE_VERSION == 6
    assert fl.HostState.from_row(row) == state
    old = json.loads(row)
    for key in ("budget", "seeded", "min_depth"):
        del old[key]
    old["v"] = 5
    read = fl.HostState.from_row(json.dumps(old))
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
    state = fl.HostState()
    for n in range(100):
        state = fl.note_inlink(state, HOST, f"site{n}.example")
    assert len(state.inlinks) == fl.MAX_INLINK_HOSTS
    assert fl.host_importance(state, BUDGETS) == pytest.approx(2 ** (0.5 * 6.022), rel=1e-3)   # log2(65) = 6.02
    same = fl.note_inlink(fl.HostState(), HOST, HOST)
    again = fl.note_inlink(fl.note_inlink(fl.HostState(), HOST, "a.example"), HOST, "a.example")
    assert same.inlinks == () and len(again.inlinks) == 1
    assert fl.note_inlink(fl.HostState(), HOST, None).inlinks == ()
    assert fl.HostState.from_row(state.to_row()) == state


def test_the_frontier_counts_the_host_a_discovery_came_from():
    h = Harness(politeness=POLITENESS, budgets=BUDGETS)
    urls = [{"url": f"http://{HOST}/x", "fp": url_fp(f"http://{HOST}/x"), "depth": 1, "priority": 5, "source": "link"}]
    for n in range(3):
        h.event({"v": 1, "type": "discovered", "host": HOST, "urls": urls, "from_host": f"s{n}.example"})
    assert len(h.state.inlinks) == 3


def test_writers_say_which_host_the_links_were_found_on():
    from operators.warc_writer import discovered_batches
    from tests.unit.test_canonical import _bundle
    batches = discovered_batches(_bundle(None))
    assert batches and {b["from_host"] for b in batches} == {"shop.example.com"}
