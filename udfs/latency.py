"""Recent-window latency percentiles and capacity in use, for the operators' metric gauges.

PyFlink's metric types cannot carry a percentile to the REST API or Prometheus: a process-mode
`distribution` reaches Flink as one gauge holding a text (`DistributionResult{sum, count, min, max}`)
that the Prometheus reporter cannot export, and there is no histogram (docs/decisions/1700). So each
operator keeps a fixed-size ring of its most recent samples and publishes p50/p95 of it as integer
gauges. Both classes are plain memory of a fixed size: no allocation per sample.

Pure: values in, values out; the clock is injected. Shells: operators/fetch.py, parse.py, ip_gate.py.
"""
from __future__ import annotations

import math
import time
from typing import Callable

DEFAULT_WINDOW = 256


class RecentWindow:
    """The last `size` samples of one latency (seconds), for percentiles (docs/metrics.md).

    `add` never raises: a negative, NaN or infinite sample (a clock step, a bug upstream) is ignored,
    so a hostile value cannot poison the gauges.
    """

    __slots__ = ("_ring", "_next", "_filled")

    def __init__(self, size: int = DEFAULT_WINDOW) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"size must be an integer >= 1, got {size!r}")
        self._ring = [0.0] * size
        self._next = 0
        self._filled = 0

    def __len__(self) -> int:
        return self._filled

    def add(self, seconds: float) -> None:
        """Record one sample, replacing the oldest once the window is full (metrics spec)."""
        if not 0.0 <= seconds < math.inf:  # False for NaN too
            return
        self._ring[self._next] = seconds
        self._next = (self._next + 1) % len(self._ring)
        if self._filled < len(self._ring):
            self._filled += 1

    def percentiles(self, *quantiles: float) -> tuple[float, ...]:
        """Nearest-rank percentiles of the window, one per quantile in [0, 1]; zeros while empty.

        One sort per call, so a caller wanting p50 and p95 asks for both at once.
        """
        for q in quantiles:
            if not 0.0 <= q <= 1.0:
                raise ValueError(f"quantiles must lie in [0, 1], got {q!r}")
        if not self._filled:
            return tuple(0.0 for _ in quantiles)
        ordered = sorted(self._ring[:self._filled])
        n = len(ordered)
        return tuple(ordered[min(n - 1, max(0, math.ceil(q * n) - 1))] for q in quantiles)


def micros(seconds: float) -> int:
    """Seconds as whole microseconds: PyFlink gauges carry integers."""
    return int(round(seconds * 1_000_000))


class Occupancy:
    """Time-weighted share of `capacity` slots in use between two reads (docs/metrics.md "idle").

    A gauge sampled at an instant cannot show how busy the fetcher is: fetches last milliseconds and
    the gauges are read once per bundle, so an instantaneous count says little.
    This integrates the in-flight count over time instead (decision 1701).
    """

    __slots__ = ("_capacity", "_clock", "_in_flight", "_since", "_area", "_window_start")

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self._capacity = capacity
        self._clock = clock
        self._in_flight = 0
        self._since = self._window_start = clock()
        self._area = 0.0

    @property
    def in_flight(self) -> int:
        """Slots in use right now."""
        return self._in_flight

    def _advance(self) -> float:
        now = self._clock()
        self._area += self._in_flight * max(0.0, now - self._since)
        self._since = now
        return now

    def start(self) -> None:
        """One more slot in use."""
        self._advance()
        self._in_flight += 1

    def end(self) -> None:
        """One slot freed (never below zero: an unmatched end is ignored)."""
        self._advance()
        self._in_flight = max(0, self._in_flight - 1)

    def busy_ratio(self) -> float:
        """Share of slot-time in use since the previous call, in [0, 1]; starts a new window."""
        now = self._advance()
        elapsed = now - self._window_start
        ratio = self._area / (self._capacity * elapsed) if elapsed > 0 else 0.0
        self._area, self._window_start = 0.0, now
        return min(1.0, max(0.0, ratio))


LEASE_TRIP_GAUGES = ("release_to_fetch_p50_ms", "release_to_fetch_p95_ms",
                     "fetch_to_completion_p50_ms", "fetch_to_completion_p95_ms")


class LeaseTrips:
    """Where a page lease's time goes, from the frontier's side (docs/metrics.md, decision 1833): from
    its release to the start of its fetch (the wait in front of the fetcher), and from the fetch's end
    to the frontier reading its completion (parse, dedup, the WARC writer, Kafka and the frontier's own
    input queue). The release bound (decision 1618) keeps their sum near `frontier.release_target_s`
    when it binds; these say which side of the fetch the leases wait on.

    Pure: the caller passes the times (epoch seconds, the frontier's clock for release and reading, the
    fetcher's for the fetch); a sample made negative by clock skew between machines is dropped.
    """

    __slots__ = ("before_fetch", "after_fetch")

    def __init__(self, size: int = DEFAULT_WINDOW) -> None:
        self.before_fetch = RecentWindow(size)
        self.after_fetch = RecentWindow(size)

    def add(self, released_at: float, fetch_started_at: float, fetch_ended_at: float, read_at: float) -> None:
        """One page lease ended by its completion."""
        self.before_fetch.add(fetch_started_at - released_at)
        self.after_fetch.add(read_at - fetch_ended_at)

    def gauge(self, name: str) -> int:
        """One of LEASE_TRIP_GAUGES, in whole milliseconds (0 while no lease has ended)."""
        window = self.before_fetch if name.startswith("release_to_fetch") else self.after_fetch
        quantile = 0.5 if name.endswith("p50_ms") else 0.95
        return int(round(window.percentiles(quantile)[0] * 1000.0))
