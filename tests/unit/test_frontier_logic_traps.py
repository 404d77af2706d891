"""udfs.frontier and the HostFrontier glue: trap rules at admission, redirect hops, loops and the
source URL's status (RFC 9110 §15.4), the abnormal-growth flag (§2 invariant 6; decisions 0804, 0805)."""
from __future__ import annotations

import json

import pytest

from operators.frontier_metrics import METRICS
from tests.frontier_harness import HOST, Harness
from udfs.frontier import admission
from udfs.frontier.policy import DEFAULT_FRONTIER_POLICY, FrontierPolicy
from udfs.frontier.rows import HostState, QueueItem, Robots, STATE_VERSION, UrlRecord, UrlStatus, signed_fp
from udfs.frontier.queues import pop
from udfs.frontier.admission import Verdict, admit, coerce_entry, source_of
from udfs.frontier.release import lease_page
from udfs.frontier.outcomes import on_completion
from udfs.traps import REASONS, HostTrapSummary, TrapPolicy
from udfs.urls import host_key, url_fp

NOW = 1_700_000_000.0   # 2023-11-14, so calendar pages of 2024 are inside the window and of 1900 outside
TRAPS = TrapPolicy()


def entry(path: str, depth: int = 1, source: str = "link", hops: int | None = None) -> dict:
    url = f"http://{HOST}{path}"
    raw = {"url": url, "fp": url_fp(url), "depth": depth, "priority": 5, "source": source}
    if hops is not None:
        raw["redirect_hops"] = hops
    return raw


def queued(path: str, depth: int = 1, hops: int = 0) -> QueueItem:
    item = coerce_entry(entry(path, depth, hops=hops), HOST, host_key)
    assert isinstance(item, QueueItem)
    return item


def screen(path: str, depth: int = 1, source: str = "link", state: HostState = HostState(), hops: int = 0,
           policy: FrontierPolicy = DEFAULT_FRONTIER_POLICY) -> str | None:
    return admission.screen(state, queued(path, depth, hops), source, NOW, TRAPS, policy)


# --- policy and rows ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, needle", [
    ({"max_redirect_hops": -1}, "max_redirect_hops"),
    ({"fast_growth_urls": 0}, "fast_growth_urls"),
    ({"fast_growth_window_s": 0}, "fast_growth_window_s"),
    ({"fast_growth_window_s": float("inf")}, "fast_growth_window_s"),
])
def test_policy_rejects_bad_redirect_and_growth_values_naming_the_field(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        FrontierPolicy(**kwargs)


def test_host_row_round_trips_the_trap_summary_and_growth_window():
    summary = HostTrapSummary((("http://h/p?#sid", (1, 2, 3)), ("http://h/q?#token", (4,))))
    state = HostState(trap_summary=summary, growth_since=NOW, growth_urls=17)
    assert HostState.from_row(state.to_row()) == state


def test_a_version_1_host_row_reads_with_an_empty_summary_and_a_fresh_window():
    data = json.loads(HostState(url_count=3).to_row())
    del data["traps"], data["growth"]
    data["v"] = 1
    state = HostState.from_row(json.dumps(data))
    assert state == HostState(url_count=3)
    assert json.loads(state.to_row())["v"] == STATE_VERSION  # written back in the current layout


def test_a_queue_row_without_redirect_hops_reads_as_zero_hops():
    item = QueueItem("http://h/a", 5, 1, 2, 0, None, None, 4)
    assert QueueItem.from_row(item.to_row()) == item
    old_row = json.dumps(["http://h/a", 5, 1, 2, 0, None, None])
    assert QueueItem.from_row(old_row).redirect_hops == 0


# --- entries: hops and source ---------------------------------------------------------------------


@pytest.mark.parametrize("hops, expected", [(None, 0), (0, 0), (3, 3)])
def test_coerce_entry_reads_redirect_hops_and_treats_missing_as_zero(hops, expected):
    item = coerce_entry(entry("/a", hops=hops), HOST, host_key)
    assert isinstance(item, QueueItem) and item.redirect_hops == expected


@pytest.mark.parametrize("hops", [-1, True, "2", 1.5])
def test_coerce_entry_drops_mistyped_redirect_hops_as_malformed(hops):
    raw = dict(entry("/a"), redirect_hops=hops)
    assert coerce_entry(raw, HOST, host_key) is Verdict.MALFORMED


@pytest.mark.parametrize("raw, expected", [
    ({"source": "seed"}, "seed"), ({"source": "redirect"}, "redirect"), ({}, "link"), ({"source": 7}, "link"),
])
def test_source_defaults_to_link_so_only_declared_seeds_skip_the_depth_rule(raw, expected):
    assert source_of(raw) == expected


# --- trap rules at admission ----------------------------------------------------------------------


SESSION_SUMMARY = HostTrapSummary().with_url(f"http://{HOST}/cart?sid=abc12345x", TRAPS) \
    .with_url(f"http://{HOST}/cart?sid=abc12345y", TRAPS).with_url(f"http://{HOST}/cart?sid=abc12345z", TRAPS)


@pytest.mark.parametrize("path, depth, state, reason", [
    ("/" + "a" * 2100, 1, HostState(), "url_too_long"),
    ("/" + "/".join(f"d{i}" for i in range(17)), 1, HostState(), "path_too_deep"),
    ("/a/b/a/b/a/b", 1, HostState(), "repeated_segments"),
    ("/q?" + "&".join(f"p{i}=1" for i in range(17)), 1, HostState(), "too_many_query_params"),
    ("/calendar/1900-01-01", 1, HostState(), "calendar_out_of_window"),
    ("/cart?sid=abc12345w", 1, HostState(trap_summary=SESSION_SUMMARY), "session_id_churn"),
    ("/a", 21, HostState(), "crawl_depth_exceeded"),
])
def test_each_trap_rule_drops_its_url_with_a_metric_named_after_the_reason(path, depth, state, reason):
    metric = screen(path, depth, state=state)
    assert metric == f"dropped_trap_{reason}" and metric in METRICS


def test_every_trap_reason_has_a_registered_counter():
    assert {f"dropped_trap_{r}" for r in REASONS} <= set(METRICS)


@pytest.mark.parametrize("path, depth", [("/a", 1), ("/a", 20), ("/calendar/2024-01-01", 3),
                                         ("/cart?sid=abc12345x", 1)])
def test_ordinary_urls_pass_the_screen(path, depth):
    assert screen(path, depth, state=HostState(trap_summary=SESSION_SUMMARY)) is None


def test_seeds_skip_only_the_depth_rule():
    assert screen("/a", 500, source="seed") is None
    assert screen("/a", 500, source="sitemap") == "dropped_trap_crawl_depth_exceeded"
    assert screen("/calendar/1900-01-01", 0, source="seed") == "dropped_trap_calendar_out_of_window"


def test_admitted_session_urls_feed_the_summary_until_new_values_are_churn():
    state = HostState()
    for value in ("abc12345a", "abc12345b", "abc12345c"):
        item = queued(f"/cart?sid={value}")
        assert admission.screen(state, item, "link", NOW, TRAPS) is None
        state, adm = admit(state, item, None, None, NOW, traps=TRAPS)
        assert adm.verdict is Verdict.ADMITTED
    assert admission.screen(state, queued("/cart?sid=abc12345d"), "link", NOW, TRAPS) == "dropped_trap_session_id_churn"
    assert admission.screen(state, queued("/cart?sid=abc12345b"), "link", NOW, TRAPS) is None  # a known value


def test_the_summary_in_the_host_row_stays_bounded():
    traps = TrapPolicy(session_keys_per_host=4, session_max_variants=2)
    state = HostState()
    for i in range(50):
        for value in ("abc12345a", "abc12345b", "abc12345c"):
            state, _ = admit(state, queued(f"/p{i}?sid={value}"), None, None, NOW, traps=traps)
    entries = HostState.from_row(state.to_row()).trap_summary.entries
    assert len(entries) == 4 and all(len(hashes) <= 2 for _, hashes in entries)


# --- redirects ------------------------------------------------------------------------------------


@pytest.mark.parametrize("hops, expected", [(0, None), (5, None), (6, "dropped_redirect_chain")])
def test_redirect_chains_are_capped_at_five_hops(hops, expected):
    assert screen("/a", source="redirect", hops=hops) == expected


def test_the_hop_cap_follows_the_policy():
    assert screen("/a", source="redirect", hops=2, policy=FrontierPolicy(max_redirect_hops=1)) \
        == "dropped_redirect_chain"


@pytest.mark.parametrize("status", [UrlStatus.QUEUED, UrlStatus.DONE, UrlStatus.MOVED_PERMANENTLY])
def test_a_redirect_target_seen_this_cycle_is_a_loop_and_a_seen_link_is_just_seen(status):
    record = UrlRecord(status, NOW - 60)
    _, adm = admit(HostState(), queued("/a", hops=2), record, None, NOW, source="redirect")
    assert adm.verdict is Verdict.REDIRECT_LOOP
    _, adm = admit(HostState(), queued("/a"), record, None, NOW, source="link")
    assert adm.verdict is Verdict.SEEN


def leased(item: QueueItem) -> tuple[HostState, dict]:
    state = HostState(robots=Robots.ALLOW_ALL, robots_expires_at=NOW + 3600)
    state, adm = admit(state, item, None, None, NOW)
    state, _ = pop(state)
    state, request, _ = lease_page(state, adm.item, None, HOST, NOW)
    assert request is not None
    return state, request


def test_a_page_lease_tells_the_writer_how_many_redirects_led_to_it():
    _, request = leased(queued("/a", hops=3))
    assert request["redirect_hops"] == 3


def completion(request: dict, http_status: int, redirect: object, fetch_status: str = "ok") -> dict:
    return {"v": 1, "type": "completion", "host": HOST, "lease_id": request["lease_id"], "url": request["url"],
            "fp": request["fp"], "fetch_status": fetch_status, "http_status": http_status, "fetch_ms": 10.0,
            "etag": '"e"', "last_modified": None, "redirect": redirect, "retry_after": None}


@pytest.mark.parametrize("http_status, status", [
    (301, UrlStatus.MOVED_PERMANENTLY), (308, UrlStatus.MOVED_PERMANENTLY),
    (302, UrlStatus.REDIRECTED), (303, UrlStatus.REDIRECTED), (307, UrlStatus.REDIRECTED),
])
def test_a_redirect_marks_its_source_moved_or_keeps_it_canonical(http_status, status):
    state, request = leased(queued("/a"))
    state, out = on_completion(state, completion(request, http_status, f"http://{HOST}/b"), NOW + 1)
    assert out.matched and state.lease is None and out.requeue is None
    assert out.record == UrlRecord(status, NOW + 1)
    # either way the source is finished for this cycle: it is seen, not refetched
    _, adm = admit(state, queued("/a"), out.record, None, NOW + 2)
    assert adm.verdict is Verdict.SEEN


@pytest.mark.parametrize("http_status, redirect, fetch_status", [
    (301, None, "ok"), (301, "", "ok"), (301, 42, "ok"), (304, f"http://{HOST}/b", "ok"),
    (301, f"http://{HOST}/b", "too_large"),
])
def test_without_a_complete_3xx_and_a_target_the_page_is_just_done(http_status, redirect, fetch_status):
    state, request = leased(queued("/a"))
    _, out = on_completion(state, completion(request, http_status, redirect, fetch_status), NOW + 1)
    assert out.record is not None and out.record.status is UrlStatus.DONE


# --- abnormal growth ------------------------------------------------------------------------------


def admit_new(state: HostState, n: int, now: float, policy: FrontierPolicy, start: int = 0) -> tuple[HostState, int]:
    flagged = 0
    for i in range(start, start + n):
        state, adm = admit(state, queued(f"/n{i}"), None, None, now, policy)
        assert adm.verdict is Verdict.ADMITTED
        flagged += adm.fast_growing
    return state, flagged


def test_a_host_growing_past_the_threshold_is_flagged_once_per_window():
    policy = FrontierPolicy(fast_growth_urls=5, fast_growth_window_s=3600)
    state, flagged = admit_new(HostState(), 5, NOW, policy)
    assert flagged == 0 and state.growth_urls == 5
    state, flagged = admit_new(state, 4, NOW + 10, policy, start=5)
    assert flagged == 1  # the 6th new URL inside the hour, and only it
    state, flagged = admit_new(state, 6, NOW + 3600, policy, start=9)
    assert flagged == 1 and state.growth_since == NOW + 3600  # a new window counts afresh


def test_slow_growth_and_recrawls_are_not_flagged():
    policy = FrontierPolicy(fast_growth_urls=3, fast_growth_window_s=100)
    state = HostState()
    for i in range(10):
        state, flagged = admit_new(state, 2, NOW + i * 100, policy, start=2 * i)
        assert flagged == 0
    before = state.growth_urls
    state, adm = admit(state, queued("/n0"), UrlRecord(UrlStatus.DONE, NOW - 10 ** 7), None, NOW + 950, policy)
    assert adm.verdict is Verdict.ADMITTED and not adm.fast_growing and state.growth_urls == before


# --- through the operator glue -------------------------------------------------------------------


def discover(h: Harness, *entries: dict) -> list[dict]:
    return h.event({"v": 1, "type": "discovered", "host": HOST, "urls": list(entries)})


def test_trap_urls_are_counted_by_reason_and_never_touch_the_url_table():
    h = Harness()
    discover(h, entry("/a/b/a/b/a/b"), entry("/deep", depth=21), entry("/seed", depth=21, source="seed"))
    assert h.counts["dropped_trap_repeated_segments"] == 1
    assert h.counts["dropped_trap_crawl_depth_exceeded"] == 1
    assert h.counts["admitted"] == 1 and len(h.urls) == 1


def test_the_session_summary_survives_a_restart_in_the_host_row():
    h = Harness()
    discover(h, *(entry(f"/cart?sid=abc12345{c}") for c in "xyz"))
    h.restart()
    discover(h, entry("/cart?sid=abc12345w"))
    assert h.counts["dropped_trap_session_id_churn"] == 1


def test_a_redirect_loop_is_fetched_once_per_url_then_dropped():
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=30))
    (robots,) = discover(h, entry("/a"))
    h.robots(robots, 404)
    (page_a,) = h.advance(1)
    # the WARC writer's part: the completion, then the target at source hops + 1
    h.event(dict(completion(page_a, 301, f"http://{HOST}/b"), started_at=h.now, done_at=h.now, bytes=0))
    discover(h, entry("/b", depth=2, source="redirect", hops=page_a["redirect_hops"] + 1))
    (page_b,) = h.advance(5)
    assert page_b["url"].endswith("/b") and page_b["redirect_hops"] == 1
    h.event(dict(completion(page_b, 302, f"http://{HOST}/a"), started_at=h.now, done_at=h.now, bytes=0))
    discover(h, entry("/a", depth=3, source="redirect", hops=page_b["redirect_hops"] + 1))
    assert h.advance(60) == []
    assert h.counts["dropped_redirect_loop"] == 1
    assert h.counts["moved_permanently"] == 1 and h.counts["redirected"] == 1
    rows = {path: UrlRecord.from_row(h.urls[signed_fp(url_fp(f"http://{HOST}{path}"))]).status
            for path in ("/a", "/b")}
    assert rows == {"/a": UrlStatus.MOVED_PERMANENTLY, "/b": UrlStatus.REDIRECTED}


def test_a_redirect_chain_past_the_cap_is_dropped_and_counted():
    h = Harness()
    discover(h, entry("/hop6", source="redirect", hops=6), entry("/hop5", source="redirect", hops=5))
    assert h.counts["dropped_redirect_chain"] == 1 and h.counts["admitted"] == 1


def test_fast_growth_is_counted_once_per_host_window():
    h = Harness(policy=FrontierPolicy(max_queue=50, fast_growth_urls=3, fast_growth_window_s=3600))
    discover(h, *(entry(f"/n{i}") for i in range(10)))
    assert h.counts["hosts_fast_growing"] == 1
    h.now += 3600
    discover(h, *(entry(f"/m{i}") for i in range(4)))
    assert h.counts["hosts_fast_growing"] == 2


def test_a_v1_host_row_in_state_keeps_working():
    h = Harness()
    (robots,) = discover(h, entry("/a"))
    data = json.loads(h.host_row.value())
    del data["traps"], data["growth"]
    h.host_row.update(json.dumps(dict(data, v=1)))
    h.restart()   # the v1 row as a restore of an older run's state brings it back
    h.robots(robots, 404)
    (page,) = h.advance(1)
    assert page["url"].endswith("/a") and h.state.trap_summary == HostTrapSummary()
