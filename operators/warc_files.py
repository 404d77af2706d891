"""The WARC files of one writer subtask: opening, appending, syncing, rolling and uploading them.

Records go to `crawl/{date}/{subtask}/{name}.warc.gz` under the WARC root (`udfs.warc_names`: the crawl,
the moment, the folder's serial number, the machine), their CDXJ lines beside them in `{name}.cdxj`, and are fsynced: at once, or with group commit once for the captures of an interval
(decision 1832). A file rolls at a size, age or date limit; a restarted writer never appends to an
existing file, it repairs the files a dead writer left (`operators.warc_repair`) and starts the next
serial number. A capture that cannot be written (disk full) raises `CaptureNotWritten` and leaves
nothing behind; one that will never be durable is reported LOST (decision 3781).

With an object store (an `s3://bucket/prefix` root, decision 0504) files are written to the staging
directory, rolled at its smaller limits and uploaded whole once finished; a capture is durable only
once its file is stored. A failed upload leaves the file staged and is tried again with a bounded
exponential backoff; staged files are deleted only once stored, and a restarted writer uploads those
an earlier run left (decision 3782).
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from durable.files import fsync_path
from durable.object_store import ObjectStore, UploadError
from operators.warc_repair import index_span, owned_folders, repair_file
from udfs.warc import WarcBuilder, WarcRecord, cdxj_line, indexed_by_default, member_record_id
from udfs.warc_capture import Location
from udfs.warc_names import index_name, warc_file_name, warc_file_serial


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


class CaptureNotWritten(Exception):
    """A capture's records could not be written (a full disk, an I/O error, or the object store out of
    reach when a new file needs its sequence number): nothing of it is left in the file, and the
    writer ends its fetch as not archived."""


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
    """Appends gzip members to rolling files `crawl/{date}/{subtask}/{name}.warc.gz` under `root`, named
    by `udfs.warc_names` from `prefix` (the crawl's name), the moment, the serial and `hostname`.

    Beside each file, `{name}.cdxj` indexes its records in file order (decision 0503 lines, `filename`
    relative to `root`); it is synced with the WARC file. Sort the lines when merging indexes.
    A capture's records and index lines go to the OS in one write each, unbuffered: a write that fails
    (disk full) is cut back off both files and raises `CaptureNotWritten`; the file stays usable.
    A failed fsync cuts the file back to its last sync and closes it (the page cache of what it did
    not sync may be gone).

    With a `store`, `root` is the local staging directory: a finished file is fsynced and queued for
    upload; `pump` uploads the queue (file, then index) and deletes the staged copies once stored. A
    failed upload leaves the queue as it is and is tried again after a bounded exponential backoff
    (`StoragePolicy.upload_retry_s`); locations name the s3:// URL.
    """

    KNOWN_FILES = 1000   # files of this run whose state is kept; an older one is checked on disk

    def __init__(self, root: str, subtask: int, builder: WarcBuilder, settings: WarcFileSettings = WarcFileSettings(),
                 clock: Callable[[], float] = time.time, crawl_fields: tuple[tuple[str, str], ...] = (),
                 store: ObjectStore | None = None, prefix: str = "crawl", hostname: str = "localhost") -> None:
        self._root = root
        self._prefix, self._hostname = prefix, hostname
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
        self._next_serial: dict[str, int] = {}          # the next serial number per folder this run wrote
        self._listed: set[str] = set()                  # with a store: folders whose stored names were read
        self._failures_in_row = 0
        self._retry_at = 0.0
        self.syncs = 0             # how many times the files were synced
        self.write_failures = 0    # appends and syncs that failed (disk full, I/O error)
        self.upload_failures = 0   # upload tries that failed

    def append(self, build: Callable[[str | None], list[WarcRecord]], sync: bool = True) -> list[Location]:
        """Write the records `build(warcinfo_id)` returns (rolling first if due); with `sync`, fsync them.
        Whether they are durable is `status`'s answer: at once when synced (unless the fsync failed),
        later with `sync=False` (group commit) or with a store (the upload).

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
        """Clean up after writers that stopped without closing their file (`operators.warc_repair`); call it
        before the first `append`. This writer (subtask i of `parallelism`) owns the subtask folders
        j with j % parallelism == i, so after a rescale every old folder still has one owner.

        The last file of each owned folder is cut back to its whole, indexed captures (`repair_file`).
        With a store, every staged file left in the owned folders is then queued for upload, never
        deleted (a held capture may name it); `pump` finishes an upload a crash cut.
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
            index = index_name(path)
            raw = Path(index).read_bytes()
            spans = frozenset(span for line in raw.split(b"\n")[:-1] if (span := index_span(line)) is not None)
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
            name = warc_file_name(self._prefix, now, self._take_serial(folder, relative_folder), self._hostname,
                                  self._subtask)
            # "x": never append to (or overwrite) a file an earlier run may have left half-written.
            self._file = open(folder / name, "xb", buffering=0)
            self._index = open(folder / index_name(name), "xb", buffering=0)
        except OSError as exc:
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
            (folder / index_name(name)).unlink(missing_ok=True)
            raise CaptureNotWritten(f"no new WARC file in {folder}: {exc}") from exc
        self._warcinfo_id = info.record_id
        self._size = self._file.tell()
        self._known[self._path] = _FileState(self._relative, written=self._size)
        while len(self._known) > self.KNOWN_FILES:
            self._known.popitem(last=False)
        self._sync()
        if self._file is None:
            raise CaptureNotWritten(f"{self._path}: its first sync failed")

    def _take_serial(self, folder: Path, relative_folder: str) -> int:
        """The next file's serial number: one past every file staged in the folder, every one this run
        numbered, and (with a store) every one stored there.

        Staged files are deleted once uploaded, so the store knows numbers a new run has not seen. This
        writer alone writes the folder: one LIST per folder and run is enough. A store out of reach does
        not keep a file from opening (its captures wait for the upload like any other): the number is
        then the local one and the LIST is asked again at the next file. The name stays unique without
        it, since it holds the moment to the millisecond and the writer (udfs.warc_names)."""
        taken = [serial for name in os.listdir(folder) if (serial := warc_file_serial(name)) is not None]
        serial = max(max(taken, default=-1) + 1, self._next_serial.get(relative_folder, 0))
        if self._store is not None and relative_folder not in self._listed:
            stored = self._stored_serials(relative_folder)
            if stored is not None:
                self._listed.add(relative_folder)
                serial = max([serial, *(n + 1 for n in stored)])
        self._next_serial[relative_folder] = serial + 1
        return serial

    def _stored_serials(self, relative_folder: str) -> list[int] | None:
        """The serial numbers of the files stored in the folder; None while the store is out of reach
        (it failed a moment ago, or fails now: counted as a failed try, with its backoff)."""
        assert self._store is not None
        if self._failures_in_row and self._clock() < self._retry_at:
            return None
        try:
            names = self._store.names(relative_folder, retry=self._failures_in_row == 0)
        except UploadError as exc:
            wait = self._failed_try()
            logging.getLogger(__name__).warning(
                "warc writer %d: the store's file names are out of reach (next try in %.1f s), numbering "
                "%s from the staged files: %s", self._subtask, wait, relative_folder, exc)
            return None
        return [serial for name in names if (serial := warc_file_serial(name)) is not None]

    def _upload(self, relative: str, recovered: bool, retry: bool) -> None:
        assert self._store is not None
        warc = Path(self._root) / relative
        index = warc.with_name(index_name(warc.name))
        index_relative = index_name(relative)
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
