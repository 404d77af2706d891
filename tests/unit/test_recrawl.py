"""udfs.recrawl (issue #6): the change-rate estimator converges on simulated Poisson histories, due
times stay in bounds, stable pages back off monotonically, the weighted tier choice starves no
non-empty tier, history rows round-trip, and bad policy values are refused by name."""
from __future__ import annotations

import json
import math
import random

import pytest

from udfs import recrawl as rc
from udfs.recrawl import Change, FetchOutcome, HostSignals, Lane, PageValue, RecrawlPolicy, UrlHistory

DAY = 86_400.0
HOUR = 3_600.0
P = rc.DEFAULT_RECRAWL_POLICY
T0 = 1_700_000_000.0


def poisson_visits(rate_per_day: float, intervals_days: list[float], rng: random.Random) -> list[tuple[float, bool]]:
    """(interval seconds, changed) for visits to a page whose changes are a Poisson process."""
    return [(t * DAY, rng.random() < 1.0 - math.exp(-rate_per_day * t)) for t in intervals_days]


def fetched(history: UrlHistory, at: float, version: int, status: int = 200) -> UrlHistory:
    tag = f"v{version}"
    outcome = FetchOutcome(status, None if status == 304 else f"sha256:{tag}", etag=f'"{tag}"')
    return rc.observe(history, at, outcome)


def first_fetch(at: float = T0) -> UrlHistory:
    return fetched(UrlHistory(), at, 0)


# --- estimator ------------------------------------------------------------------------------------------

# Tolerance: 10% relative with 3,000 visits (the estimators' standard error there is 2-5%).
@pytest.mark.parametrize("rate_per_day", [0.05, 0.3, 1.0, 2.5])
def test_improved_estimator_converges_on_regular_visits(rate_per_day: float) -> None:
    visits = poisson_visits(rate_per_day, [1.0] * 3000, random.Random(11))
    assert rc.estimate_rate(visits) * DAY == pytest.approx(rate_per_day, rel=0.10)


@pytest.mark.parametrize("rate_per_day", [0.1, 0.5, 2.0, 5.0])
def test_mle_converges_on_irregular_visits(rate_per_day: float) -> None:
    rng = random.Random(13)
    visits = poisson_visits(rate_per_day, [rng.uniform(0.25, 2.5) for _ in range(3000)], rng)
    assert rc.estimate_rate(visits) * DAY == pytest.approx(rate_per_day, rel=0.10)


def test_naive_ratio_undercounts_where_the_estimators_do_not() -> None:
    visits = poisson_visits(2.0, [1.0] * 3000, random.Random(5))
    naive = sum(c for _, c in visits) / (len(visits) * DAY)
    assert naive * DAY < 1.0                                  # changes missed between visits
    assert rc.estimate_rate(visits) * DAY == pytest.approx(2.0, rel=0.10)


def test_improved_estimator_matches_its_formula_and_stays_finite() -> None:
    assert rc.improved_estimate(10, 4, DAY) == pytest.approx(-math.log(6.5 / 10.5) / DAY)
    assert rc.improved_estimate(10, 10, DAY) == pytest.approx(math.log(21) / DAY)
    assert rc.improved_estimate(10, 0, DAY) == 0.0
    assert rc.improved_estimate(0, 0, DAY) == 0.0


def test_mle_edge_cases() -> None:
    assert rc.mle_rate([]) == 0.0
    assert rc.mle_rate([(1, 0, DAY), (1, 0, 2 * DAY)]) == 0.0
    all_changed = rc.mle_rate([(1, 1, DAY), (1, 1, 3 * DAY)])
    assert all_changed == pytest.approx(rc.improved_estimate(2, 2, 2 * DAY))
    # groups with hostile numbers are skipped, not raised on
    assert rc.mle_rate([(1, 1, float("nan")), (-1, 0, DAY), (1, 1, DAY), (1, 0, 2 * DAY)]) > 0


def test_mle_solves_its_likelihood_equation() -> None:
    groups = [(1, 1, 2 * DAY), (1, 0, 3 * DAY), (1, 1, 2.5 * DAY), (3, 1, DAY)]
    rate = rc.mle_rate(groups)
    score = sum(x * t / math.expm1(rate * t) for _, x, t in groups) - sum((n - x) * t for n, x, t in groups)
    assert abs(score) < 1e-6 * DAY


@pytest.mark.parametrize("rate_per_day", [0.05, 0.5, 2.0])
def test_change_rate_of_bounded_histories_centres_on_the_true_rate(rate_per_day: float) -> None:
    """200 pages, 60 refetches each at irregular intervals, through observe(): the median estimate of
    the bounded history (8 kept + decayed aggregate) is within 30% of the truth."""
    rng = random.Random(17)
    estimates = []
    for _ in range(200):
        history, at, version = first_fetch(), T0, 0
        for _ in range(60):
            step = rng.uniform(0.5, 1.5) / max(rate_per_day, 0.2)
            at += step * DAY
            if rng.random() < 1.0 - math.exp(-rate_per_day * step):
                version += 1
            history = fetched(history, at, version, 200)
        estimates.append(rc.change_rate(history))
    estimates.sort()
    assert estimates[100] * DAY == pytest.approx(rate_per_day, rel=0.30)


def test_prior_for_new_urls() -> None:
    assert rc.change_rate(UrlHistory()) == pytest.approx(P.default_rate_per_day / DAY)
    assert rc.prior_rate(PageValue(changefreq="daily")) == pytest.approx(1 / DAY)
    assert rc.prior_rate(PageValue(changefreq="HOURLY")) == pytest.approx(24 / DAY)
    assert rc.prior_rate(PageValue(page_kind="article")) == pytest.approx(1 / 30 / DAY)
    host = HostSignals().with_rate(4 / DAY)
    assert rc.prior_rate(PageValue(), host) == pytest.approx(4 / DAY)
    both = rc.prior_rate(PageValue(changefreq="daily", page_kind="feed"))
    assert both == pytest.approx(2 / DAY)                          # geometric mean of 1 and 4 per day
    assert rc.prior_rate(PageValue(changefreq="sometimes", page_kind=7)) == pytest.approx(P.default_rate_per_day / DAY)


def test_prior_fades_as_observations_accumulate() -> None:
    """A page listed as hourly that never changes: the estimate falls far below the prior."""
    value = PageValue(changefreq="hourly")
    history = first_fetch()
    for i in range(1, 30):
        history = fetched(history, T0 + i * DAY, 0, 304)
    assert rc.change_rate(history, value) < rc.prior_rate(value) / 100


# --- observe, classify, rows ----------------------------------------------------------------------

def test_observe_classifies_304_same_hash_near_and_changed() -> None:
    base = rc.observe(UrlHistory(), T0, FetchOutcome(200, "sha256:a", simhash=0b1111, etag='"a"',
                                                      last_modified="Mon, 01 Jan 2024 00:00:00 GMT"))
    assert base.observations == () and base.last_fetch_at == T0
    not_modified = rc.observe(base, T0 + DAY, FetchOutcome(304, etag='"a2"'))
    assert not_modified.observations == ((DAY, Change.NOT_MODIFIED),)
    assert not_modified.content_hash == "sha256:a" and not_modified.etag == '"a2"'
    assert not_modified.last_modified == base.last_modified
    same = rc.observe(base, T0 + DAY, FetchOutcome(200, "sha256:a", simhash=0b1111))
    assert same.observations[-1][1] is Change.SAME_HASH
    near = rc.observe(base, T0 + DAY, FetchOutcome(200, "sha256:b", simhash=0b0001))
    assert near.observations[-1][1] is Change.NEAR_SAME and near.content_hash == "sha256:b"
    changed = rc.observe(base, T0 + DAY, FetchOutcome(200, "sha256:c", simhash=0xFFFF_0000))
    assert changed.observations[-1][1] is Change.CHANGED and changed.unchanged_streak == 0
    assert same.unchanged_streak == 1


@pytest.mark.parametrize("at, status", [(T0, 200), (T0 - 5, 200), (float("nan"), 200), (T0 + DAY, 503),
                                        (T0 + DAY, 404)])
def test_observe_ignores_out_of_order_and_non_answers(at: float, status: int) -> None:
    base = first_fetch()
    assert rc.observe(base, at, FetchOutcome(status, "sha256:z")) == base


def test_history_stays_bounded_and_folds_into_the_aggregate() -> None:
    policy = RecrawlPolicy(history_len=4, memory=8.0)
    history = rc.observe(UrlHistory(), T0, FetchOutcome(200, "h0"), policy)
    for i in range(1, 200):
        history = rc.observe(history, T0 + i * DAY, FetchOutcome(200, f"h{i % 2}"), policy)
    assert len(history.observations) == 4
    n, x, t = history.aggregate
    assert n <= 8.0 + 1e-9 and x == pytest.approx(n) and t == pytest.approx(n * DAY)


def test_history_row_round_trips_through_json() -> None:
    history = first_fetch()
    for i, status in enumerate([304, 200, 200, 304], start=1):
        history = fetched(history, T0 + i * DAY, i // 2, status)
    row = json.loads(json.dumps(history.to_row()))
    assert row[0] == rc.HISTORY_VERSION
    assert UrlHistory.from_row(row) == history
    assert UrlHistory.from_row(UrlHistory().to_row()) == UrlHistory()


def test_due_time_survives_a_restart_through_the_row() -> None:
    """A savepoint stores the row; the restored row gives every URL the same due time."""
    history = first_fetch()
    for i, version in enumerate([0, 1, 1, 2, 2, 2], start=1):
        history = fetched(history, T0 + i * 0.7 * DAY, version, 200 if version % 2 else 304)
    value = PageValue(inlinks=12, changefreq="daily", sitemap_lastmod=T0 + 5 * DAY)
    host = HostSignals().with_rate(1 / DAY).with_lastmod(True, True)
    restored = UrlHistory.from_row(json.loads(json.dumps(history.to_row())))
    restored_host = HostSignals.from_row(json.loads(json.dumps(host.to_row())))
    now = T0 + 5 * DAY
    assert rc.next_due(restored, value, now, P, restored_host) == rc.next_due(history, value, now, P, host)


def test_history_row_tolerates_short_and_malformed_rows() -> None:
    assert UrlHistory.from_row([rc.HISTORY_VERSION]) == UrlHistory()
    assert UrlHistory.from_row([rc.HISTORY_VERSION, T0, '"e"']) == UrlHistory(last_fetch_at=T0, etag='"e"')
    junk = [rc.HISTORY_VERSION, "x", 5, None, 7, True, -3, [[DAY, 3], ["a", 1], [DAY, 9], [-1, 0], 5], [1, 2, 3]]
    history = UrlHistory.from_row(junk)
    assert history.last_fetch_at is None and history.etag is None and history.content_hash is None
    assert history.simhash is None and history.unchanged_streak == 0
    assert history.observations == ((DAY, Change.CHANGED),) and history.aggregate == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("row", [None, [], "[1]", [99, T0], [True, T0]])
def test_history_row_of_unknown_shape_or_version_raises(row: object) -> None:
    with pytest.raises(ValueError, match="recrawl history"):
        UrlHistory.from_row(row)


def test_host_signals_row_round_trips() -> None:
    host = HostSignals().with_rate(1 / DAY).with_rate(4 / DAY).with_lastmod(True, True).with_lastmod(True, False)
    assert HostSignals.from_row(json.loads(json.dumps(host.to_row()))) == host
    assert HostSignals.from_row([rc.HISTORY_VERSION]) == HostSignals()
    with pytest.raises(ValueError):
        HostSignals.from_row([2])


def test_conditional_headers_from_validators() -> None:
    history = UrlHistory(etag='"abc"', last_modified="Mon, 01 Jan 2024 00:00:00 GMT")
    assert rc.conditional_headers(history) == {"If-None-Match": '"abc"',
                                               "If-Modified-Since": "Mon, 01 Jan 2024 00:00:00 GMT"}
    assert rc.conditional_headers(UrlHistory()) == {}
    assert rc.conditional_headers(UrlHistory(etag='"a"\r\nX-Evil: 1')) == {}


# --- due times ------------------------------------------------------------------------------------------

def test_never_fetched_is_due_now() -> None:
    assert rc.next_due(UrlHistory(), now=T0) == T0


@pytest.mark.parametrize("rate_per_day", [1e-6, 1e-3, 0.1, 1.0, 24.0, 1e4])
@pytest.mark.parametrize("weight", [0.25, 1.0, 4.0])
def test_interval_is_within_bounds(rate_per_day: float, weight: float) -> None:
    interval = rc.interval_for(rate_per_day / DAY, weight)
    assert P.min_interval_s <= interval <= P.max_interval_s


def test_pages_faster_than_the_budget_get_no_more_than_the_uniform_share() -> None:
    for rate_per_day in (10.0, 100.0, 1e4):
        assert rc.interval_for(rate_per_day / DAY) >= P.budget_interval_s
    # the uniform share scales with value: a page worth 4 may get 4 times as many visits
    assert rc.interval_for(100 / DAY, 4.0) >= P.budget_interval_s / 4


def test_optimal_interval_shortens_with_rate_up_to_the_knee_and_with_value() -> None:
    rates = [r / DAY for r in (0.001, 0.01, 0.05, 0.1, 0.2)]
    intervals = [rc.interval_for(r) for r in rates]
    assert intervals == sorted(intervals, reverse=True)
    assert rc.interval_for(0.05 / DAY, 4.0) < rc.interval_for(0.05 / DAY, 1.0) < rc.interval_for(0.05 / DAY, 0.25)


def test_stable_pages_back_off_monotonically_to_the_maximum() -> None:
    history, at, intervals = first_fetch(), T0, []
    for _ in range(40):
        interval = rc.next_due(history, now=at) - at
        intervals.append(interval)
        at += interval
        history = fetched(history, at, 0, 304)
    assert all(b >= a - 1e-6 for a, b in zip(intervals, intervals[1:]))
    assert intervals[-1] == P.max_interval_s


def test_a_change_ends_the_back_off() -> None:
    history, at = first_fetch(), T0
    for _ in range(12):
        at = rc.next_due(history, now=at)
        history = fetched(history, at, 0, 304)
    stable = rc.next_due(history, now=at) - at
    for version in (1, 2, 3):
        at += HOUR * 6
        history = fetched(history, at, version)
    assert rc.next_due(history, now=at) - at < stable


def test_lastmod_brings_the_due_time_forward_by_host_accuracy() -> None:
    history = first_fetch()
    now = T0 + 2 * DAY
    plain = rc.next_due(history, now=now)
    claim = PageValue(sitemap_lastmod=T0 + DAY)
    trusted, doubted = HostSignals(), HostSignals()
    for _ in range(50):
        trusted = trusted.with_lastmod(True, True)
        doubted = doubted.with_lastmod(True, False)
    trusted_due = rc.next_due(history, claim, now, host=trusted)
    doubted_due = rc.next_due(history, claim, now, host=doubted)
    assert now <= trusted_due < doubted_due <= plain
    assert trusted_due - now < 0.05 * (plain - now)
    assert rc.next_due(history, PageValue(sitemap_lastmod=T0 - DAY), now, host=trusted) == plain
    # never sooner than min_interval_s after the last fetch
    assert rc.next_due(history, claim, T0 + 60, host=trusted) >= T0 + P.min_interval_s
    assert rc.next_due(history, claim, T0 + 60, RecrawlPolicy(min_interval_s=DAY), trusted) == T0 + DAY


def test_lastmod_accuracy_tracker() -> None:
    assert HostSignals().lastmod_accuracy == 0.5
    host = HostSignals()
    for claimed, changed in [(True, True)] * 8 + [(True, False)] * 2:
        host = host.with_lastmod(claimed, changed)
    assert 0.7 < host.lastmod_accuracy < 0.8
    for _ in range(1000):
        host = host.with_lastmod(False, True)
    assert host.lastmod_hits + host.lastmod_misses <= 100.0 + 1e-9   # bounded by decay


def test_value_weight_is_bounded_and_monotone() -> None:
    low = rc.value_weight(PageValue(depth=50))
    assert low == P.value_min
    assert rc.value_weight(PageValue(inlinks=10**9, hub_yield=1e9, sitemap_priority=1.0)) == P.value_max
    weights = [rc.value_weight(PageValue(inlinks=n)) for n in (0, 1, 10, 100)]
    assert weights == sorted(weights)
    assert rc.value_weight(PageValue(inlinks=float("nan"), depth=-3, sitemap_priority=float("inf"))) == 1.0


def test_refresh_cost_steers_demand_onto_capacity() -> None:
    base = rc.refresh_cost()
    assert base == pytest.approx((1 - 2 / math.e) * P.budget_interval_s)
    assert rc.refresh_cost(demand=3.0, capacity=2.0, cost=base) == pytest.approx(1.5 * base)
    assert rc.refresh_cost(demand=100.0, capacity=1.0, cost=base) == pytest.approx(2 * base)
    assert rc.refresh_cost(demand=0.0, capacity=1.0, cost=base) == base
    # a higher cost lengthens intervals: demand falls
    assert rc.interval_for(0.05 / DAY, cost=2 * base) > rc.interval_for(0.05 / DAY, cost=base)


# --- tiers and the split ---------------------------------------------------------------------------------

def test_tier_of_maps_value_and_urgency_into_range() -> None:
    assert rc.tier_of(1.0, 1.0) == P.tiers // 2
    assert rc.tier_of(4.0, 8.0) == 0 and rc.tier_of(0.25, 0.01) == P.tiers - 1
    tiers = [rc.tier_of(1.0, u) for u in (0.1, 0.5, 1, 2, 4, 100)]
    assert tiers == sorted(tiers, reverse=True)
    for bad in (float("nan"), -1.0, 0.0, float("inf")):
        assert rc.tier_of(bad, 1.0) == P.tiers // 2


def test_choose_tier_never_starves_a_nonempty_tier() -> None:
    weights = rc.tier_weights()
    rng = random.Random(3)
    nonempty = [True] * P.tiers
    seen_at: dict[int, int] = {}
    for draw in range(2000):
        seen_at.setdefault(rc.choose_tier(weights, nonempty, rng.random()), draw)
    assert set(seen_at) == set(range(P.tiers))


def test_choose_tier_frequencies_follow_the_weights() -> None:
    weights = (8.0, 4.0, 0.0, 2.0, 1.0)
    nonempty = (True, True, False, True, True)
    rng = random.Random(9)
    draws = 20_000
    counts = [0] * len(weights)
    for _ in range(draws):
        counts[rc.choose_tier(weights, nonempty, rng.random())] += 1
    assert counts[2] == 0
    for tier in (0, 1, 3, 4):
        assert counts[tier] / draws == pytest.approx(weights[tier] / 15.0, abs=0.015)


def test_choose_tier_floor_serves_zero_weight_tiers_and_none_when_empty() -> None:
    rng = random.Random(1)
    picks = {rc.choose_tier([1.0, 0.0, float("nan")], [True, True, True], rng.random()) for _ in range(2000)}
    assert picks == {0, 1, 2}
    assert rc.choose_tier([1.0, 1.0], [False, False], 0.5) is None
    assert rc.choose_tier([0.0, 0.0], [True, False], 0.99) == 0


def test_split_follows_the_share_and_never_idles() -> None:
    rng = random.Random(4)
    lanes = [rc.split(0.6, rng.random()) for _ in range(10_000)]
    assert lanes.count(Lane.RECRAWL) / len(lanes) == pytest.approx(0.6, abs=0.02)
    assert rc.split(0.6, 0.99, discovery_ready=False) is Lane.RECRAWL
    assert rc.split(0.6, 0.0, recrawl_ready=False) is Lane.DISCOVERY
    assert rc.split(0.6, 0.5, recrawl_ready=False, discovery_ready=False) is None
    assert rc.split(float("nan"), 0.1) is Lane.RECRAWL


# --- policy validation -----------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("min_interval_s", 0), ("min_interval_s", float("nan")), ("max_interval_s", -1.0),
    ("max_interval_s", 60.0), ("budget_interval_s", 1.0), ("budget_interval_s", 1e9),
    ("recrawl_share", 1.5), ("recrawl_share", -0.1), ("tiers", 0), ("tiers", 2.5), ("tiers", True),
    ("tier_ratio", 0.0), ("tier_floor", 0.9), ("history_len", 0), ("memory", float("inf")),
    ("prior_weight", -1.0), ("default_rate_per_day", 0.0), ("fast_share_cap", 0.0), ("stable_after", 0),
    ("stable_changes", -0.1), ("backoff_factor", 0.5), ("near_same_bits", -2), ("value_min", 0.0),
    ("value_max", 0.1), ("value_depth", -1.0), ("changefreq_per_day", (("daily", 0.0),)),
    ("page_kind_per_day", (("home",),)),
])
def test_bad_policy_values_raise_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"recrawl.{field}"):
        RecrawlPolicy(**{field: value})


def test_freshness_benchmark_gives_every_policy_the_same_budget() -> None:
    from bench.bench_freshness import markdown, run
    results = run(pages=200, days=35, seed=3)
    assert len({r.fetches for r in results}) == 1
    assert all(0.0 <= r.freshness <= 1.0 and r.unchanged <= r.fetches for r in results)
    assert markdown(pages=100, days=31).count("\n| ") == len(results) + 1


def test_default_policy_matches_the_issue() -> None:
    assert (P.min_interval_s, P.max_interval_s, P.recrawl_share, P.tiers) == (3_600.0, 60 * DAY, 0.6, 10)


# --- the freshness benchmark's baseline schedulers (decision 1809) ---------------------------------

def _baseline(scheduler: str) -> RecrawlPolicy:
    return RecrawlPolicy(min_interval_s=10.0, max_interval_s=1000.0, budget_interval_s=100.0, scheduler=scheduler)


def test_uniform_schedules_every_page_after_the_budget_interval_whatever_it_saw():
    policy = _baseline("uniform")
    changed = UrlHistory(last_fetch_at=50.0, observations=((400.0, Change.CHANGED),))
    stable = UrlHistory(last_fetch_at=50.0, unchanged_streak=5, observations=((400.0, Change.NOT_MODIFIED),))
    assert rc.next_due(changed, now=50.0, policy=policy) == rc.next_due(stable, now=50.0, policy=policy) == 150.0


def test_halve_halves_after_a_change_and_stretches_by_half_otherwise_within_bounds():
    policy = _baseline("halve")
    assert rc.next_due(UrlHistory(last_fetch_at=0.0), now=0.0, policy=policy) == 100.0   # first refetch: the budget
    assert rc.next_due(UrlHistory(last_fetch_at=0.0, observations=((60.0, Change.CHANGED),)), policy=policy) == 30.0
    assert rc.next_due(UrlHistory(last_fetch_at=0.0, observations=((60.0, Change.SAME_HASH),)), policy=policy) == 90.0
    assert rc.next_due(UrlHistory(last_fetch_at=0.0, observations=((12.0, Change.CHANGED),)), policy=policy) == 10.0
    assert rc.next_due(UrlHistory(last_fetch_at=0.0, observations=((900.0, Change.NOT_MODIFIED),)), policy=policy) == 1000.0


def test_an_unknown_scheduler_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="adaptive, uniform, halve"):
        RecrawlPolicy(scheduler="random")


# --- the refresh cost follows the host's share of the budget (decision 1810) -----------------------

def test_the_demand_replaces_a_pages_old_interval_and_counts_a_new_page_once():
    signals = HostSignals().scheduled(None, 100.0).scheduled(None, 50.0)
    assert (signals.pages, signals.demand) == (2, pytest.approx(0.03))
    signals = signals.scheduled(100.0, 25.0)
    assert (signals.pages, signals.demand) == (2, pytest.approx(0.06))
    assert HostSignals.from_row(signals.to_row()) == signals


def test_a_page_scheduled_before_the_demand_was_kept_counts_as_new_after_an_upgrade():
    upgraded = HostSignals.from_row([rc.HISTORY_VERSION, None, 0.0, 0.0, 0.0])   # a row from before decision 1810
    signals = upgraded.scheduled(10.0, 50.0).scheduled(10.0, 25.0)   # 1/10 is more than the sum: never counted
    assert (signals.pages, signals.demand) == (2, pytest.approx(0.06))
    assert signals.scheduled(50.0, 40.0).pages == 2          # a counted term is replaced


def test_mu_falls_when_the_schedule_asks_for_less_than_the_share_and_moves_once_per_budget_interval():
    policy = RecrawlPolicy(min_interval_s=1.0, max_interval_s=10_000.0, budget_interval_s=100.0)
    signals = HostSignals()
    for _ in range(10):
        signals = signals.scheduled(None, 1_000.0)     # 10 pages at 1,000 s: 0.01/s against a share of 0.1/s
    steered = signals.steered(now=1_000.0, gap_s=1.0, policy=policy)
    assert steered.cost == pytest.approx(rc.refresh_cost(policy) * 0.5) and steered.steered_at == 1_000.0
    assert steered.steered(now=1_050.0, gap_s=1.0, policy=policy) == steered   # not again within the interval
    shorter = rc.next_due(UrlHistory(last_fetch_at=0.0), policy=policy, cost=steered.cost)
    assert shorter < rc.next_due(UrlHistory(last_fetch_at=0.0), policy=policy)


def test_mu_rises_when_the_schedule_asks_for_more_than_the_politeness_gap_allows():
    policy = RecrawlPolicy(min_interval_s=1.0, max_interval_s=10_000.0, budget_interval_s=100.0)
    signals = HostSignals()
    for _ in range(10):
        signals = signals.scheduled(None, 10.0)        # 1/s, but one fetch per 5 s is all the host allows
    steered = signals.steered(now=1_000.0, gap_s=5.0, policy=policy)
    assert steered.cost == pytest.approx(rc.refresh_cost(policy) * 2.0)
