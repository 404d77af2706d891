"""What the fetcher counts per outcome: status classes, bytes, 429/5xx, robots.txt failures, latencies.

The fetch operator's async callbacks run on an event-loop thread where PyFlink's process-mode
metrics are silently dropped (they only count on the bundle's own thread), so the operator tallies
here, in plain memory, and hands the deltas to Flink once per bundle (docs/decisions/1701).

Pure: values in, values out. The Flink shell is `operators/fetch.py`; names are in docs/metrics.md.
"""
from __future__ import annotations

from typing import Any

from udfs.latency import DEFAULT_WINDOW, RecentWindow
from udfs.records import FetchStatus

HTTP_CLASSES = ("http_1xx", "http_2xx", "http_3xx", "http_4xx", "http_5xx")
FAILED_CLASSES = tuple(f"failed_{s.value}" for s in FetchStatus if s is not FetchStatus.OK)
STATUS_CLASSES = HTTP_CLASSES + FAILED_CLASSES
COUNTS = STATUS_CLASSES + ("fetches", "bytes", "http_429", "robots_fetches", "robots_failures")
PHASES = ("dns", "connect", "first_byte", "total")


def status_class(fetch_status: Any, http_status: Any) -> str:
    """The metric class of one fetch outcome (docs/architecture.md §3 completions; docs/metrics.md).

    A complete response (`ok`) is classed by its HTTP status (`http_2xx` ...); anything else by its
    failure kind (`failed_timeout`, `failed_dns_error` ...), even when a partial response came with
    it. Never raises: an unknown status is `failed_error`.
    """
    if fetch_status == FetchStatus.OK.value:
        if isinstance(http_status, int) and not isinstance(http_status, bool) and 100 <= http_status <= 599:
            return HTTP_CLASSES[http_status // 100 - 1]
        return "failed_error"
    name = f"failed_{fetch_status}"
    return name if name in FAILED_CLASSES else "failed_error"


def robots_failed(fetch_status: Any, http_status: Any) -> bool:
    """Whether a robots.txt fetch left the host "unavailable" (RFC 9309 §2.3.1.3-4: unreachable, 5xx
    or 429, read as complete disallow); a 4xx other than 429 is "allow all", not a failure."""
    if fetch_status != FetchStatus.OK.value:
        return True
    return isinstance(http_status, int) and (http_status >= 500 or http_status == 429)


class FetchTally:
    """Counts and recent latencies of one fetch operator, drained as deltas.

    Keys of `counts` are fixed up front (COUNTS), so recording allocates nothing new per fetch.
    """

    __slots__ = ("counts", "windows", "_drained")

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        self.counts: dict[str, int] = dict.fromkeys(COUNTS, 0)
        self.windows: dict[str, RecentWindow] = {phase: RecentWindow(window) for phase in PHASES}
        self._drained: dict[str, int] = dict.fromkeys(COUNTS, 0)

    def record(self, result: dict[str, Any]) -> None:
        """Count one FetchResult (udfs/records.py); never raises on a malformed one."""
        fetch_status, http_status = result.get("fetch_status"), result.get("http_status")
        counts = self.counts
        counts["fetches"] += 1
        counts[status_class(fetch_status, http_status)] += 1
        if http_status == 429:
            counts["http_429"] += 1
        body = result.get("body")
        if isinstance(body, (bytes, bytearray)):
            counts["bytes"] += len(body)
        request = result.get("request")
        if isinstance(request, dict) and request.get("kind") == "robots":
            counts["robots_fetches"] += 1
            if robots_failed(fetch_status, http_status):
                counts["robots_failures"] += 1
        started, done = result.get("started_at"), result.get("done_at")
        if isinstance(started, (int, float)) and isinstance(done, (int, float)):
            self.windows["total"].add(done - started)

    def drain(self) -> dict[str, int]:
        """What each count grew by since the previous drain (only the ones that grew)."""
        deltas = {}
        for name, value in self.counts.items():
            grown = value - self._drained[name]
            if grown:
                deltas[name] = grown
                self._drained[name] = value
        return deltas
