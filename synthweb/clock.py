"""Simulated time and the Poisson change history of each page."""
from __future__ import annotations

import random
import time
from collections.abc import Callable


class SimClock:
    """Simulated seconds since the web's epoch: monotonic time since `origin` (default: now), times `speed`."""

    def __init__(self, speed: float = 1.0, monotonic: Callable[[], float] = time.monotonic,
                 origin: float | None = None) -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.speed = speed
        self._monotonic = monotonic
        self._start = monotonic() if origin is None else origin

    def now(self) -> float:
        return (self._monotonic() - self._start) * self.speed


def initial_age(key: str) -> float:
    """How long before simulated time 0 a page was last modified (stable per page, < 30 days)."""
    return float(random.Random(f"age|{key}").randrange(3600, 30 * 86400))


class ChangeTracker:
    """Version of each page at a simulated time: changes arrive as a Poisson process of known rate.

    The event times come from a generator seeded by the page key, so any process serving the same
    web agrees on them; state per page is kept so that advancing in time costs O(new events).
    """

    def __init__(self) -> None:
        self._state: dict[str, tuple[int, float, float, random.Random]] = {}

    def version(self, key: str, rate: float, t: float) -> tuple[int, float]:
        """(number of changes up to simulated time `t`, simulated time of the last one)."""
        if rate <= 0:
            return 0, -initial_age(key)
        state = self._state.get(key)
        if state is None or t < state[1]:
            rng = random.Random(f"chg|{key}")
            state = (0, -initial_age(key), rng.expovariate(rate), rng)
        version, last, nxt, rng = state
        while nxt <= t:
            version, last = version + 1, nxt
            nxt = last + rng.expovariate(rate)
        self._state[key] = (version, last, nxt, rng)
        return version, last

    def next_change(self, key: str, rate: float, t: float) -> float:
        """Simulated time of the first change after `t` (infinity for a page that never changes)."""
        if rate <= 0:
            return float("inf")
        self.version(key, rate, t)
        return self._state[key][2]
