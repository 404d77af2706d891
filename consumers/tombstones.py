"""WARC tombstones: which archived captures a takedown covers ("deletes or tombstones").

WARC files are append-only and cannot be edited in place, so a takedown is applied to the archive as
a list: `tombstones.jsonl` at the WARC root, one line per taken-down capture, found through the CDXJ
index beside each WARC file (`crawl/{date}/{subtask}/{name}.cdxj`, decision 0503):

    {"v": 1, "url", "warc": "crawl/.../{name}.warc.gz", "offset", "length", "captured_at": "YYYYMMDDhhmmss",
     "takedown_id", "scope", "value", "tombstoned_at": ISO-8601 UTC, "compacted": false}

Replay and export tools must skip a capture listed here; `crawler warc-compact` later removes the records
physically (consumers/warc_compact.py) and marks the line `"compacted": true`. One line per capture (the
first takedown, in command order, that covers it); running again adds only captures not yet listed.
Decision 1922.
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any, Final

from consumers.roots import Root
from udfs.control import Takedown

TOMBSTONES: Final = "tombstones.jsonl"
TOMBSTONE_VERSION: Final = 1
WARC_FOLDER: Final = "crawl"


@dataclass(frozen=True)
class Tombstone:
    """One taken-down capture: the record's URL and place in its WARC file, and the takedown."""

    url: str
    warc: str
    offset: int
    length: int
    captured_at: str
    takedown_id: str
    scope: str
    value: str
    tombstoned_at: str
    compacted: bool = False

    @property
    def place(self) -> tuple[str, int]:
        """(WARC file, offset): what identifies the capture."""
        return self.warc, self.offset

    def to_line(self) -> str:
        """The JSON line of tombstones.jsonl."""
        return json.dumps({"v": TOMBSTONE_VERSION, **asdict(self)}, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class CdxjEntry:
    """The fields of one CDXJ line that a tombstone needs."""

    url: str
    warc: str
    offset: int
    length: int
    timestamp: str


def parse_cdxj_line(line: str) -> CdxjEntry | None:
    """A CDXJ line (`SURT timestamp {json}`) → CdxjEntry; None for a line that is not
    one (blank, torn by a crash, missing fields). Never raises."""
    parts = line.strip().split(" ", 2)
    if len(parts) != 3:
        return None
    try:
        fields = json.loads(parts[2])
        return CdxjEntry(str(fields["url"]), str(fields["filename"]), int(fields["offset"]),
                         int(fields["length"]), parts[1])
    except (ValueError, KeyError, TypeError):
        return None


def read_tombstones(text: str) -> list[Tombstone]:
    """The lines of a tombstones.jsonl (unreadable lines are skipped: the file is rewritten whole, so
    none should exist)."""
    found = []
    for line in text.splitlines():
        try:
            fields = json.loads(line)
            fields.pop("v", None)
            found.append(Tombstone(**fields))
        except (ValueError, TypeError):
            continue
    return found


def find_tombstones(indexes: Iterable[tuple[str, str]], takedowns: list[Takedown], known: set[tuple[str, int]],
                    now: float) -> list[Tombstone]:
    """New tombstones for the captures in `indexes` ((cdxj name, text) pairs) that a takedown covers and
    that are not `known` already. The first takedown in the given order names a capture."""
    stamp = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")
    found: list[Tombstone] = []
    seen = set(known)
    for _name, text in indexes:
        for line in text.splitlines():
            entry = parse_cdxj_line(line)
            if entry is None or (entry.warc, entry.offset) in seen:
                continue
            command = next((t for t in takedowns if t.matches(entry.url)), None)
            if command is None:
                continue
            seen.add((entry.warc, entry.offset))
            found.append(Tombstone(entry.url, entry.warc, entry.offset, entry.length, entry.timestamp, command.id,
                                   command.scope, command.value, stamp))
    return found


def load_tombstones(root: Root) -> list[Tombstone]:
    """The tombstone list of a WARC root ([] when there is none yet)."""
    raw = root.read(TOMBSTONES)
    return read_tombstones(raw.decode("utf-8")) if raw is not None else []


def save_tombstones(root: Root, tombstones: list[Tombstone]) -> None:
    """Replace the tombstone list whole (atomic on disk; one PutObject in S3)."""
    root.write(TOMBSTONES, "".join(t.to_line() + "\n" for t in tombstones).encode("utf-8"))


def read_indexes(root: Root) -> Iterator[tuple[str, str]]:
    """(name, text) of every WARC file's CDXJ index under the root, in name order, read one at a time."""
    return ((name, (root.read(name) or b"").decode("utf-8", "replace"))
            for name in root.list(WARC_FOLDER) if name.endswith(".cdxj"))


def apply_to_archive(root: Root, takedowns: list[Takedown], now: float) -> list[Tombstone]:
    """Tombstone every capture under `root` that `takedowns` cover and that is not listed yet; returns
    the new tombstones (already saved)."""
    existing = load_tombstones(root)
    new = find_tombstones(read_indexes(root), takedowns, {t.place for t in existing}, now)
    if new:
        save_tombstones(root, existing + new)
    return new


def mark_compacted(tombstones: list[Tombstone], warc: str) -> list[Tombstone]:
    """The list with every tombstone of `warc` marked compacted (its records are gone from the file)."""
    return [replace(t, compacted=True) if t.warc == warc else t for t in tombstones]


def counts_by_takedown(tombstones: list[Tombstone]) -> dict[str, dict[str, Any]]:
    """Per takedown id: scope, value, captures and WARC files (for the audit log)."""
    captures: Counter[str] = Counter(t.takedown_id for t in tombstones)
    files: dict[str, set[str]] = {}
    first: dict[str, Tombstone] = {}
    for t in tombstones:
        files.setdefault(t.takedown_id, set()).add(t.warc)
        first.setdefault(t.takedown_id, t)
    return {tid: {"scope": first[tid].scope, "value": first[tid].value,
                  "counts": {"captures": captures[tid], "warc_files": len(files[tid])}} for tid in captures}
