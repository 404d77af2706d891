"""The worker's start-up heap leaves the cyclic collector's generations (operators/heap.py, decision 1837)."""
from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from operators.heap import freeze_startup_heap, thaw_heap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()   # the rest of the suite runs with its usual heap


def test_objects_live_at_start_up_are_frozen_and_later_ones_collected(unfrozen: None) -> None:
    live_at_start = [object(), {"a": [1]}]
    frozen = freeze_startup_heap()
    assert frozen >= len(live_at_start)
    assert not any(obj is live_at_start[1] for obj in gc.get_objects())   # the collector no longer walks it

    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1   # garbage made after the freeze is still collected


class _Node:
    def __init__(self) -> None:
        self.me = self   # a reference cycle: only the cyclic collector frees it


def test_garbage_present_at_start_up_is_collected_not_frozen(unfrozen: None) -> None:
    node = _Node()
    gone = weakref.ref(node)
    del node
    freeze_startup_heap()
    assert gone() is None


def test_a_frozen_object_that_becomes_cyclic_garbage_is_freed_once_thawed(unfrozen: None) -> None:
    node = _Node()
    gone = weakref.ref(node)
    freeze_startup_heap()
    del node
    gc.collect()
    assert gone() is not None   # frozen: the collector does not see it
    thaw_heap()
    gc.collect()
    assert gone() is None
