"""udfs.recrawl properties over generated inputs (issue #6): due times always within bounds, the
history stays bounded and round-trips through JSON, hostile inputs never raise, the tier choice
always lands on a non-empty tier."""
from __future__ import annotations

import json
import math

from hypothesis import example, given, settings
from hypothesis import strategies as st

from udfs import recrawl as rc
from udfs.recrawl import FetchOutcome, HostSignals, PageValue, UrlHistory

DAY = 86_400.0
T0 = 1_700_000_000.0
P = rc.DEFAULT_RECRAWL_POLICY
EXAMPLES = settings(max_examples=250, deadline=None)

anything = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.text(max_size=20),
                     st.floats(allow_nan=True, allow_infinity=True))
outcomes = st.builds(
    FetchOutcome,
    http_status=st.sampled_from([200, 200, 304, 304, 203, 404, 500]),
    content_hash=st.sampled_from([None, "sha256:a", "sha256:b", "sha256:c"]),
    simhash=st.one_of(st.none(), st.integers(-(2**63), 2**64 - 1)),
    etag=st.sampled_from([None, '"a"', 'W/"b"']),
    last_modified=st.sampled_from([None, "Mon, 01 Jan 2024 00:00:00 GMT"]))
steps = st.lists(st.tuples(st.floats(1.0, 90 * DAY), outcomes), max_size=40)
values = st.builds(
    PageValue,
    inlinks=st.integers(0, 10**9), depth=st.integers(0, 100),
    hub_yield=st.floats(0, 1e6), sitemap_priority=st.one_of(st.none(), st.floats(allow_nan=True)),
    changefreq=st.sampled_from([None, "always", "hourly", "daily", "never", "bogus"]),
    page_kind=st.sampled_from([None, "home", "article", "x"]),
    sitemap_lastmod=st.one_of(st.none(), st.floats(T0 - 100 * DAY, T0 + 400 * DAY)))


def replay(trace: list[tuple[float, FetchOutcome]]) -> tuple[UrlHistory, float]:
    history, at = rc.observe(UrlHistory(), T0, FetchOutcome(200, "sha256:a", simhash=1, etag='"a"')), T0
    for gap, outcome in trace:
        at += gap
        history = rc.observe(history, at, outcome)
    return history, at


@EXAMPLES
@given(steps, values, st.floats(0, 30 * DAY), st.integers(0, 60), st.integers(0, 60))
def test_due_time_is_within_bounds_after_the_last_fetch(trace, value, wait, hits, misses) -> None:
    history, at = replay(trace)
    host = HostSignals(None, 0.0, float(hits), float(misses))
    now = at + wait
    due = rc.next_due(history, value, now, P, host)
    last = history.last_fetch_at
    assert last is not None
    assert last + P.min_interval_s - 1e-6 <= due <= last + P.max_interval_s + 1e-6


@EXAMPLES
@given(steps)
def test_history_is_bounded_and_round_trips(trace) -> None:
    history, _ = replay(trace)
    assert len(history.observations) <= P.history_len
    n, x, t = history.aggregate
    assert 0 <= x <= n <= P.memory + 1e-9 and t >= 0
    assert UrlHistory.from_row(json.loads(json.dumps(history.to_row()))) == history
    rate = rc.change_rate(history)
    assert 1e-12 <= rate <= 1.0 and math.isfinite(rate)


@EXAMPLES
@given(st.lists(anything, max_size=12))
@example([1.0, -604801])   # a fetch time before 1970 once gave a due time before it
def test_from_row_never_raises_beyond_value_error(row) -> None:
    try:
        history = rc.UrlHistory.from_row(row)
    except ValueError:
        return
    assert isinstance(history, UrlHistory)
    assert rc.next_due(history, now=T0) >= 0


@EXAMPLES
@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True), st.booleans()), max_size=30))
def test_estimate_rate_is_finite_and_non_negative_for_any_visits(visits) -> None:
    rate = rc.estimate_rate(visits)
    assert math.isfinite(rate) and rate >= 0


@EXAMPLES
@given(st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True, allow_infinity=True),
       st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
def test_interval_and_tier_never_raise_and_stay_in_range(rate, weight, cost) -> None:
    interval = rc.interval_for(rate, weight, P, cost)
    assert P.min_interval_s <= interval <= P.max_interval_s
    assert 0 <= rc.tier_of(weight, rate) < P.tiers


@EXAMPLES
@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True), st.booleans()), min_size=1, max_size=12),
       st.floats(allow_nan=True, allow_infinity=True))
def test_choose_tier_lands_on_a_nonempty_tier(tiers, rand) -> None:
    weights = [w for w, _ in tiers]
    nonempty = [ne for _, ne in tiers]
    chosen = rc.choose_tier(weights, nonempty, rand)
    if any(nonempty):
        assert chosen is not None and nonempty[chosen]
    else:
        assert chosen is None
