"""Operator controls as the frontier applies them: one table per frontier subtask, mirrored from
Flink broadcast state (ARCHITECTURE.md §1, `crawl.control ──(broadcast)──▶ frontier`).

Records arrive already validated by `udfs.control.parse_control` (as their `to_record()` dicts). Every
subtask sees every record, in order, and applies it to the same table, so all subtasks agree. The
table is kept twice: as plain rows in broadcast state (durable, restored with the job) and as Python
sets and dicts here (fast: the frontier consults it on every event of every host). `rows_for` says
which rows a record changes; `load` rebuilds the Python side from the rows after a restore.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable
from typing import Any

from udfs import compact_json
from udfs.urls import host_key

ROW_VERSION = 1
PAUSED_KEY = "paused"
_HOST = "host:"
_TAKEDOWN = "takedown:"


@dataclasses.dataclass(frozen=True)
class HostControls:
    """What the operators have said about one host (and the whole crawl) at this moment."""

    blocked: bool = False            # PUT /v1/hosts/{host} {"blocked": true}: nothing is fetched
    rate_limit_rps: float | None = None  # operator ceiling; None = the configured politeness
    taken_down: bool = False         # a host takedown: nothing fetched, nothing admitted, ever
    paused: bool = False             # the whole crawl is paused

    @property
    def halted(self) -> bool:
        """Whether the host may not be leased anything now (blocked, taken down or paused)."""
        return self.blocked or self.taken_down or self.paused


NO_CONTROLS = HostControls()


class ControlTable:
    """The controls in force: per-host settings, the pause flag and takedowns (URL, host, pattern)."""

    def __init__(self) -> None:
        self._hosts: dict[str, tuple[float | None, bool]] = {}
        self._paused = False
        self._taken_hosts: set[str] = set()
        self._taken_urls: set[str] = set()
        self._patterns: set[str] = set()
        self._pattern_re: re.Pattern[str] | None = None

    @property
    def paused(self) -> bool:
        return self._paused

    def for_host(self, host: str) -> HostControls:
        """The controls bearing on `host` (a udfs.urls.host_key)."""
        rate, blocked = self._hosts.get(host, (None, False))
        if not (blocked or rate is not None or self._paused or host in self._taken_hosts):
            return NO_CONTROLS
        return HostControls(blocked, rate, host in self._taken_hosts, self._paused)

    def url_taken_down(self, url: str) -> bool:
        """Whether a normalised URL is under a URL or pattern takedown (host takedowns: `for_host`)."""
        if url in self._taken_urls:
            return True
        return self._pattern_re is not None and self._pattern_re.match(url) is not None

    def takes_down(self, url: str) -> bool:
        """Whether any takedown (URL, pattern or its host's) covers a normalised URL; never raises."""
        if self.url_taken_down(url):
            return True
        try:
            return host_key(url) in self._taken_hosts
        except ValueError:
            return False

    def apply(self, record: dict[str, Any]) -> None:
        """Apply one validated control record to the Python side (a table kept without Flink state)."""
        for key, value in self.rows_for(record):
            self.apply_row(key, value)

    def rows_for(self, record: dict[str, Any]) -> list[tuple[str, str]]:
        """The broadcast-state rows (key, value) that record the effect of one validated control record;
        `apply_row` each of them (here and in state) to apply it. Unknown types change nothing."""
        kind = record.get("type")
        if kind == "host":
            rate, blocked = self._hosts.get(record["host"], (None, False))
            if record.get("rate_limit_rps") is not None:
                rate = float(record["rate_limit_rps"])
            if record.get("blocked") is not None:
                blocked = bool(record["blocked"])
            value = compact_json.dumps({"v": ROW_VERSION, "rate_limit_rps": rate, "blocked": blocked})
            return [(_HOST + record["host"], value)]
        if kind in ("pause", "resume"):
            return [(PAUSED_KEY, "1" if kind == "pause" else "0")]
        if kind == "takedown" and record.get("scope") in ("url", "host", "pattern"):
            return [(f"{_TAKEDOWN}{record['scope']}:{record['value']}", "1")]
        return []

    def apply_row(self, key: str, value: str) -> None:
        """Apply one broadcast-state row to the Python side; a malformed row is ignored (never raises)."""
        if key == PAUSED_KEY:
            self._paused = value == "1"
        elif key.startswith(_HOST):
            try:
                row = compact_json.loads(value)
                rate = row.get("rate_limit_rps")
                self._hosts[key[len(_HOST):]] = (float(rate) if rate is not None else None, bool(row.get("blocked")))
            except (ValueError, TypeError, AttributeError):
                return
        elif key.startswith(_TAKEDOWN):
            scope, _, value_of = key[len(_TAKEDOWN):].partition(":")
            if scope == "url":
                self._taken_urls.add(value_of)
            elif scope == "host":
                self._taken_hosts.add(value_of)
            elif scope == "pattern":
                self._patterns.add(value_of)
                self._pattern_re = re.compile("|".join(fnmatch.translate(p) for p in sorted(self._patterns)))

    def load(self, rows: Iterable[tuple[str, str]]) -> None:
        """Rebuild the Python side from broadcast state (after a restore)."""
        for key, value in rows:
            self.apply_row(key, value)
