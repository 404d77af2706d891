"""BatchedCounts: what a thread-mode operator counts reaches its Flink counters once per flush."""
from __future__ import annotations

import pytest

from operators.counts import BatchedCounts
from tests.metric_stand_ins import Group


def test_counts_reach_the_counters_only_at_a_flush_one_call_per_name() -> None:
    group = Group()
    counts = BatchedCounts(group, ("seen", "admitted", "dropped"))
    for _ in range(20):
        counts.count("seen")
    counts.count("admitted", 3)
    assert group.counters["seen"].count == 0
    counts.flush()
    assert {name: (c.count, c.calls) for name, c in group.counters.items()} == {
        "seen": (20, 1), "admitted": (3, 1), "dropped": (0, 0)}
    counts.flush()   # nothing new: no call
    assert group.counters["seen"].calls == 1


def test_an_unknown_name_is_refused_when_counted() -> None:
    counts = BatchedCounts(Group(), ("seen",))
    with pytest.raises(KeyError, match="unseen"):
        counts.count("unseen")
