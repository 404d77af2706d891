"""The dead-letter file of a consumer: the records it cannot handle, kept whole with the reason.

A record that fails the contract check (consumers.pages.read_page) or that udfs.control refuses would
fail the same way on every retry; the consumer writes it here and goes on, so its offsets commit past
it (decision 3740). One JSON line per record, appended and fsynced before the batch's offsets are
committed:

    {"consumer": "corpus", "topic": "pages.parsed", "partition": 0, "offset": 1234, "reason": "out_of_range",
     "field": "fetched_at", "detail": "fetched_at: nan outside [...]", "dead_lettered_at": "2026-01-01T00:00:00+00:00",
     "key_b64": "MTIz", "value_b64": "eyJ2IjoxLC...", "value_bytes": 5123}

The key and value are the record's bytes in base64 (a poison value need not be UTF-8), so a fixed
consumer can replay them. A write that fails (disk full) raises: the batch is not committed and the
record is read again, never lost and never dead-lettered for a fault of the disk.
"""
from __future__ import annotations

import base64
import json
import logging
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final

from consumers.pages import BadRecord
from consumers.stream import Message
from durable.files import fsync_path

_LOG = logging.getLogger("consumers.deadletter")
_LOG.addHandler(logging.NullHandler())

# The corpus consumer's dead-letter file, inside its output folder (hidden from Parquet readers).
CORPUS_DEAD_LETTER: Final = "_deadletter.jsonl"
# The index's dead-letter file is its SQLite file's name plus this (as SQLite's own `-wal`, `-journal`).
INDEX_DEAD_LETTER_SUFFIX: Final = "-deadletter.jsonl"
# Characters of the detail kept in a line (the message names the field and cuts the value already).
_MAX_DETAIL_CHARS: Final = 1000


def index_dead_letter_path(db: Path | str) -> Path:
    """Where `crawler index --db DB` dead-letters by default: DB-deadletter.jsonl beside the index."""
    db = Path(db)
    return db.with_name(db.name + INDEX_DEAD_LETTER_SUFFIX)


def dead_letter_line(consumer: str, message: Message, error: BadRecord, now: float) -> dict[str, Any]:
    """The dead-letter line of one record (`now` in epoch seconds)."""
    return {"consumer": consumer, "topic": message.topic, "partition": message.partition, "offset": message.offset,
            "reason": error.reason, "field": error.field, "detail": str(error)[:_MAX_DETAIL_CHARS],
            "dead_lettered_at": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds"),
            "key_b64": _b64(message.key), "value_b64": _b64(message.value),
            "value_bytes": None if message.value is None else len(message.value)}


class DeadLetters:
    """The dead-letter file of one consumer: `add` keeps a line for the batch in hand, `flush` makes
    the batch's lines durable (call it before the offsets are committed)."""

    def __init__(self, path: Path | str, consumer: str, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._consumer = consumer
        self._clock = clock
        self._pending: list[dict[str, Any]] = []

    def add(self, message: Message, error: BadRecord) -> None:
        """Dead-letter one record (written by the next `flush`) and log it."""
        line = dead_letter_line(self._consumer, message, error, self._clock())
        _LOG.warning("dead-lettered %s[%d]@%d (%s): %s", message.topic, message.partition, message.offset,
                     error.reason, line["detail"])
        self._pending.append(line)

    def flush(self) -> int:
        """Append the lines added since the last flush and fsync them; returns how many. Raises OSError
        (the lines stay pending) when the file cannot be written."""
        if not self._pending:
            return 0
        created = not self.path.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in self._pending).encode("utf-8")
        with open(self.path, "a+b") as out:
            if out.seek(0, os.SEEK_END) > 0:
                out.seek(-1, os.SEEK_END)
                if out.read(1) != b"\n":   # a line torn by an earlier failed write: end it first
                    data = b"\n" + data
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if created:
            fsync_path(self.path.parent)
        written, self._pending = len(self._pending), []
        return written

    def discard(self) -> None:
        """Forget the lines not yet flushed (their batch failed and will be read again)."""
        self._pending = []


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")
