"""Recent-window percentiles and time-weighted occupancy behind the operators' latency and idle gauges
(udfs/latency.py, docs/decisions/1700-1701)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.latency import LEASE_TRIP_GAUGES, LeaseTrips, Occupancy, RecentWindow, micros


def nearest_rank(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def test_an_empty_window_reports_zeros():
    assert RecentWindow(8).percentiles(0.5, 0.95) == (0.0, 0.0)
    assert len(RecentWindow(8)) == 0


def test_percentiles_are_nearest_rank_over_the_samples():
    window = RecentWindow(100)
    for ms in range(1, 101):
        window.add(ms / 1000)
    assert window.percentiles(0.5, 0.95, 1.0, 0.0) == (0.050, 0.095, 0.100, 0.001)


def test_the_window_forgets_its_oldest_samples():
    window = RecentWindow(4)
    for value in (9.0, 9.0, 9.0, 9.0, 1.0, 2.0, 3.0, 4.0):
        window.add(value)
    assert len(window) == 4
    assert window.percentiles(0.5, 1.0) == (2.0, 4.0)


@pytest.mark.parametrize("hostile", [-0.001, math.nan, math.inf, -math.inf])
def test_hostile_samples_are_ignored_not_recorded(hostile):
    window = RecentWindow(4)
    window.add(0.2)
    window.add(hostile)
    assert len(window) == 1 and window.percentiles(0.5) == (0.2,)


@pytest.mark.parametrize("size", [0, -1, 2.5, True, "8"])
def test_a_window_size_that_is_not_a_positive_integer_is_refused(size):
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        RecentWindow(size)  # type: ignore[arg-type]


@pytest.mark.parametrize("q", [-0.1, 1.5, math.nan])
def test_a_quantile_outside_zero_one_is_refused(q):
    with pytest.raises(ValueError, match=r"quantiles must lie in \[0, 1\]"):
        RecentWindow(4).percentiles(q)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=60, allow_nan=False), min_size=1, max_size=80),
       st.integers(min_value=1, max_value=32), st.floats(min_value=0, max_value=1))
def test_percentiles_match_nearest_rank_over_the_last_size_samples(samples, size, q):
    window = RecentWindow(size)
    for value in samples:
        window.add(value)
    (got,) = window.percentiles(q)
    assert got == nearest_rank(samples[-size:], q)


def test_micros_rounds_seconds_to_whole_microseconds():
    assert micros(0.0012344) == 1234 and micros(0.0) == 0 and isinstance(micros(1.5), int)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_occupancy_integrates_slots_in_use_over_time():
    clock = FakeClock()
    occupancy = Occupancy(4, clock)
    occupancy.start()          # one slot from t=0 to t=10
    clock.now += 5
    occupancy.start()          # a second from t=5 to t=10
    clock.now += 5
    occupancy.end()
    occupancy.end()
    clock.now += 10            # idle for the second half
    assert occupancy.busy_ratio() == pytest.approx((10 + 5) / (4 * 20))
    clock.now += 10
    assert occupancy.busy_ratio() == 0.0   # a new window starts at each read


def test_occupancy_counts_a_long_request_in_every_window_it_spans():
    clock = FakeClock()
    occupancy = Occupancy(1, clock)
    occupancy.start()
    clock.now += 3
    assert occupancy.busy_ratio() == 1.0 and occupancy.in_flight == 1
    clock.now += 1
    occupancy.end()
    clock.now += 1
    assert occupancy.busy_ratio() == pytest.approx(0.5)


def test_occupancy_ignores_an_unmatched_end_and_a_zero_length_window():
    clock = FakeClock()
    occupancy = Occupancy(2, clock)
    occupancy.end()
    assert occupancy.in_flight == 0
    assert occupancy.busy_ratio() == 0.0   # no time has passed


@pytest.mark.parametrize("capacity", [0, -3, 1.0, None])
def test_occupancy_capacity_must_be_a_positive_integer(capacity):
    with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
        Occupancy(capacity)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(min_value=0, max_value=5)), max_size=40),
       st.integers(min_value=1, max_value=8))
def test_busy_ratio_always_lies_in_zero_one(steps, capacity):
    clock = FakeClock()
    occupancy = Occupancy(capacity, clock)
    for starts, wait in steps:
        clock.now += wait
        if starts and occupancy.in_flight < capacity:
            occupancy.start()
        else:
            occupancy.end()
    clock.now += 1
    assert 0.0 <= occupancy.busy_ratio() <= 1.0


def test_lease_trips_split_a_lease_at_its_fetch():
    trips = LeaseTrips()
    for wait in (1.0, 2.0, 3.0, 4.0):
        trips.add(released_at=100.0, fetch_started_at=100.0 + wait, fetch_ended_at=100.5 + wait, read_at=101.0 + 2 * wait)
    assert trips.gauge("release_to_fetch_p50_ms") == 2000 and trips.gauge("release_to_fetch_p95_ms") == 4000
    assert trips.gauge("fetch_to_completion_p50_ms") == 2500 and trips.gauge("fetch_to_completion_p95_ms") == 4500
    assert set(LEASE_TRIP_GAUGES) == {"release_to_fetch_p50_ms", "release_to_fetch_p95_ms",
                                      "fetch_to_completion_p50_ms", "fetch_to_completion_p95_ms"}


def test_lease_trips_drop_a_sample_skewed_below_zero_and_read_zero_while_empty():
    trips = LeaseTrips()
    assert [trips.gauge(name) for name in LEASE_TRIP_GAUGES] == [0, 0, 0, 0]
    trips.add(released_at=100.0, fetch_started_at=99.0, fetch_ended_at=99.5, read_at=101.0)  # fetcher's clock behind
    assert trips.gauge("release_to_fetch_p50_ms") == 0 and trips.gauge("fetch_to_completion_p50_ms") == 1500
