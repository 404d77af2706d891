"""The WARC writer: archives each page fetch, then tells the rest of the crawl about it.

Pipeline position (ARCHITECTURE.md §1): parse → **WARC writer** → pages.parsed and crawl.frontier.
For each ParsedBundle it appends a response + request record pair (one gzip member each, built by
`udfs.warc`) to `crawl/{date}/{subtask}/{seq}.warc.gz` under the WARC root (CDXJ lines beside it in
`{seq}.cdxj`), flushes and fsyncs,
and only then emits (invariant 5: every published page points at a durable record):
- a `Completion` for the page's frontier (always, whatever happened),
- a `ParsedPage` on pages.parsed (200 pages not marked noindex) with warc_path/offset/length,
- one `DiscoveredBatch` per target host of its followable links (+ redirect/refresh targets), depth+1.
Files roll at a size or age limit (checked when a record arrives); a restarted writer never appends
to an existing file, it starts the next sequence number.
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from pyflink.common import Types
from pyflink.datastream.functions import ProcessFunction, RuntimeContext

from operators.parse import ParsedBundle
from udfs.fetch_status import header_value, is_complete_page, redirect_target, retry_after_seconds
from udfs.records import (SCHEMA_VERSION, TOPIC_FRONTIER, TOPIC_PAGES, Completion, DiscoveredBatch, FetchResult,
                          FetchStatus, ParsedPage, UrlEntry, encode)
from udfs.urls import host_key, url_fp
from udfs.warc import WarcBuilder, WarcPolicy, WarcRecord, cdxj_line, indexed_by_default

# Discovered URL priorities (0 highest .. 9): a redirect target is the content the seed meant.
PRIORITY_REDIRECT = 4
PRIORITY_LINK = 5
_ARCHIVED = frozenset({FetchStatus.OK.value, FetchStatus.TOO_LARGE.value, FetchStatus.TOO_SLOW.value,
                       FetchStatus.TIMEOUT.value, FetchStatus.CONN_ERROR.value})
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
    """

    def __init__(self, root: str, subtask: int, builder: WarcBuilder, settings: WarcFileSettings = WarcFileSettings(),
                 clock: Callable[[], float] = time.time, crawl_fields: tuple[tuple[str, str], ...] = ()) -> None:
        self._root = root
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

    def append(self, build: Callable[[str | None], list[WarcRecord]]) -> list[Location]:
        """Write the records `build(warcinfo_id)` returns (rolling first if due); durable when this returns.

        `build` runs after any roll so records name the warcinfo of the file they land in.
        """
        self._roll_if_due()
        assert self._file is not None
        locations = [self._write(record) for record in build(self._warcinfo_id)]
        if locations:
            self._sync()
        return locations

    def close(self) -> None:
        """Flush, fsync and close the current file."""
        if self._file is not None and self._index is not None:
            self._sync()
            self._file.close()
            self._index.close()
            self._file = self._index = None

    def _roll_if_due(self) -> None:
        now = self._clock()
        date = datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d")
        if self._file is not None and (self._file.tell() >= self._settings.max_file_bytes
                                       or now - self._opened_at >= self._settings.max_file_age_s
                                       or date != self._date):
            self.close()
        if self._file is None:
            self._open(date, now)

    def _open(self, date: str, now: float) -> None:
        folder = Path(self._root) / "crawl" / date / str(self._subtask)
        folder.mkdir(parents=True, exist_ok=True)
        taken = [int(m.group(1)) for m in (_SEQ_NAME.match(p.name) for p in folder.iterdir()) if m]
        name = f"{max(taken, default=-1) + 1:05d}.warc.gz"
        # "x": never append to (or overwrite) a file an earlier run may have left half-written.
        self._file = open(folder / name, "xb")
        self._index = open(folder / name.replace(".warc.gz", ".cdxj"), "x", encoding="utf-8")
        self._path = str(folder / name)
        self._relative = f"crawl/{date}/{self._subtask}/{name}"
        self._opened_at, self._date = now, date
        _fsync_dir(folder)
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

    def _sync(self) -> None:
        assert self._file is not None and self._index is not None
        for handle in (self._file, self._index):
            handle.flush()
            if self._settings.fsync:
                os.fsync(handle.fileno())


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_archived(result: FetchResult) -> bool:
    """Whether a fetch is archived: a response arrived and its body is what the server sent, maybe cut.

    Not archived: no response (DNS, connect, blocked), a refused type (body never read), or an
    unreadable response (oversized head, unknown or corrupt Content-Encoding).
    """
    return result["http_status"] is not None and result["fetch_status"] in _ARCHIVED


def capture_records(builder: WarcBuilder, result: FetchResult, warcinfo_id: str | None) -> list[WarcRecord]:
    """Response then request record of one archived fetch (WARC 1.1 §6.3-6.4); [] if not archived."""
    if not is_archived(result):
        return []
    assert result["http_status"] is not None
    version = "HTTP/" + (result.get("http_version") or "1.1")
    response, request = builder.capture(
        result.get("url") or result["request"]["url"], result.get("request_headers", []), result["http_status"],
        result["http_reason"], result["headers"], result["body"], date=result["done_at"], ip=result["ip"],
        truncated=result["truncated"], warcinfo_id=warcinfo_id, http_version=version)
    return [response, request]


def completion_event(bundle: ParsedBundle) -> Completion:
    """The `Completion` crawl.frontier event that ends the page's lease (ARCHITECTURE.md §3)."""
    result = bundle["result"]
    request = result["request"]
    headers = result["headers"]
    status = result["http_status"]
    return Completion(
        v=SCHEMA_VERSION, type="completion", host=request["host"], lease_id=request["lease_id"],
        url=request["url"], fp=request["fp"], fetch_status=result["fetch_status"], http_status=status,
        started_at=result["started_at"], done_at=result["done_at"],
        fetch_ms=round((result["done_at"] - result["started_at"]) * 1000.0, 3), bytes=len(result["body"]),
        content_hash=bundle["content_hash"], simhash=bundle["simhash"],
        etag=header_value(headers, "etag"), last_modified=header_value(headers, "last-modified"),
        redirect=redirect_target(result.get("url") or request["url"], status, headers),
        retry_after=retry_after_seconds(headers, result["done_at"]) if status in (429, 503) else None,
    )


def parsed_page(bundle: ParsedBundle, where: Location) -> ParsedPage | None:
    """The pages.parsed record of a complete 200 page (None for others and for noindex pages)."""
    result, page = bundle["result"], bundle["page"]
    if page is None or page["noindex"] or not is_complete_page(result):
        return None
    request = result["request"]
    assert bundle["content_hash"] is not None and bundle["simhash"] is not None
    return ParsedPage(
        v=SCHEMA_VERSION, url=request["url"], url_fp=request["fp"], final_url=result.get("url") or request["url"],
        fetched_at=result["done_at"], http_status=200, content_type=header_value(result["headers"], "content-type"),
        content_hash=bundle["content_hash"], simhash=bundle["simhash"], duplicate_of=None, near_duplicate_of=None,
        title=page["title"], lang=page["lang"], text=page["text"], links=[url for url, _ in page["links"]],
        warc_path=where.path, warc_offset=where.offset, warc_length=where.length,
    )


def discovered_batches(bundle: ParsedBundle) -> list[DiscoveredBatch]:
    """New URLs grouped by target host (one event per host): followable links, redirect and refresh targets.

    Links marked nofollow (or all links of a nofollow page) are dropped; depth is the page's + 1.
    """
    result, page = bundle["result"], bundle["page"]
    request = result["request"]
    depth = request.get("depth", 0) + 1
    found: list[tuple[str, str, int]] = []
    redirect = redirect_target(result.get("url") or request["url"], result["http_status"], result["headers"])
    if redirect is not None:
        found.append((redirect, "redirect", PRIORITY_REDIRECT))
    if page is not None:
        if page["refresh"]:
            found.append((page["refresh"], "redirect", PRIORITY_REDIRECT))
        if not page["nofollow"]:
            found += [(url, "link", PRIORITY_LINK) for url, nofollow in page["links"] if not nofollow]
    by_host: dict[str, dict[int, UrlEntry]] = {}
    for url, source, priority in found:
        try:
            host = host_key(url)
        except ValueError:
            continue   # not http(s): normalize_url let through a scheme the frontier cannot fetch
        fp = url_fp(url)
        by_host.setdefault(host, {}).setdefault(
            fp, UrlEntry(url=url, fp=fp, depth=depth, priority=priority, source=source))
    return [DiscoveredBatch(v=SCHEMA_VERSION, type="discovered", host=host, urls=list(entries.values()))
            for host, entries in by_host.items()]


def events_for(bundle: ParsedBundle, where: Location | None) -> list[Event]:
    """Every event one archived (or unarchivable) page fetch produces, as (topic, key, value)."""
    events: list[Event] = []
    page = parsed_page(bundle, where) if where is not None else None
    if page is not None:
        events.append((TOPIC_PAGES, str(page["url_fp"]), encode(dict(page))))
    for batch in discovered_batches(bundle):
        events.append((TOPIC_FRONTIER, batch["host"], encode(dict(batch))))
    completion = completion_event(bundle)
    events.append((TOPIC_FRONTIER, completion["host"], encode(dict(completion))))
    return events


class WarcWriterFunction(ProcessFunction):
    """ParsedBundle → archived capture → (topic, key, value) events; one file series per subtask."""

    def __init__(self, root: str, settings: WarcFileSettings = WarcFileSettings(),
                 warc_policy: WarcPolicy = WarcPolicy(), crawl_fields: tuple[tuple[str, str], ...] = ()) -> None:
        self._root = root
        self._settings = settings
        self._warc_policy = warc_policy
        self._crawl_fields = crawl_fields
        self._files: WarcFiles | None = None
        self._builder = WarcBuilder(warc_policy)
        self._counters: dict[str, Any] = {}

    def open(self, runtime_context: RuntimeContext) -> None:
        self._files = WarcFiles(self._root, runtime_context.get_index_of_this_subtask(),
                                self._builder, self._settings, crawl_fields=self._crawl_fields)
        group = runtime_context.get_metrics_group().add_group("warc")
        self._counters = {name: group.counter(name) for name in ("captures", "bytes", "published", "frontier_events")}
        fetch_group = runtime_context.get_metrics_group().add_group("fetch")
        self._counters.update({status.value: fetch_group.counter(status.value) for status in FetchStatus})

    def close(self) -> None:
        if self._files is not None:
            self._files.close()
            self._files = None

    def process_element(self, value: ParsedBundle, ctx: ProcessFunction.Context) -> Iterator[Event]:
        assert self._files is not None
        result = value["result"]
        self._counters.get(result["fetch_status"], self._counters[FetchStatus.ERROR.value]).inc()
        where = None
        if is_archived(result):
            locations = self._files.append(lambda warcinfo_id: capture_records(self._builder, result, warcinfo_id))
            where = locations[0]
            self._counters["captures"].inc()
            self._counters["bytes"].inc(sum(loc.length for loc in locations))
        for event in events_for(value, where):
            self._counters["published" if event[0] == TOPIC_PAGES else "frontier_events"].inc()
            yield event
