"""A cheap copy of a frozen dataclass instance, for hot paths whose callers know the result is valid.

`dataclasses.replace` rebuilds every field through `__init__` and runs `__post_init__`; the frontier
copies a host row once or more per discovered URL, where that work would be most of the copy's cost
(bench/bench_frontier.py). The callers keep their own checks: `udfs.frontier.rows.replace`
checks the field names, `budgets` derives rows only from valid ones.
"""
from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def copied(obj: T, changes: dict[str, Any]) -> T:
    """A copy of `obj` with `changes` set, without `__init__` or `__post_init__`: no field is checked."""
    copy = object.__new__(type(obj))
    copy.__dict__.update(obj.__dict__)
    copy.__dict__.update(changes)
    return copy
