"""udfs.politeness: the pacing arithmetic of ARCHITECTURE.md §2 invariant 1."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.politeness import (DEFAULT_POLITENESS_POLICY, Health, PolitenessPolicy, classify_health, fetch_gap,
                             next_allowed_at, next_backoff)

P = DEFAULT_POLITENESS_POLICY


@pytest.mark.parametrize("kwargs, needle", [
    ({"default_delay_s": -1}, "default_delay_s"),
    ({"min_delay_s": math.nan}, "min_delay_s"),
    ({"max_delay_s": math.inf}, "max_delay_s"),
    ({"min_delay_s": 10, "max_delay_s": 5}, "min_delay_s"),
    ({"backoff_initial_s": 700}, "backoff_initial_s"),
    ({"backoff_factor": 0.5}, "backoff_factor"),
    ({"rate_limit_per_s": 0}, "rate_limit_per_s"),
    ({"rate_limit_per_s": -2.0}, "rate_limit_per_s"),
    ({"max_retry_after_s": -1}, "max_retry_after_s"),
])
def test_policy_rejects_bad_values_naming_the_field(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        PolitenessPolicy(**kwargs)


def test_policy_defaults_are_valid_and_documented_values():
    assert (P.default_delay_s, P.fetch_time_factor, P.rate_limit_per_s) == (1.0, 10.0, None)


@pytest.mark.parametrize("fetch_status, http_status, retry_after, expected", [
    ("ok", 200, None, Health.HEALTHY),
    ("ok", 304, None, Health.HEALTHY),
    ("ok", 404, None, Health.HEALTHY),
    ("ok", 429, None, Health.THROTTLED),
    ("ok", 429, 30.0, Health.THROTTLED),
    ("ok", 503, 10.0, Health.THROTTLED),
    ("ok", 503, None, Health.SERVER_ERROR),
    ("ok", 500, None, Health.SERVER_ERROR),
    ("timeout", None, None, Health.TIMEOUT),
    ("too_slow", 200, None, Health.TIMEOUT),
    ("conn_error", None, None, Health.UNREACHABLE),
    ("dns_error", None, None, Health.UNREACHABLE),
    ("blocked", None, None, Health.HEALTHY),       # our own guard refused: not the host's fault
    ("too_large", 200, None, Health.HEALTHY),
    ("bad_content_type", 200, None, Health.HEALTHY),
])
def test_classify_health_table(fetch_status, http_status, retry_after, expected):
    assert classify_health(fetch_status, http_status, retry_after) is expected


@pytest.mark.parametrize("crawl_delay, fetch_s, backoff, rate, expected", [
    (None, 0.0, 0.0, None, 1.0),      # default delay
    (3.0, 0.0, 0.0, None, 3.0),       # robots Crawl-delay wins over the default
    (0.0, 0.0, 0.0, None, 0.5),       # Crawl-delay: 0 still respects min_delay_s
    (None, 0.4, 0.0, None, 4.0),      # 10 × fetch time
    (None, 0.0, 0.0, 0.25, 4.0),      # 1 / rate limit
    (86400.0, 0.0, 0.0, None, 120.0),  # hostile Crawl-delay capped at max_delay_s
    (None, 0.0, 20.0, None, 20.0),    # backoff raises the gap
    (None, 0.0, 5000.0, None, 600.0),  # ...up to its own cap, beyond max_delay_s
    (2.0, 0.3, 1.0, 1.0, 3.0),        # the largest component wins
])
def test_fetch_gap_is_max_of_components_clamped(crawl_delay, fetch_s, backoff, rate, expected):
    assert fetch_gap(crawl_delay, fetch_s, backoff, P, rate) == pytest.approx(expected)


def test_policy_rate_limit_applies_when_no_per_host_override():
    policy = PolitenessPolicy(rate_limit_per_s=0.1)
    assert fetch_gap(None, 0.0, 0.0, policy) == pytest.approx(10.0)
    assert fetch_gap(None, 0.0, 0.0, policy, rate_limit_per_s=2.0) == pytest.approx(1.0)


def test_next_allowed_at_adds_the_gap_to_done():
    assert next_allowed_at(1000.0, 2.0, 0.1, 0.0) == pytest.approx(1002.0)


def test_retry_after_is_honoured_and_capped():
    assert next_allowed_at(1000.0, None, 0.0, 0.0, retry_after=90.0) == pytest.approx(1090.0)
    assert next_allowed_at(1000.0, None, 0.0, 0.0, retry_after=10 ** 7) == pytest.approx(1000.0 + 3600.0)
    # a short Retry-After never lowers the gap below the politeness delay
    assert next_allowed_at(1000.0, 5.0, 0.0, 0.0, retry_after=1.0) == pytest.approx(1005.0)


def test_backoff_is_multiplicative_up_to_the_cap_then_additive_down():
    backoff, seen = 0.0, []
    for _ in range(10):
        backoff = next_backoff(backoff, Health.SERVER_ERROR)
        seen.append(backoff)
    assert seen[:4] == [5.0, 10.0, 20.0, 40.0]
    assert seen[-1] == 600.0
    assert next_backoff(600.0, Health.HEALTHY) == 599.0   # lowered slowly
    assert next_backoff(0.5, Health.HEALTHY) == 0.0        # never negative


@pytest.mark.parametrize("health", [Health.THROTTLED, Health.SERVER_ERROR, Health.TIMEOUT, Health.UNREACHABLE])
def test_every_failure_kind_raises_backoff(health):
    assert next_backoff(0.0, health) == P.backoff_initial_s


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -5.0, None])
def test_hostile_numbers_fall_back_to_neutral_values(bad):
    assert fetch_gap(bad, bad, bad, P) == pytest.approx(1.0)
    assert next_allowed_at(100.0, bad, bad, bad, retry_after=bad) == pytest.approx(101.0)
    assert next_backoff(bad, Health.HEALTHY) == 0.0


finite = st.floats(min_value=0, max_value=1e6, allow_nan=False)
anything = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=250, deadline=None)
@given(crawl_delay=anything, fetch_s=anything, backoff=anything, retry_after=anything, done=finite)
def test_gap_bounds_hold_for_any_input(crawl_delay, fetch_s, backoff, retry_after, done):
    gap = fetch_gap(crawl_delay, fetch_s, backoff, P)
    assert P.min_delay_s <= gap <= max(P.max_delay_s, P.backoff_max_s)
    at = next_allowed_at(done, crawl_delay, fetch_s, backoff, retry_after, P)
    assert done + gap <= at + 1e-6
    assert at <= done + max(gap, P.max_retry_after_s) + 1e-6


@settings(max_examples=200, deadline=None)
@given(backoff=finite, health=st.sampled_from(list(Health)))
def test_backoff_stays_within_zero_and_cap(backoff, health):
    assert 0.0 <= next_backoff(backoff, health) <= P.backoff_max_s


@settings(max_examples=200, deadline=None)
@given(crawl_delay=finite, fetch_s=finite, low=finite, high=finite)
def test_gap_is_monotone_in_backoff(crawl_delay, fetch_s, low, high):
    low, high = sorted((low, high))
    assert fetch_gap(crawl_delay, fetch_s, low) <= fetch_gap(crawl_delay, fetch_s, high)
