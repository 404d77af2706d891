"""Recrawl in the running frontier (issue #6 wiring, issue #7 gauges; decisions 1110-1114).

operators.host_frontier.HostFrontier driven with dict-backed state, a simulated clock and simulated
timers, as in tests/frontier_harness.py, plus the due buckets and their timers.
"""
from __future__ import annotations

import collections
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.frontier_config import HostFrontierConfig
from operators.frontier_gauges import GAUGES, FrontierGauges
from operators.frontier_metrics import METRICS
from operators.host_frontier import HostFrontier
from udfs.warc_capture import bundle_records, capture_of
from tests.frontier_harness import HOST, T0, Map, Value
from udfs.frontier import rows
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import (HostState, LANES, PRIORITIES, QueueItem, SLOT_SPAN, UrlRecord, UrlStatus,
                                coerce_capture, due_entries, replace, signed_fp)
from udfs.frontier.pages import page_value
from udfs.frontier.queues import pop_lane, push, recrawl_item
from udfs.frontier.admission import Verdict, admit
from udfs.politeness import PolitenessPolicy
from udfs.records import b64
from udfs.recrawl import HostSignals, PageValue, RecrawlPolicy, UrlHistory, next_due
from udfs.urls import url_fp
from udfs.warc import WarcBuilder

RECRAWL = RecrawlPolicy(min_interval_s=600.0, max_interval_s=86_400.0, budget_interval_s=3_600.0)
CAPTURE = {"record_id": "<urn:uuid:11111111-1111-4111-8111-111111111111>", "target_uri": f"http://{HOST}/a",
           "date": "2026-12-01T00:00:00Z", "payload_digest": "sha1:AAAA"}


class Harness:
    """One host's frontier with recrawl on: the politeness timer and the due-bucket timers simulated apart."""

    def __init__(self, recrawl: RecrawlPolicy = RECRAWL, policy: FrontierPolicy = FrontierPolicy(),
                 gauges: FrontierGauges | None = None, epoch: int = 1, state: Harness | None = None) -> None:
        if state is None:
            self.host_row, self.body, self.slots, self.urls, self.due = Value(), Value(), Map(), Map(), Map()
            self.timer: int = 0
            self.due_timers: set[int] = set()
            self.now = T0
        else:  # a restart from a savepoint: the same state and timers, a new operator instance
            self.host_row, self.body, self.slots, self.urls, self.due = (state.host_row, state.body, state.slots,
                                                                         state.urls, state.due)
            self.timer, self.due_timers, self.now = state.timer, state.due_timers, state.now
        self.counts: collections.Counter[str] = collections.Counter()
        self.gauges = gauges
        self.frontier = HostFrontier(self.host_row, self.body, self.slots, self.urls, self._count, self._parse,
                                     HostFrontierConfig(policy=policy, recrawl=recrawl,
                                                        politeness=PolitenessPolicy(default_delay_s=1.0,
                                                                                    min_delay_s=0.1)),
                                     due=self.due, gauges=gauges, epoch=epoch)

    def _count(self, name: str) -> None:
        assert name in METRICS, name
        self.counts[name] += 1

    @staticmethod
    def _parse(body: bytes):
        from tests.frontier_harness import PrefixRules
        return PrefixRules(body)

    @property
    def state(self) -> HostState:
        return HostState.from_row(self.host_row.value())

    def record(self, path: str) -> UrlRecord:
        return UrlRecord.from_row(self.urls[signed_fp(url_fp(f"http://{HOST}{path}"))])

    def _apply(self, effects) -> list[dict]:
        if effects.timer_delete_ms:
            assert effects.timer_delete_ms == self.timer
            self.timer = 0
        if effects.timer_register_ms:
            self.timer = effects.timer_register_ms
        assert self.state.timer_ms == self.timer, "one politeness timer per host, as before"
        assert self.timer == 0 or self.timer not in self.due_timers, "politeness timer apart from due timers"
        self.due_timers.update(effects.due_timers)
        assert set(self.due) <= self.due_timers, "every due bucket has its timer"
        assert len(self.slots) == self.state.queued
        return effects.requests

    def discover(self, *paths: str) -> list[dict]:
        urls = [{"url": f"http://{HOST}{p}", "fp": url_fp(f"http://{HOST}{p}"), "depth": 1, "priority": 5,
                 "source": "link"} for p in paths]
        return self._apply(self.frontier.on_event(HOST, {"v": 1, "type": "discovered", "host": HOST, "urls": urls},
                                                  self.now))

    def robots(self, req: dict) -> list[dict]:
        return self._apply(self.frontier.on_event(HOST, {
            "v": 1, "type": "robots", "host": HOST, "lease_id": req["lease_id"], "fetch_status": "ok",
            "http_status": 404, "fetched_at": self.now, "fetch_ms": 20.0, "body_b64": b64(b"")}, self.now))

    def complete(self, req: dict, http_status: int = 200, content_hash: str | None = "sha256:1",
                 etag: str | None = '"v1"', last_modified: str | None = "Mon, 30 Nov 2026 00:00:00 GMT",
                 capture: dict | None = None) -> list[dict]:
        return self._apply(self.frontier.on_event(HOST, {
            "v": 1, "type": "completion", "host": HOST, "lease_id": req["lease_id"], "url": req["url"],
            "fp": req["fp"], "fetch_status": "ok", "http_status": http_status, "started_at": self.now - 0.05,
            "done_at": self.now, "fetch_ms": 50.0, "bytes": 100, "content_hash": content_hash, "simhash": None,
            "etag": etag, "last_modified": last_modified, "redirect": None, "retry_after": None,
            "capture": capture}, self.now))

    def advance(self, seconds: float, answer_robots: bool = False) -> list[dict]:
        """Move the clock, firing every timer (politeness and due buckets) in time order, as Flink would."""
        out: list[dict] = []
        end = self.now + seconds
        while True:
            pending = sorted(self.due_timers | ({self.timer} if self.timer else set()))
            if not pending or pending[0] > end * 1000:
                break
            ts = pending[0]
            if ts == self.timer:
                self.timer = 0
            self.due_timers.discard(ts)
            self.now = max(self.now, ts / 1000)
            requests = self._apply(self.frontier.on_timer(HOST, ts, self.now))
            while answer_robots and requests and requests[-1]["kind"] == "robots":
                out += requests
                requests = self.robots(requests[-1])
            out += requests
            if answer_robots and any(r["kind"] == "page" for r in requests):
                return out
        self.now = end
        return out

    def pages(self, seconds: float) -> list[dict]:
        """`advance` up to the first page request, answering any robots.txt refresh at once (its cache
        expires within a day); the clock stops at that request, so its lease is still running."""
        return [r for r in self.advance(seconds, answer_robots=True) if r["kind"] == "page"]

    def first_fetch(self, *paths: str) -> list[dict]:
        """Discover `paths`, answer robots.txt, and return the first page request."""
        (robots,) = self.discover(*paths)
        assert robots["kind"] == "robots"
        released = self.robots(robots) + self.advance(1.0)
        assert len(released) == 1
        return released


def test_a_fetched_url_comes_due_at_next_due_and_is_released_again_with_validators():
    h = Harness()
    (page,) = h.first_fetch("/a")
    fetched_at = h.now
    h.complete(page, capture=CAPTURE)
    record = h.record("/a")
    assert record.status is UrlStatus.DONE and record.history.etag == '"v1"'
    expected = next_due(UrlHistory(last_fetch_at=fetched_at, etag='"v1"', content_hash="sha256:1",
                                   last_modified="Mon, 30 Nov 2026 00:00:00 GMT"), PageValue(depth=1),
                        fetched_at, RECRAWL, HostSignals())
    assert record.due == pytest.approx(expected)
    assert RECRAWL.min_interval_s <= record.due - fetched_at <= RECRAWL.max_interval_s
    assert h.advance(record.due - h.now - 1.0) == []          # not before its due time
    (again,) = h.pages(FrontierPolicy().due_bucket_s + 2.0)  # at most one bucket late
    assert again["url"] == f"http://{HOST}/a" and record.due <= h.now <= record.due + 61.0
    assert again["etag"] == '"v1"' and again["last_modified"] == "Mon, 30 Nov 2026 00:00:00 GMT"
    assert again["revisit_of"] == CAPTURE
    assert h.counts["recrawl_scheduled"] == 1 and h.counts["recrawl_due"] == 1 and h.counts["recrawl_released"] == 1


def test_the_host_tracks_what_its_schedule_asks_for_one_term_per_page():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page)
    first = h.record("/a")
    signals = h.state.signals
    assert signals.pages == 1 and signals.demand == pytest.approx(1.0 / (first.due - first.history.last_fetch_at))
    (again,) = h.pages(first.due - h.now + FrontierPolicy().due_bucket_s + 2.0)
    h.complete(again)
    second = h.record("/a")
    signals = h.state.signals
    assert signals.pages == 1 and signals.demand == pytest.approx(1.0 / (second.due - second.history.last_fetch_at))


def test_stable_pages_back_off_to_longer_intervals():
    h = Harness()
    (page,) = h.first_fetch("/a")
    intervals = []
    for _ in range(8):
        h.complete(page)   # the same payload hash every time: unchanged
        record = h.record("/a")
        intervals.append(record.due - h.now)
        (page,) = h.pages(record.due - h.now + 61.0)
    assert intervals[-1] > 2 * intervals[0]
    assert all(later >= earlier * 0.999 for earlier, later in zip(intervals[3:], intervals[4:]))
    assert h.counts["recrawl_unchanged"] == 7 and h.counts["recrawl_changed"] == 0


def test_changing_pages_come_back_sooner_than_stable_ones():
    stable, changing = Harness(), Harness()
    dues = {}
    for h, hashes in ((stable, ["same"] * 6), (changing, [f"h{i}" for i in range(6)])):
        (page,) = h.first_fetch("/a")
        for content in hashes:
            h.complete(page, content_hash=content)
            (page,) = h.pages(h.record("/a").due - h.now + 61.0)
        dues[h] = h.record("/a").due - h.record("/a").history.last_fetch_at
    assert dues[changing] < dues[stable]
    assert changing.counts["recrawl_changed"] == 5


def test_a_304_keeps_validators_and_capture_and_counts_as_unchanged():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page, capture=CAPTURE)
    (again,) = h.pages(h.record("/a").due - h.now + 61.0)
    h.complete(again, http_status=304, content_hash="sha256:empty", etag=None, last_modified=None)
    record = h.record("/a")
    assert (record.etag, record.last_modified) == ('"v1"', "Mon, 30 Nov 2026 00:00:00 GMT")
    assert record.history.content_hash == "sha256:1"          # the stored copy's hash, not the 304's
    assert rows.capture_of(record.capture, f"http://{HOST}/a") == coerce_capture(CAPTURE)   # the full capture
    assert h.counts["not_modified"] == 1 and h.counts["recrawl_unchanged"] == 1
    (third,) = h.pages(record.due - h.now + 61.0)
    assert third["etag"] == '"v1"' and third["revisit_of"] == CAPTURE


def test_a_new_capture_replaces_the_old_one_after_a_changed_200():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page, capture=CAPTURE)
    (again,) = h.pages(h.record("/a").due - h.now + 61.0)
    newer = CAPTURE | {"record_id": "<urn:uuid:22222222-2222-4222-8222-222222222222>"}
    h.complete(again, content_hash="sha256:2", etag='"v2"', capture=newer)
    assert rows.capture_of(h.record("/a").capture, f"http://{HOST}/a") == coerce_capture(newer)
    assert h.record("/a").etag == '"v2"'
    assert h.counts["recrawl_changed"] == 1


def test_rediscovery_does_not_fetch_a_scheduled_url_before_its_due_time():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page)
    due = h.record("/a").due
    h.advance(30.0)
    assert h.discover("/a") == [] and h.counts["dropped_seen"] == 1
    assert h.record("/a").status is UrlStatus.DONE
    h.now = due + 1.0                       # due, but its bucket's timer has not fired yet
    (again,) = h.discover("/a")
    assert h.counts["admitted"] == 2 and again["etag"] == '"v1"'   # the history and validators are kept
    h.complete(again)
    assert h.advance(60.0) == [] and h.counts["recrawl_stale"] == 1   # the old bucket entry is stale now


def test_failures_are_not_scheduled_and_keep_the_crawl_cycle_rule():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page, http_status=404)
    assert h.record("/a").due is None and not h.due
    assert h.discover("/a") == []                          # within the crawl cycle
    h.now += FrontierPolicy().recrawl_after_s
    h.discover("/a")
    assert h.counts["admitted"] == 2


def test_a_restart_keeps_every_schedule():
    h = Harness()
    (page,) = h.first_fetch("/a", "/b")
    h.complete(page)
    (second,) = h.advance(2.0)
    h.complete(second)
    dues = {p: h.record(p).due for p in ("/a", "/b")}
    restored = Harness(state=h, epoch=2)    # a new operator instance on the restored state and timers
    (first,) = restored.pages(min(dues.values()) - restored.now + 61.0)
    restored.complete(first)
    (second,) = restored.pages(max(dues.values()) - restored.now + 61.0)
    assert {first["url"], second["url"]} == {f"http://{HOST}/a", f"http://{HOST}/b"}


def test_due_bucket_rows_hold_fp_and_url_and_are_removed_when_fired():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page)
    ((bucket, row),) = h.due.items()
    assert bucket % 60_000 == 0 and bucket / 1000 >= h.record("/a").due
    assert due_entries(row) == [[signed_fp(url_fp(f"http://{HOST}/a")), f"http://{HOST}/a"]]
    h.advance(bucket / 1000 - h.now + 1)
    assert not h.due


def test_the_politeness_timer_never_lands_on_a_due_bucket_time():
    h = Harness()
    (robots,) = h.discover("/a", "/b")
    h.now = 1_700_000_039.0     # robots done here: the next page is allowed at ...040.000, a bucket time
    h.robots(robots)
    assert h.timer == 1_700_000_040_001


def _queued(lanes: dict[int, int]) -> HostState:
    state = HostState()
    for index, n in lanes.items():
        for _ in range(n):
            state, _ = push(state, QueueItem(f"http://{HOST}/{index}", 1, priority=index))
    return state


def test_the_split_gives_recrawl_its_share_when_both_lanes_have_urls():
    state = _queued({5: 1000, PRIORITIES + 4: 1000})
    lanes = []
    for _ in range(1000):
        state, slot = pop_lane(state, RecrawlPolicy(recrawl_share=0.6))
        lanes.append(slot // SLOT_SPAN >= PRIORITIES)
    assert 0.55 < sum(lanes) / len(lanes) < 0.65


def test_lane_and_tier_choices_are_reproducible_from_state():
    state = _queued({2: 5, PRIORITIES: 5, PRIORITIES + 9: 5})
    runs = []
    for _ in range(2):
        s, slots = state, []
        for _ in range(15):
            s, slot = pop_lane(s, RECRAWL)
            slots.append(slot)
        runs.append(slots)
    assert runs[0] == runs[1] and None not in runs[0]


def test_a_lane_alone_gets_every_release_and_no_tier_starves():
    state = _queued({PRIORITIES: 400, PRIORITIES + 9: 400})
    served = collections.Counter()
    for _ in range(400):
        state, slot = pop_lane(state, RecrawlPolicy(recrawl_share=0.0))   # no discovery URLs: recrawl anyway
        served[slot // SLOT_SPAN - PRIORITIES] += 1
    assert served[0] > served[9] >= 1
    assert pop_lane(HostState(), RECRAWL) == (HostState(), None)


def test_recrawl_item_tiers_by_value_and_urgency_and_skips_stale_entries():
    history = UrlHistory(last_fetch_at=T0)
    record = UrlRecord(UrlStatus.DONE, T0, '"e"', None, history, T0 + 1000.0, None, 0)
    on_time = recrawl_item(record, "http://h/a", 7, T0 + 1000.0, RECRAWL)
    late = recrawl_item(record, "http://h/a", 7, T0 + 4000.0, RECRAWL)
    assert on_time.recrawl and late.priority < on_time.priority and on_time.etag == '"e"'
    assert recrawl_item(record, "http://h/a", 7, T0 + 500.0, RECRAWL) is None       # rescheduled later
    queued = UrlRecord(UrlStatus.QUEUED, T0, None, None, history, T0 + 1000.0)
    assert recrawl_item(queued, "http://h/a", 7, T0 + 2000.0, RECRAWL) is None      # already queued
    assert recrawl_item(None, "http://h/a", 7, T0, RECRAWL) is None


def test_old_rows_still_read():
    assert UrlRecord.from_row('["done",5.0,"\\"e\\"",null]') == UrlRecord(UrlStatus.DONE, 5.0, '"e"', None)
    old_item = QueueItem.from_row('["http://h/a",1,0,5,0,null,null,0]')
    assert old_item.capture is None and not old_item.recrawl
    v2 = json.loads(HostState().to_row())
    v2.update(v=2, queues=[[0, 0]] * 9 + [[3, 4]])
    for key in ("recrawl", "draws", "oldest_due", "gauge_epoch"):
        del v2[key]
    state = HostState.from_row(json.dumps(v2))
    assert len(state.queues) == LANES and state.depth(9) == 1 and state.recrawl_queued == 0
    assert state.signals == HostSignals()
    with pytest.raises(ValueError, match="schema version"):
        UrlRecord.from_row('["done",5.0,null,null,9,null,null,null,0]')


def test_url_records_and_queue_items_round_trip_with_recrawl_fields():
    history = UrlHistory(last_fetch_at=T0, etag='"e"', content_hash="sha256:1", unchanged_streak=2)
    record = UrlRecord(UrlStatus.DONE, T0, '"e"', None, history, T0 + 60, coerce_capture(CAPTURE), 3)
    assert UrlRecord.from_row(record.to_row()) == record
    item = QueueItem("http://h/a", 1, 2, PRIORITIES + 3, 0, '"e"', None, 0, coerce_capture(CAPTURE))
    assert QueueItem.from_row(item.to_row()) == item
    assert len(json.loads(UrlRecord(UrlStatus.QUEUED, T0).to_row())) == 4   # unfetched: the v1 layout


@pytest.mark.parametrize("raw", [None, 3, "x", [], ["a", "b"], {"record_id": 1, "target_uri": "u", "date": "d"},
                                 ["", "u", "d", None], {"record_id": "r", "target_uri": "u"}])
def test_a_malformed_capture_reads_as_none(raw):
    assert coerce_capture(raw) is None


def test_gauges_count_each_lane_and_the_age_of_the_oldest_due_url():
    gauges = FrontierGauges()
    h = Harness(gauges=gauges, policy=FrontierPolicy())
    (page,) = h.first_fetch("/a", "/b", "/c")
    assert gauges.value("queue_depth_p5", h.now) == 2 and gauges.value("hosts_with_queue", h.now) == 1
    h.complete(page)
    due = h.record("/a").due
    for key, row in h.frontier.controls.rows_for({"type": "pause"}):   # hold releases: the URL waits
        h.frontier.controls.apply_row(key, row)
    h.now = due - 5.0          # skip the paused host's polls
    h.advance(66.0)
    tiers = sum(gauges.value(f"recrawl_depth_t{t}", h.now) for t in range(10))
    assert tiers == 1 and gauges.value("queue_depth_p5", h.now) == 2
    h.now += 100.0
    assert gauges.value("oldest_due_age_s", h.now) == int(h.now - due)
    assert set(GAUGES) >= {"queue_depth_p0", "recrawl_depth_t9", "hosts_with_queue", "oldest_due_age_s"}


def test_gauges_count_a_restored_host_once_from_its_state():
    gauges = FrontierGauges()
    h = Harness(gauges=gauges)
    h.discover("/a", "/b")
    fresh = FrontierGauges()
    restored = Harness(state=h, gauges=fresh, epoch=2)
    restored.discover("/c")
    assert fresh.value("queue_depth_p5", h.now) == 3 and fresh.value("hosts_with_queue", h.now) == 1


def _result(status: int, revisit_of: dict | None) -> dict:
    request = {"host": HOST, "url": f"http://{HOST}/a", "fp": 1, "kind": "page", "lease_id": f"{HOST}/2",
               "depth": 1, "attempt": 1, "etag": '"v1"', "revisit_of": revisit_of}
    return {"request": request, "fetch_status": "ok", "reason": "", "http_status": status,
            "http_reason": "Not Modified" if status == 304 else "OK", "headers": [("ETag", '"v1"')],
            "request_headers": [("If-None-Match", '"v1"')], "body": b"" if status == 304 else b"hello",
            "ip": "127.0.0.1", "started_at": T0, "done_at": T0 + 0.1, "truncated": None}


def test_a_304_is_archived_as_a_server_not_modified_revisit_of_the_previous_capture():
    bundle = {"result": _result(304, CAPTURE), "content_hash": None, "simhash": None, "page": None}
    revisit, request = bundle_records(WarcBuilder(), bundle, None)
    assert revisit.info.warc_type == "revisit" and request.info.warc_type == "request"
    assert "server-not-modified" in revisit.header("WARC-Profile")
    assert revisit.header("WARC-Refers-To") == CAPTURE["record_id"]
    assert revisit.header("WARC-Refers-To-Date") == CAPTURE["date"]
    assert capture_of(bundle, [revisit, request]) == CAPTURE   # later revisits still refer to the original


def test_a_response_is_the_capture_the_next_revisit_refers_to():
    bundle = {"result": _result(200, None), "content_hash": None, "simhash": None, "page": None}
    records = bundle_records(WarcBuilder(), bundle, None)
    capture = capture_of(bundle, records)
    assert capture["record_id"] == records[0].record_id and capture["target_uri"] == f"http://{HOST}/a"
    assert capture["payload_digest"].startswith("sha1:")
    assert capture_of(bundle, []) is None


def test_a_failed_refetch_keeps_the_history_unscheduled():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page, capture=CAPTURE)
    history = h.record("/a").history
    (again,) = h.pages(h.record("/a").due - h.now + 61.0)
    h.complete(again, http_status=404, etag=None, last_modified=None)
    record = h.record("/a")
    assert record.due is None and record.history == history and record.etag == '"v1"'
    assert rows.capture_of(record.capture, f"http://{HOST}/a") == coerce_capture(CAPTURE)


def test_the_recrawl_lane_does_not_fill_the_discovery_queue_cap():
    state = _queued({PRIORITIES: 3})
    item = QueueItem(f"http://{HOST}/new", 9, priority=5)
    _, admission = admit(state, item, None, None, T0, FrontierPolicy(max_queue=2))
    assert admission.verdict is Verdict.ADMITTED


def test_due_buckets_must_be_wider_than_a_millisecond_step():
    with pytest.raises(ValueError, match="due_bucket_s"):
        FrontierPolicy(due_bucket_s=0.001)


_ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("discover"), st.sets(st.integers(0, 4), min_size=1)),
    st.tuples(st.just("complete"), st.sampled_from([200, 304, 404, 503])),
    st.tuples(st.just("hash"), st.integers(0, 2)),
    st.tuples(st.just("advance"), st.floats(0.5, 4_000.0)),
), max_size=40)
FAST = RecrawlPolicy(min_interval_s=60.0, max_interval_s=3_600.0, budget_interval_s=600.0)


@settings(max_examples=200, deadline=None)
@given(_ACTIONS)
def test_with_recrawl_on_a_url_is_in_the_frontier_at_most_once_and_never_refetched_early(actions):
    h = Harness(recrawl=FAST)
    pending: list[dict] = []
    content = 0
    (robots,) = h.discover("/0")

    def take(requests: list[dict]) -> None:
        for request in requests:
            if request["kind"] == "robots":
                take(h.robots(request))
                continue
            row = h.urls[signed_fp(request["fp"])]
            record = UrlRecord.from_row(row)
            if record.history is not None and record.history.last_fetch_at is not None and request["etag"]:
                # a refetch: never before its schedule allowed (due, or rediscovered at/after due)
                assert h.now >= record.history.last_fetch_at + FAST.min_interval_s - 1e-6
            pending.append(request)

    def check() -> None:
        queued = [QueueItem.from_row(row).fp for row in h.slots.values()]
        lease = h.state.lease
        in_frontier = queued + ([lease.item.fp] if lease is not None and lease.kind == "page" else [])
        assert len(in_frontier) == len(set(in_frontier)), "a url_fp is in the frontier at most once"
        for fp in in_frontier:
            assert UrlRecord.from_row(h.urls[signed_fp(fp)]).status is UrlStatus.QUEUED

    take(h.robots(robots))
    # the drawn actions, then a tail that answers and waits, so what was scheduled comes due
    tail = [("complete", 200), ("advance", 4_000.0)] * 3
    for action, arg in actions + tail:
        if action == "discover":
            take(h.discover(*[f"/{i}" for i in sorted(arg)]))
        elif action == "hash":
            content = arg
        elif action == "complete" and pending:
            request = pending.pop()   # the latest lease; older ones may have expired (stale answers)
            take(h.complete(request, http_status=arg, content_hash=f"sha256:{content}"))
        elif action == "advance":
            take(h.advance(arg, answer_robots=True))
        check()


def _sitemap_lists(h: Harness, path: str, lastmod: float) -> list[dict]:
    url = f"http://{HOST}{path}"
    entry = {"url": url, "fp": url_fp(url), "depth": 1, "priority": 5, "source": "sitemap", "lastmod": lastmod}
    return h._apply(h.frontier.on_event(HOST, {"v": 1, "type": "discovered", "host": HOST, "urls": [entry]}, h.now))


def test_a_sitemap_lastmod_after_the_last_fetch_brings_the_recrawl_forward():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page)
    fetched, due = h.now, h.record("/a").due
    h.advance(RECRAWL.min_interval_s * 2)
    _sitemap_lists(h, "/a", lastmod=fetched - 10.0)          # lastmod before the fetch: nothing new
    assert h.record("/a").due == due and h.counts["dropped_seen"] == 1
    _sitemap_lists(h, "/a", lastmod=h.now - 5.0)             # changed since: halfway to now (accuracy 0.5)
    record = h.record("/a")
    assert record.lastmod_claim and h.counts["sitemap_lastmod_forward"] == 1
    assert record.due == pytest.approx(h.now + 0.5 * (due - h.now), abs=1.0)
    _sitemap_lists(h, "/a", lastmod=h.now - 1.0)             # one claim at a time
    assert h.record("/a").due == record.due and h.counts["sitemap_lastmod_forward"] == 1
    (again,) = h.pages(record.due - h.now + 120.0)
    h.complete(again, content_hash="sha256:2")               # it did change: the host's lastmods are right
    assert not h.record("/a").lastmod_claim
    assert h.state.signals.lastmod_hits > 0 and h.state.signals.lastmod_misses == 0


def test_a_sitemap_lastmod_that_lied_makes_the_next_claim_count_less():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page)
    h.advance(RECRAWL.min_interval_s * 2)
    _sitemap_lists(h, "/a", lastmod=h.now - 5.0)
    (again,) = h.pages(h.record("/a").due - h.now + 120.0)
    h.complete(again)                                        # the same content: the claim was wrong
    assert h.state.signals.lastmod_misses > 0 and h.state.signals.lastmod_accuracy < 0.5


def test_url_records_keep_a_pending_lastmod_claim():
    record = UrlRecord(UrlStatus.DONE, 1.0, due=5.0, lastmod_claim=True)
    assert UrlRecord.from_row(record.to_row()) == record
    both = replace(record, sitemap=True)
    assert UrlRecord.from_row(both.to_row()) == both


def test_a_sitemap_listing_a_fetched_page_gives_it_the_sitemaps_priority_and_changefreq():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page)
    url = f"http://{HOST}/a"
    entry = {"url": url, "fp": url_fp(url), "depth": 1, "priority": 5, "source": "sitemap",
             "sitemap_priority": 1.0, "changefreq": "hourly"}
    h._apply(h.frontier.on_event(HOST, {"v": 1, "type": "discovered", "host": HOST, "urls": [entry]}, h.now))
    record = h.record("/a")
    assert (record.sitemap_priority, record.changefreq, record.status) == (1.0, "hourly", UrlStatus.DONE)
    (again,) = h.pages(record.due - h.now + 120.0)
    h.complete(again)                                        # the refetch keeps them for the next schedule
    assert (h.record("/a").sitemap_priority, h.record("/a").changefreq) == (1.0, "hourly")


def test_a_fetched_urls_row_says_each_thing_once():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page, capture=CAPTURE, content_hash="sha256:" + "ab" * 32)
    row = h.urls[signed_fp(url_fp(f"http://{HOST}/a"))]
    assert row.count('v1') == 1 and row.count("Mon, 30 Nov 2026") == 1     # the validators: in the history
    assert f"http://{HOST}/a" not in row                                    # the capture's target is the URL
    assert "sha256:" + "ab" * 8 in row and "ab" * 9 not in row             # 64 bits of the payload hash
    record = h.record("/a")
    assert (record.etag, record.last_modified) == ('"v1"', "Mon, 30 Nov 2026 00:00:00 GMT")
    (again,) = h.pages(record.due - h.now + 61.0)
    assert again["revisit_of"] == CAPTURE and again["etag"] == '"v1"'
    h.complete(again, content_hash="sha256:" + "ab" * 32)                   # the full hash matches the short one
    assert h.counts["recrawl_unchanged"] == 1


def _links_from(h: Harness, source: str, *paths: str) -> list[dict]:
    urls = [{"url": f"http://{HOST}{p}", "fp": url_fp(f"http://{HOST}{p}"), "depth": 2, "priority": 5,
             "source": "link"} for p in paths]
    event = {"v": 1, "type": "discovered", "host": HOST, "urls": urls, "from_host": HOST,
             "from_fp": url_fp(f"http://{HOST}{source}")}
    return h._apply(h.frontier.on_event(HOST, event, h.now))


def test_a_page_that_brings_new_urls_to_its_host_is_a_hub_and_comes_back_sooner():
    hub, leaf = Harness(), Harness()
    for h in (hub, leaf):
        (page,) = h.first_fetch("/a")
        h.complete(page)
    _links_from(hub, "/a", *(f"/new{n}" for n in range(15)))
    _links_from(leaf, "/a", "/a")                                 # only a link it had: nothing new
    assert (hub.record("/a").hub_yield, leaf.record("/a").hub_yield or 0.0) == (15.0, 0.0)   # 0 is not written
    _links_from(hub, "/a", "/new0", "/new1")                     # all seen: the yield halves
    assert hub.record("/a").hub_yield == 7.5
    for h in (hub, leaf):
        (again,) = h.pages(h.record("/a").due - h.now + 61.0)
        h.complete(again)
    assert hub.record("/a").hub_yield == 7.5                     # a refetch keeps it for the next schedule
    hub_interval = hub.record("/a").due - hub.record("/a").history.last_fetch_at
    leaf_interval = leaf.record("/a").due - leaf.record("/a").history.last_fetch_at
    assert hub_interval < leaf_interval


def test_hub_yield_is_kept_in_the_row_and_only_same_host_discoveries_count():
    record = UrlRecord(UrlStatus.DONE, 1.0, hub_yield=3.25)
    assert UrlRecord.from_row(record.to_row()) == record
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page)
    urls = [{"url": f"http://{HOST}/x", "fp": url_fp(f"http://{HOST}/x"), "depth": 2, "priority": 5, "source": "link"}]
    h._apply(h.frontier.on_event(HOST, {"v": 1, "type": "discovered", "host": HOST, "urls": urls,
                                        "from_host": "other.example", "from_fp": url_fp(f"http://{HOST}/a")}, h.now))
    assert h.record("/a").hub_yield is None


def test_a_page_many_pages_link_to_comes_back_sooner_than_one_page_links_to():
    popular, obscure = Harness(), Harness()
    for h in (popular, obscure):
        (page,) = h.first_fetch("/a")
        h.complete(page)
    for n in range(20):
        _links_from(popular, f"/p{n}", "/a")
    for _ in range(20):
        _links_from(obscure, "/p0", "/a")                         # one page, linking twenty times
    assert bin(obscure.record("/a").inlinks).count("1") == 1
    assert 12 <= page_value(popular.record("/a"), f"http://{HOST}/a", 1).inlinks <= 30
    for h in (popular, obscure):
        (again,) = h.pages(h.record("/a").due - h.now + 61.0)
        h.complete(again)
    assert bin(popular.record("/a").inlinks).count("1") >= 12   # kept by the refetch
    popular_interval = popular.record("/a").due - popular.record("/a").history.last_fetch_at
    obscure_interval = obscure.record("/a").due - obscure.record("/a").history.last_fetch_at
    assert popular_interval < obscure_interval


def test_an_in_link_is_written_only_when_it_flips_a_bit_of_the_sketch():
    h = Harness()
    (page,) = h.first_fetch("/a")
    h.complete(page)
    key = signed_fp(url_fp(f"http://{HOST}/a"))
    writes: list[int] = []
    put = h.urls.put
    h.urls.put = lambda k, v: (writes.append(k), put(k, v))     # type: ignore[method-assign]
    _links_from(h, "/p0", "/a")
    assert writes.count(key) == 1
    _links_from(h, "/p0", "/a")                                   # the same page again: no write
    assert writes.count(key) == 1
    record = UrlRecord(UrlStatus.DONE, 1.0, hub_yield=1.0, inlinks=(1 << 32) - 1)
    assert UrlRecord.from_row(record.to_row()) == record
    assert UrlRecord.from_row(replace(record, inlinks=0).to_row()).inlinks == 0
