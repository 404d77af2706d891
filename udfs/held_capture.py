"""A capture whose events wait for its records to be durable, as the row the WARC writer keeps for it.

The writer holds such a capture in keyed state (decision 3780) until its group fsync or its file's
upload: as a versioned row of built-in values (`to_row`), never a pickle of this class, so checkpoints
and savepoints carry it across code changes and a restored writer releases it. Pure.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from udfs.lease_extension import HeldLease
from udfs.page_events import Event
from udfs.warc_capture import Location

HELD_ROW_VERSION = 1


@dataclasses.dataclass(frozen=True)
class HeldCapture:
    """A capture whose events wait for its records to be durable: `run` names the writer run that
    wrote it, `record_id` its first record, so a later run can check it is still whole where it was
    written. `lease` is the page lease its completion ends, while this run extends it (decision 3783);
    not in the row: a restored capture's lease was the earlier run's, which the frontier lets expire
    uncharged (decision 3790)."""

    run: str
    where: Location
    record_id: str
    events: tuple[Event, ...]
    lease: HeldLease | None = dataclasses.field(default=None, compare=False)

    def to_row(self) -> tuple[Any, ...]:
        return (HELD_ROW_VERSION, self.run, self.where.path, self.where.offset, self.where.length, self.record_id,
                [(topic, key, bytes(value)) for topic, key, value in self.events])

    @staticmethod
    def from_row(row: tuple[Any, ...]) -> HeldCapture:
        if row[0] != HELD_ROW_VERSION:
            raise ValueError(f"held capture row of version {row[0]!r}; this writer reads {HELD_ROW_VERSION}")
        _, run, path, offset, length, record_id, events = row
        return HeldCapture(run, Location(path, offset, length), record_id,
                           tuple((topic, key, bytes(value)) for topic, key, value in events))
