"""WARC compaction: rewrite a local WARC file without its tombstoned captures (decision 1922).

Every record whose WARC-Target-URI is a tombstoned URL of that file goes: the response or revisit the
tombstone names and the request and metadata records of the same URL (a takedown covers the URL, so
every capture of it in the file is tombstoned). The warcinfo record and all other records are copied
byte for byte (each record is its own gzip member). The CDXJ index is rebuilt from the old lines with
new offsets. Both new files are written under hidden temporary names, the WARC file is read back
with warcio (every record parses and its digests verify, the expected records in order), both are
fsynced and then renamed over the old ones, index last, and the folder is fsynced. A run interrupted
between the two renames is rolled forward by the next one (the new index is still in its temporary file).

Files in S3 are not compacted (follow-up: download, compact, upload); their tombstones stay in force.
"""
from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from consumers.tombstones import parse_cdxj_line
from durable.files import fsync_path

_CHUNK = 1 << 16


class CompactionError(RuntimeError):
    """The rewritten file did not read back as expected; the old files are left untouched."""


@dataclass(frozen=True)
class Compaction:
    """What compacting one file did."""

    warc: str
    records_kept: int
    records_dropped: int
    bytes_before: int
    bytes_after: int


@dataclass(frozen=True)
class _Member:
    offset: int
    length: int
    record_id: str
    target: str | None


def _members(data: bytes) -> list[_Member]:
    found = []
    iterator = ArchiveIterator(io.BytesIO(data), no_record_parse=True)
    for record in iterator:
        headers = record.rec_headers
        record_id, target = headers.get_header("WARC-Record-ID"), headers.get_header("WARC-Target-URI")
        found.append(_Member(iterator.get_record_offset(), iterator.get_record_length(), record_id or "", target))
    return found


def compact_warc(warc_path: Path, index_path: Path, urls: set[str]) -> Compaction:
    """Rewrite `warc_path` (and its CDXJ `index_path`) without the records of `urls`; raises
    CompactionError (old files kept) if the new file does not verify."""
    _finish_interrupted(warc_path, index_path)
    data = warc_path.read_bytes()
    members = _members(data)
    kept = [m for m in members if m.target not in urls]
    new_offsets: dict[int, int] = {}
    body = bytearray()
    for member in kept:
        new_offsets[member.offset] = len(body)
        body += data[member.offset:member.offset + member.length]
    _verify(bytes(body), [m.record_id for m in kept])
    lines = []
    for line in index_path.read_text(encoding="utf-8").splitlines() if index_path.is_file() else []:
        entry = parse_cdxj_line(line)
        if entry is None or entry.offset not in new_offsets:
            continue
        old = f'"offset": "{entry.offset}"'
        lines.append(line.replace(old, f'"offset": "{new_offsets[entry.offset]}"', 1))
    warc_tmp, index_tmp = _tmp(warc_path), _tmp(index_path)
    _write_synced(warc_tmp, bytes(body))
    _write_synced(index_tmp, "".join(line + "\n" for line in lines).encode("utf-8"))
    os.replace(warc_tmp, warc_path)
    os.replace(index_tmp, index_path)
    fsync_path(warc_path.parent)
    return Compaction(warc_path.name, len(kept), len(members) - len(kept), len(data), len(body))


def _verify(data: bytes, record_ids: list[str]) -> None:
    seen = []
    try:
        for record in ArchiveIterator(io.BytesIO(data), check_digests="raise"):
            while record.raw_stream.read(_CHUNK):
                pass
            seen.append(record.rec_headers.get_header("WARC-Record-ID") or "")
    except Exception as exc:  # noqa: BLE001 - warcio raises several types; any of them means "not valid"
        raise CompactionError(f"the compacted file does not read back: {exc}") from exc
    if seen != record_ids:
        raise CompactionError(f"the compacted file holds {len(seen)} records, {len(record_ids)} expected")


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.compact.tmp")


def _finish_interrupted(warc_path: Path, index_path: Path) -> None:
    """Roll an interrupted compaction forward: the WARC file was renamed (its temporary file is gone) but
    the index was not, so the verified new index goes in place; if neither was renamed, start over."""
    warc_tmp, index_tmp = _tmp(warc_path), _tmp(index_path)
    if index_tmp.exists() and not warc_tmp.exists():
        os.replace(index_tmp, index_path)
        fsync_path(index_path.parent)
    warc_tmp.unlink(missing_ok=True)
    index_tmp.unlink(missing_ok=True)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
