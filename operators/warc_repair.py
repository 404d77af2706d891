"""Repair of the WARC files a writer subtask left behind when it died mid-file (decision 1600).

A restarted writer never appends to an existing file; before its first capture it cuts the last file
of each folder it owns back to its last complete, indexed capture: a torn gzip member or an unindexed
capture goes, with any index line past the cut. Synced captures stay, since their events may already
be published. Captures that still waited for their group's fsync were written to the OS at once: a
killed process leaves them complete, and a machine crash leaves what the disk kept, cut the same way.
Folders are owned by subtask number modulo the parallelism, so after a rescale every old folder still
has one owner.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import zlib
from pathlib import Path
from typing import BinaryIO

from durable.files import fsync_path
from udfs.warc import CT_WARC_FIELDS
from udfs.warc_names import index_name, warc_file_serial


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
    """Subtask folders `root/crawl/{date}/{j}` with j % parallelism == subtask."""
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} is not within a parallelism of {parallelism}")
    return sorted(folder for folder in (root / "crawl").glob("*/*")
                  if folder.is_dir() and folder.name.isdigit() and int(folder.name) % parallelism == subtask)


def repair_file(folder: Path) -> Repair | None:
    """Cut the last WARC file of `folder` back to what its writer synced; None if whole.

    A capture is synced (and only then are its events emitted) once its records and its index line
    are flushed, index last. So the durable prefix ends after the last indexed record whose gzip
    member is whole, plus the whole unindexed members after it (its request, a metadata record),
    up to the first torn member or the first indexed record without an index line. Lines of the
    index past the cut (or torn) go too. A file left with no whole record is deleted with its index.
    """
    files = sorted((serial, folder / name) for name in os.listdir(folder)
                   if (serial := warc_file_serial(name)) is not None)
    if not files:
        return None
    warc = files[-1][1]
    index = warc.with_name(index_name(warc.name))
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
        span = index_span(line)
        if span is None:
            continue
        offset, length = span
        if offset + length <= size and _member_end(handle, offset, size) == (offset + length, True):
            return offset + length, line_end
    return 0, 0


def index_span(line: bytes) -> tuple[int, int] | None:
    """(offset, length) of the record a CDXJ index line names; None for a torn or malformed line."""
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
