"""One sorted CDXJ index of a WARC root, for replay tools (pywb, OpenWayback's CDXJ readers).

The writer keeps one `.cdxj` per WARC file, in the order it wrote the records; replay tools look
captures up by binary search and need one index sorted by key (SURT) and timestamp. `merged_index`
takes every file's index, drops the lines a crash tore and the captures a takedown tombstoned (their
files may not be compacted yet), and sorts the rest as `LC_ALL=C sort -u` would. Its `filename`
fields stay relative to the root, so the index sits at the root's top beside `crawl/`.

The merged index is for replay, so a server-not-modified revisit's line points at the capture it
stands for (`resolve_not_modified`): a replay tool answers a revisit archived as a 304 with an empty
304, as it does any 3xx revisit (pywb's ResolvingLoader), which is not the page as it was then. The
per-file indexes stay exact, one line a record (decision 3904).
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Final

from consumers.roots import Root
from consumers.tombstones import load_tombstones, parse_cdxj_line, read_indexes

INDEX_NAME: Final = "index.cdxj"


def merged_index(indexes: Iterable[tuple[str, str]], tombstoned: set[tuple[str, int]]) -> tuple[str, dict[str, int]]:
    """The sorted, de-duplicated lines of `indexes` ((cdxj name, text) pairs) without the captures at
    `tombstoned` places ((WARC file, offset)), and the counts: files, lines kept, tombstoned, torn."""
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
    lines, counts["resolved"] = resolve_not_modified(sorted(kept, key=lambda line: line.encode("utf-8")))
    return "".join(line + "\n" for line in lines), counts


def resolve_not_modified(lines: list[str]) -> tuple[list[str], int]:
    """Sorted CDXJ lines with each server-not-modified revisit (a `warc/revisit` line whose status is
    304) pointed at the capture it stands for, and how many were: the latest earlier response of the
    same key and digest (what the revisit's WARC-Refers-To names: the writer refers a recrawl to the
    page's last full capture), else the latest earlier identical-payload revisit of them (which pywb
    resolves in turn); never a 3xx.
    The line keeps its key, timestamp and url, takes that capture's fields (mime, status, filename,
    offset, length), and keeps its own record as `revisit.filename`, `revisit.offset` and
    `revisit.length`. A revisit whose capture is not in the index (another crawl's, retired, taken
    down) stays as it is."""
    responses: dict[tuple[str, str], dict] = {}     # (key, digest) → fields of the latest response line
    revisits: dict[tuple[str, str], dict] = {}      # ... and of the latest 2xx identical-payload revisit
    resolved_lines, resolved = [], 0
    for line in lines:
        key, timestamp, body = line.split(" ", 2)
        try:
            fields = json.loads(body)
        except ValueError:
            resolved_lines.append(line)
            continue
        digest = fields.get("digest")
        status = str(fields.get("status", ""))
        revisit = fields.get("mime") == "warc/revisit"
        original = (responses.get((key, digest)) or revisits.get((key, digest))) if digest else None
        if revisit and status == "304" and original is not None:
            pointed = {**original, "url": fields.get("url", original.get("url")),
                       "revisit.filename": fields.get("filename"), "revisit.offset": fields.get("offset"),
                       "revisit.length": fields.get("length")}
            resolved_lines.append(f"{key} {timestamp} {json.dumps(pointed)}")
            resolved += 1
            continue
        if digest and not status.startswith("3"):
            (revisits if revisit else responses)[(key, digest)] = fields
        resolved_lines.append(line)
    return resolved_lines, resolved


def write_index(root: Root, name: str = INDEX_NAME) -> dict[str, int]:
    """Merge every file's index under the root into `name` at its top (replaced whole); the counts."""
    tombstoned = {t.place for t in load_tombstones(root)}
    text, counts = merged_index(read_indexes(root), tombstoned)
    root.write(name, text.encode("utf-8"))
    return counts
