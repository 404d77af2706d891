"""One sorted CDXJ index of a WARC root, for replay tools (pywb, OpenWayback's CDXJ readers).

The writer keeps one `.cdxj` per WARC file, in the order it wrote the records; replay tools look
captures up by binary search and need one index sorted by key (SURT) and timestamp. `merged_index`
takes every file's index, drops the lines a crash tore and the captures a takedown tombstoned (their
files may not be compacted yet), and sorts the rest as `LC_ALL=C sort -u` would. Its `filename`
fields stay relative to the root, so the index sits at the root's top beside `crawl/`.
"""
from __future__ import annotations

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
    return "".join(line + "\n" for line in sorted(kept, key=lambda line: line.encode("utf-8"))), counts


def write_index(root: Root, name: str = INDEX_NAME) -> dict[str, int]:
    """Merge every file's index under the root into `name` at its top (replaced whole); the counts."""
    tombstoned = {t.place for t in load_tombstones(root)}
    text, counts = merged_index(read_indexes(root), tombstoned)
    root.write(name, text.encode("utf-8"))
    return counts
