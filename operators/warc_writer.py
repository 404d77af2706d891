"""The WARC writer: archives each page fetch, then tells the rest of the crawl about it.

Pipeline position (docs/architecture.md §1): parse → **WARC writer** → pages.parsed, crawl.frontier
(discoveries) and crawl.outcomes (completions); the dedup verdicts of the pages reach it on a second
input, keyed like the pages, and each page waits for its own (decision 1616).
For each ParsedBundle it appends a response + request record pair (one gzip member each, built by
`udfs.warc`; as the dedup verdict says, a revisit instead of the response for an exact duplicate and
a metadata record for a near-duplicate: decisions 1300-1301) to `crawl/{date}/{subtask}/{seq}.warc.gz`
under the WARC root (CDXJ lines beside it in `{seq}.cdxj`), fsyncs them (by default at once; with
`warc.group_commit_ms` one fsync for the captures of that interval, decision 1832), and only then
emits (invariant 5: every published page points at a durable record):
- a `Completion` for the page's frontier (always, whatever happened),
- a `ParsedPage` on pages.parsed (200 pages not marked noindex) with warc_path/offset/length,
- one `DiscoveredBatch` per target host of its followable links (+ redirect/refresh targets), depth+1.
A capture whose events must wait (a group fsync, an upload) is held as a row in keyed state with a
processing-time timer that asks again whether it is durable (decision 3780): checkpoints and
savepoints carry it, and the restored job releases it after checking the capture is still whole
where it was written. A capture that cannot be written (disk full) or did not survive (cut from its
file after a machine crash, its staged file gone) ends with its discoveries and a completion of fetch
status `not_archived` and is never published: the frontier fetches it again (decision 3781).
Files roll at a size or age limit (checked at every element and timer); a restarted writer never
appends to an existing file, it starts the next sequence number. Before it does, it repairs what a
writer killed mid-file left behind (decision 1600): the last file of each folder it owns is cut back
to its last complete, indexed capture (a torn gzip member or an unindexed capture goes, with any index
line past the cut); synced captures stay, since their events may already be published. Captures that
still waited for their group's fsync were written to the OS at once (decision 1832): a killed process
leaves them complete, and a machine crash leaves what the disk kept, cut the same way.

With an `s3://bucket/prefix` root (decision 0504) files are written to `[storage] staging_dir`, rolled
at its smaller limits and uploaded whole on roll; a capture is durable only once its file is uploaded,
so its events are held until then (published warc_path = the s3:// URL). A failed upload leaves the
file staged and is tried again with a bounded exponential backoff while the job runs on; staged files
are deleted only once stored, and a restarted writer uploads those an earlier run left (decision 3782).
"""
from __future__ import annotations

import dataclasses
import errno
import itertools
import json
import logging
import math
import os
import re
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

from pyflink.common import Types
from pyflink.datastream.functions import KeyedCoProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor

from crawler.durable import fsync_path
from operators.cpu import register_worker_cpu
from operators.dedup import Probe, join_key, needs_dedup, unpaired_verdict
from operators.heap import freeze_startup_heap, thaw_heap
from operators.object_store import ObjectStore, UploadError
from udfs.page_facts import ParsedBundle, payload_length
from udfs import compact_json
from udfs.dedup import DedupPolicy, DedupVerdict, metadata_fields
from udfs.canonical import HINT, CanonicalVerdict, judge_canonical
from udfs.fetch_status import (header_value, is_archived, is_complete_page, is_not_modified, redirect_target,
                               redirect_written, retry_after_seconds, warc_http_version)
from udfs.records import (PRIORITY_SITEMAP, SCHEMA_VERSION, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, Completion,
                          DiscoveredBatch, FetchRequest, FetchResult, FetchStatus, ParsedPage, UrlEntry, encode,
                          response_url)
from udfs.lease_extension import HeldLease, extended, extension_due, held_lease, lease_extend_event
from udfs.recent import DEFAULT_DISCOVERY_POLICY, DiscoveryPolicy, RecentUrls
from udfs.storage import StoragePolicy, is_s3_root, parse_s3_root
from udfs.urls import host_key, url_fp
from udfs.verdict_join import VerdictJoin
from udfs.warc import (CT_WARC_FIELDS, PackedBlock, RevisitTarget, WarcBuilder, WarcPolicy, WarcRecord, cdxj_line,
                       indexed_by_default, member_record_id)

# Discovered URL priorities (0 highest .. 9): a redirect target is the content the seed meant.
PRIORITY_REDIRECT = 4
PRIORITY_LINK = 5
MAX_URLS_PER_BATCH = 1000   # URLs per discovered event: a 50,000-URL sitemap is 50 events of ~100 KB
_SEQ_NAME = re.compile(r"^(\d+)\.warc\.gz$")

Event = tuple[str, str, bytes]          # (topic, key, value)
EVENT_TYPE = Types.TUPLE([Types.STRING(), Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE())])


@dataclasses.dataclass(frozen=True)
class WarcFileSettings:
    """When a WARC file is closed and the next one started (docs/architecture.md §3: about 1 GB files)."""

    # Roll once a file reaches this many bytes (the capture that crosses it is the last one).
    max_file_bytes: int = 1_000_000_000
    # Roll once a file has been open this long, seconds (checked when the next capture arrives).
    max_file_age_s: float = 3600.0
    # fsync each capture before its events are emitted (off only in benchmarks of the writer itself).
    fsync: bool = True

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be at least 1, got {self.max_file_bytes}")
        if not self.max_file_age_s > 0:
            raise ValueError(f"max_file_age_s must be positive, got {self.max_file_age_s}")


@dataclasses.dataclass(frozen=True)
class Location:
    """Where one record's gzip member lies: the file path as published, byte offset and length."""

    path: str
    offset: int
    length: int


class CaptureNotWritten(Exception):
    """A capture's records could not be written (a full disk, an I/O error, or the object store out of
    reach when a new file needs its sequence number): nothing of it is left in the file, and the
    writer ends its fetch as not archived (decision 3781)."""


# How far a capture written earlier has got (decision 3780).
DURABLE = "durable"   # its records survive a crash: its events may go out
PENDING = "pending"   # not yet (the next sync, its file's upload): ask again later
LOST = "lost"         # it will never be durable: its page must be fetched again


@dataclasses.dataclass
class _FileState:
    """What this run of a writer knows of one file it wrote: bytes that may still become durable,
    bytes that are, and whether it is finished (no byte past `durable` ever will be)."""

    relative: str
    written: int = 0
    durable: int = 0
    final: bool = False


class WarcFiles:
    """Appends gzip members to rolling files `crawl/{date}/{subtask}/{seq}.warc.gz` under `root`.

    Beside each file, `{seq}.cdxj` indexes its records in file order (decision 0503 lines, `filename`
    relative to `root`); it is synced with the WARC file. Sort the lines when merging indexes.
    A capture's records and index lines go to the OS in one write each, unbuffered: a write that fails
    (disk full) is cut back off both files and raises `CaptureNotWritten`; the file stays usable.
    A failed fsync cuts the file back to its last sync and closes it (the page cache of what it did
    not sync may be gone, decision 3781).

    With a `store`, `root` is the local staging directory: a finished file is fsynced and queued for
    upload; `pump` uploads the queue (file, then index) and deletes the staged copies once stored. A
    failed upload leaves the queue as it is and is tried again after a bounded exponential backoff
    (`StoragePolicy.upload_retry_s`, decision 3782); locations name the s3:// URL.
    """

    KNOWN_FILES = 1000   # files of this run whose state is kept; an older one is checked on disk

    def __init__(self, root: str, subtask: int, builder: WarcBuilder, settings: WarcFileSettings = WarcFileSettings(),
                 clock: Callable[[], float] = time.time, crawl_fields: tuple[tuple[str, str], ...] = (),
                 store: ObjectStore | None = None) -> None:
        self._root = root
        self._store = store
        self._subtask = subtask
        self._builder = builder
        self._settings = settings
        self._clock = clock
        self._crawl_fields = crawl_fields
        # Names this run in the rows of held captures: a row of another run is checked on disk or in the store.
        self.run = uuid.uuid4().hex[:12]
        self._file: BinaryIO | None = None
        self._index: BinaryIO | None = None
        self._path = ""
        self._relative = ""
        self._opened_at = 0.0
        self._date = ""
        self._warcinfo_id: str | None = None
        self._size = self._index_size = 0          # bytes in the open file and its index
        self._synced = (0, 0)                      # ... at their last sync
        self._known: OrderedDict[str, _FileState] = OrderedDict()
        self._checked: OrderedDict[str, frozenset[tuple[int, int]]] = OrderedDict()   # other runs' files, checked
        self._backlog: list[tuple[str, bool]] = []   # staged files to upload: (relative path, left by a crash)
        self._next_seq: dict[str, int] = {}          # with a store: the next sequence number per folder
        self._failures_in_row = 0
        self._retry_at = 0.0
        self.syncs = 0             # how many times the files were synced
        self.write_failures = 0    # appends and syncs that failed (disk full, I/O error)
        self.upload_failures = 0   # upload tries that failed

    def append(self, build: Callable[[str | None], list[WarcRecord]], sync: bool = True) -> list[Location]:
        """Write the records `build(warcinfo_id)` returns (rolling first if due); with `sync`, fsync them.
        Whether they are durable is `status`'s answer: at once when synced (unless the fsync failed),
        later with `sync=False` (group commit, decision 1832) or with a store (the upload).

        `build` runs after any roll so records name the warcinfo of the file they land in. Raises
        `CaptureNotWritten` when the records could not be written; nothing of them stays.
        """
        self._roll_if_due()
        assert self._file is not None and self._index is not None
        level = self._builder.policy.gzip_level
        members, lines, locations = [], [], []
        offset = self._size
        for record in build(self._warcinfo_id):
            member = record.to_gzip(level)
            if indexed_by_default(record.info):
                lines.append(cdxj_line(record.info, self._relative, offset, len(member)) + "\n")
            locations.append(Location(self._path, offset, len(member)))
            members.append(member)
            offset += len(member)
        index_bytes = "".join(lines).encode("utf-8")
        try:
            _write_all(self._file, b"".join(members))
            _write_all(self._index, index_bytes)
        except OSError as exc:
            self._cut_failed_append()
            raise CaptureNotWritten(f"{self._path}: {exc}") from exc
        self._size, self._index_size = offset, self._index_size + len(index_bytes)
        self._known[self._path].written = self._size
        if locations and sync:
            self._sync()
        return locations

    def sync(self) -> None:
        """Make every record appended so far durable (a no-op between files: closing synced them)."""
        if self._file is not None:
            self._sync()

    @property
    def open_path(self) -> str | None:
        """The published path of the file records are appended to now, or None between files."""
        return self._path if self._file is not None else None

    @property
    def backlog_files(self) -> int:
        """Finished files waiting for their upload (with a store)."""
        return len(self._backlog)

    def close(self) -> None:
        """Finish the current file: fsync and close it (with a store also when staged, so the queue of
        uploads survives a crash) and, with a store, queue it and try the queue once."""
        if self._file is None:
            return
        self._sync(force=self._store is not None)
        if self._file is None:
            return   # the sync failed and gave the file up
        self._close_handles()
        if self._store is None:
            self._known[self._path].final = True
        else:
            self._backlog.append((self._relative, False))
            self.pump()

    def finish_if_due(self) -> bool:
        """Close (with a store: queue for upload) the current file if it reached its size, age or date limit."""
        return self._finish_if_due(self._clock())

    def pump(self) -> None:
        """With a store: upload the queued files in order, unless the last try failed less than its
        backoff ago. Never raises: a failure is counted, logged and tried again later."""
        if not self._backlog or self._clock() < self._retry_at:
            return
        while self._backlog:
            relative, recovered = self._backlog[0]
            try:
                self._upload(relative, recovered, retry=self._failures_in_row == 0)
            except FileNotFoundError as exc:
                # Someone removed the staged file: nothing is left to upload, its captures are lost.
                logging.getLogger(__name__).error("warc writer %d: staged file gone, not uploaded: %s",
                                                  self._subtask, exc)
                state = self._known.get(self._store.root.url(relative))   # type: ignore[union-attr]
                if state is not None:
                    state.final = True
            except (UploadError, OSError) as exc:
                wait = self._failed_try()
                logging.getLogger(__name__).warning(
                    "warc writer %d: upload failed (%d in a row, %d file(s) waiting), next try in %.1f s: %s",
                    self._subtask, self._failures_in_row, len(self._backlog), wait, exc)
                return
            else:
                self._failures_in_row = 0
            self._backlog.pop(0)

    def _failed_try(self) -> float:
        """Count a request to the store that failed and start (or lengthen) the backoff; its length."""
        assert self._store is not None
        self.upload_failures += 1
        self._failures_in_row += 1
        wait = self._store.policy.upload_retry_s(self._failures_in_row)
        self._retry_at = self._clock() + wait
        return wait

    def status(self, where: Location, run: str) -> str:
        """DURABLE, PENDING or LOST for records this run wrote at `where` (nothing is done to settle it);
        PENDING too for a location of another run or an older file: `settle` checks those."""
        state = self._known.get(where.path) if run == self.run else None
        if state is None:
            return PENDING
        end = where.offset + where.length
        if end <= state.durable:
            return DURABLE
        return LOST if state.final or end > state.written else PENDING

    def settle(self, where: Location, record_id: str, run: str) -> tuple[str, float]:
        """Bring the capture at `where` (its first record `record_id`, written by `run`) as far as it can
        go now: sync it, roll and upload its file if due, or, for another run's capture (after a
        restore), check it is whole where it was written. Returns its status and, when PENDING, the
        seconds after which to ask again."""
        if run != self.run or where.path not in self._known:
            return self._check_earlier(where, record_id)
        status = self.status(where, run)
        if status == PENDING:
            if self._store is None:
                self.sync()   # local records are durable once synced
            else:
                self.finish_if_due()
                self.pump()
            status = self.status(where, run)
        return status, self.pending_wait(where.path) if status == PENDING else 0.0

    def recover(self, parallelism: int) -> list[str]:
        """Clean up after writers that stopped without closing their file (decision 1600); call it
        before the first `append`. This writer (subtask i of `parallelism`) owns the subtask folders
        j with j % parallelism == i, so after a rescale every old folder still has one owner.

        The last file of each owned folder is cut back to its whole, indexed captures (`repair_file`).
        With a store, every staged file left in the owned folders is then queued for upload, never
        deleted (a held capture may name it, decision 3782); `pump` finishes an upload a crash cut.
        Returns what it changed, one line each.
        """
        done: list[str] = []
        for folder in owned_folders(Path(self._root), self._subtask, parallelism):
            repair = repair_file(folder)
            if repair is not None:
                done.append(str(repair))
            if self._store is not None:
                for warc in sorted(folder.glob("*.warc.gz")):
                    self._backlog.append((warc.relative_to(self._root).as_posix(), True))
                    done.append(f"{warc}: staged by an earlier run, queued for upload")
        return done

    def _check_earlier(self, where: Location, record_id: str) -> tuple[str, float]:
        """The status of a capture this run did not write (or no longer remembers), read back from
        where it was written: whole, with its record id, indexed (local: then synced) or in the store."""
        end = where.offset + where.length
        if self._store is None:
            try:
                with open(where.path, "rb") as handle:
                    handle.seek(where.offset)
                    member = handle.read(where.length)
                indexed = self._index_spans(where.path)
            except OSError:
                return LOST, 0.0
            if member_record_id(member) != record_id or (where.offset, where.length) not in indexed:
                return LOST, 0.0
            return DURABLE, 0.0
        relative = self._store.root.relative_of(where.path)
        if relative is None:
            return LOST, 0.0
        if (Path(self._root) / relative).is_file():
            return PENDING, self._backoff_wait()   # its folder's owner uploads it
        if self._clock() < self._retry_at:
            return PENDING, self._backoff_wait()
        try:
            size = self._store.size(relative, retry=False)
            member = self._store.read(relative, where.offset, where.length, retry=False) if (size or 0) >= end else b""
        except UploadError as exc:
            logging.getLogger(__name__).warning("warc writer %d: store out of reach: %s", self._subtask, exc)
            return PENDING, self._store.policy.upload_retry_initial_s
        return (DURABLE if member and member_record_id(member) == record_id else LOST), 0.0

    def _index_spans(self, path: str) -> frozenset[tuple[int, int]]:
        """(offset, length) of every line of an earlier run's file's index, read (and the pair fsynced:
        the run that wrote it may have been killed before its sync) once per file."""
        spans = self._checked.get(path)
        if spans is None:
            index = path[:-len(".warc.gz")] + ".cdxj"
            raw = Path(index).read_bytes()
            spans = frozenset(span for line in raw.split(b"\n")[:-1] if (span := _index_span(line)) is not None)
            fsync_path(path)
            fsync_path(index)
            self._checked[path] = spans
            while len(self._checked) > self.KNOWN_FILES:
                self._checked.popitem(last=False)
        return spans

    def pending_wait(self, path: str) -> float:
        """Seconds until a pending capture in `path` may be durable: its file's age limit while open,
        else the upload backoff."""
        if path == self.open_path:
            return max(0.0, self._opened_at + self._settings.max_file_age_s - self._clock())
        return self._backoff_wait()

    def _backoff_wait(self) -> float:
        assert self._store is not None
        return max(self._retry_at - self._clock(), self._store.policy.upload_retry_initial_s)

    def _roll_if_due(self) -> None:
        now = self._clock()
        self._finish_if_due(now)
        if self._file is None:
            self._open(_utc_date(now), now)

    def _finish_if_due(self, now: float) -> bool:
        if self._file is not None and (self._size >= self._settings.max_file_bytes
                                       or now - self._opened_at >= self._settings.max_file_age_s
                                       or _utc_date(now) != self._date):
            self.close()
            return True
        return False

    def _open(self, date: str, now: float) -> None:
        relative_folder = f"crawl/{date}/{self._subtask}"
        folder = Path(self._root) / relative_folder
        try:
            folder.mkdir(parents=True, exist_ok=True)
            name = f"{self._take_seq(folder, relative_folder):05d}.warc.gz"
            # "x": never append to (or overwrite) a file an earlier run may have left half-written.
            self._file = open(folder / name, "xb", buffering=0)
            self._index = open(folder / name.replace(".warc.gz", ".cdxj"), "xb", buffering=0)
        except (OSError, UploadError) as exc:
            self._close_handles()
            raise CaptureNotWritten(f"no new WARC file in {folder}: {exc}") from exc
        self._relative = f"{relative_folder}/{name}"
        self._path = str(folder / name) if self._store is None else self._store.root.url(self._relative)
        self._opened_at, self._date = now, date
        self._size = self._index_size = 0
        self._synced = (0, 0)
        info = self._builder.warcinfo(name, self._crawl_fields, date=now)
        try:
            fsync_path(folder)
            _write_all(self._file, info.to_gzip(self._builder.policy.gzip_level))
        except OSError as exc:
            self._close_handles()
            (folder / name).unlink(missing_ok=True)
            (folder / name.replace(".warc.gz", ".cdxj")).unlink(missing_ok=True)
            raise CaptureNotWritten(f"no new WARC file in {folder}: {exc}") from exc
        self._warcinfo_id = info.record_id
        self._size = self._file.tell()
        self._known[self._path] = _FileState(self._relative, written=self._size)
        while len(self._known) > self.KNOWN_FILES:
            self._known.popitem(last=False)
        self._sync()
        if self._file is None:
            raise CaptureNotWritten(f"{self._path}: its first sync failed")

    def _take_seq(self, folder: Path, relative_folder: str) -> int:
        """The next file's sequence number: one past every name staged or stored in the folder."""
        taken = [int(m.group(1)) for m in map(_SEQ_NAME.match, os.listdir(folder)) if m]
        if self._store is None:
            return max(taken, default=-1) + 1
        if relative_folder not in self._next_seq:
            # Staged files are deleted once uploaded: the store knows the numbers already used. This
            # writer alone writes the folder, so one LIST per folder and run is enough.
            if self._failures_in_row and self._clock() < self._retry_at:
                raise UploadError("the object store failed a moment ago; its names are unknown")
            try:
                names = self._store.names(relative_folder, retry=self._failures_in_row == 0)
            except UploadError:
                self._failed_try()
                raise
            taken += [int(m.group(1)) for m in map(_SEQ_NAME.match, names) if m]
            self._next_seq[relative_folder] = max(taken, default=-1) + 1
        seq = max(self._next_seq[relative_folder], max(taken, default=-1) + 1)
        self._next_seq[relative_folder] = seq + 1
        return seq

    def _upload(self, relative: str, recovered: bool, retry: bool) -> None:
        assert self._store is not None
        warc = Path(self._root) / relative
        index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
        index_relative = relative.replace(".warc.gz", ".cdxj")
        if recovered and self._store.size(relative, retry) is not None:
            # A crash fell after the WARC file was stored: only its index may be missing.
            if index.is_file() and self._store.size(index_relative, retry) is None:
                self._store.upload(index, index_relative, retry)
        else:
            size = warc.stat().st_size
            # The index last: an index in the store always describes a WARC file that is there.
            self._store.upload(warc, relative, retry)
            if index.is_file():
                self._store.upload(index, index_relative, retry)
            state = self._known.get(self._store.root.url(relative))
            if state is not None:
                state.durable = state.written = size
                state.final = True
        warc.unlink()
        index.unlink(missing_ok=True)

    def _cut_failed_append(self) -> None:
        """After a failed write: cut both files back to before it; if even that fails, give the file up."""
        assert self._file is not None and self._index is not None
        self.write_failures += 1
        try:
            for handle, size in ((self._file, self._size), (self._index, self._index_size)):
                os.ftruncate(handle.fileno(), size)
                handle.seek(size)
        except OSError:
            self._give_up()

    def _sync(self, force: bool = False) -> None:
        assert self._file is not None and self._index is not None
        if self._settings.fsync or force:
            try:
                os.fsync(self._file.fileno())
                os.fsync(self._index.fileno())
            except OSError as exc:
                logging.getLogger(__name__).error("warc writer %d: fsync of %s failed, unsynced captures "
                                                  "dropped: %s", self._subtask, self._path, exc)
                self.write_failures += 1
                self._size, self._index_size = self._synced
                try:
                    os.ftruncate(self._file.fileno(), self._size)
                    os.ftruncate(self._index.fileno(), self._index_size)
                except OSError:
                    pass
                self._give_up()
                return
        self._synced = (self._size, self._index_size)
        if self._store is None:
            self._known[self._path].durable = self._size
        self.syncs += 1

    def _give_up(self) -> None:
        """Stop writing the open file: what it holds of whole captures up to `_size` stays (staged: is
        uploaded like any finished file); nothing past its last sync becomes durable locally."""
        state = self._known[self._path]
        state.written = self._size
        self._close_handles()
        if self._store is None:
            state.final = True
        else:
            self._backlog.append((self._relative, False))

    def _close_handles(self) -> None:
        for handle in (self._file, self._index):
            if handle is not None:
                handle.close()
        self._file = self._index = None


def _write_all(handle: BinaryIO, data: bytes) -> None:
    """Write all of `data` to an unbuffered file (a short write goes on; a failed one raises)."""
    view = memoryview(data)
    while view:
        written = handle.write(view)
        if not written:
            raise OSError(errno.ENOSPC, "short write")
        view = view[written:]


def _utc_date(moment: float) -> str:
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%d")



@dataclasses.dataclass(frozen=True)
class Repair:
    """What `repair_file` cut from a WARC file left open by a writer that died."""

    path: str
    kept_bytes: int
    dropped_bytes: int
    dropped_index_lines: int

    def __str__(self) -> str:
        return (f"{self.path}: kept {self.kept_bytes} bytes, dropped {self.dropped_bytes} bytes "
                f"and {self.dropped_index_lines} index line(s)")


def owned_folders(root: Path, subtask: int, parallelism: int) -> list[Path]:
    """Subtask folders `root/crawl/{date}/{j}` with j % parallelism == subtask (decision 1600)."""
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} is not within a parallelism of {parallelism}")
    return sorted(folder for folder in (root / "crawl").glob("*/*")
                  if folder.is_dir() and folder.name.isdigit() and int(folder.name) % parallelism == subtask)


def repair_file(folder: Path) -> Repair | None:
    """Cut the last WARC file of `folder` back to what its writer synced (decision 1600); None if whole.

    A capture is synced (and only then are its events emitted) once its records and its index line
    are flushed, index last. So the durable prefix ends after the last indexed record whose gzip
    member is whole, plus the whole unindexed members after it (its request, a metadata record),
    up to the first torn member or the first indexed record without an index line. Lines of the
    index past the cut (or torn) go too. A file left with no whole record is deleted with its index.
    """
    files = sorted((int(m.group(1)), folder / m.group(0)) for m in map(_SEQ_NAME.match, os.listdir(folder)) if m)
    if not files:
        return None
    warc = files[-1][1]
    index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
    raw_index = index.read_bytes() if index.is_file() else b""
    size = warc.stat().st_size
    with warc.open("rb") as handle:
        start, index_keep = _last_whole_indexed(handle, size, raw_index)
        cut = _durable_end(handle, size, start)
    if cut == size and index_keep == len(raw_index):
        return None
    dropped_lines = sum(1 for line in raw_index[index_keep:].split(b"\n") if line)
    if cut == 0:
        warc.unlink()
        index.unlink(missing_ok=True)
    else:
        for path, length in ((warc, cut), (index, index_keep)):
            if path.exists():
                with path.open("r+b") as handle:
                    handle.truncate(length)
                    handle.flush()
                    os.fsync(handle.fileno())
    fsync_path(folder)
    return Repair(str(warc), cut, size - cut, dropped_lines)


def _last_whole_indexed(handle: BinaryIO, size: int, raw_index: bytes) -> tuple[int, int]:
    """(end of the last indexed member that is whole, bytes of the index up to its line); (0, 0) if none."""
    lines = raw_index.split(b"\n")[:-1]   # the piece after the last newline is torn (or empty)
    ends = list(itertools.accumulate(len(line) + 1 for line in lines))
    for line, line_end in zip(reversed(lines), reversed(ends)):
        span = _index_span(line)
        if span is None:
            continue
        offset, length = span
        if offset + length <= size and _member_end(handle, offset, size) == (offset + length, True):
            return offset + length, line_end
    return 0, 0


def _index_span(line: bytes) -> tuple[int, int] | None:
    try:
        entry = json.loads(line.split(b" ", 2)[2])
        return int(entry["offset"]), int(entry["length"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def _durable_end(handle: BinaryIO, size: int, start: int) -> int:
    position = start
    while position < size:
        found = _member_end(handle, position, size)
        if found is None or found[1]:
            break   # torn, or an indexed record without its index line: that capture never finished syncing
        position = found[0]
    return position


def _member_end(handle: BinaryIO, offset: int, size: int) -> tuple[int, bool] | None:
    """(end offset, indexed by default?) of the whole gzip member at `offset`; None if torn or corrupt."""
    handle.seek(offset)
    inflater = zlib.decompressobj(wbits=31)
    head = b""
    position = offset
    while position < size:
        chunk = handle.read(min(1 << 20, size - position))
        try:
            out = inflater.decompress(chunk)
        except zlib.error:
            return None
        if len(head) < _HEAD_BYTES:
            head += out[:_HEAD_BYTES - len(head)]
        if inflater.eof:
            return position + len(chunk) - len(inflater.unused_data), _indexed_head(head)
        position += len(chunk)
    return None


_HEAD_BYTES = 16 * 1024


def _indexed_head(head: bytes) -> bool:
    """`indexed_by_default` read from a record's header block."""
    fields = {}
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields.setdefault(name.strip().lower(), value.strip().decode("latin-1"))
    kind, mime = fields.get(b"warc-type", ""), fields.get(b"content-type", "")
    return kind in ("response", "revisit", "resource", "metadata") and mime.split(";")[0].strip() != CT_WARC_FIELDS


def capture_records(builder: WarcBuilder, result: FetchResult, warcinfo_id: str | None,
                    response_id: str | None = None, packed: PackedBlock | None = None) -> list[WarcRecord]:
    """Response then request record of one archived fetch (WARC 1.1 §6.3-6.4); [] if not archived.

    Both are dated with the fetch's time (`done_at`), the WARC-Date dedup records for revisits. With
    `packed` (decision 1823) the response block is that one and the result's body is not read.
    """
    if not is_archived(result):
        return []
    assert result["http_status"] is not None
    response, request = builder.capture(
        response_url(result), result.get("request_headers", []), result["http_status"],
        result["http_reason"], result["headers"], result["body"] if packed is None else packed,
        date=result["done_at"], ip=result["ip"], truncated=result["truncated"], warcinfo_id=warcinfo_id,
        http_version=warc_http_version(result), response_id=response_id)
    return [response, request]


def revisit_records(builder: WarcBuilder, result: FetchResult, warcinfo_id: str | None,
                    verdict: DedupVerdict, packed: PackedBlock | None = None) -> list[WarcRecord]:
    """Identical-payload revisit then request record of an exact duplicate (WARC 1.1 §6.7.2): the
    payload is not stored again; WARC-Refers-To names the owner's response record (decision 1300)."""
    assert verdict["revisit_of"] is not None and result["http_status"] is not None
    url = response_url(result)
    revisit = builder.revisit_identical(
        url, result["http_status"], result["http_reason"], result["headers"],
        result["body"] if packed is None else packed, RevisitTarget(**verdict["revisit_of"]), date=result["done_at"],
        ip=result["ip"], warcinfo_id=warcinfo_id, http_version=warc_http_version(result))
    request = builder.request(url, result.get("request_headers", []), date=result["done_at"], ip=result["ip"],
                              concurrent_to=revisit.record_id, warcinfo_id=warcinfo_id,
                              http_version=warc_http_version(result))
    return [revisit, request]


def bundle_records(builder: WarcBuilder, bundle: ParsedBundle, warcinfo_id: str | None) -> list[WarcRecord]:
    """The records of one page bundle as dedup decided (decisions 1300-1301): a revisit + request for
    an exact duplicate; else response + request, plus a metadata record (WARC 1.1 §6.6, concurrent
    to the response) for a near-duplicate; plain `capture_records` for bundles dedup did not see."""
    result, verdict, packed = bundle["result"], bundle.get("dedup"), bundle.get("packed")
    if is_not_modified(result):
        return not_modified_records(builder, result, warcinfo_id)
    if verdict is None or not is_archived(result):
        return capture_records(builder, result, warcinfo_id, packed=packed)
    if verdict["revisit_of"] is not None:
        return revisit_records(builder, result, warcinfo_id, verdict, packed)
    records = capture_records(builder, result, warcinfo_id, verdict["response_id"], packed)
    near, simhash = verdict["near"], bundle["simhash"]
    if near is not None and simhash is not None:
        records.append(builder.metadata(response_url(result), metadata_fields(near, simhash),
                                        date=result["done_at"], concurrent_to=records[0].record_id,
                                        warcinfo_id=warcinfo_id))
    return records


def not_modified_records(builder: WarcBuilder, result: FetchResult, warcinfo_id: str | None) -> list[WarcRecord]:
    """Server-not-modified revisit then request record of a recrawl's 304 (WARC 1.1 §6.7.3; decision
    1113): WARC-Refers-To names the previous capture the frontier carried in `request.revisit_of`."""
    assert result["http_status"] is not None
    original = result["request"]["revisit_of"]
    url = response_url(result)
    revisit = builder.revisit_not_modified(
        url, result["http_status"], result["http_reason"], result["headers"],
        RevisitTarget(original["record_id"], original["target_uri"], original["date"], original.get("payload_digest")),
        date=result["done_at"], ip=result["ip"], warcinfo_id=warcinfo_id, http_version=warc_http_version(result))
    request = builder.request(url, result.get("request_headers", []), date=result["done_at"], ip=result["ip"],
                              concurrent_to=revisit.record_id, warcinfo_id=warcinfo_id,
                              http_version=warc_http_version(result))
    return [revisit, request]


def capture_of(bundle: ParsedBundle, records: list[WarcRecord]) -> dict[str, str | None] | None:
    """The full capture a later revisit of this URL refers to (Completion.capture, decision 1113): the
    response record written now, or the capture this fetch's revisit referred to; None if neither."""
    if not records:
        return None
    head = records[0]
    if head.info.warc_type == "response":
        return {"record_id": head.record_id, "target_uri": head.header("WARC-Target-URI"), "date": head.date,
                "payload_digest": head.header("WARC-Payload-Digest")}
    verdict = bundle.get("dedup")
    if verdict is not None and verdict["revisit_of"] is not None:
        return dict(verdict["revisit_of"])
    return bundle["result"]["request"].get("revisit_of")


def is_alias(bundle: ParsedBundle) -> bool:
    """Whether dedup found the page's payload owned by another URL (an exact duplicate, decision 1300)."""
    verdict = bundle.get("dedup")
    return verdict is not None and verdict["duplicate_of"] is not None


def completion_event(bundle: ParsedBundle, capture: dict[str, str | None] | None = None) -> Completion:
    """The `Completion` crawl.outcomes event that ends the page's lease (docs/architecture.md §3), with the
    capture a later 304 revisit refers to (`capture_of`), if any."""
    result = bundle["result"]
    request = result["request"]
    headers = result["headers"]
    status = result["http_status"]
    return Completion(
        v=SCHEMA_VERSION, type="completion", host=request["host"], lease_id=request["lease_id"],
        url=request["url"], fp=request["fp"], fetch_status=result["fetch_status"], http_status=status,
        started_at=result["started_at"], done_at=result["done_at"],
        fetch_ms=round((result["done_at"] - result["started_at"]) * 1000.0, 3), bytes=payload_length(bundle),
        content_hash=bundle["content_hash"], simhash=bundle["simhash"],
        etag=header_value(headers, "etag"), last_modified=header_value(headers, "last-modified"),
        redirect=redirect_target(response_url(result), status, headers),
        retry_after=retry_after_seconds(headers, result["done_at"]) if status in (429, 503) else None,
        ip=result.get("ip"), capture=capture, duplicate=is_alias(bundle),
        near_duplicate=bool((bundle.get("dedup") or {}).get("near")), soft_404=is_soft_404_page(bundle),
        **({"parse_limit": bundle["parse_limit"]} if "parse_limit" in bundle else {}),
    )


def canonical_verdict(bundle: ParsedBundle) -> CanonicalVerdict | None:
    """The verdict on the page's rel=canonical, weighed against what dedup found (decision 1804)."""
    page, verdict = bundle["page"], bundle.get("dedup")
    if page is None or not page["canonical"]:
        return None
    near = verdict["near"] if verdict is not None else None
    return judge_canonical(bundle["result"]["request"]["url"], page["canonical"],
                           verdict["duplicate_of"] if verdict is not None else None,
                           near["url"] if near is not None else None)


def is_soft_404_page(bundle: ParsedBundle) -> bool:
    """Whether parse found the page to be its host's "not found" page served as a 200 (decision 1844)."""
    page = bundle["page"]
    return page is not None and page.get("soft_404") is True


def parsed_page(bundle: ParsedBundle, where: Location) -> ParsedPage | None:
    """The pages.parsed record of a complete 200 page (None for others, noindex pages and soft 404s).

    The page's `optout` verdict is copied when the parse step set it (schemas/pages.parsed.v1.json).
    An exact duplicate of another URL carries `duplicate_of` and neither text nor links: they are
    the owner's (decision 1300). A near-duplicate carries `near_duplicate_of` and all it says.
    """
    result, page = bundle["result"], bundle["page"]
    if page is None or page["noindex"] or is_soft_404_page(bundle) or not is_complete_page(result):
        return None
    request = result["request"]
    assert bundle["content_hash"] is not None and bundle["simhash"] is not None
    verdict = bundle.get("dedup")
    duplicate_of = verdict["duplicate_of"] if verdict is not None else None
    near = verdict["near"] if verdict is not None else None
    record = ParsedPage(
        v=SCHEMA_VERSION, url=request["url"], url_fp=request["fp"], final_url=response_url(result),
        fetched_at=result["done_at"], http_status=200, content_type=header_value(result["headers"], "content-type"),
        content_hash=bundle["content_hash"], simhash=bundle["simhash"], duplicate_of=duplicate_of,
        near_duplicate_of=near["url"] if near is not None else None,
        title=page["title"], lang=page["lang"], text="" if duplicate_of else page["text"],
        links=[] if duplicate_of else [url for url, _ in page["links"]],
        warc_path=where.path, warc_offset=where.offset, warc_length=where.length,
    )
    optout = page.get("optout")
    if optout is not None:  # the parse step's TDM opt-out verdict (decision 1203), also on duplicates
        record["optout"] = optout
    canonical = canonical_verdict(bundle)
    if canonical is not None:   # a hint weighed against dedup's finding (decision 1804)
        record["canonical"] = canonical.as_record()
    if "parse_limit" in bundle:   # text and links are those before a parse cap (decision 3700)
        record["parse_limit"] = bundle["parse_limit"]
    return record


def hint_fields(lastmod: int | None, priority: float | None, changefreq: str | None) -> dict[str, Any] | None:
    """What a sitemap says about a page it lists, as UrlEntry fields (only those it gave; decisions 1812,
    1813); the frontier reads them back with udfs.frontier_logic.sitemap_hints."""
    hints = {name: value for name, value in (("lastmod", lastmod), ("sitemap_priority", priority),
                                             ("changefreq", changefreq)) if value is not None}
    return hints or None


def as_sitemap_fields(request: FetchRequest, depth: int) -> dict[str, Any] | None:
    """The UrlEntry fields that make a URL a sitemap's successor (an index's sitemap, a redirected
    sitemap's target): a sitemap at `depth`, for the host that submitted this one (decisions 1812, 1816);
    None when the request is no sitemap."""
    if request.get("sitemap") is not True:
        return None
    fields: dict[str, Any] = {"sitemap": True, "depth": depth}
    if isinstance(request.get("sitemap_for"), str):
        fields["sitemap_for"] = request["sitemap_for"]
    return fields


def discovered_batches(bundle: ParsedBundle, recent: RecentUrls | None = None) -> list[DiscoveredBatch]:
    """New URLs grouped by target host (one event per host): followable links, redirect and refresh targets.

    Links marked nofollow (or all links of a nofollow page) are dropped; depth is the page's + 1.
    An exact duplicate of another URL adds none: its owner's links were discovered (decision 1300); nor
    does a soft 404 (its links are the error page's, decision 1844). A rel=canonical the page names on its
    own site (an unverified hint) is sent like a link (decision 1804), naming the page in `canonical_of`
    so the frontier can revise the page's verdict if the canonical is broken (decision 1820); when the
    page also links to it, the one entry carries both.
    With `recent`, a link this writer sent within its window is not sent again (decision 1607);
    redirect and refresh targets and the canonical always are (the frontier caps redirect chains).
    A sitemap (decision 1812) sends the pages it lists on its host, and on the host whose robots.txt
    submitted it (`sitemap_for`, decision 1816), with their lastmod, priority and changefreq (those on
    other hosts like links) and, for an index, the sitemaps it lists, which are fetched as sitemaps at
    the index's depth, like a redirected sitemap's target, for the same submitting host; an unchanged
    sitemap (an exact duplicate of its last capture) sends nothing new.
    At most MAX_URLS_PER_BATCH URLs go in one event, so a 50,000-URL sitemap stays under Kafka's
    default message size.
    """
    result, page = bundle["result"], bundle["page"]
    request = result["request"]
    depth = request.get("depth", 0) + 1
    hops = request.get("redirect_hops", 0) + 1   # for redirect targets: the frontier caps chains
    # (url, source, priority, written form, fields the entry adds or overrides)
    found: list[tuple[str, str, int, str | None, dict[str, Any] | None]] = []
    final_url = response_url(result)
    redirect = redirect_target(final_url, result["http_status"], result["headers"])
    as_sitemap = as_sitemap_fields(request, depth - 1)
    if redirect is not None:
        found.append((redirect, "redirect", PRIORITY_REDIRECT, redirect_written(final_url, result["headers"], redirect),
                      as_sitemap))
    sitemap = bundle.get("sitemap")
    if sitemap is not None and not is_alias(bundle):
        found += [(url, "sitemap", PRIORITY_SITEMAP, None, as_sitemap) for url in sitemap["sitemaps"]]
        found += [(url, "sitemap", PRIORITY_LINK, None, hint_fields(*hints)) for url, *hints in sitemap["pages"]]
        found += [(url, "link", PRIORITY_LINK, None, None) for url in sitemap.get("elsewhere", ())]
    if page is not None and not is_alias(bundle) and not is_soft_404_page(bundle):
        written = page.get("written", {})
        if page["refresh"]:
            found.append((page["refresh"], "redirect", PRIORITY_REDIRECT, None, None))
        if not page["nofollow"]:
            found += [(url, "link", PRIORITY_LINK, written.get(url), None) for url, nofollow in page["links"]
                      if not nofollow]
        canonical = canonical_verdict(bundle)
        if canonical is not None and canonical.trust == HINT:   # crawled, so a broken one shows (decisions 1804, 1820)
            found.append((canonical.url, "link", PRIORITY_LINK, None, {"canonical_of": request["url"]}))
    by_host: dict[str, dict[int, UrlEntry]] = {}
    for url, source, priority, as_written, extra in found:
        try:
            host = host_key(url)
        except ValueError:
            continue   # not http(s): normalize_url let through a scheme the frontier cannot fetch
        fp = url_fp(url)
        claim = extra is not None and "canonical_of" in extra   # never lost to the window: it names this page
        if recent is not None and source == "link" and not claim and not recent.first_time(fp, result["done_at"]):
            continue
        entry = UrlEntry(url=url, fp=fp, depth=depth, priority=priority, source=source)
        if source == "redirect":
            entry["redirect_hops"] = hops
        if as_written is not None:
            entry["written"] = as_written
        if extra is not None:
            entry.update(extra)   # type: ignore[typeddict-item]
        kept = by_host.setdefault(host, {}).setdefault(fp, entry)
        if claim and kept is not entry:   # the page links to its canonical too: its entry says both
            kept["canonical_of"] = entry["canonical_of"]
    batches = []
    for host, entries in by_host.items():
        urls = list(entries.values())
        for start in range(0, len(urls), MAX_URLS_PER_BATCH):
            batches.append(DiscoveredBatch(v=SCHEMA_VERSION, type="discovered", host=host,
                                           urls=urls[start:start + MAX_URLS_PER_BATCH],
                                           from_host=request["host"], from_fp=request["fp"],
                                           found_at=result["done_at"]))
    return batches


def events_for(bundle: ParsedBundle, where: Location | None,
               capture: dict[str, str | None] | None = None, recent: RecentUrls | None = None) -> list[Event]:
    """Every event one archived (or unarchivable) page fetch produces, as (topic, key, value)."""
    events: list[Event] = []
    page = parsed_page(bundle, where) if where is not None else None
    if page is not None:
        events.append((TOPIC_PAGES, str(page["url_fp"]), encode(dict(page))))
    for batch in discovered_batches(bundle, recent):
        events.append((TOPIC_FRONTIER, batch["host"], encode(dict(batch))))
    completion = completion_event(bundle, capture)
    events.append((TOPIC_OUTCOMES, completion["host"], encode(dict(completion))))
    return events


# The fetch status of a completion whose capture could not be made durable (disk full, a capture lost
# with a machine's page cache, a staged file gone): the fetch happened, its record did not survive, so
# the frontier must fetch the URL again without charging the URL or its host (decision 3781).
NOT_ARCHIVED = FetchStatus.NOT_ARCHIVED.value


def not_archived(events: list[Event]) -> list[Event]:
    """The events of a capture that will never be durable: no publication (it would point at nothing),
    its discoveries as they were, and its completion with fetch status `not_archived` and no capture."""
    out: list[Event] = []
    for topic, key, value in events:
        if topic == TOPIC_PAGES:
            continue
        if topic == TOPIC_OUTCOMES:
            completion = compact_json.loads(value)
            if completion.get("type") == "completion":
                completion.update(fetch_status=NOT_ARCHIVED, capture=None)
                value = encode(completion)
        out.append((topic, key, value))
    return out


HELD_ROW_VERSION = 1


@dataclasses.dataclass(frozen=True)
class HeldCapture:
    """A capture whose events wait for its records to be durable. Kept in the writer's keyed state as
    a plain row of built-in values (`to_row`), so checkpoints and savepoints carry it and a restored
    writer releases it (decision 3780): `run` names the writer run that wrote it, `record_id` its
    first record, so a later run can check it is still whole where it was written. `lease` is the
    page lease its completion ends, while this run extends it (decision 3783); not in the row: a restored
    capture's lease was the earlier run's, which the frontier lets expire uncharged (decision 3790)."""

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


class PageArchiver:
    """Archives page fetches and hands back each one's events once its records are durable (invariant 5).

    Local files are durable once synced. With `group` (group commit, decision 1832) a capture is not
    synced when written: `archive` returns it as a `HeldCapture` and the caller asks `settle` about it
    once `group_commit` has passed; the first such question syncs every capture written so far. With
    an object store (`hold`) a capture is durable only once its file is uploaded (decision 0504), which
    `settle` also drives (roll when due, upload, back off after a failure). Events of fetches that
    archive nothing never wait; a capture that could not be written, or will never be durable, ends
    with `not_archived` events (decision 3781).
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
                 warc_policy: WarcPolicy = WarcPolicy(), crawl_fields: tuple[tuple[str, str], ...] = (),
                 storage: StoragePolicy = StoragePolicy(),
                 discovery: DiscoveryPolicy = DEFAULT_DISCOVERY_POLICY,
                 dedup: DedupPolicy | None = None) -> None:
        if is_s3_root(root):
            parse_s3_root(root)   # fail when the job is built, not in a worker
        self._root = root
        self._settings = settings
        self._warc_policy = warc_policy
        self._crawl_fields = crawl_fields
        self._storage = storage
        self._discovery = discovery
        self._dedup = dedup
        self._archiver: PageArchiver | None = None
        self._builder = WarcBuilder(warc_policy)
        self._counters: dict[str, Any] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        subtask = runtime_context.get_index_of_this_subtask()
        if is_s3_root(self._root):
            staged = WarcFileSettings(self._storage.max_file_bytes, self._storage.max_file_age_s, fsync=False)
            files = WarcFiles(self._storage.staging_dir, subtask, self._builder, staged,
                              crawl_fields=self._crawl_fields,
                              store=ObjectStore(self._storage, parse_s3_root(self._root)))
        else:
            files = WarcFiles(self._root, subtask, self._builder, self._settings, crawl_fields=self._crawl_fields)
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
        self._join: VerdictJoin[ParsedBundle, DedupVerdict] = VerdictJoin()   # in memory: decision 1616
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
