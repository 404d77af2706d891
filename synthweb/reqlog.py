"""The server's record of every connection and request, for politeness audits.

Records are plain dicts (JSON lines in the file sink). Times `*_at` are `time.monotonic()` seconds,
which on Linux is one clock for every process, so a test can compare them with its own; `wall_*`
are Unix seconds for people reading the file.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import IO, Literal, TypedDict


class RequestRecord(TypedDict):
    """One request, from its request line to its last byte."""

    event: Literal["request"]
    conn_id: int
    client: str              # "ip:port"
    server_ip: str
    host: str                # Host header, lower case, without port
    method: str
    path: str                # request target as sent (path and query)
    status: int
    bytes: int               # body bytes written
    started_at: float        # request line received
    first_byte_at: float | None
    ended_at: float
    wall_started_at: float
    wall_ended_at: float
    retry_after: float | None  # seconds the response asked the client to wait
    aborted: bool            # the client went away before the end


class ConnectionRecord(TypedDict):
    event: Literal["connect", "close"]
    conn_id: int
    client: str
    server_ip: str
    at: float
    wall_at: float


Record = RequestRecord | ConnectionRecord


class RequestLog:
    """Records in memory and, if a path is given, as JSON lines (flushed at least every `flush_every` s,
    by a writer's add or, when the server goes quiet, by a background flusher, so a reader of the file
    sees the last request too)."""

    def __init__(self, path: Path | None = None, flush_every: float = 0.2) -> None:
        self.path = path
        self._records: list[Record] = []
        self._lock = threading.Lock()
        self._file: IO[str] | None = path.open("a", encoding="utf-8") if path else None
        self._flush_every = flush_every
        self._last_flush = time.monotonic()
        self._closed = threading.Event()
        if self._file is not None:
            threading.Thread(target=self._flush_while_open, name="reqlog-flush", daemon=True).start()

    def _flush_while_open(self) -> None:
        while not self._closed.wait(self._flush_every):
            self.flush()

    def add(self, record: Record) -> None:
        with self._lock:
            self._records.append(record)
            if self._file is not None:
                self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
                now = time.monotonic()
                if now - self._last_flush >= self._flush_every:
                    self._file.flush()
                    self._last_flush = now

    def records(self) -> list[Record]:
        """A copy of everything recorded so far."""
        with self._lock:
            return list(self._records)

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def load_log(path: Path) -> list[Record]:
    """Read a JSON-lines request log; a half-written last line (server still running) is skipped."""
    out: list[Record] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def requests_only(log: list[Record]) -> list[RequestRecord]:
    """The request records of a log, in the order their requests started."""
    reqs = [r for r in log if r.get("event") == "request"]
    return sorted(reqs, key=lambda r: r["started_at"])  # type: ignore[return-value,index]
