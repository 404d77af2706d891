"""Takedowns applied to a Parquet corpus already written ("deletes ... what was stored").

Parquet files cannot be edited in place, so every part file holding a row the takedown matches (its
`url` or `final_url`, udfs.control.Takedown.matches) is rewritten without those rows: the new file is
written beside it under a hidden temporary name, fsynced, renamed over the old one and the folder
fsynced, so a reader sees either the old file or the new one, never a torn file. A file left with no
row is deleted. Each removed row gets one line in `OUT/_removed.jsonl`. Applying a takedown twice
changes nothing the second time, so a replayed batch (decision 1204) is harmless. Decision 1920.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from durable.files import fsync_path
from udfs.control import Takedown

REMOVED_LOG: Final = "_removed.jsonl"


@dataclass(frozen=True)
class Removal:
    """What one takedown took out of the corpus: rows removed, files rewritten and files deleted."""

    rows: int = 0
    rewritten: int = 0
    deleted: int = 0

    def counts(self) -> dict[str, int]:
        """The figures as the audit log records them."""
        return {"rows_removed": self.rows, "files_rewritten": self.rewritten, "files_deleted": self.deleted}


def part_files(out: Path) -> list[Path]:
    """Every Parquet part file of a corpus folder (`crawl_date=*/part-*.parquet`), in name order."""
    return sorted(out.glob("crawl_date=*/part-*.parquet"))


def remove_taken_down(out: Path, command: Takedown, now: float) -> Removal:
    """Rewrite the part files of `out` without the rows `command` matches; log each removed row."""
    rows = rewritten = deleted = 0
    for path in part_files(out):
        with pq.ParquetFile(path) as part:
            names = part.read(columns=["url", "final_url"])
            hit = [command.matches(url) or command.matches(final)
                   for url, final in zip(names.column("url").to_pylist(), names.column("final_url").to_pylist())]
            if not any(hit):
                continue
            table = part.read()
        gone = table.filter(pa.array(hit))
        _log_removed(out, path, gone, command, now)
        kept = table.filter(pa.array([not h for h in hit]))
        if kept.num_rows:
            _replace(path, kept)
            rewritten += 1
        else:
            path.unlink()
            fsync_path(path.parent)
            deleted += 1
        rows += gone.num_rows
    return Removal(rows, rewritten, deleted)


def _replace(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    fsync_path(tmp)
    os.replace(tmp, path)
    fsync_path(path.parent)


def _log_removed(out: Path, path: Path, gone: pa.Table, command: Takedown, now: float) -> None:
    # The log is written before the file is replaced: after a crash in between, the replay rewrites
    # the file again and the rows are logged twice, never not at all.
    removed_at = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")
    lines = [{"url": row["url"], "url_fp": row["url_fp"], "file": path.relative_to(out).as_posix(),
              "takedown_id": command.id, "scope": command.scope, "value": command.value, "removed_at": removed_at}
             for row in gone.select(["url", "url_fp"]).to_pylist()]
    _append_lines(out / REMOVED_LOG, lines)


def _append_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    with open(path, "a", encoding="utf-8") as log:
        log.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        log.flush()
        os.fsync(log.fileno())
