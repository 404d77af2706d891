"""Duplicate-ratio priority in the frontier glue (issue #4, decision 1801): a host whose pages keep
turning out to be duplicates gets its newly discovered URLs queued at a lower priority."""
from __future__ import annotations

from tests.frontier_harness import HOST, Harness
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import HostState
from udfs.politeness import PolitenessPolicy


def crawl(h: Harness, n: int, duplicate: bool) -> None:
    for _ in range(n):
        (page,) = h.advance(1.0)
        event = {"v": 1, "type": "completion", "host": HOST, "lease_id": page["lease_id"], "url": page["url"],
                 "fp": page["fp"], "fetch_status": "ok", "http_status": 200, "started_at": h.now, "done_at": h.now,
                 "fetch_ms": 5.0, "bytes": 100, "content_hash": None, "simhash": None, "etag": None,
                 "last_modified": None, "redirect": None, "retry_after": None, "duplicate": duplicate}
        h.event(event)


def test_a_host_of_duplicates_is_demoted_and_a_host_of_new_content_is_not():
    for duplicate, demoted in ((True, True), (False, False)):
        h = Harness(policy=FrontierPolicy(max_queue=1000),
                    politeness=PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.1))
        (robots,) = h.discover(*(f"/p{i}" for i in range(40)))
        h.robots(robots, body=b"")
        crawl(h, 30, duplicate)
        h.discover("/new")
        assert (h.state.quality.offset > 0) is demoted
        assert (h.counts["demoted_duplicate_host"] == 1) is demoted
        assert HostState.from_row(h.state.to_row()).quality == h.state.quality
