"""udfs.budgets: importance from cheap signals, the two token buckets, the domain share, rows, the policy."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.budgets import (
    DAY_S,
    DEFAULT_BUDGET_POLICY,
    BudgetPolicy,
    BudgetRow,
    ImportanceSignals,
    Scope,
    admit_all,
    admit_budget,
    admit_round,
    capacities,
    importance,
    next_page_at,
    refill,
    share_for,
    should_announce,
)
from udfs.config import SECTIONS, ConfigError, load_config

T0 = 1_700_000_000.0
P = DEFAULT_BUDGET_POLICY
SMALL = BudgetPolicy(host_pages_per_day=10.0, host_urls_per_round=4.0, domain_pages_per_day=20.0,
                     domain_urls_per_round=8.0, round_s=60.0)


def _spend_until_denied(row: BudgetRow, now: float, weight: float, policy: BudgetPolicy, admit=admit_budget,
                        limit: int = 100_000) -> tuple[int, BudgetRow]:
    n = 0
    while n < limit:
        ok, row = admit(row, now, weight, policy)
        if not ok:
            return n, row
        n += 1
    raise AssertionError("budget never ran out")


# --- policy ---------------------------------------------------------------------------------------

def test_defaults_are_the_documented_ones() -> None:
    assert (P.host_pages_per_day, P.host_urls_per_round, P.domain_pages_per_day, P.domain_urls_per_round) == \
        (2_000.0, 500.0, 10_000.0, 2_000.0)
    assert (P.round_s, P.importance_min, P.importance_max) == (3_600.0, 0.1, 16.0)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("host_pages_per_day", 0, "host_pages_per_day must be a finite number > 0"),
    ("domain_urls_per_round", math.inf, "domain_urls_per_round"),
    ("round_s", -1.0, "round_s"),
    ("importance_min", True, "importance_min"),
    ("importance_max", 0.05, "importance_max .* must be >= budgets.importance_min"),
    ("inlink_weight", -0.1, "inlink_weight must be a finite number >= 0"),
    ("quality_weight", math.nan, "quality_weight"),
    ("depth_cap", 1.5, "depth_cap must be an integer"),
    ("deep_after", -1, "deep_after"),
    ("quality_floor", 2.0, "quality_floor must be within"),
])
def test_policy_rejects_invalid_values_naming_them(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BudgetPolicy(**{field: value})


def test_policy_loads_as_a_config_section(monkeypatch: pytest.MonkeyPatch) -> None:
    # The lead registers the section in udfs/config.py; this proves the dataclass fits the loader.
    monkeypatch.setitem(SECTIONS, "budgets", "udfs.budgets:BudgetPolicy")
    assert load_config("[budgets]\nround_s = 60\ndepth_cap = 4\n").budgets == BudgetPolicy(round_s=60.0, depth_cap=4)
    with pytest.raises(ConfigError, match="budgets.round_s must be a finite number > 0"):
        load_config("", ["budgets.round_s=0"])


# --- importance -----------------------------------------------------------------------------------

def test_a_host_with_no_signal_has_importance_one() -> None:
    assert importance(ImportanceSignals()) == 1.0


@pytest.mark.parametrize(("signals", "expected"), [
    (ImportanceSignals(is_seed=True), 2.0),
    (ImportanceSignals(has_sitemap=True), 2 ** 0.5),
    (ImportanceSignals(inlink_hosts=3), 2.0),                 # 0.5 · log2(4)
    (ImportanceSignals(inlink_hosts=15), 4.0),                # 0.5 · log2(16)
    (ImportanceSignals(min_depth=4), 0.5),                    # 0.25 per hop
    (ImportanceSignals(min_depth=100), 2 ** -2.0),            # counted up to depth_cap = 8
    (ImportanceSignals(deep_share=0.5), 2 ** -0.5),
    (ImportanceSignals(unique_ratio=0.5), 0.5),               # half duplicates: half the budget
    (ImportanceSignals(unique_ratio=0.0), 0.1),               # floor 0.05, then importance_min
    (ImportanceSignals(inlink_hosts=10**9, is_seed=True), 16.0),
])
def test_importance_follows_each_signal(signals: ImportanceSignals, expected: float) -> None:
    assert importance(signals) == pytest.approx(expected)


def test_importance_grows_with_in_links_and_falls_with_depth_and_duplicates() -> None:
    values = [importance(ImportanceSignals(inlink_hosts=n)) for n in (0, 1, 10, 100, 1000)]
    assert values == sorted(values) and values[0] < values[-1]
    depths = [importance(ImportanceSignals(inlink_hosts=50, min_depth=d)) for d in range(10)]
    assert depths == sorted(depths, reverse=True)
    ratios = [importance(ImportanceSignals(is_seed=True, unique_ratio=r)) for r in (1.0, 0.8, 0.5, 0.2)]
    assert ratios == sorted(ratios, reverse=True)


@settings(max_examples=250, deadline=None)
@given(inlinks=st.one_of(st.integers(-10**6, 10**15), st.floats(allow_nan=True, allow_infinity=True), st.none()),
       seed=st.one_of(st.booleans(), st.none(), st.integers()), depth=st.one_of(st.integers(), st.floats()),
       deep=st.floats(allow_nan=True, allow_infinity=True), ratio=st.floats(allow_nan=True, allow_infinity=True))
def test_importance_stays_within_bounds_on_any_signal(inlinks, seed, depth, deep, ratio) -> None:
    value = importance(ImportanceSignals(inlinks, seed, seed, depth, deep, ratio))  # type: ignore[arg-type]
    assert P.importance_min <= value <= P.importance_max


# --- the day budget (pages per day) ---------------------------------------------------------------

def test_a_fresh_host_row_starts_full_and_runs_out_at_its_day_capacity() -> None:
    spent, row = _spend_until_denied(BudgetRow(), T0, 1.0, SMALL)
    assert spent == 10 and row.page_tokens == pytest.approx(0.0)
    spent, _ = _spend_until_denied(BudgetRow(), T0, 2.0, SMALL)
    assert spent == 20  # importance 2: twice the pages


def test_the_day_budget_refills_continuously_at_its_daily_rate() -> None:
    _, row = _spend_until_denied(BudgetRow(), T0, 1.0, SMALL)
    assert not admit_budget(row, T0 + DAY_S / 10 - 1, 1.0, SMALL)[0]  # 0.99 of a page refilled
    ok, row = admit_budget(row, T0 + DAY_S / 10, 1.0, SMALL)
    assert ok
    # A whole day refills the whole day capacity, never more, however long the host was idle.
    spent, _ = _spend_until_denied(row, T0 + 30 * DAY_S, 1.0, SMALL)
    assert spent == 10


def test_a_host_never_gets_more_than_its_budget_plus_one_day_of_refill_in_any_day() -> None:
    row, fetched, now = BudgetRow(), 0, T0
    while now < T0 + DAY_S:  # a trap host that asks for a page every minute for a day
        ok, row = admit_budget(row, now, 1.0, SMALL)
        fetched += ok
        now += 60.0
    assert fetched <= 2 * SMALL.host_pages_per_day


def test_next_page_at_is_when_the_next_token_arrives() -> None:
    _, row = _spend_until_denied(BudgetRow(), T0, 1.0, SMALL)
    at = next_page_at(row, T0, 1.0, SMALL)
    assert at == pytest.approx(T0 + DAY_S / 10)
    assert admit_budget(row, at, 1.0, SMALL)[0]
    assert next_page_at(BudgetRow(), T0, 1.0, SMALL) == T0


def test_a_clock_that_goes_backwards_refills_nothing() -> None:
    _, row = _spend_until_denied(BudgetRow(), T0, 1.0, SMALL)
    ok, back = admit_budget(row, T0 - DAY_S, 1.0, SMALL)
    assert not ok and back.at == T0 and back.page_tokens == row.page_tokens


def test_a_lowered_importance_cuts_the_tokens_to_the_new_capacity() -> None:
    row = refill(BudgetRow(), T0, 4.0, SMALL)
    assert row.page_tokens == 40.0
    assert refill(row, T0 + 1, 1.0, SMALL).page_tokens == 10.0


def test_a_refill_at_the_rows_own_time_returns_the_row_unless_a_capacity_cut_applies() -> None:
    _, row = _spend_until_denied(BudgetRow(), T0, 1.0, SMALL)
    assert refill(row, T0, 1.0, SMALL) is row   # the URLs of one batch share `now`: nothing to copy
    full = refill(BudgetRow(), T0, 4.0, SMALL)
    assert refill(full, T0, 1.0, SMALL).page_tokens == 10.0   # a lowered capacity still cuts at once


def test_refill_rejects_a_time_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="now must be a finite time"):
        refill(BudgetRow(), math.nan, 1.0, SMALL)


# --- the round budget (URLs admitted per round) ---------------------------------------------------

def test_the_round_budget_caps_admissions_per_round_and_refills_per_round() -> None:
    spent, row = _spend_until_denied(BudgetRow(), T0, 1.0, SMALL, admit_round)
    assert spent == 4
    assert row.page_tokens == 10.0  # admissions do not spend pages
    spent, _ = _spend_until_denied(row, T0 + SMALL.round_s, 1.0, SMALL, admit_round)
    assert spent == 4


def test_one_page_full_of_links_cannot_spend_a_day_of_admissions_at_once() -> None:
    spent, _ = _spend_until_denied(BudgetRow(), T0, 1.0, P, admit_round)
    assert spent == P.host_urls_per_round < P.host_pages_per_day


# --- the registrable domain's budget, shared between its hosts ------------------------------------

@pytest.mark.parametrize(("hosts", "share"), [(1, 1.0), (4, 0.25), (0, 1.0), (-3, 1.0), (True, 1.0), (2.5, 1.0)])
def test_share_for_splits_the_domain_equally_and_reads_nonsense_as_one_host(hosts, share) -> None:
    assert share_for(hosts) == share


def test_the_census_announces_at_each_doubling_only() -> None:
    assert [n for n in range(1, 70) if should_announce(n)] == [1, 2, 4, 8, 16, 32, 64]
    assert not any(should_announce(n) for n in (0, -4, True, 2.0))  # type: ignore[arg-type]


def test_the_hosts_of_a_domain_together_never_exceed_the_domain_budget() -> None:
    hosts = 7
    rows = [BudgetRow(Scope.DOMAIN).with_share(hosts) for _ in range(hosts)]
    total = 0
    for i, row in enumerate(rows):
        spent, rows[i] = _spend_until_denied(row, T0, 1.0, SMALL)
        total += spent
    assert total <= SMALL.domain_pages_per_day
    # and over a day of refill, at most one more day's capacity
    for i, row in enumerate(rows):
        spent, _ = _spend_until_denied(row, T0 + DAY_S, 1.0, SMALL)
        total += spent
    assert total <= 2 * SMALL.domain_pages_per_day


def test_a_domain_share_below_one_page_still_gets_a_page_every_so_often() -> None:
    row = BudgetRow(Scope.DOMAIN).with_share(100)  # 20 pages / 100 hosts = 0.2 pages a day each
    assert capacities(row, 1.0, SMALL) == (pytest.approx(0.2), pytest.approx(0.08))
    assert not admit_budget(row, T0, 1.0, SMALL)[0]
    ok, _ = admit_budget(refill(row, T0, 1.0, SMALL), T0 + 4 * DAY_S, 1.0, SMALL)
    assert ok  # 0.2 + 4 × 0.2 = 1 page after four days
    assert next_page_at(row, T0, 1.0, SMALL) == pytest.approx(T0 + 4 * DAY_S)


def test_a_wildcard_subdomain_site_is_held_to_its_domain_budget() -> None:
    # 1,000 subdomains, each told the host count at the time it appeared (decision 1800).
    fetched = 0
    for n in range(1, 1001):
        row = BudgetRow(Scope.DOMAIN).with_share(n)
        fetched += _spend_until_denied(row, T0, 1.0, SMALL)[0]
    # Host n starts with 20/n pages: a harmonic sum, not 1,000 × 20, even with no later announcement
    # (announcing to all hosts at each doubling bounds it by twice the budget).
    assert fetched <= SMALL.domain_pages_per_day * (1 + math.log(1000))


def test_admit_all_spends_both_budgets_or_neither() -> None:
    host = BudgetRow()
    domain = BudgetRow(Scope.DOMAIN).with_share(4)  # 5 pages a day at importance 1
    verdicts = [admit_all(host, domain, T0, 1.0, "page", SMALL)]
    while verdicts[-1].allowed:
        host, domain = verdicts[-1].host, verdicts[-1].domain
        verdicts.append(admit_all(host, domain, T0, 1.0, "page", SMALL))
    last = verdicts[-1]
    assert len(verdicts) == 6 and last.denied == "budget_domain_pages"
    assert last.host.page_tokens == pytest.approx(5.0)  # the refused page cost the host budget nothing
    urls = admit_all(BudgetRow(), BudgetRow(Scope.DOMAIN), T0, 1.0, "url", SMALL)
    assert urls.allowed and urls.host.url_tokens == 3.0 and urls.domain.url_tokens == 7.0
    assert urls.host.page_tokens == 10.0


def test_admit_all_names_the_host_budget_when_both_are_spent() -> None:
    empty = BudgetRow(page_tokens=0.0, url_tokens=0.0, at=T0)
    verdict = admit_all(empty, BudgetRow(Scope.DOMAIN, 1.0, 0.0, 0.0, T0), T0, 1.0, "url", SMALL)
    assert not verdict.allowed and verdict.denied == "budget_host_urls"
    with pytest.raises(ValueError, match="spend must be"):
        admit_all(empty, empty, T0, 1.0, "bytes", SMALL)


# --- rows -----------------------------------------------------------------------------------------

def test_rows_round_trip_through_plain_json_with_a_version() -> None:
    _, row = admit_budget(BudgetRow(Scope.DOMAIN).with_share(3), T0, 2.0, SMALL)
    text = row.to_row()
    assert json.loads(text)["v"] == 1 and json.loads(text)["scope"] == "domain"
    assert BudgetRow.from_row(text) == row
    assert BudgetRow.from_row(None) == BudgetRow() and BudgetRow.from_row(None, Scope.DOMAIN).scope is Scope.DOMAIN


@pytest.mark.parametrize(("text", "message"), [
    ('{"v":2,"scope":"host","share":1,"pages":1,"urls":1,"at":0}', "schema version 2"),
    ('{"v":1,"scope":"site","share":1,"pages":1,"urls":1,"at":0}', "scope 'site' is not one of host, domain"),
    ('{"v":1,"scope":"host","share":0,"pages":1,"urls":1,"at":0}', "share must be within"),
    ('{"v":1,"scope":"host","share":1,"pages":-1,"urls":1,"at":0}', "page_tokens"),
    ('{"v":1,"scope":"host"}', "malformed budget row"),
    ("[1]", "schema version None"),
    ("not json", "malformed budget row"),
])
def test_a_foreign_or_malformed_row_is_an_error_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BudgetRow.from_row(text)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0, 2 * DAY_S), st.sampled_from(["page", "url"]),
                                st.floats(0.01, 100.0)), max_size=60),
       hosts=st.integers(1, 50))
def test_tokens_stay_within_zero_and_capacity_on_any_schedule(steps, hosts) -> None:
    host, domain, now = BudgetRow(), BudgetRow(Scope.DOMAIN).with_share(hosts), T0
    for gap, spend, weight in steps:
        now += gap
        verdict = admit_all(host, domain, now, weight, spend, SMALL)
        host, domain = verdict.host, verdict.domain
        for row in (host, domain):
            pages_cap, urls_cap = capacities(row, weight, SMALL)
            assert 0.0 <= row.page_tokens <= max(pages_cap, 1.0) + 1e-9
            assert 0.0 <= row.url_tokens <= max(urls_cap, 1.0) + 1e-9
            assert BudgetRow.from_row(row.to_row()) == row
