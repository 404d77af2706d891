"""Discoveries gathered per host over a window (decision 3914): a window's values decode to one element of
the host's valid events, each malformed value to a reject of its own."""
from __future__ import annotations

import json

from pyflink.common import Row

from jobs.crawl import DecodeGathered, _frontier_events, _rejects_to_status
from tests.metric_stand_ins import Counter
from udfs.records import TOPIC_FRONTIER, TOPIC_STATUS


def batch(host: str, *paths: str) -> str:
    return json.dumps({"v": 1, "type": "discovered", "host": host,
                       "urls": [{"url": f"http://{host}{p}", "fp": 1000 + i, "depth": 1, "priority": 5,
                                 "source": "link"} for i, p in enumerate(paths)]})


def decoded(*values: str, host: str | None = "a.example") -> list[dict]:
    decoder = DecodeGathered()
    decoder.rejected = Counter()
    return list(decoder.flat_map(Row(host, list(values))))


def test_a_windows_values_become_one_element_of_the_hosts_events_in_order():
    items = decoded(batch("a.example", "/1"), batch("a.example", "/2", "/3"))
    assert [item["kind"] for item in items] == ["events"]
    (row,) = _frontier_events(items[0])
    assert row[0] == "a.example"
    assert [[u["url"] for u in event["urls"]] for event in row[1]] == [
        ["http://a.example/1"], ["http://a.example/2", "http://a.example/3"]]


def test_each_malformed_value_is_a_reject_of_its_own_and_the_rest_still_go():
    items = decoded("not json", batch("a.example", "/1"), json.dumps({"v": 1, "type": "discovered"}))
    rejects = [item for item in items if item["kind"] == "reject"]
    assert len(rejects) == 2 and all(r["topic"] == TOPIC_FRONTIER for r in rejects)
    assert [topic for r in rejects for topic, _, _ in _rejects_to_status(r)] == [TOPIC_STATUS, TOPIC_STATUS]
    (events,) = [item for item in items if item["kind"] == "events"]
    assert len(events["events"]) == 1


def test_values_grouped_under_no_host_are_all_rejected():
    items = decoded("[1, 2]", "{}", host=None)
    assert [item["kind"] for item in items] == ["reject", "reject"]


def test_ip_done_events_written_by_another_job_do_not_reach_the_frontier():
    ip_done = json.dumps({"v": 1, "type": "ip_done", "host": "a.example", "gate_key": "ip:127.0.0.1",
                          "lease_id": "x"})
    (item,) = decoded(ip_done, batch("a.example", "/1"))
    (row,) = _frontier_events(item)
    assert [event["type"] for event in row[1]] == ["discovered"]
    assert _frontier_events(decoded(ip_done)[0]) == []
