"""Status classes, robots.txt failures and the drained tallies behind the `fetch.*` metrics
(udfs/fetch_stats.py, docs/metrics.md)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.fetch_stats import COUNTS, STATUS_CLASSES, FetchTally, robots_failed, status_class


@pytest.mark.parametrize("fetch_status, http_status, expected", [
    ("ok", 200, "http_2xx"), ("ok", 204, "http_2xx"), ("ok", 301, "http_3xx"), ("ok", 304, "http_3xx"),
    ("ok", 404, "http_4xx"), ("ok", 429, "http_4xx"), ("ok", 500, "http_5xx"), ("ok", 503, "http_5xx"),
    ("ok", 101, "http_1xx"),
    ("timeout", None, "failed_timeout"), ("timeout", 200, "failed_timeout"),  # partial body: still a failure
    ("dns_error", None, "failed_dns_error"), ("conn_error", None, "failed_conn_error"),
    ("blocked", None, "failed_blocked"), ("too_large", 200, "failed_too_large"),
    ("too_slow", 200, "failed_too_slow"), ("bad_content_type", 200, "failed_bad_content_type"),
    ("error", None, "failed_error"),
])
def test_outcomes_are_classed_by_http_status_or_failure_kind(fetch_status, http_status, expected):
    assert status_class(fetch_status, http_status) == expected


@pytest.mark.parametrize("fetch_status, http_status", [
    ("ok", None), ("ok", 99), ("ok", 600), ("ok", "200"), ("ok", True), ("surprise", 200), (None, None), (7, 7),
])
def test_unclassifiable_outcomes_are_failed_error_never_an_exception(fetch_status, http_status):
    assert status_class(fetch_status, http_status) == "failed_error"


@pytest.mark.parametrize("fetch_status, http_status, failed", [
    ("ok", 200, False), ("ok", 404, False), ("ok", 410, False),   # RFC 9309 §2.3.1.3: 4xx is allow-all
    ("ok", 429, True), ("ok", 500, True), ("ok", 503, True),      # §2.3.1.4: unavailable, disallow all
    ("timeout", None, True), ("dns_error", None, True), ("conn_error", None, True),
])
def test_robots_failures_are_what_rfc_9309_reads_as_unavailable(fetch_status, http_status, failed):
    assert robots_failed(fetch_status, http_status) is failed


def result(fetch_status="ok", http_status=200, body=b"", kind="page", started=10.0, done=10.25):
    return {"fetch_status": fetch_status, "http_status": http_status, "body": body,
            "request": {"kind": kind}, "started_at": started, "done_at": done}


def test_a_tally_counts_classes_bytes_429s_and_robots_failures():
    tally = FetchTally()
    tally.record(result(body=b"x" * 100))
    tally.record(result(http_status=429, body=b"slow down"))
    tally.record(result(http_status=503, kind="robots"))
    tally.record(result(fetch_status="timeout", http_status=None, kind="robots"))
    assert tally.drain() == {"fetches": 4, "http_2xx": 1, "http_4xx": 1, "http_5xx": 1, "failed_timeout": 1,
                             "bytes": 109, "http_429": 1, "robots_fetches": 2, "robots_failures": 2}
    assert tally.windows["total"].percentiles(0.5) == (0.25,)


def test_drain_returns_only_what_grew_since_the_last_drain():
    tally = FetchTally()
    tally.record(result())
    tally.drain()
    assert tally.drain() == {}
    tally.record(result(http_status=301))
    assert tally.drain() == {"fetches": 1, "http_3xx": 1}


@pytest.mark.parametrize("hostile", [
    {}, {"request": None, "body": None}, {"fetch_status": "ok", "http_status": 200, "started_at": "x"},
    {"request": "robots", "body": "text", "done_at": None},
])
def test_a_malformed_result_is_counted_as_a_failed_fetch_never_raises(hostile):
    tally = FetchTally()
    tally.record(hostile)
    assert tally.drain()["failed_error" if hostile.get("http_status") is None else "http_2xx"] == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ok", "timeout", "dns_error", "blocked", "weird"]),
                          st.one_of(st.none(), st.integers(0, 700)),
                          st.sampled_from(["page", "robots"])), max_size=50))
def test_status_classes_partition_the_fetches(outcomes):
    tally = FetchTally()
    for fetch_status, http_status, kind in outcomes:
        tally.record(result(fetch_status, http_status, kind=kind))
    counts = tally.counts
    assert set(counts) == set(COUNTS)
    assert sum(counts[c] for c in STATUS_CLASSES) == counts["fetches"] == len(outcomes)
    assert counts["robots_failures"] <= counts["robots_fetches"]


# --- the fetcher and resolver feeding a tally, against a one-page server on loopback ---------------

def serve_once_and_fetch(*urls: str) -> tuple[FetchTally, dict[str, int], list[dict]]:
    """Fetch `urls` (host `page.test` pinned to 127.0.0.1, `{port}` filled in) with a tally attached."""
    import asyncio

    from operators.fetch import Fetcher
    from udfs.netguard import FetchPolicy

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 503 Busy\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n"
                     b"Connection: close\r\n\r\nbusy")
        await writer.drain()
        writer.close()

    async def run() -> tuple[FetchTally, dict[str, int], list[dict]]:
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tally = FetchTally()
        policy = FetchPolicy(allow_cidrs=("127.0.0.0/8",), resolve_dns=False,
                             host_map=("page.test 127.0.0.1", "meta.test 169.254.169.254"))
        fetcher = Fetcher(policy, tally=tally)
        try:
            results = [dict(await fetcher.fetch({"host": "x", "url": u.format(port=port), "fp": 1, "kind": kind,
                                                 "lease_id": "L", "depth": 0, "attempt": 0}))
                       for u, kind in ((u, "robots" if u.endswith("/robots.txt") else "page") for u in urls)]
        finally:
            await fetcher.close()
            server.close()
        return tally, dict(fetcher.resolver.counts), results

    return asyncio.run(run())


def test_the_fetcher_times_every_phase_and_counts_a_503_robots_txt_as_a_failure():
    tally, counts, (result,) = serve_once_and_fetch("http://page.test:{port}/robots.txt")
    assert result["http_status"] == 503
    assert tally.drain() == {"fetches": 1, "http_5xx": 1, "bytes": 4, "robots_fetches": 1, "robots_failures": 1}
    for phase in ("dns", "connect", "first_byte", "total"):
        assert len(tally.windows[phase]) == 1, phase
    (dns, connect, first_byte, total) = (tally.windows[p].percentiles(0.5)[0]
                                         for p in ("dns", "connect", "first_byte", "total"))
    assert 0 < dns < first_byte <= total < 10 and 0 < connect < first_byte
    assert counts["dns_pinned"] >= 1 and counts["dns_lookups"] == 0


def test_the_resolver_counts_unknown_names_and_ssrf_refusals():
    tally, counts, results = serve_once_and_fetch("http://nowhere.test/", "http://meta.test/")
    assert [r["fetch_status"] for r in results] == ["dns_error", "blocked"]
    assert counts["dns_failures"] == 1 and counts["ssrf_blocked"] == 1
    assert tally.drain() == {"fetches": 2, "failed_dns_error": 1, "failed_blocked": 1}
    assert len(tally.windows["dns"]) == 0   # only answers that were used are timed
