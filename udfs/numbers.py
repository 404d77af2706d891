"""The one test of a number read from an event or a state row, and the one doubling wait."""
from __future__ import annotations

import math
from typing import Any


def is_finite_number(value: Any) -> bool:
    """An int or float that is finite; not a bool (JSON's true is no count or time)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def doubled_wait(first_s: float, times: int, max_s: float) -> float:
    """A wait after `times` (>= 1) failures in a row: `first_s`, doubled for each after the first, at
    most `max_s` (the exponent is bounded, so a count of any size stays finite)."""
    return min(max_s, first_s * 2.0 ** min(max(times - 1, 0), 60))
