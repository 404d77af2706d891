"""operators.host_frontier.HostFrontier (the state glue of the keyed frontier) driven with dict-backed state.

A simulated host replays random event sequences through the same glue the Flink operator runs and
checks §2 invariants 1-3 and 6 after every step: one request in flight, robots.txt first, disallowed
URLs never requested, nothing before the politeness gap, a finished URL never re-requested in its
cycle, one timer per host, bounded queues.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from operators.host_frontier import HostFrontier
from tests.frontier_harness import HOST, T0, Harness, Map, PrefixRules, Value, discovered
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.rows import Lease, UrlRecord, UrlStatus, signed_fp
from udfs.frontier.release import timer_ms
from udfs.politeness import PolitenessPolicy
from udfs.robots import RobotsPolicy, parse_robots
from udfs.urls import url_fp


def test_robots_first_then_one_page_at_a_time_with_the_delay():
    h = Harness()
    (robots,) = h.discover("/a", "/b", "/private/x")
    assert robots["kind"] == "robots" and robots["url"] == f"http://{HOST}/robots.txt"
    assert robots["fp"] == url_fp(robots["url"])
    assert h.discover("/c") == []  # nothing else while robots.txt is unknown
    assert h.robots(robots) == []  # the robots fetch itself is paced like any other
    (page,) = h.advance(1)
    assert page["kind"] == "page" and page["url"].endswith("/a")
    assert h.advance(29) == []  # one lease in flight: nothing more until it ends or expires


def test_gathered_discoveries_queue_what_one_by_one_would_and_lease_once():
    batches = [("/a", "/b"), ("/b", "/c"), ("/private/x", "/d")]
    one_by_one, gathered = Harness(), Harness()
    sent = [request for paths in batches for request in one_by_one.discover(*paths)]
    together = gathered.gathered(*(discovered(*paths) for paths in batches))
    assert [r["kind"] for r in together] == [r["kind"] for r in sent] == ["robots"]
    assert gathered.slots == one_by_one.slots and gathered.urls == one_by_one.urls
    assert gathered.counts == one_by_one.counts and gathered.counts["admitted"] == 5
    for h in (one_by_one, gathered):
        (robots,) = h.sent[-1:]
        h.robots(robots[1], body=b"")
    pages = [[r["url"] for r in h.advance(1)] for h in (one_by_one, gathered)]
    assert pages[0] == pages[1] == [f"http://{HOST}/a"]


def test_newest_first_leases_the_url_found_last_first():
    h = Harness(policy=FrontierPolicy(max_queue=8, lease_timeout_s=30, discovery_order="newest_first"))
    (robots,) = h.discover("/a", "/b")
    h.robots(robots)
    h.discover("/c")
    leased = []
    for _ in range(3):
        (page,) = h.advance(1)
        leased.append(page["url"].rsplit("/", 1)[1])
        h.complete(page)
    assert leased == ["c", "b", "a"]


def test_release_waits_for_the_gap_after_robots_and_after_each_completion():
    h = Harness(politeness=PolitenessPolicy(default_delay_s=2.0))
    (robots,) = h.discover("/a", "/b")
    assert h.robots(robots) == []          # the robots fetch itself starts the politeness clock
    assert h.state.next_allowed_at == T0 + 2.0
    assert len(h.timers) == 1
    (page,) = h.advance(2.0)
    assert page["url"].endswith("/a")
    assert h.complete(page) == []
    assert h.advance(1.999) == []
    (page2,) = h.advance(0.001)
    assert page2["url"].endswith("/b")
    assert h.counts["released"] == 2 and h.counts["robots_fetched"] == 1


def test_a_url_whose_robots_match_runs_out_of_budget_is_refused_and_counted_apart():
    """The real parser with a tight matching budget: a URL whose wildcard rules it cannot judge within
    the budget is never requested and is counted `dropped_robots_over_budget`, not as disallowed, at
    release and at admission; a URL a prefix rule decides is fetched as usual."""
    tight = RobotsPolicy(match_budget=100)
    h = Harness(politeness=PolitenessPolicy(default_delay_s=0.5, min_delay_s=0.0),
                parse=lambda body: parse_robots(body, tight))
    (robots,) = h.discover("/docs/early.html", "/plain-and-simple")
    h.robots(robots, body=b"User-agent: *\nDisallow: /\nAllow: /*.html$\nAllow: /plain-and-simple\n"
                           b"Disallow: /plain-and-simple/private\n")
    (page,) = h.advance(1)
    assert page["url"].endswith("/plain-and-simple")
    assert h.counts["dropped_robots_over_budget"] == 1 and h.counts["dropped_robots_disallowed"] == 0
    h.discover("/docs/late.html", "/plain-and-simple/private/x")
    assert h.counts["dropped_robots_over_budget"] == 2 and h.counts["dropped_robots_disallowed"] == 1


def test_disallowed_urls_are_dropped_at_admission_and_release():
    h = Harness(politeness=PolitenessPolicy(default_delay_s=0.5, min_delay_s=0.0))
    (robots,) = h.discover("/private/early", "/ok")  # admitted: robots unknown yet
    h.robots(robots)
    (page,) = h.advance(1)
    assert page["url"].endswith("/ok")  # /private/early dropped at release
    assert h.counts["dropped_robots_disallowed"] == 1
    h.discover("/private/late")
    assert h.counts["dropped_robots_disallowed"] == 2
    assert UrlRecord.from_row(h.urls[signed_fp(url_fp(f"http://{HOST}/private/early"))]).status \
        is UrlStatus.DISALLOWED


def test_duplicates_and_queue_overflow_are_counted():
    h = Harness(policy=FrontierPolicy(max_queue=3))
    h.discover("/a", "/a", "/b", "/c", "/d")
    assert h.counts["admitted"] == 3 and h.counts["dropped_seen"] == 1 and h.counts["dropped_queue_full"] == 1
    assert len(h.slots) == 3 and len(h.urls) == 3


def test_wrong_host_and_malformed_entries_and_events_are_counted():
    h = Harness()
    h.event({"type": "discovered", "host": HOST, "urls": [{"url": "http://elsewhere.org/", "fp": 1}, {"fp": 2}]})
    h.event({"type": "nonsense"})
    assert h.counts["dropped_wrong_host"] == 1 and h.counts["dropped_malformed"] == 1
    assert h.counts["events_malformed"] == 1


def test_lease_expiry_requeues_and_a_late_completion_is_stale():
    h = Harness()
    (robots,) = h.discover("/a")
    h.robots(robots, 404)  # allow all
    (page,) = h.advance(1)
    again = h.advance(30 + h.politeness.backoff_initial_s)
    assert h.counts["leases_expired"] == 1 and h.counts["requeued"] == 1
    assert [r["url"] for r in again] == [page["url"]] and again[0]["attempt"] == 2
    h.complete(page)
    assert h.counts["completions_stale"] == 1


def test_robots_5xx_blocks_the_host_until_a_retry_succeeds():
    h = Harness()
    (robots,) = h.discover("/a")
    assert h.robots(robots, 503) == []
    assert h.counts["robots_failed"] == 1
    assert h.advance(599) == []  # RobotsPolicy.unreachable_ttl_s
    (retry,) = h.advance(1)
    assert retry["kind"] == "robots"
    h.robots(retry, 200, b"")
    (page,) = h.advance(5)
    assert page["kind"] == "page"


def test_rules_are_parsed_once_then_cached_and_reparsed_after_a_refresh():
    h = Harness(politeness=PolitenessPolicy(default_delay_s=0.5, min_delay_s=0.0))
    (robots,) = h.discover(*[f"/p{i}" for i in range(5)])
    h.robots(robots)
    for _ in range(5):
        (page,) = h.advance(1)
        h.complete(page)
    assert h.parses == 1
    h.restart()   # a new process (failover): the cache is empty and is rebuilt from the stored body
    h.discover("/private/z")
    assert h.parses == 2 and h.counts["dropped_robots_disallowed"] == 1


class CountingValue:
    """A ValueState that counts the frontier's reads."""

    def __init__(self, stored: Value) -> None:
        self.stored, self.reads = stored, 0

    def value(self):
        self.reads += 1
        return self.stored.value()

    def update(self, v) -> None:
        self.stored.update(v)


def test_a_host_row_is_read_from_state_once_per_run_of_the_frontier():
    h = Harness(politeness=PolitenessPolicy(default_delay_s=0.5, min_delay_s=0.0))
    h.frontier.host_row = stored = CountingValue(h.host_row)
    (robots,) = h.discover("/a", "/b")
    h.robots(robots)
    for _ in range(2):
        (page,) = h.advance(1)
        h.complete(page)
    assert stored.reads == 1   # the first event: a host this frontier has not written yet
    h.restart()                # a restore: the new frontier reads the row it finds, then keeps its own
    h.frontier.host_row = stored = CountingValue(h.host_row)
    h.discover("/c")
    (page,) = h.advance(1)
    assert page["url"].endswith("/c") and stored.reads == 1


def test_robots_expire_after_the_ttl_and_are_fetched_again():
    h = Harness(robots_policy=RobotsPolicy(cache_ttl_s=100))
    (robots,) = h.discover("/a")
    h.robots(robots)
    (page,) = h.advance(1)
    h.complete(page)
    h.advance(200)
    (again,) = h.discover("/b")
    assert again["kind"] == "robots"


def test_timer_is_replaced_not_added():
    h = Harness(politeness=PolitenessPolicy(default_delay_s=10))
    (robots,) = h.discover("/a")
    h.robots(robots)
    assert len(h.timers) == 1
    h.discover("/b", "/c")
    assert len(h.timers) == 1


# --- the simulation -----------------------------------------------------------------------------


class Fetcher:
    """The simulated fetcher side: holds at most the one request the frontier leased, checks each release."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.open: dict | None = None
        self.robots_ok = False
        self.allow_all = False        # robots.txt answered 3xx/4xx: /private is allowed too
        self.last_end: float | None = None
        self.done: set[int] = set()
        h.frontier = _Observed(h.frontier, self)

    def before_call(self) -> Lease | None:
        return self.h.state.lease

    def after_call(self, lease_before: Lease | None, requests: list[dict]) -> None:
        h = self.h
        expired = self.open is not None and lease_before is not None \
            and lease_before.lease_id == self.open["lease_id"] \
            and (h.state.lease is None or h.state.lease.lease_id != lease_before.lease_id)
        if expired:  # the fetcher's answer will now be stale
            if self.open["kind"] == "robots":
                self.robots_ok = self.allow_all = False
            self.open, self.last_end = None, h.now
        assert len(requests) <= 1, "one lease per host"
        for req in requests:
            assert self.open is None, "a second request while one is in flight"
            if req["kind"] == "page":
                assert self.robots_ok, "a page before robots.txt was known"
                assert self.allow_all or "/private" not in req["url"], "a disallowed URL was requested"
                assert req["fp"] not in self.done, "a finished URL was fetched again in its cycle"
            if self.last_end is not None:
                assert h.now - self.last_end >= h.politeness.min_delay_s - 1e-6, "released inside the gap"
            self.open = req

    def answer(self, status: int | None, retry_after: float | None) -> None:
        req, self.open = self.open, None
        self.last_end = self.h.now
        if req["kind"] == "robots":
            failed = status is None or status in (429, 500, 503)
            # a failed refresh blocks the host again until a retry succeeds
            self.robots_ok, self.allow_all = (False, False) if failed else (True, status >= 300)
            self.h.robots(req, status, fetch_status="ok" if status is not None else "timeout")
        elif status in (301, 302):  # a redirect ends the source's cycle; its target arrives like the writer sends it
            self.done.add(req["fp"])
            target = f"http://{HOST}" + ("/a" if req["url"].endswith("/b") else "/b")
            self.h.complete(req, status, redirect=target)
            self.h.event({"v": 1, "type": "discovered", "host": HOST, "urls": [
                {"url": target, "fp": url_fp(target), "depth": req["depth"] + 1, "priority": 0,
                 "source": "redirect", "redirect_hops": req.get("redirect_hops", 0) + 1}]})
        else:
            if status in (200, 304, 404):
                self.done.add(req["fp"])
            self.h.complete(req, status, "ok" if status is not None else "timeout", retry_after)


class _Observed:
    """Wraps HostFrontier so every call, including timer calls inside advance(), is checked."""

    def __init__(self, inner: HostFrontier, fetcher: Fetcher) -> None:
        self.inner, self.fetcher = inner, fetcher

    def on_event(self, host, event, now):
        before = self.fetcher.before_call()
        effects = self.inner.on_event(host, event, now)
        self.fetcher.after_call(before, effects.requests)
        return effects

    def on_timer(self, host, timer_ms, now):
        before = self.fetcher.before_call()
        effects = self.inner.on_timer(host, timer_ms, now)
        self.fetcher.after_call(before, effects.requests)
        return effects


actions = st.lists(st.one_of(
    st.tuples(st.just("discover"), st.lists(st.sampled_from(["/a", "/b", "/c", "/private/p", "/d"]),
                                            min_size=1, max_size=3), st.integers(0, 9)),
    st.tuples(st.just("answer"), st.sampled_from([200, 301, 302, 304, 404, 429, 500, 503, None]),
              st.sampled_from([None, 5.0])),
    st.tuples(st.just("answer"), st.just(200), st.none()),
    st.tuples(st.just("advance"), st.floats(0.0, 40.0), st.none()),
    st.tuples(st.just("advance"), st.floats(0.0, 3.0), st.none()),
    st.tuples(st.just("stale"), st.none(), st.none()),
), max_size=30)


@settings(max_examples=120, deadline=None)
@given(actions=actions)
def test_invariants_hold_for_random_event_sequences(actions):
    h = Harness(policy=FrontierPolicy(max_queue=4, lease_timeout_s=30, max_attempts=2, robots_retry_max_s=40),
                robots_policy=RobotsPolicy(unreachable_ttl_s=10))
    fetcher = Fetcher(h)
    for kind, a, b in actions:
        if kind == "discover":
            h.discover(*a, priority=b)
        elif kind == "answer" and fetcher.open is not None:
            fetcher.answer(a, b)
        elif kind == "advance":
            h.advance(a)
        elif kind == "stale":
            h.complete({"lease_id": "nope", "url": "http://x/", "fp": 1})


def test_with_the_real_robots_parser_rules_and_crawl_delay_apply():
    from udfs.robots import parse_robots
    h = Harness()
    h.frontier = HostFrontier(h.host_row, h.body, h.slots, h.urls, h._count, parse_robots, h.config)
    (robots,) = h.discover("/private/a", "/b")
    h.robots(robots, 200, b"User-agent: *\nDisallow: /private\nCrawl-delay: 4\n")
    assert h.state.crawl_delay == 4.0
    assert h.advance(3.9) == []
    (page,) = h.advance(0.1)
    assert page["url"].endswith("/b") and h.counts["dropped_robots_disallowed"] == 1


def test_work_per_call_is_bounded_and_resumes_on_a_timer_at_once():
    h = Harness(policy=FrontierPolicy(max_pops_per_call=2, max_queue=10))
    (robots,) = h.discover("/private/1", "/private/2", "/private/3", "/ok")
    h.robots(robots)
    (ts,) = h.timers
    h.timers.clear()
    h.now = ts / 1000
    # one timer call: two disallowed URLs dropped, then it yields with a timer at `now`
    assert h._apply(h.frontier.on_timer(HOST, ts, h.now)) == []
    assert h.counts["dropped_robots_disallowed"] == 2 and h.timers == {timer_ms(h.now)}
    (page,) = h.advance(0)
    assert page["url"].endswith("/ok")


def test_the_group_for_the_fetchers_own_user_agent_applies():
    from udfs.robots import parse_robots
    h = Harness()
    h.frontier = HostFrontier(h.host_row, h.body, h.slots, h.urls, h._count, parse_robots, h.config)
    (robots,) = h.discover("/a")
    h.robots(robots, 200, b"User-agent: *\nAllow: /\n\nUser-agent: FlinkCrawler\nDisallow: /a\n")
    assert h.advance(5) == [] and h.counts["dropped_robots_disallowed"] == 1


def test_a_page_completion_times_the_wait_before_its_fetch_and_the_way_back():
    h = Harness(politeness=PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.0))
    (robots,) = h.discover("/a")
    h.robots(robots)
    (page,) = h.advance(1.0)
    h.advance(3.0)      # released, then 3 s before the completion is read; the fetch ended 0 s before
    h.complete(page)    # started_at = now - 0.05
    trips = h.frontier.trips
    assert trips.gauge("release_to_fetch_p50_ms") == 2950 and trips.gauge("fetch_to_completion_p50_ms") == 0
    h.complete(page)    # a repeated completion matches no lease: not timed again
    assert len(trips.before_fetch) == 1
