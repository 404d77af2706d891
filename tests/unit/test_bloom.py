"""udfs.bloom: sizing by the textbook optimum, no false negatives, a false-positive rate near target."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.bloom import BloomPolicy, SeenFilter


def test_sizing_gives_9_6_bits_per_url_at_one_percent_and_14_4_at_a_tenth():
    assert BloomPolicy(expected_urls=1_000_000, false_positive_rate=0.01).bits / 1_000_000 == pytest.approx(9.59, abs=0.01)
    assert BloomPolicy(expected_urls=1_000_000, false_positive_rate=0.001).bits / 1_000_000 == pytest.approx(14.38, abs=0.01)
    assert BloomPolicy(expected_urls=1_000_000, false_positive_rate=0.01).probes == 7


def test_measured_false_positive_rate_is_near_the_target_at_capacity():
    rng = random.Random(7)
    seen = SeenFilter(BloomPolicy(expected_urls=20_000, false_positive_rate=0.01))
    for _ in range(20_000):
        seen.add(rng.getrandbits(64))
    strangers = [rng.getrandbits(64) for _ in range(50_000)]
    rate = sum(seen.might_contain(fp) for fp in strangers) / len(strangers)
    assert 0.005 < rate < 0.015
    assert 0.45 < seen.fill_ratio < 0.55   # an optimally loaded filter is half full


@settings(max_examples=200)
@given(st.lists(st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1), max_size=200))
def test_every_added_fingerprint_is_reported_seen(fps):
    seen = SeenFilter(BloomPolicy(expected_urls=100, false_positive_rate=0.01))
    for fp in fps:
        seen.add(fp)
    assert all(seen.might_contain(fp) for fp in fps)


@settings(max_examples=100)
@given(st.lists(st.integers(min_value=0, max_value=(1 << 64) - 1), max_size=300),
       st.lists(st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1), min_size=1, max_size=50))
def test_the_early_exit_answer_is_the_answer_of_all_k_positions(added, asked):
    seen = SeenFilter(BloomPolicy(expected_urls=100, false_positive_rate=0.01))
    for fp in added:
        seen.add(fp)
    bits = seen._bits
    for fp in asked + added:
        every_position = all(bits[pos >> 3] & (1 << (pos & 7)) for pos in seen._positions(fp))
        assert seen.might_contain(fp) == every_position


def test_signed_and_unsigned_forms_of_a_fingerprint_are_one_key():
    seen = SeenFilter(BloomPolicy(expected_urls=100))
    seen.add((1 << 64) - 5)
    assert seen.might_contain(-5)


@pytest.mark.parametrize("field,value", [("expected_urls", 0), ("expected_urls", 1.5),
                                         ("false_positive_rate", 0.0), ("false_positive_rate", 0.7),
                                         ("false_positive_rate", 1)])
def test_bad_sizes_are_rejected_naming_the_key(field, value):
    with pytest.raises(ValueError, match=f"bloom.{field}"):
        BloomPolicy(**{field: value})
