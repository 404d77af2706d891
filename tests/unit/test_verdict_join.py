"""The writer's pairing of pages with their dedup verdicts (udfs/verdict_join.py, decision 1616)."""
from __future__ import annotations

import pytest

from udfs.verdict_join import VerdictJoin


def test_a_page_waits_for_its_verdict_and_leaves_with_it() -> None:
    join: VerdictJoin[str, str] = VerdictJoin()
    assert join.page("L1", "page 1") == []
    assert join.waiting == 1
    assert join.verdict("L1", "unique") == [("page 1", "unique")]
    assert join.waiting == 0


def test_a_verdict_that_overtakes_its_page_waits_for_it() -> None:
    join: VerdictJoin[str, str] = VerdictJoin()
    assert join.verdict("L2", "revisit") == []
    assert join.page("L1", "page 1") == []
    assert join.page("L2", "page 2") == [("page 2", "revisit")]
    assert join.verdict("L1", "unique") == [("page 1", "unique")]
    assert join.waiting == 0


def test_beyond_capacity_the_oldest_page_leaves_unpaired_and_is_counted() -> None:
    join: VerdictJoin[str, str] = VerdictJoin(capacity=2)
    assert join.page("L1", "page 1") == [] and join.page("L2", "page 2") == []
    assert join.page("L3", "page 3") == [("page 1", None)]
    assert join.unpaired_pages == 1
    assert join.verdict("L1", "late") == []          # its page already left: the verdict waits, bounded
    assert join.verdict("L3", "unique") == [("page 3", "unique")]


def test_beyond_capacity_the_oldest_waiting_verdict_is_dropped_and_counted() -> None:
    join: VerdictJoin[str, str] = VerdictJoin(capacity=1)
    join.verdict("L1", "a")
    join.verdict("L2", "b")
    assert join.dropped_verdicts == 1
    assert join.page("L1", "page 1") == []            # its verdict was dropped: the page waits
    assert join.page("L2", "page 2") == [("page 2", "b")]


def test_a_second_page_under_a_waiting_key_pushes_the_first_out_unpaired() -> None:
    join: VerdictJoin[str, str] = VerdictJoin()
    join.page("L1", "first")
    assert join.page("L1", "second") == [("first", None)]
    assert join.verdict("L1", "v") == [("second", "v")]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        VerdictJoin(capacity=0)
