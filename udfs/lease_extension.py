"""When the WARC writer asks the frontier to extend the lease of a capture that waits to be durable.

A capture whose events are held (decision 3780) waits for a group fsync or, with object storage, for its
file's upload, minutes long during an outage (decision 3782). Meanwhile its page lease would expire and be
charged as a timeout. The writer sends a `lease_extend` event (udfs.records.LeaseExtend) for it instead:
the first one `every_s` after the capture was held, or `every_s` before the lease's deadline if that
comes sooner, then one every `every_s` while it still waits (decision 3783). A capture that settles
within `every_s` of being held, with its lease not near its deadline, costs nothing. Pure: the clock
comes in.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from udfs.numbers import is_finite_number
from udfs.records import SCHEMA_VERSION, LeaseExtend


@dataclasses.dataclass(frozen=True)
class HeldLease:
    """The page lease of one held capture, and when its next extension is due (epoch seconds)."""

    host: str
    lease_id: str
    fp: int
    next_at: float


def held_lease(request: dict[str, Any], held_at: float, every_s: float) -> HeldLease | None:
    """The lease of a capture held at `held_at`, from its FetchRequest; None when extensions are off
    (`every_s` 0) or the request is not a page lease. Its first extension is due `every_s` after
    `held_at`, or `every_s` before the lease's deadline (`lease_deadline`, when the request has one)."""
    if every_s <= 0 or request.get("kind", "page") != "page":
        return None
    next_at = held_at + every_s
    deadline = request.get("lease_deadline")
    if is_finite_number(deadline):
        next_at = min(next_at, float(deadline) - every_s)
    return HeldLease(request["host"], request["lease_id"], request["fp"], next_at)


def extension_due(lease: HeldLease, now: float) -> bool:
    """Whether the lease's capture, still waiting at `now`, should have its lease extended now."""
    return now >= lease.next_at


def extended(lease: HeldLease, now: float, every_s: float) -> HeldLease:
    """The lease after an extension sent at `now`: the next one is due `every_s` later."""
    return dataclasses.replace(lease, next_at=now + every_s)


def lease_extend_event(lease: HeldLease) -> LeaseExtend:
    """The crawl.outcomes event (key: its host) asking the frontier to extend the lease."""
    return LeaseExtend(v=SCHEMA_VERSION, type="lease_extend", host=lease.host, lease_id=lease.lease_id,
                       fp=lease.fp)
