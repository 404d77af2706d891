"""udfs.politeness: the pacing arithmetic of docs/architecture.md §2 invariant 1."""
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


# --- Retry-After counts from the answer's arrival ------------------------------------------------

def test_retry_after_counts_from_the_answer_not_from_when_the_outcome_is_read():
    # The answer arrived at 1000; the frontier reads the outcome 0.83 s later.
    assert next_allowed_at(1000.83, None, 0.0, 0.0, retry_after=6.0, answered_at=1000.0) == pytest.approx(1006.0)
    # The gap still counts from when the outcome is read (it spaces the frontier's own releases).
    assert next_allowed_at(1000.83, 5.0, 0.0, 0.0, retry_after=2.0, answered_at=1000.0) == pytest.approx(1005.83)


@pytest.mark.parametrize("answered_at", [2000.0, math.nan, math.inf, -5.0, None])
def test_an_answer_time_after_the_read_or_unusable_counts_from_the_read(answered_at):
    assert next_allowed_at(1000.0, None, 0.0, 0.0, retry_after=6.0, answered_at=answered_at) == pytest.approx(1006.0)


@settings(max_examples=250, deadline=None)
@given(retry_after=anything, answered=finite, lag=finite)
def test_retry_after_is_waited_in_full_from_the_answer_and_no_longer(retry_after, answered, lag):
    read = answered + lag
    at = next_allowed_at(read, None, 0.0, 0.0, retry_after, P, answered_at=answered)
    asked = min(retry_after, P.max_retry_after_s) if retry_after is not None and 0 <= retry_after < math.inf else 0.0
    assert at >= answered + asked - 1e-6 and at >= read + fetch_gap(None, 0.0, 0.0, P) - 1e-6
    assert at <= max(answered + asked, read + fetch_gap(None, 0.0, 0.0, P)) + 1e-6


def _tdmrep_lease(now: float):
    from udfs.frontier.rows import HostState, QueueItem
    from udfs.frontier.admission import admit
    from udfs.frontier.release import lease_robots, lease_tdmrep
    from udfs.frontier.preflight import on_robots
    item = QueueItem("http://h.test/a", 1)
    state, _ = admit(HostState(), item, None, None, now)
    state, robots = lease_robots(state, "h.test", 1, now)
    state, _ = on_robots(state, {"lease_id": robots["lease_id"], "fetch_status": "ok", "http_status": 404,
                                    "body_b64": ""}, None, now)
    state, request = lease_tdmrep(state, "h.test", 2, None, now + 1.0)
    return state, request


@pytest.mark.parametrize("kind", ["tdmrep", "completion"])
def test_a_429_with_retry_after_paces_its_host_from_the_answer(kind):
    """The issue's case: 429 with `Retry-After: 6` on tdmrep.json, the outcome read 0.83 s after the
    answer; the host's next request may go 6 s after the answer, not 5.83 (the backoff) nor 6.83."""
    from udfs.frontier.rows import HostState, QueueItem, Robots
    from udfs.frontier.queues import pop
    from udfs.frontier.admission import admit
    from udfs.frontier.release import lease_page
    from udfs.frontier.outcomes import on_completion
    from udfs.frontier.preflight import on_tdmrep
    answered = 1000.0
    if kind == "tdmrep":
        state, request = _tdmrep_lease(answered - 5.0)
        event = {"lease_id": request["lease_id"], "fetch_status": "ok", "http_status": 429, "retry_after": 6.0,
                 "fetched_at": answered, "fetch_ms": 3.0, "body_b64": ""}
        state, outcome = on_tdmrep(state, event, answered + 0.83)
    else:
        item = QueueItem("http://h.test/a", 1)
        state, _ = admit(HostState(robots=Robots.ALLOW_ALL, robots_expires_at=answered + 1e6), item,
                            None, None, answered - 5.0)
        state, _ = pop(state)
        state, request, _ = lease_page(state, item, None, "h.test", answered - 1.0)
        event = {"lease_id": request["lease_id"], "fp": 1, "fetch_status": "ok", "http_status": 429,
                 "retry_after": 6.0, "done_at": answered, "fetch_ms": 3.0}
        state, outcome = on_completion(state, event, answered + 0.83)
    assert outcome.matched
    assert state.next_allowed_at == pytest.approx(answered + 6.0)
