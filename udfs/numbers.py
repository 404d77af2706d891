"""The one test of a number read from an event or a state row."""
from __future__ import annotations

import math
from typing import Any


def is_finite_number(value: Any) -> bool:
    """An int or float that is finite; not a bool (JSON's true is no count or time)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
