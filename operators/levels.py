"""Levels (queue depths, leases in flight) of `thread`-mode operators, published as Flink counters.

A Python gauge in a thread-mode operator is a Python callable that Flink's metrics thread invokes
through the embedded interpreter whenever the REST API, the dashboard or a reporter reads metrics.
That call, made from a thread that is not the task's, crashed whole TaskManagers (SIGSEGV in
libpython from `MetricGauge.getValue`, decision 1606), in steady state as well as during restarts.
A counter is a Java object the task thread itself updates, so reading it never enters Python.

`Levels` keeps the last value it published per name and moves each counter by the difference, so a
counter's count is the level: the dashboard and the Prometheus reporter (which exports Flink counters
as gauges) show the same number a gauge would. Values are refreshed from the task thread at most once
per `every_s`, because each changed level costs one call into the JVM.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

# A counter moves by a Java long: a level is clamped to ±LEVEL_LIMIT (and one that is no number reads 0),
# so that a level computed from hostile input can never fail the task that publishes it.
LEVEL_LIMIT = 1 << 61


def clamped_level(value: float) -> int:
    """`value` as the integer a level counter can follow."""
    if isinstance(value, float) and not math.isfinite(value):
        return 0 if math.isnan(value) else (LEVEL_LIMIT if value > 0 else -LEVEL_LIMIT)
    return max(-LEVEL_LIMIT, min(LEVEL_LIMIT, int(value)))


class Levels:
    """Counters named `names` in `group` that follow `read(name)`; `refresh(now)` publishes them."""

    def __init__(self, group: Any, names: Iterable[str], read: Callable[[str], int], every_s: float = 1.0) -> None:
        self._counters = {name: group.counter(name) for name in names}
        self._published = dict.fromkeys(self._counters, 0)
        self._read = read
        self._every_s = every_s
        self._refreshed_at = float("-inf")

    def refresh(self, now: float, force: bool = False) -> None:
        """Publish every level that changed, unless the last refresh was less than `every_s` ago."""
        if not force and now - self._refreshed_at < self._every_s:
            return
        self._refreshed_at = now
        for name, counter in self._counters.items():
            value = clamped_level(self._read(name))
            delta = value - self._published[name]
            if delta > 0:
                counter.inc(delta)
            elif delta < 0:
                counter.dec(-delta)
            self._published[name] = value
