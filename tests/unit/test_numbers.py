"""udfs.numbers: the one test of a number read from an event or a state row."""
from __future__ import annotations

from udfs.numbers import is_finite_number


def test_finite_ints_and_floats_are_numbers_and_bools_infinities_nan_and_text_are_not():
    assert all(is_finite_number(v) for v in (0, -3, 2.5, 1e300))
    assert not any(is_finite_number(v) for v in (True, False, float("inf"), float("-inf"), float("nan"), "1", None, [1]))
