"""One sorted CDXJ index of a WARC root, for replay tools (pywb, OpenWayback's CDXJ readers).

The writer keeps one `.cdxj` per WARC file, in the order it wrote the records; replay tools look
captures up by binary search and need one index sorted by key (SURT) and timestamp. `merged_index`
takes every file's index, drops the lines a crash tore and the captures a takedown tombstoned (their
files may not be compacted yet), and sorts the rest as `LC_ALL=C sort -u` would. Its `filename`
fields stay relative to the root, so the index sits at the root's top beside `crawl/`.

The merged index is for replay, so a server-not-modified revisit's line points at the capture it
stands for (`resolve_not_modified`): a replay tool answers a revisit archived as a 304 with an empty
304, as it does any 3xx revisit (pywb's ResolvingLoader), which is not the page as it was then. That
capture is the one the revisit record's WARC-Refers-To-Target-URI and WARC-Refers-To-Date name, read
from its WARC file (`record_refers_to`). The per-file indexes stay exact, one line a record (decision
3904).
"""
from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable
from typing import Final

from consumers.roots import Root
from consumers.tombstones import load_tombstones, parse_cdxj_line, read_indexes
from udfs.warc import cdxj_timestamp, surt

INDEX_NAME: Final = "index.cdxj"
# A revisit line's fields → the (SURT key, timestamp) of the capture its record names, or None.
RefersTo = Callable[[dict], "tuple[str, str] | None"]
# Bytes of a revisit record's gzip member read for its headers, and the most of them inflated.
_HEAD_BYTES, _MAX_HEAD = 16 * 1024, 64 * 1024


def merged_index(indexes: Iterable[tuple[str, str]], tombstoned: set[tuple[str, int]],
                 refers_to: RefersTo | None = None) -> tuple[str, dict[str, int]]:
    """The sorted, de-duplicated lines of `indexes` ((cdxj name, text) pairs) without the captures at
    `tombstoned` places ((WARC file, offset)), and the counts: files, lines kept, tombstoned, torn,
    resolved (`resolve_not_modified`, with `refers_to`)."""
    kept: set[str] = set()
    counts = {"files": 0, "lines": 0, "tombstoned": 0, "torn": 0}
    for _name, text in indexes:
        counts["files"] += 1
        for line in text.splitlines():
            if not line.strip():
                continue
            entry = parse_cdxj_line(line)
            if entry is None:
                counts["torn"] += 1
            elif (entry.warc, entry.offset) in tombstoned:
                counts["tombstoned"] += 1
            else:
                kept.add(line.strip())
    counts["lines"] = len(kept)
    lines, counts["resolved"] = resolve_not_modified(sorted(kept, key=lambda line: line.encode("utf-8")), refers_to)
    return "".join(line + "\n" for line in lines), counts


def resolve_not_modified(lines: list[str], refers_to: RefersTo | None = None) -> tuple[list[str], int]:
    """Sorted CDXJ lines with each server-not-modified revisit (a `warc/revisit` line whose status is
    304) pointed at the capture it stands for, and how many were: the response or 2xx revisit of the
    digest at the key and time `refers_to` reads from the revisit's record (its WARC-Refers-To, which
    may name another URL's capture); without one, the latest earlier response of the same key and digest (the writer
    refers a recrawl to the page's last full capture), else the latest earlier identical-payload
    revisit of them (which pywb resolves in turn); never a 3xx.
    The line keeps its key, timestamp and url, takes that capture's fields (mime, status, filename,
    offset, length), and keeps its own record as `revisit.filename`, `revisit.offset` and
    `revisit.length`. A revisit whose capture is not in the index (another crawl's, retired, taken
    down) stays as it is."""
    parsed = [_parsed(line) for line in lines]
    captures = {(key, timestamp, fields["digest"]): fields for _, key, timestamp, fields in parsed
                if fields is not None and _stands_for_a_page(fields)} if refers_to is not None else {}
    responses: dict[tuple[str, str], dict] = {}     # (key, digest) → fields of the latest response line
    revisits: dict[tuple[str, str], dict] = {}      # ... and of the latest 2xx identical-payload revisit
    resolved_lines, resolved = [], 0
    for line, key, timestamp, fields in parsed:
        if fields is None:
            resolved_lines.append(line)
            continue
        digest = fields.get("digest")
        revisit = fields.get("mime") == "warc/revisit"
        original = None
        if revisit and str(fields.get("status", "")) == "304" and digest:
            named = refers_to(fields) if refers_to is not None else None
            original = captures.get((*named, digest)) if named is not None else None
            original = original or responses.get((key, digest)) or revisits.get((key, digest))
        if original is not None:
            pointed = {**original, "url": fields.get("url", original.get("url")),
                       "revisit.filename": fields.get("filename"), "revisit.offset": fields.get("offset"),
                       "revisit.length": fields.get("length")}
            resolved_lines.append(f"{key} {timestamp} {json.dumps(pointed)}")
            resolved += 1
            continue
        if _stands_for_a_page(fields):
            (revisits if revisit else responses)[(key, digest)] = fields
        resolved_lines.append(line)
    return resolved_lines, resolved


def _parsed(line: str) -> tuple[str, str, str, dict | None]:
    """(line, key, timestamp, its JSON fields or None where they do not parse)."""
    key, timestamp, body = line.split(" ", 2)
    try:
        return line, key, timestamp, json.loads(body)
    except ValueError:
        return line, key, timestamp, None


def _stands_for_a_page(fields: dict) -> bool:
    """Whether a 304 revisit may be pointed at this line: one with a digest that is not a 3xx. The
    capture a revisit's record names may be another URL's, whose key sorts after its own, so those of
    the whole index are collected before any revisit is resolved."""
    return bool(fields.get("digest")) and not str(fields.get("status", "")).startswith("3")


def record_refers_to(root: Root) -> RefersTo:
    """For a revisit line of the index under `root`: the (SURT key, timestamp) of the capture its
    record's WARC-Refers-To-Target-URI and WARC-Refers-To-Date name, read from the head of its gzip
    member; None when the record cannot be read or names none."""
    def named(fields: dict) -> tuple[str, str] | None:
        try:
            offset, length = int(fields["offset"]), int(fields["length"])
            member = root.read_range(str(fields["filename"]), offset, min(length, _HEAD_BYTES))
            head = zlib.decompressobj(wbits=31).decompress(member or b"", _MAX_HEAD)
        except (KeyError, TypeError, ValueError, OSError, zlib.error):
            return None
        headers = {}
        for line in head.split(b"\r\n\r\n", 1)[0].decode("utf-8", "replace").split("\r\n")[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        target, date = headers.get("warc-refers-to-target-uri"), headers.get("warc-refers-to-date")
        return (surt(target.strip("<>")), cdxj_timestamp(date)) if target and date else None
    return named


def write_index(root: Root, name: str = INDEX_NAME) -> dict[str, int]:
    """Merge every file's index under the root into `name` at its top (replaced whole); the counts."""
    tombstoned = {t.place for t in load_tombstones(root)}
    text, counts = merged_index(read_indexes(root), tombstoned, record_refers_to(root))
    root.write(name, text.encode("utf-8"))
    return counts
