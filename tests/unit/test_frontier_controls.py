"""Operator controls in the frontier glue (operators.host_frontier.HostFrontier + udfs.control_state):
blocking, pausing, rate limits and takedowns, applied to a simulated host with a simulated clock."""
from __future__ import annotations

import pytest

import udfs.control_state as control_state
from tests.unit.test_control_state import CountingRe, pattern_record, patterns
from tests.frontier_harness import HOST, Harness
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import UrlRecord, UrlStatus, signed_fp
from udfs.control_state import DEFAULT_CONTROL_POLICY, ControlTable
from udfs.politeness import PolitenessPolicy
from udfs.urls import url_fp


def control(table: ControlTable, record: dict) -> None:
    table.apply(record)


def started(table: ControlTable, **politeness) -> tuple[Harness, dict]:
    """A host whose robots.txt is known and whose first page is leased."""
    h = Harness(politeness=PolitenessPolicy(**({"default_delay_s": 1.0, "min_delay_s": 0.1} | politeness)),
                controls=table)
    (robots,) = h.discover("/a", "/b", "/c", "/d")
    h.robots(robots, body=b"")
    (page,) = h.advance(1.0)
    return h, page


def test_a_blocked_host_finishes_its_lease_then_fetches_nothing_until_unblocked():
    table = ControlTable()
    h, page = started(table)
    control(table, {"type": "host", "host": HOST, "rate_limit_rps": None, "blocked": True})
    assert h.complete(page) == []
    assert h.advance(60) == []               # blocked: nothing, however long
    assert h.state.queued == 3               # the queue is kept for an unblock
    control(table, {"type": "host", "host": HOST, "rate_limit_rps": None, "blocked": False})
    released = h.advance(FrontierPolicy().control_poll_s)
    assert [r["url"] for r in released] == [f"http://{HOST}/b"]   # picked up within one poll


def test_pause_halts_every_host_and_resume_restarts_within_the_poll():
    table = ControlTable()
    h, page = started(table)
    control(table, {"type": "pause"})
    h.complete(page)
    assert h.advance(30) == []
    control(table, {"type": "resume"})
    assert len(h.advance(5.0)) == 1


def test_an_operator_rate_limit_sets_the_gap_between_fetches():
    table = ControlTable()
    h, page = started(table)
    control(table, {"type": "host", "host": HOST, "rate_limit_rps": 0.25, "blocked": None})
    h.complete(page)
    assert h.state.next_allowed_at == pytest.approx(h.now + 4.0)   # 1 / 0.25 rps
    assert h.advance(3.9) == []
    assert len(h.advance(0.2)) == 1


def test_a_rate_limit_never_beats_a_robots_crawl_delay():
    table = ControlTable()
    h = Harness(politeness=PolitenessPolicy(min_delay_s=0.1), controls=table)
    control(table, {"type": "host", "host": HOST, "rate_limit_rps": 5.0, "blocked": None})
    (robots,) = h.discover("/a", "/b")
    from udfs.robots import parse_robots
    h.frontier.parse_rules = parse_robots
    h.robots(robots, body=b"User-agent: *\nCrawl-delay: 3\n")
    assert h.state.next_allowed_at == pytest.approx(h.now + 3.0)


def test_a_null_field_leaves_the_other_setting_as_it_was():
    table = ControlTable()
    control(table, {"type": "host", "host": HOST, "rate_limit_rps": 2.0, "blocked": None})
    control(table, {"type": "host", "host": HOST, "rate_limit_rps": None, "blocked": True})
    assert table.for_host(HOST).rate_limit_rps == 2.0 and table.for_host(HOST).blocked
    assert not table.for_host("other.example").halted


def test_taken_down_urls_and_patterns_are_neither_admitted_nor_released():
    table = ControlTable()
    h, page = started(table)
    control(table, {"type": "takedown", "scope": "url", "value": f"http://{HOST}/b"})
    control(table, {"type": "takedown", "scope": "pattern", "value": f"http://{HOST}/secret/*"})
    h.discover("/secret/1", "/secret/2", "/e")
    assert h.counts["dropped_taken_down"] == 2
    h.complete(page)
    released = [r["url"] for r in h.advance(1.0)]
    assert released == [f"http://{HOST}/c"]            # /b was queued before its takedown: dropped at release
    assert h.counts["dropped_taken_down"] == 3
    assert UrlRecord.from_row(h.urls[signed_fp(url_fp(f"http://{HOST}/b"))]).status is UrlStatus.TAKEN_DOWN


def test_a_host_takedown_stops_admission_and_fetching_for_good():
    table = ControlTable()
    h, page = started(table)
    control(table, {"type": "takedown", "scope": "host", "value": HOST})
    assert h.discover("/x") == [] and h.counts["dropped_taken_down"] == 1
    h.complete(page)
    assert h.advance(120) == []


def test_the_table_rebuilt_from_its_rows_gives_the_same_answers():
    table = ControlTable()
    rows: dict[str, str] = {}
    for record in ({"type": "host", "host": HOST, "rate_limit_rps": 0.5, "blocked": True}, {"type": "pause"},
                   {"type": "takedown", "scope": "pattern", "value": "http://a.example/private/*"},
                   {"type": "takedown", "scope": "host", "value": "gone.example"}):
        for key, value in table.rows_for(record):
            rows[key] = value
            table.apply_row(key, value)
    restored = ControlTable()
    restored.load(rows.items())
    for host in (HOST, "gone.example", "other.example"):
        assert restored.for_host(host) == table.for_host(host)
    assert restored.url_taken_down("http://a.example/private/x") and not restored.url_taken_down("http://a.example/")


@pytest.mark.parametrize("key,value", [("host:x", "not json"), ("host:x", "[1]"), ("host:x", '{"rate_limit_rps":"a"}'),
                                       ("takedown:nonsense", "1"), ("other", "1")])
def test_malformed_rows_are_ignored(key, value):
    table = ControlTable()
    table.apply_row(key, value)
    assert table.for_host("x") == ControlTable().for_host("x")


def test_takes_down_covers_url_pattern_and_host_takedowns_alike():
    table = ControlTable()
    control(table, {"type": "takedown", "scope": "url", "value": "http://a.example/x"})
    control(table, {"type": "takedown", "scope": "pattern", "value": "http://b.example/private/*"})
    control(table, {"type": "takedown", "scope": "host", "value": "c.example:8080"})
    assert table.takes_down("http://a.example/x") and not table.takes_down("http://a.example/y")
    assert table.takes_down("http://b.example/private/1") and not table.takes_down("http://b.example/")
    assert table.takes_down("http://c.example:8080/any") and not table.takes_down("http://c.example/any")
    assert not table.takes_down("not a url")


def test_patterns_of_other_hosts_cost_the_frontier_no_pattern_work(monkeypatch: pytest.MonkeyPatch):
    counting = CountingRe()
    monkeypatch.setattr(control_state, "re", counting)
    table = ControlTable(DEFAULT_CONTROL_POLICY.max_takedown_patterns)
    for value in patterns(500):
        control(table, pattern_record(value))
    h, page = started(table)
    h.discover("/e", "/f")
    h.complete(page)
    assert [r["url"] for r in h.advance(1.0)] == [f"http://{HOST}/b"]
    assert (counting.compiles, counting.matches) == (0, 0)      # no pattern names this host
    control(table, pattern_record(f"http*://{HOST}/secret/*"))
    h.discover("/secret/1", "/secret/2", "/g")
    assert h.counts["dropped_taken_down"] == 2 and counting.compiles == 1   # its own pattern, compiled once


def test_a_pattern_the_cap_refuses_takes_nothing_down():
    table = ControlTable(max_patterns=1)
    control(table, pattern_record("https://elsewhere.example/*"))
    refused = pattern_record(f"http://{HOST}/secret/*")
    assert table.refusal(refused) is not None
    control(table, refused)
    h, _ = started(table)
    h.discover("/secret/1")
    assert h.counts["dropped_taken_down"] == 0
