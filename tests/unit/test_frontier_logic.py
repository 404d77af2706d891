"""udfs.frontier: admission, robots-first release, leases, the robots state machine (§2 invariants 1-3, 6)."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import (DUE_ROW_VERSION, HostState, QUEUE_ROW_VERSION, QueueItem, Robots, STATE_VERSION,
                                UrlRecord, UrlStatus, due_entries, due_row, signed_fp, slot_key)
from udfs.frontier.queues import pop
from udfs.frontier.admission import Verdict, admit, coerce_entry, in_cycle
from udfs.frontier.release import Plan, Step, lease_page, lease_robots, plan, timer_ms, wake_ms
from udfs.frontier.outcomes import Outcome, on_completion
from udfs.frontier.preflight import on_robots, robots_outcome, robots_retry_delay
from udfs.frontier.expiry import expire_lease
from udfs.urls import host_key

HOST = "example.com"
NOW = 1_000_000.0
P = DEFAULT_FRONTIER_POLICY


class PrefixRules:
    """A stand-in for udfs.robots.RobotsRules: disallows URL paths by prefix."""

    def __init__(self, *disallowed: str, delay: float | None = None) -> None:
        self.disallowed, self.delay = disallowed, delay

    def allowed(self, url: str, user_agent: str) -> bool:
        path = "/" + url.split("://", 1)[1].partition("/")[2]
        return not any(path.startswith(p) for p in self.disallowed)

    def crawl_delay(self, user_agent: str) -> float | None:
        return self.delay


class ExplodingRules:
    def allowed(self, url: str, user_agent: str) -> bool:
        raise RuntimeError("boom")

    def crawl_delay(self, user_agent: str) -> float | None:
        raise RuntimeError("boom")


def item(path: str = "/a", priority: int = 5, attempt: int = 0, fp: int | None = None) -> QueueItem:
    return QueueItem(f"https://{HOST}{path}", fp if fp is not None else abs(hash(path)) % (1 << 64), 1, priority,
                     attempt)


def known(state: HostState = HostState(), robots: Robots = Robots.PARSED, **kw) -> HostState:
    return dataclasses.replace(state, robots=robots, robots_expires_at=NOW + 3600, **kw)


def admitted(state: HostState, *items: QueueItem, rules=None) -> HostState:
    for it in items:
        state, adm = admit(state, it, None, rules, NOW)
        assert adm.verdict is Verdict.ADMITTED
    return state


# --- policy and rows ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, needle", [
    ({"robots_agent": " "}, "robots_agent"),
    ({"max_queue": 0}, "max_queue"),
    ({"max_urls_per_host": 0}, "max_urls_per_host"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"lease_timeout_s": 0}, "lease_timeout_s"),
    ({"lease_timeout_s": float("nan")}, "lease_timeout_s"),
    ({"robots_retry_max_s": 0}, "robots_retry_max_s"),
    ({"recrawl_after_s": -1}, "recrawl_after_s"),
    ({"max_pops_per_call": 0}, "max_pops_per_call"),
])
def test_policy_rejects_bad_values_naming_the_field(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        FrontierPolicy(**kwargs)


def test_host_row_round_trips_with_a_lease_and_queues():
    state = admitted(known(), item("/a"), item("/b", priority=0))
    state, _ = lease_robots(state, HOST, 7, NOW)
    again = HostState.from_row(state.to_row())
    assert again == state
    assert f'"v":{STATE_VERSION}' in state.to_row()


def test_host_row_of_a_new_host_is_the_default():
    assert HostState.from_row(None) == HostState()


def test_host_row_with_a_foreign_schema_version_is_refused():
    row = HostState().to_row().replace(f'"v":{STATE_VERSION}', '"v":99')
    with pytest.raises(ValueError, match="schema version 99"):
        HostState.from_row(row)


def test_queue_and_url_rows_round_trip():
    it = QueueItem("https://example.com/x", 2 ** 64 - 1, 3, 9, 2, '"e"', "Mon, 01 Jan 2024 00:00:00 GMT")
    assert QueueItem.from_row(it.to_row()) == it
    rec = UrlRecord(UrlStatus.DONE, NOW, "etag", None)
    assert UrlRecord.from_row(rec.to_row()) == rec


def test_queue_rows_carry_their_schema_version_and_rows_from_before_versions_still_read():
    it = QueueItem("https://example.com/x", 7, 1, 5, 0, None, None, 2)
    assert it.to_row().startswith(f"[{QUEUE_ROW_VERSION},")
    assert QueueItem.from_row('["https://example.com/x",7,1,5,0,null,null,2]') == it
    assert QueueItem.from_row('["https://example.com/x",7,1,5,0,null,null]') == dataclasses.replace(it, redirect_hops=0)
    with pytest.raises(ValueError, match="queue row schema version 99"):
        QueueItem.from_row('[99,"https://example.com/x",7,1,5,0,null,null,2]')


def test_due_bucket_rows_carry_their_schema_version_and_bare_lists_still_read():
    entries = [[-5, "https://example.com/a"], [6, "https://example.com/b"]]
    assert due_entries(due_row(entries)) == entries
    assert due_row(entries).startswith(f"[{DUE_ROW_VERSION},")
    assert due_entries('[[-5,"https://example.com/a"]]') == entries[:1]
    assert due_entries(None) == []
    with pytest.raises(ValueError, match="due bucket schema version 9"):
        due_entries('[9,[1,"https://example.com/a"]]')


@pytest.mark.parametrize("fp, expected", [(0, 0), (2 ** 63 - 1, 2 ** 63 - 1), (2 ** 63, -(2 ** 63)), (2 ** 64 - 1, -1)])
def test_signed_fp_maps_u64_onto_java_long(fp, expected):
    assert signed_fp(fp) == expected


# --- coerce_entry -------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, expected", [
    ({"url": "https://example.com/a", "fp": 5, "depth": 1, "priority": 3}, QueueItem("https://example.com/a", 5, 1, 3)),
    ({"url": "https://example.com/a", "fp": 5}, QueueItem("https://example.com/a", 5, 0, 5)),
    ({"url": "https://example.com/a", "fp": 5, "priority": 42}, QueueItem("https://example.com/a", 5, 0, 9)),
    ({"url": "https://example.com/a", "fp": 5, "priority": -3}, QueueItem("https://example.com/a", 5, 0, 0)),
    ({"url": "https://other.org/a", "fp": 5}, Verdict.WRONG_HOST),
    ({"url": "ftp://example.com/a", "fp": 5}, Verdict.MALFORMED),
    ({"url": "https://example.com/a", "fp": -1}, Verdict.MALFORMED),
    ({"url": "https://example.com/a", "fp": 2 ** 64}, Verdict.MALFORMED),
    ({"url": "https://example.com/a", "fp": "5"}, Verdict.MALFORMED),
    ({"url": "https://example.com/a", "fp": True}, Verdict.MALFORMED),
    ({"url": "https://example.com/a", "fp": 5, "depth": -1}, Verdict.MALFORMED),
    ({"url": "https://example.com/a", "fp": 5, "priority": "high"}, Verdict.MALFORMED),
    ({"url": "", "fp": 5}, Verdict.MALFORMED),
    ({"url": "https://example.com/" + "a" * 9000, "fp": 5}, Verdict.MALFORMED),
    ({"fp": 5}, Verdict.MALFORMED),
    ("https://example.com/a", Verdict.MALFORMED),
    (None, Verdict.MALFORMED),
])
def test_coerce_entry_table(raw, expected):
    assert coerce_entry(raw, HOST, host_key) == expected


@settings(max_examples=250, deadline=None)
@given(raw=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
                        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                            st.sampled_from(["url", "fp", "depth", "priority", "x"]), inner, max_size=5),
                        max_leaves=10))
def test_coerce_entry_never_raises(raw):
    assert isinstance(coerce_entry(raw, HOST, host_key), (QueueItem, Verdict))


# --- admission ----------------------------------------------------------------------------------


def test_admit_new_url_writes_a_slot_and_a_queued_record():
    state, adm = admit(HostState(), item("/a", priority=2), None, None, NOW)
    assert adm.verdict is Verdict.ADMITTED
    assert adm.slot == slot_key(2, 0)
    assert adm.record == UrlRecord(UrlStatus.QUEUED, NOW)
    assert state.queued == 1 and state.url_count == 1
    assert state.scheme == "https"  # robots.txt is fetched over the scheme URLs arrive with


def test_a_queued_url_is_admitted_at_most_once():
    state, adm = admit(HostState(), item("/a"), UrlRecord(UrlStatus.QUEUED, NOW - 10 ** 9), None, NOW)
    assert adm.verdict is Verdict.SEEN and state.queued == 0


@pytest.mark.parametrize("status", [UrlStatus.DONE, UrlStatus.PARKED, UrlStatus.DISALLOWED])
def test_a_finished_url_is_seen_within_the_crawl_cycle_and_readmitted_after(status):
    fresh = UrlRecord(status, NOW - P.recrawl_after_s + 1, '"tag"', "yesterday")
    _, adm = admit(HostState(), item("/a"), fresh, None, NOW)
    assert adm.verdict is Verdict.SEEN
    old = dataclasses.replace(fresh, at=NOW - P.recrawl_after_s)
    state, adm = admit(HostState(), item("/a"), old, None, NOW)
    assert adm.verdict is Verdict.ADMITTED
    assert (adm.item.etag, adm.item.last_modified) == ('"tag"', "yesterday")  # conditional GET on recrawl
    assert state.url_count == 0  # an existing URL-table row is reused, not counted again


def test_admission_drops_robots_disallowed_urls_only_when_rules_are_known():
    rules = PrefixRules("/private")
    _, adm = admit(known(), item("/private/x"), None, rules, NOW)
    assert adm.verdict is Verdict.ROBOTS_DISALLOWED
    _, adm = admit(HostState(), item("/private/x"), None, None, NOW)
    assert adm.verdict is Verdict.ADMITTED  # unknown robots: checked again at release


def test_admission_fails_closed_when_rules_raise():
    _, adm = admit(known(), item("/x"), None, ExplodingRules(), NOW)
    assert adm.verdict is Verdict.ROBOTS_DISALLOWED


def test_queue_cap_counts_the_leased_url():
    policy = FrontierPolicy(max_queue=2)
    state = known(robots=Robots.ALLOW_ALL)
    for path in ("/a", "/b"):
        state, adm = admit(state, item(path), None, None, NOW, policy)
        assert adm.verdict is Verdict.ADMITTED
    state, adm = admit(state, item("/c"), None, None, NOW, policy)
    assert adm.verdict is Verdict.QUEUE_FULL
    state, slot = pop(state)
    state, _, _ = lease_page(state, item("/a"), None, HOST, NOW, policy)
    _, adm = admit(state, item("/c"), None, None, NOW, policy)
    assert adm.verdict is Verdict.QUEUE_FULL


def test_host_budget_caps_the_url_table():
    policy = FrontierPolicy(max_urls_per_host=1)
    state, _ = admit(HostState(), item("/a"), None, None, NOW, policy)
    _, adm = admit(state, item("/b"), None, None, NOW, policy)
    assert adm.verdict is Verdict.HOST_BUDGET
    _, adm = admit(state, item("/a"), UrlRecord(UrlStatus.DONE, 0.0), None, NOW, policy)
    assert adm.verdict is Verdict.ADMITTED  # a recrawl of a known row is within budget


def test_pop_takes_highest_priority_first_then_fifo():
    state = admitted(HostState(), item("/low1", 9), item("/hi1", 0), item("/low2", 9), item("/hi2", 0))
    order = []
    while state.queued:
        state, slot = pop(state)
        order.append(slot)
    assert order == [slot_key(0, 0), slot_key(0, 1), slot_key(9, 0), slot_key(9, 1)]
    assert pop(state) == (state, None)
    assert state.queues == HostState().queues  # emptied queues restart at 0: counters stay bounded


def test_newest_first_takes_highest_priority_first_then_the_last_found_and_keeps_the_range_whole():
    state = admitted(HostState(), item("/low1", 9), item("/hi1", 0), item("/low2", 9), item("/hi2", 0))
    state, slot = pop(state, newest_first=True)
    assert slot == slot_key(0, 1) and state.queues[0] == (0, 1)
    state = admitted(state, item("/hi3", 0))   # found after the pop: the next to go, in the slot after
    order = [slot]
    while state.queued:
        state, slot = pop(state, newest_first=True)
        order.append(slot)
    assert order == [slot_key(0, 1), slot_key(0, 1), slot_key(0, 0), slot_key(9, 1), slot_key(9, 0)]
    assert state.queues == HostState().queues


def test_discovery_order_is_oldest_or_newest_first():
    assert FrontierPolicy().discovery_order == "oldest_first"
    with pytest.raises(ValueError, match="frontier.discovery_order must be one of oldest_first, newest_first"):
        FrontierPolicy(discovery_order="random")


# --- plan: robots first, one lease, next_allowed_at ---------------------------------------------


def test_nothing_queued_means_idle():
    assert plan(HostState(), NOW) == Plan(Step.IDLE)
    assert wake_ms(HostState(), NOW) == 0


def test_robots_txt_is_fetched_before_anything_else():
    state = admitted(HostState(), item("/a"))
    assert plan(state, NOW).step is Step.FETCH_ROBOTS
    state, req = lease_robots(state, HOST, 99, NOW)
    assert req == {"host": HOST, "url": "https://example.com/robots.txt", "fp": 99, "kind": "robots",
                   "lease_id": "example.com/1", "depth": 0, "attempt": 1, "lease_deadline": NOW + P.lease_timeout_s}
    assert plan(state, NOW) == Plan(Step.WAIT, NOW + P.lease_timeout_s)


def test_one_lease_at_a_time():
    state = admitted(known(), item("/a"), item("/b"))
    assert plan(state, NOW).step is Step.POP
    state, _ = pop(state)
    state, req, verdict = lease_page(state, item("/a"), PrefixRules(), HOST, NOW)
    assert verdict is Verdict.ADMITTED and req["kind"] == "page"
    assert plan(state, NOW + 1).step is Step.WAIT
    assert plan(state, NOW + 10 ** 6).step is Step.WAIT  # even past the deadline: expiry comes first


def test_nothing_before_next_allowed_at():
    state = admitted(known(next_allowed_at=NOW + 5), item("/a"))
    assert plan(state, NOW) == Plan(Step.WAIT, NOW + 5)
    assert wake_ms(state, NOW) == timer_ms(NOW + 5)
    assert plan(state, NOW + 5).step is Step.POP


def test_expired_robots_are_fetched_again_before_pages():
    state = admitted(known(), item("/a"))
    assert plan(state, NOW + 3600).step is Step.FETCH_ROBOTS


def test_unreachable_robots_wait_for_their_retry():
    state = admitted(HostState(robots=Robots.UNREACHABLE, robots_retry_at=NOW + 60), item("/a"))
    assert plan(state, NOW) == Plan(Step.WAIT, NOW + 60)
    assert plan(state, NOW + 60).step is Step.FETCH_ROBOTS


def test_release_rechecks_robots():
    state = admitted(known(), item("/private/a"))
    state, _ = pop(state)
    after, req, verdict = lease_page(state, item("/private/a"), PrefixRules("/private"), HOST, NOW)
    assert (req, verdict, after.lease) == (None, Verdict.ROBOTS_DISALLOWED, None)


def test_release_under_allow_all_needs_no_rules_and_sends_validators():
    state = admitted(known(robots=Robots.ALLOW_ALL), item("/a"))
    it = dataclasses.replace(item("/a"), etag='"e"', last_modified="lm", attempt=1)
    state, req, _ = lease_page(state, it, None, HOST, NOW)
    assert (req["etag"], req["last_modified"], req["attempt"]) == ('"e"', "lm", 2)


# --- completions --------------------------------------------------------------------------------


def leased(state: HostState | None = None, it: QueueItem | None = None, rules=None) -> tuple[HostState, dict]:
    it = it or item("/a")
    state = admitted(state or known(crawl_delay=2.0), it)
    state, _ = pop(state)
    state, req, _ = lease_page(state, it, rules or PrefixRules(), HOST, NOW)
    return state, req


def completion(req: dict, **kw) -> dict:
    event = {"v": 1, "type": "completion", "host": HOST, "lease_id": req["lease_id"], "url": req["url"],
             "fp": req["fp"], "fetch_status": "ok", "http_status": 200, "started_at": NOW, "done_at": NOW + 0.1,
             "fetch_ms": 100.0, "bytes": 10, "content_hash": None, "simhash": None, "etag": '"v1"',
             "last_modified": None, "redirect": None, "retry_after": None}
    event.update(kw)
    return event


def test_matching_completion_ends_the_lease_and_paces_the_host():
    state, req = leased()
    state, out = on_completion(state, completion(req), NOW + 1)
    assert out.matched and state.lease is None
    assert out.record == UrlRecord(UrlStatus.DONE, NOW + 1, '"v1"', None) and out.fp == req["fp"]
    assert state.next_allowed_at == pytest.approx(NOW + 1 + 2.0)  # done + max(crawl_delay 2, 10 × 0.1)


@pytest.mark.parametrize("change", [{"lease_id": "example.com/999"}, {"fp": 1}, {"lease_id": None}])
def test_stale_or_foreign_completion_is_ignored(change):
    state, req = leased()
    after, out = on_completion(state, completion(req, **change), NOW + 1)
    assert not out.matched and after == state


def test_completion_without_a_lease_is_ignored():
    assert not on_completion(HostState(), {"lease_id": "x"}, NOW)[1].matched


def test_429_requeues_with_backoff_and_retry_after():
    state, req = leased()
    state, out = on_completion(state, completion(req, http_status=429, retry_after=300.0), NOW + 1)
    assert out.requeue == dataclasses.replace(item("/a"), attempt=1) and out.record is None
    assert state.queued == 1 and out.slot is not None
    assert state.backoff_s == 5.0
    assert state.next_allowed_at == pytest.approx(NOW + 1 + 300.0)


@pytest.mark.parametrize("kw", [{"http_status": 503}, {"fetch_status": "timeout", "http_status": None},
                                {"fetch_status": "conn_error", "http_status": None}])
def test_transient_failures_are_retried_until_parked(kw):
    policy = FrontierPolicy(max_attempts=2)
    state, req = leased()
    state, out = on_completion(state, completion(req, **kw), NOW + 1, policy)
    assert out.requeue is not None and out.requeue.attempt == 1
    state, _ = pop(state)
    state, req, _ = lease_page(state, out.requeue, PrefixRules(), HOST, NOW + 100, policy)
    assert req["attempt"] == 2
    state, out = on_completion(state, completion(req, **kw), NOW + 101, policy)
    assert out.parked and out.requeue is None and out.record.status is UrlStatus.PARKED
    assert state.backoff_s == 10.0


@pytest.mark.parametrize("kw", [{"http_status": 403}, {"http_status": 304},
                                {"http_status": 301, "redirect": None},  # a 3xx without a usable Location
                                {"fetch_status": "blocked", "http_status": None},
                                {"fetch_status": "too_large"}])
def test_final_outcomes_are_done(kw):
    state, req = leased()
    _, out = on_completion(state, completion(req, **kw), NOW + 1)
    assert out.record.status is UrlStatus.DONE and out.requeue is None


@pytest.mark.parametrize("http_status", [404, 410])
def test_a_404_or_410_is_gone_a_done_row_by_another_name(http_status):
    state, req = leased()
    _, out = on_completion(state, completion(req, http_status=http_status), NOW + 1)
    assert out.record == UrlRecord(UrlStatus.GONE, NOW + 1, '"v1"', None) and out.requeue is None
    assert in_cycle(out.record, NOW + 2, DEFAULT_FRONTIER_POLICY)   # the crawl-cycle rule, as for DONE
    assert out.record.to_row() == f'["gone",{NOW + 1},"\\"v1\\"",null]'   # the short version 1 row


def test_healthy_completions_lower_backoff_slowly():
    state, req = leased(known(backoff_s=10.0))
    state, _ = on_completion(state, completion(req), NOW + 1)
    assert state.backoff_s == 9.0
    assert state.next_allowed_at == pytest.approx(NOW + 1 + 9.0)


hostile = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10))


@settings(max_examples=250, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(["fetch_status", "http_status", "fetch_ms", "retry_after", "etag",
                                               "last_modified"]), hostile))
def test_on_completion_never_raises_on_hostile_fields(fields):
    state, req = leased()
    after, out = on_completion(state, completion(req, **fields), NOW + 1)
    assert out.matched and after.lease is None and after.next_allowed_at >= NOW + 1


# --- robots state machine -----------------------------------------------------------------------


@pytest.mark.parametrize("fetch_status, http_status, expected", [
    ("ok", 200, Robots.PARSED),
    ("ok", 206, Robots.PARSED),
    ("too_large", 200, Robots.PARSED),
    ("timeout", 200, Robots.UNREACHABLE),  # a body cut short by a failure is not the whole file
    ("ok", 304, None),                     # keep what is known
    ("ok", 301, Robots.ALLOW_ALL),   # redirects exhausted by the fetcher
    ("ok", 401, Robots.ALLOW_ALL),
    ("ok", 403, Robots.ALLOW_ALL),
    ("ok", 404, Robots.ALLOW_ALL),
    ("ok", 410, Robots.ALLOW_ALL),
    ("ok", 429, Robots.UNREACHABLE),
    ("ok", 500, Robots.UNREACHABLE),
    ("ok", 503, Robots.UNREACHABLE),
    ("ok", 100, Robots.UNREACHABLE),
    ("ok", None, Robots.UNREACHABLE),
    ("ok", "200", Robots.UNREACHABLE),
    ("ok", True, Robots.UNREACHABLE),
    ("timeout", None, Robots.UNREACHABLE),
    ("conn_error", None, Robots.UNREACHABLE),
    ("dns_error", None, Robots.UNREACHABLE),
    ("blocked", None, Robots.UNREACHABLE),
    (None, 200, Robots.UNREACHABLE),
])
def test_robots_status_table(fetch_status, http_status, expected):
    assert robots_outcome(fetch_status, http_status)[0] is expected


def robots_leased(state: HostState | None = None) -> tuple[HostState, dict]:
    state = admitted(state or HostState(), item("/a"))
    return lease_robots(state, HOST, 1, NOW)


def robots_event(req: dict, http_status: int | None = 200, fetch_status: str = "ok", body: str = "Ym9keQ==") -> dict:
    return {"v": 1, "type": "robots", "host": HOST, "lease_id": req["lease_id"], "fetch_status": fetch_status,
            "http_status": http_status, "fetched_at": NOW, "fetch_ms": 50.0, "body_b64": body}


def test_robots_2xx_is_parsed_stored_and_fresh_for_the_ttl():
    state, req = robots_leased()
    state, out = on_robots(state, robots_event(req), PrefixRules(delay=7.0), NOW + 1)
    assert out.matched and out.robots_ok and out.store_robots == "Ym9keQ=="
    assert state.robots is Robots.PARSED and state.lease is None
    assert state.robots_expires_at == NOW + 1 + 86_400  # RobotsPolicy.cache_ttl_s
    assert state.crawl_delay == 7.0 and state.next_allowed_at == pytest.approx(NOW + 1 + 7.0)
    assert plan(state, NOW + 8).step is Step.POP


def test_robots_4xx_allows_all():
    state, req = robots_leased()
    state, out = on_robots(state, robots_event(req, 404), None, NOW + 1)
    assert state.robots is Robots.ALLOW_ALL and out.store_robots == "" and out.robots_ok
    assert plan(state, NOW + 3).step is Step.POP


@pytest.mark.parametrize("http_status, fetch_status", [(500, "ok"), (429, "ok"), (None, "timeout"),
                                                       (None, "conn_error")])
def test_robots_failure_disallows_all_until_a_retry_succeeds(http_status, fetch_status):
    state, req = robots_leased()
    state, out = on_robots(state, robots_event(req, http_status, fetch_status), None, NOW)
    assert out.robots_failed and state.robots is Robots.UNREACHABLE and out.store_robots is None
    assert state.robots_retry_at == NOW + 600  # RobotsPolicy.unreachable_ttl_s
    # nothing but a robots retry, and not before its time, however long the page queue waits
    assert plan(state, NOW + 599) == Plan(Step.WAIT, NOW + 600)
    state, req = lease_robots(state, HOST, 1, NOW + 600)
    assert req["kind"] == "robots" and req["attempt"] == 2
    state, _ = on_robots(state, robots_event(req, 503), None, NOW + 601)
    assert state.robots_retry_at == NOW + 601 + 1200  # doubling
    state, req = lease_robots(state, HOST, 1, NOW + 1801)
    state, out = on_robots(state, robots_event(req, 200), PrefixRules(), NOW + 1802)
    assert state.robots is Robots.PARSED and state.robots_failures == 0 and out.robots_ok


def test_robots_refresh_failure_stops_page_fetches():
    state, req = robots_leased(known())
    state, _ = on_robots(state, robots_event(req, 500), None, NOW)
    assert state.robots is Robots.UNREACHABLE
    assert plan(state, NOW + 1).step is Step.WAIT


@pytest.mark.parametrize("failures, expected", [(1, 60), (2, 120), (3, 240), (9, 15360), (10, 21600),
                                               (10 ** 6, 21600)])
def test_robots_retry_delay_doubles_to_its_cap(failures, expected):
    assert robots_retry_delay(failures, 60.0) == expected


def test_a_blocked_robots_fetch_is_not_retried_soon():
    state, req = robots_leased()
    state, out = on_robots(state, robots_event(req, None, "blocked"), None, NOW)
    assert out.robots_failed and state.robots_retry_at == NOW + 86_400


def test_robots_304_keeps_the_stored_rules_fresh_again():
    state, req = robots_leased(known(crawl_delay=4.0))
    state, out = on_robots(state, robots_event(req, 304), None, NOW + 10)
    assert state.robots is Robots.PARSED and state.crawl_delay == 4.0 and out.store_robots is None
    assert state.robots_expires_at == NOW + 10 + 86_400


def test_robots_304_without_stored_rules_is_unreachable():
    state, req = robots_leased()
    state, out = on_robots(state, robots_event(req, 304), None, NOW)
    assert out.robots_failed and state.robots is Robots.UNREACHABLE


def test_robots_result_for_another_lease_is_ignored():
    state, req = robots_leased()
    after, out = on_robots(state, robots_event(dict(req, lease_id="example.com/0")), None, NOW)
    assert not out.matched and after == state


def test_hostile_crawl_delay_falls_back_to_default():
    state, req = robots_leased()
    state, _ = on_robots(state, robots_event(req), ExplodingRules(), NOW)
    assert state.crawl_delay is None and state.robots is Robots.PARSED


# --- lease expiry -------------------------------------------------------------------------------


def test_lease_does_not_expire_before_its_deadline():
    state, _ = leased()
    assert expire_lease(state, NOW + P.lease_timeout_s - 0.001) == (state, Outcome(False))


def test_expired_page_lease_returns_the_url_to_its_queue():
    state, req = leased()
    state, out = expire_lease(state, NOW + P.lease_timeout_s)
    assert out.matched and state.lease is None and state.queued == 1
    assert out.requeue.attempt == 1 and out.requeue.url == req["url"]
    assert state.backoff_s == 5.0
    assert plan(state, NOW + P.lease_timeout_s).step is Step.WAIT


def test_expired_page_lease_parks_at_the_attempt_limit():
    state, _ = leased(it=item("/a", attempt=P.max_attempts - 1))
    state, out = expire_lease(state, NOW + P.lease_timeout_s)
    assert out.parked and out.record.status is UrlStatus.PARKED and state.queued == 0


def test_expired_robots_lease_counts_as_unreachable():
    state, _ = robots_leased()
    state, out = expire_lease(state, NOW + P.lease_timeout_s)
    assert out.robots_failed and state.robots is Robots.UNREACHABLE and state.queued == 1


def test_late_completion_after_expiry_is_stale():
    state, req = leased()
    state, _ = expire_lease(state, NOW + P.lease_timeout_s)
    _, out = on_completion(state, completion(req), NOW + P.lease_timeout_s + 1)
    assert not out.matched


def test_wake_is_the_lease_deadline_while_leased():
    state, _ = leased()
    assert wake_ms(state, NOW) == timer_ms(NOW + P.lease_timeout_s)
