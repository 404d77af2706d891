"""The WARC writer operator: archives each page fetch, then tells the rest of the crawl about it.

Pipeline position (docs/architecture.md §1): parse → **WARC writer** → pages.parsed, crawl.frontier
(discoveries) and crawl.outcomes (completions); the dedup verdicts of the pages reach it on a second
input, keyed like the pages. It emits a page's events only once its capture is durable (invariant 5):
`operators.page_archiver` writes the records (`udfs.warc_capture`) to the subtask's files
(`operators.warc_files`) and derives the events (`udfs.page_events`). This module is the Flink shell
around it: the join of pages and verdicts, the keyed state and timers of captures whose events wait
(`udfs.held_capture`), the lease extensions they send, and the metrics.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import socket
from collections.abc import Iterator
from typing import Any

from pyflink.common import Types
from pyflink.datastream.functions import KeyedCoProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor

from durable.object_store import ObjectStore
from operators.cpu import register_worker_cpu
from operators.dedup import Probe, join_key, needs_dedup, unpaired_verdict
from operators.heap import freeze_startup_heap, thaw_heap
from operators.page_archiver import PageArchiver
from operators.warc_files import WarcFiles, WarcFileSettings
from udfs.dedup import DedupPolicy, DedupVerdict
from udfs.held_capture import HeldCapture
from udfs.lease_extension import HeldLease, extended, extension_due, held_lease, lease_extend_event
from udfs.netguard import DEFAULT_USER_AGENT
from udfs.page_events import Event
from udfs.page_facts import ParsedBundle
from udfs.recent import DEFAULT_DISCOVERY_POLICY, DiscoveryPolicy, RecentUrls
from udfs.records import TOPIC_OUTCOMES, TOPIC_PAGES, FetchStatus, encode
from udfs.storage import StoragePolicy, is_s3_root, parse_s3_root
from udfs.verdict_join import VerdictJoin
from udfs.warc import WarcBuilder, WarcPolicy, crawl_warcinfo_fields

# The Flink type of an `Event`: (topic, key, value).
EVENT_TYPE = Types.TUPLE([Types.STRING(), Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE())])


class WarcWriterFunction(KeyedCoProcessFunction):
    """ParsedBundle (first input) + its dedup verdict (second input) → archived capture → (topic, key,
    value) events; one file series per subtask. Both inputs are keyed by `operators.dedup.join_key`.

    A page dedup judges (`dedup` given and `needs_dedup`) waits in memory for its verdict, or its
    verdict for it (decision 1616, `udfs.verdict_join`); any other page is archived when it arrives.
    For an `s3://` root, files are staged under `storage.staging_dir` with its roll limits (no per-record
    fsync: durability comes from the upload) and events wait for the upload (decision 0504).
    A capture whose events wait (group commit or upload) is a row in keyed state under the key being
    processed, with a processing-time timer that asks again whether it is durable and then emits its
    events (decision 3780): checkpoints and savepoints carry the rows and timers, and `close()`, which
    cannot emit, only syncs. While one of this run's held captures waits, the timer also comes every
    `warc.lease_extend_every_s` and sends its page lease's extension to crawl.outcomes (decision 3783).
    """

    def __init__(self, root: str, settings: WarcFileSettings = WarcFileSettings(),
                 warc_policy: WarcPolicy = WarcPolicy(), user_agent: str = DEFAULT_USER_AGENT,
                 storage: StoragePolicy = StoragePolicy(),
                 discovery: DiscoveryPolicy = DEFAULT_DISCOVERY_POLICY,
                 dedup: DedupPolicy | None = None) -> None:
        if is_s3_root(root):
            parse_s3_root(root)   # fail when the job is built, not in a worker
        self._root = root
        self._settings = settings
        self._warc_policy = warc_policy
        self._user_agent = user_agent
        self._storage = storage
        self._discovery = discovery
        self._dedup = dedup
        self._archiver: PageArchiver | None = None
        self._builder = WarcBuilder(warc_policy)
        self._counters: dict[str, Any] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        subtask = runtime_context.get_index_of_this_subtask()
        hostname = socket.gethostname()
        named = dict(crawl_fields=crawl_warcinfo_fields(self._warc_policy, self._user_agent, hostname),
                     prefix=self._warc_policy.is_part_of, hostname=hostname)
        if is_s3_root(self._root):
            staged = WarcFileSettings(self._storage.max_file_bytes, self._storage.max_file_age_s, fsync=False)
            files = WarcFiles(self._storage.staging_dir, subtask, self._builder, staged,
                              store=ObjectStore(self._storage, parse_s3_root(self._root)), **named)
        else:
            files = WarcFiles(self._root, subtask, self._builder, self._settings, **named)
        recovered = files.recover(runtime_context.get_number_of_parallel_subtasks())
        for line in recovered:
            logging.getLogger(__name__).warning("warc writer %d recovered %s", subtask, line)
        recent = RecentUrls(self._discovery) if self._discovery.enabled else None
        self._archiver = PageArchiver(files, self._builder, hold=is_s3_root(self._root), recent=recent,
                                      group_commit_s=self._warc_policy.group_commit_ms / 1000)
        # One row per held capture, appended without a read (a state read is a round trip to the JVM).
        self._held = runtime_context.get_list_state(ListStateDescriptor("held", Types.PICKLED_BYTE_ARRAY()))
        # This run's held captures by key, so a timer settles them without reading state back; a key
        # absent here (after a restore) is read from state.
        self._holding: dict[Any, list[HeldCapture]] = {}
        self._counted = {"links_not_resent": 0, "lost_captures": 0, "write_failures": 0, "upload_failures": 0}
        group = runtime_context.get_metrics_group().add_group("warc")
        group.counter("recovered_files").inc(len(recovered))
        self._counters = {name: group.counter(name)
                          for name in ("captures", "bytes", "published", "frontier_events", "links_not_resent",
                                       "unpaired_pages", "dropped_verdicts", "lost_captures", "restored_captures",
                                       "write_failures", "upload_failures", "lease_extensions")}
        self._join: VerdictJoin[ParsedBundle, DedupVerdict] = VerdictJoin()   # in memory: udfs.verdict_join says why
        self._join_counted = (0, 0)
        group.gauge("held_captures", lambda: sum(map(len, self._holding.values())))
        group.gauge("upload_backlog_files", lambda: self._archiver.files.backlog_files if self._archiver else 0)
        group.gauge("awaiting_verdicts", lambda: self._join.waiting)
        register_worker_cpu(group)
        fetch_group = runtime_context.get_metrics_group().add_group("fetch")
        self._counters.update({status.value: fetch_group.counter(status.value) for status in FetchStatus})
        freeze_startup_heap()

    def close(self) -> None:
        if self._archiver is not None:
            self._archiver.close()
            self._archiver = None
        thaw_heap()

    def process_element1(self, value: ParsedBundle, ctx: KeyedCoProcessFunction.Context) -> Iterator[Event]:
        assert self._archiver is not None
        self._archiver.tick()
        if self._dedup is None or not needs_dedup(value, self._dedup):
            yield from self._archive(value, ctx)
        else:
            yield from self._archive_pairs(self._join.page(join_key(value), value), ctx)
        self._count()

    def process_element2(self, value: Probe, ctx: KeyedCoProcessFunction.Context) -> Iterator[Event]:
        assert self._archiver is not None
        self._archiver.tick()
        yield from self._archive_pairs(self._join.verdict(value["key"], value["dedup"]), ctx)
        self._count()

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext) -> Iterator[Event]:
        """Ask again about the key's held captures: emit the events of those now durable (or lost for
        good), keep the others and set the timer for the earliest next question."""
        assert self._archiver is not None
        key = ctx.get_current_key()
        mine = self._holding.pop(key, None)
        # A key of this run holds only this run's rows: a restored row cannot share it, since a lease
        # archived before the checkpoint is never fetched (so never archived) again after it.
        held = mine if mine is not None else [HeldCapture.from_row(row) for row in self._held.get() or ()]
        if not held:
            return
        now = self._now(ctx)
        waiting: list[HeldCapture] = []
        next_s = math.inf
        for capture in held:
            events, wait_s = self._archiver.settle(capture)
            if events is None:
                if capture.lease is not None and extension_due(capture.lease, now):
                    yield self._extend(capture.lease)
                    capture = dataclasses.replace(
                        capture, lease=extended(capture.lease, now, self._warc_policy.lease_extend_every_s))
                waiting.append(capture)
                next_s = min(next_s, self._next_wait(capture, wait_s, now))
                continue
            if mine is None:
                self._counters["restored_captures"].inc()
            yield from self._emit(events)
        if not waiting:
            self._held.clear()
        else:
            if len(waiting) < len(held):
                self._held.update([capture.to_row() for capture in waiting])
            if mine is not None:
                self._holding[key] = waiting
            self._set_timer(ctx, next_s)
        self._count()

    @staticmethod
    def _now(ctx: KeyedCoProcessFunction.Context) -> float:
        return ctx.timer_service().current_processing_time() / 1000.0

    @staticmethod
    def _next_wait(capture: HeldCapture, wait_s: float, now: float) -> float:
        """Seconds until the timer should look at a waiting capture: when it may be durable, or sooner
        when its lease's next extension is due."""
        if capture.lease is None:
            return wait_s
        return max(0.0, min(wait_s, capture.lease.next_at - now))

    def _extend(self, lease: HeldLease) -> Event:
        self._counters["lease_extensions"].inc()
        return TOPIC_OUTCOMES, lease.host, encode(dict(lease_extend_event(lease)))

    def _set_timer(self, ctx: KeyedCoProcessFunction.Context, wait_s: float) -> None:
        timers = ctx.timer_service()
        # A few ms late rather than early: an age roll is due only once the age is reached.
        timers.register_processing_time_timer(timers.current_processing_time() + math.ceil(wait_s * 1000) + 5)

    def _archive_pairs(self, pairs: list[tuple[ParsedBundle, DedupVerdict | None]],
                       ctx: KeyedCoProcessFunction.Context) -> Iterator[Event]:
        unpaired, dropped = self._join.unpaired_pages, self._join.dropped_verdicts
        if (unpaired, dropped) != self._join_counted:
            logging.getLogger(__name__).warning(
                "warc writer: %d page(s) archived without their dedup verdict, %d verdict(s) without a page",
                unpaired - self._join_counted[0], dropped - self._join_counted[1])
            self._counters["unpaired_pages"].inc(unpaired - self._join_counted[0])
            self._counters["dropped_verdicts"].inc(dropped - self._join_counted[1])
            self._join_counted = (unpaired, dropped)
        for bundle, verdict in pairs:
            bundle["dedup"] = verdict if verdict is not None else unpaired_verdict(bundle)
            yield from self._archive(bundle, ctx)

    def _archive(self, value: ParsedBundle, ctx: KeyedCoProcessFunction.Context) -> Iterator[Event]:
        assert self._archiver is not None
        self._counters.get(value["result"]["fetch_status"], self._counters[FetchStatus.ERROR.value]).inc()
        locations, events, held = self._archiver.archive(value)
        if locations:
            self._counters["captures"].inc()
            self._counters["bytes"].inc(sum(loc.length for loc in locations))
        if held is not None:
            # Under the key being processed: a page paired late may not be its own key's, which is
            # fine, the rows of a key are a list and its timer settles them all.
            now = self._now(ctx)
            lease = held_lease(value["result"]["request"], now, self._warc_policy.lease_extend_every_s)
            if lease is not None:
                held = dataclasses.replace(held, lease=lease)
            self._held.add(held.to_row())
            self._holding.setdefault(ctx.get_current_key(), []).append(held)
            self._set_timer(ctx, self._next_wait(held, self._archiver.first_wait(held), now))
        yield from self._emit(events)

    def _count(self) -> None:
        """Bring the counters kept by the archiver, its files and the discovery window up to date."""
        assert self._archiver is not None
        files, recent = self._archiver.files, self._archiver.recent
        for name, total in (("links_not_resent", recent.repeats if recent is not None else 0),
                            ("lost_captures", self._archiver.lost), ("write_failures", files.write_failures),
                            ("upload_failures", files.upload_failures)):
            if total != self._counted[name]:
                self._counters[name].inc(total - self._counted[name])
                self._counted[name] = total

    def _emit(self, events: list[Event]) -> Iterator[Event]:
        for event in events:
            self._counters["published" if event[0] == TOPIC_PAGES else "frontier_events"].inc()
            yield event
