"""The WARC writer: archives each page fetch, then tells the rest of the crawl about it.

Pipeline position (ARCHITECTURE.md §1): parse → **WARC writer** → pages.parsed, crawl.frontier
(discoveries) and crawl.outcomes (completions); the dedup verdicts of the pages reach it on a second
input, keyed like the pages, and each page waits for its own (decision 1616).
For each ParsedBundle it appends a response + request record pair (one gzip member each, built by
`udfs.warc`; as the dedup verdict says, a revisit instead of the response for an exact duplicate and
a metadata record for a near-duplicate: decisions 1300-1301) to `crawl/{date}/{subtask}/{seq}.warc.gz`
under the WARC root (CDXJ lines beside it in `{seq}.cdxj`), flushes and fsyncs (one fsync for the
captures of `warc.group_commit_ms`, decision 1832), and only then emits (invariant 5: every published
page points at a durable record):
- a `Completion` for the page's frontier (always, whatever happened),
- a `ParsedPage` on pages.parsed (200 pages not marked noindex) with warc_path/offset/length,
- one `DiscoveredBatch` per target host of its followable links (+ redirect/refresh targets), depth+1.
Files roll at a size or age limit (checked when a record arrives); a restarted writer never appends
to an existing file, it starts the next sequence number. Before it does, it repairs what a writer
killed mid-file left behind (decision 1600): the last file of each folder it owns is cut back to its
last complete, indexed capture (a torn gzip member or an unindexed capture goes, with any index line
past the cut); synced captures stay, since their events may already be published. Captures that still
waited for their group's fsync were flushed to the OS when written (decision 1832): a killed process
leaves them complete, and a machine crash leaves what the disk kept, cut the same way.

With an `s3://bucket/prefix` root (decision 0504) files are written to `[storage] staging_dir`, rolled
at its smaller limits and uploaded whole on roll; a capture is durable only once its file is uploaded,
so the events of the open file's captures are held until then (published warc_path = the s3:// URL).
The roll is checked when an element arrives: an idle writer holds its events until the next one.
After a crash, staged files never uploaded are deleted (no event names them) and an upload cut
between the WARC file and its index is finished.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import re
import time
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from pyflink.common import Types
from pyflink.datastream.functions import KeyedCoProcessFunction, RuntimeContext

from crawler.durable import fsync_path
from operators.cpu import register_worker_cpu
from operators.dedup import Probe, join_key, needs_dedup, unpaired_verdict
from operators.heap import freeze_startup_heap, thaw_heap
from operators.object_store import ObjectStore
from operators.parse import ParsedBundle, payload_length
from udfs.dedup import DedupPolicy, DedupVerdict, metadata_fields
from udfs.canonical import HINT, CanonicalVerdict, judge_canonical
from udfs.fetch_status import (header_value, is_archived, is_complete_page, is_not_modified, redirect_target,
                               redirect_written, retry_after_seconds, warc_http_version)
from udfs.records import (PRIORITY_SITEMAP, SCHEMA_VERSION, TOPIC_FRONTIER, TOPIC_OUTCOMES, TOPIC_PAGES, Completion,
                          DiscoveredBatch, FetchRequest, FetchResult, FetchStatus, ParsedPage, UrlEntry, encode,
                          response_url)
from udfs.recent import DEFAULT_DISCOVERY_POLICY, DiscoveryPolicy, RecentUrls
from udfs.storage import StoragePolicy, is_s3_root, parse_s3_root
from udfs.urls import host_key, url_fp
from udfs.verdict_join import VerdictJoin
from udfs.warc import (CT_WARC_FIELDS, PackedBlock, RevisitTarget, WarcBuilder, WarcPolicy, WarcRecord, cdxj_line,
                       indexed_by_default)

# Discovered URL priorities (0 highest .. 9): a redirect target is the content the seed meant.
PRIORITY_REDIRECT = 4
PRIORITY_LINK = 5
MAX_URLS_PER_BATCH = 1000   # URLs per discovered event: a 50,000-URL sitemap is 50 events of ~100 KB
_SEQ_NAME = re.compile(r"^(\d+)\.warc\.gz$")

Event = tuple[str, str, bytes]          # (topic, key, value)
EVENT_TYPE = Types.TUPLE([Types.STRING(), Types.STRING(), Types.PRIMITIVE_ARRAY(Types.BYTE())])


@dataclasses.dataclass(frozen=True)
class WarcFileSettings:
    """When a WARC file is closed and the next one started (ARCHITECTURE.md §3: about 1 GB files)."""

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


class WarcFiles:
    """Appends gzip members to rolling files `crawl/{date}/{subtask}/{seq}.warc.gz` under `root`.

    Beside each file, `{seq}.cdxj` indexes its records in file order (decision 0503 lines, `filename`
    relative to `root`); it is synced with the WARC file. Sort the lines when merging indexes.

    With a `store`, `root` is the local staging directory: a finished file and its index are uploaded
    under the store's prefix (same relative path), then deleted locally; locations name the s3:// URL.
    """

    def __init__(self, root: str, subtask: int, builder: WarcBuilder, settings: WarcFileSettings = WarcFileSettings(),
                 clock: Callable[[], float] = time.time, crawl_fields: tuple[tuple[str, str], ...] = (),
                 store: ObjectStore | None = None) -> None:
        self._root = root
        self._store = store
        # Set when an upload failed: the held events of that file must never be released, so stop here.
        self._failed: Exception | None = None
        self._subtask = subtask
        self._builder = builder
        self._settings = settings
        self._clock = clock
        self._crawl_fields = crawl_fields
        self._file: BinaryIO | None = None
        self._index: TextIO | None = None
        self._path = ""
        self._relative = ""
        self._opened_at = 0.0
        self._date = ""
        self._warcinfo_id: str | None = None
        self.syncs = 0   # how many times the files were synced: a record appended before a rise is durable

    def append(self, build: Callable[[str | None], list[WarcRecord]], sync: bool = True) -> list[Location]:
        """Write the records `build(warcinfo_id)` returns (rolling first if due); durable when this returns,
        or with `sync=False` once `syncs` rises (group commit, decision 1832), or with a store once their
        file is uploaded (`open_path` moves on).

        `build` runs after any roll so records name the warcinfo of the file they land in.
        """
        self._check_usable()
        self._roll_if_due()
        assert self._file is not None
        locations = [self._write(record) for record in build(self._warcinfo_id)]
        if locations and sync:
            self._sync()
        elif locations:
            # Out of the process at once even unsynced: a writer that dies (or is cancelled) later must
            # not flush old records behind a file its successor has already repaired.
            self._flush()
        return locations

    def sync(self) -> None:
        """Make every record appended so far durable (a no-op between files: closing synced them)."""
        if self._file is not None:
            self._sync()

    @property
    def open_path(self) -> str | None:
        """The published path of the file records are appended to now, or None between files."""
        return self._path if self._file is not None else None

    def close(self) -> None:
        """Flush, fsync and close the current file; with a store, upload it and its index, then delete them."""
        if self._file is not None and self._index is not None:
            self._sync()
            self._file.close()
            self._index.close()
            self._file = self._index = None
            if self._store is not None:
                try:
                    self._upload()
                except Exception as exc:
                    self._failed = exc
                    raise

    def finish_if_due(self) -> bool:
        """Close (with a store: upload) the current file if it reached its size, age or date limit."""
        self._check_usable()
        return self._finish_if_due(self._clock())

    def recover(self, parallelism: int) -> list[str]:
        """Clean up after writers that stopped without closing their file (decision 1600); call it
        before the first `append`. This writer (subtask i of `parallelism`) owns the subtask folders
        j with j % parallelism == i, so after a rescale every old folder still has one owner.

        Local root: the last file of each owned folder is cut back to its synced prefix (`repair_file`).
        With a store: staged files left in the owned folders are deleted, after finishing the upload
        of an index whose WARC file is already stored. Returns what it changed, one line each.
        """
        done: list[str] = []
        for folder in owned_folders(Path(self._root), self._subtask, parallelism):
            if self._store is None:
                repair = repair_file(folder)
                if repair is not None:
                    done.append(str(repair))
            else:
                done += self._drop_staged(folder)
        return done

    def _drop_staged(self, folder: Path) -> list[str]:
        assert self._store is not None
        relative_folder = folder.relative_to(self._root).as_posix()
        stored = set(self._store.names(relative_folder))
        done = []
        for warc in sorted(folder.glob("*.warc.gz")):
            index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
            if warc.name in stored:
                if index.name not in stored and index.is_file():
                    self._store.upload(index, f"{relative_folder}/{index.name}")
                done.append(f"{warc}: already stored, staged copy deleted")
            else:
                done.append(f"{warc}: never uploaded, discarded (its events were held, none was published)")
            warc.unlink()
            index.unlink(missing_ok=True)
        return done

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise RuntimeError(f"an earlier upload failed ({self._failed}); this writer cannot go on") from self._failed

    def _roll_if_due(self) -> None:
        now = self._clock()
        self._finish_if_due(now)
        if self._file is None:
            self._open(_utc_date(now), now)

    def _finish_if_due(self, now: float) -> bool:
        if self._file is not None and (self._file.tell() >= self._settings.max_file_bytes
                                       or now - self._opened_at >= self._settings.max_file_age_s
                                       or _utc_date(now) != self._date):
            self.close()
            return True
        return False

    def _open(self, date: str, now: float) -> None:
        relative_folder = f"crawl/{date}/{self._subtask}"
        folder = Path(self._root) / relative_folder
        folder.mkdir(parents=True, exist_ok=True)
        names = [p.name for p in folder.iterdir()]
        if self._store is not None:
            # Staged files are deleted once uploaded: the store knows the numbers already used.
            names += self._store.names(relative_folder)
        taken = [int(m.group(1)) for m in map(_SEQ_NAME.match, names) if m]
        name = f"{max(taken, default=-1) + 1:05d}.warc.gz"
        # "x": never append to (or overwrite) a file an earlier run may have left half-written.
        self._file = open(folder / name, "xb")
        self._index = open(folder / name.replace(".warc.gz", ".cdxj"), "x", encoding="utf-8")
        self._relative = f"{relative_folder}/{name}"
        self._path = str(folder / name) if self._store is None else self._store.root.url(self._relative)
        self._opened_at, self._date = now, date
        fsync_path(folder)
        info = self._builder.warcinfo(name, self._crawl_fields, date=now)
        self._warcinfo_id = info.record_id
        self._write(info)
        self._sync()

    def _write(self, record: WarcRecord) -> Location:
        assert self._file is not None
        member = record.to_gzip(self._builder.policy.gzip_level)
        offset = self._file.tell()
        self._file.write(member)
        if indexed_by_default(record.info):
            assert self._index is not None
            self._index.write(cdxj_line(record.info, self._relative, offset, len(member)) + "\n")
        return Location(self._path, offset, len(member))

    def _upload(self) -> None:
        assert self._store is not None
        warc = Path(self._root) / self._relative
        index = warc.with_name(warc.name.replace(".warc.gz", ".cdxj"))
        # The index last: an index in the store always describes a WARC file that is there.
        self._store.upload(warc, self._relative)
        self._store.upload(index, self._relative.replace(".warc.gz", ".cdxj"))
        warc.unlink()
        index.unlink()

    def _flush(self) -> None:
        assert self._file is not None and self._index is not None
        self._file.flush()
        self._index.flush()

    def _sync(self) -> None:
        self._flush()
        assert self._file is not None and self._index is not None
        if self._settings.fsync:
            os.fsync(self._file.fileno())
            os.fsync(self._index.fileno())
        self.syncs += 1


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
    """The `Completion` crawl.outcomes event that ends the page's lease (ARCHITECTURE.md §3), with the
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
    """Whether parse found the page to be its host's "not found" page served as a 200 (decision 1803)."""
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
    does a soft 404 (its links are the error page's, decision 1803). A rel=canonical the page names on its
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


class PageArchiver:
    """Archives page fetches and hands back each one's events once its records are durable (invariant 5).

    Local files are durable once synced. With a `sync_interval_s`, captures share their fsync (group
    commit, decision 1832): each capture's events wait until the files are synced, which happens when
    the oldest waiting capture is that old at the next element, at `flush` (the writer's timer), or
    when its file closes; with none, each capture is synced as it is appended and its events go out
    at once. With an object store a capture is durable only when its file is uploaded: its events
    are held until the file is finished (size, age or date limit, checked after each element) and
    then released in arrival order. Events of fetches that archive nothing never wait.
    """

    def __init__(self, files: WarcFiles, builder: WarcBuilder, *, hold: bool, recent: RecentUrls | None = None,
                 sync_interval_s: float = 0.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._files = files
        self._builder = builder
        self._hold = hold
        self.recent = recent
        self._held: list[tuple[str, list[Event]]] = []
        self._group = sync_interval_s > 0 and not hold
        self._sync_interval_s = sync_interval_s
        self._clock = clock
        self._unsynced: list[tuple[int, float, list[Event]]] = []   # (files.syncs, clock) when appended, events

    @property
    def held_captures(self) -> int:
        """Captures whose events wait for their file to be uploaded, or for the next sync."""
        return len(self._held) + len(self._unsynced)

    @property
    def awaiting_sync(self) -> bool:
        """Whether some capture's events wait for the next sync (the writer then keeps a timer set)."""
        return bool(self._unsynced)

    def archive(self, bundle: ParsedBundle) -> tuple[list[Location], list[Event]]:
        """Write the fetch's records (if archived); its locations and the events now safe to emit."""
        result = bundle["result"]
        written: list[WarcRecord] = []

        def build(warcinfo_id: str | None) -> list[WarcRecord]:
            written[:] = bundle_records(self._builder, bundle, warcinfo_id)
            return written
        locations = self._files.append(build, sync=not self._group) if is_archived(result) else []
        where = locations[0] if locations else None
        events = events_for(bundle, where, capture_of(bundle, written), self.recent)
        if self._hold and where is not None:
            self._held.append((where.path, events))
            events = []
        elif self._group and where is not None:
            self._unsynced.append((self._files.syncs, self._clock(), events))
            events = []
        self._files.finish_if_due()
        if self._unsynced and self._clock() - self._unsynced[0][1] >= self._sync_interval_s:
            self._files.sync()
        return locations, self._release() + self._synced() + events

    def flush(self) -> list[Event]:
        """Sync now if some capture waits for it; the events that became safe to emit."""
        if self._unsynced:
            self._files.sync()
        return self._synced()

    def close(self) -> None:
        """Finish the open file; events still held are dropped (their leases expire and are retried)."""
        self._files.close()
        self._held.clear()
        self._unsynced.clear()

    def _release(self) -> list[Event]:
        """The events of captures whose file is no longer the open one (uploaded)."""
        open_path = self._files.open_path
        ready, self._held = _parted(self._held, lambda held: held[0] != open_path)
        return [event for *_, events in ready for event in events]

    def _synced(self) -> list[Event]:
        """The events of captures appended before the last sync."""
        syncs = self._files.syncs
        ready, self._unsynced = _parted(self._unsynced, lambda unsynced: unsynced[0] < syncs)
        return [event for *_, events in ready for event in events]


def _parted(entries: list[Any], ready: Callable[[Any], bool]) -> tuple[list[Any], list[Any]]:
    """`entries` split into those `ready` lets go and the rest, each in arrival order."""
    gone = [entry for entry in entries if ready(entry)]
    return gone, [entry for entry in entries if not ready(entry)] if gone else entries


class WarcWriterFunction(KeyedCoProcessFunction):
    """ParsedBundle (first input) + its dedup verdict (second input) → archived capture → (topic, key,
    value) events; one file series per subtask. Both inputs are keyed by `operators.dedup.join_key`.

    A page dedup judges (`dedup` given and `needs_dedup`) waits in memory for its verdict, or its
    verdict for it (decision 1616, `udfs.verdict_join`); any other page is archived when it arrives.
    For an `s3://` root, files are staged under `storage.staging_dir` with its roll limits (no per-record
    fsync: durability comes from the upload) and events wait for the upload (decision 0504).
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
                                      sync_interval_s=self._warc_policy.group_commit_ms / 1000)
        self._sync_timer_set = False
        self._repeats_counted = 0
        group = runtime_context.get_metrics_group().add_group("warc")
        group.counter("recovered_files").inc(len(recovered))
        self._counters = {name: group.counter(name)
                          for name in ("captures", "bytes", "published", "frontier_events", "links_not_resent",
                                       "unpaired_pages", "dropped_verdicts")}
        self._join: VerdictJoin[ParsedBundle, DedupVerdict] = VerdictJoin()   # in memory: decision 1616
        self._join_counted = (0, 0)
        group.gauge("held_captures", lambda: self._archiver.held_captures if self._archiver else 0)
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
        if self._dedup is None or not needs_dedup(value, self._dedup):
            yield from self._archive(value)
        else:
            yield from self._archive_pairs(self._join.page(join_key(value), value))
        self._keep_sync_timer(ctx)

    def process_element2(self, value: Probe, ctx: KeyedCoProcessFunction.Context) -> Iterator[Event]:
        yield from self._archive_pairs(self._join.verdict(value["key"], value["dedup"]))
        self._keep_sync_timer(ctx)

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext) -> Iterator[Event]:
        """The group commit's deadline (decision 1832): sync and emit what waited for it."""
        assert self._archiver is not None
        self._sync_timer_set = False
        yield from self._emit(self._archiver.flush())

    def _keep_sync_timer(self, ctx: KeyedCoProcessFunction.Context) -> None:
        """While a capture waits for its group's fsync, a timer is set to sync it even if no element
        comes (one at a time: a group synced early leaves the next to the same timer, so none waits
        more than twice `group_commit_ms`)."""
        assert self._archiver is not None
        if self._archiver.awaiting_sync and not self._sync_timer_set:
            timers = ctx.timer_service()
            timers.register_processing_time_timer(timers.current_processing_time() + self._warc_policy.group_commit_ms)
            self._sync_timer_set = True

    def _archive_pairs(self, pairs: list[tuple[ParsedBundle, DedupVerdict | None]]) -> Iterator[Event]:
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
            yield from self._archive(bundle)

    def _archive(self, value: ParsedBundle) -> Iterator[Event]:
        assert self._archiver is not None
        self._counters.get(value["result"]["fetch_status"], self._counters[FetchStatus.ERROR.value]).inc()
        locations, events = self._archiver.archive(value)
        recent = self._archiver.recent
        if recent is not None and recent.repeats != self._repeats_counted:
            self._counters["links_not_resent"].inc(recent.repeats - self._repeats_counted)
            self._repeats_counted = recent.repeats
        if locations:
            self._counters["captures"].inc()
            self._counters["bytes"].inc(sum(loc.length for loc in locations))
        yield from self._emit(events)

    def _emit(self, events: list[Event]) -> Iterator[Event]:
        for event in events:
            self._counters["published" if event[0] == TOPIC_PAGES else "frontier_events"].inc()
            yield event
