"""Archives page fetches and hands back each one's events only once its records are durable.

The gate of docs/architecture.md §2 invariant 5 (nothing is published before it is durable): it writes
a fetch's records with `operators.warc_files`, derives its events with `udfs.page_events`, and either
releases them at once or returns the capture as a `HeldCapture` to ask about again. No Flink: the
operator (`operators.warc_writer`) keeps the held captures in its state.
"""
from __future__ import annotations

import logging

from operators.warc_files import DURABLE, LOST, CaptureNotWritten, WarcFiles
from udfs.fetch_status import is_archived
from udfs.held_capture import HeldCapture
from udfs.page_events import Event, events_for, not_archived
from udfs.page_facts import ParsedBundle
from udfs.recent import RecentUrls
from udfs.warc import WarcBuilder, WarcRecord
from udfs.warc_capture import Location, bundle_records, capture_of


class PageArchiver:
    """Archives page fetches and hands back each one's events once its records are durable (invariant 5).

    Local files are durable once synced. With `group_commit_s` (group commit, decision 1832) a capture
    is not synced when written: `archive` returns it as a `HeldCapture` and the caller asks `settle`
    about it once that interval has passed; the first such question syncs every capture written so
    far. With an object store (`hold`) a capture is durable only once its file is uploaded (decision
    0504), which `settle` also drives (roll when due, upload, back off after a failure). Events of
    fetches that archive nothing never wait; a capture that could not be written, or will never be
    durable, ends with `not_archived` events (decision 3781).
    """

    def __init__(self, files: WarcFiles, builder: WarcBuilder, *, hold: bool, recent: RecentUrls | None = None,
                 group_commit_s: float = 0.0) -> None:
        self._files = files
        self._builder = builder
        self._hold = hold
        self._group_commit_s = group_commit_s
        self._defer_sync = group_commit_s > 0 or hold
        self.recent = recent
        self.lost = 0        # captures whose events went out as not archived

    @property
    def files(self) -> WarcFiles:
        return self._files

    def archive(self, bundle: ParsedBundle) -> tuple[list[Location], list[Event], HeldCapture | None]:
        """Write the fetch's records (if archived): its locations, the events now safe to emit, and
        the capture whose events must wait (None when nothing waits)."""
        result = bundle["result"]
        written: list[WarcRecord] = []

        def build(warcinfo_id: str | None) -> list[WarcRecord]:
            written[:] = bundle_records(self._builder, bundle, warcinfo_id)
            return written
        try:
            locations = self._files.append(build, sync=not self._defer_sync) if is_archived(result) else []
        except CaptureNotWritten as exc:
            logging.getLogger(__name__).warning("warc writer: %s not archived: %s", result["request"]["url"], exc)
            self.lost += 1
            self.tick()
            return [], not_archived(events_for(bundle, None, None, self.recent)), None
        where = locations[0] if locations else None
        events = events_for(bundle, where, capture_of(bundle, written), self.recent)
        self.tick()
        if where is None:
            return locations, events, None
        status = self._files.status(where, self._files.run)
        if status == DURABLE:
            return locations, events, None
        if status == LOST:
            self.lost += 1
            return [], not_archived(events), None
        return locations, [], HeldCapture(self._files.run, where, written[0].record_id, tuple(events))

    def first_wait(self, held: HeldCapture) -> float:
        """Seconds until a capture `archive` just held is worth asking about: the group commit's
        interval, or with a store until its file is due to roll."""
        return self._files.pending_wait(held.where.path) if self._hold else self._group_commit_s

    def settle(self, held: HeldCapture) -> tuple[list[Event] | None, float]:
        """A held capture's events if it is durable now (or its `not_archived` events if it never will
        be); else None and the seconds after which to ask again."""
        status, wait_s = self._files.settle(held.where, held.record_id, held.run)
        if status == DURABLE:
            return list(held.events), 0.0
        if status == LOST:
            self.lost += 1
            return not_archived(list(held.events)), 0.0
        return None, wait_s

    def tick(self) -> None:
        """Roll the open file if due and, with a store, upload what waits (after its backoff)."""
        self._files.finish_if_due()
        self._files.pump()

    def close(self) -> None:
        """Finish the open file: synced (with a store: staged, synced, one upload try). Held captures
        stay in the caller's state; a restored writer settles them."""
        self._files.close()
