"""udfs.recent: a WARC writer does not resend a link it sent within its window, and forgets it after."""
from __future__ import annotations

import pytest

from udfs.recent import DiscoveryPolicy, RecentUrls


def test_a_link_is_sent_once_within_the_window_and_again_after_it():
    recent = RecentUrls(DiscoveryPolicy(recent_urls=1000, recent_window_s=60.0))
    assert recent.first_time(7, 0.0)
    assert not recent.first_time(7, 10.0) and not recent.first_time(7, 59.0)
    assert recent.first_time(7, 61.0), "remembered at most one window"
    assert recent.repeats == 2


def test_a_link_is_remembered_at_least_half_the_window():
    recent = RecentUrls(DiscoveryPolicy(recent_urls=1000, recent_window_s=60.0))
    recent.first_time(1, 0.0)
    recent.first_time(2, 29.0)      # still the first generation
    assert not recent.first_time(2, 58.0), "the generation that holds 2 started at 0 and is kept until 60"
    assert not recent.first_time(1, 59.0) and recent.first_time(1, 60.0)


def test_memory_is_bounded_by_the_capacity_and_old_links_are_forgotten_first():
    recent = RecentUrls(DiscoveryPolicy(recent_urls=10, recent_window_s=3600.0))
    for fp in range(100):
        assert recent.first_time(fp, 0.0)
    assert len(recent._current) + len(recent._previous) <= 10
    assert not recent.first_time(99, 0.0) and recent.first_time(0, 0.0)


@pytest.mark.parametrize("field, value", [("recent_urls", -1), ("recent_urls", 1.5), ("recent_urls", True),
                                          ("recent_window_s", 0.5), ("recent_window_s", 100_000), ("recent_window_s", "9")])
def test_a_bad_policy_is_refused_with_the_field_named(field, value):
    with pytest.raises(ValueError, match=f"discovery.{field}"):
        DiscoveryPolicy(**{field: value})


def test_zero_capacity_turns_the_filter_off():
    assert not DiscoveryPolicy(recent_urls=0).enabled and DiscoveryPolicy().enabled
