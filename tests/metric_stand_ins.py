"""A stand-in for a Flink metric group's counters, for unit tests of what operators publish."""
from __future__ import annotations


class Counter:
    """A counter's count, and how many calls moved it (each a call into the JVM in thread mode)."""

    def __init__(self) -> None:
        self.count, self.calls = 0, 0

    def inc(self, n: int = 1) -> None:
        self.count += n
        self.calls += 1

    def dec(self, n: int = 1) -> None:
        self.count -= n
        self.calls += 1


class Group:
    """Counters by name, made on first use as a metric group makes them."""

    def __init__(self) -> None:
        self.counters: dict[str, Counter] = {}

    def counter(self, name: str) -> Counter:
        return self.counters.setdefault(name, Counter())
