"""Counters of a `thread`-mode operator, gathered in Python and handed to Flink once per element.

In the TaskManager's own interpreter each `Counter.inc` is a call into the JVM, and one frontier event
counts many times (a verdict for each URL of a discovered batch). `BatchedCounts.count` adds to a
Python dict; `flush`, called at the end of each element, timer and broadcast record, moves each
counter once by what its name gathered. A reader of the metrics sees them element by element, as before.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class BatchedCounts:
    """Counters `names` of metric group `group`; `count(name)` gathers, `flush()` publishes."""

    def __init__(self, group: Any, names: Iterable[str]) -> None:
        self._counters = {name: group.counter(name) for name in names}
        self._pending: dict[str, int] = {}

    def count(self, name: str, n: int = 1) -> None:
        if name not in self._counters:
            raise KeyError(f"no counter named {name!r}")
        self._pending[name] = self._pending.get(name, 0) + n

    def flush(self) -> None:
        """Move each counter by what was counted since the last flush."""
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for name, n in pending.items():
            self._counters[name].inc(n)
