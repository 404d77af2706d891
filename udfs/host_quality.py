"""The share of new unique content a host produces, and the priority demotion it implies (decision 1801).

Every completed page of a host is one observation: 1 when its content is new, 0 when the dedup
stage marked it an exact duplicate (`duplicate_of`) or a near-duplicate (`near_duplicate_of`) of a
page already kept. The host's ratio is an exponentially decayed mean of those
observations, started from a prior of "all unique" so a host is not judged on its first pages.
The ratio sets a priority offset 0..3 for the host's newly discovered URLs; a level is entered
when the ratio falls below its threshold and left only when it climbs `hysteresis` above it, so a
ratio hovering at a threshold does not flip the host's priority back and forth.

The row is plain JSON text with a schema version (docs/architecture.md §3). No clock, no I/O.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from udfs import compact_json
from udfs.numbers import is_finite_number as _finite

__all__ = [
    "DEFAULT_QUALITY_POLICY",
    "MAX_OFFSET",
    "QUALITY_ROW_VERSION",
    "HostQuality",
    "QualityPolicy",
    "observe",
    "priority_offset",
]

QUALITY_ROW_VERSION = 1
MAX_OFFSET = 3


@dataclass(frozen=True)
class QualityPolicy:
    """How duplicates lower a host's priority (config section `[host_quality]`); defaults documented here.

    memory: effective number of recent completions the ratio averages; each new one weighs
        1 / memory once that many were seen (50).
    prior_weight: how many "unique" observations the starting ratio of 1.0 counts for (5), so one
        early duplicate moves the ratio by 1/6, not to 0.
    min_observations: completions seen before any demotion (10).
    near_duplicate_credit: what a near-duplicate counts as, between 0 (like an exact duplicate) and
        1 (like new content) (0.0: a page within the SimHash distance adds nothing new).
    thresholds: the ratio below which offsets 1, 2 and 3 apply, decreasing (0.5, 0.25, 0.1).
    hysteresis: how far above a level's threshold the ratio must climb to leave it (0.1).
    """

    memory: float = 50.0
    prior_weight: float = 5.0
    min_observations: int = 10
    near_duplicate_credit: float = 0.0
    thresholds: tuple[float, ...] = (0.5, 0.25, 0.1)
    hysteresis: float = 0.1

    def __post_init__(self) -> None:
        if not _finite(self.memory) or self.memory < 1:
            raise ValueError(f"host_quality.memory must be a finite number >= 1, got {self.memory!r}")
        if not _finite(self.prior_weight) or self.prior_weight < 0:
            raise ValueError(f"host_quality.prior_weight must be a finite number >= 0, got {self.prior_weight!r}")
        if isinstance(self.min_observations, bool) or not isinstance(self.min_observations, int) \
                or self.min_observations < 0:
            raise ValueError(f"host_quality.min_observations must be an integer >= 0, got {self.min_observations!r}")
        for name in ("near_duplicate_credit", "hysteresis"):
            value = getattr(self, name)
            if not _finite(value) or not 0 <= value <= 1:
                raise ValueError(f"host_quality.{name} must be within [0, 1], got {value!r}")
        t = self.thresholds
        if isinstance(t, (str, bytes)) or not isinstance(t, (tuple, list)) or len(t) != MAX_OFFSET \
                or not all(_finite(x) and 0 < x < 1 for x in t) or not all(a > b for a, b in zip(t, t[1:])):
            raise ValueError(f"host_quality.thresholds must be {MAX_OFFSET} decreasing ratios within (0, 1), "
                             f"got {t!r}")
        object.__setattr__(self, "thresholds", tuple(float(x) for x in t))


DEFAULT_QUALITY_POLICY = QualityPolicy()


@dataclass(frozen=True)
class HostQuality:
    """One host's row: the decayed unique-content ratio, how many completions fed it, the current offset.

    ratio: 0..1, 1.0 before any observation. seen: completions observed (capped at 2**31, it only
    gates `min_observations` and the weight). offset: the demotion in force, 0..MAX_OFFSET.
    """

    ratio: float = 1.0
    seen: int = 0
    offset: int = 0

    def to_row(self) -> str:
        """The row as compact JSON text with its schema version."""
        return compact_json.dumps({"v": QUALITY_ROW_VERSION, "ratio": self.ratio, "seen": self.seen,
                                   "offset": self.offset})

    @staticmethod
    def from_row(row: str | None) -> HostQuality:
        """The row from state (None: a host with no completion yet). Raises ValueError on a foreign
        schema version or a malformed row."""
        if row is None:
            return HostQuality()
        try:
            data = compact_json.loads(row)
            if not isinstance(data, dict) or data.get("v") != QUALITY_ROW_VERSION:
                version = data.get("v") if isinstance(data, dict) else None
                raise ValueError(f"host quality row schema version {version!r}; this release reads "
                                 f"{QUALITY_ROW_VERSION}")
            ratio, seen, offset = data["ratio"], data["seen"], data["offset"]
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed host quality row: {exc}") from None
        if not _finite(ratio) or not 0 <= ratio <= 1 or not _count(seen) or not _count(offset) \
                or offset > MAX_OFFSET:
            raise ValueError(f"malformed host quality row: {row!r}")
        return HostQuality(float(ratio), seen, offset)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_SEEN_CAP = 2 ** 31


def observe(row: HostQuality, duplicate: bool, near_duplicate: bool,
            policy: QualityPolicy = DEFAULT_QUALITY_POLICY) -> HostQuality:
    """The row after one completed page (ratio of new unique content per host).

    duplicate / near_duplicate: the completion's `duplicate_of` / `near_duplicate_of` are set.
    An exact duplicate counts 0, a near-duplicate `near_duplicate_credit`, anything else 1. The new
    observation weighs 1 / min(prior_weight + seen + 1, memory): a plain mean while few are seen,
    then an exponential decay with that memory. The offset is updated with hysteresis (`_level`).
    Never raises on the flags: only `True` marks a duplicate.
    """
    value = 0.0 if duplicate is True else policy.near_duplicate_credit if near_duplicate is True else 1.0
    seen = min(row.seen + 1, _SEEN_CAP)
    weight = 1.0 / min(policy.prior_weight + seen, policy.memory)
    ratio = min(max(row.ratio + (value - row.ratio) * weight, 0.0), 1.0)
    offset = _level(ratio, row.offset, policy) if seen >= policy.min_observations else 0
    return replace(row, ratio=ratio, seen=seen, offset=offset)


def _level(ratio: float, current: int, policy: QualityPolicy) -> int:
    """The demotion after a new ratio: deeper levels at once, shallower ones only past the hysteresis band."""
    target = sum(1 for threshold in policy.thresholds if ratio < threshold)
    if target >= current:
        return target
    # Climb back one level at a time, each only once the ratio clears its threshold by `hysteresis`.
    level = current
    while level > target and ratio >= policy.thresholds[level - 1] + policy.hysteresis:
        level -= 1
    return level


def priority_offset(row: HostQuality) -> int:
    """How many priority steps (0..3) the host's newly discovered URLs are demoted by.

    The frontier adds it to an entry's priority (0 highest .. 9), capped at the lowest priority.
    """
    return min(max(row.offset, 0), MAX_OFFSET)
