"""operators.levels.Levels: a counter's count follows the level it publishes, refreshed at most once per period."""
from __future__ import annotations

from operators.levels import LEVEL_LIMIT, Levels
from tests.metric_stand_ins import Group


def test_each_counter_count_equals_the_level_after_a_refresh_up_and_down():
    group, values = Group(), {"depth": 0, "hosts": 0}
    levels = Levels(group, values, values.__getitem__, every_s=1.0)
    for now, depth, hosts in ((0.0, 5, 2), (1.0, 3, 2), (2.0, 9, 0), (3.0, 0, 1)):
        values.update(depth=depth, hosts=hosts)
        levels.refresh(now)
        assert group.counters["depth"].count == depth and group.counters["hosts"].count == hosts


def test_refreshes_closer_than_the_period_publish_nothing_until_forced():
    group, values = Group(), {"depth": 4}
    levels = Levels(group, values, values.__getitem__, every_s=1.0)
    levels.refresh(10.0)
    values["depth"] = 7
    levels.refresh(10.5)
    assert group.counters["depth"].count == 4
    levels.refresh(10.6, force=True)
    assert group.counters["depth"].count == 7


def test_a_level_no_long_can_hold_is_clamped_and_one_that_is_no_number_reads_zero():
    group, values = Group(), {"lag": 0.0}
    levels = Levels(group, values, values.__getitem__, every_s=0.0)
    for value, published in ((1e300, LEVEL_LIMIT), (-1e300, -LEVEL_LIMIT), (float("inf"), LEVEL_LIMIT),
                             (float("nan"), 0), (10 ** 40, LEVEL_LIMIT), (42.7, 42)):
        values["lag"] = value
        levels.refresh(0.0)
        assert group.counters["lag"].count == published
        assert -(1 << 63) <= group.counters["lag"].count < 1 << 63
