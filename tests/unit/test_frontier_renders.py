"""Render leases in the frontier (decision 3905): `render` events admitted or ignored by why, a waiting
render leased as the host's next page with what the fetch side needs (its reason, the host's robots.txt
body and its gap), its end leaving the URL's row alone, the host row keeping it across a restore, and
rows from before renders still loading."""
from __future__ import annotations

import json

import pytest

from tests.frontier_harness import HOST, Harness
from udfs.budgets import BudgetPolicy
from udfs.control_state import ControlTable
from udfs.frontier.policy import FrontierPolicy
from udfs.frontier.renders import (MAX_QUEUED_RENDERS, RenderVerdict, admit_render, coerce_render, lease_render,
                                   requeue_render, take_render, with_render_mode)
from udfs.frontier.rows import HostState, Lease, QueueItem, QueuedRender, Robots, signed_fp
from udfs.politeness import PolitenessPolicy
from udfs.records import b64
from udfs.render_policy import RenderPolicy
from udfs.urls import host_key, url_fp

ON = RenderPolicy(enabled=True)
POLITE = PolitenessPolicy(default_delay_s=1.0, min_delay_s=0.1)


def url(path: str) -> str:
    return f"http://{HOST}{path}"


def fetched(render: RenderPolicy | None = ON, controls: ControlTable | None = None,
            robots: bytes = b"/private", **kwargs) -> Harness:
    """A host whose robots.txt is known, whose page /a was fetched and whose /b and /c wait."""
    h = Harness(politeness=POLITE, render=render, controls=controls, **kwargs)
    (lease,) = h.discover("/a", "/b", "/c")
    h.robots(lease, body=robots)
    (page,) = h.advance(1.0)
    assert page["url"] == url("/a") and "render" not in page
    h.complete(page)
    return h


def item(path: str = "/a", reason: str = "app_root", attempt: int = 0) -> QueuedRender:
    return QueuedRender(url(path), url_fp(url(path)), 1, reason, attempt)


# --- admission ------------------------------------------------------------------------------------

def test_a_render_of_a_fetched_page_is_queued_ahead_of_the_hosts_pages_without_a_seen_check():
    h = fetched()
    assert h.urls[signed_fp(url_fp(url("/a")))].startswith('["done"')   # /a is in its crawl cycle
    h.render("/a", "near_empty")
    assert h.counts["render_admitted"] == 1 and h.counts["render_admitted_near_empty"] == 1
    assert h.counts["dropped_seen"] == 0
    (lease,) = h.advance(1.0)
    assert (lease["url"], lease["kind"], lease["render"]) == (url("/a"), "page", "near_empty")
    assert h.state.lease.render == "near_empty" and h.counts["render_leased"] == 1
    h.complete(lease)
    (page,) = h.advance(1.0)
    assert page["url"] == url("/b") and "render" not in page    # the queues come after it


def test_render_events_are_ignored_and_counted_when_the_frontier_does_not_render():
    for policy in (None, RenderPolicy(enabled=False)):
        h = fetched(render=policy)
        h.render("/a")
        assert h.counts["render_ignored_off"] == 1 and h.state.renders == ()
        (page,) = h.advance(1.0)
        assert page["url"] == url("/b")


def test_a_second_render_of_a_url_waiting_or_leased_is_a_duplicate():
    h = fetched()
    h.render("/a")
    h.render("/a", "noscript")
    assert h.counts["render_ignored_duplicate"] == 1 and len(h.state.renders) == 1
    (lease,) = h.advance(1.0)
    h.render("/a")                                # while its render is leased
    assert h.counts["render_ignored_duplicate"] == 2 and h.state.renders == ()
    h.complete(lease)
    h.render("/a")                                # done: a new render of it is welcome
    assert h.counts["render_admitted"] == 2


def test_malformed_foreign_and_taken_down_render_events_are_ignored_by_why():
    table = ControlTable()
    h = fetched(controls=table)
    h.event({"v": 1, "type": "render", "host": HOST, "url": url("/a"), "fp": url_fp(url("/a")), "depth": 1,
             "reason": "because"})
    h.event({"v": 1, "type": "render", "host": HOST, "url": url("/a"), "fp": -1, "depth": 1, "reason": "app_root"})
    h.event({"v": 1, "type": "render", "host": HOST, "url": "http://other.example/a", "fp": 1, "depth": 1,
             "reason": "app_root"})
    table.apply({"type": "takedown", "scope": "url", "value": url("/a")})
    h.render("/a")
    assert (h.counts["render_ignored_malformed"], h.counts["render_ignored_wrong_host"],
            h.counts["render_ignored_taken_down"]) == (2, 1, 1)
    assert h.state.renders == ()


def test_a_host_in_mode_never_ignores_render_events_and_drops_those_waiting():
    table = ControlTable()
    h = fetched(controls=table)
    h.render("/a")
    table.apply({"type": "host", "host": HOST, "rate_limit_rps": None, "blocked": None, "render": "never"})
    (page,) = h.advance(1.0)                      # the waiting render is dropped at its lease
    assert page["url"] == url("/b") and h.counts["render_dropped_never"] == 1
    assert page["render_mode"] == "never" and h.state.render_mode == "never"
    h.render("/c")
    assert h.counts["render_ignored_never"] == 1


def test_ordinary_page_leases_carry_the_render_mode_only_when_it_is_not_auto():
    table = ControlTable()
    h = fetched(controls=table)
    (page,) = h.advance(1.0)
    assert "render_mode" not in page
    table.apply({"type": "host", "host": HOST, "rate_limit_rps": None, "blocked": None, "render": "always"})
    h.complete(page)
    (page,) = h.advance(1.0)
    assert page["render_mode"] == "always"
    table.apply({"type": "host", "host": HOST, "rate_limit_rps": None, "blocked": None, "render": "auto"})
    h.complete(page)
    h.discover("/d")
    (page,) = h.advance(1.0)
    assert "render_mode" not in page and h.state.render_mode == "auto"


def test_a_render_on_a_new_host_waits_for_robots_txt_first():
    h = Harness(politeness=POLITE, render=ON)
    (robots,) = h.render("/a")
    assert robots["kind"] == "robots"
    h.robots(robots, http_status=404, body=b"")
    (lease,) = h.advance(1.0)
    assert lease["render"] == "app_root" and "robots_b64" not in lease   # allow-all: no rules to send


def test_a_render_robots_txt_now_disallows_is_dropped_at_its_lease():
    h = fetched()
    h.render("/private/x")
    (page,) = h.advance(1.0)
    assert page["url"] == url("/b") and h.counts["render_dropped_robots"] == 1


def test_a_hosts_waiting_renders_are_bounded():
    h = fetched()
    for n in range(MAX_QUEUED_RENDERS + 1):
        h.render(f"/p{n}")
    assert len(h.state.renders) == MAX_QUEUED_RENDERS and h.counts["render_ignored_queue_full"] == 1


# --- the lease and its end ------------------------------------------------------------------------

def test_the_render_lease_carries_the_robots_body_and_the_hosts_gap():
    table = ControlTable()
    h = fetched(controls=table)
    h.render("/a")
    (lease,) = h.advance(1.0)
    assert lease["robots_b64"] == b64(b"/private") and lease["delay_s"] == 1.0
    assert lease["etag"] is None and "revisit_of" not in lease and "render_mode" not in lease
    h.complete(lease)
    table.apply({"type": "host", "host": HOST, "rate_limit_rps": 0.25, "blocked": None})
    h.render("/b")
    (lease,) = h.advance(5.0)
    assert lease["delay_s"] == 4.0                # an operator rate limit sets the gap


def test_a_render_completion_paces_the_host_but_leaves_the_urls_row_and_quality_alone():
    h = fetched()
    key = signed_fp(url_fp(url("/a")))
    row, quality = h.urls[key], h.state.quality
    h.render("/a")
    (lease,) = h.advance(1.0)
    h.complete(lease)
    state = h.state
    assert h.urls[key] == row and state.quality == quality and state.lease is None
    assert state.next_allowed_at == pytest.approx(h.now + 1.0)
    assert h.counts["render_done"] == 1 and h.counts["requeued"] == 0


def test_a_failed_or_expired_render_waits_again_first_until_max_attempts():
    h = fetched()
    h.render("/a")
    (lease,) = h.advance(1.0)
    h.complete(lease, http_status=503)
    assert h.state.renders[0].attempt == 1 and h.counts["render_retried"] == 1
    wait = h.state.next_allowed_at - h.now
    assert wait > 1.0                             # the 503 raised the host's backoff
    (lease,) = h.advance(wait)
    assert lease["render"] == "app_root" and lease["attempt"] == 2
    assert h.advance(h.policy.lease_timeout_s + 0.5) == []   # it expires
    (third,) = h.advance(h.state.next_allowed_at - h.now)   # and goes out a third time, after the backoff
    assert h.counts["leases_expired"] == 1 and h.counts["render_retried"] == 2 and third["attempt"] == 3
    h.complete(third, fetch_status="timeout", http_status=None)
    assert h.counts["render_gave_up"] == 1 and h.state.renders == () and h.counts["parked"] == 0


def test_a_waiting_render_survives_a_restore():
    h = fetched()
    h.render("/a", "host_always")
    h.restart()
    (lease,) = h.advance(1.0)
    assert lease["render"] == "host_always"
    h.restart()                                   # the leased render, restored, ends like a page lease
    h.complete(lease)
    assert h.state.lease is None and h.counts["render_done"] == 1


def test_a_render_lease_spends_a_page_token_like_a_page():
    h = fetched(budgets=BudgetPolicy())
    h.render("/a")
    before = h.state.budget.page_tokens
    (lease,) = h.advance(1.0)
    assert h.state.budget.page_tokens == pytest.approx(before - 1.0, abs=0.05)


# --- the pure functions and rows ------------------------------------------------------------------

def test_coerce_render_checks_every_field():
    good = {"url": url("/a"), "fp": url_fp(url("/a")), "depth": 2, "reason": "noscript"}
    assert coerce_render(good, HOST, host_key) == QueuedRender(url("/a"), url_fp(url("/a")), 2, "noscript")
    for bad in ({"url": 5}, {"url": ""}, {"fp": 1 << 64}, {"fp": True}, {"depth": -1}, {"reason": "share_cap"}):
        assert coerce_render(good | bad, HOST, host_key) is RenderVerdict.MALFORMED
    assert coerce_render("x", HOST, host_key) is RenderVerdict.MALFORMED


def test_admit_render_appends_behind_the_waiting_renders():
    state, verdict = admit_render(HostState(), item("/a"), True)
    state, verdict = admit_render(state, item("/b"), True)
    assert verdict is RenderVerdict.ADMITTED and [r.url for r in state.renders] == [url("/a"), url("/b")]
    state, first = take_render(state)
    assert first == item("/a") and take_render(HostState()) == (HostState(), None)
    assert with_render_mode(state, "auto") is state


def test_lease_render_marks_the_lease_and_requeue_counts_attempts():
    state = HostState(robots=Robots.ALLOW_ALL, robots_expires_at=1e12)
    state, request, verdict = lease_render(state, item("/a", "noscript"), None, HOST, 100.0, True, 2.5, "ignored")
    assert verdict is RenderVerdict.LEASED and state.lease.render == "noscript" and state.lease.kind == "page"
    assert (request["render"], request["delay_s"]) == ("noscript", 2.5) and "robots_b64" not in request
    policy = FrontierPolicy(max_attempts=2)
    again, verdict = requeue_render(state, state.lease, True, policy)
    assert verdict is RenderVerdict.RETRIED and again.renders == (item("/a", "noscript", 1),)
    lease = again.renders[0]
    last = Lease("x/1", "page", 0.0, QueueItem(lease.url, lease.fp, 1, 0, 1), render="noscript")
    assert requeue_render(HostState(), last, True, policy) == (HostState(), RenderVerdict.GAVE_UP)
    assert requeue_render(HostState(), last, False, policy)[1] is RenderVerdict.RETRIED   # uncharged


def test_renders_the_mode_and_a_render_lease_survive_the_host_rows_round_trip():
    lease = Lease("h/r1", "page", 99.0, QueueItem(url("/a"), url_fp(url("/a")), 1), render="app_root")
    state = HostState(render_mode="always", renders=(item("/b"), item("/c", "noscript", 2)), lease=lease)
    assert HostState.from_row(state.to_row()) == state
    extended = HostState(lease=Lease("h/r1", "page", 120.0, lease.item, 99.0, "app_root"))
    assert HostState.from_row(extended.to_row()) == extended


def test_host_rows_from_before_renders_load_as_auto_with_none_waiting():
    row = HostState(lease=Lease("h/1", "page", 9.0, QueueItem(url("/a"), 1), 5.0)).to_row()
    assert '"render' not in row                   # hosts that never render keep the rows they had
    state = HostState.from_row(row)
    assert (state.render_mode, state.renders, state.lease.render) == ("auto", (), None)
    data = json.loads(row)
    data["lease"] = data["lease"][:4]             # a lease row from before extensions
    assert HostState.from_row(json.dumps(data)).lease == Lease("h/1", "page", 9.0, QueueItem(url("/a"), 1))
    odd = row[:-1] + ',"render_mode":"sometimes","renders":[["x",1,0,"app_root",0],[1,2]]}'
    assert HostState.from_row(odd).render_mode == "auto" and HostState.from_row(odd).renders == (
        QueuedRender("x", 1, 0, "app_root"),)

